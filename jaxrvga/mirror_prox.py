"""Iterated R-VGA / mirror prox ([LRVGA] §4.2.1 eq. 37, App. G eqs. 139-145).

One extragradient step: an explicit update gives ``q_hat = N(muhat, Phat)``, then the
expectations are re-evaluated under ``q_hat``::

    Phat^{-1} = P_{t-1}^{-1} - E_{q_{t-1}}[hess log p];   muhat = mu_{t-1} + Phat E_{q_{t-1}}[grad log p]
    P_t^{-1}  = P_{t-1}^{-1} - E_{q_hat}[hess log p]      (skipped when update_cov_twice=False: P_t = Phat)
    mu_t      = mu_{t-1} + P_t ( E_{q_hat}[grad log p] - c E_{q_hat}[hess log p] (muhat - mu_{t-1}) )

``correction=False`` (c = 0) is the paper's eq. (142) and the authors' code. It drops the
last term, so it is not exact even on a linear-Gaussian model (prior N(0, 1), y = theta +
N(0, 1), y = 1 gives mu = 0.25 instead of 0.5; reproduction spec §4 item 1).
``correction=True`` is the mirror-prox step in natural parameters; it equals the Kalman
filter on linear-Gaussian models and is the second iterate of the implicit R-VGA iteration.
"""
from __future__ import annotations


from .core import Filter, solver_info
from .models import Model
from .rvga import (check_glm_input, check_process_noise, inflate, init_gaussian, make_check,
                   rank_one_update)


def mirror_prox(model: Model, *, correction: bool = False, update_cov_twice: bool = True,
                process_noise=None) -> Filter:
    """Mirror-prox (extragradient) R-VGA for a GLM, full covariance ([LRVGA] eqs. 139-145).

    Expectations on the 1-D projection ``eta = x^T theta`` by :meth:`Model.glm_moments`.
    Defaults reproduce the paper and the authors' code (``correction=False``,
    ``update_cov_twice=True``).
    """
    if not isinstance(model, Model) or not model.is_glm:
        raise ValueError("model must be a GLM from jaxrvga.models (linear_gaussian, logistic, poisson, glm)")
    check_process_noise(process_noise)

    def update(state, x, y):
        x, y = check_glm_input(state, x, y, model)
        cov = inflate(state.cov, process_noise)
        v = cov @ x
        alpha0, nu0 = x @ state.mean, x @ v
        g0, h0 = model.glm_moments(alpha0, nu0, y)
        c0 = -h0
        # q_hat along x: alpha_hat = x^T muhat, nu_hat = x^T Phat x (eqs. 139-140).
        alpha_hat = alpha0 + nu0 * g0 / (1.0 + c0 * nu0)
        nu_hat = nu0 / (1.0 + c0 * nu0)
        g1, h1 = model.glm_moments(alpha_hat, nu_hat, y)
        c1 = -h1
        c = c1 if update_cov_twice else c0
        step = g1 + (c1 * (alpha_hat - alpha0) if correction else 0.0)
        den = 1.0 + c * nu0
        info = solver_info(state.mean.dtype, iterations=2)
        return rank_one_update(state, cov, v, nu0, step / den, c / den, info)

    return Filter(init_gaussian, update, make_check(model))
