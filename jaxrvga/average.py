r"""Hyper-parameters and predictives averaged by their evidence: a filter over a stacked set of members.

:func:`model_average` turns a filter into one whose state holds ``K`` members, a state of that
filter stacked along a leading axis (e.g. a grid of prior variances made with
``jax.vmap(flt.init)``), one per hypothesis ``k``, each read through ``S`` forecasters: the
predictive of the member's belief with its covariance times a scale ``c_s`` (``N(mean, c_s P)``;
``c = 1`` the belief's own predictive, ``c = 0`` the plug-in ``p(y | theta = mean)``,
:func:`jaxrvga.predictive`'s ``scale``). Each observation updates every member and adds each
forecaster's one-step-ahead log predictive to its log weight,

.. math::

    \ell_{ks} \leftarrow \ell_{ks} + \log p_{ks}(y_t \mid x_t, y_{1:t-1}),

so that after ``t`` observations ``\ell_{ks} = \log \pi_{ks} + \log p_{ks}(y_{1:t})``, the log prior
weight plus the forecaster's prequential log score: for ``c = 1`` the member's log evidence
(:func:`jaxrvga.log_evidence`). ``w = softmax(\ell)`` is the posterior probability of each
forecaster, and the predictive is the mixture ``p(y | x) = sum_ks w_ks p_ks(y | x)``
(:func:`jaxrvga.predictive`, :func:`jaxrvga.log_predictive`): Bayesian model averaging over
hypotheses and forecasters (Dawid's prequential principle), with nothing chosen on a validation
split. Its cumulative log loss on the stream is at most that of the best single forecaster in
hindsight plus ``log(K S)`` (uniform prior weights): the mixture cannot be much worse than its best
member, and is better where the members complement each other.

Why the scales: a limited-memory belief of a network keeps its prior variance in every direction
the rank ``p`` could not keep, so its linearised predictive ``J P J^T`` is far too wide there
(experiments/REPORT.md, "Uncertainty with nothing to tune"); which fraction of it to trust is
decided by the stream itself, through the forecasters' prequential scores.

**The prior learned on the stream** (``learn_prior``): each member's prior precision learned in the
same pass, without a grid, one for all its parameters or one per block of them, e.g. per layer
(``prior_groups``; :mod:`jaxrvga.learned_prior`).

**The noise variance of each forecaster.** Where the members learn their noise variance (the
normal-inverse-gamma belief of :mod:`jaxrvga.noise`), a forecaster is a whole predictive,
``t_{2a}(h(m, x), (b_s / a) (I + c_s J P J^T))``, with its own inverse-gamma rate ``b_s``: each residual
``r = y - h(m, x)`` of the predicted member is absorbed in the forecaster's own width,
``b_s <- b_s + r^T (I + c_s J P J^T)^{-1} r / 2``. At ``c = 1`` this is the member's own conjugate step, so
that forecaster's score stays the member's evidence; a narrower forecaster, whose ``J P J^T`` no longer
explains the residuals, learns a larger noise variance instead of inheriting one that the member's too
wide ``J P J^T`` made too small (experiments/REPORT.md, "The noise variance of each forecaster"). The
state keeps each rate over its member's (``rate_ratio``), which the member's prior moves and a variance
discount leave unchanged.
"""
from __future__ import annotations

import functools
import numbers
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import beliefs, io, noise
from . import file_checks as fc
from ._values import Bound
from .beliefs.dense import GaussianState, sqrt_factor
from .beliefs.reading import sample_of
from .core import Filter, SolverInfo, check_solver_info, solver_info
from .kernels.special import check_num_points
from .learned_prior import (GROUP_SPREAD, LEARN_PRIOR, PRIOR_TOLERANCE, HyperPrior, LearnedPrior, check_learn_prior,
                            initial_prior, move_prior, scores_and_slope)
from .models import check_observation, linearize
from .posterior_predictive import (Predictive, Scores, joint_log_density, log_predictive, log_predictive_of,
                                   predictive, predictive_of, scores_of)
from .validation import is_concrete

#: The default covariance scales of the forecasters of each member: the plug-in (0), the belief's
#: own predictive (1) and five between, a factor 4 apart (the test-optimal scales of the network
#: tasks of experiments/REPORT.md range from 1/1024 to 1/4).
PREDICTIVE_SCALES = (0.0, 1.0 / 1024, 1.0 / 256, 1.0 / 64, 1.0 / 16, 1.0 / 4, 1.0)
#: The forgetting factor of the documented network recipe (``model_average(..., forget=FORGET)``): the
#: forecasters' weights follow the last hundred or so scores rather than the stream's weak start; over
#: twenty seeds of the digits and diabetes MLPs it lowered or kept the per-layer prior's test NLPD
#: (experiments/REPORT.md, "Forgetting in the weights"). The function's default stays 1, the Bayesian
#: model average.
FORGET = 0.99


class AverageState(NamedTuple):
    """State of a :func:`model_average` filter: ``members``, a state of the member filter stacked
    along a leading axis K; ``log_weight`` (K, S), the log prior weight plus the prequential log
    score of each forecaster (member ``k`` read with covariance scale ``scales[s]``) so far;
    ``scales`` (S,); ``step`` and ``info`` (``converged``: every member's step converged and a
    weight was updated); ``prior``, the members' learned priors
    (:class:`~jaxrvga.learned_prior.LearnedPrior`), None where they are fixed; ``rate_ratio`` (K, S),
    where the members learn their noise variance, each forecaster's inverse-gamma rate over its
    member's (module docstring, "The noise variance of each forecaster"; None: every forecaster reads
    its member's own, as in files written before it)."""

    members: Any
    log_weight: jax.Array
    scales: jax.Array
    step: jax.Array
    info: SolverInfo
    prior: Optional[LearnedPrior] = None
    rate_ratio: Optional[jax.Array] = None


def _num_members(members) -> int:
    sizes = {jnp.shape(a)[0] if jnp.ndim(a) else None for a in jax.tree_util.tree_leaves(members)}
    if len(sizes) != 1 or None in sizes:
        raise ValueError("members must be a state stacked along one leading axis K (e.g. jax.vmap(flt.init)(...); "
                         "one filter's state: jax.tree_util.tree_map(lambda a: a[None], state)), got leading sizes "
                         f"{sorted(sizes, key=str)}")
    return sizes.pop()


def _init(flt: Filter, scales, hyper: Optional[HyperPrior], members, log_prior=None,
          prior_precision=None) -> AverageState:
    """``AverageState`` of the stacked ``members`` with log prior weights ``log_prior`` (K,) of the
    members or (K, S) of the forecasters (default 0: uniform), the members' split evenly over their
    forecasters; where the prior is learned (``hyper``), ``prior_precision`` (a scalar, (K,) or (K, G))
    the prior precision each member was built with, its mean the prior mean."""
    K, S = _num_members(members), len(scales)
    prior = None if hyper is None else initial_prior(hyper, members, prior_precision, K)
    dtype = jnp.result_type(members.mean) if hasattr(members, "mean") else jnp.result_type(float)
    log_prior = jnp.zeros(K, dtype) if log_prior is None else jnp.asarray(log_prior, dtype)
    if log_prior.shape not in ((K,), (K, S)):
        raise ValueError(f"log_prior must have shape ({K},), one per member, or ({K}, {S}), one per forecaster, "
                         f"got {log_prior.shape}")
    check_log_weight("log_prior", log_prior)
    if log_prior.ndim == 1:
        log_prior = jnp.broadcast_to(log_prior[:, None], (K, S)) - jnp.log(jnp.asarray(S, dtype))
    stats = noise.stats_of(members)
    ratio = None if stats is None else jnp.ones((K, S), jnp.result_type(stats.rate))
    return AverageState(members, log_prior, jnp.asarray(scales, dtype), jnp.zeros((), jnp.int32), solver_info(dtype),
                        prior, ratio)


def usable_log_weight(log_weight):
    """Whether ``log_weight`` weighs a mixture: no NaN, no ``+inf`` and at least one finite entry (``-inf``
    is a weight of 0); a traced bool.

    Args:
      log_weight: an array of log weights.

    Returns:
      A 0-d bool array.
    """
    return ~jnp.any(jnp.isnan(log_weight) | (log_weight == jnp.inf)) & jnp.any(jnp.isfinite(log_weight))


def check_log_weight(name: str, log_weight):
    """``ValueError`` naming ``name`` where concrete ``log_weight`` is not :func:`usable_log_weight`.

    Args:
      name: the name in the message.
      log_weight: an array of log weights (traced ones pass unchecked).

    Returns:
      ``log_weight`` unchanged.
    """
    with jax.ensure_compile_time_eval():  # a concrete value inside a trace stays concrete
        usable = not is_concrete(log_weight) or bool(usable_log_weight(log_weight))
    if not usable:
        raise ValueError(f"{name} must hold log weights without NaN or +inf and at least one finite entry "
                         f"(-inf is a weight of 0), got {np.asarray(log_weight)!r}")
    return log_weight


def each_member(fn, *stacked):
    """``fn`` of each member's slice of ``stacked`` (trees whose leaves share a leading axis K, the first
    the members; None leaves none), outputs stacked along K. Dense members are vmapped (batched products
    of small matrices); others (low-rank, diagonal: large ``d``) go one at a time (``jax.lax.map``), and
    K = 1 takes ``fn`` of the member itself. On CPU, vmapped over K, a low-rank network member's step
    cost 1.4-1.9x its own step at K = 1, and a grid of six up to 1.5x six steps, while a dense Kalman
    grid of six at d = 20-200 was 1.5-2.6x faster vmapped (experiments/REPORT.md, "Members without a
    batch axis").

    Args:
      fn: ``fn(*slices) -> pytree``, one member's slices of ``stacked``.
      *stacked: pytrees stacked along a leading axis K.

    Returns:
      ``fn``'s outputs, each leaf with a leading axis of K.
    """
    if jax.tree_util.tree_leaves(stacked)[0].shape[0] == 1:
        # behind a barrier: XLA otherwise fused the slice of a low-rank member's psi into its consumers
        # and the member's step cost 1.3x its own (experiments/REPORT.md, "The learned prior's slopes
        # from the moments, one member behind a barrier")
        out = fn(*jax.lax.optimization_barrier(jax.tree_util.tree_map(lambda a: a[0], stacked)))
        return jax.tree_util.tree_map(lambda a: a[None], out)
    if isinstance(stacked[0], GaussianState):
        return jax.vmap(fn)(*stacked)
    return jax.lax.map(lambda args: fn(*args), stacked)


def _update(flt: Filter, num_points: int, hyper: Optional[HyperPrior], forget: float, state: AverageState, x,
            y) -> AverageState:
    """Every member updated, each log weight (times ``forget``) plus its forecaster's one-step-ahead log predictive
    (times a tempered model's ``power``, :func:`jaxrvga.models.tempered`; the member's Jacobian computed once
    for all its scales), each forecaster's noise rate moved by its
    own residual (:func:`_next_ratio`). A forecaster whose log predictive is not finite gets weight 0
    (``-inf``); where no weight is finite (non-finite data), the weights stay and the step is flagged.
    Where the prior is learned, each member's prior moves first (:func:`jaxrvga.learned_prior.move_prior`)."""
    def scores(member):
        return jax.vmap(lambda c: log_predictive(member, x, y, flt.model, num_points=num_points, scale=c))(state.scales)

    index = None if state.prior is None else _prior_index(hyper, state.prior)

    def one(member, log_weight, prior, ratio):  # one member: its forecasters' scores, then its step
        def densities(y, eta, V, stats):
            return _log_densities(flt.model, y, eta, V, stats, state.scales, ratio, num_points)

        if prior is None:
            moved, ok, predicted = member, jnp.array(True), flt.predicted(member)
            lp, next_ratio = (scores(predicted), None) if ratio is None else _noise_forecasts(
                flt.model, densities, predicted, x, y, state.scales, ratio)
        else:
            a = jnp.exp(prior.member_log_precision)[index]
            directions = jnp.where(index == jnp.arange(hyper.num_groups)[:, None], a, 0.0)  # (G, d)
            lp, g, moments = scores_and_slope(flt.model, scores, densities, member, x, y, directions, prior.mean,
                                              log_weight)
            next_ratio = None if ratio is None else _next_ratio(noise.stats_of(member), y, *moments, state.scales,
                                                                ratio, flt.model.power)
            moved, prior, ok = move_prior(member, g, prior, index, hyper.tolerance, flt.model.power)
        new = flt.update(moved, x, y)
        if ratio is not None:  # a flagged step keeps its member's rate, and so its forecasters'
            ratio = jnp.where(new.info.converged & jnp.all(jnp.isfinite(next_ratio)), next_ratio, ratio)
        return new, lp, prior, ok, ratio

    members, lp, prior, moved, ratio = each_member(one, state.members, state.log_weight, state.prior,
                                                   state.rate_ratio)
    lp = jnp.where(jnp.isnan(lp), -jnp.inf, lp)
    log_weight = state.log_weight if forget == 1.0 else jnp.where(
        jnp.isfinite(state.log_weight), forget * state.log_weight, state.log_weight)
    log_weight = log_weight + flt.model.power * lp.astype(state.log_weight.dtype)  # tempered: counted once in E
    ok = usable_log_weight(state.log_weight) & jnp.any(jnp.isfinite(log_weight))
    log_weight = jnp.where(ok, log_weight, state.log_weight)
    converged = ok & jnp.all(moved) & (jnp.all(members.info.converged) if hasattr(members, "info") else True)
    info = state.info._replace(converged=converged)
    return state._replace(members=members, log_weight=log_weight, step=state.step + 1, info=info, prior=prior,
                          rate_ratio=ratio)


def _prior_index(hyper: Optional[HyperPrior], prior: LearnedPrior):
    """The block of each parameter (d,), where the state's learned prior matches the filter's blocks."""
    G = prior.log_precision.shape[-1]
    if hyper is None or hyper.num_groups != G:
        raise ValueError(f"the state's learned prior has {G} block(s) but the filter "
                         + ("learns none (learn_prior=None)" if hyper is None else f"{hyper.num_groups}"))
    return hyper.index(prior.mean.shape[-1])


def _forecaster_stats(stats, ratio):
    """Noise statistics as a forecaster reads them: the rate times the forecaster's ``ratio`` (as they are
    where either is None)."""
    return stats if stats is None or ratio is None else stats._replace(rate=ratio * stats.rate)


def _forecaster(member, ratio):
    """The member as one of its forecasters reads it: its noise rate times the forecaster's ``ratio``
    (None: the member itself)."""
    return member if ratio is None else member._replace(noise=_forecaster_stats(noise.stats_of(member), ratio))


def _log_densities(model, y, eta, V, stats, scales, ratio, num_points: int):
    """The forecasters' log predictives of ``y`` (S,) from the predictor's moments ``eta``, ``V = J P J^T``
    (:func:`~jaxrvga.posterior_predictive.joint_log_density`): forecaster ``s`` reads ``scales[s] V`` and the
    noise statistics ``stats`` with its rate ratio ``ratio[s]`` (None: the member's own)."""
    return jax.vmap(lambda c, q: joint_log_density(model, _forecaster_stats(stats, q), y, eta, c * V, num_points))(
        scales, ratio)


def _noise_forecasts(model, densities, member, x, y, scales, ratio):
    """A member with a learned noise variance: its forecasters' log predictives of ``(x, y)`` (S,),
    ``densities(y, eta, V, stats)`` (:func:`_log_densities`), and their next rate ratios (:func:`_next_ratio`),
    from one linearisation ``(h(m, x), J P J^T)`` of the predicted member."""
    belief, st = beliefs.of_state(member)
    stats = noise.stats_of(member)
    x, y = check_observation(st, x, y, model)
    eta, J = linearize(model, st.mean, x)
    V = belief.sandwich(st, J)
    return densities(y, eta, V, stats), _next_ratio(stats, y, eta, V, scales, ratio, model.power)


def _next_ratio(stats, y, eta, V, scales, ratio, power: float = 1.0):
    """The forecasters' rate ratios after ``y``: forecaster ``s``'s rate ``q_s b`` absorbs its residual in its
    own width, ``q_s b + r^T (I + c_s V)^{-1} r / 2`` (:func:`jaxrvga.noise.quadratic_form`), over the member's
    ``b + r^T (I + V)^{-1} r / 2`` (the member's own step; ``r = y - eta``, ``eta = h(m, x)`` and ``V = J P J^T``
    of the predicted member, whose noise statistics are ``stats``); a tempered model's ``power`` p as
    :func:`jaxrvga.noise.absorb`'s: ``p r^T (I + p c_s V)^{-1} r / 2``."""
    r, eye = jnp.ravel(y) - eta, jnp.eye(eta.shape[0], dtype=eta.dtype)

    def rate(q, c):  # the conjugate step of the forecaster reading rate q b and covariance c V
        return noise.absorb(stats._replace(rate=q * stats.rate), r, power * c * V + eye, power).rate

    rates = jax.vmap(rate)(jnp.append(ratio, 1.0), jnp.append(scales.astype(r.dtype), 1.0))
    return rates[:-1] / rates[-1]


def _predict(flt: Filter, state: AverageState) -> AverageState:
    """Every member's prediction step (the weights are those of the last observation)."""
    return state._replace(members=each_member(flt.predict, state.members))


def _check(flt: Filter, state: AverageState, xs, ys):
    """The member filter's data check, on the first member."""
    flt.check(jax.tree_util.tree_map(lambda a: a[0], state.members), xs, ys)


def model_average(flt: Filter, *, scales=PREDICTIVE_SCALES, num_points: int = 32, learn_prior=None,
                  prior_groups=None, group_spread=GROUP_SPREAD, prior_tolerance=PRIOR_TOLERANCE,
                  forget: float = 1.0) -> Filter:
    """The Bayesian model average of the members of ``flt``, each read through the forecasters of
    ``scales`` (module docstring; ``scales=(1.0,)``: the members' own predictives alone).

    ``init(members, log_prior=None)``: ``members`` a state of ``flt`` stacked along a leading axis
    K (``jax.vmap(flt.init)(...)``; one filter: ``jax.tree_util.tree_map(lambda a: a[None], state)``),
    ``log_prior`` the log prior weights, (K,) per member or (K, S) per forecaster (default uniform).
    ``update`` updates every member and adds each forecaster's one-step-ahead log predictive
    (:func:`jaxrvga.log_predictive` of ``flt.model`` on the member's predicted belief, with
    ``num_points`` Gauss-Hermite nodes where it integrates numerically) to its log weight; after a
    run (``forget=1``), the column of scale 1 of ``state.log_weight - log_prior`` is each member's
    :func:`jaxrvga.log_evidence`. :func:`jaxrvga.predictive` and :func:`jaxrvga.log_predictive` of
    the state are the weighted mixture; :func:`weights` gives ``softmax(log_weight)``. It is a
    filter as any other: :func:`jaxrvga.run`, traces, :mod:`jaxrvga.io`, ``jax.vmap``. Its cost
    per observation: the members' updates plus one log predictive per member (a Jacobian and a
    ``J P J^T``; the scales share them). Before a test set's predictive, :func:`prune` drops the
    members the stream has ruled out. A filter of a tempered model (:func:`jaxrvga.models.tempered`, E
    passes at power ``1/E``) adds ``power`` times the log predictives, and moves a learned prior by
    ``power`` times its evidence, so that the E passes count each observation's score once.

    With ``learn_prior=v``, each member's prior precision is learned on the stream (module docstring,
    "The prior learned on the stream"): ``init(members, prior_precision=a0)`` then names the precision
    ``a0`` (a scalar, (K,) or (K, G)) each member's initial state was built with, around its initial mean, and
    ``v`` is the variance of the Gaussian hyper-prior of ``log a`` centred on ``log a0``. It needs a filter
    without dynamics (a static parameter's prior): the slopes of the forecasters' scores from the
    predictor's moments (:func:`jaxrvga.learned_prior.scores_and_slope`) and, once the learned prior is
    ``prior_tolerance`` away from the member's, the member's move (:func:`jaxrvga.evidence.shift_prior`).
    With ``prior_groups`` (block sizes, e.g. :func:`jaxrvga.learned_prior.block_sizes` of a network's
    layers), each block of the flat parameters learns its own precision (:mod:`jaxrvga.learned_prior`):
    1.6-1.9x one filter on the digits and diabetes networks, 2.0x on the 28 x 28 MLP, against 1.3x and
    1.45x for the fixed prior (experiments/REPORT.md, "The per-layer prior as the default").

    Args:
      flt: the members' filter (a :class:`~jaxrvga.Filter` with an observation model, ``flt.model``).
      scales: the covariance scales ``c`` of each member's forecasters, S values >= 0 (default
        :data:`PREDICTIVE_SCALES`).
      num_points: Gauss-Hermite nodes of the log predictives that integrate numerically.
      learn_prior: None (the members' priors fixed) or ``v > 0``, the variance of the hyper-prior of each
        member's log prior precision (:data:`LEARN_PRIOR`, 0.5, recommended; with blocks, that of their
        mean).
      prior_groups: None (one prior precision) or the sizes of the contiguous blocks of the flat
        parameters that learn a precision each (positive ints summing to d; only with ``learn_prior``).
      group_spread: the variance of each block's log precision about the blocks' mean, ``> 0``
        (:data:`~jaxrvga.learned_prior.GROUP_SPREAD`).
      prior_tolerance: ``>= 0``, how far a member's log prior precision may lag the learned one before
        the member is moved to it (:data:`~jaxrvga.learned_prior.PRIOR_TOLERANCE`; 0: every step).
      forget: in ``(0, 1]``: each step the log weights are multiplied by ``forget`` before the new scores
        are added (dynamic model averaging, Raftery, Karny & Ettler 2010), so that they follow the last
        ``1 / (1 - forget)`` or so observations' scores; 1 (default): the Bayesian model average, each
        member's weight its evidence; :data:`FORGET` (0.99) in the network recipe (experiments/REPORT.md,
        "Forgetting in the weights").

    Returns:
      A :class:`~jaxrvga.Filter` whose state is an :class:`AverageState`.

    Example:
      >>> X = jax.random.normal(jax.random.key(0), (100, 2))
      >>> noise = 0.3 * jax.random.normal(jax.random.key(1), (100,))
      >>> y = X @ jnp.array([1.0, -1.0]) + noise
      >>> flt = jr.kalman(noise_var=0.1)
      >>> prior_vars = jnp.array([0.01, 1.0, 100.0])  # three members
      >>> def init(v):
      ...     return flt.init(jnp.zeros(2), v * jnp.eye(2))
      >>> members = jax.vmap(init)(prior_vars)
      >>> avg = jr.model_average(flt, scales=(1.0,))
      >>> state, _ = jr.run(avg, avg.init(members), X, y)
      >>> jr.average.weights(state).shape
      (3, 1)
    """
    if not isinstance(flt, Filter):
        raise ValueError(f"flt must be a jaxrvga.Filter, got {type(flt).__name__}")
    if flt.model is None:
        raise ValueError("model_average needs a filter with an observation model (flt.model) to score its members")
    num_points = check_num_points(num_points)
    scales = _check_scales(scales)
    if isinstance(forget, bool) or not (isinstance(forget, numbers.Real) and 0.0 < forget <= 1.0):
        raise ValueError(f"forget must be a number in (0, 1], got {forget!r}")
    hyper = None
    if learn_prior is not None:
        hyper = check_learn_prior(learn_prior, flt, prior_groups, group_spread, prior_tolerance)
    elif prior_groups is not None:
        raise ValueError("prior_groups: the blocks of a learned prior need learn_prior=v (e.g. LEARN_PRIOR)")
    return _average(flt, scales, num_points, hyper, float(forget))


def recipe(flt: Filter, member, prior_var: float, groups=None):
    """``(avg, state)``: the default with nothing to tune for a network (docs/uncertainty.md, "The recipe"):
    :func:`model_average` of ``flt``, its prior precision learned (``LEARN_PRIOR``) per block of ``groups``,
    the weights forgetting at :data:`FORGET`; ``state`` has the ``member``, of prior precision ``1 /
    prior_var`` (0.1 for LeCun-normal weights and standardised inputs), or a stack of K members (other
    initial weights, each its own prior mean: K times the cost). A tempered ``flt``
    (:func:`jaxrvga.models.tempered`) makes it the recipe of several passes.

    Args:
      flt: the member's filter (no dynamics).
      member: one state of ``flt``, built from the prior ``N(mean, prior_var I)``, or K such states
        stacked along a leading axis (``jax.vmap(flt.init)(...)``).
      prior_var: the variance of that prior, a number > 0.
      groups: None (one prior precision) or the block sizes of the flat parameters that learn one each
        (:func:`jaxrvga.learned_prior.block_sizes` of a network's layers).

    Returns:
      ``(avg, state)``: the model average's :class:`~jaxrvga.Filter` and its :class:`AverageState`.
    """
    ndim = jnp.ndim(getattr(member, "mean", None))
    if ndim not in (1, 2):
        raise ValueError(f"member must be a state of flt (a (d,) mean) or a stack of them ((K, d)), got {ndim} axes")
    if isinstance(prior_var, bool) or not (isinstance(prior_var, numbers.Real) and 0 < prior_var < np.inf):
        raise ValueError(f"prior_var must be a finite number > 0, got {prior_var!r}")
    avg = model_average(flt, learn_prior=LEARN_PRIOR, prior_groups=groups, forget=FORGET)
    members = member if ndim == 2 else jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], member)
    return avg, avg.init(members, prior_precision=1.0 / float(prior_var))


def _average(flt: Filter, scales: tuple, num_points: int, hyper: Optional[HyperPrior], forget: float) -> Filter:
    check = None if flt.check is None else Bound(_check, flt)
    predict = None if flt.predict is None else Bound(_predict, flt)
    return Filter(Bound(_init, flt, scales, hyper), Bound(_update, flt, num_points, hyper, forget), check, predict,
                  flt.model)


def member_filter(flt) -> Optional[Filter]:
    """The members' filter of a model average.

    Args:
      flt: a filter.

    Returns:
      The filter of the members where ``flt`` was made by :func:`model_average`, None for another filter.
    """
    if isinstance(flt, Filter) and isinstance(flt.init, Bound) and flt.init.fn is _init:
        return flt.init.args[0]
    return None


def with_member_filter(avg: Filter, fn) -> Filter:
    """The model average ``avg`` (of :func:`model_average`) over the members' filter ``fn(flt)`` in place
    of its own ``flt``, with the same scales, nodes and learned prior: e.g. ``jaxrvga.sharding`` gives
    low-rank members one row block per device. Its states are the same.

    Args:
      avg: a filter made by :func:`model_average`.
      fn: ``flt -> flt'``, a filter whose states are those of ``flt``.

    Returns:
      ``model_average(fn(flt), ...)``. Raises ``ValueError`` where ``avg`` is not a model average.
    """
    if member_filter(avg) is None:
        raise ValueError("avg must be a filter of jaxrvga.model_average")
    flt, scales, hyper = avg.init.args
    _, num_points, _, forget = avg.update.args
    return _average(fn(flt), scales, num_points, hyper, forget)


def _check_scales(scales) -> tuple:
    """A non-empty tuple of distinct finite floats ``>= 0``."""
    try:
        out = tuple(float(c) for c in scales)
    except (TypeError, ValueError):
        raise ValueError(f"scales must be a sequence of numbers >= 0, got {scales!r}") from None
    if not out or len(set(out)) != len(out) or not all(np.isfinite(c) and c >= 0 for c in out):
        raise ValueError(f"scales must be distinct finite numbers >= 0 (at least one), got {scales!r}")
    return out


def weights(state: AverageState) -> jax.Array:
    """The posterior probabilities of the forecasters, ``softmax(state.log_weight)`` over all of them
    (K, S); ``.sum(1)`` gives the members'.

    Args:
      state: an :class:`AverageState`.

    Returns:
      The (K, S) weights, summing to 1.
    """
    return jax.nn.softmax(state.log_weight.ravel()).reshape(state.log_weight.shape)


def prune(state: AverageState, min_weight: float = 1e-12) -> AverageState:
    """The average without the members whose weight (summed over their forecasters) is at most
    ``min_weight``: the same mixture but for that mass, at the cost of the members kept. After a pass the
    weights are concentrated (one to four of six priors above 1e-12 on the networks of
    experiments/REPORT.md, "Members without a batch axis"), so a test set's predictive then costs those
    members'. A pruned state is an average like any other (its weights renormalised over the members kept)
    and can go on learning.

    Args:
      state: a concrete :class:`AverageState`.
      min_weight: the largest member weight dropped, in ``[0, 1)``; the heaviest member is always kept.

    Returns:
      An :class:`AverageState` of the members kept, in their order.
    """
    min_weight = float(min_weight)
    if not 0.0 <= min_weight < 1.0:
        raise ValueError(f"min_weight must be in [0, 1), got {min_weight}")
    if not is_concrete(state.log_weight):
        raise ValueError("prune needs a concrete state (it changes the number of members): call it outside jit")
    if jnp.ndim(state.log_weight) != 2:
        raise ValueError(f"prune takes one average, a log_weight of shape (K, S), got {jnp.shape(state.log_weight)} "
                         "(a batch of averages: prune each one)")
    check_log_weight("state.log_weight", state.log_weight)
    w = np.asarray(weights(state).sum(1))
    keep = np.flatnonzero((w > min_weight) | (w == w.max()))
    take = lambda a: a[keep]  # noqa: E731
    kept = jax.tree_util.tree_map(take, (state.members, state.prior, state.rate_ratio))
    return state._replace(members=kept[0], log_weight=state.log_weight[keep], prior=kept[1], rate_ratio=kept[2])


def each_forecaster(state: AverageState, fn):
    """``fn(member, scale)`` for every member and scale: outputs stacked along a leading axis of K S. The
    member is given as the forecaster reads it: with a learned noise variance, its rate times the
    forecaster's ``state.rate_ratio``.

    Args:
      state: an :class:`AverageState` of K members and S scales.
      fn: ``fn(member_state, scale) -> pytree``.

    Returns:
      ``fn``'s outputs, each leaf with a leading axis of K S entries (member-major).
    """
    out = each_member(lambda m, ratio: jax.vmap(lambda c, q: fn(_forecaster(m, q), c))(state.scales, ratio),
                      state.members, state.rate_ratio)
    return jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:]), out)


def mixture_moments(w, mean, var):
    """Mean and variance of the mixture ``sum_k w_k`` of components with moments ``mean``, ``var``
    (K, ...), ``w`` of any shape of K entries: ``sum_k w_k mean_k`` and ``sum_k w_k (var_k + (mean_k -
    mean)^2)`` (total variance).

    Args:
      w: the K weights (any shape of K entries; a weight of 0 ignores its component).
      mean, var: the components' means and variances, (K, ...).

    Returns:
      ``(mean, var)`` of the mixture, each of shape ``mean.shape[1:]``.
    """
    w = jnp.ravel(w)
    w = w.reshape(w.shape + (1,) * (jnp.ndim(mean) - 1))

    def weighted(a):  # a component of weight 0 adds nothing, even an infinite or NaN moment
        return jnp.sum(jnp.where(w > 0, w * a, 0.0), axis=0)

    m = weighted(mean)
    return m, weighted(var + (mean - m) ** 2)


def mixture_log_density(log_weight, log_density):
    """``log sum_k w_k p_k = logsumexp(l_k + log p_k) - logsumexp(l_k)`` (``l`` of any shape of K entries).

    Args:
      log_weight: the K unnormalised log weights (any shape of K entries; ``-inf`` is a weight of 0).
      log_density: the K components' log densities, the shape of ``log_weight``.

    Returns:
      The scalar log density of the mixture.
    """
    lse = jax.scipy.special.logsumexp
    log_weight = jnp.ravel(log_weight)
    weighted = jnp.where(log_weight == -jnp.inf, -jnp.inf, log_weight + log_density)  # weight 0: nothing, not NaN
    return lse(weighted) - lse(log_weight)


def check_members(state: AverageState):
    """Each member of a concrete ``state`` read as a plain state is (:func:`jaxrvga.beliefs.of_state`:
    a finite mean, a positive definite covariance or positive ``psi``, valid noise statistics);
    ``ValueError`` naming ``state.members[k]``. Traced states are taken as given.

    Args:
      state: an :class:`AverageState`.

    Returns:
      None; raises ``ValueError`` for the first invalid member.
    """
    if not is_concrete(state.members):
        return
    with jax.ensure_compile_time_eval():  # concrete members inside a trace (a scan's trace function) stay concrete
        for k in range(_num_members(state.members)):
            member = jax.tree_util.tree_map(lambda a: a[k], state.members)
            try:
                beliefs.of_state(member)
                stats = noise.stats_of(member)
                if stats is not None and not bool(noise.valid(stats)):
                    raise ValueError(f"state.noise must be positive and finite, got {stats}")
            except ValueError as err:
                raise ValueError(f"state.members[{k}]: {err}") from None


# --------------------------------------------------------------------------- an average's predictions

@predictive_of.register
def _predictive(state: AverageState, X, model, *, key, num_samples: int, observation_noise: bool, scale,
                hint: str = "") -> Predictive:
    """:func:`jaxrvga.predictive` of an average: the mixture of its forecasters' predictives
    (:func:`mixture_moments`)."""
    check_members(state)
    each = each_forecaster(state, lambda m, c: predictive(
        m, X, model, key=key, num_samples=num_samples, observation_noise=observation_noise, scale=scale * c))
    return Predictive(*mixture_moments(weights(state), each.mean, each.var))


@log_predictive_of.register
def _log_predictive(state: AverageState, x, y, model, *, key, num_samples: int, num_points: int, scale):
    """:func:`jaxrvga.log_predictive` of an average: ``log sum_ks w_ks p_ks(y | x)``
    (:func:`mixture_log_density`)."""
    check_members(state)
    each = each_forecaster(state, lambda m, c: log_predictive(
        m, x, y, model, key=key, num_samples=num_samples, num_points=num_points, scale=scale * c))
    return mixture_log_density(state.log_weight, each)


@scores_of.register
def _scores(state: AverageState, X, y, model, scale) -> Scores:
    """:func:`jaxrvga.predictive_scores` of an average's chunk: its forecasters' scores mixed, the moments
    by :func:`mixture_moments` and each point's log density by :func:`mixture_log_density` (log space)."""
    check_members(state)
    each = each_forecaster(state, lambda m, c: scores_of(m, X, y, model, scale * c))
    w = weights(state)
    mean, var = mixture_moments(w, each.mean, each.var)
    param_var = mixture_moments(w, each.mean, each.param_var)[1]
    log_density = jax.vmap(lambda lp: mixture_log_density(state.log_weight, lp), in_axes=1)(each.log_density)
    return Scores.of_parts(mean, var, log_density, param_var)


@sample_of.register
def _sample_average(state: AverageState, key, num: int):
    """:func:`sample` of a :func:`jaxrvga.model_average` state: a forecaster ``(k, s)`` drawn by its
    weight ``w_ks = softmax(log_weight)``, then ``theta ~ N(mean_k, c_s P_k)`` (a draw of the mixture
    ``sum_ks w_ks N(mean_k, c_s P_k)``; with a learned noise variance, ``s2`` from the forecaster's own
    inverse-gamma first). Dense members share one batched :func:`~jaxrvga.beliefs.dense.sqrt_factor`
    (one Cholesky per member, not per draw); other beliefs draw from the member gathered per draw."""
    check_members(state)
    check_log_weight("state.log_weight", state.log_weight)
    return _average_draws(state, key, num)


@functools.partial(jax.jit, static_argnums=2)
def _average_draws(state: AverageState, key, num: int):
    """:func:`_sample_average`'s draws of a checked state, compiled once per shape."""
    K, S = state.log_weight.shape
    k_pick, k_s2, k_z = jax.random.split(key, 3)
    logits = jnp.where(jnp.isnan(state.log_weight), -jnp.inf, state.log_weight).ravel()
    pick = jax.random.categorical(k_pick, logits, shape=(num,))
    member, scale = pick // S, state.scales[pick % S]
    members = state.members
    ratio = None if state.rate_ratio is None else state.rate_ratio.ravel()[pick]  # each draw's forecaster's
    if isinstance(members, GaussianState):
        mean = members.mean[member]
        R = sqrt_factor(members.cov)[member]  # (num, d, d)
        z = jax.random.normal(k_z, mean.shape, mean.dtype)
        stats = noise.stats_of(members)
        rate = None if stats is None else stats.rate[member] * (1.0 if ratio is None else ratio)
        spread = scale if stats is None else scale * jax.vmap(
            lambda a, b, k: noise.sample_variance((a, b), k, 1)[0])(
                stats.shape[member], rate, jax.random.split(k_s2, num))
        return mean + jnp.sqrt(spread)[:, None] * jnp.einsum("nij,nj->ni", R, z)

    def one(k, q, c, key):
        one_member = _forecaster(jax.tree_util.tree_map(lambda a: a[k], members), q)
        belief, st = beliefs.of_state(one_member)
        return beliefs.draws(belief, st, noise.stats_of(one_member), key, 1, c)[0][0]

    return jax.vmap(one)(member, ratio, scale, jax.random.split(k_z, num))


def _check_average(st):
    """``AverageState``: ``log_weight`` (K, S) floating, not NaN and not +inf (-inf: a forecaster of
    weight 0) with at least one finite entry, ``scales`` (S,) finite and >= 0, K the leading axis of the
    stacked ``members`` (each checked by its own class), ``step`` and ``info`` scalars."""
    fc.floating("log_weight", st.log_weight)
    fc.floating("scales", st.scales)
    KS = fc.shape_of(st.log_weight)
    lw, sc = fc.values(st.log_weight), fc.values(st.scales)
    fc.need(len(KS) == 2 and not np.any(np.isnan(lw)) and not np.any(lw == np.inf) and np.any(np.isfinite(lw)),
          f"log_weight must be a (K, S) array without NaN or +inf and with a finite entry, got shape {KS}")
    fc.need(fc.shape_of(st.scales) == KS[1:] and np.all(np.isfinite(sc)) and np.all(sc >= 0),
          f"scales must be {KS[1:]} finite values >= 0, one per column of log_weight")
    sizes = {fc.shape_of(a)[:1] for a in jax.tree_util.tree_leaves(st.members)}
    fc.need(sizes == {KS[:1]}, f"members must be stacked along a leading axis of {KS[0]} (one per row of log_weight)")
    check_solver_info(st.info)
    fc.need(fc.shape_of(st.info.converged) == (), f"info fields must be scalars, got shape {fc.shape_of(st.info.converged)}")
    fc.need(fc.dtype_of(st.info.residual) == fc.dtype_of(st.log_weight) == fc.dtype_of(st.scales),
          "log_weight, scales and info.residual must share one dtype")
    fc.need(fc.is_array(st.step) and fc.shape_of(st.step) == () and fc.dtype_of(st.step) == np.dtype(np.int32),
          "step must be an int32 scalar")
    if st.rate_ratio is not None:
        fc.floating("rate_ratio", st.rate_ratio)
        ratio = fc.values(st.rate_ratio)
        fc.need(fc.shape_of(st.rate_ratio) == KS and np.all(np.isfinite(ratio)) and np.all(ratio > 0),
                f"rate_ratio must be a {KS} array of finite values > 0, one per forecaster")
    if st.prior is not None:
        fc.need(isinstance(st.prior, LearnedPrior), "prior must be None or a LearnedPrior")
        fc.need(fc.shape_of(st.prior.log_precision)[:1] == KS[:1],
                f"prior.log_precision must have a leading axis of {KS[0]}, one row per member")


io.register(AverageState, _check_average)


__all__ = ["AverageState", "LearnedPrior", "PREDICTIVE_SCALES", "LEARN_PRIOR", "FORGET", "model_average", "recipe",
           "member_filter", "with_member_filter", "weights", "prune", "each_member", "each_forecaster",
           "mixture_moments", "mixture_log_density", "usable_log_weight", "check_log_weight", "check_members"]
