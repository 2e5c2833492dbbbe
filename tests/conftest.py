"""Oracle tests run in float64; float32 tests ask for float32 explicitly.

One BLAS thread: on a loaded 2-core machine a multithreaded OpenBLAS (used by NumPy, SciPy and
jax's CPU LAPACK kernels) oversubscribes the cores and runs small factorisations many times slower.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
