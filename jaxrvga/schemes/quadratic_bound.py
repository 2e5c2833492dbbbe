"""The step of the quadratic Kalman filter: the Jaakkola-Jordan bound of the logistic model ([RVGA] eqs. 82-90)."""
from __future__ import annotations

import jax.numpy as jnp

from ..core import solver_info
from ..kernels import special
from .base import MAX_MOVE, Increment, Limited, Scheme, absorb_limited, check_max_move


def qkf_site(belief, q, X, y):
    """Jaakkola-Jordan bound: curvature ``2 lambda(xi)``, ``xi^2 = x^T (P + mu mu^T) x`` ([RVGA] eqs. 82-90).

    Args:
      belief: a :class:`~jaxrvga.beliefs.Belief`.
      q: its state before the step.
      X: the inputs, (m, d).
      y: the labels in {0, 1}, (m,).

    Returns:
      An :class:`~jaxrvga.schemes.Increment` with ``c`` and ``coef``.
    """
    alpha, nu = belief.marginal(q, X)
    lam = 2.0 * special.jj_lambda(jnp.sqrt(nu + alpha**2))  # R^{-1} of eq. (90)
    return Increment(X.T, lam, (y - 0.5) - lam * alpha)


def _step_qkf(cfg, model, belief, prior, X, y):
    return absorb_limited(cfg, belief, prior, qkf_site(belief, prior, X, y), solver_info(prior.mean.dtype),
                          model.power)


def qkf(*, max_move=MAX_MOVE) -> Scheme:
    """The Jaakkola-Jordan quadratic bound of the logistic model ([RVGA] eqs. 82-90).

    Args:
      max_move: the guard's Mahalanobis limit of the mean step, > 0 (``inf``: none; :func:`limit_move`).

    Returns:
      A :class:`~jaxrvga.schemes.Scheme`.

    Example:
      >>> flt = jr.rvga(jr.models.logistic(), scheme=jr.schemes.qkf())
      >>> flt.spec.scheme.name
      'qkf'
    """
    return Scheme("qkf", _step_qkf, Limited(check_max_move(max_move)), "has_logistic_root", certified=True,
                  tempers=True)


__all__ = ["qkf", "qkf_site"]
