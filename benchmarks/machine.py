"""Machine details, memory probes (Linux ``/proc``) and a wall-clock timer for the benchmark and experiment tables."""
from __future__ import annotations

import os
import platform
import resource
import time

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


def status_bytes(field: str) -> int:
    """A size field of ``/proc/self/status`` in bytes: ``VmRSS`` (resident now) or ``VmHWM`` (peak
    resident set since the process started or the last :func:`reset_peak`). Linux only."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"field: no {field!r} in /proc/self/status")


def reset_peak(trim: bool = True) -> bool:
    """Reset the peak resident set (``VmHWM``) to the current one (Linux >= 4.0); False if unsupported.

    ``trim`` first returns freed heap to the OS (glibc ``malloc_trim``), so that the new baseline
    is what the process still uses."""
    if trim:
        try:
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux ru_maxrss is in kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def timed(fn, *args):
    """``(result, seconds)`` of one call ``fn(*args)``, waiting for the device to finish."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0


def best_time(fn, *args, repeat: int = 3) -> float:
    """Seconds of the fastest of ``repeat`` :func:`timed` calls ``fn(*args)``, after one warm-up call
    (which compiles a jitted ``fn``)."""
    jax.block_until_ready(fn(*args))
    return min(timed(fn, *args)[1] for _ in range(repeat))
