"""Batch inference: the Laplace approximation of the posterior of a whole data set ([RVGA] §6.2).

The Newton solver is compiled once per model and shape: models compare by value (built from
module-level functions and their options, :mod:`jaxrvga._values`), so ``jr.models.logistic()``
built twice is one program. Data, prior, ``max_iter`` and ``tol`` are traced arguments.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from .._values import Static, by_value
from ..models import Model
from ..validation import check_batch_problem, check_cov, check_vector, is_concrete
from .. import io


class LaplaceResult(NamedTuple):
    """Batch Laplace approximation ``N(mean, cov)``; ``converged`` and ``iterations`` of Newton."""

    mean: jax.Array
    cov: jax.Array
    converged: jax.Array
    iterations: jax.Array


def laplace(model: Model, X, y, prior_mean, prior_cov, *, max_iter: int = 100,
            tol: float | None = None) -> LaplaceResult:
    """Batch Laplace approximation of ``p(theta | X, y)`` under the prior ``N(prior_mean, prior_cov)``.

    Newton's method with backtracking on the negative log-posterior
    ``-sum_i log p(y_i | theta, x_i) + 1/2 (theta - mu_0)^T P_0^{-1} (theta - mu_0)``, exact
    gradient and Hessian by autodiff; the covariance is the inverse Hessian at the MAP
    ([RVGA] §6.2). Stops when the squared Newton decrement is below ``tol (1 + |f|)``
    (default ``tol = 1e3 eps``) or after ``max_iter`` iterations. Compiled once per model
    (as built by its factory) and shapes.

    Args:
      model: the observation model (:mod:`jaxrvga.models`).
      X: the inputs, (N, D).
      y: the outputs, (N,).
      prior_mean: (D,).
      prior_cov: (D, D), positive definite.
      max_iter: the most Newton iterations.
      tol: the stopping tolerance (None: ``1e3 eps``).

    Returns:
      A :class:`LaplaceResult`: the MAP ``mean``, the ``cov`` and the convergence report.
    """
    if not isinstance(model, Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    if model.is_glm:
        X, y, mu0, P0 = check_batch_problem(model.family, X, y, prior_mean, prior_cov)
    else:
        mu0 = check_vector("prior_mean", prior_mean)
        P0 = check_cov("prior_cov", prior_cov, mu0.shape[0]).astype(mu0.dtype)
        y = jnp.asarray(y, mu0.dtype)
        model.family.check_y("y", y)
    if is_concrete(max_iter) and int(max_iter) < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    if tol is not None and is_concrete(tol) and not float(tol) > 0:
        raise ValueError(f"tol must be positive, got {tol}")
    tol = (1e3 * jnp.finfo(mu0.dtype).eps) if tol is None else tol
    args = (X, y, mu0, P0, jnp.asarray(max_iter, jnp.int32), jnp.asarray(tol, mu0.dtype))
    if not by_value(model):  # a model capturing an array or a traced value: compiled for this call only
        return jax.jit(functools.partial(_laplace_newton, model.log_lik))(*args)
    return _laplace_jit(Static(model), *args)


def _laplace_newton(log_lik, X, y, mu0, P0, max_iter, tol):
    d = mu0.shape[0]
    chol0 = jnp.linalg.cholesky(P0)

    def objective(theta):
        z = jax.scipy.linalg.solve_triangular(chol0, theta - mu0, lower=True)
        return -jnp.sum(jax.vmap(log_lik, in_axes=(None, 0, 0))(theta, X, y)) + 0.5 * z @ z

    grad, hess = jax.grad(objective), jax.hessian(objective)

    def newton_step(carry):
        it, theta, _ = carry
        g, H = grad(theta), hess(theta)
        L = jnp.linalg.cholesky(H)
        step = -jax.scipy.linalg.cho_solve((L, True), g)
        decrement = -g @ step  # Newton decrement squared
        f0 = objective(theta)

        def shrink(c):
            t, _ = c
            return t * 0.5, objective(theta + 0.5 * t * step)

        slack = 16 * jnp.finfo(theta.dtype).eps * jnp.abs(f0)  # rounding near the optimum

        def too_big(c):
            t, f = c
            return (f > f0 - 1e-4 * t * decrement + slack) & (t > 1e-10)

        t, _ = lax.while_loop(too_big, shrink, (jnp.asarray(1.0, theta.dtype), objective(theta + step)))
        return it + 1, theta + t * step, decrement

    def not_done(carry):
        it, _, decrement = carry
        return (it < max_iter) & (decrement > tol * (1.0 + jnp.abs(objective(carry[1]))))

    it, theta, decrement = lax.while_loop(
        not_done, newton_step, (jnp.int32(0), mu0, jnp.asarray(jnp.inf, mu0.dtype)))
    H = hess(theta)
    L = jnp.linalg.cholesky(H)
    cov = jax.scipy.linalg.cho_solve((L, True), jnp.eye(d, dtype=H.dtype))
    cov = 0.5 * (cov + cov.T)
    converged = (decrement <= tol * (1.0 + jnp.abs(objective(theta)))) & jnp.all(jnp.isfinite(theta)) \
        & jnp.all(jnp.isfinite(cov))
    return LaplaceResult(theta, cov, converged, it)


@functools.partial(jax.jit, static_argnums=0)
def _laplace_jit(model: Static, *args):
    return _laplace_newton(model.value.log_lik, *args)

io.register(LaplaceResult, io.moments_check(scalars=("converged", "iterations")), former=("jaxrvga.batch",))

__all__ = ["laplace", "LaplaceResult"]
