"""The exact step: the Kalman filter of a linear-Gaussian model ([RVGA] Thm 2, eqs. 40-42)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..core import solver_info
from .base import Increment, Limited, Scheme, absorb_limited, check_max_move


def exact_site(model, q, X, y):
    """Linear-Gaussian site: ``X^T X / sigma^2`` and ``X^T (y - X mu) / sigma^2`` ([RVGA] eqs. 40-42).

    Args:
      model: the linear-Gaussian model (its ``noise_var``).
      q: the belief's state.
      X: the inputs, (m, d).
      y: the outputs, (m,).

    Returns:
      An :class:`Increment` (``X`` (d, m)) with ``c`` and ``coef``.
    """
    nv = jnp.asarray(model.noise_var, X.dtype)
    return Increment(X.T, jnp.full(X.shape[:1], 1.0, X.dtype) / nv, (y - X @ q.mean) / nv)


def _step_exact(cfg, model, belief, prior, X, y):
    return absorb_limited(cfg, belief, prior, exact_site(model, prior, X, y), solver_info(prior.mean.dtype),
                          model.power)


def exact(*, max_move=np.inf) -> Scheme:
    """The Kalman step of a linear-Gaussian model ([RVGA] Thm 2, eqs. 40-42); exact, so no ``max_move``
    by default.

    Args:
      max_move: the guard's Mahalanobis limit of the mean step, > 0 (``inf``: none; :func:`limit_move`).

    Returns:
      A :class:`~jaxrvga.schemes.Scheme`.

    Example:
      >>> flt = jr.build(jr.beliefs.Dense(), jr.schemes.exact(), jr.models.linear_gaussian(0.5))
      >>> flt.spec.scheme.name
      'exact'
    """
    return Scheme("exact", _step_exact, Limited(check_max_move(max_move)), "has_exact_update", certified=True,
                  tempers=True)


__all__ = ["exact", "exact_site"]
