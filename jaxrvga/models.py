"""Observation models: an exponential-family output on a predictor ``eta = h(theta, x)``.

A :class:`Model` couples a :class:`Family` (the law of ``y`` given ``eta``) with a
predictor. For generalised linear models (``eta = x^T theta``) every Gaussian
expectation the filters need reduces to a 1-D expectation over
``eta ~ N(x^T mu, x^T P x)`` ([RVGA] §4, [LRVGA] §4.1): :meth:`Model.glm_moments`
returns ``(E[d log p / d eta], E[d^2 log p / d eta^2])``, in closed form for the
Gaussian and Poisson families, by the inverse-probit approximation ([RVGA] eq. 58)
for the logistic model, and by Gauss-Hermite quadrature otherwise.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from . import special
from .validation import check_counts, check_labels01, check_positive


class Family(NamedTuple):
    """Law of an observation given its natural parameter / linear predictor ``eta``.

    All callables act elementwise. ``fisher(eta) = -E_y[d^2 log p(y|eta) / d eta^2]``
    is the curvature used by the EKF and the generalised Gauss-Newton (GGN)
    approximation ([LRVGA] eq. 41); it equals ``variance`` for canonical links.
    """

    name: str
    log_prob: Callable  # (y, eta) -> log p(y | eta)
    mean: Callable  # eta -> E[y | eta]
    variance: Callable  # eta -> Var(y | eta)
    fisher: Callable  # eta -> -E_y[d2 log p / d eta2]
    check_y: Callable  # (name, y) -> y, raises ValueError on impossible concrete values


def gaussian(noise_var=1.0) -> Family:
    """Gaussian output ``y ~ N(eta, noise_var)`` (identity link)."""
    check_positive("noise_var", noise_var)
    nv = noise_var

    def log_prob(y, eta):
        return -0.5 * ((y - eta) ** 2 / nv + jnp.log(2 * jnp.pi * nv))

    return Family(
        name="gaussian",
        log_prob=log_prob,
        mean=lambda eta: eta,
        variance=lambda eta: jnp.full_like(eta, nv),
        fisher=lambda eta: jnp.ones_like(eta) / nv,
        check_y=lambda name, y: y,
    )


def bernoulli() -> Family:
    """Bernoulli output with logit link: ``p(y=1 | eta) = sig(eta)``, ``y in {0, 1}``."""
    return Family(
        name="bernoulli",
        log_prob=lambda y, eta: y * eta - jnp.logaddexp(0.0, eta),
        mean=special.sigmoid,
        variance=special.sig1,
        fisher=special.sig1,
        check_y=check_labels01,
    )


def poisson_family() -> Family:
    """Poisson output with log link: ``y ~ Poisson(exp(eta))``."""
    return Family(
        name="poisson",
        log_prob=lambda y, eta: y * eta - jnp.exp(eta) - jax.scipy.special.gammaln(y + 1.0),
        mean=jnp.exp,
        variance=jnp.exp,
        fisher=jnp.exp,
        check_y=check_counts,
    )


class Model(NamedTuple):
    """An observation model ``p(y | theta, x) = family(y | eta = predict(theta, x))``.

    ``kind`` is ``"linear_gaussian"``, ``"logistic"``, ``"glm"`` or ``"nonlinear"``;
    filters dispatch on it to use the exact scheme where one exists.
    ``moments`` (GLMs only) maps ``(m, v, y)`` to the pair
    ``(E[d log p/d eta], E[d^2 log p/d eta^2])`` for ``eta ~ N(m, v)``.
    """

    kind: str
    family: Family
    predict: Callable  # (theta, x) -> eta, scalar for GLMs, scalar or vector otherwise
    moments: Optional[Callable]  # (m, v, y) -> (E[l'], E[l''])  (GLMs only)
    noise_var: Optional[object] = None  # linear-Gaussian only
    expected_log_lik: Optional[Callable] = None  # (m, v, y) -> E_{eta ~ N(m, v)}[log p(y | eta)]  (GLMs)

    @property
    def is_glm(self) -> bool:
        """True when ``eta = x^T theta`` (the 1-D projection applies)."""
        return self.kind in ("linear_gaussian", "logistic", "glm")

    def log_lik(self, theta, x, y):
        """``log p(y | theta, x)`` summed over the components of ``y``."""
        return jnp.sum(self.family.log_prob(y, self.predict(theta, x)))

    def glm_moments(self, m, v, y):
        """``(E[d log p / d eta], E[d^2 log p / d eta^2])`` for ``eta ~ N(m, v)`` (GLMs)."""
        if self.moments is None:
            raise ValueError(f"the {self.kind} model has no 1-D projected moments")
        return self.moments(m, v, y)


def _linear_predict(theta, x):
    return jnp.dot(x, theta)


def _gauss_hermite_expected_log_lik(family: Family, num_points: int):
    """``E_{eta ~ N(m, v)}[log p(y | eta)]`` by Gauss-Hermite quadrature."""

    def expected(m, v, y):
        y = jnp.asarray(y)[..., None]  # broadcast against the quadrature axis
        return special.gaussian_expectation_1d(lambda a: family.log_prob(y, a), m, v, num_points)

    return expected


def _moments_from_expectation(expected):
    """GLM moments from ``E[log p]`` by Bonnet's and Price's theorems:
    ``E[l'] = d/dm E[l]`` and ``E[l''] = 2 d/dv E[l]``."""
    dm = jnp.vectorize(jax.grad(expected, argnums=0))
    dv = jnp.vectorize(jax.grad(expected, argnums=1))

    def moments(m, v, y):
        return dm(m, v, y), 2.0 * dv(m, v, y)

    return moments


def linear_gaussian(noise_var=1.0) -> Model:
    """``y = x^T theta + eps``, ``eps ~ N(0, noise_var)``; R-VGA is then the Kalman filter ([RVGA] Thm 2).

    ``noise_var`` may be a traced array, so it can be vmapped over.
    """
    fam = gaussian(noise_var)

    def moments(m, v, y):
        del v
        return (y - m) / noise_var, -jnp.ones_like(m) / noise_var

    def expected(m, v, y):
        return -0.5 * (((y - m) ** 2 + v) / noise_var + jnp.log(2 * jnp.pi * noise_var))

    return Model("linear_gaussian", fam, _linear_predict, moments, noise_var, expected)


def logistic() -> Model:
    """Bayesian logistic regression, ``y in {0, 1}``, ``p(y=1) = sig(x^T theta)``.

    Gaussian expectations use the inverse-probit closed form ([RVGA] eq. 58):
    ``E[sig(a)] ~= sig(k m)``, ``E[sig'(a)] ~= k sig'(k m)``, ``k = k(v)``.
    """

    def moments(m, v, y):
        mean, slope = special.probit_moments(m, v)
        return y - mean, -slope

    fam = bernoulli()
    return Model("logistic", fam, _linear_predict, moments, None,
                 _gauss_hermite_expected_log_lik(fam, 32))


def poisson() -> Model:
    """Poisson regression with log link; Gaussian moments are exact: ``E[e^a] = exp(m + v/2)``."""

    def moments(m, v, y):
        rate = jnp.exp(m + 0.5 * v)
        return y - rate, -rate

    def expected(m, v, y):
        return y * m - jnp.exp(m + 0.5 * v) - jax.scipy.special.gammaln(y + 1.0)

    return Model("glm", poisson_family(), _linear_predict, moments, None, expected)


def glm(family: Family, num_points: int = 32) -> Model:
    """A generalised linear model ``eta = x^T theta`` with any family; expectations by Gauss-Hermite."""
    expected = _gauss_hermite_expected_log_lik(family, num_points)
    return Model("glm", family, _linear_predict, _moments_from_expectation(expected), None, expected)


def nonlinear(h: Callable, family: Family | None = None, unravel: Callable | None = None) -> Model:
    """A nonlinear model ``eta = h(theta, x)`` with an exponential-family output (default Gaussian, unit noise).

    ``h`` may return a scalar or a vector; components of ``y`` are independent given ``eta``.
    Filters take Jacobians of ``h`` by autodiff ([LRVGA] §4.2, GGN eq. 41).
    Filters work on a flat parameter vector. For a pytree of parameters (a flax or
    equinox model), pass ``unravel`` from ``jax.flatten_util.ravel_pytree``: ``h`` is then
    called as ``h(unravel(theta), x)``.
    """
    family = gaussian(1.0) if family is None else family
    predict = h if unravel is None else (lambda theta, x: h(unravel(theta), x))
    return Model("nonlinear", family, predict, None)
