"""The diagonal (mean-field) belief, jr.diag_rvga, float64 oracles.

Where every precision increment is diagonal (inputs along the axes) the diagonal belief is the dense
belief exactly, for every scheme; otherwise it is its own update written out in NumPy (the diagonal
of the precision step, then the mean step with it); its predictive is the dense predictive of the
same diagonal covariance; states round-trip through jr.io.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr

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
    want, want_info = jr.run(dense, dense.init(mean, np.diag(var), key=key), X, y, jr.trace_info)
    got, got_info = jr.run(diag, diag.init(mean, var, key=key), X, y, jr.trace_info)
    np.testing.assert_allclose(got.mean, want.mean, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(1.0 / got.psi, np.diagonal(want.cov), rtol=1e-9)
    np.testing.assert_array_equal(got_info.converged, want_info.converged)


def test_general_inputs_follow_the_diagonal_update_written_out():
    """Logistic EKF and the linear-Gaussian exact step at d = 20: ``psi += diag(X diag(c) X^T)``,
    ``mu += g / psi`` with the new ``psi``."""
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
        psi = psi + p * (1 - p) * x**2
        mu = mu + (y - p) * x / psi
    np.testing.assert_allclose(out.mean, mu, rtol=1e-10)
    np.testing.assert_allclose(out.psi, psi, rtol=1e-10)
    flt = jr.diag_rvga(jr.models.linear_gaussian(0.3))
    out, _ = jr.run(flt, flt.init(np.zeros(d), 1.0), X.reshape(5, 5, d), targets.reshape(5, 5))
    mu, psi = np.zeros(d), np.ones(d)
    for Xb, yb in zip(X.reshape(5, 5, d), targets.reshape(5, 5)):
        g = Xb.T @ (yb - Xb @ mu) / 0.3
        psi = psi + np.sum(Xb**2, axis=0) / 0.3
        mu = mu + g / psi
    np.testing.assert_allclose(out.mean, mu, rtol=1e-10)
    np.testing.assert_allclose(out.psi, psi, rtol=1e-10)


def test_predictive_equals_the_dense_predictive_of_the_same_covariance():
    rng = np.random.default_rng(2)
    mean, var = rng.normal(size=D), rng.uniform(0.2, 1.5, D)
    diag = jr.diag_rvga(jr.models.logistic()).init(mean, var)
    dense = jr.rvga(jr.models.logistic()).init(mean, np.diag(var))
    X = rng.normal(size=(7, D))
    for model in (jr.models.logistic(), jr.models.poisson(), TANH):
        for got, want in zip(jr.predictive(diag, X, model), jr.predictive(dense, X, model)):
            np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_allclose(jr.log_predictive(diag, X[0], 1.0, model),
                                   jr.log_predictive(dense, X[0], 1.0, model), rtol=1e-12)
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
