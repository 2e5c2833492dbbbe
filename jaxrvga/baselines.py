"""Baselines of the R-VGA paper: the EKF, the quadratic Kalman filter and batch Laplace.

* :func:`ekf` linearises the model at the previous mean. For an exponential family this is
  the online natural gradient ([RVGA] Thm 3, eqs. 43-55)::

      P_t^{-1} = P_{t-1}^{-1} + J^T F(eta) J,     mu_t = mu_{t-1} + P_t J^T d log p / d eta

  with ``eta = h(mu_{t-1}, x)``, ``J = d eta / d theta`` and ``F`` the Fisher information of
  the family; for logistic regression it is eq. (81).
* :func:`qkf`: the Jaakkola-Jordan quadratic bound filter ([RVGA] eqs. 82-90).
* :func:`laplace`: the batch Laplace approximation (Newton on the log-posterior, [RVGA] §6.2).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax


from .batch import LaplaceResult, laplace  # noqa: F401  (re-exported)
from .core import Filter, solver_info
from .models import Model
from .rvga import (check_glm_input, check_process_noise, inflate, init_gaussian, make_check,
                   rank_one_update)
from .validation import check_batch_problem, check_cov, check_vector


def ekf(model: Model, process_noise=None) -> Filter:
    """Extended Kalman filter = online natural gradient ([RVGA] eqs. 54-55, 81), generic by autodiff.

    The update is written in information form with the square root of the Fisher
    information, ``P_t = P - P G^T (I + G P G^T)^{-1} G P`` with ``G = F^{1/2} J``, which stays
    finite when ``F -> 0`` (a saturated sigmoid). For a GLM it is the rank-one eq. (81).
    """
    if not isinstance(model, Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    check_process_noise(process_noise)
    score = jax.grad(lambda eta, y: jnp.sum(model.family.log_prob(y, eta)))

    def update_glm(state, x, y):
        x, y = check_glm_input(state, x, y, model)
        cov = inflate(state.cov, process_noise)
        v = cov @ x
        eta = x @ state.mean
        fisher, nu0 = model.family.fisher(eta), x @ v
        den = 1.0 + fisher * nu0
        return rank_one_update(state, cov, v, nu0, score(eta, y) / den, fisher / den, solver_info(cov.dtype))

    def update_nonlinear(state, x, y):
        model.family.check_y("y", y)
        cov = inflate(state.cov, process_noise)
        eta = jnp.atleast_1d(model.predict(state.mean, x))
        J = jnp.atleast_2d(jax.jacfwd(model.predict)(state.mean, x))
        G = jnp.sqrt(model.family.fisher(eta))[:, None] * J
        PG = cov @ G.T
        S = jnp.eye(G.shape[0], dtype=cov.dtype) + G @ PG
        new_cov = cov - PG @ jax.scipy.linalg.solve(S, PG.T, assume_a="pos")
        new_cov = 0.5 * (new_cov + new_cov.T)
        grad = J.T @ jnp.atleast_1d(score(eta, jnp.reshape(y, eta.shape)))
        return state._replace(mean=state.mean + new_cov @ grad, cov=new_cov, step=state.step + 1)

    update = update_glm if model.is_glm else update_nonlinear
    return Filter(init_gaussian, update, make_check(model))


def _jj_lambda(xi):
    """``(sig(xi) - 1/2) / xi = tanh(xi/2) / (2 xi)``, with its series ``1/4 - xi^2/48`` near 0 ([RVGA] eq. 83)."""
    small = xi < 1e-4
    safe = jnp.where(small, 1.0, xi)
    return jnp.where(small, 0.25 - xi**2 / 48.0, 0.5 * jnp.tanh(0.5 * safe) / safe)


def qkf(process_noise=None) -> Filter:
    """Quadratic Kalman filter for logistic regression ([RVGA] eqs. 82-90).

    ``xi = sqrt(x^T (P + mu mu^T) x)``, ``R^{-1} = (sig(xi) - 1/2) / xi`` and the Kalman
    update with pseudo-observation ``R (y - 1/2)`` (eq. 90), equal to the Jaakkola-Jordan
    form (85)-(86).
    """
    check_process_noise(process_noise)
    from .models import logistic
    model = logistic()

    def update(state, x, y):
        x, y = check_glm_input(state, x, y, model)
        cov = inflate(state.cov, process_noise)
        v = cov @ x
        alpha0, nu0 = x @ state.mean, x @ v
        lam = _jj_lambda(jnp.sqrt(nu0 + alpha0**2))  # = R^{-1}
        den = 1.0 + lam * nu0
        return rank_one_update(state, cov, v, nu0, ((y - 0.5) - lam * alpha0) / den, lam / den, solver_info(cov.dtype))

    return Filter(init_gaussian, update, make_check(model))


__all__ = ["ekf", "qkf", "laplace", "LaplaceResult"]
