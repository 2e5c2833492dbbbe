"""The papers' figures and tables (``python -m experiments.run_all [--quick]``).

One OpenBLAS thread unless the caller chose otherwise: on a loaded machine a multithreaded OpenBLAS
(behind NumPy, SciPy and jax's CPU LAPACK kernels) oversubscribes the cores and runs the small
factorisations of these scripts many times slower. This package is imported before any of its
scripts, so the default is in place before NumPy loads on ``python -m experiments.<name>``.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
