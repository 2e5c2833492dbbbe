"""jr.rts_smoother against a NumPy RTS smoother and against the batch posterior (float64).

A linear-Gaussian regression whose parameter drifts, ``theta_t = gamma (theta_{t-1} - m) + m +
N(0, diag(q))``, observed as ``y_t = x_t^T theta_t + N(0, r)``: the Kalman filter of jaxrvga, then
its smoother, against the same recursions written here in NumPy (with ``process_noise`` as the
filter applies it, ``P_{t+1|t} = gamma^2 (1 + eta) P_t + Q``) and, without ``process_noise``,
against the exact posterior of every ``theta_t`` given all the observations, from the joint Gaussian
of the whole trajectory.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr

D, T, R = 3, 25, 0.2
GAMMA, M = 0.9, np.array([0.5, -1.0, 0.0])
Q = np.array([0.05, 0.02, 0.1])
RNG = np.random.default_rng(5)
X = RNG.normal(size=(T, D))
MU0, P0 = np.zeros(D), np.eye(D)


def _data():
    theta, ys = RNG.normal(size=D), []
    for t in range(T):
        theta = GAMMA * (theta - M) + M + np.sqrt(Q) * RNG.normal(size=D)
        ys.append(X[t] @ theta + np.sqrt(R) * RNG.normal())
    return np.array(ys)


Y = _data()


def _numpy_filter_and_smoother(eta):
    s = GAMMA**2 * (1 + eta)
    mean, cov, means, covs = MU0, P0, [], []
    for t in range(T):
        mean, cov = GAMMA * mean + (1 - GAMMA) * M, s * cov + np.diag(Q)
        gain = cov @ X[t] / (X[t] @ cov @ X[t] + R)
        mean, cov = mean + gain * (Y[t] - X[t] @ mean), cov - np.outer(gain, X[t] @ cov)
        means.append(mean)
        covs.append(cov)
    smoothed_means, smoothed_covs = [means[-1]], [covs[-1]]
    for t in range(T - 2, -1, -1):
        pred_mean, pred_cov = GAMMA * means[t] + (1 - GAMMA) * M, s * covs[t] + np.diag(Q)
        G = GAMMA * covs[t] @ np.linalg.inv(pred_cov)
        smoothed_means.insert(0, means[t] + G @ (smoothed_means[0] - pred_mean))
        smoothed_covs.insert(0, covs[t] + G @ (smoothed_covs[0] - pred_cov) @ G.T)
    return np.array(means), np.array(covs), np.array(smoothed_means), np.array(smoothed_covs)


def _run(eta):
    flt = jr.kalman(R, process_noise=eta, decay=GAMMA, additive_noise=Q, decay_to=M)
    _, (means, covs) = jr.run(flt, flt.init(MU0, P0), X, Y, lambda s, x, y: (s.mean, s.cov))
    return flt, means, covs


@pytest.mark.parametrize("eta", [0.0, 0.3])
def test_equals_a_numpy_rts_smoother(eta):
    flt, means, covs = _run(eta)
    want_means, want_covs, want_smoothed_means, want_smoothed_covs = _numpy_filter_and_smoother(eta)
    np.testing.assert_allclose(means, want_means, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(covs, want_covs, rtol=1e-10, atol=1e-12)
    out = jr.rts_smoother(flt, means, covs)
    assert isinstance(out, jr.smoother.Smoothed) and out.mean.shape == (T, D) and out.cov.shape == (T, D, D)
    np.testing.assert_allclose(out.mean, want_smoothed_means, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.cov, want_smoothed_covs, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(out.mean[-1], means[-1])


def test_is_the_exact_posterior_of_each_step_given_all_the_data():
    flt, means, covs = _run(0.0)
    out = jr.rts_smoother(flt, means, covs)
    # the joint prior of (theta_0, ..., theta_{T-1}), theta_{-1} ~ N(MU0, P0)
    prior_mean, marginal = [], []
    mean, cov = MU0, P0
    for t in range(T):
        mean, cov = GAMMA * mean + (1 - GAMMA) * M, GAMMA**2 * cov + np.diag(Q)
        prior_mean.append(mean)
        marginal.append(cov)
    joint = np.zeros((T * D, T * D))
    for t in range(T):
        for u in range(t + 1):   # Cov(theta_t, theta_u) = gamma^(t-u) Cov(theta_u) for u <= t
            block = GAMMA ** (t - u) * marginal[u]
            joint[t * D:(t + 1) * D, u * D:(u + 1) * D] = block
            joint[u * D:(u + 1) * D, t * D:(t + 1) * D] = block.T
    H = np.zeros((T, T * D))
    for t in range(T):
        H[t, t * D:(t + 1) * D] = X[t]
    prior_mean = np.concatenate(prior_mean)
    S = H @ joint @ H.T + R * np.eye(T)
    K = np.linalg.solve(S, H @ joint).T
    post_mean = prior_mean + K @ (Y - H @ prior_mean)
    post_cov = joint - K @ H @ joint
    for t in range(T):
        np.testing.assert_allclose(out.mean[t], post_mean[t * D:(t + 1) * D], rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(out.cov[t], post_cov[t * D:(t + 1) * D, t * D:(t + 1) * D], rtol=1e-9,
                                   atol=1e-10)


def test_jits_and_vmaps_over_runs():
    flt, means, covs = _run(0.0)
    once = jr.rts_smoother(flt, means, covs)
    stacked = jax.jit(jax.vmap(lambda m, c: jr.rts_smoother(flt, m, c)))(jnp.stack([means, means]),
                                                                          jnp.stack([covs, covs]))
    np.testing.assert_allclose(stacked.mean[1], once.mean, rtol=1e-12)


def test_refuses_what_it_does_not_smooth():
    flt, means, covs = _run(0.0)
    with pytest.raises(ValueError, match="filtered_covs must have shape"):
        jr.rts_smoother(flt, means, covs[:-1])
    with pytest.raises(ValueError, match="filtered_means must have shape"):
        jr.rts_smoother(flt, means[0], covs)
    with pytest.raises(ValueError, match="smooths dense beliefs"):
        jr.rts_smoother(jr.lrvga(jr.models.linear_gaussian(R), rank=1), means, covs)
    with pytest.raises(ValueError, match="learned noise variance"):
        jr.rts_smoother(jr.kalman(None), means, covs)
    with pytest.raises(ValueError, match="flt must be a filter built by jaxrvga"):
        jr.rts_smoother(jr.Filter(lambda: None, lambda s, x, y: s), means, covs)
