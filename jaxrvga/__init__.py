"""jaxrvga: recursive variational Gaussian inference in JAX.

R-VGA (Lambert, Bonnabel & Bach 2021) updates a Gaussian belief one observation at a
time, each update being the KL-optimal Gaussian given the previous belief and the new
observation. L-RVGA (Lambert, Bonnabel & Bach 2023) keeps the precision as
``W W^T + diag(psi)`` and maintains it by a recursive EM for factor analysis, in time
and memory linear in the dimension.
"""
from . import (blocks, data, dual, factor_analysis, implicit, io, klprox, lowrank, metrics, models,
               online_em, sharding, special, validation)
from .baselines import LaplaceResult, ekf, laplace, qkf
from .core import (Filter, GaussianState, LowRankState, SolverInfo, Step, run, scan, step_fn, trace_info,
                   trace_mean)
from .mirror_prox import mirror_prox
from .lrvga import lrvga
from .rvga import kalman, predictive, rvga

__version__ = "0.1.0"

__all__ = ["Filter", "GaussianState", "LowRankState", "SolverInfo", "Step", "run", "scan", "step_fn", "trace_info", "trace_mean",
           "rvga", "lrvga", "kalman", "predictive", "ekf", "qkf", "laplace", "LaplaceResult", "mirror_prox",
           "blocks", "data", "dual", "factor_analysis", "implicit", "io", "klprox", "lowrank", "metrics", "models",
           "online_em", "sharding", "special", "validation"]
