"""The long float32 streams of tests/integration/test_reliability.py under a second code path of XLA's CPU
backend (``--xla_cpu_max_isa=SSE4_2``: other vector widths, other rounding of the same
arithmetic), in a subprocess: the suite's float32 guarantees must not hold on one CPU only
(issue 36 failed on one machine and passed on the one it was written on). The subprocess compiles
with XLA's default pipeline, the one users get, not the suite's fast-compiling one (conftest.py)."""
import os
import pathlib
import platform
import subprocess
import sys

import pytest
from conftest import USER_XLA_FLAGS

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="an x86 instruction-set flag")
def test_lowrank_long_float32_streams_hold_under_sse4_2():
    """The sampled scheme (issue 36's failure) and the EKF over 1e5 float32 steps, every property asserted there."""
    env = dict(os.environ, XLA_FLAGS=(USER_XLA_FLAGS + " --xla_cpu_max_isa=SSE4_2").strip(), JAXRVGA_TEST_XLA_DEFAULT="1")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/integration/test_reliability.py",
                          "-k", "lrvga_1e5 and (sampled or ekf) and not moment_ekf"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "2 passed" in run.stdout
