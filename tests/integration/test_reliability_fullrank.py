"""Reliability of the mean step where the whitened curvature exceeds 1 / eps (a broad prior, a large input).

A full-rank low-rank filter (rank = d, here d = 1) with prior variance 1e6 and inputs x = 1e6 in
float64 (x = 100 in float32) gains a whitened curvature ``x^2 v0 / s^2`` of 1e18 (1e10) per step.
The Woodbury form of the mean step, ``Psi^{-1} g - Psi^{-1} L M^{-1} L^T Psi^{-1} g``, then
subtracted two equal numbers: the mean moved by -512 instead of 2 and the step was reported
converged. The low-rank belief now solves a factor with at least d columns through the d x d
whitened precision (:func:`jaxrvga.beliefs._wide_factor`): every step is converged and the mean
is the closed-form posterior mean. The dense filter keeps a covariance, whose update
``P - s v v^T`` computes the posterior variance 1e-12 as the difference of two numbers of 1e6:
below the rounding of the stored covariance, it refuses every step and says so (``_resolvable``).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr

V0, S2, N = 1e6, 1.0, 6
CASES = [(np.float64, 1e6, 1e-9), (np.float32, 100.0, 1e-5)]  # dtype, input, relative tolerance of the mean


def _data(dtype, x):
    ys = (2.0 * x + np.random.default_rng(0).normal(size=N) * np.sqrt(S2)).astype(dtype)
    return np.full((N, 1), x, dtype), ys


def _posterior_means(x, ys):
    """Closed form: precision ``1/v0 + t x^2 / s2``, mean ``(sum_t x y_t / s2) / precision`` (prior mean 0)."""
    t = np.arange(1, N + 1)
    return np.cumsum(x * ys.astype(np.float64) / S2) / (1.0 / V0 + t * x * x / S2), 1.0 / V0 + t * x * x / S2


@pytest.mark.parametrize("dtype,x,rtol", CASES)
def test_full_rank_lowrank_filter_gives_the_posterior_on_every_step(dtype, x, rtol):
    xs, ys = _data(dtype, x)
    means, precisions = _posterior_means(x, ys)
    flt = jr.lrvga(jr.models.linear_gaussian(S2), rank=1)
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(1), 1, 1, V0, dtype=dtype)
    state = flt.init(jnp.zeros(1, dtype), W0, psi0)
    for t in range(N):
        state = flt.update(state, xs[t], ys[t])
        assert bool(state.info.converged), t
        np.testing.assert_allclose(float(state.mean[0]), means[t], rtol=rtol)
        precision = float(state.psi[0]) + float(state.W[0, 0]) ** 2
        np.testing.assert_allclose(precision, precisions[t], rtol=10 * rtol)
        _, var = flt.spec.belief.marginal(state, jnp.asarray(xs[t:t + 1]))  # x^2 / precision, not cancelled
        np.testing.assert_allclose(float(var[0]), x * x / precisions[t], rtol=10 * rtol)


def test_full_rank_solves_with_the_prior_gain_and_without_a_cached_gram():
    """The implicit schemes' mean step with the prior's precision (``prior_gain``) and the solve of a
    state without its Gram (``fa_step`` and published filters) take the same d x d solve (float64).
    (The published filter's one EM loop from ``W_{t-1}`` does not reach this precision, 200 instead of
    1e12 after the first step, and its mean step is exact for that precision: a property of the
    published projection, not of the solve.)"""
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(1), 1, 1, V0)
    belief = jr.beliefs.LowRank(1)
    big = belief.init(jnp.zeros(1), jnp.asarray([[1e6]]), psi0)._replace(gram=None)
    np.testing.assert_allclose(float(belief.solve(big, jnp.asarray([2e12]))[0]), 2e12 / (1e12 + 1 / V0), rtol=1e-12)
    prior = belief.init(jnp.zeros(1), W0, psi0)
    X, g = jnp.asarray([[1e6]]), jnp.asarray([2e12])
    new, ok = belief.absorb(prior, X, None, g, prior_gain=True)
    assert bool(ok)
    np.testing.assert_allclose(float(new.mean[0]), 2e12 * V0, rtol=1e-12)  # P_0 g, P_0 = V0


@pytest.mark.parametrize("dtype,x,rtol", CASES)
def test_dense_filter_refuses_a_variance_below_its_rounding_and_says_so(dtype, x, rtol):
    """The covariance form cannot store the posterior variance ``1 / precision`` (1e-12 in float64,
    1e-4 in float32) computed as a difference of numbers of 1e6: every step is flagged and the prior kept."""
    xs, ys = _data(dtype, x)
    flt = jr.kalman(S2)
    state = flt.init(jnp.zeros(1, dtype), jnp.full((1, 1), V0, dtype))
    for t in range(N):
        state = flt.update(state, xs[t], ys[t])
        assert not bool(state.info.converged), t
        assert float(state.mean[0]) == 0.0 and float(state.cov[0, 0]) == np.float32(V0)
