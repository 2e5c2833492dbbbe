"""Oracle tests run in float64; float32 tests ask for float32 explicitly.

One BLAS thread: on a loaded 2-core machine a multithreaded OpenBLAS (used by NumPy, SciPy and
jax's CPU LAPACK kernels) oversubscribes the cores and runs small factorisations many times slower.
"""
import gc
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """Drop JAX's caches of compiled code after each test module.

    XLA on CPU maps every compiled kernel into memory (about 300 mappings for one compiled
    implicit R-VGA run), and JAX keeps compiled executables for the life of the process: the
    whole suite in one process went past Linux's default ``vm.max_map_count`` (65530) and
    crashed inside a compile (SIGSEGV / SIGABRT in ``backend_compile_and_load``).
    """
    yield
    jax.clear_caches()
    gc.collect()
