"""The agents of the contextual bandits: the models of the arms, the rules and the scores they act on.

The models: :func:`per_arm` and :func:`shared`; the rules: :func:`thompson`, :func:`greedy`,
:func:`ucb` and :func:`ids` (:mod:`jaxrvga.bandits` describes them)."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .. import models
from .. import noise as noise_belief
from ..beliefs import GaussianState, of_state, sample
from ..beliefs.dense import sqrt_factor
from ..core import Filter
from ..kernels import special
from ..posterior_predictive import predictive
from ..validation import is_concrete, positive_int

#: The rules of an :class:`Agent`.
RULES = ("thompson", "greedy", "ucb", "ids")
#: The joint draws of the arms that information-directed sampling (:func:`ids`) makes a round.
NUM_DRAWS = 256


class PerArm(NamedTuple):
    """One belief per arm: the filter ``flt`` of each of ``num_arms`` arms (see :func:`per_arm`)."""

    flt: Filter
    num_arms: int


class Shared(NamedTuple):
    """One belief of a K-output model ``h(theta, x)`` (K,), held by ``flt`` (see :func:`shared`)."""

    flt: Filter
    h: Callable
    num_arms: int


class Agent(NamedTuple):
    """A bandit agent: the model of the arms (:class:`PerArm` or :class:`Shared`), the ``rule``
    (one of :data:`RULES`), UCB's ``alpha``, whether rewards are ``standardize``-d online,
    Thompson's ``scale`` (draws of ``N(mean, scale P)``), whether its draws are ``optimistic``
    (each arm's score ``max(draw, mean)``), the draws a round of ``ids`` (``num_draws``) and the
    ``context_scale`` ``c`` (0: contexts as they are; ``c > 0``: each context divided by
    ``sqrt(mean ||x||^2 / c)`` over the contexts seen so far, itself included, so that a linear
    arm's prior ``N(0, v I)`` says a reward's prior variance is ``v c`` whatever the features'
    units). Hashable by value: equal agents share one compiled :func:`run`."""

    arms: Any
    rule: str = "thompson"
    alpha: float = 1.0
    standardize: bool = False
    scale: float = 1.0
    optimistic: bool = False
    num_draws: int = NUM_DRAWS
    context_scale: float = 0.0

    @property
    def num_arms(self) -> int:
        """K."""
        return self.arms.num_arms


class Welford(NamedTuple):
    """Running ``count``, ``mean`` and sum of squared deviations ``m2`` of the rewards seen
    (Welford 1962): variance ``m2 / (count - 1)``."""

    count: jax.Array
    mean: jax.Array
    m2: jax.Array


class Offsets(NamedTuple):
    """What a change of the rewards' units moves in each arm of a fleet that restandardises its whole
    history (:func:`restandardizes`; module docstring, "Reward scale"): ``ones_mean`` (K, d), the
    posterior mean of regressing a constant 1 on the arm's contexts (``P X^T 1``); ``cross`` and
    ``ones`` (K,), the residual products ``y^T S 1`` and ``1^T S 1`` of the standardised rewards ``y``
    and of 1 (``S = I - X P X^T``, whose ``y^T S y / 2`` the noise's rate adds); ``prior_rate`` (K,),
    the noise prior's rate (0 for a known noise variance)."""

    ones_mean: jax.Array
    cross: jax.Array
    ones: jax.Array
    prior_rate: jax.Array


class AgentState(NamedTuple):
    """An agent's state: ``beliefs`` (the stacked fleet of :class:`PerArm`, or the one state of
    :class:`Shared`), the ``rewards`` statistics (:class:`Welford`), the rounds played (``step``)
    and skipped (``skipped``), the statistics of the squared norms of the contexts learned from
    (``contexts``, a :class:`Welford` kept where the agent has a ``context_scale``) and, for a fleet
    that restandardises its history, its :class:`Offsets` (``None`` otherwise)."""

    beliefs: Any
    rewards: Welford
    step: jax.Array
    skipped: jax.Array
    contexts: Welford
    offsets: Optional[Offsets] = None


class BanditRun(NamedTuple):
    """What :func:`run` returns: the final ``state``, and per round the ``arms`` pulled, the
    ``rewards`` observed, the expected ``regret`` and whether the round was ``flagged`` (skipped)."""

    state: AgentState
    arms: jax.Array
    rewards: jax.Array
    regret: jax.Array
    flagged: jax.Array


def _num_arms(num_arms) -> int:
    k = positive_int("num_arms", num_arms)
    if k < 2:
        raise ValueError(f"num_arms must be at least 2 (a bandit chooses between arms), got {num_arms!r}")
    return k


def per_arm(flt: Filter, num_arms: int) -> PerArm:
    """One belief per arm, each a state of ``flt`` (any filter of the library: ``jr.kalman(None)``,
    ``jr.rvga(jr.models.logistic())``, ``jr.lrvga(...)``, ...); the input ``x`` of a round is each
    arm's input. K = ``num_arms`` >= 2.

    Args:
      flt: the filter of each arm's belief.
      num_arms: ``K >= 2``.

    Returns:
      A :class:`PerArm`, for :func:`thompson`, :func:`greedy` or :func:`ucb`.
    """
    if not isinstance(flt, Filter):
        raise ValueError(f"flt must be a jaxrvga.Filter, got {type(flt).__name__}")
    return PerArm(flt, _num_arms(num_arms))


class _ByFields:
    """A callable equal and hashable by its fields (a static ``jit`` argument), weakly referable
    (``jax.eval_shape`` keeps a weak reference to the function it traces)."""

    __slots__ = ("__weakref__",)

    def _fields(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other):
        return type(other) is type(self) and self._fields() == other._fields()

    def __hash__(self):
        return hash((type(self),) + self._fields())


class _Head(_ByFields):
    """``(theta, (x, arm)) -> h(theta, x)[arm]``: the predictor of the pulled head."""

    __slots__ = ("h",)

    def __init__(self, h):
        self.h = h

    def __call__(self, theta, xa):
        x, arm = xa
        return jnp.ravel(self.h(theta, x))[arm]


def heads(h: Callable, family: Optional[models.Family] = None, unravel: Optional[Callable] = None) -> models.Model:
    """The model of one of K heads: ``eta = h(theta, x)[arm]`` for the input ``(x, arm)``, ``h(theta, x)``
    the K outputs (a network with K heads), ``family`` their output (default ``gaussian(None)``:
    the noise variance learned). Build any filter on it and pass that to :func:`shared`.

    Args:
      h: ``h(theta, x) -> (K,)``, the K heads' outputs.
      family: the output's :class:`~jaxrvga.models.Family` (default ``gaussian(None)``).
      unravel: as :func:`jaxrvga.models.nonlinear`'s.

    Returns:
      A nonlinear :class:`~jaxrvga.models.Model` whose input is ``(x, arm)``.
    """
    if not callable(h):
        raise ValueError(f"h must be a function h(theta, x) -> (K,), got {type(h).__name__}")
    family = models.gaussian(None) if family is None else family
    return models.nonlinear(_Head(h), family, unravel)


def shared(flt: Filter, num_arms: int) -> Shared:
    """One belief of a K-output model: ``flt`` built on :func:`heads` ``(h, ...)`` (any belief and
    scheme: ``jr.rvga(jr.bandits.heads(h), "ekf")``, ``jr.lrvga(...)``); a round absorbs
    ``(x, arm)`` and the pulled arm's reward only.

    Args:
      flt: a filter built on :func:`heads`.
      num_arms: ``K >= 2``, the number of heads.

    Returns:
      A :class:`Shared`, for :func:`thompson`, :func:`greedy` or :func:`ucb`.
    """
    if not isinstance(flt, Filter):
        raise ValueError(f"flt must be a jaxrvga.Filter, got {type(flt).__name__}")
    predict = getattr(flt.model, "predict", None)
    head = predict if isinstance(predict, _Head) else getattr(predict, "args", (None,))[0]
    if not isinstance(head, _Head):
        raise ValueError("flt must be built on jr.bandits.heads(h, ...), the model of the pulled head")
    h = head.h
    if predict is not head:  # built with unravel: h sees the unravelled parameters
        h = _Unravelled(head.h, predict.args[1])
    return Shared(flt, h, _num_arms(num_arms))


class _Unravelled(_ByFields):
    """``(theta, x) -> h(unravel(theta), x)``."""

    __slots__ = ("h", "unravel")

    def __init__(self, h, unravel):
        self.h, self.unravel = h, unravel

    def __call__(self, theta, x):
        return self.h(self.unravel(theta), x)


def _nonnegative(name, value) -> float:
    if isinstance(value, bool) or jnp.shape(value) != () or not np.isfinite(float(value)) or float(value) < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _agent(arms, rule, alpha, standardize, context_scale, scale=1.0, optimistic=False, num_draws=NUM_DRAWS) -> Agent:
    if not isinstance(arms, (PerArm, Shared)):
        raise ValueError(f"arms must be jr.bandits.per_arm(...) or jr.bandits.shared(...), got {type(arms).__name__}")
    if not isinstance(optimistic, (bool, np.bool_)):
        raise ValueError(f"optimistic must be True or False, got {optimistic!r}")
    num_draws = positive_int("num_draws", num_draws, 2)  # the gain is a variance over the draws
    return Agent(arms, rule, _nonnegative("alpha", alpha), bool(standardize), _nonnegative("scale", scale),
                 bool(optimistic), num_draws, _nonnegative("context_scale", context_scale))


def thompson(arms, *, scale: float = 1.0, standardize: bool = False, optimistic: bool = False,
             context_scale: float = 0.0) -> Agent:
    """Thompson sampling: the best arm under one draw of the belief (module docstring). ``scale``: draws
    of ``N(mean, scale P)`` instead (``scale < 1`` a tempered posterior, Chapelle & Li 2011; 0 is greedy).
    ``optimistic``: each arm scored by ``max(draw, mean)`` (optimistic Bayesian sampling, May et al.
    2012): a draw below an arm's mean never lowers its score, so only the upper half of the
    posterior explores.

    Args:
      arms: a :class:`PerArm` or :class:`Shared`.
      scale: the covariance scale of the draws, >= 0.
      standardize: standardise the rewards online (:class:`Welford` statistics) before the belief sees them.
      context_scale: scale each context to a mean squared norm ``c`` over those seen (:class:`Agent`); 0: off.
      optimistic: score each arm by the larger of its draw and its mean.

    Returns:
      An :class:`Agent`.
    """
    return _agent(arms, "thompson", 1.0, standardize, context_scale, scale, optimistic)


def greedy(arms, *, standardize: bool = False, context_scale: float = 0.0) -> Agent:
    """The best arm under the belief's mean (the plug-in).

    Args:
      arms: a :class:`PerArm` or :class:`Shared`.
      standardize: standardise the rewards online (:class:`Welford` statistics) before the belief sees them.
      context_scale: scale each context to a mean squared norm ``c`` over those seen (:class:`Agent`); 0: off.

    Returns:
      An :class:`Agent`.
    """
    return _agent(arms, "greedy", 1.0, standardize, context_scale)


def ucb(arms, alpha: float = 1.0, *, standardize: bool = False, context_scale: float = 0.0) -> Agent:
    """The arm of the largest ``E[eta_k] + alpha sd[eta_k]`` under the predictive (LinUCB's rule).

    Args:
      arms: a :class:`PerArm` or :class:`Shared`.
      alpha: the weight of the predictive standard deviation, >= 0.
      standardize: standardise the rewards online (:class:`Welford` statistics) before the belief sees them.
      context_scale: scale each context to a mean squared norm ``c`` over those seen (:class:`Agent`); 0: off.

    Returns:
      An :class:`Agent`.
    """
    return _agent(arms, "ucb", alpha, standardize, context_scale)


def ids(arms, *, num_draws: int = NUM_DRAWS, scale: float = 1.0, standardize: bool = False,
        context_scale: float = 0.0) -> Agent:
    """Information-directed sampling (Russo & Van Roy 2018; the variance-based form of their sec. 6):
    the arm of the smallest information ratio ``regret_k^2 / gain_k``, both estimated from
    ``num_draws`` joint draws of the arms' predictors (:func:`regret_and_gain`). An arm is explored
    only where what it would teach about the best arm is worth its expected regret: an arm that is
    surely worse and one whose pull would not change the best arm are both left alone.

    Args:
      arms: a :class:`PerArm` or :class:`Shared`.
      num_draws: draws of the belief a round, >= 2.
      scale: the covariance scale of the draws, >= 0.
      standardize: standardise the rewards online (:class:`Welford` statistics) before the belief sees them.
      context_scale: scale each context to a mean squared norm ``c`` over those seen (:class:`Agent`); 0: off.

    Returns:
      An :class:`Agent`.
    """
    return _agent(arms, "ids", 1.0, standardize, context_scale, scale, num_draws=num_draws)


def init(agent: Agent, state, *, stacked: bool = False) -> AgentState:
    """The agent's initial state from a state of its filter: for :func:`per_arm`, one state copied to
    every arm (``stacked=True``: a fleet already stacked along a leading axis K, e.g.
    ``jax.vmap(flt.init)(...)``, arms of different priors); for :func:`shared`, the state itself.

    Args:
      agent: an :class:`Agent`.
      state: a state of its filter (stacked along a leading K axis with ``stacked``).
      stacked: ``state`` is already one state per arm.

    Returns:
      An :class:`AgentState` (no rounds played, empty reward statistics).
    """
    K = agent.num_arms
    if isinstance(agent.arms, PerArm):
        if stacked:
            bad = [jnp.shape(a) for a in jax.tree_util.tree_leaves(state) if jnp.shape(a)[:1] != (K,)]
            if bad:
                raise ValueError(f"state: a stacked fleet needs the leading axis num_arms = {K} on every array, "
                                 f"got shape {bad[0]}")
        else:
            state = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (K,) + jnp.shape(a)), state)
    dtype = jnp.result_type(state.mean) if hasattr(state, "mean") else jnp.result_type(float)
    zero = jnp.zeros((), dtype)
    offsets = None
    if restandardizes(agent, state):
        none = jnp.zeros((K,), dtype)
        stats = noise_belief.stats_of(state)
        offsets = Offsets(jnp.zeros_like(state.mean), none, none, none if stats is None else stats.rate)
    return AgentState(state, Welford(zero, zero, zero), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32),
                      Welford(zero, zero, zero), offsets)


def restandardizes(agent: Agent, fleet) -> bool:
    """Whether an agent with ``standardize`` keeps its whole history in the units of the rewards seen so
    far (module docstring, "Reward scale"): a :func:`per_arm` fleet of exact Kalman steps
    (``jr.kalman``: a dense belief, a linear-Gaussian model of unit or learned noise variance, no
    dynamics but ``process_noise`` and ``additive_noise``) whose prior mean is a concrete 0.

    Args:
      agent: an :class:`Agent`.
      fleet: the arms' stacked states.

    Returns:
      A Python bool.
    """
    spec = agent.arms.flt.spec if isinstance(agent.arms, PerArm) else None
    if not (agent.standardize and spec is not None and spec.scheme.name == "exact"
            and isinstance(fleet, GaussianState) and spec.model.is_glm and spec.model.family.name == "gaussian"):
        return False
    family, dyn = spec.model.family, spec.dynamics
    unit = family.learned_noise or float(family.variance(jnp.zeros(()))) == 1.0
    static = dyn.decay is None and dyn.decay_to is None and dyn.noise_discount is None
    return unit and static and is_concrete(fleet.mean) and not np.any(np.asarray(fleet.mean))


# --------------------------------------------------------------------------- statistics of the stream

def _welford(stats: Welford, r) -> Welford:
    count = stats.count + 1
    delta = r - stats.mean
    mean = stats.mean + delta / count
    return Welford(count, mean, stats.m2 + delta * (r - mean))


def _context_stats(agent: Agent, stats: Welford, x) -> Welford:
    """The statistics of the contexts' squared norms with ``x``'s added (kept without ``context_scale``)."""
    if not agent.context_scale:
        return stats
    if not isinstance(x, (jax.Array, np.ndarray)):
        raise ValueError(f"context_scale needs contexts that are arrays, got {type(x).__name__}")
    return _welford(stats, jnp.sum(jnp.square(x)).astype(stats.mean.dtype))


def _scaled_context(agent: Agent, stats: Welford, x):
    """``x / sqrt(mean ||x||^2 / c)`` over the contexts of ``stats`` (``x`` itself while that mean is 0,
    or without ``context_scale``)."""
    if not agent.context_scale:
        return x
    ratio = agent.context_scale / jnp.where(stats.mean > 0, stats.mean, agent.context_scale)
    return x * jnp.sqrt(ratio)  # an integer context is promoted, not the scale truncated


# --------------------------------------------------------------------------- scores of the rules

def _fleet_marginals(fleet, x):
    """``(m, v)`` (K,): ``x^T m_k`` and ``x^T P_k x`` of every arm of a fleet of GLM beliefs. A dense
    fleet by the batched ``P_k x`` (rows of ``P_k`` read in order: the vmapped ``x^T P_k`` of
    ``Dense.marginal`` cost 3-5 times as much at K = 10, d = 786 on a CPU)."""
    if isinstance(fleet, GaussianState):
        return fleet.mean @ x, jnp.einsum("ki,i->k", jnp.einsum("kij,j->ki", fleet.cov, x), x)

    def one(member):
        belief, st = of_state(member)
        return belief.marginal(st, x)

    return jax.vmap(one)(fleet)


def _student_draw(stats, key, m, v):
    """``m + sqrt(s2 v) z`` per arm, ``z ~ N(0, 1)`` and ``s2 ~ InvGamma(a_k, b_k)`` (1 without ``stats``)."""
    k_z, k_s2 = jax.random.split(key)
    z = jax.random.normal(k_z, m.shape, m.dtype)
    if stats is None:
        return m + jnp.sqrt(jnp.maximum(v, 0.0)) * z
    s2 = stats.rate / special.gamma_draws(k_s2, stats.shape, m.dtype)
    return m + jnp.sqrt(jnp.maximum(s2 * v, 0.0)) * z


def _fleet_draws(fleet, key):
    """One draw of ``theta_k`` from each arm's belief (K, d): a dense fleet through one batched
    :func:`~jaxrvga.beliefs.dense.sqrt_factor` (one Cholesky per arm), others by :func:`jaxrvga.sample`."""
    stats = noise_belief.stats_of(fleet)
    K = fleet.mean.shape[0]
    if isinstance(fleet, GaussianState):
        k_z, k_s2 = jax.random.split(key)
        z = jax.random.normal(k_z, fleet.mean.shape, fleet.mean.dtype)
        step = jnp.einsum("kij,kj->ki", sqrt_factor(fleet.cov), z)
        if stats is not None:
            s2 = stats.rate / special.gamma_draws(k_s2, stats.shape, fleet.mean.dtype)
            step = jnp.sqrt(s2)[:, None] * step
        return fleet.mean + step
    return jax.vmap(lambda s, k: sample(s, k, 1)[0])(fleet, jax.random.split(key, K))


def _predictor_draw(agent: Agent, beliefs, key, x):
    """The K predictors ``eta_k`` (K,) under one draw of the belief ``N(mean, scale P)`` (module
    docstring: a per-arm GLM draws ``eta_k`` from its exact marginal, other models draw ``theta``)."""
    flt = agent.arms.flt
    if isinstance(agent.arms, PerArm):
        model = flt.model
        if model.is_glm:
            m, v = _fleet_marginals(beliefs, x)
            return _student_draw(noise_belief.stats_of(beliefs), key, m, agent.scale * v)
        thetas = beliefs.mean + jnp.sqrt(agent.scale) * (_fleet_draws(beliefs, key) - beliefs.mean)
        return jax.vmap(lambda th: jnp.ravel(model.predict(th, x))[0])(thetas)
    theta = beliefs.mean + jnp.sqrt(agent.scale) * (sample(beliefs, key, 1)[0] - beliefs.mean)
    return jnp.ravel(agent.arms.h(theta, x))


def _at_mean(agent: Agent, beliefs, x):
    """The K predictors at the belief's mean (the greedy scores)."""
    if isinstance(agent.arms, PerArm):
        model = agent.arms.flt.model
        if model.is_glm:
            return beliefs.mean @ x
        return jax.vmap(lambda mean: jnp.ravel(model.predict(mean, x))[0])(beliefs.mean)
    return jnp.ravel(agent.arms.h(beliefs.mean, x))


def regret_and_gain(draws):
    """``(regret, gain)`` (K,) of each arm from ``n`` joint draws ``(n, K)`` of the arms' predictors:
    the expected regret ``E[max_j eta_j] - E[eta_k]`` and the variance-based information gain
    ``sum_a P(a* = a) (E[eta_k | a* = a] - E[eta_k])^2`` about the best arm ``a*`` (Russo & Van Roy
    2018, sec. 6), as Monte-Carlo averages over the draws.

    Args:
      draws: ``(n, K)``, draws of the K predictors under the belief.

    Returns:
      ``(regret, gain)``, two (K,) arrays, both >= 0 up to rounding; where every draw names the same
      best arm, that arm's regret and every gain are exactly 0, so that IDS plays it.
    """
    n, K = draws.shape
    best = jax.nn.one_hot(jnp.argmax(draws, axis=1), K, dtype=draws.dtype)  # (n, K): a* of each draw
    mean = jnp.mean(draws, axis=0)
    regret = jnp.mean(jnp.max(draws, axis=1)) - mean
    count = jnp.sum(best, axis=0)
    given_best = (best.T @ draws) / jnp.maximum(count, 1.0)[:, None]  # (a, k): E[eta_k | a* = a]
    gain = jnp.sum((count / n)[:, None] * (given_best - mean) ** 2, axis=0)
    # every draw names one best arm: no information to gain and no regret for that arm, exactly (as
    # differences of rounded sums they are rounding, and their ratio would decide the arm)
    sure = count == n
    return jnp.where(sure, 0.0, regret), jnp.where(jnp.any(sure), 0.0, gain)


def information_ratio_scores(draws):
    """IDS's scores from ``n`` joint draws ``(n, K)`` of the arms' predictors: minus the information ratio
    ``max(regret_k, 0)^2 / gain_k`` of :func:`regret_and_gain` (a gain of 0 read as the smallest positive
    float, so that an arm with no regret scores 0, the best possible, and one with regret but nothing to
    learn scores far below every other).

    Args:
      draws: ``(n, K)``, draws of the K predictors under the belief.

    Returns:
      The (K,) scores; IDS plays their arg max.
    """
    regret, gain = regret_and_gain(draws)
    return -jnp.maximum(regret, 0.0) ** 2 / jnp.maximum(gain, jnp.finfo(gain.dtype).tiny)


def scores(agent: Agent, state: AgentState, key, x):
    """The K scores whose arg max is the agent's arm for the context ``x`` (module docstring):
    ``eta_k`` under one draw (``thompson``), at the mean (``greedy``), ``E + alpha sd`` (``ucb``), or
    minus the information ratio ``regret_k^2 / gain_k`` over ``num_draws`` draws (``ids``,
    :func:`information_ratio_scores`, of the draws' mean rewards ``E[r | eta_k]``: unlike an arg max, the
    ratio changes with a nonlinear link).

    Args:
      agent: an :class:`Agent`.
      state: its :class:`AgentState`.
      key: a PRNG key (used by ``thompson`` and ``ids``).
      x: the context, the filter's ``x`` (e.g. (d,)).

    Returns:
      The (K,) scores.
    """
    flt = agent.arms.flt
    beliefs = state.beliefs
    x = _scaled_context(agent, _context_stats(agent, state.contexts, x), x)
    if isinstance(agent.arms, PerArm) and flt.model is None:
        raise ValueError("per_arm needs a filter with an observation model (flt.model) to score the arms")
    if agent.rule == "thompson":
        drawn = _predictor_draw(agent, beliefs, key, x)
        return jnp.maximum(drawn, _at_mean(agent, beliefs, x)) if agent.optimistic else drawn
    if agent.rule == "greedy":
        return _at_mean(agent, beliefs, x)
    if agent.rule == "ids":  # regret and information in the rewards' units, E[r | eta] (a logistic arm's sig(eta))
        draws = jax.vmap(lambda k: _predictor_draw(agent, beliefs, k, x))(jax.random.split(key, agent.num_draws))
        return information_ratio_scores(flt.model.family.mean(draws))
    if isinstance(agent.arms, PerArm):
        if flt.model.is_glm:
            m, v = _fleet_marginals(beliefs, x)
            stats = noise_belief.stats_of(beliefs)
            v = v if stats is None else jax.vmap(noise_belief.scale_variance)(stats, v)
            return m + agent.alpha * jnp.sqrt(jnp.maximum(v, 0.0))
        one = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], x)
        pred = jax.vmap(lambda s: predictive(s, one, flt.model))(beliefs)
        return pred.mean.reshape(-1) + agent.alpha * jnp.sqrt(jnp.maximum(pred.var.reshape(-1), 0.0))
    K = agent.num_arms
    X = (jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (K,) + jnp.shape(a)), x), jnp.arange(K))
    pred = predictive(beliefs, X, flt.model)
    return pred.mean + agent.alpha * jnp.sqrt(jnp.maximum(pred.var, 0.0))


def act(agent: Agent, state: AgentState, key, x):
    """The arm (int32) the agent pulls for context ``x``: the arg max of :func:`scores`.

    Args:
      agent: an :class:`Agent`.
      state: its :class:`AgentState`.
      key: a PRNG key (used by ``thompson``).
      x: the context.

    Returns:
      A 0-d int32 array in ``[0, K)``.
    """
    return jnp.argmax(scores(agent, state, key, x)).astype(jnp.int32)


__all__ = ["RULES", "PerArm", "Shared", "Agent", "Welford", "Offsets", "AgentState", "restandardizes", "BanditRun",
           "per_arm", "heads", "shared", "thompson", "greedy", "ucb", "ids", "regret_and_gain", "init", "scores", "act"]
