"""Monte-Carlo steps for any model ``eta = h(theta, x)`` ([LRVGA] eqs. 41-46).

``sampled``: GGN curvature ``E[J^T F J]`` or the Hessian, ``num_iters`` passes of the implicit
iteration, each restarting from the previous belief so the observation is counted once;
``published_sampled``, the published L-RVGA's form ([LRVGA] eqs. 143-145).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..beliefs import Dense, PublishedLowRank
from ..core import solver_info
from ..kernels import lowrank
from .base import (MAX_MOVE, Increment, Iterated, Scheme, check_curvature, check_max_move, count_at_least, info_from,
                   iterate)
from .linearised import linearise


def mean_rows(A):
    """The mean of the rows of ``A`` (K, d), as the product ``(1/K) 1^T A`` (on the CPU, XLA's reduction
    over the leading axis of a (10, 16 641) array is about 6x slower: BENCHMARKS.md).

    Args:
      A: a (K, d) array.

    Returns:
      The (d,) mean.
    """
    return jnp.full(A.shape[:1], 1.0 / A.shape[0], A.dtype) @ A


def sampled_site(model, thetas, x, y, curvature: str):
    """Monte-Carlo site from draws ``thetas`` (K, d) of a belief ([LRVGA] eqs. 41-46).

    GGN: ``X = K^{-1/2} [J_k^T R_k^T]`` and ``g = mean_k grad log p``. Hessian (dense beliefs):
    ``-E[hess]`` by its eigen-decomposition ``Q diag(lam) Q^T`` (``lam`` may be negative).

    Args:
      model: the observation model.
      thetas: the draws, (K, d).
      x, y: one observation.
      curvature: ``"ggn"`` or ``"hessian"``.

    Returns:
      An :class:`~jaxrvga.schemes.Increment`.
    """
    K = thetas.shape[0]
    if curvature == "hessian":
        log_lik = model.log_lik
        grads = jax.vmap(jax.grad(log_lik), in_axes=(0, None, None))(thetas, x, y)
        hess = jnp.mean(jax.vmap(jax.hessian(log_lik), in_axes=(0, None, None))(thetas, x, y), axis=0)
        lam, Q = lowrank.symmetric_eigh(-hess)
        return Increment(Q, lam, g=mean_rows(grads))
    # C comes out as (r, d, K), so X = [J_k^T R_k^T] (d, K r) is laid out as W is and its products
    # with W and with the draws are not transposed ones (a faster step, BENCHMARKS.md)
    C, grads = jax.vmap(linearise, in_axes=(None, 0, None, None), out_axes=(2, 0))(model, thetas, x, y)
    X = jnp.transpose(C, (1, 2, 0)).reshape(C.shape[1], -1) / jnp.sqrt(jnp.asarray(K, thetas.dtype))
    return Increment(X, g=mean_rows(grads))


def published_draws(prior, key, i, cfg: Iterated, q):
    """Draws of the published low-rank sampled scheme: fresh (non-antithetic) or frozen base draws ([LRVGA] §4.2.2).

    Args:
      prior: the state before the step (unused).
      key: the step's keys, one per pass.
      i: the pass.
      cfg: the :class:`~jaxrvga.schemes.Iterated` options (``num_samples``, ``frozen_draws``).
      q: the low-rank state drawn from.

    Returns:
      The draws, (K, d).
    """
    if not isinstance(cfg.frozen_draws, bool):
        return lowrank.sample_from_draws(q.mean, q.W, q.psi, *cfg.frozen_draws)
    return lowrank.sample(key[i], q.mean, q.W, q.psi, cfg.num_samples)


def _step_sampled(cfg, model, belief, prior, x, y):
    key, sub = jax.random.split(prior.key)
    draws = belief.base_draws(sub, cfg.num_samples, prior.mean.shape[0], prior.mean.dtype)  # once: common to the passes

    def evaluate(q, i):
        return sampled_site(model, belief.draw(q, draws), x, y, cfg.curvature)

    new, ok, change, calm = iterate(belief, prior, evaluate, cfg)
    info = info_from(change, cfg, cfg.num_iters)
    return new._replace(key=key), ok, info._replace(converged=info.converged & calm)


def _step_published_sampled(cfg, model, belief, prior, x, y):
    """[LRVGA] eqs. 41-47 and 143-145 as published: samples of the projected ``q_hat``, no correction."""
    if cfg.frozen_draws is False:
        key, *keys = jax.random.split(prior.key, 3)
    else:
        key, keys = prior.key, (prior.key, prior.key)
    if not isinstance(cfg.frozen_draws, bool) and cfg.frozen_draws[0].shape[1] != prior.mean.shape[0]:
        z, e = cfg.frozen_draws  # the width of e was checked against the rank by Scheme.check
        raise ValueError(f"frozen_draws must have shapes (K, {prior.mean.shape[0]}) and (K, {e.shape[1]}) for "
                         f"this state, got {z.shape} and {e.shape}")

    def evaluate(q, i):
        return sampled_site(model, published_draws(prior, keys, i, cfg, q), x, y, "ggn")

    new, ok, _, _ = iterate(belief, prior, evaluate, cfg)  # published: no max_move
    return new._replace(key=key), ok, solver_info(prior.mean.dtype)


def sampled(*, num_samples: int = 100, num_iters: int = 3, tol: float = 1e-2, curvature: str = "ggn",
            max_move=MAX_MOVE) -> Scheme:
    """Monte-Carlo expectations for any model ([LRVGA] eqs. 41-46): ``num_iters`` passes of the
    implicit iteration (1: explicit), ``num_samples`` antithetic draws each (common to the passes).

    ``curvature``: ``"ggn"`` (``E[J^T F J]``) or ``"hessian"`` (``-E[hess]``, dense beliefs only).
    ``info.converged`` is False when the last pass moved the mean by more than ``tol (1 + |mu|)``.

    Args:
      num_samples: the antithetic draws per step, >= 2.
      num_iters: the passes of the implicit iteration, >= 1.
      tol: the convergence tolerance of the last pass's move.
      curvature: ``"ggn"`` or ``"hessian"``.
      max_move: the guard's Mahalanobis limit of the mean step, > 0 (``inf``: none; :func:`limit_move`).

    Returns:
      A :class:`~jaxrvga.schemes.Scheme`.

    Example:
      >>> model = jr.models.nonlinear(lambda theta, x: jnp.tanh(x @ theta), jr.models.bernoulli())
      >>> flt = jr.lrvga(model, rank=10, scheme=jr.schemes.sampled(num_samples=20))
      >>> flt.spec.scheme.cfg.num_samples
      20
    """
    num_samples = count_at_least("num_samples", num_samples, 2)
    tol = float(tol)
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    cfg = Iterated(count_at_least("num_iters", num_iters), True, True, check_max_move(max_move), num_samples,
                   check_curvature(curvature, ("ggn", "hessian")), tol)
    return Scheme("sampled", _step_sampled, cfg, beliefs=(Dense,) if curvature == "hessian" else None,
                  needs_key=True, certified=True)


def published_sampled(*, num_samples: int = 10, update_cov_twice: bool = False, frozen_draws=False) -> Scheme:
    """The sampled scheme of the published L-RVGA ([LRVGA] §4.2.2, eqs. 143-145): two passes without
    correction, the first pass's curvature kept (``update_cov_twice=False``, the authors' code), fresh draws of the projected belief (or ``frozen_draws``: ``True`` reuses the
    state's key at every step, as the authors' code; a pair ``(z, e)`` (K, d), (K, p) gives the base
    draws themselves). Low-rank beliefs; no ``max_move`` (every step as published).

    Args:
      num_samples: the draws per pass.
      update_cov_twice: take the second pass's curvature too.
      frozen_draws: False (fresh draws), True (the state's key at every step) or a pair ``(z, e)``.

    Returns:
      A :class:`~jaxrvga.schemes.Scheme`.

    Example:
      >>> scheme = jr.schemes.published_sampled()
      >>> flt = jr.lrvga(jr.models.logistic(), rank=10, published=True, scheme=scheme)
      >>> type(flt.spec.belief).__name__
      'PublishedLowRank'
    """
    cfg = Iterated(2, False, bool(update_cov_twice), None, count_at_least("num_samples", num_samples),
                   tol=0.0, frozen_draws=_frozen(frozen_draws))
    return Scheme("sampled", _step_published_sampled, cfg, beliefs=(PublishedLowRank,),
                  needs_key=isinstance(cfg.frozen_draws, bool), certified=True)


def _frozen(frozen_draws):
    if isinstance(frozen_draws, bool):
        return frozen_draws
    z, e = map(jnp.asarray, frozen_draws)
    if z.ndim != 2 or e.ndim != 2 or e.shape[0] != z.shape[0]:
        raise ValueError(f"frozen_draws must be a pair (z, e) of shapes (K, d) and (K, p), got {z.shape} and {e.shape}")
    if z.shape[0] < 1:
        raise ValueError(f"frozen_draws must hold K >= 1 samples, got shapes {z.shape} and {e.shape}")
    return (z, e)


__all__ = ["sampled", "published_sampled", "sampled_site", "published_draws", "mean_rows"]
