"""The diagonal (mean-field) belief, jr.diag_rvga, float64 oracles.

Where every precision increment is diagonal (inputs along the axes) the diagonal belief is the dense
belief exactly, for every scheme; otherwise it is its own update written out in NumPy (the diagonal
of the precision step, and the mean step with the unprojected precision, the prior's diagonal plus the
step's curvature); its predictive is the dense predictive of the
same diagonal covariance; states round-trip through jr.io.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from conftest import run_together

jax.config.update("jax_enable_x64", True)

D, T = 6, 25


def _axis_inputs(seed=0, t=T, d=D):
    """Inputs ``a_t e_{i_t}``: every rank-one precision step is diagonal."""
    rng = np.random.default_rng(seed)
    X = np.zeros((t, d))
    X[np.arange(t), rng.integers(0, d, t)] = rng.normal(scale=1.5, size=t)
    return X, rng


TANH = jr.models.nonlinear(lambda th, x: jnp.tanh(x @ th))
CASES = [(jr.models.linear_gaussian(0.5), "exact", {}), (jr.models.linear_gaussian(0.5), "implicit", {}),
         (jr.models.logistic(), "implicit", {}), (jr.models.logistic(), "explicit", {}),
         (jr.models.logistic(), "extragrad", {}), (jr.models.logistic(), "ekf", {}),
         (jr.models.logistic(), "moment_ekf", {}), (jr.models.logistic(), "qkf", {}),
         (jr.models.logistic(), "ekf", dict(curvature="empirical", decay=0.97, additive_noise=0.01)),
         (jr.models.poisson(), "implicit", dict(process_noise=0.05)),
         (TANH, "ekf", {}), (TANH, "moment_ekf", {}), (TANH, "sampled", dict(num_samples=8))]


@pytest.mark.parametrize("model, scheme, options", CASES,
                         ids=[f"{m.kind}-{s}" + ("-dyn" if o and "num_samples" not in o else "") for m, s, o in CASES])
def test_diagonal_increments_give_the_dense_belief(model, scheme, options):
    X, rng = _axis_inputs()
    if model.kind == "logistic":
        y = (rng.random(T) < 0.5).astype(float)
    elif model.kind == "glm":
        y = rng.poisson(1.0, T).astype(float)
    else:
        y = rng.normal(size=T)
    mean, var = 0.1 * rng.normal(size=D), rng.uniform(0.5, 2.0, D)
    key = jax.random.PRNGKey(3) if scheme == "sampled" else None
    dense, diag = jr.rvga(model, scheme, **options), jr.diag_rvga(model, scheme, **options)
    (want, want_info), (got, got_info) = run_together(
        (dense, dense.init(mean, np.diag(var), key=key), X, y), (diag, diag.init(mean, var, key=key), X, y),
        trace_fn=jr.trace_info)
    np.testing.assert_allclose(got.mean, want.mean, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(1.0 / got.psi, np.diagonal(want.cov), rtol=1e-9)
    np.testing.assert_array_equal(got_info.converged, want_info.converged)


def test_general_inputs_follow_the_diagonal_update_written_out():
    """Logistic EKF and the linear-Gaussian exact step at d = 20: ``psi += diag(X diag(c) X^T)``,
    ``mu += (diag(psi) + X diag(c) X^T)^{-1} g`` with the previous ``psi``."""
    rng = np.random.default_rng(1)
    d = 20
    X = rng.normal(size=(T, d))
    labels = (rng.random(T) < 0.5).astype(float)
    targets = X @ rng.normal(size=d) + rng.normal(size=T)
    flt = jr.diag_rvga(jr.models.logistic(), "ekf", max_move=np.inf)
    out, _ = jr.run(flt, flt.init(np.zeros(d), 2.0), X, labels)
    mu, psi = np.zeros(d), np.full(d, 0.5)
    for x, y in zip(X, labels):
        p = 1.0 / (1.0 + np.exp(-x @ mu))
        mu = mu + np.linalg.solve(np.diag(psi) + p * (1 - p) * np.outer(x, x), (y - p) * x)
        psi = psi + p * (1 - p) * x**2
    np.testing.assert_allclose(out.mean, mu, rtol=1e-10)
    np.testing.assert_allclose(out.psi, psi, rtol=1e-10)
    flt = jr.diag_rvga(jr.models.linear_gaussian(0.3))
    out, _ = jr.run(flt, flt.init(np.zeros(d), 1.0), X.reshape(5, 5, d), targets.reshape(5, 5))
    mu, psi = np.zeros(d), np.ones(d)
    for Xb, yb in zip(X.reshape(5, 5, d), targets.reshape(5, 5)):
        g = Xb.T @ (yb - Xb @ mu) / 0.3
        mu = mu + np.linalg.solve(np.diag(psi) + Xb.T @ Xb / 0.3, g)
        psi = psi + np.sum(Xb**2, axis=0) / 0.3
    np.testing.assert_allclose(out.mean, mu, rtol=1e-10)
    np.testing.assert_allclose(out.psi, psi, rtol=1e-10)


def test_predictive_equals_the_dense_predictive_of_the_same_covariance():
    rng = np.random.default_rng(2)
    mean, var = rng.normal(size=D), rng.uniform(0.2, 1.5, D)
    diag = jr.diag_rvga(jr.models.logistic()).init(mean, var)
    dense = jr.rvga(jr.models.logistic()).init(mean, np.diag(var))
    X = rng.normal(size=(7, D))
    models = (jr.models.logistic(), jr.models.poisson(), TANH)

    def scores(state, X):
        """Per model: the predictive of the rows ``X`` and the log predictive of ``y = 1`` at the first row."""
        return [(jr.predictive(state, X, model), jr.log_predictive(state, X[0], 1.0, model)) for model in models]

    both = jax.jit(lambda diag, dense, X: (scores(diag, X), scores(dense, X)))  # one compiled program
    for (pred, log_pred), (pred_dense, log_pred_dense) in zip(*both(diag, dense, X)):
        for got, want in zip(pred, pred_dense):
            np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_allclose(log_pred, log_pred_dense, rtol=1e-12)
    draws = jr.diag_rvga(jr.models.logistic()).init(mean, var)
    theta = jr.beliefs.Diagonal().sample(draws, jax.random.PRNGKey(0), 200_000)
    np.testing.assert_allclose(np.var(np.asarray(theta), axis=0), var, rtol=0.02)


def test_log_evidence_and_save_load(tmp_path):
    X, rng = _axis_inputs(4)
    y = X @ rng.normal(size=D) + rng.normal(size=T)
    dense, diag = jr.kalman(0.5), jr.diag_rvga(jr.models.linear_gaussian(0.5))
    np.testing.assert_allclose(jr.log_evidence(diag, diag.init(np.zeros(D), 2.0), X, y),
                               jr.log_evidence(dense, dense.init(np.zeros(D), 2.0 * np.eye(D)), X, y), rtol=1e-12)
    state, _ = jr.run(diag, diag.init(np.zeros(D), 2.0), X, y)
    jr.io.save(tmp_path / "s.npz", state)
    back = jr.io.load(tmp_path / "s.npz")
    assert isinstance(back, jr.DiagonalState)
    np.testing.assert_array_equal(back.psi, state.psi)
    jr.io.save(tmp_path / "bad.npz", state._replace(psi=-state.psi))
    with pytest.raises(ValueError, match="psi"):
        jr.io.load(tmp_path / "bad.npz")


def test_fleets_float32_guard_and_validation():
    X, rng = _axis_inputs(5)
    y = (rng.random(T) < 0.5).astype(float)
    flt = jr.diag_rvga(jr.models.logistic(), "ekf")

    def fit(v):
        return jr.scan(flt, flt.init(jnp.zeros(D), v), X, y)[0].mean

    fleet = jax.vmap(fit)(jnp.array([0.5, 1.0, 4.0]))
    for i, v in enumerate((0.5, 1.0, 4.0)):
        np.testing.assert_allclose(fleet[i], fit(v), rtol=1e-10)
    out32, info = jr.run(flt, flt.init(jnp.zeros(D, jnp.float32), 1.0), X.astype(np.float32), y.astype(np.float32),
                         jr.trace_info)
    assert out32.psi.dtype == jnp.float32 and bool(np.all(info.converged))
    np.testing.assert_allclose(out32.mean, jr.run(flt, flt.init(np.zeros(D), 1.0), X, y)[0].mean, atol=1e-4)
    state = flt.init(np.zeros(D), 1.0)
    skipped = flt.update(state, np.full(D, np.nan), 1.0)
    assert not bool(skipped.info.converged) and int(skipped.step) == 1
    np.testing.assert_array_equal(skipped.psi, state.psi)
    with pytest.raises(ValueError, match="var must be positive"):
        flt.init(np.zeros(D), 0.0)
    with pytest.raises(ValueError, match=r"var must be a scalar or have shape \(6,\)"):
        flt.init(np.zeros(D), np.ones(4))
    with pytest.raises(ValueError, match="hessian"):
        jr.diag_rvga(TANH, "sampled", curvature="hessian")
    with pytest.raises(ValueError, match="DiagonalState"):
        flt.update(jr.rvga(jr.models.logistic()).init(np.zeros(D), np.eye(D)), np.ones(D), 1.0)


@pytest.mark.parametrize("scheme", ["ekf", None])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_correlated_inputs_converge_like_the_dense_belief(scheme, dtype):
    """d = 100 inputs all ones, y = 1: the mean step with the diagonal alone gained up to d times
    too much (predictions 37.5, -958, ..., -2.7e18, every step converged). With the unprojected
    precision the first step is the dense one and each later step shrinks the residual ``1 - x^T mu``
    by ``s2 / (s2 + x^T D^{-1} x)`` in (0, 1): predictions in (0, 1], within 0.05 of the dense ones."""
    d, t = 100, 20
    X, y = np.ones((t, d), dtype), np.ones(t, dtype)
    trace = lambda st, x, yy: (x @ st.mean, st.info.converged)  # noqa: E731
    flt = jr.diag_rvga(jr.models.linear_gaussian(0.5), scheme=scheme)
    dense = jr.rvga(jr.models.linear_gaussian(0.5), scheme=scheme)
    (_, (pred, ok)), (_, (want, _)) = run_together(
        (flt, flt.init(jnp.zeros(d, dtype), 0.3), X, y),
        (dense, dense.init(jnp.zeros(d, dtype), 0.3 * np.eye(d, dtype=dtype)), X, y), trace_fn=trace)
    pred, tol = np.asarray(pred, np.float64), 1e-4 if dtype == np.float32 else 1e-12
    assert bool(np.all(ok)) and np.all(np.isfinite(pred))
    np.testing.assert_allclose(pred[0], want[0], rtol=tol)
    assert np.all((pred > 0) & (pred <= 1 + tol)) and np.all(np.diff(pred) >= -tol)
    assert np.all(np.abs(pred - np.asarray(want)) <= 0.05) and abs(pred[-1] - 1.0) <= 1e-3


def test_one_exact_step_is_the_gaussian_posterior_mean():
    """Linear-Gaussian, one observation: ``mean = (D + x x^T / s2)^{-1} (D mu0 + x y / s2)`` (the exact
    posterior mean from the diagonal prior), ``psi = psi0 + x^2 / s2`` (its diagonal)."""
    rng = np.random.default_rng(7)
    d, s2 = 9, 0.4
    mu0, var0, x, y = rng.normal(size=d), rng.uniform(0.3, 3.0, d), rng.normal(size=d), 1.7
    flt = jr.diag_rvga(jr.models.linear_gaussian(s2))
    out = flt.update(flt.init(mu0, var0), x, y)
    D = np.diag(1.0 / var0)
    want = np.linalg.solve(D + np.outer(x, x) / s2, D @ mu0 + x * y / s2)
    np.testing.assert_allclose(out.mean, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.psi, 1.0 / var0 + x**2 / s2, rtol=1e-12)
    assert bool(out.info.converged)


@pytest.mark.parametrize("m, d", [(4, 7), (9, 7)])
def test_mean_step_is_the_solve_with_the_unprojected_precision(m, d):
    """``absorb``: ``mu + (diag(psi) + X diag(c) X^T)^{-1} g`` (Woodbury through m x m, or d x d where
    m > d), ``c`` clipped at 0 for the step while ``psi`` keeps the signed diagonal; ``prior_gain``:
    ``mu + g / psi`` with the prior's ``psi``."""
    rng = np.random.default_rng(8)
    belief = jr.beliefs.Diagonal()
    state = belief.init(rng.normal(size=d), rng.uniform(0.2, 2.0, d))
    psi, X, g = np.asarray(state.psi), rng.normal(size=(d, m)), rng.normal(size=d)
    c = rng.uniform(0.1, 3.0, m)
    new, ok = belief.absorb(state, X, c, g)
    assert bool(ok)
    np.testing.assert_allclose(new.mean, state.mean + np.linalg.solve(np.diag(psi) + X @ np.diag(c) @ X.T, g),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(new.psi, psi + (X * X) @ c, rtol=1e-12)
    c[0] = -0.05  # a non-log-concave site: the step's precision uses max(c, 0)
    new, ok = belief.absorb(state, X, c, g)
    assert bool(ok)
    clipped = np.maximum(c, 0.0)
    np.testing.assert_allclose(new.mean, state.mean + np.linalg.solve(np.diag(psi) + X @ np.diag(clipped) @ X.T, g),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(new.psi, psi + (X * X) @ c, rtol=1e-12)
    new, _ = belief.absorb(state, X, c, g, prior_gain=True)
    np.testing.assert_allclose(new.mean, state.mean + g / psi, rtol=1e-12)


def test_max_move_is_the_mahalanobis_length_under_the_prior():
    """``limit_move`` with the diagonal belief: the shortened step has length ``max_move`` in
    ``diag(psi_prior)`` (the identity of :func:`jaxrvga.schemes.limit_move` holds for the unprojected
    precision of the mean step)."""
    rng = np.random.default_rng(9)
    d = 12
    x = rng.normal(size=d) + 2.0
    flt = jr.diag_rvga(jr.models.linear_gaussian(0.1), max_move=0.25)
    state = flt.init(np.zeros(d), 2.0)
    out = flt.update(state, x, 30.0)
    delta = np.asarray(out.mean - state.mean)
    np.testing.assert_allclose(np.sqrt(delta @ (state.psi * delta)), 0.25, rtol=1e-8)
    assert not bool(out.info.converged)


def test_process_noise_with_correlated_inputs_stays_finite():
    """d = 8, inputs ``z_t 1 + 0.1 noise`` (nearly collinear), process noise 1 (``psi <= 1``), 500 steps of
    the exact and EKF schemes: the mean step with the diagonal alone had gain ``x^T D_new^{-1} x / s2``
    near 5 on the residual and diverged (1e98, every step converged with ``exact``). With the
    unprojected precision each step shrinks the residual ``y - x^T mu`` by ``s2 / (s2 + x^T D^{-1} x)``,
    in (0, 1], with ``D`` the predicted diagonal; every step converged."""
    rng = np.random.default_rng(0)
    d, t, s2 = 8, 500, 0.5
    theta = rng.normal(size=d)
    X = rng.normal(size=(t, 1)) + 0.1 * rng.normal(size=(t, d))
    y = X @ theta + np.sqrt(s2) * rng.normal(size=t)
    for scheme in ("exact", "ekf"):
        flt = jr.diag_rvga(jr.models.linear_gaussian(s2), scheme, process_noise=1.0)
        state = flt.init(np.zeros(d), 1.0)
        _, (means, ok) = jr.run(flt, state, X, y, lambda st, x, yy: (st.mean, st.info.converged))
        assert bool(np.all(ok)) and np.all(np.isfinite(means))
        before = y - np.sum(X * np.concatenate([np.zeros((1, d)), means[:-1]]), axis=1)
        ratio = (y - np.sum(X * means, axis=1)) / before
        assert np.all((ratio > 0) & (ratio <= 1 + 1e-9))
        assert np.max(np.abs(means)) <= 10 * np.max(np.abs(theta))
