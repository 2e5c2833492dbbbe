"""The learned noise variance (jaxrvga.noise): the normal-inverse-gamma filter against its closed form."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jaxrvga as jr
from jaxrvga import noise

D, N = 3, 40
A0, B0 = 2.0, 3.0


def _data(n=N, d=D, seed=0, sd=0.7):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ np.linspace(1.0, -1.0, d) + sd * rng.normal(size=n)


def _posterior(X, y, m0, P0, a0=A0, b0=B0):
    """The normal-inverse-gamma posterior ``(m, P, a, b)`` and log evidence in closed form."""
    prec0 = np.linalg.inv(P0)
    P = np.linalg.inv(prec0 + X.T @ X)
    m = P @ (prec0 @ m0 + X.T @ y)
    a = a0 + len(y) / 2
    b = b0 + 0.5 * (y @ y + m0 @ prec0 @ m0 - m @ np.linalg.solve(P, m))
    ev = stats.multivariate_t(X @ m0, (b0 / a0) * (np.eye(len(y)) + X @ P0 @ X.T), df=2 * a0).logpdf(y)
    return m, P, a, b, ev


def _filters():
    """(name, filter, init from (m0, prior variance v)) of the dense belief and the low-rank one at full rank."""
    lg = jr.models.linear_gaussian(None)
    return [("dense", jr.kalman(None), lambda f, m0, v, **k: f.init(m0, v * np.eye(D), **k)),
            ("lowrank", jr.lrvga(lg, rank=D, scheme="exact"),
             lambda f, m0, v, **k: f.init(m0, np.zeros((D, D)), np.full(D, 1.0 / v), **k))]


def _cov(state):
    if hasattr(state, "cov"):
        return np.asarray(state.cov)
    W, psi = np.asarray(state.W), np.asarray(state.psi)
    return np.linalg.inv(W @ W.T + np.diag(psi))


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("which", [0, 1])
def test_normal_inverse_gamma_posterior_and_evidence(which, batch):
    """Posterior mean, covariance, (shape, rate) and log evidence equal the closed form to 1e-10,
    one observation or minibatches of 4 at a time."""
    _, flt, init = _filters()[which]
    X, y = _data()
    m0 = np.array([0.3, 0.0, -0.2])
    m, P, a, b, ev = _posterior(X, y, m0, 2.0 * np.eye(D))
    s0 = init(flt, m0, 2.0, noise=(A0, B0))
    xs, ys = (X, y) if batch == 1 else (X.reshape(-1, batch, D), y.reshape(-1, batch))
    out, _ = jr.run(flt, s0, xs, ys)
    np.testing.assert_allclose(out.mean, m, atol=1e-10)
    np.testing.assert_allclose(_cov(out), P, atol=1e-10)
    np.testing.assert_allclose([out.noise.shape, out.noise.rate], [a, b], rtol=1e-12)
    np.testing.assert_allclose(jr.log_evidence(flt, s0, xs, ys), ev, rtol=1e-11)
    assert bool(jnp.all(out.info.converged))


def test_student_t_log_predictive():
    """One observation's log predictive is the Student-t ``t_{2a}(x^T m, (b/a)(1 + x^T P x))`` and the
    predictive variance with observation noise is its variance ``b / (a - 1) (1 + x^T P x)``."""
    flt = jr.kalman(None)
    P = np.array([[1.0, 0.3, 0.0], [0.3, 2.0, 0.1], [0.0, 0.1, 0.5]])
    st = flt.init(np.array([0.5, -1.0, 2.0]), P, noise=(3.5, 2.0))
    x, y = np.array([1.0, 0.5, -0.3]), 1.7
    scale2 = (2.0 / 3.5) * (1.0 + x @ P @ x)
    want = stats.t(df=7.0, loc=x @ st.mean, scale=np.sqrt(scale2)).logpdf(y)
    model = jr.models.linear_gaussian(None)
    np.testing.assert_allclose(jr.log_predictive(st, x, y, model), want, rtol=1e-12)
    mean, var = jr.predictive(st, x, model, observation_noise=True)
    np.testing.assert_allclose([mean, var], [x @ st.mean, 2.0 / 2.5 * (1.0 + x @ P @ x)], rtol=1e-12)
    np.testing.assert_allclose(jr.predictive(st, x, model).var, 2.0 / 2.5 * (x @ P @ x), rtol=1e-12)


def test_monte_carlo_draws_the_noise_variance():
    """With a key, draws of ``(theta, s2)`` estimate the Student-t predictive (4 standard errors)."""
    flt = jr.kalman(None)
    st = flt.init(np.zeros(D), np.eye(D), noise=(6.0, 5.0))
    X, y = _data(n=3)
    model = jr.models.linear_gaussian(None)
    exact = jr.predictive(st, X, model, observation_noise=True)
    mc = jr.predictive(st, X, model, key=jax.random.PRNGKey(0), num_samples=200_000, observation_noise=True)
    assert np.all(np.abs(mc.mean - exact.mean) <= 4 * np.sqrt(exact.var / 200_000))
    np.testing.assert_allclose(mc.var, exact.var, rtol=0.05)
    lp = jr.log_predictive(st, X[0], y[0], model, key=jax.random.PRNGKey(1), num_samples=200_000)
    np.testing.assert_allclose(lp, jr.log_predictive(st, X[0], y[0], model), atol=0.01)


def test_evidence_gradients_match_finite_differences():
    """``d log_evidence / d (shape, rate, prior variance)`` equal central differences."""
    flt = jr.kalman(None)
    X, y = _data(n=12)

    def ev(params):
        a, b, v = params
        return jr.log_evidence(flt, flt.init(jnp.zeros(D), v * jnp.eye(D), noise=(a, b)), X, y)

    p = jnp.array([2.0, 3.0, 1.5])
    grad = jax.grad(ev)(p)
    h = 1e-5
    fd = [(ev(p.at[i].add(h)) - ev(p.at[i].add(-h))) / (2 * h) for i in range(3)]
    np.testing.assert_allclose(grad, fd, rtol=1e-6)


def test_learns_the_noise_level():
    """The noise variance's posterior mean approaches the true 0.49 (float32, 3000 observations)."""
    X, y = _data(n=3000, sd=0.7, seed=3)
    flt = jr.kalman(None)
    f32 = jnp.float32
    out, _ = jr.run(flt, flt.init(jnp.zeros(D, f32), jnp.eye(D, dtype=f32)), jnp.asarray(X, f32), jnp.asarray(y, f32))
    assert out.mean.dtype == jnp.float32
    assert abs(float(noise.expected_variance(out.noise)) - 0.49) < 0.03


def test_nonlinear_gaussian_of_a_linear_predictor_is_exact():
    """``nonlinear(h, gaussian(None))`` with ``h(theta, x) = x^T theta`` and the (moment_)EKF is the exact
    normal-inverse-gamma filter: the linearised update of a linear predictor."""
    X, y = _data(n=15)
    exact = jr.kalman(None)
    s0 = exact.init(np.zeros(D), np.eye(D))
    want, _ = jr.run(exact, s0, X, y)
    model = jr.models.nonlinear(lambda theta, x: x @ theta, jr.models.gaussian(None))
    for scheme in ("ekf", "moment_ekf"):
        flt = jr.rvga(model, scheme, max_move=float("inf"))
        got, _ = jr.run(flt, flt.init(np.zeros(D), np.eye(D)), X, y)
        np.testing.assert_allclose(got.mean, want.mean, atol=1e-10)
        np.testing.assert_allclose(got.noise.rate, want.noise.rate, rtol=1e-10)
        np.testing.assert_allclose(jr.log_evidence(flt, s0, X, y), jr.log_evidence(exact, s0, X, y), rtol=1e-10)


def test_noise_discount():
    """``noise_discount`` multiplies ``(shape, rate)`` before each observation (West and Harrison)."""
    X, y = _data(n=1)
    dyn = jr.dynamics.dynamics(noise_discount=0.9)
    flt = jr.build(jr.beliefs.Dense(), jr.schemes.exact(), jr.models.linear_gaussian(None), dyn)
    s0 = flt.init(np.zeros(D), np.eye(D), noise=(A0, B0))
    pred = flt.predict(s0)
    np.testing.assert_allclose([pred.noise.shape, pred.noise.rate], [0.9 * A0, 0.9 * B0])
    got = flt.update(s0, X[0], y[0])
    want = jr.kalman(None).update(pred, X[0], y[0])
    np.testing.assert_allclose([got.noise.shape, got.noise.rate], [want.noise.shape, want.noise.rate], rtol=1e-12)
    for bad in (0.0, 1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="noise_discount"):
            jr.dynamics.dynamics(noise_discount=bad)


@pytest.mark.parametrize("bad", [(0.0, 1.0), (1.0, -2.0), (1.0, float("inf")), (1.0,), "ab", (1.0, np.ones(2))])
def test_bad_noise_is_refused(bad):
    flt = jr.kalman(None)
    with pytest.raises(ValueError, match="noise"):
        flt.init(np.zeros(D), np.eye(D), noise=bad)


def test_noise_only_where_it_is_learned():
    """``noise=`` for a known variance, or a state without statistics for a learned one, is refused."""
    with pytest.raises(ValueError, match="noise"):
        jr.kalman(1.0).init(np.zeros(D), np.eye(D), noise=(1.0, 1.0))
    known = jr.kalman(1.0).init(np.zeros(D), np.eye(D))
    with pytest.raises(ValueError, match="noise"):
        jr.kalman(None).update(known, np.ones(D), 1.0)
    with pytest.raises(ValueError, match="noise"):
        jr.log_predictive(known, np.ones(D), 1.0, jr.models.linear_gaussian(None))


def test_a_skipped_step_keeps_the_statistics():
    """A NaN observation is skipped and flagged: ``(shape, rate)`` stay the prior's."""
    flt = jr.kalman(None)
    s0 = flt.init(jnp.zeros(D), jnp.eye(D))
    out = flt.update(s0, jnp.ones(D), jnp.nan)
    assert not bool(out.info.converged)
    np.testing.assert_array_equal([out.noise.shape, out.noise.rate], [s0.noise.shape, s0.noise.rate])


def test_vmapped_priors_and_io_round_trip(tmp_path):
    """A vmapped grid of noise priors runs, and its state round-trips through jr.io bit for bit; a
    file whose rate is not positive is refused."""
    flt = jr.kalman(None)
    rates = jnp.array([0.5, 1.0, 4.0])
    s0 = jax.vmap(lambda b: flt.init(jnp.zeros(D, jnp.float32), jnp.eye(D, dtype=jnp.float32), noise=(1.0, b)))(rates)
    X, y = _data(n=10)
    out, _ = jax.vmap(lambda s: jr.run(flt, s, jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)))(s0)
    assert out.noise.rate.shape == (3,)
    jr.io.save(tmp_path / "s.npz", out)
    back = jr.io.load(tmp_path / "s.npz")
    np.testing.assert_array_equal(back.noise.rate, out.noise.rate)
    jr.io.save(tmp_path / "bad.npz", out._replace(noise=out.noise._replace(rate=-out.noise.rate)))
    with pytest.raises(ValueError, match="noise.rate"):
        jr.io.load(tmp_path / "bad.npz")


def test_diagonal_belief_keeps_its_diagonal_rule():
    """The diagonal belief learns the noise with its own ``P = diag(1 / psi)``: one step's ``rate`` is
    ``b + r^2 / (2 (1 + x^T P x))`` and its mean step the diagonal belief's of unit noise variance."""
    model = jr.models.linear_gaussian(None)
    flt = jr.diag_rvga(model, scheme="exact")
    var = np.array([0.5, 2.0, 1.0])
    s0 = flt.init(np.zeros(D), var, noise=(A0, B0))
    x, y = np.array([1.0, -0.5, 2.0]), 0.8
    out = flt.update(s0, x, y)
    np.testing.assert_allclose(out.noise.rate, B0 + y**2 / (2 * (1 + x @ (var * x))), rtol=1e-12)
    np.testing.assert_allclose(out.noise.shape, A0 + 0.5)
    unit = jr.diag_rvga(jr.models.linear_gaussian(1.0), scheme="exact")
    np.testing.assert_allclose(out.mean, unit.update(unit.init(np.zeros(D), var), x, y).mean, rtol=1e-12)


def test_quadratic_form_is_r_solve_s_r():
    """``r^T S^{-1} r`` against a solve, for one output (no factorisation) and for three; NaN where a
    1 x 1 ``S`` is not positive, as the Cholesky route gives for a matrix that is not positive definite."""
    rng = np.random.default_rng(4)
    for k in (1, 3):
        A = rng.normal(size=(k, k))
        S, r = A @ A.T + np.eye(k), rng.normal(size=k)
        np.testing.assert_allclose(jr.noise.quadratic_form(jnp.asarray(r), jnp.asarray(S)), r @ np.linalg.solve(S, r),
                                   rtol=1e-12)
    assert np.isnan(jr.noise.quadratic_form(jnp.ones(1), -jnp.ones((1, 1))))
    assert np.isnan(jr.noise.quadratic_form(jnp.ones(2), -jnp.eye(2)))
