"""Tempered models (``jr.models.tempered``): E passes at power 1/E count each observation once."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr

D, N = 3, 40


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    y = X @ np.array([1.0, -0.5, 2.0]) + 0.5 * rng.normal(size=N)
    return jnp.asarray(X), jnp.asarray(y)


@pytest.mark.parametrize("num_passes", [2, 3])
def test_passes_end_at_the_batch_posterior(num_passes):
    """Known noise: E passes of the Kalman step at power 1/E give the batch posterior ([RVGA] Thm 2)."""
    X, y = _data()
    noise, P0 = 0.25, 2.0 * jnp.eye(D)
    flt = jr.rvga(jr.models.tempered(jr.models.linear_gaussian(noise), 1.0 / num_passes))
    state = jr.passes(flt, flt.init(jnp.zeros(D), P0), X, y)  # E = 1 / power passes
    precision = jnp.linalg.inv(P0) + X.T @ X / noise
    np.testing.assert_allclose(state.cov, jnp.linalg.inv(precision), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state.mean, jnp.linalg.solve(precision, X.T @ y / noise), rtol=1e-10)


def test_passes_with_a_learned_noise_end_at_the_normal_inverse_gamma_posterior():
    """Unknown noise: two passes at power 1/2 give the batch normal-inverse-gamma posterior, ``(a, b)``
    included (:func:`jaxrvga.noise.absorb` of a tempered likelihood)."""
    X, y = _data(1)
    a0, b0, m0, P0 = 2.0, 1.5, jnp.array([0.1, 0.0, -0.2]), jnp.eye(D)
    flt = jr.rvga(jr.models.tempered(jr.models.linear_gaussian(None), 0.5))
    state = jr.passes(flt, flt.init(m0, P0, noise=(a0, b0)), X, y)
    precision = jnp.linalg.inv(P0) + X.T @ X
    mean = jnp.linalg.solve(precision, m0 @ jnp.linalg.inv(P0) + X.T @ y)
    rate = b0 + 0.5 * (y @ y + m0 @ jnp.linalg.solve(P0, m0) - mean @ precision @ mean)
    np.testing.assert_allclose(state.mean, mean, rtol=1e-10)
    np.testing.assert_allclose(state.cov, jnp.linalg.inv(precision), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state.noise.shape, a0 + N / 2, rtol=1e-12)
    np.testing.assert_allclose(state.noise.rate, rate, rtol=1e-10)


def test_reshuffled_passes_count_each_observation_once():
    """Passes in reshuffled orders still end at the normal-inverse-gamma batch posterior, which does not
    depend on the order: each pass saw every observation once (a dropped or repeated one would move it)."""
    X, y = _data(4)
    flt = jr.rvga(jr.models.tempered(jr.models.linear_gaussian(None), 1.0 / 3))
    start = flt.init(jnp.zeros(D), jnp.eye(D), noise=(2.0, 1.0))
    in_order = jr.passes(flt, start, X, y)
    shuffled = jr.passes(flt, start, X, y, key=jax.random.key(1))
    for field in (lambda s: s.mean, lambda s: s.cov, lambda s: s.noise.rate):
        np.testing.assert_allclose(field(shuffled), field(in_order), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(shuffled.noise.shape, 2.0 + N / 2, rtol=1e-12)
    assert int(shuffled.step) == 3 * N


def test_passes_of_an_untempered_filter_is_one_run_and_other_powers_are_refused():
    X, y = _data(5)
    flt = jr.rvga(jr.models.linear_gaussian(0.25))
    start = flt.init(jnp.zeros(D), jnp.eye(D))
    np.testing.assert_allclose(jr.passes(flt, start, X, y).mean, jr.run(flt, start, X, y)[0].mean, rtol=1e-12)
    hot = jr.rvga(jr.models.tempered(jr.models.linear_gaussian(0.25), 0.4))
    with pytest.raises(ValueError, match="flt.model.power must be 1 / E"):
        jr.passes(hot, start, X, y)
    with pytest.raises(ValueError, match="key must be"):
        jr.passes(flt, start, X, y, key=3)


@pytest.mark.parametrize("scheme", ["ekf", "moment_ekf"])
def test_a_tempered_gaussian_is_the_gaussian_of_the_noise_over_the_power(scheme):
    """``gaussian(v)`` to the power ``p`` is ``gaussian(v / p)`` up to a constant: the same steps of a
    network, for the low-rank and the diagonal beliefs."""
    X, y = _data(2)
    h = lambda theta, x: jnp.tanh(x @ theta[:D]) * theta[D]  # noqa: E731
    hot = jr.models.tempered(jr.models.nonlinear(h, jr.models.gaussian(0.5)), 0.25)
    wide = jr.models.nonlinear(h, jr.models.gaussian(2.0))
    m0 = jnp.full(D + 1, 0.3)
    W0, psi0 = jr.kernels.lowrank.init_factors(jax.random.PRNGKey(1), D + 1, 2, prior_var=0.5)
    starts = ((lambda m: jr.lrvga(m, rank=2, scheme=scheme), (m0, W0, psi0)),
              (lambda m: jr.diag_rvga(m, scheme=scheme), (m0, jnp.full(D + 1, 0.5))))
    for make, start in starts:
        one, two = make(hot), make(wide)
        a, _ = jr.run(one, one.init(*start), X, y)
        b, _ = jr.run(two, two.init(*start), X, y)
        np.testing.assert_allclose(a.mean, b.mean, rtol=1e-9)
        assert not np.allclose(a.mean, m0)


def test_the_predictive_reads_the_untempered_density():
    X, y = _data()
    model = jr.models.linear_gaussian(0.25)
    flt = jr.rvga(model)
    state = flt.init(jnp.zeros(D), jnp.eye(D))
    hot = jr.models.tempered(model, 0.5)
    assert jr.log_predictive(state, X[0], y[0], hot) == pytest.approx(
        float(jr.log_predictive(state, X[0], y[0], model)), rel=1e-12)


def test_tempered_refuses_bad_powers_and_the_schemes_that_cannot_temper():
    model = jr.models.logistic()
    for bad in (0.0, -0.5, 1.5, float("nan"), True, "a", None):
        with pytest.raises(ValueError, match="power"):
            jr.models.tempered(model, bad)
    with pytest.raises(ValueError, match="model must be"):
        jr.models.tempered("logistic", 0.5)
    assert jr.models.tempered(model, np.float32(0.5)).power == 0.5
    assert jr.models.tempered(model, 1).power == 1.0
    hot = jr.models.tempered(model, 0.5)
    for scheme in ("qkf", "ekf", "moment_ekf"):
        jr.rvga(hot, scheme=scheme)
    with pytest.raises(ValueError, match="'implicit' does not take a tempered model"):
        jr.rvga(hot, scheme="implicit")


def test_one_pass_at_power_one_is_the_model():
    X, y = _data()
    model = jr.models.nonlinear(lambda theta, x: x @ theta, jr.models.gaussian(0.25))
    flt, same = jr.lrvga(model, rank=2), jr.lrvga(jr.models.tempered(model, 1.0), rank=2)
    W0, psi0 = jr.kernels.lowrank.init_factors(jax.random.PRNGKey(1), D, 2, prior_var=1.0)
    a, _ = jr.run(flt, flt.init(jnp.zeros(D), W0, psi0), X, y)
    b, _ = jr.run(same, same.init(jnp.zeros(D), W0, psi0), X, y)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)


def test_a_model_average_tempers_its_forecasters_noise_as_its_members():
    """The forecasters' noise rates absorb a tempered residual as the member does (:func:`jaxrvga.noise.absorb`):
    after two passes at power p the plug-in forecaster's rate is ``b0 + p sum_t r_t^2 / 2``, ``r_t`` the
    residual at the member's mean before step t, and the forecaster of scale 1 reads its member's own."""
    X, y = _data(3)
    p = 0.5
    flt = jr.rvga(jr.models.tempered(jr.models.linear_gaussian(None), p))
    members = jax.vmap(lambda v: flt.init(jnp.zeros(D), v * jnp.eye(D)))(jnp.array([0.1, 1.0]))
    avg = jr.model_average(flt, scales=(0.0, 0.25, 1.0))
    state = jr.passes(avg, avg.init(members), X, y)  # the members' power 1/2: two passes
    alone, residuals = flt.init(jnp.zeros(D), jnp.eye(D)), []
    for _ in range(2):
        start = alone.mean
        alone, means = jr.run(flt, alone, X, y, lambda s, *_: s.mean)
        before = jnp.concatenate([start[None], means[:-1]])
        residuals.append(y - jnp.sum(X * before, axis=1))
    b0 = members.noise.rate[1]
    plug_in = b0 + 0.5 * p * jnp.sum(jnp.concatenate(residuals) ** 2)
    np.testing.assert_allclose(state.rate_ratio[1, 0] * state.members.noise.rate[1], plug_in, rtol=1e-10)
    np.testing.assert_allclose(state.rate_ratio[:, -1], 1.0, rtol=1e-10)
    np.testing.assert_allclose(state.members.noise.rate[1], alone.noise.rate, rtol=1e-10)


def test_a_model_average_scores_a_tempered_step_at_its_power():
    """Each log weight gains ``power`` times its forecaster's log predictive, so that E passes at power 1/E
    count each observation's score once."""
    X, y = _data(4)
    model = jr.models.linear_gaussian(0.25)
    hot = jr.rvga(jr.models.tempered(model, 0.5))
    avg = jr.model_average(hot, scales=(0.0, 1.0))
    s0 = avg.init(jax.vmap(lambda v: hot.init(jnp.zeros(D), v * jnp.eye(D)))(jnp.array([0.1, 1.0])))
    _, (log_weights, members) = jr.run(avg, s0, X, y, lambda s, *_: (s.log_weight, s.members))
    steps = jnp.diff(jnp.concatenate([s0.log_weight[None], log_weights]), axis=0)  # (T, K, S)
    before = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b[:-1]]), s0.members, members)

    def scores(member, x, y):  # (S,) of one member
        return jnp.stack([jr.log_predictive(member, x, y, model, scale=c) for c in (0.0, 1.0)])

    lp = jax.vmap(lambda ms, x, y: jax.vmap(lambda m: scores(m, x, y))(ms))(before, X, y)
    np.testing.assert_allclose(steps, 0.5 * lp, rtol=1e-8, atol=1e-12)


def test_a_learned_prior_moves_by_a_tempered_evidence():
    """``move_prior`` at power p: the information gains ``p g^2`` and the log precision ``p g / I`` where the
    untempered step, from the same state and observation, gains ``g^2`` and ``g / I``."""
    X, y = _data(5)
    model = jr.models.linear_gaussian(0.25)
    one = jax.tree_util.tree_map(lambda a: a[None], jr.rvga(model).init(jnp.zeros(D), jnp.eye(D)))
    steps = []
    for m in (model, jr.models.tempered(model, 0.25)):
        avg = jr.model_average(jr.rvga(m), learn_prior=1.0)
        s0 = avg.init(one, prior_precision=1.0)
        new = avg.update(s0, X[0], y[0])
        steps.append((new.prior.information - s0.prior.information, new.prior.log_precision - s0.prior.log_precision,
                      new.prior.information))
    (d_info, d_lam, info), (hot_info, hot_lam, hot_total) = steps
    g = d_lam[..., None] * info  # lam' = lam + g / I'
    np.testing.assert_allclose(d_info, g * g, rtol=1e-8)
    assert abs(float(g.squeeze())) > 1e-3
    np.testing.assert_allclose(hot_info, 0.25 * g * g, rtol=1e-8)
    np.testing.assert_allclose(hot_lam[..., None], 0.25 * g / hot_total, rtol=1e-8)


def test_temper_scales_an_increments_curvature_and_gradient():
    X, v = jnp.arange(6.0).reshape(3, 2), jnp.array([1.0, -1.0, 2.0])
    for inc in (jr.schemes.Increment(X, coef=jnp.array([1.0, 2.0]), g=jnp.ones(3)),
                jr.schemes.Increment(X, c=jnp.array([0.5, 3.0]), g=jnp.ones(3))):
        hot = jr.schemes.temper(inc, 0.5)
        np.testing.assert_allclose(hot.curvature_times(v), 0.5 * inc.curvature_times(v), rtol=1e-12)
        np.testing.assert_allclose(hot.gradient(), 0.5 * inc.gradient(), rtol=1e-12)
        assert jr.schemes.temper(inc, 1.0) is inc


def test_a_tempered_step_of_a_non_finite_observation_is_flagged_and_keeps_the_belief():
    model = jr.models.tempered(jr.models.nonlinear(lambda theta, x: jnp.tanh(x @ theta), jr.models.gaussian(None)), 0.5)
    flt = jr.lrvga(model, rank=2)
    W0, psi0 = jr.kernels.lowrank.init_factors(jax.random.PRNGKey(1), D, 2, prior_var=1.0)
    state = flt.init(jnp.full(D, 0.1), W0, psi0)
    for x, y in ((jnp.ones(D), jnp.nan), (jnp.full(D, jnp.inf), 1.0)):
        new = flt.update(state, x, y)
        assert not bool(new.info.converged)
        np.testing.assert_array_equal(new.mean, state.mean)
        np.testing.assert_array_equal(new.noise.rate, state.noise.rate)
