"""jr.sample: exact draws of every belief, their moments against the belief's own definition (float64).

The dense belief's covariance is ``cov``, the low-rank one's ``(W W^T + diag psi)^{-1}`` and the
diagonal one's ``diag(1 / psi)``, each inverted here in NumPy; a state with a learned noise variance
is ``theta | s2 ~ N(mean, s2 P)``, ``s2 ~ InvGamma(a, b)``, whose covariance is ``b / (a - 1) P``.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr

D = 4
RNG = np.random.default_rng(3)
MEAN = RNG.normal(size=D)
_A = RNG.normal(size=(D, D))
COV = _A @ _A.T / D + 0.3 * np.eye(D)
W0, PSI0 = RNG.normal(size=(D, 2)), RNG.uniform(0.5, 2.0, D)
VAR0 = RNG.uniform(0.3, 2.0, D)
N = 200_000


class MeanCov(NamedTuple):
    """Any object with fields (mean, cov), as a LaplaceResult."""

    mean: np.ndarray
    cov: np.ndarray


STATES = {
    "dense": (lambda: jr.kalman(1.0).init(MEAN, COV), COV),
    "mean_cov": (lambda: MeanCov(MEAN, COV), COV),
    "lowrank": (lambda: jr.lrvga(jr.models.logistic(), rank=2).init(MEAN, W0, PSI0),
                np.linalg.inv(W0 @ W0.T + np.diag(PSI0))),
    "diagonal": (lambda: jr.diag_rvga(jr.models.logistic()).init(MEAN, VAR0), np.diag(VAR0)),
}


def _assert_moments(draws, mean, cov):
    """Mean within 5 Monte-Carlo standard errors; covariance within 2 % of its largest entry."""
    draws = np.asarray(draws)
    assert draws.shape == (N, D)
    assert np.all(np.abs(draws.mean(0) - mean) <= 5 * np.sqrt(np.diagonal(cov) / N))
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=0.02 * np.abs(cov).max())


@pytest.mark.parametrize("name", list(STATES))
def test_draws_have_the_belief_mean_and_covariance(name):
    make, cov = STATES[name]
    _assert_moments(jr.sample(make(), jax.random.PRNGKey(0), N), MEAN, cov)


@pytest.mark.parametrize("name", ["dense", "lowrank", "diagonal"])
def test_learned_noise_variance_is_drawn_per_draw(name):
    # theta | s2 ~ N(mean, s2 P), s2 ~ InvGamma(a, b): Cov = b / (a - 1) P, and the squared
    # Mahalanobis length q = (theta - mean)^T P^{-1} (theta - mean) = s2 chi2_d has
    # E[q^2] = E[s2^2] d (d + 2), E[s2^2] = b^2 / ((a - 1) (a - 2)) (one s2 shared by all draws
    # would give a sample mean of q^2 of s2^2 d (d + 2) for that one s2 instead)
    make, P = STATES[name]
    a, b = 8.0, 3.5
    state = make()._replace(noise=jr.core.NoiseStats(jnp.asarray(a), jnp.asarray(b)))
    draws = np.asarray(jr.sample(state, jax.random.key(1), N))
    _assert_moments(draws, MEAN, b / (a - 1) * P)
    centred = draws - MEAN
    q = np.einsum("ni,ij,nj->n", centred, np.linalg.inv(P), centred)
    want = b**2 / ((a - 1) * (a - 2)) * D * (D + 2)
    assert abs(np.mean(q**2) - want) <= 5 * np.std(q**2) / np.sqrt(N)


def test_a_fleet_is_sampled_member_by_member():
    flt = jr.kalman(1.0)
    covs = np.stack([COV, 2.0 * COV, np.eye(D)])
    means = np.stack([MEAN, -MEAN, np.zeros(D)])
    fleet = jax.vmap(flt.init)(jnp.asarray(means), jnp.asarray(covs))
    keys = jax.random.split(jax.random.PRNGKey(4), 3)
    together = jax.jit(jax.vmap(lambda s, k: jr.sample(s, k, 7)))(fleet, keys)
    for i in range(3):
        alone = jr.sample(flt.init(means[i], covs[i]), keys[i], 7)
        np.testing.assert_allclose(together[i], alone, rtol=1e-10, atol=1e-12)


def test_draws_keep_the_dtype_of_a_float32_belief():
    state = jr.lrvga(jr.models.logistic(), rank=2).init(MEAN.astype(np.float32), W0.astype(np.float32),
                                                         PSI0.astype(np.float32))
    draws = jr.sample(state, jax.random.PRNGKey(0), 5)
    assert draws.dtype == jnp.float32 and draws.shape == (5, D) and bool(jnp.all(jnp.isfinite(draws)))


def test_bad_arguments_name_themselves():
    state = jr.kalman(1.0).init(MEAN, COV)
    with pytest.raises(ValueError, match="num must be a positive integer"):
        jr.sample(state, jax.random.PRNGKey(0), 0)
    with pytest.raises(ValueError, match="key must be"):
        jr.sample(state, 0, 3)
    with pytest.raises(ValueError, match="key is required by sample: pass its key argument"):
        jr.sample(state, None, 3)
    with pytest.raises(ValueError, match="state must"):
        jr.sample({"W": W0}, jax.random.PRNGKey(0), 3)
