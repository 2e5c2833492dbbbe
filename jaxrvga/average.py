r"""Hyper-parameters averaged by their evidence: a filter over a stacked set of members.

:func:`model_average` turns a filter into one whose state holds ``K`` members, a state of that
filter stacked along a leading axis (e.g. a grid of prior variances made with
``jax.vmap(flt.init)``), one per hypothesis ``k``. Each observation updates every member and adds
its one-step-ahead log predictive to the member's log weight,

.. math::

    \ell_k \leftarrow \ell_k + \log p_k(y_t \mid x_t, y_{1:t-1}),

so that after ``t`` observations ``\ell_k = \log \pi_k + \log p_k(y_{1:t})``, the log prior weight
plus the member's log evidence (:func:`jaxrvga.log_evidence`), and ``w = softmax(\ell)`` is the
posterior probability of each hypothesis. The predictive is the mixture
``p(y | x) = sum_k w_k p_k(y | x)`` (:func:`jaxrvga.predictive`, :func:`jaxrvga.log_predictive`):
Bayesian model averaging, with nothing chosen on a validation split.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ._values import Bound
from .core import Filter, SolverInfo, solver_info


class AverageState(NamedTuple):
    """State of a :func:`model_average` filter: ``members``, a state of the member filter stacked
    along a leading axis K; ``log_weight`` (K,), the log prior weight plus the log evidence of each
    member so far; ``step`` and ``info`` (``converged``: every member's step converged and a weight
    was updated)."""

    members: Any
    log_weight: jax.Array
    step: jax.Array
    info: SolverInfo


def _num_members(members) -> int:
    sizes = {jnp.shape(a)[0] if jnp.ndim(a) else None for a in jax.tree_util.tree_leaves(members)}
    if len(sizes) != 1 or None in sizes:
        raise ValueError("members must be a state stacked along one leading axis K (e.g. jax.vmap(flt.init)(...)), "
                         f"got leading sizes {sorted(sizes, key=str)}")
    return sizes.pop()


def _init(flt: Filter, members, log_prior=None) -> AverageState:
    """``AverageState`` of the stacked ``members`` with log prior weights ``log_prior`` (K,) (default 0:
    uniform)."""
    K = _num_members(members)
    dtype = jnp.result_type(members.mean) if hasattr(members, "mean") else jnp.result_type(float)
    log_prior = jnp.zeros(K, dtype) if log_prior is None else jnp.asarray(log_prior, dtype)
    if log_prior.shape != (K,):
        raise ValueError(f"log_prior must have shape ({K},), one per member, got {log_prior.shape}")
    return AverageState(members, log_prior, jnp.zeros((), jnp.int32), solver_info(dtype))


def _member_prior(flt: Filter, member):
    """The member's predicted belief: the prior its next update conditions on."""
    return member if flt.predict is None else flt.predict(member)


def _update(flt: Filter, num_points: int, state: AverageState, x, y) -> AverageState:
    """Every member updated, each log weight plus the member's one-step-ahead log predictive. A
    member whose log predictive is not finite gets weight 0 (``-inf``); where no weight is finite
    (non-finite data), the weights stay and the step is flagged."""
    from .predictive import log_predictive

    def one(member):
        lp = log_predictive(_member_prior(flt, member), x, y, flt.model, num_points=num_points)
        return flt.update(member, x, y), jnp.where(jnp.isnan(lp), -jnp.inf, lp)

    members, lp = jax.vmap(one)(state.members)
    log_weight = state.log_weight + lp.astype(state.log_weight.dtype)
    ok = jnp.any(jnp.isfinite(log_weight))
    log_weight = jnp.where(ok, log_weight, state.log_weight)
    converged = ok & jnp.all(members.info.converged) if hasattr(members, "info") else ok
    info = state.info._replace(converged=converged)
    return AverageState(members, log_weight, state.step + 1, info)


def _predict(flt: Filter, state: AverageState) -> AverageState:
    """Every member's prediction step (the weights are those of the last observation)."""
    return state._replace(members=jax.vmap(flt.predict)(state.members))


def _check(flt: Filter, state: AverageState, xs, ys):
    """The member filter's data check, on the first member."""
    flt.check(jax.tree_util.tree_map(lambda a: a[0], state.members), xs, ys)


def model_average(flt: Filter, *, num_points: int = 32) -> Filter:
    """The Bayesian model average of the members of ``flt`` (module docstring).

    ``init(members, log_prior=None)``: ``members`` a state of ``flt`` stacked along a leading axis
    K (``jax.vmap(flt.init)(...)``), ``log_prior`` (K,) the log prior weights (default uniform).
    ``update`` updates every member and adds its one-step-ahead log predictive
    (:func:`jaxrvga.log_predictive` of ``flt.model`` on the member's predicted belief, with
    ``num_points`` Gauss-Hermite nodes where it integrates numerically) to its log weight; after a
    run ``state.log_weight - log_prior`` is each member's :func:`jaxrvga.log_evidence`.
    :func:`jaxrvga.predictive` and :func:`jaxrvga.log_predictive` of the state are the weighted
    mixture; :func:`weights` gives ``softmax(log_weight)``. It is a filter as any other:
    :func:`jaxrvga.run`, traces, :mod:`jaxrvga.io`, ``jax.vmap``.
    """
    from .special import check_num_points

    if not isinstance(flt, Filter):
        raise ValueError(f"flt must be a jaxrvga.Filter, got {type(flt).__name__}")
    if flt.model is None:
        raise ValueError("model_average needs a filter with an observation model (flt.model) to score its members")
    num_points = check_num_points(num_points)
    check = None if flt.check is None else Bound(_check, flt)
    predict = None if flt.predict is None else Bound(_predict, flt)
    return Filter(Bound(_init, flt), Bound(_update, flt, num_points), check, predict, flt.model)


def weights(state: AverageState) -> jax.Array:
    """The posterior probabilities of the members, ``softmax(state.log_weight)`` (K,)."""
    return jax.nn.softmax(state.log_weight)


def mixture_moments(w, mean, var):
    """Mean and variance of the mixture ``sum_k w_k`` of components with moments ``mean``, ``var``
    (K, ...): ``sum_k w_k mean_k`` and ``sum_k w_k (var_k + (mean_k - mean)^2)`` (total variance)."""
    w = w.reshape(w.shape + (1,) * (jnp.ndim(mean) - 1))
    m = jnp.sum(w * mean, axis=0)
    return m, jnp.sum(w * (var + (mean - m) ** 2), axis=0)


def mixture_log_density(log_weight, log_density):
    """``log sum_k w_k p_k = logsumexp(l_k + log p_k) - logsumexp(l_k)``."""
    lse = jax.scipy.special.logsumexp
    return lse(log_weight + log_density) - lse(log_weight)


__all__ = ["AverageState", "model_average", "weights", "mixture_moments", "mixture_log_density"]
