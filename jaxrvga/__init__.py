"""jaxrvga: recursive variational Gaussian inference in JAX.

R-VGA (Lambert, Bonnabel & Bach 2021) updates a Gaussian belief one observation at a
time, each update being the KL-optimal Gaussian given the previous belief and the new
observation. L-RVGA (Lambert, Bonnabel & Bach 2023) keeps the precision as
``W W^T + diag(psi)`` and maintains it by a recursive EM for factor analysis, in time
and memory linear in the dimension.
"""
from . import (average, batch, beliefs, blocks, data, dual, dynamics, evidence, factor_analysis, filters, implicit, io,
               klprox, lowrank, metrics, models, noise, online_em, schemes, sharding, special, validation)
from .average import model_average
from .batch import LaplaceResult, laplace
from .core import (DiagonalState, Filter, GaussianState, LowRankState, Prequential, SolverInfo, Step, prequential, run, scan,
                   step_fn, trace_info, trace_mean)
from .evidence import log_evidence, trace_log_predictive
from .filters import build, diag_rvga, ekf, kalman, lrvga, mirror_prox, qkf, rvga
from .predictive import Predictive, log_predictive, predictive
from .beliefs import sample
from .core import Traces, masked_update, traces
from .smoother import Smoothed, rts_smoother

__version__ = "0.1.0"

__all__ = ["build", "Filter", "GaussianState", "LowRankState", "DiagonalState", "diag_rvga", "SolverInfo", "Step", "run", "scan", "step_fn",
           "trace_info", "trace_mean", "rvga", "lrvga", "kalman", "ekf", "qkf", "mirror_prox", "predictive",
           "Predictive", "laplace", "LaplaceResult", "prequential", "Prequential", "log_predictive",
           "trace_log_predictive", "log_evidence", "model_average",
           "average", "batch", "beliefs", "blocks", "data", "dual", "dynamics", "evidence", "factor_analysis", "filters", "implicit", "io", "klprox",
           "lowrank", "metrics", "models", "noise", "online_em", "schemes", "sharding", "special", "validation"]
__all__ += ["sample", "Traces", "traces", "masked_update", "Smoothed", "rts_smoother", "smoother"]
