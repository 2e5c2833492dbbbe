r"""Fixed-interval smoothing of the parameter trajectory: the Rauch-Tung-Striebel smoother.

Under the drift model of :mod:`jaxrvga.dynamics` the parameter moves between observations,
:math:`\theta_{t+1} = \gamma (\theta_t - m) + m + w_{t+1}`, and a filter's belief after observation
``t``, :math:`N(\mu_t, P_t)`, conditions on the observations up to ``t`` only. The smoother
conditions every step on all ``T`` observations: from :math:`(\mu^s_{T-1}, P^s_{T-1}) = (\mu_{T-1},
P_{T-1})` backwards,

.. math::

    P_{t+1|t} = s\, P_t + Q, \qquad G_t = \gamma\, P_t P_{t+1|t}^{-1},

    \mu^s_t = \mu_t + G_t (\mu^s_{t+1} - \mu_{t+1|t}), \qquad
    P^s_t = P_t + G_t (P^s_{t+1} - P_{t+1|t}) G_t^\top,

with the filter's own prediction (``mu_{t+1|t} = gamma mu_t + (1 - gamma) m``, ``s = gamma^2 (1 +
eta)``, ``F = gamma I``; Rauch, Tung & Striebel, AIAA J. 3(8), 1965; Sarkka, *Bayesian Filtering
and Smoothing*, 2013, Thm 8.2). For the linear-Gaussian model without ``process_noise`` it is the
exact posterior of each :math:`\theta_t` given all the data; ``process_noise`` enters as the
filter applies it (the inflation of the covariance as if it were a process noise
``gamma^2 eta P_t``). For other models it smooths the filter's Gaussian approximations (as
the extended RTS smoother does for the EKF). Results follow dynamax's convention: the smoothed
mean and covariance of every step, the last equal to the filter's.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .beliefs import Dense
from .core import Filter
from .validation import all_finite, check_float_array, is_concrete


class Smoothed(NamedTuple):
    """Smoothed beliefs ``N(mean[t], cov[t])`` of each step given all the data: ``mean`` (T, d),
    ``cov`` (T, d, d). ``converged`` (T,): False at a step whose predicted covariance ``P_{t+1|t}`` is
    not positive definite (e.g. ``decay=0`` without ``additive_noise``) or whose result is not finite;
    that step keeps the filtered belief (gain 0) and the steps before it smooth from there."""

    mean: jax.Array
    cov: jax.Array
    converged: jax.Array


def _check(flt, means, covs):
    """The dense filter's dynamics and the filtered means (T, d) and covariances (T, d, d), checked."""
    spec = getattr(flt, "spec", None) if isinstance(flt, Filter) else None
    if spec is None:
        raise ValueError("flt must be a filter built by jaxrvga (jr.kalman, jr.rvga, jr.ekf, ...): the smoother "
                         "reads its dynamics from flt.spec")
    if not isinstance(spec.belief, Dense):
        raise ValueError(f"flt: rts_smoother smooths dense beliefs (jr.rvga, jr.kalman, jr.ekf), got a "
                         f"{type(spec.belief).__name__} belief")
    if spec.model.family.learned_noise:
        raise ValueError("flt: a learned noise variance (noise_var=None) is not smoothed; give the model a "
                         "noise variance")
    means = check_float_array("filtered_means", means)
    covs = check_float_array("filtered_covs", covs)
    if means.ndim != 2 or means.shape[0] == 0:
        raise ValueError(f"filtered_means must have shape (T, d) with T >= 1, got {means.shape}")
    T, d = means.shape
    if covs.shape != (T, d, d):
        raise ValueError(f"filtered_covs must have shape (T, d, d) = {(T, d, d)} to match filtered_means, "
                         f"got {covs.shape}")
    spec.dynamics.check_dimension(d)
    if is_concrete(covs):  # what a filter's guard keeps: finite, symmetric positive definite
        c = np.asarray(covs, np.float64)
        if not (np.all(np.isfinite(c)) and np.all(np.isfinite(np.asarray(means, np.float64)))):
            raise ValueError("filtered_means and filtered_covs must be finite (they hold NaN or inf)")
        try:
            np.linalg.cholesky(0.5 * (c + np.swapaxes(c, -1, -2)))
        except np.linalg.LinAlgError:
            raise ValueError("filtered_covs must be positive definite at every step") from None
    return spec.dynamics, means, covs


def rts_smoother(flt: Filter, filtered_means, filtered_covs) -> Smoothed:
    """The Rauch-Tung-Striebel smoother of a dense filter's run (module docstring).

    Args:
      flt: the dense filter that ran (:func:`jaxrvga.kalman`, :func:`jaxrvga.rvga`, :func:`jaxrvga.ekf`,
        ...); its dynamics (``decay``, ``decay_to``, ``additive_noise``, ``process_noise``) are the
        smoother's.
      filtered_means, filtered_covs: the belief after each observation, (T, d) and (T, d, d), e.g.
        the trace of ``jr.run(flt, state, xs, ys, lambda s, x, y: (s.mean, s.cov))``.

    Returns:
      :class:`Smoothed` ``(mean (T, d), cov (T, d, d), converged (T,))``. One ``lax.scan`` backwards, a Cholesky
      factorisation of each predicted covariance; jits, vmaps and differentiates.
    """
    dyn, means, covs = _check(flt, filtered_means, filtered_covs)
    dtype = means.dtype
    gamma = jnp.asarray(1.0 if dyn.decay is None else dyn.decay, dtype)
    s, q = dyn.cov_scale(dtype), dyn.additive_variance(dtype)
    d = means.shape[1]

    def back(later, filtered):
        (mean_later, cov_later), (mean, cov) = later, filtered
        cov_pred = cov if s is None else s * cov
        if q is not None:
            cov_pred = cov_pred.at[jnp.diag_indices(d)].add(jnp.broadcast_to(q, (d,)))
        chol = jnp.linalg.cholesky(cov_pred)
        gain = gamma * jax.scipy.linalg.cho_solve((chol, True), cov).T  # gamma P P_pred^{-1}
        mean_s = mean + gain @ (mean_later - dyn.predict_mean(mean))
        cov_s = cov + gain @ (cov_later - cov_pred) @ gain.T
        cov_s = 0.5 * (cov_s + cov_s.T)
        ok = all_finite(chol, mean_s, cov_s)  # a predicted covariance that is not positive definite: no gain
        mean_s, cov_s = jnp.where(ok, mean_s, mean), jnp.where(ok, cov_s, cov)
        return (mean_s, cov_s), (mean_s, cov_s, ok)

    last = (means[-1], covs[-1])
    _, (mean_s, cov_s, ok) = jax.lax.scan(back, last, (means[:-1], covs[:-1]), reverse=True)
    return Smoothed(jnp.concatenate([mean_s, means[-1:]]), jnp.concatenate([cov_s, covs[-1:]]),
                    jnp.concatenate([ok, jnp.ones((1,), bool)]))


__all__ = ["Smoothed", "rts_smoother"]
