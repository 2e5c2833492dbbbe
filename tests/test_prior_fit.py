"""jr.evidence.fit_prior_precision: the prior precision at the evidence's fixed point, against the
batch marginal likelihood (float64)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, special

import jaxrvga as jr
from conftest import rel

D, N = 4, 60


def _data(seed=0, noise_sd=1.0, theta=(1.0, -1.5, 0.1, -0.05)):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    return X, X @ np.asarray(theta) + noise_sd * rng.normal(size=N)


def _log_evidence(X, y, a):
    """log N(y | 0, X diag(a)^{-1} X^T + I), the batch marginal likelihood."""
    S = (X / a) @ X.T + np.eye(len(y))
    return -0.5 * (np.linalg.slogdet(S)[1] + y @ np.linalg.solve(S, y) + len(y) * np.log(2 * np.pi))


def _posterior(X, y, a):
    P = np.linalg.inv(np.diag(np.broadcast_to(a, (X.shape[1],))) + X.T @ X)
    return P @ X.T @ y, P


def _kalman(X, y, a0):
    flt = jr.kalman(1.0)
    state, _ = jr.run(flt, flt.init(jnp.zeros(D), jnp.eye(D) / a0), X, y)
    return state


def test_one_precision_is_the_maximum_of_the_marginal_likelihood_and_the_belief_its_posterior():
    X, y = _data()
    best = optimize.minimize_scalar(lambda la: -_log_evidence(X, y, np.exp(la)), bounds=(-8, 8), method="bounded",
                                    options={"xatol": 1e-10})
    for a0 in (0.01, 1.0, 100.0):  # wherever the run started
        fit = jr.evidence.fit_prior_precision(_kalman(X, y, a0), a0)
        assert bool(fit.converged) and fit.precision.shape == (1,)
        assert abs(np.log(float(fit.precision[0])) - best.x) < 1e-5
        mean, cov = _posterior(X, y, float(fit.precision[0]))
        assert rel(fit.state.mean, mean) < 1e-8 and rel(fit.state.cov, cov) < 1e-8


def test_each_group_is_at_a_stationary_point_of_the_marginal_likelihood():
    X, y = _data(1, theta=(2.0, -1.5, 0.4, -0.3))
    groups = np.array([0, 0, 1, 1])
    fit = jr.evidence.fit_prior_precision(_kalman(X, y, 1.0), 1.0, groups=groups)
    assert bool(fit.converged)
    log_a = np.log(np.asarray(fit.precision))
    for g in range(2):
        h = 1e-5 * np.eye(2)[g]
        slope = (_log_evidence(X, y, np.exp(log_a + h)[groups]) - _log_evidence(X, y, np.exp(log_a - h)[groups])) / 2e-5
        assert abs(slope) < 1e-5
    assert fit.precision[1] > 10 * fit.precision[0]  # the small weights get the tighter prior


def test_a_prior_mean_moves_the_fit():
    X, y = _data(2)
    m0 = np.full(D, 0.5)
    flt = jr.kalman(1.0)
    state, _ = jr.run(flt, flt.init(jnp.asarray(m0), jnp.eye(D)), X, y)
    fit = jr.evidence.fit_prior_precision(state, 1.0, prior_mean=m0)
    r = y - X @ m0  # the evidence of y - X m0 under prior mean 0
    best = optimize.minimize_scalar(lambda la: -_log_evidence(X, r, np.exp(la)), bounds=(-8, 8), method="bounded",
                                    options={"xatol": 1e-10})
    assert abs(np.log(float(fit.precision[0])) - best.x) < 1e-5


def test_learned_noise_is_the_maximum_of_the_normal_inverse_gamma_evidence():
    X, y = _data(3, noise_sd=0.3)
    shape0, rate0 = 2.0, 1.0

    def log_nig_evidence(a):  # y ~ Student-t_{2 shape0}(0, (rate0 / shape0) (X X^T / a + I))
        S = (rate0 / shape0) * ((X / a) @ X.T + np.eye(N))
        nu = 2 * shape0
        return (special.gammaln((nu + N) / 2) - special.gammaln(nu / 2) - 0.5 * N * np.log(nu * np.pi)
                - 0.5 * np.linalg.slogdet(S)[1] - 0.5 * (nu + N) * np.log1p(y @ np.linalg.solve(S, y) / nu))

    best = optimize.minimize_scalar(lambda la: -log_nig_evidence(np.exp(la)), bounds=(-8, 8), method="bounded",
                                    options={"xatol": 1e-10})
    flt = jr.kalman(None)
    state, _ = jr.run(flt, flt.init(jnp.zeros(D), jnp.eye(D), noise=(shape0, rate0)), X, y)
    fit = jr.evidence.fit_prior_precision(state, 1.0)
    assert bool(fit.converged)
    assert abs(np.log(float(fit.precision[0])) - best.x) < 1e-5
    # and the noise statistics are those of a run from the fitted prior
    again, _ = jr.run(flt, flt.init(jnp.zeros(D), jnp.eye(D) / fit.precision[0], noise=(shape0, rate0)), X, y)
    assert rel(fit.state.mean, again.mean) < 1e-8 and rel(fit.state.noise.rate, again.noise.rate) < 1e-8


def _lowrank_state(seed=4, d=12, p=3):
    rng = np.random.default_rng(seed)
    W, psi = 0.5 * rng.normal(size=(d, p)), 1.0 + rng.uniform(size=d)
    return jr.LowRankState(jnp.asarray(rng.normal(size=d)), jnp.asarray(W), jnp.asarray(psi),
                           jnp.zeros((), jnp.int32), jr.core.solver_info(jnp.float64))


def test_lowrank_and_diagonal_fits_equal_the_dense_fit_of_the_same_gaussian():
    low = _lowrank_state()
    prec = np.asarray(low.W @ low.W.T + jnp.diag(low.psi))
    dense = jr.GaussianState(low.mean, jnp.asarray(np.linalg.inv(prec)), low.step, low.info)
    groups = np.arange(12) % 2
    a, b = (jr.evidence.fit_prior_precision(s, 0.5, groups=groups) for s in (low, dense))
    assert bool(a.converged) and bool(b.converged)
    assert rel(a.precision, b.precision) < 1e-8 and rel(a.state.mean, b.state.mean) < 1e-8
    W, psi = np.asarray(a.state.W), np.asarray(a.state.psi)
    assert rel(np.linalg.inv(W @ W.T + np.diag(psi)), b.state.cov) < 1e-8
    diag = jr.DiagonalState(low.mean, low.psi, low.step, low.info)
    c = jr.evidence.fit_prior_precision(diag, 0.5, groups=groups)
    e = jr.evidence.fit_prior_precision(jr.GaussianState(low.mean, jnp.diag(1 / low.psi), low.step, low.info), 0.5,
                                        groups=groups)
    assert rel(c.precision, e.precision) < 1e-8 and rel(c.state.mean, e.state.mean) < 1e-8


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_shift_precision_there_and_back_for_every_belief(dtype):
    low = jax.tree_util.tree_map(lambda a: a.astype(dtype) if a.dtype.kind == "f" else a, _lowrank_state())
    delta = jnp.linspace(-0.5, 0.5, 12, dtype=dtype)
    for belief, state in ((jr.beliefs.LowRank(3), low),
                          (jr.beliefs.Diagonal(), jr.DiagonalState(low.mean, low.psi, low.step, low.info)),
                          (jr.beliefs.Dense(), jr.GaussianState(low.mean, jnp.diag(1 / low.psi), low.step, low.info))):
        there, ok = belief.shift_precision(state, delta)
        back, ok2 = belief.shift_precision(there, -delta)
        assert bool(ok) and bool(ok2)
        tol = 1e-5 if dtype == jnp.float32 else 1e-12
        assert rel(belief.variances(back), belief.variances(state)) < tol
        assert belief.variances(there).dtype == dtype


def test_a_stream_that_says_nothing_stops_unconverged_with_a_usable_prior():
    X = np.random.default_rng(5).normal(size=(N, D))
    fit = jr.evidence.fit_prior_precision(_kalman(X, np.zeros(N), 1.0), 1.0)  # m = m0: a runs off to infinity
    assert not bool(fit.converged)
    assert np.all(np.isfinite(np.asarray(fit.precision))) and np.all(np.isfinite(np.asarray(fit.state.cov)))


def test_bad_arguments_are_refused_by_name():
    state = _kalman(*_data(), 1.0)
    with pytest.raises(ValueError, match="prior_precision"):
        jr.evidence.fit_prior_precision(state, jnp.ones(3))
    with pytest.raises(ValueError, match="prior_precision"):
        jr.evidence.fit_prior_precision(state, 0.0)
    with pytest.raises(ValueError, match="prior_mean"):
        jr.evidence.fit_prior_precision(state, 1.0, prior_mean=jnp.ones(2))
    with pytest.raises(ValueError, match="groups"):
        jr.evidence.fit_prior_precision(state, 1.0, groups=np.array([0, 2, 2, 0]))
    with pytest.raises(ValueError, match="groups"):
        jr.evidence.fit_prior_precision(state, 1.0, groups=np.zeros(3, int))


def test_a_fleet_is_fitted_under_vmap_and_jit_as_each_alone():
    """Three runs of different data, fitted at once (``jax.vmap`` under ``jax.jit``), equal each fitted alone."""
    states = [_kalman(*_data(seed), 1.0) for seed in (6, 7, 8)]
    fleet = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *states)
    together = jax.jit(jax.vmap(lambda s: jr.evidence.fit_prior_precision(s, 1.0)))(fleet)
    for k, state in enumerate(states):
        alone = jr.evidence.fit_prior_precision(state, 1.0)
        assert bool(together.converged[k]) and bool(alone.converged)
        assert rel(together.precision[k], alone.precision) < 1e-10
        assert rel(together.state.mean[k], alone.state.mean) < 1e-10
