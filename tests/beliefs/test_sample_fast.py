"""jr.sample at the cost of a factorisation (issue 50): a dense belief is drawn through its Cholesky
factor (the eigen-root only where that factor is not finite), and a model average is drawn as the
mixture of its forecasters. Oracles in float64: the sample moments against the covariance within
Monte-Carlo tolerances from the central limit theorem.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga.beliefs.dense import sqrt_factor

D = 4
RNG = np.random.default_rng(50)
_A = RNG.normal(size=(D, D))
COV = _A @ _A.T / D + 0.3 * np.eye(D)
MEAN = RNG.normal(size=D)
N = 100_000


def _assert_moments(draws, mean, cov, n=N):
    """Each mean within 5 standard errors ``sqrt(S_ii / n)``; each sample covariance entry within 5
    of its standard errors ``sqrt((S_ii S_jj + S_ij^2) / n)`` (Gaussian draws), plus float64 rounding (1e-10)."""
    draws = np.asarray(draws, np.float64)
    assert draws.shape == (n, len(mean)) and np.all(np.isfinite(draws))
    np.testing.assert_array_less(np.abs(draws.mean(0) - mean), 5 * np.sqrt(np.diagonal(cov) / n) + 1e-10)
    d = np.diagonal(cov)
    se = np.sqrt((np.outer(d, d) + cov**2) / n)
    np.testing.assert_array_less(np.abs(np.cov(draws.T) - cov), 5 * se + 1e-10)


def test_dense_draws_are_mean_plus_cholesky_factor_times_normals():
    # the route of a positive definite covariance is the Cholesky factor itself: bit for bit
    # mean + z L^T with the normals z of the key
    state = jr.kalman(1.0).init(MEAN, COV)
    key = jax.random.PRNGKey(1)
    z = jax.random.normal(key, (7, D), jnp.float64)
    expected = MEAN + np.asarray(z) @ np.linalg.cholesky(COV).T
    np.testing.assert_allclose(jr.sample(state, key, 7), expected, rtol=1e-12, atol=1e-12)


def test_dense_draws_have_the_covariance():
    _assert_moments(jr.sample(jr.kalman(1.0).init(MEAN, COV), jax.random.PRNGKey(2), N), MEAN, COV)


@pytest.mark.parametrize("kind", ["rank_one", "zero"])
def test_singular_covariance_still_samples(kind):
    v = RNG.normal(size=D)
    cov = np.outer(v, v) if kind == "rank_one" else np.zeros((D, D))
    state = jr.kalman(1.0).init(MEAN, np.eye(D))._replace(cov=jnp.asarray(cov))
    draws = np.asarray(jr.sample(state, jax.random.PRNGKey(3), N))
    assert np.all(np.isfinite(draws))
    # every draw lies in mean + the column space of cov (nothing in its null space) ...
    null = np.linalg.svd(cov)[0][:, 1:] if kind == "rank_one" else np.eye(D)
    np.testing.assert_allclose((draws - MEAN) @ null, 0.0, atol=1e-6 * (1 + np.abs(cov).max()))
    # ... with the covariance's moments
    _assert_moments(draws, MEAN, cov)


def test_sqrt_factor_of_a_batch_is_a_root_of_each_and_falls_back_for_all():
    # one branch for the batch: the Cholesky factors of positive definite matrices, and a root of
    # each (R R^T = cov) when one of them is singular
    pd = np.stack([COV, 2 * COV])
    R = np.asarray(sqrt_factor(jnp.asarray(pd)))
    np.testing.assert_allclose(R, np.linalg.cholesky(pd), rtol=1e-12, atol=1e-12)
    v = RNG.normal(size=D)
    mixed = np.stack([COV, np.outer(v, v)])
    R = np.asarray(sqrt_factor(jnp.asarray(mixed)))
    np.testing.assert_allclose(R @ np.swapaxes(R, 1, 2), mixed, atol=1e-12 * np.abs(mixed).max())


def test_float32_draws_and_one_compile_per_shape():
    traces = []

    @jax.jit
    def draw(state, key):
        traces.append(1)
        return jr.sample(state, key, 3)

    for seed in range(3):
        cov = np.asarray(COV * (1 + seed), np.float32)
        state = jr.kalman(1.0).init(np.asarray(MEAN, np.float32), cov)
        out = draw(state, jax.random.PRNGKey(seed))
        assert out.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(out)))
    assert len(traces) == 1


def test_eager_draws_trace_the_factor_once(monkeypatch):
    """Called outside ``jit``, ``jr.sample`` of a dense belief traces its ``lax.cond`` once per shape, not on
    every call (its branches were new lambdas on every call: 95 ms a draw at d = 65, issue 50)."""
    from jaxrvga.beliefs import dense
    traces = []
    root = dense._eigen_root
    monkeypatch.setattr(dense, "_eigen_root", lambda cov: traces.append(1) or root(cov))
    state = jr.kalman(1.0).init(MEAN, COV)
    draws = [jr.sample(state, jax.random.PRNGKey(seed), 3) for seed in range(3)]
    assert len(traces) <= 1 and not np.allclose(draws[0], draws[1])   # 0 where an earlier test traced it
    np.testing.assert_allclose(sqrt_factor(COV), np.linalg.cholesky(COV), rtol=1e-12)


def test_semidefinite_covariance_is_checked_by_its_eigenvalues():
    """A state's covariance is read as semidefinite: a singular one is accepted (after its Cholesky
    factorisation fails, by its eigenvalues), an indefinite one refused with its eigenvalue."""
    u = np.ones(D) / np.sqrt(D)
    state = jr.kalman(1.0).init(MEAN, COV)
    assert np.all(np.isfinite(jr.sample(state._replace(cov=jnp.asarray(np.outer(u, u))), jax.random.PRNGKey(0), 2)))
    with pytest.raises(ValueError, match="positive semidefinite, got an eigenvalue -1"):
        jr.sample(state._replace(cov=jnp.asarray(np.eye(D) - 2 * np.outer(u, u))), jax.random.PRNGKey(0), 2)


def _mixture(means, covs, w, scales):
    """Mean and covariance of ``sum_ks w_ks N(means_k, scales_ks covs_k)`` (``scales`` (S,) or (K, S))."""
    m = np.einsum("ks,kd->d", w, means)
    scales = np.broadcast_to(scales, w.shape)
    cov = sum(w[k, s] * (scales[k, s] * covs[k] + np.outer(means[k] - m, means[k] - m))
              for k in range(len(means)) for s in range(w.shape[1]))
    return m, cov


def _average_of(flt, members, log_prior, scales):
    return jr.model_average(flt, scales=scales).init(members, log_prior=log_prior)


def test_model_average_draws_have_the_mixture_moments_dense():
    scales = (0.0, 0.25, 1.0)
    means = RNG.normal(size=(2, D))
    covs = np.stack([COV, 0.5 * np.eye(D)])
    flt = jr.kalman(1.0)
    members = jax.vmap(flt.init)(jnp.asarray(means), jnp.asarray(covs))
    log_prior = np.log(np.array([[0.1, 0.2, 0.3], [0.15, 0.05, 0.2]]))
    state = _average_of(flt, members, log_prior, scales)
    w = np.exp(log_prior) / np.exp(log_prior).sum()
    _assert_moments(jr.sample(state, jax.random.PRNGKey(4), N), *_mixture(means, covs, w, np.array(scales)))


def test_model_average_draws_have_the_mixture_moments_diagonal_and_learned_noise():
    scales = (0.5, 1.0)
    means = RNG.normal(size=(2, D))
    var = RNG.uniform(0.5, 2.0, size=(2, D))
    flt = jr.diag_rvga(jr.models.logistic())
    members = jax.vmap(flt.init)(jnp.asarray(means), jnp.asarray(var))
    log_prior = np.log(np.array([[0.3, 0.2], [0.1, 0.4]]))
    state = _average_of(flt, members, log_prior, scales)
    w = np.exp(log_prior) / np.exp(log_prior).sum()
    covs = np.stack([np.diag(v) for v in var])
    _assert_moments(jr.sample(state, jax.random.PRNGKey(5), N), *_mixture(means, covs, w, np.array(scales)))
    # a learned noise variance: member k is N(mean_k, s2 P_k), s2 ~ InvGamma(a, b), Cov = b / (a - 1) P_k
    flt = jr.kalman(None)
    members = jax.vmap(lambda m: flt.init(m, jnp.asarray(COV), noise=(6.0, 10.0)))(jnp.asarray(means))
    state = _average_of(flt, members, np.log([0.7, 0.3]), (1.0,))
    w = np.array([[0.7], [0.3]])
    _assert_moments(jr.sample(state, jax.random.PRNGKey(6), N),
                    *_mixture(means, np.stack([COV, COV]) * 10.0 / 5.0, w, np.array([1.0])))
    # each forecaster's own rate (rate_ratio): forecaster (k, s) is N(mean_k, c_s s2 P_k), s2 ~ InvGamma(a, q_ks b)
    ratio = np.array([[2.0, 1.0], [0.5, 1.0]])
    state = _average_of(flt, members, np.log([[0.2, 0.3], [0.4, 0.1]]), (0.5, 1.0))._replace(
        rate_ratio=jnp.asarray(ratio))
    _assert_moments(jr.sample(state, jax.random.PRNGKey(7), N),
                    *_mixture(means, np.stack([COV, COV]) * 10.0 / 5.0, np.array([[0.2, 0.3], [0.4, 0.1]]),
                              np.array([0.5, 1.0]) * ratio))


def test_model_average_draws_have_the_mixture_moments_lowrank_and_compile_once():
    """Low-rank members, drawn through their factors: the mixture of ``N(mean_k, c_s (W W^T + diag(psi))^-1)``;
    eager calls of a new key compile the draws once per shape."""
    from jaxrvga import average
    means = RNG.normal(size=(2, D))
    W, psi = RNG.normal(size=(2, D, 2)), RNG.uniform(0.5, 2.0, size=(2, D))
    flt = jr.lrvga(jr.models.logistic(), rank=2)
    members = jax.vmap(flt.init)(jnp.asarray(means), jnp.asarray(W), jnp.asarray(psi))
    log_prior = np.log(np.array([[0.3, 0.2], [0.1, 0.4]]))
    state = _average_of(flt, members, log_prior, (0.5, 1.0))
    covs = np.stack([np.linalg.inv(W[k] @ W[k].T + np.diag(psi[k])) for k in range(2)])
    w = np.exp(log_prior) / np.exp(log_prior).sum()
    _assert_moments(jr.sample(state, jax.random.PRNGKey(8), N), *_mixture(means, covs, w, np.array([0.5, 1.0])))
    before = average._average_draws._cache_size()
    for seed in range(3):
        jr.sample(state, jax.random.PRNGKey(seed), 7)
    assert average._average_draws._cache_size() == before + 1


def test_model_average_sample_checks_its_input():
    flt = jr.kalman(1.0)
    members = jax.vmap(flt.init)(jnp.zeros((2, D)), jnp.stack([np.eye(D)] * 2))
    state = jr.model_average(flt, scales=(1.0,)).init(members)
    with pytest.raises(ValueError, match="num"):
        jr.sample(state, jax.random.PRNGKey(0), 0)
    with pytest.raises(ValueError, match="log_weight"):
        jr.sample(state._replace(log_weight=jnp.full((2, 1), jnp.nan)), jax.random.PRNGKey(0), 2)
    # a weight of 0 (-inf) is never drawn
    far = members._replace(mean=members.mean.at[1].set(1e3))
    state = jr.model_average(flt, scales=(1.0,)).init(far, log_prior=jnp.array([0.0, -jnp.inf]))
    assert np.all(np.abs(np.asarray(jr.sample(state, jax.random.PRNGKey(1), 500))) < 100)
