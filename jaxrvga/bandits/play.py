"""Playing a contextual-bandit agent: one round learned, a logged run in one scan, the default agent.

:func:`update` learns from one round, :func:`run` plays a logged data set in one ``lax.scan`` and
:func:`linear` builds the default agent (:mod:`jaxrvga.bandits` describes them)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import noise as noise_belief
from ..validation import check_key, is_concrete, positive_int
from .agents import (NUM_DRAWS, RULES, Agent, AgentState, BanditRun, Offsets, PerArm, Welford, _context_stats,
                     _nonnegative, _scaled_context, _welford, act, greedy, ids, init, per_arm, scores, thompson,
                     ucb)


# --------------------------------------------------------------------------- learning

def _units(stats: Welford):
    """``(mean, sd)`` of the rewards of ``stats`` (``sd = 1`` before two, and floored at ``sqrt(eps)``
    times the mean's size)."""
    var = jnp.where(stats.count > 1, stats.m2 / jnp.maximum(stats.count - 1, 1), 1.0)
    floor = jnp.sqrt(jnp.finfo(var.dtype).eps) * (1.0 + jnp.abs(stats.mean))
    return stats.mean, jnp.maximum(jnp.sqrt(var), floor)


def _standardized(stats: Welford, r):
    """``(r - mean) / sd`` of the rewards seen so far, ``r`` included (:func:`_units`)."""
    mean, sd = _units(stats)
    return (r - mean) / sd


def _restandardized(fleet, offsets: Offsets, before: Welford, after: Welford):
    """The fleet and its :class:`Offsets` with every reward absorbed so far moved from the units of
    ``before`` to those of ``after``: ``y -> a y + c``, ``a = sd_0 / sd_1``, ``c = (mean_0 - mean_1) /
    sd_1``. Each arm's posterior mean is linear in its rewards (``m -> a m + c P X^T 1``) and its
    residual sum of squares quadratic (``y^T S y -> a^2 y^T S y + 2 a c y^T S 1 + c^2 1^T S 1``), so the
    result is the posterior of the whole history standardised anew, exactly."""
    (mean0, sd0), (mean1, sd1) = _units(before), _units(after)
    a, c = sd0 / sd1, (mean0 - mean1) / sd1
    fleet = fleet._replace(mean=a * fleet.mean + c * offsets.ones_mean)
    if fleet.noise is not None:
        rss = 2.0 * (fleet.noise.rate - offsets.prior_rate)
        rss = jnp.maximum(a * a * rss + 2.0 * a * c * offsets.cross + c * c * offsets.ones, 0.0)
        fleet = fleet._replace(noise=fleet.noise._replace(rate=offsets.prior_rate + 0.5 * rss))
    return fleet, offsets._replace(cross=a * offsets.cross + c * offsets.ones)


def _absorbed_ones(offsets: Offsets, arm, prior, posterior, x, y):
    """``offsets`` after the pulled ``arm``'s exact step from ``prior`` to ``posterior`` on ``(x, y)``,
    the regression of a constant 1 taking the same step: its gain ``g = P x / s`` is ``P_post x`` (unit
    noise variance) and ``1 / s = 1 - x^T g``. A step the filter's guard skipped moves nothing."""
    x, y = (jnp.asarray(a, offsets.ones_mean.dtype) for a in (x, y))
    g = posterior.cov @ x
    inv_s = 1.0 - x @ g
    e_y, e_1 = y - x @ prior.mean, 1.0 - x @ offsets.ones_mean[arm]
    kept = posterior.info.converged
    return Offsets(offsets.ones_mean.at[arm].add(jnp.where(kept, g * e_1, 0.0)),
                   offsets.cross.at[arm].add(jnp.where(kept, e_y * e_1 * inv_s, 0.0)),
                   offsets.ones.at[arm].add(jnp.where(kept, e_1 * e_1 * inv_s, 0.0)), offsets.prior_rate)


def update(agent: Agent, state: AgentState, x, arm, reward):
    """``(state, flagged)``: ``state`` after observing ``reward`` for the pulled ``arm`` at context
    ``x``. :func:`per_arm` gathers the arm's state, updates it and scatters it back (the other arms
    untouched, at the cost of one arm's update); :func:`shared` absorbs ``((x, arm), reward)``.
    A reward or a context that is not finite (NaN or inf) or an arm out of ``[0, K)`` skips the round
    (the belief and the statistics of the rewards and contexts kept) and ``flagged`` is True; checked
    and refused with ``ValueError`` instead where they are concrete.

    Args:
      agent: an :class:`Agent`.
      state: its :class:`AgentState`.
      x: the context.
      arm: the pulled arm, an integer scalar.
      reward: the observed reward, a real scalar.

    Returns:
      ``(state, flagged)``: the new :class:`AgentState` and a 0-d bool.
    """
    K = agent.num_arms
    if not jnp.issubdtype(jnp.result_type(arm), jnp.integer) or isinstance(arm, (bool, np.bool_)):
        raise ValueError(f"arm must be an integer in [0, {K}), got {arm!r} of dtype {jnp.result_type(arm)}")
    if is_concrete(arm) and not (np.ndim(arm) == 0 and 0 <= int(arm) < K):
        raise ValueError(f"arm must be an integer in [0, {K}), got {arm!r}")
    if is_concrete(reward) and (np.ndim(reward) != 0 or not np.isfinite(float(reward))):
        raise ValueError(f"reward must be a finite scalar, got {reward!r}")
    leaves = jax.tree_util.tree_leaves(x)
    if all(is_concrete(a) for a in leaves) and not all(np.all(np.isfinite(np.asarray(a))) for a in leaves):
        raise ValueError("x: the context must be finite, got NaN or inf")
    return _update(agent, state, x, arm, reward)


def _finite(x):
    """Whether every floating entry of the context ``x`` (an array or a pytree) is finite."""
    leaves = [jnp.all(jnp.isfinite(a)) for a in jax.tree_util.tree_leaves(x)
              if jnp.issubdtype(jnp.result_type(a), jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _update(agent: Agent, state: AgentState, x, arm, reward):
    arm = jnp.asarray(arm, jnp.int32)
    reward = jnp.asarray(reward, state.rewards.mean.dtype)
    ok = jnp.isfinite(reward) & _finite(x) & (arm >= 0) & (arm < agent.num_arms)
    flt = agent.arms.flt

    def learn(beliefs, rewards, contexts, offsets):
        before, rewards = rewards, _welford(rewards, reward)
        if offsets is not None:  # the whole history in the new units
            beliefs, offsets = _restandardized(beliefs, offsets, before, rewards)
        y = _standardized(rewards, reward) if agent.standardize else reward
        contexts = _context_stats(agent, contexts, x)
        xs = _scaled_context(agent, contexts, x)
        if isinstance(agent.arms, PerArm):
            member = jax.tree_util.tree_map(lambda a: a[arm], beliefs)
            new = flt.update(member, xs, y)
            beliefs = jax.tree_util.tree_map(lambda a, b: a.at[arm].set(b), beliefs, new)
            if offsets is not None:
                offsets = _absorbed_ones(offsets, arm, flt.predicted(member), new, xs, y)
        else:
            beliefs = flt.update(beliefs, (xs, arm), y)
        return beliefs, rewards, contexts, offsets

    kept = (state.beliefs, state.rewards, state.contexts, state.offsets)
    beliefs, rewards, contexts, offsets = jax.lax.cond(ok, learn, lambda *kept: kept, *kept)
    out = AgentState(beliefs, rewards, state.step + 1, state.skipped + (~ok).astype(jnp.int32), contexts, offsets)
    return out, ~ok


# --------------------------------------------------------------------------- a whole run

def _run(agent: Agent, state: AgentState, key, contexts, rewards, expected):
    T = rewards.shape[0]
    keys = jax.random.split(key, T)

    def round_(carry, inputs):
        x, r, m, k = inputs
        arm = act(agent, carry, k, x)
        got = r[arm]
        carry, flagged = _update(agent, carry, x, arm, got)
        best = jnp.max(jnp.where(jnp.isnan(m), -jnp.inf, m))
        return carry, (arm, got, best - m[arm], flagged)

    state, (arms, got, regret, flagged) = jax.lax.scan(round_, state, (contexts, rewards, expected, keys))
    return BanditRun(state, arms, got, regret, flagged)


_run_jit = jax.jit(_run, static_argnums=0)


def _check_table(name, a, T, K):
    a = jnp.asarray(a)
    if not jnp.issubdtype(a.dtype, jnp.floating) and not jnp.issubdtype(a.dtype, jnp.integer):
        raise ValueError(f"{name} must be a real (T, K) array, got dtype {a.dtype}")
    if a.ndim != 2 or a.shape != (T, K):
        raise ValueError(f"{name} must have shape (T, K) = ({T}, {K}): one reward per round and arm, got {a.shape}")
    return a


def _check_scores(agent: Agent, state: AgentState, key, x):
    """The agent's scores of the context ``x`` must be K numbers, one per arm (by shape, nothing computed):
    a state of another agent or a model ``h`` of another number of heads would otherwise pull arms that
    the regret reads at a clamped index. ``ValueError`` naming ``state`` or ``contexts``."""
    try:
        shape = jax.eval_shape(lambda s, k, x: scores(agent, s, k, x), state, key, x).shape
    except (TypeError, ValueError) as err:
        raise ValueError(f"contexts: the agent cannot score a context of this shape ({err})") from None
    if shape != (agent.num_arms,):
        raise ValueError(f"state: the arms' scores have shape {shape}, need (num_arms,) = ({agent.num_arms},): a "
                         f"state of an agent of another number of arms, or a model h of another number of heads")


def run(agent: Agent, state: AgentState, key, contexts, rewards, expected=None) -> BanditRun:
    """Play the logged full-feedback data ``(contexts[t], rewards[t, :])`` for ``t < T`` in one jitted
    ``lax.scan``: at each round the agent picks an arm for ``contexts[t]`` (:func:`act`, with a key
    split from ``key``), sees ``rewards[t, arm]`` and learns from it (:func:`update`).

    ``contexts``: (T, d) (or a pytree with leading axis T, what the filter's ``x`` is); ``rewards``
    and ``expected`` (default ``rewards``): (T, K). The regret of round t is
    ``max_k expected[t, k] - expected[t, a_t]`` (the expected regret, NaN entries of ``expected``
    left out of the max). A round whose pulled reward or context is not finite is skipped and flagged.
    Returns a :class:`BanditRun`. Wrong shapes, T = 0 and a bad key: ``ValueError`` naming the argument.

    Args:
      agent: an :class:`Agent`.
      state: its initial :class:`AgentState`.
      key: a PRNG key.
      contexts: the contexts, leading axis T.
      rewards: the (T, K) rewards of every arm.
      expected: the (T, K) expected rewards of the regret (default ``rewards``).

    Returns:
      A :class:`BanditRun`: the final state and the (T,) arms, rewards, regrets and flags.
    """
    if not isinstance(agent, Agent):
        raise ValueError(f"agent must be a jr.bandits agent (thompson, greedy, ucb), got {type(agent).__name__}")
    if not isinstance(state, AgentState):
        raise ValueError(f"state must be an AgentState (jr.bandits.init), got {type(state).__name__}")
    key = check_key(key, required=True, needed_by="bandits.run", pass_as="its key argument, jax.random.key(seed)")
    K = agent.num_arms
    rewards = jnp.asarray(rewards)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must have shape (T, K) with K = num_arms = {K}, got {rewards.shape}")
    T = rewards.shape[0]
    if T == 0:
        raise ValueError("rewards: T = 0 rounds; a run needs at least one round")
    rewards = _check_table("rewards", rewards, T, K)
    expected = rewards if expected is None else _check_table("expected", expected, T, K)
    lengths = {jnp.shape(a)[0] if jnp.ndim(a) else None for a in jax.tree_util.tree_leaves(contexts)}
    if lengths != {T}:
        raise ValueError(f"contexts must have the leading (round) axis T = {T} of rewards, got {sorted(lengths, key=str)}")
    if isinstance(agent.arms, PerArm) and agent.arms.flt.model is not None and agent.arms.flt.model.is_glm:
        d = state.beliefs.mean.shape[-1]
        if jnp.ndim(contexts) != 2 or jnp.shape(contexts)[1] != d:
            raise ValueError(f"contexts must have shape (T, d) = ({T}, {d}) to match the arms' beliefs, "
                             f"got {jnp.shape(contexts)}")
    _check_scores(agent, state, key, jax.tree_util.tree_map(lambda a: a[0], contexts))
    dtype = state.rewards.mean.dtype
    return _run_jit(agent, state, key, contexts, rewards.astype(dtype), expected.astype(dtype))


#: The default Thompson agent's posterior scale (:func:`linear`): 1, the exact posterior. A tempered
#: 1/16 has the smallest regret on seeds 0-1 of digits and the wheel and loses badly on seeds 2-4 of
#: the wheel (BENCHMARKS.md, "Contextual bandits"); the exact posterior is the most even.
THOMPSON_SCALE = 1.0


#: The default agent's noise handling (:func:`linear`): rewards standardised online and the noise
#: variance learned in those units, ``s2 ~ InvGamma(1, 1)`` a priori. A unit noise variance on the
#: standardised rewards (``noise="standardize"``) assumes a linear arm explains
#: none of the reward's variance: on digits the learned ``s2`` is 0.14-0.51 and Thompson's draws are
#: 1.5-2.5 times too wide (BENCHMARKS.md, "Contextual bandits").
NOISE_PRIOR = (1.0, 1.0)


#: The default agent's rule (:func:`linear`): information-directed sampling. On the standard problems
#: (seeds 2-4, T = 2000 and 5000; seeds 0-1 chose it) its regret is below Thompson sampling's on all
#: but two (within their spread), and below every peer's on digits, mnist and the wheel at delta 0.5
#: (BENCHMARKS.md, "Contextual bandits").
DEFAULT_RULE = "ids"

#: The default agent's ``context_scale`` (:func:`linear`, :class:`Agent`): contexts scaled to a mean
#: squared norm of 4, so that the prior ``N(0, prior_var I)`` of an arm says a standardised reward's
#: prior variance is ``4 prior_var``. Chosen on seeds 0-1 from 2 and 4 (and the unscaled contexts,
#: whose mean squared norm is 16 on digits and 89 on mnist): BENCHMARKS.md, "Contextual bandits".
CONTEXT_SCALE = 4.0


def linear(num_arms: int, dim: int, rule: str = DEFAULT_RULE, *, prior_var: float = 1.0, noise="learned",
           scale: float = THOMPSON_SCALE, alpha: float = 1.0, optimistic: bool = False,
           context_scale: float = CONTEXT_SCALE, num_draws=None, process_noise=None, noise_prior=NOISE_PRIOR,
           dtype=None):
    """``(agent, state)``: the default agent, a per-arm linear-Gaussian model (``jr.kalman``, one dense
    belief per arm, the pulled arm updated exactly) with ``rule`` (:data:`RULES`; default
    :data:`DEFAULT_RULE`).

    ``noise``:

    * ``"learned"`` (default): rewards standardised online (:class:`Welford` statistics, module
      docstring) and the noise variance learned in those units (``jr.kalman(None)``, the
      normal-inverse-gamma belief: ``s2 ~ InvGamma(*noise_prior)``, ``theta_k | s2 ~ N(0, s2 prior_var I)``);
    * ``"standardize"``: rewards standardised online, a unit noise variance, ``theta_k ~ N(0, prior_var I)``;
    * ``(shape, rate)``: the noise variance learned, ``s2 ~ InvGamma(shape, rate)``, on the rewards as
      they are.

    ``scale``: the posterior scale of the draws of ``thompson`` and ``ids`` (default
    :data:`THOMPSON_SCALE`). The choices are measured in BENCHMARKS.md, "Contextual bandits".

    Args:
      num_arms: ``K >= 2``.
      dim: ``d``, the length of a context.
      rule: ``"thompson"``, ``"greedy"``, ``"ucb"`` or ``"ids"`` (:func:`ids`,
        :data:`~jaxrvga.bandits.agents.NUM_DRAWS` draws a round).
      prior_var: the prior variance of each arm's weights, > 0.
      noise: ``"learned"``, ``"standardize"`` or ``(shape, rate)``, as above.
      scale: the covariance scale of ``thompson``'s and ``ids``' draws.
      alpha: the weight of ``ucb``'s standard deviation.
      optimistic: ``thompson``'s draws scored by ``max(draw, mean)`` (:func:`thompson`; only with
        ``rule="thompson"``).
      context_scale: the contexts' mean squared norm (:class:`Agent`; default :data:`CONTEXT_SCALE`; 0:
        the contexts as they are).
      num_draws: ``ids``' draws a round (None: :data:`~jaxrvga.bandits.agents.NUM_DRAWS`; only with
        ``rule="ids"``).
      process_noise: fading memory ``eta >= 0``: the pulled arm's covariance is inflated to
        ``(1 + eta) P`` before its update ([LRVGA] Remark 1, :mod:`jaxrvga.dynamics`), so that an arm
        pulled many times stays uncertain (default None: none; BENCHMARKS.md, "Eleven seeds on the wheel,
        and fading memory": an option, not the default).
      noise_prior: ``(shape, rate)`` of the inverse-gamma prior of the noise variance in the standardised
        rewards' units, with ``noise="learned"`` (default :data:`NOISE_PRIOR`; BENCHMARKS.md, "A stronger
        noise prior in standardised units, tried").
      dtype: the floating dtype of the state (default JAX's default float).

    Returns:
      ``(agent, state)``: an :class:`Agent` and its initial :class:`AgentState`.
    """
    from ..filters import kalman

    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if optimistic and rule != "thompson":
        raise ValueError(f"optimistic: optimistic draws are a form of Thompson sampling; rule must be 'thompson', "
                         f"got {rule!r}")
    if num_draws is not None and rule != "ids":
        raise ValueError(f"num_draws: only information-directed sampling draws a set a round; rule must be 'ids', "
                         f"got {rule!r}")
    dim = positive_int("dim", dim)
    prior_var = _nonnegative("prior_var", prior_var)
    if prior_var == 0:
        raise ValueError("prior_var must be > 0, got 0")
    dtype = jnp.result_type(float) if dtype is None else dtype
    if isinstance(noise, str):
        if noise not in ("learned", "standardize"):
            raise ValueError(f"noise must be 'learned', 'standardize' or a pair (shape, rate), got {noise!r}")
        standardize, unit = True, noise == "standardize"
        try:  # the filters' own check of an inverse-gamma prior, in the state's dtype
            noise = tuple(noise_belief.check_noise(noise_prior, dtype))
        except ValueError as err:
            raise ValueError(f"noise_prior: {err}") from None
    else:
        standardize, unit = False, False
    flt = kalman(1.0 if unit else None, process_noise)
    arms = per_arm(flt, num_arms)
    kw = {"standardize": standardize, "context_scale": context_scale}
    if rule == "thompson":
        agent = thompson(arms, scale=scale, optimistic=optimistic, **kw)
    elif rule == "greedy":
        agent = greedy(arms, **kw)
    elif rule == "ucb":
        agent = ucb(arms, alpha, **kw)
    else:
        agent = ids(arms, scale=scale, num_draws=NUM_DRAWS if num_draws is None else num_draws, **kw)
    prior = (jnp.zeros(dim, dtype), prior_var * jnp.eye(dim, dtype=dtype))
    state = flt.init(*prior) if unit else flt.init(*prior, noise=noise)
    return agent, init(agent, state)


__all__ = ["update", "run", "linear", "DEFAULT_RULE", "CONTEXT_SCALE", "THOMPSON_SCALE", "NOISE_PRIOR"]
