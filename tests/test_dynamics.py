"""The prediction step (jaxrvga.dynamics): decay, additive noise and process noise for every belief.

Oracles in float64: the dense filter equals a NumPy Kalman filter with ``F = gamma I`` and ``Q``; the
low-rank belief at full rank equals the dense one; the low-rank prediction at rank p < d equals
``(s Lam^{-1} + Q)^{-1}`` formed densely; an update equals the update without dynamics of the
predicted belief (``update = predict, then condition``).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga.kernels import lowrank

jax.config.update("jax_enable_x64", True)

D, T, S2 = 6, 30, 0.09


def _data(seed=0, d=D, t=T):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(t, d))
    return X, X @ rng.normal(size=d) + np.sqrt(S2) * rng.normal(size=t)


def _numpy_kalman(X, y, mu, P, gamma, q, eta, target):
    """The Kalman filter with ``F = gamma I`` after the inflation ``(1 + eta) P``, ``Q = diag(q)``."""
    mu, P = np.array(mu, float), np.array(P, float)
    for h, yt in zip(X, y):
        mu = gamma * mu + (1 - gamma) * target
        P = gamma**2 * (1 + eta) * P + np.diag(np.broadcast_to(q, mu.shape))
        s = h @ P @ h + S2
        k = P @ h / s
        mu, P = mu + k * (yt - h @ mu), P - np.outer(k, h @ P)
    return mu, P


CASES = [dict(decay=0.9, additive_noise=np.linspace(0.01, 0.05, D), decay_to=np.full(D, 0.5)),
         dict(decay=1.05, additive_noise=0.02, process_noise=0.1),
         dict(additive_noise=0.03)]


@pytest.mark.parametrize("case", CASES)
def test_dense_and_full_rank_filters_equal_the_kalman_filter_with_dynamics(case):
    X, y = _data()
    P0 = np.diag(np.linspace(0.5, 2.0, D))
    want_mu, want_P = _numpy_kalman(X, y, np.zeros(D), P0, case.get("decay", 1.0), case.get("additive_noise", 0.0),
                                    case.get("process_noise", 0.0), case.get("decay_to", 0.0))
    flt = jr.kalman(S2, **case)
    out, _ = jr.run(flt, flt.init(jnp.zeros(D), P0), X, y)
    np.testing.assert_allclose(out.mean, want_mu, atol=1e-10)
    np.testing.assert_allclose(out.cov, want_P, atol=1e-10)
    assert bool(out.info.converged)
    low = jr.lrvga(jr.models.linear_gaussian(S2), rank=D, **case)
    out, _ = jr.run(low, low.init(jnp.zeros(D), jnp.zeros((D, D)), 1.0 / np.diag(P0)), X, y)
    np.testing.assert_allclose(out.mean, want_mu, atol=1e-10)
    np.testing.assert_allclose(lowrank.to_dense_covariance(out.W, out.psi), want_P, atol=1e-10)
    np.testing.assert_allclose(out.gram, lowrank.whitened_gram(out.W, out.psi), atol=1e-9)


@pytest.mark.parametrize("buffer", [0, 2])
def test_lowrank_prediction_is_exact_at_low_rank(buffer):
    """``(s Lam^{-1} + Q)^{-1}`` of a rank-4 factor at d = 50, formed densely, and the cached Gram."""
    d, p = 50, 4
    rng = np.random.default_rng(1)
    W, psi, q = rng.normal(size=(d, p)), rng.uniform(0.5, 2.0, d), rng.uniform(0.0, 0.3, d)
    flt = jr.lrvga(jr.models.linear_gaussian(1.0), rank=p, buffer=buffer, decay=0.8, additive_noise=q,
                   process_noise=0.1, decay_to=1.0)
    state = flt.init(jnp.ones(d), W, psi)
    prior = flt.predict(state)
    Lam = W @ W.T + np.diag(psi)
    want = np.linalg.inv(0.8**2 * 1.1 * np.linalg.inv(Lam) + np.diag(q))
    np.testing.assert_allclose(prior.W @ prior.W.T + np.diag(prior.psi), want, atol=1e-12 * np.abs(want).max())
    np.testing.assert_allclose(prior.gram, lowrank.whitened_gram(prior.W, prior.psi), atol=1e-12)
    np.testing.assert_allclose(prior.mean, np.ones(d))  # 0.8 * 1 + 0.2 * 1
    assert prior.W.shape == (d, p + buffer) and np.all(np.asarray(prior.W[:, p:]) == 0)  # free columns stay free
    assert int(prior.step) == int(state.step) and bool(prior.info.converged)


@pytest.mark.parametrize("rank", [None, 3])
def test_update_is_predict_then_condition(rank):
    """An update with dynamics equals the update without dynamics of ``flt.predict(state)``."""
    model = jr.models.logistic()
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=D), 1.0
    dyn = dict(decay=0.95, additive_noise=0.05, process_noise=0.01)
    if rank is None:
        moving, static = jr.rvga(model, "ekf", **dyn), jr.rvga(model, "ekf")
        state = moving.init(jnp.zeros(D), jnp.eye(D))
    else:
        moving, static = jr.lrvga(model, rank, scheme="ekf", **dyn), jr.lrvga(model, rank, scheme="ekf")
        state = moving.init(jnp.zeros(D), 0.3 * rng.normal(size=(D, rank)), jnp.ones(D))
    got = moving.update(state, x, y)
    want = static.update(moving.predict(state), x, y)
    np.testing.assert_allclose(got.mean, want.mean, atol=1e-12)
    if rank is None:
        np.testing.assert_allclose(got.cov, want.cov, atol=1e-12)
    else:
        np.testing.assert_allclose(lowrank.to_dense_precision(got.W, got.psi),
                                   lowrank.to_dense_precision(want.W, want.psi), atol=1e-10)


def test_float32_lowrank_with_additive_noise_is_finite_and_close_to_float64():
    X, y = _data(3, d=20, t=60)
    rng = np.random.default_rng(3)
    W = 0.1 * rng.normal(size=(20, 3))
    runs = []
    for dtype in (jnp.float32, jnp.float64):
        flt = jr.lrvga(jr.models.linear_gaussian(S2), rank=3, decay=0.99, additive_noise=1e-3)
        state = flt.init(jnp.zeros(20, dtype), W.astype(dtype), jnp.ones(20, dtype))
        out, info = jr.run(flt, state, X.astype(dtype), y.astype(dtype), trace_fn=jr.trace_info)
        assert out.mean.dtype == dtype and bool(np.all(info.converged))
        runs.append(out)
    np.testing.assert_allclose(runs[0].mean, runs[1].mean, atol=1e-3)


def test_dynamics_are_validated():
    with pytest.raises(ValueError, match=r"^additive_noise must be >= 0"):
        jr.rvga(jr.models.logistic(), additive_noise=-1.0)
    with pytest.raises(ValueError, match=r"^decay must be finite"):
        jr.lrvga(jr.models.logistic(), 2, decay=np.nan)
    with pytest.raises(ValueError, match=r"^decay must be a scalar"):
        jr.kalman(1.0, decay=np.ones(3))
    with pytest.raises(ValueError, match=r"^decay_to"):
        jr.kalman(1.0, decay_to=1.0)
    with pytest.raises(ValueError, match=r"^process_noise must be"):
        jr.kalman(1.0, process_noise="0.1")
    flt = jr.kalman(1.0, additive_noise=np.ones(4))
    with pytest.raises(ValueError, match=r"^additive_noise must be a scalar or have shape \(3,\)"):
        flt.update(flt.init(jnp.zeros(3), jnp.eye(3)), jnp.ones(3), 1.0)
    assert jr.dynamics.dynamics(decay=1, additive_noise=0.0, process_noise=0, decay_to=2.0).is_identity


def test_traced_invalid_dynamics_skip_and_flag_the_step():
    """vmapped over ``q``: a negative one keeps the state and flags the step; the others update."""
    x, y = jnp.ones(D), 1.0

    def one(q):
        flt = jr.kalman(S2, additive_noise=q)
        return flt.update(flt.init(jnp.zeros(D), jnp.eye(D)), x, y)

    out = jax.vmap(one)(jnp.array([0.1, -0.1, jnp.inf]))
    assert np.asarray(out.info.converged).tolist() == [True, False, False]
    np.testing.assert_array_equal(out.cov[1], np.eye(D))
    np.testing.assert_array_equal(out.mean[2], np.zeros(D))
    assert np.asarray(out.step).tolist() == [1, 1, 1]
    state = jr.kalman(S2).init(jnp.zeros(D), jnp.eye(D))
    traced = jax.jit(lambda q: jr.kalman(S2, additive_noise=q).predict(state))(-1.0)
    assert not bool(traced.info.converged)
    np.testing.assert_array_equal(traced.cov, np.eye(D))


def test_gradient_through_dynamics_matches_finite_differences():
    X, y = _data(4)

    def final_mean(params):
        flt = jr.kalman(S2, decay=params[0], additive_noise=params[1], process_noise=params[2])
        out, _ = jr.scan(flt, flt.init(jnp.zeros(D), jnp.eye(D)), X, y)
        return jnp.sum(out.mean) + jnp.trace(out.cov)

    p = jnp.array([0.9, 0.05, 0.02])
    g = jax.grad(final_mean)(p)
    eps = 1e-6
    fd = [(final_mean(p + eps * e) - final_mean(p - eps * e)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
