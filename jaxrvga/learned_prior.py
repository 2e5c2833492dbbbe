r"""The prior learned on the stream: each member of a model average learns its prior precision in the
same pass, without a grid (``jr.model_average(flt, learn_prior=v)``).

Each member's prior precision ``a`` (of
``N(m0, I / a)``, ``m0`` its initial mean) is learned in the same pass, without a grid. With
``lam = log a``, the member's belief under another prior is the belief moved in its own form
(:func:`jaxrvga.evidence.shift_prior`: exact for the linear-Gaussian and normal-inverse-gamma models,
the Gauss-Newton form otherwise), so each step's prequential score has a derivative
``g = d/dlam log sum_s w_s p_s(y_t | x_t)`` (the member's forecasters, their weights held), one
forward-mode derivative of the log predictives. ``lam`` then has the Gaussian belief of a
Gauss-Newton filter, from the hyper-prior ``N(log a0, learn_prior)``: ``I <- I + g^2``,
``lam <- lam + g / I``, and the member is moved to the new prior before it absorbs the observation.
The sum of the squared gradients stands for the evidence's curvature, so a prior far too tight for
the data (whose gradients are large) moves slowly: from 1000 times too tight it moves a factor 2.5 in
60 observations of a d = 20 regression, from 1000 times too broad to within a factor 4 of the
evidence's maximum (tests/test_learned_prior.py).

The forecasters, their scales and their weights are :mod:`jaxrvga.average`'s; this module holds the
learned prior's state, its hyper-prior, the slopes of the forecasters' scores and the move.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import beliefs, io, noise
from . import file_checks as fc
from .core import Filter
from .evidence import shift_prior, shift_prior_tangent
from .kernels.lowrank import symmetrize
from .models import check_observation, linearize
from .validation import check_positive, is_concrete


#: The recommended variance of the hyper-prior of a learned log prior precision
#: (``model_average(flt, learn_prior=LEARN_PRIOR)``): a factor ``e^0.71 = 2`` either side at one standard
#: deviation. Chosen over 0.25, 1 and 4 on the digits and diabetes networks (experiments/REPORT.md, "Ten
#: seeds, and the hyper-prior of the learned prior"): over ten seeds its mean test NLPD was at or below
#: 4's on all three, with a smaller spread.
LEARN_PRIOR = 0.5


class LearnedPrior(NamedTuple):
    """The members' priors learned on the stream (:func:`jaxrvga.model_average` with ``learn_prior``): each
    member's log prior precision ``log_precision`` (K,), its information ``information`` (K,) (the
    hyper-prior's ``1 / learn_prior`` plus the squared evidence gradients so far), and its prior mean
    ``mean`` (K, d) (the member's initial mean)."""

    log_precision: jax.Array
    information: jax.Array
    mean: jax.Array


def initial_prior(learn_prior, members, prior_precision, K) -> LearnedPrior:
    """The members' :class:`LearnedPrior` at the start: ``log(prior_precision)``, information
    ``1 / learn_prior``, the members' means as the prior means."""
    if prior_precision is None:
        raise ValueError("prior_precision is needed where the prior is learned (model_average(..., learn_prior=v)): "
                         "the prior precision each member's initial state was built with, a scalar or (K,)")
    mean = getattr(members, "mean", None)
    if mean is None or jnp.ndim(mean) != 2:
        raise ValueError("learn_prior needs members with a (K, d) mean (a dense, low-rank or diagonal belief)")
    a0 = jnp.asarray(prior_precision, mean.dtype)
    if a0.shape not in ((), (K,)):
        raise ValueError(f"prior_precision must be a scalar or have shape ({K},), one per member, got {a0.shape}")
    if is_concrete(a0):
        check_positive("prior_precision", a0)
    log_a = jnp.broadcast_to(jnp.log(a0), (K,))
    return LearnedPrior(log_a, jnp.full((K,), 1.0 / learn_prior, mean.dtype), mean)


def check_learn_prior(learn_prior, flt: Filter) -> float:
    """A finite float ``> 0``, for a filter without dynamics."""
    try:
        v = float(learn_prior)
    except (TypeError, ValueError):
        raise ValueError(f"learn_prior must be None or a variance > 0, got {learn_prior!r}") from None
    if isinstance(learn_prior, bool) or not (np.isfinite(v) and v > 0):
        raise ValueError(f"learn_prior must be None or a finite variance > 0, got {learn_prior!r}")
    spec = getattr(flt, "spec", None)
    if flt.predict is not None and not (spec is not None and spec.dynamics.is_identity):
        raise ValueError("learn_prior needs a filter without dynamics: the prior it learns is that of a static "
                         "parameter")
    return v


def scores_and_slopes(model, scores, densities, member, x, y, direction, m0):
    """The forecasters' log predictives of ``(x, y)`` (S,), their derivatives along the move of the
    member's prior precision by ``t direction`` at ``t = 0`` (:func:`jaxrvga.evidence.shift_prior`), and
    the predictor's moments ``(eta, V)`` they were taken from (None where they were not formed).
    ``scores(member)`` gives the forecasters' log predictives of a member, ``densities(y, eta, V, stats)``
    the same from the predictor's moments and the member's noise statistics (None: a known noise).

    For one joint predictor ``eta ~ N(h(m), J P J^T)`` (:func:`jaxrvga.models.linearize`: a GLM, a
    nonlinear model, a minibatch model with a learned noise variance) from its moments: the move changes
    the mean by ``dm = P D (m0 - m)`` (``D = diag(direction)``), ``h`` and ``J`` by their forward-mode
    derivatives along ``dm`` (``dJ`` 0 for a GLM), the precision by ``D`` (``dP = -P D P``), so ``dV =
    dJ U + U^T dJ^T - U^T D U`` with ``U = P J^T``, and a learned noise's rate by ``(m - m0)^T D (m - m0) /
    2``; the slopes are one forward-mode derivative of
    :func:`~jaxrvga.posterior_predictive.joint_log_density` in those moments. This is the derivative of
    ``scores`` through the moved belief without differentiating the belief's own factors. Otherwise (a
    minibatch model's inputs each their own predictor), forward mode through ``scores`` along
    :func:`jaxrvga.evidence.shift_prior_tangent`."""
    stats = noise.stats_of(member, model.family.learned_noise)
    if model.per_input is not None and stats is None:
        return (*jax.jvp(scores, (member,), (shift_prior_tangent(member, direction, m0),)), None)
    belief, st = beliefs.of_state(member)
    x, y = check_observation(st, x, y, model)
    u = st.mean - m0
    dm = belief.solve(st, -direction * u)
    (eta, J), (d_eta, dJ) = jax.jvp(lambda t: linearize(model, t, x), (st.mean,), (dm,))
    U = jax.vmap(lambda row: belief.solve(st, row))(J)  # (k, d): the rows of (P J^T)^T
    dJU = dJ @ U.T
    V = symmetrize(J @ U.T)  # J P J^T from the same solves

    def log_densities(eta, V, rate):
        return densities(y, eta, V, None if stats is None else stats._replace(rate=rate))

    rate = None if stats is None else stats.rate
    d_rate = None if stats is None else 0.5 * jnp.sum(direction * u * u).astype(rate.dtype)
    lp, slope = jax.jvp(log_densities, (eta, V, rate), (d_eta, dJU + dJU.T - (U * direction) @ U.T, d_rate))
    return lp, slope, (eta, V)


def move_prior(member, lp, slope, log_weight, prior):
    """One member's prior moved by one Fisher-scoring step of its forecasters' prequential evidence.

    With ``lam = log a`` the log prior precision and ``q(lam)`` the member's belief under the prior moved
    in its own form (:func:`jaxrvga.evidence.shift_prior`), ``g = d/dlam log sum_s w_s p_s(y | x)`` (the
    forecasters' mixture, weights ``w`` of ``log_weight``) is the mixture of the forecasters' ``slope``
    (:func:`scores_and_slopes`, along ``a``); then ``I <- I + g^2``, ``lam <- lam + g / I`` (the Gaussian
    belief over ``lam`` of a Gauss-Newton filter, started from the hyper-prior ``N(lam0, learn_prior)``)
    and the member is moved to the new prior. A step whose gradient is not finite, or whose move breaks
    the belief, keeps the prior and is flagged. Returns ``(member, prior fields, ok)``."""
    lam, m0 = prior.log_precision, prior.mean
    post = jax.nn.softmax(log_weight + jnp.where(jnp.isnan(lp), -jnp.inf, lp))
    g = jnp.sum(jnp.where(post > 0, post * slope, 0.0))
    information = prior.information + g * g
    step = g / information
    new, ok = shift_prior(member, jnp.broadcast_to(jnp.exp(lam) * jnp.expm1(step), m0.shape), m0)
    ok = ok & jnp.isfinite(step) & jnp.all(jnp.isfinite(new.mean))
    keep = lambda new_leaf, old_leaf: jnp.where(ok, new_leaf, old_leaf)  # noqa: E731
    member = jax.tree_util.tree_map(keep, new, member)
    prior = (jnp.where(ok, lam + step, lam), jnp.where(ok, information, prior.information), m0)
    return member, prior, ok


def _check_learned_prior(p):
    """``LearnedPrior``: ``log_precision`` (K,) finite, ``information`` (K,) finite and > 0, ``mean`` (K, d)
    finite, all of one floating dtype."""
    for name in LearnedPrior._fields:
        fc.floating(name, getattr(p, name))
    lam, info, mean = (fc.values(a) for a in p)
    K = fc.shape_of(p.log_precision)
    fc.need(len(K) == 1 and fc.shape_of(p.information) == K and np.all(np.isfinite(lam)),
            f"log_precision and information must be finite vectors of one shape, got {K}")
    fc.need(np.all(np.isfinite(info)) and np.all(info > 0), "information must be finite and > 0")
    fc.need(fc.shape_of(p.mean)[:1] == K and len(fc.shape_of(p.mean)) == 2 and np.all(np.isfinite(mean)),
            "mean must be a finite (K, d) array, one row per member")
    fc.need(fc.dtype_of(p.log_precision) == fc.dtype_of(p.information) == fc.dtype_of(p.mean),
            "log_precision, information and mean must share one dtype")


io.register(LearnedPrior, _check_learned_prior, former=("jaxrvga.average",))


__all__ = ["LearnedPrior", "LEARN_PRIOR"]
