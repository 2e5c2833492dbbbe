"""Machine details and peak memory for benchmark tables."""
from __future__ import annotations

import os
import platform
import resource

import jax


def describe() -> str:
    """One line naming the machine, the Python/JAX versions and the JAX devices."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return (f"# machine: {cpu}, {os.cpu_count()} cores; Python {platform.python_version()}, "
            f"jax {jax.__version__}, devices {[str(d) for d in jax.devices()]}")


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux ru_maxrss is in kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
