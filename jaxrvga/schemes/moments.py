"""GLM steps from Gaussian expectations under the previous belief: ``explicit`` and ``extragrad``.

``explicit`` ([RVGA] eqs. 30-31, 78-80); ``extragrad``, mirror prox ([LRVGA] eqs. 139-145): a second
evaluation under the explicit step's belief; ``correction=True`` adds the natural-parameter term
``c x x^T (muhat - mu)`` that makes it exact on linear-Gaussian models (the paper's eq. 142 omits it).
"""
from __future__ import annotations

from ..core import solver_info
from .base import MAX_MOVE, Increment, Iterated, Scheme, check_max_move, iterate


def moment_site(model, belief, q, X, y):
    """GLM site with Gaussian expectations under ``q`` on ``eta_i = x_i^T theta`` ([RVGA] eqs. 30-31).

    Args:
      model: the GLM (its ``glm_moments``).
      belief: a :class:`~jaxrvga.beliefs.Belief`.
      q: the belief's state under which the expectations are taken.
      X: the inputs, (m, d).
      y: the outputs, (m,).

    Returns:
      An :class:`~jaxrvga.schemes.Increment` (``X`` (d, m)) with ``c`` and ``coef``.
    """
    alpha, nu = belief.marginal(q, X)
    g, h = model.glm_moments(alpha, nu, y)
    return Increment(X.T, -h, g)


def _step_moments(cfg, model, belief, prior, X, y):
    new, ok, _, calm = iterate(belief, prior, lambda q, i: moment_site(model, belief, q, X, y), cfg)
    return new, ok, solver_info(prior.mean.dtype, converged=calm, iterations=cfg.num_iters)


def explicit(*, max_move=MAX_MOVE) -> Scheme:
    """A GLM's expectations under the previous belief ([RVGA] eqs. 30-31, 78-80).

    Args:
      max_move: the guard's Mahalanobis limit of the mean step, > 0 (``inf``: none; :func:`limit_move`).

    Returns:
      A :class:`~jaxrvga.schemes.Scheme`.

    Example:
      >>> flt = jr.rvga(jr.models.poisson(), scheme=jr.schemes.explicit())
      >>> flt.spec.scheme.name
      'explicit'
    """
    return Scheme("explicit", _step_moments, Iterated(max_move=check_max_move(max_move)), "is_glm", certified=True)


def extragrad(*, correction: bool = True, update_cov_twice: bool = True, max_move=MAX_MOVE) -> Scheme:
    """Mirror prox for GLMs ([LRVGA] eqs. 139-145): a second evaluation under the explicit step's belief.

    ``correction`` adds the natural-parameter term that makes it exact on linear-Gaussian models
    (the paper's eq. 142 omits it); ``update_cov_twice=False`` keeps the first pass's curvature.
    ``correction=False, update_cov_twice=True`` is the paper's form.

    Args:
      correction: add the natural-parameter term of the second evaluation.
      update_cov_twice: take the second evaluation's curvature (False: the first pass's).
      max_move: the guard's Mahalanobis limit of the mean step, > 0 (``inf``: none; :func:`limit_move`).

    Returns:
      A :class:`~jaxrvga.schemes.Scheme`.

    Example:
      >>> scheme = jr.schemes.extragrad(correction=False)
      >>> flt = jr.lrvga(jr.models.logistic(), rank=5, scheme=scheme)
      >>> flt.spec.scheme.cfg.correction
      False
    """
    cfg = Iterated(2, bool(correction), bool(update_cov_twice), check_max_move(max_move))
    return Scheme("extragrad", _step_moments, cfg, "is_glm", certified=True)


__all__ = ["explicit", "extragrad", "moment_site"]
