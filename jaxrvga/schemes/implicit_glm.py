"""The implicit (proximal) step of a GLM: expectations under the new belief, exact ([RVGA] eqs. 69-77).

The 2-D root of the logistic model or the convex 1-D solve of any log-concave GLM
(:mod:`jaxrvga.kernels.root_solvers`); the mean step then uses ``P_{t-1}`` ([RVGA] eq. 76).
"""
from __future__ import annotations

from typing import Optional

import jax.numpy as jnp
import numpy as np

from ..core import solver_info
from ..kernels import root_solvers, special
from ..validation import positive_int
from .base import Implicit, Increment, Scheme, absorb_limited, check_max_move


def implicit_site(model, belief, q, X, y, max_iter):
    """Exact implicit site of a GLM from the marginal ``(alpha, nu)`` of ``q_t`` along ``x`` (m = 1).

    Logistic: the 2-D root of [RVGA] eqs. (69)-(70), curvature ``k sig'(k alpha)`` and gradient
    ``y - sig(k alpha)`` (eqs. 76-77). Other GLMs: :func:`jaxrvga.kernels.root_solvers.solve_glm`, curvature
    ``1/nu - 1/nu0`` and gradient ``(alpha - alpha0) / nu0``. Both with the previous precision.

    Args:
      model: the GLM.
      belief: a :class:`~jaxrvga.beliefs.Belief`.
      q: its state before the step.
      X: the input, (1, d).
      y: the output, (1,).
      max_iter: the most iterations of the root solve (None: the solver's default).

    Returns:
      ``(increment, info)``: an :class:`~jaxrvga.schemes.Increment` with ``prior_gain`` and the solve's
      :class:`~jaxrvga.core.SolverInfo`.
    """
    alpha0, nu0 = belief.marginal(q, X)
    if model.has_logistic_root:
        alpha, nu, info = root_solvers.solve_logistic(alpha0[0], nu0[0], y[0], max_iter)
        k = special.probit_k(nu)
        c, coef = k * special.sig1(k * alpha), y[0] - special.sigmoid(k * alpha)
    else:
        alpha, nu, info = root_solvers.solve_glm(alpha0[0], nu0[0], y[0], model.expected_log_lik,
                                             50 if max_iter is None else max_iter)
        pos = nu0[0] > 0
        safe = jnp.where(pos, nu0[0], 1.0)
        c = jnp.where(pos, (safe - nu) / (safe * jnp.where(pos, nu, 1.0)), 0.0)
        coef = jnp.where(pos, (alpha - alpha0[0]) / safe, 0.0)
    return Increment(X.T, c[None], coef[None], prior_gain=True), info


def _step_implicit(cfg, model, belief, prior, X, y):
    if X.shape[0] != 1:
        raise ValueError(f"x: the implicit scheme takes one observation per update (x of shape (d,)), "
                         f"got a minibatch of {X.shape[0]}; use scheme='explicit', 'extragrad' or 'ekf'")
    inc, info = implicit_site(model, belief, prior, X, y, cfg.max_iter)
    info = solver_info(info.residual.dtype, info.converged, info.residual, info.iterations)
    return absorb_limited(cfg, belief, prior, inc, info)


def implicit(*, max_iter: Optional[int] = None, max_move=np.inf) -> Scheme:
    """The implicit (proximal) step of a GLM, one observation at a time ([RVGA] eqs. 69-77):
    expectations under the new belief by a root solve of at most ``max_iter`` iterations (default:
    the solver's).

    Args:
      max_iter: the most iterations of the root solve (None: the solver's default).
      max_move: the guard's Mahalanobis limit of the mean step, > 0 (``inf``: none; :func:`limit_move`).

    Returns:
      A :class:`~jaxrvga.schemes.Scheme`.

    Example:
      >>> flt = jr.rvga(jr.models.logistic(), scheme=jr.schemes.implicit(max_iter=20))
      >>> flt.spec.scheme.name
      'implicit'
    """
    max_iter = None if max_iter is None else positive_int("max_iter", max_iter)
    return Scheme("implicit", _step_implicit, Implicit(max_iter, check_max_move(max_move)), "is_glm", certified=True)


__all__ = ["implicit", "implicit_site"]
