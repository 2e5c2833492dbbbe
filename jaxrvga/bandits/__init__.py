r"""Contextual bandits from the filters of the library: Thompson sampling, greedy, UCB and IDS agents.

An agent is a model of the arms' rewards, held by one of the library's filters, and a rule that
picks an arm from it. Two model shapes:

* :func:`per_arm`: one belief per arm, a fleet of K states of one filter stacked along a leading
  axis. A round updates the pulled arm only, at the cost of one arm's update: its state is
  gathered, updated and scattered back (``a.at[arm].set``), not every arm computed and masked.
* :func:`shared`: one belief of a model with K outputs, ``eta = h(theta, x)`` (K,) (a network with
  K heads, or any model of :func:`jaxrvga.models.nonlinear`), built on :func:`heads`, whose input
  is the pair ``(x, arm)`` and output ``h(theta, x)[arm]``: a round absorbs the pulled head's
  observation only.

Rules, on the predictor ``eta_k`` of each arm (the reward's mean is monotone in ``eta`` for every
GLM link, so the arg max is the same):

* ``thompson``: one draw of the belief, the arm of the largest ``eta_k`` under that draw (Thompson
  1933; Agrawal & Goyal 2013 for linear payoffs). For a per-arm GLM the draws of the arms are
  independent and the rule reads ``eta_k = x^T theta_k`` only, so it draws
  ``eta_k ~ N(x^T m_k, x^T P_k x)`` exactly, with no factorisation at all (times
  ``s2 ~ InvGamma(a, b)`` where the noise variance is learned: a Student-t); other models draw
  ``theta`` (:func:`jaxrvga.sample`, a Cholesky factor for a dense belief);
* ``greedy``: ``eta_k`` at the mean;
* ``ucb``: ``E[eta_k] + alpha sd[eta_k]`` from the predictive (LinUCB, Li et al. 2010, with
  ``P = A^{-1}`` and ``alpha = 1``; a learned noise variance scales the variance by ``E[s2]``);
* ``ids``: information-directed sampling (Russo & Van Roy 2018), the arm of the smallest
  ``regret_k^2 / gain_k``, from ``num_draws`` Thompson draws of every arm (:func:`regret_and_gain`),
  each read as its mean reward ``E[r | eta_k]`` (a ratio, unlike an arg max, depends on the link).

Reward scale: a model of known noise variance assumes rewards of that scale. Either learn it
(``jr.kalman(None)``, ``linear_gaussian(None)``, ``gaussian(None)``: the normal-inverse-gamma
belief of :mod:`jaxrvga.noise`), or pass ``standardize=True``: the agent keeps the Welford
statistics of the rewards it has seen in its state and its model learns ``(r - mean) / sd`` of the
rewards so far (``sd = 1`` before two), or both: the default of :func:`linear`, which learns the noise
variance in the standardised units. Nothing looks at the whole stream. A per-arm fleet of exact
Kalman steps of prior mean 0 (:func:`linear`'s; :func:`restandardizes`) keeps its whole history in
the units of the rewards seen so far: when a reward moves the statistics, every reward already
absorbed becomes ``a y + c`` (``a = sd_old / sd_new``, ``c = (mean_old - mean_new) / sd_new``), and
since each arm's posterior mean is linear in its rewards and its noise's rate quadratic, the fleet
moves exactly with the regression of a constant 1 that each arm carries beside its own
(:class:`~jaxrvga.bandits.agents.Offsets`, O(K d) a round): each arm's belief is the posterior of
all its rewards standardised by today's statistics. Other models (a network, a GLM) absorb each
reward in the units of its round and are not rescaled, a heuristic for streams whose scale settles
early.

:func:`run` plays a whole logged full-feedback data set (``rewards[t, k]`` for every arm, the agent
seeing that of the arm it pulls) in one jitted ``lax.scan``, and reports the expected regret
``max_k M[t, k] - M[t, a_t]`` of each round (``M`` the expected rewards, default the rewards).
A round whose pulled reward or context is NaN or inf, or whose arm is out of range, is skipped (the
belief kept) and flagged.
"""
from . import agents, play
from .agents import (RULES, PerArm, Shared, Agent, Welford, Offsets, AgentState, BanditRun, per_arm, heads, shared,
                     thompson, greedy, ucb, ids, regret_and_gain, information_ratio_scores, init, restandardizes, scores,
                     act)
from .play import (update, run, linear, DEFAULT_RULE, CONTEXT_SCALE, THOMPSON_SCALE, NOISE_PRIOR)
from .play import _run_jit  # the compiled run, which the benchmark compiles ahead

__all__ = ["RULES", "PerArm", "Shared", "Agent", "Welford", "Offsets", "AgentState", "BanditRun", "per_arm", "heads",
           "shared", "thompson", "greedy", "ucb", "ids", "regret_and_gain", "information_ratio_scores", "init",
           "restandardizes", "scores", "act",
           "update", "run", "linear",
           "DEFAULT_RULE", "CONTEXT_SCALE", "THOMPSON_SCALE", "NOISE_PRIOR"]
