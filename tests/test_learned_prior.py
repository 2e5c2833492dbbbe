"""The prior learned on the stream: ``jr.model_average(flt, learn_prior=v)`` and ``jr.evidence.shift_prior``.

Oracles (float64, linear-Gaussian and normal-inverse-gamma models, where the belief's own form of a prior
move is exact): the moved belief equals the run from the moved prior; each step's gradient is the
derivative of that step's log evidence term in the log prior precision (autodiff through a whole run).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from conftest import rewrite_saved_nodes

D, N = 4, 40


def _data(n=N, d=D, seed=0, noise_sd=0.5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d) + noise_sd * rng.normal(size=n)


def _one(state):
    return jax.tree_util.tree_map(lambda a: a[None], state)


@pytest.mark.parametrize("noise_var", [0.25, None])
def test_shift_prior_equals_the_run_from_the_moved_prior(noise_var):
    """Kalman (known noise) and normal-inverse-gamma (learned noise): a finished run from N(m0, I / a0)
    moved to the precision a1 is the run from N(m0, I / a1): mean, covariance and the noise's rate."""
    X, y = _data()
    m0 = jnp.array([0.3, -0.2, 0.1, 0.0])
    flt = jr.kalman(noise_var)
    a0, a1 = 5.0, 0.2
    run = lambda a: jr.run(flt, flt.init(m0, jnp.eye(D) / a), X, y)[0]  # noqa: E731
    moved, ok = jr.evidence.shift_prior(run(a0), jnp.full(D, a1 - a0), m0)
    want = run(a1)
    assert bool(ok)
    np.testing.assert_allclose(moved.mean, want.mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(moved.cov, want.cov, rtol=1e-10, atol=1e-12)
    if noise_var is None:
        np.testing.assert_allclose(moved.noise.rate, want.noise.rate, rtol=1e-10)
        np.testing.assert_allclose(moved.noise.shape, want.noise.shape, rtol=1e-12)


def _learned(flt, a0, v, m0=None, scales=(1.0,), groups=None, tolerance=jr.learned_prior.PRIOR_TOLERANCE):
    avg = jr.model_average(flt, scales=scales, learn_prior=v, prior_groups=groups, prior_tolerance=tolerance)
    m0 = jnp.zeros(D) if m0 is None else m0
    return avg, avg.init(_one(flt.init(m0, jnp.eye(D) / a0)), prior_precision=a0)


def _evidence_terms_gradient(flt, lam, X, y):
    """``d/dlam log p(y_t | y_{1:t-1})`` of each step of a run from ``N(0, e^{-lam} I)`` (forward mode
    through the whole run)."""
    def terms(lam):
        init = flt.init(jnp.zeros(D), jnp.exp(-lam) * jnp.eye(D))
        return jr.run(flt, init, X, y, jr.trace_log_predictive(jr.models.linear_gaussian(0.25)))[1]

    return jax.jacfwd(terms)(lam)


def test_each_step_gradient_is_the_evidence_terms_derivative():
    """A hyper-prior of variance 1e-6 keeps log a at log a0 (to 1e-4): the information gathered is then
    1e6 + sum_t g_t^2, g_t the derivative of the step's log evidence term in log a (autodiff)."""
    X, y = _data()
    flt = jr.kalman(0.25)
    a0, v = 3.0, 1e-6
    avg, state = _learned(flt, a0, v)
    out, _ = jr.run(avg, state, X, y)
    g = _evidence_terms_gradient(flt, jnp.log(a0), X, y)
    assert abs(float(out.prior.log_precision[0, 0]) - np.log(a0)) < 1e-4
    np.testing.assert_allclose(float(out.prior.information[0, 0, 0]) - 1.0 / v, float(jnp.sum(g**2)), rtol=1e-3)


def test_first_step_is_one_fisher_scoring_step_of_the_hyper_prior():
    """From the hyper-prior N(log a0, v): log a1 = log a0 + g_1 / (1 / v + g_1^2)."""
    X, y = _data()
    flt = jr.kalman(0.25)
    a0, v = 3.0, 4.0
    avg, state = _learned(flt, a0, v, tolerance=0.0)
    one = avg.update(state, X[0], y[0])
    g1 = _evidence_terms_gradient(flt, jnp.log(a0), X[:1], y[:1])[0]
    np.testing.assert_allclose(one.prior.log_precision[0, 0], np.log(a0) + g1 / (1 / v + g1**2), rtol=1e-10)
    np.testing.assert_allclose(one.prior.information[0, 0, 0], 1 / v + g1**2, rtol=1e-10)
    # and the member is the Kalman posterior of (x_1, y_1) from the moved prior
    a1 = jnp.exp(one.prior.log_precision[0, 0])
    want = flt.update(flt.init(jnp.zeros(D), jnp.eye(D) / a1), X[0], y[0])
    np.testing.assert_allclose(one.members.cov[0], want.cov, rtol=1e-9)
    np.testing.assert_allclose(one.members.mean[0], want.mean, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("a0", [1e3, 1e-3])
def test_a_wrong_prior_moves_toward_the_evidence_maximum(a0):
    """d = 20, 60 observations, a prior 1000x too tight or too broad (true theta ~ N(0, I)): the learned
    precision moves toward the maximum of the batch evidence (MacKay's fixed point, the exact
    marginal-likelihood maximum here) without passing it; from the tight prior the test log predictive
    is far better than the fixed prior's, from the broad one as good (a broad prior costs little here)."""
    d = 20
    X, y = _data(n=560, d=d, seed=1)
    Xtr, ytr, Xte, yte = X[:60], y[:60], X[60:], y[60:]
    flt = jr.kalman(0.25)
    init = flt.init(jnp.zeros(d), jnp.eye(d) / a0)
    avg = jr.model_average(flt, scales=(1.0,), learn_prior=4.0)
    out, info = jr.run(avg, avg.init(_one(init), prior_precision=a0), Xtr, ytr, jr.trace_info)
    fixed, _ = jr.run(flt, init, Xtr, ytr)
    best = np.log(float(jr.evidence.fit_prior_precision(fixed, a0).precision[0]))
    learned = float(out.prior.log_precision[0, 0])
    assert bool(jnp.all(info.converged))
    assert np.sign(learned - np.log(a0)) == np.sign(best - np.log(a0))
    assert abs(learned - best) < abs(np.log(a0) - best) - 0.5  # a factor e^0.5 closer at least

    def nlpd(state):
        model = jr.models.linear_gaussian(0.25)
        return -float(jnp.mean(jax.vmap(lambda x, t: jr.log_predictive(state, x, t, model))(Xte, yte)))

    if a0 > 1:
        assert nlpd(out) < 0.8 * nlpd(fixed)
    else:
        assert nlpd(out) < nlpd(fixed) + 0.01


def test_a_non_finite_observation_is_flagged_and_keeps_the_prior():
    X, y = _data()
    avg, state = _learned(jr.kalman(0.25), 3.0, 4.0)
    state = avg.update(state, X[0], y[0])
    bad = avg.update(state, X[1] * np.nan, y[1])
    assert not bool(bad.info.converged)
    np.testing.assert_array_equal(bad.prior.log_precision, state.prior.log_precision)
    np.testing.assert_array_equal(bad.prior.information, state.prior.information)


def test_the_recipe_is_the_per_layer_learned_prior_with_forgetting():
    """``jr.average.recipe``: the documented default, ``model_average(flt, learn_prior=LEARN_PRIOR,
    prior_groups=groups, forget=FORGET)`` over the one member, its prior precision ``1 / prior_var``."""
    X, y = _data()
    flt = jr.kalman(None)
    member = flt.init(jnp.zeros(D), 0.1 * jnp.eye(D))
    avg, state = jr.average.recipe(flt, member, 0.1, (1, 3))
    spelt = jr.model_average(flt, learn_prior=jr.average.LEARN_PRIOR, prior_groups=(1, 3), forget=jr.average.FORGET)
    assert avg == spelt
    want = spelt.init(_one(member), prior_precision=10.0)
    for got, expected in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_allclose(state.prior.log_precision, np.log(10.0) * np.ones((1, 2)), rtol=1e-12)
    out, _ = jr.run(avg, state, X, y)
    assert bool(out.info.converged) and np.all(np.isfinite(out.prior.log_precision))
    # a stack of members (other initial weights): the same average over all of them, each under 1 / prior_var
    other = flt.init(jnp.full(D, 0.3), 0.1 * jnp.eye(D))
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), member, other)
    avg2, state2 = jr.average.recipe(flt, stacked, 0.1, (1, 3))
    assert avg2 == spelt
    want = spelt.init(stacked, prior_precision=10.0)
    for got, expected in zip(jax.tree_util.tree_leaves(state2), jax.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(got, expected)
    assert state2.log_weight.shape[0] == 2
    with pytest.raises(ValueError, match="member must be a state of flt"):
        jr.average.recipe(flt, jax.tree_util.tree_map(lambda a: a[None], stacked), 0.1)
    for v in (0.0, -1.0, float("nan"), float("inf"), True, "a"):
        with pytest.raises(ValueError, match="prior_var"):
            jr.average.recipe(flt, member, v)
    with pytest.raises(ValueError, match="dynamics"):
        jr.average.recipe(jr.kalman(0.25, decay=0.9), member, 0.1)


def test_identical_observations_and_an_infinite_reward_keep_the_prior_finite():
    """A stream of one observation repeated (its evidence pushes the precision one way for ever) leaves
    the learned precision finite on every step; an infinite ``y`` is a flagged step that keeps the prior."""
    X, y = _data()
    avg, state = _learned(jr.kalman(None), 3.0, 4.0)
    out, trace = jr.run(avg, state, np.repeat(X[:1], 2000, 0), np.repeat(y[:1], 2000),
                        lambda s, x, y: s.prior.log_precision)
    assert np.all(np.isfinite(np.asarray(trace))) and bool(out.info.converged)
    bad = avg.update(out, X[1], np.inf)
    assert not bool(bad.info.converged)
    np.testing.assert_array_equal(bad.prior.log_precision, out.prior.log_precision)


def test_a_run_resumed_from_a_file_is_the_whole_run(tmp_path):
    """Saved after half the stream, loaded and run on: the learned prior, weights and member of the whole run."""
    X, y = _data()
    avg, state = _learned(jr.kalman(None), 3.0, 4.0, groups=(1, 3))
    whole, _ = jr.run(avg, state, X, y)
    half, _ = jr.run(avg, state, X[:N // 2], y[:N // 2])
    jr.io.save(tmp_path / "half.json", half)
    resumed, _ = jr.run(avg, jr.io.load(tmp_path / "half.json"), X[N // 2:], y[N // 2:])
    for got, want in zip(jax.tree_util.tree_leaves(resumed), jax.tree_util.tree_leaves(whole)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_bad_arguments_are_refused_by_name():
    flt = jr.kalman(0.25)
    for v in (0.0, -1.0, float("nan"), float("inf"), True, "a"):
        with pytest.raises(ValueError, match="learn_prior"):
            jr.model_average(flt, learn_prior=v)
    with pytest.raises(ValueError, match="dynamics"):
        jr.model_average(jr.kalman(0.25, decay=0.9), learn_prior=4.0)
    avg = jr.model_average(flt, learn_prior=4.0)
    members = _one(flt.init(jnp.zeros(D), jnp.eye(D)))
    with pytest.raises(ValueError, match="prior_precision"):
        avg.init(members)
    with pytest.raises(ValueError, match="prior_precision"):
        avg.init(members, prior_precision=jnp.ones(3))
    with pytest.raises(ValueError, match="prior_precision"):
        avg.init(members, prior_precision=-1.0)
    for tolerance in (-0.1, float("nan"), float("inf"), True, "a", None):
        with pytest.raises(ValueError, match="prior_tolerance"):
            jr.model_average(flt, learn_prior=4.0, prior_tolerance=tolerance)


@pytest.mark.parametrize("groups", [None, (1, 3)])
def test_state_survives_io_and_vmap(tmp_path, groups):
    """A learned prior, of one precision or of two blocks, is a state field as any other: saved and
    loaded, and vmapped over two streams (each as its own run, to rounding)."""
    X, y = _data()
    avg, state = _learned(jr.kalman(0.25), 3.0, 4.0, groups=groups)
    out, _ = jr.run(avg, state, X, y)
    jr.io.save(tmp_path / "s.json", out)
    back = jr.io.load(tmp_path / "s.json")
    for field in jr.learned_prior.LearnedPrior._fields:
        np.testing.assert_array_equal(getattr(back.prior, field), getattr(out.prior, field))
    X2, y2 = _data(seed=3)
    both = jax.vmap(lambda xs, ys: jr.run(avg, state, xs, ys)[0])(jnp.stack([X, X2]), jnp.stack([y, y2]))
    second, _ = jr.run(avg, state, X2, y2)
    np.testing.assert_allclose(both.prior.log_precision[0], out.prior.log_precision, rtol=1e-9)
    np.testing.assert_allclose(both.prior.log_precision[1], second.prior.log_precision, rtol=1e-9)


def test_low_rank_network_in_float32():
    """A low-rank belief of a small tanh network (float32, the default mixture of scales): every step
    converges, the prior moves, and the learned log predictive of the last step equals the mixture's."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 3)).astype(np.float32)
    y = (np.tanh(X @ np.array([1.0, -1.0, 0.5])) > 0).astype(np.float32)

    def h(theta, x):
        return jnp.tanh(x @ theta[:12].reshape(3, 4)) @ theta[12:]

    flt = jr.lrvga(jr.models.nonlinear(h, jr.models.bernoulli()), rank=3)
    d = 16
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(0), d, 3, 1.0, dtype=jnp.float32)
    theta0 = jnp.asarray(0.3 * rng.normal(size=d), jnp.float32)
    avg = jr.model_average(flt, learn_prior=4.0)
    state = avg.init(_one(flt.init(theta0, W0, psi0)), prior_precision=1.0)
    out, info = jr.run(avg, state, X, y, jr.trace_info)
    assert out.prior.log_precision.dtype == jnp.float32
    assert bool(jnp.all(info.converged))
    assert bool(jnp.all(jnp.isfinite(out.members.mean)))
    assert abs(float(out.prior.log_precision[0, 0])) > 1e-3


def _states_of_every_belief():
    """Dense and low-rank (with its whitened Gram) states with a learned noise variance and a diagonal
    one with a known noise variance, after a few steps of a linear regression (float64)."""
    X, y = _data(n=12)
    dense = jr.kalman(None)
    low = jr.lrvga(jr.models.linear_gaussian(None), rank=2)
    diag = jr.diag_rvga(jr.models.linear_gaussian(0.25))
    m0 = jnp.array([0.3, -0.2, 0.1, 0.0])
    return [jr.run(dense, dense.init(m0, jnp.eye(D) / 2.0, noise=(2.0, 1.0)), X, y)[0],
            jr.run(low, low.init(m0, jnp.zeros((D, 2)), jnp.full(D, 2.0), noise=(2.0, 1.0)), X, y)[0],
            jr.run(diag, diag.init(m0, jnp.full(D, 0.5)), X, y)[0]]


@pytest.mark.parametrize("kind", [0, 1, 2], ids=["dense", "lowrank", "diagonal"])
def test_shift_prior_tangent_is_the_derivative_of_the_move(kind):
    """The tangent without the moved belief equals forward-mode autodiff through ``shift_prior`` at 0,
    for every float field (mean, precision form, whitened Gram, noise rate)."""
    state = _states_of_every_belief()[kind]
    direction, m0 = jnp.array([0.5, 1.0, 2.0, 0.25]), jnp.array([0.1, 0.0, -0.3, 0.2])
    want = jax.jvp(lambda t: jr.evidence.shift_prior(state, t * direction, m0)[0], (0.0,), (1.0,))[1]
    got = jr.evidence.shift_prior_tangent(state, direction, m0)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    floats = [(g, w) for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want))
              if jnp.issubdtype(w.dtype, jnp.floating)]
    assert len(floats) >= 3 and any(float(jnp.max(jnp.abs(w))) > 0 for _, w in floats[1:])
    for g, w in floats:
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def _mlp_states(k):
    """A 3-4-k tanh network's low-rank state (its model of k outputs), and one observation."""
    from conftest import small_mlp

    h, d = small_mlp(k)
    family = jr.models.bernoulli() if k == 1 else jr.models.categorical(k)
    model = jr.models.nonlinear(h, family)
    rng = np.random.default_rng(3)
    flt = jr.lrvga(model, rank=3)
    state = flt.init(jnp.asarray(rng.normal(size=d)), jnp.asarray(0.3 * rng.normal(size=(d, 3))), jnp.full(d, 2.0))
    x = jnp.asarray(rng.normal(size=3))
    return model, state, x, jnp.asarray(1.0 if k == 1 else 2)


@pytest.mark.parametrize("num_directions", [1, 4])
@pytest.mark.parametrize("case", ["dense", "lowrank", "diagonal", "network-binary", "network-3-classes"])
def test_closed_form_slopes_are_the_derivative_of_the_moved_scores(case, num_directions):
    """The learned prior's gradient (``d/dt`` of the forecasters' mixture ``log sum_s w_s p_s(y | x)`` as the
    prior precision moves by ``t direction``, for each direction), taken in reverse from the predictor's
    moments, equals forward-mode autodiff of the mixture through ``shift_prior`` itself: exactly for the
    linear-Gaussian and normal-inverse-gamma models (dense, low-rank, diagonal beliefs), and for a network
    with its Jacobian's own derivative along the mean's move. A learned noise variance's forecasters each
    read their own rate (``rate_ratio``), moved with the member's."""
    from jaxrvga.average import _forecaster, _log_densities
    from jaxrvga.learned_prior import scores_and_slope

    scales = jnp.array([0.0, 0.25, 1.0])
    log_weight = jnp.array([-1.0, 0.3, -0.2])
    if case.startswith("network"):
        model, state, x, y = _mlp_states(1 if case == "network-binary" else 3)
        m0 = jnp.zeros_like(state.mean)
    else:
        state = _states_of_every_belief()[["dense", "lowrank", "diagonal"].index(case)]
        model = jr.models.linear_gaussian(None if state.noise is not None else 0.25)
        x, y, m0 = jnp.array([0.5, -1.0, 0.3, 2.0]), jnp.asarray(0.7), jnp.array([0.1, 0.0, -0.3, 0.2])
    d = state.mean.shape[0]
    first = jnp.arange(d) < d // 2  # all parameters, two blocks of them, and one uneven direction
    directions = jnp.stack([jnp.full(d, 1.5), jnp.where(first, 1.5, 0.0), jnp.where(first, 0.0, 0.7),
                            jnp.linspace(0.2, 2.0, d)])[:num_directions]
    ratio = None if state.noise is None else jnp.array([1.5, 0.7, 1.0], state.mean.dtype)

    def scores(member, ratio):
        return jax.vmap(lambda c, q: jr.log_predictive(_forecaster(member, q), x, y, model, scale=c))(scales, ratio)

    def slope_of(ratio):
        def densities(y, eta, V, stats):
            return _log_densities(model, y, eta, V, stats, scales, ratio, 32)
        return scores_and_slope(model, lambda m: scores(m, ratio), densities, state, x, y, directions, m0,
                                log_weight)

    lp, g, _ = slope_of(ratio)
    assert g.shape == (num_directions,)
    np.testing.assert_allclose(lp, scores(state, ratio), rtol=1e-12)
    for direction, got in zip(directions, g):
        def mixture(t):
            moved = jr.evidence.shift_prior(state, t * direction, m0)[0]
            return jax.nn.logsumexp(log_weight + scores(moved, ratio))

        want = jax.jvp(mixture, (0.0,), (1.0,))[1]
        assert abs(float(want)) > 1e-4
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-12)
    if num_directions > 1:  # linear in the direction
        np.testing.assert_allclose(g[1] + g[2] / 0.7 * 1.5, g[0], rtol=1e-8, atol=1e-12)
    if ratio is not None:  # no ratios given: every forecaster reads the member's own rate
        own, none = slope_of(jnp.ones_like(ratio)), slope_of(None)
        for a, b in zip(none[:2], own[:2]):
            np.testing.assert_allclose(a, b, rtol=1e-12)


def test_one_block_is_the_scalar_prior():
    """``prior_groups=(d,)``: one block of every parameter learns what the scalar prior learns."""
    X, y = _data()
    flt = jr.kalman(0.25)
    init = _one(flt.init(jnp.zeros(D), jnp.eye(D) / 3.0))
    runs = [jr.run(avg, avg.init(init, prior_precision=3.0), X, y)[0]
            for avg in (jr.model_average(flt, scales=(1.0,), learn_prior=4.0),
                        jr.model_average(flt, scales=(1.0,), learn_prior=4.0, prior_groups=(D,)))]
    np.testing.assert_allclose(runs[1].prior.log_precision, runs[0].prior.log_precision, rtol=1e-10)
    np.testing.assert_allclose(runs[1].members.mean, runs[0].members.mean, rtol=1e-10, atol=1e-12)


def test_blocks_first_step_is_one_fisher_scoring_step_of_the_hierarchical_hyper_prior():
    """Two blocks (1, 3) of a Kalman filter's weights, prior precisions a0 = (3, 0.5): with g the gradient
    of the first step's log evidence term in (log a_1, log a_2) (autodiff), the hyper-prior's information
    I0 = inv(v 1 1^T + s (I - 1 1^T / 2)) and I1 = I0 + g g^T, the step is lam0 + I1^{-1} g, and the
    member is the Kalman posterior of (x_1, y_1) from the moved block prior."""
    X, y = _data()
    flt = jr.kalman(0.25)
    a0, v, spread, sizes = jnp.array([3.0, 0.5]), 4.0, 0.3, (1, 3)
    index = np.repeat([0, 1], sizes)
    avg = jr.model_average(flt, scales=(1.0,), learn_prior=v, prior_groups=sizes, group_spread=spread,
                           prior_tolerance=0.0)
    state = avg.init(_one(flt.init(jnp.zeros(D), jnp.diag(1.0 / a0[index]))), prior_precision=a0[None])
    one = avg.update(state, X[0], y[0])

    def term(lam):
        init = flt.init(jnp.zeros(D), jnp.diag(jnp.exp(-lam)[index]))
        return jr.log_predictive(init, X[0], y[0], jr.models.linear_gaussian(0.25))

    g = jax.grad(term)(jnp.log(a0))
    I1 = np.linalg.inv(v * np.ones((2, 2)) + spread * (np.eye(2) - 0.5)) + np.outer(g, g)
    want_lam = np.log(a0) + np.linalg.solve(I1, g)
    np.testing.assert_allclose(one.prior.information[0], I1, rtol=1e-10)
    np.testing.assert_allclose(one.prior.log_precision[0], want_lam, rtol=1e-10)
    want = flt.update(flt.init(jnp.zeros(D), jnp.diag(jnp.exp(-want_lam)[index])), X[0], y[0])
    np.testing.assert_allclose(one.members.cov[0], want.cov, rtol=1e-9)
    np.testing.assert_allclose(one.members.mean[0], want.mean, rtol=1e-9, atol=1e-12)


def test_block_sizes_are_the_layers_in_ravel_order():
    """``block_sizes`` of a dict of layers: each layer's parameter count, in the order ravel_pytree lays
    them out (each block of the flat vector is that layer's)."""
    from jax.flatten_util import ravel_pytree

    params = {"out": {"w": jnp.full((4, 2), 2.0), "b": jnp.full(2, 2.0)},
              "hidden": {"w": jnp.full((3, 4), 1.0), "b": jnp.full(4, 1.0)}}
    sizes = jr.learned_prior.block_sizes(params)
    assert sizes == (16, 10)
    flat, _ = ravel_pytree(params)
    np.testing.assert_array_equal(flat, np.repeat([1.0, 2.0], sizes))
    assert jr.learned_prior.block_sizes([jnp.ones(3), (jnp.ones(2), jnp.ones((2, 2)))]) == (3, 6)
    with pytest.raises(ValueError, match="top-level"):
        jr.learned_prior.block_sizes({"empty": jnp.ones(0), "out": jnp.ones(2)})


def test_block_sizes_refuse_a_tree_that_is_not_its_layers():
    """The layers one level down: a flax model's whole ``variables`` (one entry, ``"params"``) and an equinox
    MLP's parameters (its ``layers`` beside fields without parameters) are refused, naming what to pass;
    their layers give one block each."""
    variables = {"params": {"Dense_0": {"kernel": jnp.ones((3, 8)), "bias": jnp.ones(8)},
                            "Dense_1": {"kernel": jnp.ones((8, 1)), "bias": jnp.ones(1)}}}
    with pytest.raises(ValueError, match=r"variables\['params'\]"):
        jr.learned_prior.block_sizes(variables)
    assert jr.learned_prior.block_sizes(variables["params"]) == (32, 9)
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(4, 2, 3, depth=1, key=jax.random.PRNGKey(0))
    params, _ = eqx.partition(mlp, eqx.is_array)
    with pytest.raises(ValueError, match="params.layers"):
        jr.learned_prior.block_sizes(params)
    assert jr.learned_prior.block_sizes(params.layers) == (4 * 3 + 3, 3 * 2 + 2)


def test_bad_blocks_are_refused_by_name(tmp_path):
    flt = jr.kalman(0.25)
    members = _one(flt.init(jnp.zeros(D), jnp.eye(D)))
    for groups in ((2, 0, 2), (2, -2), (1.5, 2.5), "ab", (), (n for n in (2, -2))):
        with pytest.raises(ValueError, match="prior_groups"):
            jr.model_average(flt, learn_prior=4.0, prior_groups=groups)
    with pytest.raises(ValueError, match="prior_groups"):
        jr.model_average(flt, prior_groups=(D,))
    for spread in (0.0, float("nan"), -1.0):
        with pytest.raises(ValueError, match="group_spread"):
            jr.model_average(flt, learn_prior=4.0, prior_groups=(2, 2), group_spread=spread)
    with pytest.raises(ValueError, match="sum to 3"):
        jr.model_average(flt, learn_prior=4.0, prior_groups=(1, 2)).init(members, prior_precision=1.0)
    two = jr.model_average(flt, learn_prior=4.0, prior_groups=(2, 2))
    with pytest.raises(ValueError, match="prior_precision"):
        two.init(members, prior_precision=jnp.ones((1, 3)))
    state = two.init(members, prior_precision=jnp.array([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="block"):  # a state of two blocks given to a filter of one
        jr.model_average(flt, learn_prior=4.0).update(state, jnp.ones(D), 1.0)
    # a file written before the blocks (with (K,) fields) and before member_log_precision loads as one
    # block, its member under the learned prior
    one = jr.model_average(flt, learn_prior=4.0)
    old = one.init(members, prior_precision=1.0)
    old = old._replace(prior=old.prior._replace(log_precision=old.prior.log_precision[:, 0],
                                                information=old.prior.information[:, 0, 0]))
    jr.io.save(tmp_path / "old.npz", old)
    _drop_last_field(tmp_path / "old.npz", "LearnedPrior")
    back = jr.io.load(tmp_path / "old.npz")
    assert back.prior.log_precision.shape == (1, 1) and back.prior.information.shape == (1, 1, 1)
    np.testing.assert_array_equal(back.prior.member_log_precision, back.prior.log_precision)
    one.update(back, jnp.ones(D), 1.0)


@pytest.mark.parametrize("field, bad, message", [
    ("log_precision", lambda p: p.log_precision * np.nan, "log_precision must be a finite"),
    ("information", lambda p: p.information.at[0, 0, 1].add(1.0), "symmetric and positive definite"),
    ("information", lambda p: -p.information, "symmetric and positive definite"),
    ("member_log_precision", lambda p: p.member_log_precision[:, :1], "member_log_precision must be"),
    ("member_log_precision", lambda p: p.member_log_precision.astype(jnp.float32), "share one dtype"),
    ("mean", lambda p: p.mean[:, :2].T, "mean must be"),
])
def test_a_corrupted_learned_prior_is_refused_when_loaded(tmp_path, field, bad, message):
    """Each field of a saved ``LearnedPrior`` is checked when loaded (``save`` does not validate)."""
    X, y = _data()
    avg, state = _learned(jr.kalman(0.25), 3.0, 4.0, groups=(1, 3))
    out, _ = jr.run(avg, state, X[:5], y[:5])
    jr.io.save(tmp_path / "s.npz", out._replace(prior=out.prior._replace(**{field: bad(out.prior)})))
    with pytest.raises(ValueError, match=f"inconsistent LearnedPrior.*{message}"):
        jr.io.load(tmp_path / "s.npz")


def _drop_last_field(path, qualname):
    """Rewrite the file ``path`` of :func:`jaxrvga.io.save` as written before the last field of the
    class ``qualname`` (``member_log_precision``) existed."""
    def drop(node):
        if node.get("qualname") == qualname:
            assert node["fields"][-1] == "member_log_precision"
            node["fields"], node["children"] = node["fields"][:-1], node["children"][:-1]

    rewrite_saved_nodes(path, drop)


@pytest.mark.parametrize("noise_var", [0.25, None])
def test_a_member_lagging_its_learned_prior_is_the_posterior_under_its_own_prior(noise_var):
    """With ``prior_tolerance=0.1``, two blocks (1, 3): after every step the member's log prior precisions
    are within 0.1 of the learned ones, and the member is exactly the Kalman (normal-inverse-gamma) run
    of the observations so far from its own prior; it is moved on some steps, not all. With 0 it is
    under the learned prior at every step."""
    X, y = _data()
    flt = jr.kalman(noise_var)
    sizes, index = (1, 3), np.repeat([0, 1], (1, 3))
    noise = None if noise_var is not None else (2.0, 1.0)
    for tolerance in (0.1, 0.0):
        avg = jr.model_average(flt, scales=(1.0,), learn_prior=4.0, prior_groups=sizes, prior_tolerance=tolerance)
        state = avg.init(_one(flt.init(jnp.zeros(D), jnp.eye(D) / 3.0, noise=noise)), prior_precision=3.0)
        moves = 0
        for t in range(N):
            before = state.prior.member_log_precision
            state = avg.update(state, X[t], y[t])
            prior = state.prior
            moves += int(np.any(prior.member_log_precision != before))
            assert bool(state.info.converged)
            assert float(jnp.max(jnp.abs(prior.log_precision - prior.member_log_precision))) <= tolerance
        lam = prior.member_log_precision[0]
        want, _ = jr.run(flt, flt.init(jnp.zeros(D), jnp.diag(jnp.exp(-lam)[index]), noise=noise), X, y)
        np.testing.assert_allclose(state.members.mean[0], want.mean, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(state.members.cov[0], want.cov, rtol=1e-8, atol=1e-12)
        if noise_var is None:
            np.testing.assert_allclose(state.members.noise.rate[0], want.noise.rate, rtol=1e-8)
        assert (0 < moves < N) if tolerance else (moves == N)
