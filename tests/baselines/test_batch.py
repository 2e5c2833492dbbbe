"""Batch Laplace: the exact posterior of a linear-Gaussian model, and one compile per model and shape."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga import models
from jaxrvga.baselines import laplace as batch


def problem(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d) + rng.normal(size=n)


def gaussian_posterior(X, y, s2, P0):
    """Exact posterior of ``y = X theta + N(0, s2)`` under ``N(0, P0)``: the Laplace answer."""
    cov = np.linalg.inv(np.linalg.inv(P0) + X.T @ X / s2)
    return cov @ X.T @ y / s2, cov


class Counter:
    """Counts calls; hashed by identity, so a closure holding it keeps one compile key."""

    def __init__(self):
        self.n = 0


def counting_linear_predict(monkeypatch):
    """Make ``models.logistic()`` build models whose predictor counts its (trace-time) calls."""
    counter, plain = Counter(), models.linear_predict

    def predict(theta, x):
        counter.n += 1
        return plain(theta, x)

    monkeypatch.setattr(models.predictors, "linear_predict", predict)  # where logistic() reads it
    return counter


def test_laplace_of_linear_gaussian_is_the_exact_posterior_for_each_noise():
    """Two models from one factory differing only in a captured value must not share a compile."""
    X, y = problem()
    P0 = 2.0 * np.eye(3)
    for s2 in [1.0, 4.0]:
        res = jr.baselines.laplace.laplace(jr.models.linear_gaussian(s2), X, y, np.zeros(3), P0)
        m, c = gaussian_posterior(X, y, s2, P0)
        np.testing.assert_allclose(res.mean, m, rtol=1e-10)
        np.testing.assert_allclose(res.cov, c, rtol=1e-10)
        assert bool(res.converged)


def test_two_calls_with_the_same_factory_and_shapes_trace_once(monkeypatch):
    counter = counting_linear_predict(monkeypatch)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 4))
    y1, y2 = (rng.random(30) < 0.5).astype(float), (rng.random(30) < 0.3).astype(float)
    r1 = jr.baselines.laplace.laplace(jr.models.logistic(), X, y1, np.zeros(4), np.eye(4))
    traced = counter.n
    assert traced > 0
    r2 = jr.baselines.laplace.laplace(jr.models.logistic(), 2 * X, y2, np.ones(4), 3 * np.eye(4), tol=1e-9, max_iter=50)
    assert counter.n == traced  # new model object, data, prior, tol and max_iter: no new trace
    assert bool(r1.converged) and bool(r2.converged)
    assert not np.allclose(r1.mean, r2.mean)
    jr.baselines.laplace.laplace(jr.models.logistic(), X[:10], y1[:10], np.zeros(4), np.eye(4))
    assert counter.n > traced  # a new shape is a new trace


def test_laplace_under_vmap_over_a_traced_noise():
    X, y = problem(n=20)
    P0 = np.eye(3)
    means = jax.vmap(lambda s2: jr.baselines.laplace.laplace(jr.models.linear_gaussian(s2), X, y, np.zeros(3), P0).mean)(
        jnp.array([1.0, 4.0]))
    for s2, m in zip([1.0, 4.0], means):
        np.testing.assert_allclose(m, gaussian_posterior(X, y, s2, P0)[0], rtol=1e-10)


def test_models_key_the_compiled_solver_by_value():
    """Equal models are one static key of the solver; a model holding an array is not a key at all."""
    from jaxrvga._values import Static, by_value
    assert Static(jr.models.logistic()) == Static(jr.models.logistic())
    assert hash(Static(jr.models.logistic())) == hash(Static(jr.models.logistic()))
    assert Static(jr.models.linear_gaussian(1.0)) != Static(jr.models.linear_gaussian(2.0))
    assert Static(jr.models.linear_gaussian(1.0)) != Static(jr.models.logistic())
    assert by_value(jr.models.logistic()) and by_value(jr.models.linear_gaussian(1.0))
    assert not by_value(jr.models.linear_gaussian(jnp.asarray(2.0)))
    h = lambda th, x: jnp.tanh(x @ th)  # noqa: E731
    assert Static(jr.models.nonlinear(h)) == Static(jr.models.nonlinear(h))
    assert Static(jr.models.nonlinear(h)) != Static(jr.models.nonlinear(lambda th, x: jnp.tanh(x @ th)))


def test_laplace_rejects_bad_arguments():
    X, y = problem(n=5)
    mdl = jr.models.linear_gaussian(1.0)
    with pytest.raises(ValueError, match="max_iter"):
        jr.baselines.laplace.laplace(mdl, X, y, np.zeros(3), np.eye(3), max_iter=0)
    with pytest.raises(ValueError, match="tol"):
        jr.baselines.laplace.laplace(mdl, X, y, np.zeros(3), np.eye(3), tol=-1.0)
    with pytest.raises(ValueError, match="model"):
        jr.baselines.laplace.laplace("logistic", X, y, np.zeros(3), np.eye(3))
    assert jr.baselines.laplace.LaplaceResult is batch.LaplaceResult
