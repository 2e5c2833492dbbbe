"""Algebra of W W^T + diag(psi) ([LRVGA] eq. 27, Proposition 1, Appendix D) against dense references.

Oracles: dense float64 matrices (Woodbury, determinant lemma, sample covariance of Proposition 1).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrvga.kernels import lowrank


def rel(a, b):
    return float(jnp.linalg.norm(jnp.asarray(a) - jnp.asarray(b)) / jnp.linalg.norm(jnp.asarray(b)))


def random_factors(d, p, seed=0):
    rng = np.random.default_rng(seed)
    W = jnp.asarray(rng.normal(size=(d, p)))
    psi = jnp.asarray(rng.uniform(0.2, 3.0, size=d))
    return W, psi


def test_check17_woodbury_quadform_logdet_equal_dense():
    d, p = 50, 5
    W, psi = random_factors(d, p)
    Lam = np.asarray(W) @ np.asarray(W).T + np.diag(np.asarray(psi))
    P = np.linalg.inv(Lam)
    rng = np.random.default_rng(1)
    v = rng.normal(size=d)
    V = rng.normal(size=(d, 3))
    assert rel(lowrank.solve(W, psi, v), P @ v) <= 1e-12
    assert rel(lowrank.solve(W, psi, V), P @ V) <= 1e-12
    assert abs(float(lowrank.quad_form(W, psi, v)) - v @ P @ v) <= 1e-12 * abs(v @ P @ v)
    assert rel(lowrank.factorize(W, psi).quad_form(V), np.einsum("ik,ij,jk->k", V, P, V)) <= 1e-12
    assert abs(float(lowrank.logdet(W, psi)) - np.linalg.slogdet(Lam)[1]) <= 1e-10
    assert rel(lowrank.inverse_diag(W, psi), np.diag(P)) <= 1e-12
    assert rel(lowrank.matvec(W, psi, v), Lam @ v) <= 1e-12
    assert rel(lowrank.to_dense_covariance(W, psi), P) <= 1e-12
    assert rel(lowrank.to_dense_precision(W, psi), Lam) <= 1e-15


def test_check14_ensemble_sampler_covariance_identity():
    """(I - L W^T) Psi^{-1} (I - L W^T)^T + L L^T = (W W^T + Psi)^{-1} ([LRVGA] eqs. 38-40)."""
    d, p = 300, 7
    W, psi = random_factors(d, p, seed=3)
    W, psi = np.asarray(W), np.asarray(psi)
    L = np.asarray(lowrank.ensemble_gain(W, psi))
    A = np.eye(d) - L @ W.T
    cov = A @ np.diag(1 / psi) @ A.T + L @ L.T
    assert rel(cov, np.linalg.inv(W @ W.T + np.diag(psi))) <= 1e-12


def test_sampler_is_corrected_proposition1_map():
    """sample_from_draws computes (I - L W^T) z/sqrt(psi) + L e + mean (the corrected Prop. 1)."""
    d, p, K = 40, 4, 6
    W, psi = random_factors(d, p, seed=4)
    rng = np.random.default_rng(5)
    z, e, mean = rng.normal(size=(K, d)), rng.normal(size=(K, p)), rng.normal(size=d)
    L = np.asarray(lowrank.ensemble_gain(W, psi))
    x = z / np.sqrt(np.asarray(psi))
    expected = mean + x @ (np.eye(d) - L @ np.asarray(W).T).T + e @ L.T
    assert rel(lowrank.sample_from_draws(mean, W, psi, z, e), expected) <= 1e-12
    # antithetic noise gives the mean exactly
    both = lowrank.sample_from_draws(mean, W, psi, np.vstack([z, -z]), np.vstack([e, -e]))
    assert rel(jnp.mean(both, axis=0), mean) <= 1e-14


def test_check15_sampler_moments_within_5_standard_errors():
    d, p, K = 20, 3, 100_000
    W, psi = random_factors(d, p, seed=6)
    mean = jnp.linspace(-1.0, 1.0, d)
    draws = np.asarray(lowrank.sample(jax.random.PRNGKey(7), mean, W, psi, K))
    assert draws.shape == (K, d)
    P = np.linalg.inv(np.asarray(W) @ np.asarray(W).T + np.diag(np.asarray(psi)))
    centred = draws - np.asarray(mean)
    emp = centred.T @ centred / K
    se = np.sqrt((np.outer(np.diag(P), np.diag(P)) + P**2) / K)
    assert np.all(np.abs(emp - P) <= 5 * se)
    assert np.all(np.abs(centred.mean(axis=0)) <= 5 * np.sqrt(np.diag(P) / K))


def test_init_factors_appendix_d_trace_matched():
    d, p, sigma0, eps = 1000, 10, 2.0, 1e-4
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), d, p, sigma0**2, eps=eps)
    assert W0.shape == (d, p) and psi0.shape == (d,)
    np.testing.assert_allclose(psi0, (1 - eps) / sigma0**2, rtol=1e-15)
    np.testing.assert_allclose(jnp.linalg.norm(W0, axis=0), np.sqrt(eps * d / p) / sigma0, rtol=1e-13)
    trace = jnp.sum(W0**2) + jnp.sum(psi0)  # tr(W0 W0^T + Psi0) = d / sigma0^2
    assert abs(float(trace) - d / sigma0**2) <= 1e-12 * d / sigma0**2
    # per-coordinate prior (Remark 2)
    var = jnp.linspace(0.5, 2.0, d)
    W1, psi1 = lowrank.init_factors(jax.random.PRNGKey(0), d, p, var, eps=eps)
    np.testing.assert_allclose(psi1, (1 - eps) / var, rtol=1e-14)
    np.testing.assert_allclose(W1 * jnp.sqrt(var)[:, None],
                               W0 * sigma0, rtol=1e-12)


def test_init_factors_plain_and_validation():
    W0, psi0 = lowrank.init_factors_plain(jax.random.PRNGKey(1), 30, 4, 16.0, scale=1e-3)
    np.testing.assert_allclose(psi0, 1 / 16.0)
    assert W0.shape == (30, 4) and float(jnp.max(jnp.abs(W0))) < 1e-2
    with pytest.raises(ValueError, match="rank"):
        lowrank.init_factors(jax.random.PRNGKey(0), 5, 6, 1.0)
    with pytest.raises(ValueError, match="rank"):
        lowrank.init_factors_plain(jax.random.PRNGKey(0), 5, 0, 1.0)
    with pytest.raises(ValueError, match="eps"):
        lowrank.init_factors(jax.random.PRNGKey(0), 5, 2, 1.0, eps=0.0)


def test_bad_shapes_and_complex_inputs_name_the_argument():
    W, psi = random_factors(6, 2)
    cases = [
        (lambda: lowrank.solve(W, psi, jnp.ones(5)), "v must have shape"),
        (lambda: lowrank.solve(W, psi, jnp.ones((6, 2, 1))), "v must have shape"),
        (lambda: lowrank.solve(W, psi[:5], jnp.ones(6)), "psi"),
        (lambda: lowrank.solve(W[:, 0], psi, jnp.ones(6)), "W must be"),
        (lambda: lowrank.solve(W + 1j, psi, jnp.ones(6)), "W must be a real array"),
        (lambda: lowrank.solve(W, psi, jnp.ones(6) * 1j), "v must be a real array"),
        (lambda: lowrank.quad_form(W, psi, jnp.ones(7)), "x must have shape"),
        (lambda: lowrank.matvec(W, psi, jnp.ones(7)), "v must have shape"),
        (lambda: lowrank.solve(jnp.ones((0, 1)), jnp.ones(0), jnp.ones(0)), "d >= 1"),
        (lambda: lowrank.init_factors(jax.random.PRNGKey(0), 0, 1, 1.0), "dim"),
        (lambda: lowrank.init_factors(jax.random.PRNGKey(0), 4, 2.5, 1.0), "rank"),
        (lambda: lowrank.init_factors(jax.random.PRNGKey(0), 4, 2, jnp.ones(3)), "prior_var must be"),
        (lambda: lowrank.init_factors(jax.random.PRNGKey(0), 4, 2, 1.0 + 1j), "prior_var must be a real"),
        (lambda: lowrank.init_factors_plain(jax.random.PRNGKey(0), 4, 2, -1.0), "prior_var must be positive"),
        (lambda: lowrank.sample(jax.random.PRNGKey(0), jnp.zeros(5), W, psi, 3), "mean must have length 6"),
        (lambda: lowrank.sample(jax.random.PRNGKey(0), jnp.zeros(6), W, psi, 0), "num must be a positive"),
        (lambda: lowrank.sample_from_draws(jnp.zeros(6), W, psi, jnp.ones((3, 6)), jnp.ones((3, 1))), "z must be"),
    ]
    for fn, msg in cases:
        with pytest.raises(ValueError, match=msg):
            fn()


def test_sampler_of_column_blocks_equals_the_joined_factor():
    """``sample_from_draws`` of a factor held as column blocks ``(W, X)`` (what an L-RVGA step's
    unprojected belief is) equals that of the joined ``[W, X]``."""
    d, p, m, K = 30, 4, 3, 5
    W, psi = random_factors(d, p, seed=8)
    X = jnp.asarray(np.random.default_rng(9).normal(size=(d, m)))
    rng = np.random.default_rng(10)
    z, e, mean = rng.normal(size=(K, d)), rng.normal(size=(K, p + m)), rng.normal(size=d)
    expected = lowrank.sample_from_draws(mean, jnp.concatenate([W, X], axis=1), psi, z, e)
    assert rel(lowrank.sample_from_draws(mean, (W, X), psi, z, e), expected) <= 1e-12


def test_low_rank_belief_draws_share_their_noise_across_ranks():
    """``LowRank.draw`` from one base noise: column j of ``e`` is drawn from ``fold_in(key_e, j)``, so
    the belief ``[W, X]`` of a later pass uses the ``z`` and the first ``p`` columns of ``e`` of the
    belief ``W`` (common random numbers); each equals the corrected Proposition 1 of that noise."""
    from jaxrvga.beliefs import LowRank, antithetic_normals
    d, p, m, K = 25, 3, 2, 6
    W, psi = random_factors(d, p, seed=11)
    X = jnp.asarray(np.random.default_rng(12).normal(size=(d, m)))
    belief = LowRank(rank=p, inner_loops=0)
    prior = belief.init(jnp.linspace(-1.0, 1.0, d), W, psi)
    pending, _ = belief.add(prior, X, None)
    noise = belief.base_draws(jax.random.PRNGKey(13), K, d, jnp.float64)
    z, ke = noise
    e = jnp.stack([antithetic_normals(jax.random.fold_in(ke, j), K, 1, jnp.float64)[:, 0] for j in range(p + m)], 1)
    assert rel(belief.draw(prior, noise), lowrank.sample_from_draws(prior.mean, W, psi, z, e[:, :p])) <= 1e-12
    joined = jnp.concatenate([W, X], axis=1)
    assert rel(belief.draw(pending, noise), lowrank.sample_from_draws(prior.mean, joined, psi, z, e)) <= 1e-12
    # sample: independent draws (Monte-Carlo predictions), Proposition 1 of fresh noise
    key = jax.random.PRNGKey(13)
    assert rel(belief.sample(prior, key, K), lowrank.sample(key, prior.mean, W, psi, K)) <= 1e-15
