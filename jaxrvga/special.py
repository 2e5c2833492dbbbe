"""Scalar special functions shared by every filter.

The logistic function and its derivatives, the inverse-probit approximation of
Gaussian expectations of the logistic function ([RVGA] eq. 58, [LRVGA] eqs. 50-52)
and Gauss-Hermite quadrature for 1-D Gaussian expectations.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

#: beta = sqrt(8 / pi): sig(a) ~= Phi(a / beta) ([RVGA] eq. 57).
PROBIT_BETA = math.sqrt(8.0 / math.pi)


def sigmoid(z):
    """Logistic function ``1 / (1 + exp(-z))``, stable for all z."""
    return jax.nn.sigmoid(z)


def sig1(z):
    """First derivative of the logistic function, ``sig(z) (1 - sig(z))``.

    Computed as ``sig(z) sig(-z)``, which keeps full relative precision in the tails
    (``1 - sig(z)`` cancels catastrophically for large z, notably in float32).
    """
    return jax.nn.sigmoid(z) * jax.nn.sigmoid(-z)


def sig2(z):
    """Second derivative of the logistic function, ``sig1(z) (1 - 2 sig(z))``."""
    return sig1(z) * (jax.nn.sigmoid(-z) - jax.nn.sigmoid(z))


def jj_lambda(xi):
    """Jaakkola-Jordan curvature ``lambda(xi) = tanh(xi/2) / (4 xi) = (sig(xi) - 1/2) / (2 xi)``.

    Convention of [RVGA] eq. 83: ``lambda(xi) = -eta`` there, so the bound (82) reads
    ``log sig(t) >= log sig(xi) + (t - xi)/2 - lambda(xi) (t^2 - xi^2)``; the QKF's
    ``R^{-1} = -2 eta = 2 lambda(xi)`` ([RVGA] eq. 90). Even in ``xi``, in (0, 1/8], with the
    limit 1/8 at ``xi = 0`` (series ``1/8 - xi^2/96`` below ``|xi| < 1e-4``).
    """
    xi = jnp.abs(xi)
    small = xi < 1e-4
    xs = jnp.where(small, 1.0, xi)
    return jnp.where(small, 0.125 - xi**2 / 96.0, jnp.tanh(0.5 * xs) / (4.0 * xs))


def probit_k(v):
    """Inverse-probit shrinkage ``k(v) = beta / sqrt(v + beta^2)`` in (0, 1] ([RVGA] eq. 58)."""
    return PROBIT_BETA / jnp.sqrt(v + PROBIT_BETA**2)


def probit_moments(m, v):
    """Closed-form Gaussian expectations of the logistic function ([RVGA] eq. 58).

    For ``a ~ N(m, v)`` returns ``(E[sig(a)], E[sig'(a)])`` approximated by
    ``(sig(k m), k sig1(k m))`` with ``k = k(v)``. The approximation error is below
    0.014 and 0.010 respectively for all ``m`` and ``v``.
    """
    k = probit_k(v)
    return sigmoid(k * m), k * sig1(k * m)


def logistic_predictive(mean, cov, x):
    """Predictive mean and variance of a logistic model ([RVGA] eqs. 62-63).

    ``yhat = sig(k x^T mu)`` with ``k = k(x^T P x)`` and
    ``Var = yhat (1 - yhat) (1 - k)``. ``x`` may be (d,) or a batch (n, d).
    """
    x = jnp.asarray(x)
    m = x @ mean
    v = jnp.einsum("...i,ij,...j->...", x, cov, x)
    k = probit_k(v)
    p = sigmoid(k * m)
    return p, p * (1.0 - p) * (1.0 - k)


def gauss_hermite(num_points: int = 32):
    """Nodes and weights of probabilists' Gauss-Hermite quadrature.

    ``E_{z ~ N(0,1)}[f(z)] ~= sum_i w_i f(z_i)``; the weights sum to one.
    Returned as float64 NumPy arrays; cast them to the working dtype at use.
    """
    z, w = np.polynomial.hermite_e.hermegauss(num_points)
    return z, w / w.sum()


def gaussian_expectation_1d(f, m, v, num_points: int = 32):
    """``E_{a ~ N(m, v)}[f(a)]`` by Gauss-Hermite quadrature; ``f`` maps arrays elementwise."""
    m = jnp.asarray(m)
    z, w = gauss_hermite(num_points)
    z = jnp.asarray(z, dtype=m.dtype)
    w = jnp.asarray(w, dtype=m.dtype)
    a = m[..., None] + jnp.sqrt(v)[..., None] * z
    return jnp.sum(w * f(a), axis=-1)
