"""Shared pieces of the head-to-head comparisons (``headtohead_logistic``, ``headtohead_gpc``)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import experiments.common  # noqa: F401  (switches JAX to float64 first, for float64_scalar)


def trivial_log_loss(y_train, y_test):
    """Log-loss of the constant predictor ``p = mean(y_train)``."""
    p = float(np.clip(np.mean(y_train), 1e-12, 1 - 1e-12))
    return float(-np.mean(y_test * np.log(p) + (1 - y_test) * np.log1p(-p)))


#: KL-prox step-control columns of the CSVs: the final step parameter ``r_k`` (``result.r``; the
#: requested 0.8 unless the step had to stay shrunk, then larger) and the number of rejected
#: proposals (nan for the other methods).
STEP_COLUMNS = ["r_final", "rejected"]


def step_report(rows) -> dict:
    """Summary of KL-prox's step control over the ``"KL-prox"`` rows of a CSV table whose last
    columns are :data:`STEP_COLUMNS`: total rejected proposals, fits with at least one rejection,
    largest final ``r`` (the shortest step any fit ended with; the control only shrinks
    ``1 - r_k`` below ``1 - r``)."""
    r_final, rejected = np.array([r[-2:] for r in rows if r[1] == "KL-prox"], dtype=float).T
    return {"rejected": int(np.sum(rejected)), "fits_with_rejections": int(np.sum(rejected > 0)),
            "r_final_max": float(np.max(r_final))}


def float64_scalar(v):
    """A strongly typed float64 scalar (matches the avals of an ahead-of-time compiled function)."""
    return jnp.asarray(float(v), dtype=jnp.float64)

