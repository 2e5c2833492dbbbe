"""Observation models and special functions: closed forms against quadrature and autodiff."""
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrvga import models, special


def test_sigmoid_derivatives_match_autodiff_and_keep_precision_in_tails():
    z = np.linspace(-30, 30, 121)
    e = np.exp(-np.abs(z))
    exact1 = e / (1 + e) ** 2  # sig'(z), symmetric, no cancellation
    exact2 = exact1 * np.sign(-z) * (1 - e) / (1 + e)  # sig'' = sig' (1 - 2 sig)
    assert np.allclose(special.sig1(z), exact1, rtol=1e-13, atol=0)
    assert np.allclose(special.sig2(z), exact2, rtol=1e-12, atol=0)
    zm = jnp.linspace(-5, 5, 41)  # where autodiff of the sigmoid is itself accurate
    assert np.allclose(special.sig2(zm), jax.vmap(jax.grad(jax.grad(special.sigmoid)))(zm), rtol=1e-9, atol=1e-15)
    # float32: sig(z)(1 - sig(z)) loses all precision at z = 20; sig(z) sig(-z) keeps it.
    z32 = jnp.float32(20.0)
    assert abs(float(special.sig1(z32)) / np.exp(-20.0) - 1) < 1e-5


@pytest.mark.parametrize("m,v", [(0.3, 0.5), (-2.0, 3.0), (1.5, 1e-3)])
def test_closed_form_moments_match_gauss_hermite(m, v):
    """Poisson and Gaussian moments are exact: they equal high-order quadrature of l' and l''."""
    y = 2.0
    for closed, family in [(models.poisson(), models.poisson_family()),
                           (models.linear_gaussian(0.7), models.gaussian(0.7))]:
        generic = models.glm(family, num_points=64)
        g1, h1 = closed.glm_moments(m, v, y)
        g2, h2 = generic.glm_moments(m, v, y)
        assert np.allclose([g1, h1], [g2, h2], rtol=1e-10)
        assert np.allclose(closed.expected_log_lik(m, v, y), generic.expected_log_lik(m, v, y), rtol=1e-10)


def test_expected_log_lik_broadcasts_over_vectors():
    """Regression: the quadrature axis must not broadcast against a vector of observations."""
    for model in (models.logistic(), models.glm(models.bernoulli())):
        m = jnp.linspace(-1, 1, 32)
        v = jnp.linspace(0.1, 2, 32)
        y = (jnp.arange(32) % 2).astype(float)
        batched = model.expected_log_lik(m, v, y)
        one_by_one = jnp.array([model.expected_log_lik(m[i], v[i], y[i]) for i in range(32)])
        assert np.allclose(batched, one_by_one, rtol=1e-14)


def test_bernoulli_log_prob_is_stable_logistic_likelihood():
    eta = jnp.array([-800.0, -3.0, 0.0, 3.0, 800.0])
    for y in (0.0, 1.0):
        lp = models.bernoulli().log_prob(y, eta)
        expected = -jnp.logaddexp(0.0, -(2 * y - 1) * eta)
        assert np.allclose(lp, expected, rtol=1e-14) and bool(jnp.all(jnp.isfinite(lp)))


def test_nonlinear_model_with_pytree_parameters():
    params = {"w": jnp.array([[1.0, -2.0], [0.5, 0.3]]), "b": jnp.array([0.1, -0.2])}
    flat, unravel = jax.flatten_util.ravel_pytree(params)

    def mlp(p, x):
        return jnp.tanh(p["w"] @ x + p["b"]).sum()

    model = models.nonlinear(mlp, models.gaussian(1.0), unravel=unravel)
    x = jnp.array([0.2, -0.4])
    assert float(model.predict(flat, x)) == pytest.approx(float(mlp(params, x)))
    assert model.log_lik(flat, x, 0.5).shape == ()


def test_probit_k_range_and_predictive_limits():
    v = jnp.logspace(-6, 6, 13)
    k = special.probit_k(v)
    assert bool(jnp.all((k > 0) & (k <= 1))) and float(special.probit_k(0.0)) == 1.0


def test_bad_family_arguments():
    with pytest.raises(ValueError, match="noise_var must be positive"):
        models.gaussian(0.0)
    with pytest.raises(ValueError, match="non-negative integer counts"):
        models.poisson_family().check_y("y", np.array([1.5]))
