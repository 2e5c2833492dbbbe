"""Divergences and predictive scores used by the experiments (see experiments/REPORT.md).

* :func:`mc_kl`, :func:`mc_kl_logistic` — Monte-Carlo KL from a Gaussian ``q = N(mu, P)`` to an
  *unnormalised* posterior ``ptilde`` ([RVGA] eqs. 92-94)::

      KL_MC(q) = (1/M) sum_m [-log ptilde(mu + L z_m)] - (1/2 logdet P + d/2 (1 + log 2 pi)),
      where L = chol(P)

  With ``Z_p = int ptilde`` the estimator targets ``KL(q || p) - log Z_p``: only differences between
  algorithms are meaningful, and the value may be negative. The base normals ``z`` are drawn once
  (:func:`base_normals`) and reused for every algorithm and every time step (common random numbers),
  as in the authors' code (M = 300, seed = data seed in [RVGA]; M = 5 or 4, seed 1 in [LRVGA]).
* :func:`mc_kl_logistic_fa` (dense, small d) and :func:`mc_kl_logistic_fa_sampled` (Proposition 1
  ensemble sampler, large d) — the same for a factor-analysis belief
  ``N(mu, (W W^T + diag(psi))^{-1})``.
* :func:`gaussian_kl` — exact ``KL(N(m1, P1) || N(m2, P2))`` (the linear-regression metric).
* :func:`fa_kl` — ``KL(N(0, S) || N(0, W W^T + diag(psi)))`` of [LRVGA] eq. (11) in O(d^2 p).
* :func:`mc_kl_logistic_terms` — the per-sample terms of :func:`mc_kl_logistic` (paired standard errors).
* :func:`logistic_log_loss`, :func:`gaussian_nlpd`, :func:`linear_gaussian_nlpd` — predictive scores;
  :func:`ece` — expected calibration error.

All log-determinants come from Cholesky factors (never ``det``). Functions act on one belief;
``jax.vmap`` them over a trajectory of beliefs (keeping ``z`` unbatched) to score a whole run.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from ..kernels import lowrank
from ..kernels import special
from .batch_fa import fa_kl

_LOG_2PI = math.log(2.0 * math.pi)


# ---------------------------------------------------------------------------------------------
# Small Gaussian helpers
# ---------------------------------------------------------------------------------------------

def _chol_logdet(L):
    """``logdet(L L^T)`` from a Cholesky factor."""
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(L)))


def gaussian_entropy(logdet_cov, d):
    """Entropy of a d-dimensional Gaussian, ``1/2 logdet P + d/2 (1 + log 2 pi)`` ([RVGA] eq. 94).

    Args:
      logdet_cov: ``logdet P``.
      d: the dimension.

    Returns:
      The scalar entropy.
    """
    return 0.5 * logdet_cov + 0.5 * d * (1.0 + _LOG_2PI)


def gaussian_log_density(theta, mean, cov):
    """``log N(theta | mean, cov)`` for one ``theta`` (d,).

    ``cov`` may be a scalar (isotropic variance), a (d,) vector (diagonal) or a (d, d) matrix
    (Cholesky-factored).

    Args:
      theta: the point, (d,).
      mean: the mean, (d,).
      cov: a scalar, (d,) or (d, d).

    Returns:
      The scalar log density.
    """
    theta = jnp.asarray(theta)
    e = theta - mean
    d = theta.shape[-1]
    cov = jnp.asarray(cov, dtype=e.dtype)
    if cov.ndim == 0:
        quad, logdet = jnp.sum(e * e) / cov, d * jnp.log(cov)
    elif cov.ndim == 1:
        quad, logdet = jnp.sum(e * e / cov), jnp.sum(jnp.log(cov))
    else:
        L = jnp.linalg.cholesky(cov)
        w = solve_triangular(L, e, lower=True)
        quad, logdet = jnp.sum(w * w), _chol_logdet(L)
    return -0.5 * quad - 0.5 * d * _LOG_2PI - 0.5 * logdet


def logistic_log_likelihood(theta, X, y):
    """Logistic log-likelihood, ``y`` in {0, 1} ([RVGA] eq. 92)::

        sum_i log sig((2 y_i - 1) x_i^T theta) = -sum_i logaddexp(0, -(2 y_i - 1) x_i^T theta)

    Args:
      theta: the parameters, (d,).
      X: the inputs, (n, d).
      y: the labels in {0, 1}, (n,).

    Returns:
      The scalar log-likelihood.
    """
    sign = 2.0 * jnp.asarray(y, dtype=jnp.result_type(theta)) - 1.0
    return -jnp.sum(jnp.logaddexp(0.0, -sign * (X @ theta)))


def logistic_log_posterior(theta, X, y, prior_mean, prior_cov):
    """Unnormalised log posterior of Bayesian logistic regression ([RVGA] eq. 92, ``Z_p = 1``)::

        log ptilde(theta) = sum_i -logaddexp(0, -(2 y_i - 1) x_i^T theta)
                            + log N(theta | mu_0, P_0)

    The prior is a normalised Gaussian density (``- d/2 log 2 pi - 1/2 logdet P_0`` included), as in
    the authors' ``bayesianlogisticPdf``. ``prior_cov``: scalar, (d,) or (d, d). One ``theta`` (d,);
    ``jax.vmap`` over samples.

    Args:
      theta: the parameters, (d,).
      X: the inputs, (n, d).
      y: the labels in {0, 1}, (n,).
      prior_mean: the prior mean, (d,).
      prior_cov: the prior covariance: a scalar, (d,) or (d, d).

    Returns:
      The scalar log density.
    """
    return logistic_log_likelihood(theta, X, y) + gaussian_log_density(theta, prior_mean, prior_cov)


# ---------------------------------------------------------------------------------------------
# Monte-Carlo KL to an unnormalised posterior ([RVGA] eqs. 92-94)
# ---------------------------------------------------------------------------------------------

def base_normals(d: int, num: int, seed: Optional[int] = None, *, key=None, dtype=None):
    """The ``num`` x ``d`` standard normals ``z_m`` shared by every MC-KL evaluation.

    ``seed``: the authors' protocol, ``np.random.seed(seed);
    np.random.multivariate_normal(0, I_d, size=num)`` (replayed on a private RandomState; returns a
    float64 NumPy array). ``key``: ``jax.random.normal(key, (num, d), dtype)``.

    Args:
      d: the dimension.
      num: the number of rows.
      seed: the legacy seed (NumPy).
      key: a JAX PRNG key instead.
      dtype: the dtype of the JAX draws (default JAX's default float).

    Returns:
      The (num, d) normals.
    """
    if (seed is None) == (key is None):
        raise ValueError("give exactly one of seed (NumPy-legacy) or key (JAX)")
    if key is None:
        rs = np.random.RandomState(seed)
        return rs.multivariate_normal(np.zeros(d,), np.identity(d), size=(num,))
    return jax.random.normal(key, (num, d), dtype=dtype or jnp.result_type(float))


def _mc_kl_from_samples(log_target, thetas, entropy, return_stderr):
    terms = -jax.vmap(log_target)(thetas)
    kl = jnp.mean(terms) - entropy
    if not return_stderr:
        return kl
    return kl, jnp.std(terms, ddof=1) / jnp.sqrt(terms.shape[0])


def mc_kl(log_target: Callable, mean, cov, z, *, return_stderr: bool = False):
    """``KL(q || ptilde)`` by Monte Carlo for ``q = N(mean, cov)`` ([RVGA] eqs. 93-94, ``Z_p = 1``).

    ``log_target(theta) -> scalar`` is the unnormalised log density (one ``theta``); samples are
    ``mean + chol(cov) z_m`` for the rows of ``z`` (M, d). The estimate converges to
    ``KL(q || p) - log Z_p``. With ``return_stderr`` also returns the MC standard error
    ``std_m(-log ptilde(theta_m)) / sqrt(M)`` (the entropy term is exact).

    Args:
      log_target: ``log_target(theta) -> scalar``.
      mean: the mean of ``q``, (d,).
      cov: its covariance, (d, d).
      z: the base normals, (M, d).
      return_stderr: also return the Monte-Carlo standard error.

    Returns:
      The scalar estimate, or ``(estimate, stderr)`` with ``return_stderr``.
    """
    mean = jnp.asarray(mean)
    L = jnp.linalg.cholesky(cov)
    thetas = mean + jnp.asarray(z, dtype=mean.dtype) @ L.T
    entropy = gaussian_entropy(_chol_logdet(L), mean.shape[-1])
    return _mc_kl_from_samples(log_target, thetas, entropy, return_stderr)


def mc_kl_logistic(mean, cov, z, X, y, prior_mean, prior_cov, *, return_stderr: bool = False):
    """MC-KL of a full-covariance belief to the logistic posterior (:func:`logistic_log_posterior`).

    The authors' ``PosteriorLogReg.divergence`` (with ``slogdet`` in place of ``log det``).

    Args:
      mean: the mean of ``q``, (d,).
      cov: its covariance, (d, d).
      z: the base normals, (M, d).
      X: the inputs, (n, d).
      y: the labels in {0, 1}, (n,).
      prior_mean: the prior mean, (d,).
      prior_cov: the prior covariance: a scalar, (d,) or (d, d).
      return_stderr: also return the Monte-Carlo standard error.

    Returns:
      The scalar estimate, or ``(estimate, stderr)`` with ``return_stderr``.
    """
    return mc_kl(lambda th: logistic_log_posterior(th, X, y, prior_mean, prior_cov),
                 mean, cov, z, return_stderr=return_stderr)


def mc_kl_logistic_terms(mean, cov, z, X, y, prior_mean, prior_cov, *, batch_size=None):
    """The M terms ``-log ptilde(theta_m) - H(q)`` whose mean is :func:`mc_kl_logistic`.

    Same samples ``theta_m = mean + chol(cov) z_m`` and posterior as :func:`mc_kl_logistic`; kept
    term by term so that two beliefs scored on the same ``z`` give a paired standard error of their
    difference (``std(terms_a - terms_b) / sqrt(M)``). ``batch_size``: evaluate the log posterior
    on that many samples at a time (``jax.lax.map``, bounding memory for large M and n); ``None``:
    all at once (``jax.vmap``). Returns (M,).

    Args:
      mean: the mean of ``q``, (d,).
      cov: its covariance, (d, d).
      z: the base normals, (M, d).
      X: the inputs, (n, d).
      y: the labels in {0, 1}, (n,).
      prior_mean: the prior mean, (d,).
      prior_cov: the prior covariance: a scalar, (d,) or (d, d).
      batch_size: samples per evaluation (None: all at once).

    Returns:
      The (M,) terms.
    """
    L = jnp.linalg.cholesky(cov)
    thetas = mean + z @ L.T
    log_post = lambda th: logistic_log_posterior(th, X, y, prior_mean, prior_cov)
    if batch_size is None:
        lp = jax.vmap(log_post)(thetas)
    else:
        lp = jax.lax.map(log_post, thetas, batch_size=batch_size)
    return -lp - gaussian_entropy(_chol_logdet(L), mean.shape[0])


# ---------------------------------------------------------------------------------------------
# Factor-analysis beliefs N(mu, (W W^T + diag(psi))^{-1})
# ---------------------------------------------------------------------------------------------

def mc_kl_logistic_fa(mean, W, psi, z, X, y, prior_mean, prior_cov, *,
                      return_stderr: bool = False):
    """MC-KL of a factor-analysis belief, **dense** evaluation (the authors' ``divergenceLargeScale``).

    Forms ``P = (W W^T + diag(psi))^{-1}`` (:func:`jaxrvga.kernels.lowrank.to_dense_covariance`) and its
    Cholesky factor, so the samples ``mu + chol(P) z_m`` use the base normals ``z`` exactly as the
    full-covariance :func:`mc_kl_logistic` does: an FA belief and a full belief with equal
    ``(mu, P)`` get equal estimates (common random numbers across both kinds of algorithm).
    O(d^3) time and O(d^2) memory: for d up to a few thousand; beyond that use
    :func:`mc_kl_logistic_fa_sampled`.

    Args:
      mean: the mean of ``q``, (d,).
      W, psi: its precision's factors, (d, p) and (d,).
      z: the base normals, (M, d).
      X: the inputs, (n, d).
      y: the labels in {0, 1}, (n,).
      prior_mean: the prior mean, (d,).
      prior_cov: the prior covariance: a scalar, (d,) or (d, d).
      return_stderr: also return the Monte-Carlo standard error.

    Returns:
      The scalar estimate, or ``(estimate, stderr)`` with ``return_stderr``.
    """
    return mc_kl_logistic(mean, lowrank.to_dense_covariance(W, psi), z, X, y, prior_mean,
                          prior_cov, return_stderr=return_stderr)


def mc_kl_logistic_fa_sampled(key, mean, W, psi, num: int, X, y, prior_mean, prior_cov, *,
                              return_stderr: bool = False):
    """MC-KL of a factor-analysis belief with the ensemble sampler of [LRVGA] Proposition 1.

    Samples come from ``jaxrvga.kernels.lowrank.sample(key, mean, W, psi, num)`` in O(num d p + d p^2);
    the entropy uses the determinant lemma (:func:`jaxrvga.kernels.lowrank.logdet`):
    ``-1/2 logdet(W W^T + Psi) + d/2 (1 + log 2 pi)``. Nothing of size d x d is formed. Reuse the
    same ``key`` across algorithms and time steps for common random numbers. Not number-for-number
    equal to the dense :func:`mc_kl_logistic_fa` (another transformation of the base normals), but
    equal in law.

    Args:
      key: a PRNG key of the samples.
      mean: the mean of ``q``, (d,).
      W, psi: its precision's factors, (d, p) and (d,).
      num: the number of samples.
      X: the inputs, (n, d).
      y: the labels in {0, 1}, (n,).
      prior_mean: the prior mean, (d,).
      prior_cov: the prior covariance: a scalar, (d,) or (d, d).
      return_stderr: also return the Monte-Carlo standard error.

    Returns:
      The scalar estimate, or ``(estimate, stderr)`` with ``return_stderr``.
    """
    thetas = lowrank.sample(key, mean, W, psi, num)
    entropy = gaussian_entropy(-lowrank.logdet(W, psi), thetas.shape[-1])
    return _mc_kl_from_samples(lambda th: logistic_log_posterior(th, X, y, prior_mean, prior_cov),
                               thetas, entropy, return_stderr)


# ---------------------------------------------------------------------------------------------
# Exact Gaussian divergences
# ---------------------------------------------------------------------------------------------

def gaussian_kl(m1, P1, m2, P2):
    """Exact ``KL(N(m1, P1) || N(m2, P2))``::

        1/2 [ logdet P2 - logdet P1 - d + tr(P2^{-1} P1) + (m2 - m1)^T P2^{-1} (m2 - m1) ]

    (the authors' ``PosteriorLinReg.divergence`` with ``(m2, P2)`` the full-data posterior, B3).
    Computed from Cholesky factors: ``tr(P2^{-1} P1) = ||L2^{-1} L1||_F^2``.

    Args:
      m1, P1: the first Gaussian's mean (d,) and covariance (d, d).
      m2, P2: the second's.

    Returns:
      The scalar KL divergence.
    """
    L1 = jnp.linalg.cholesky(P1)
    L2 = jnp.linalg.cholesky(P2)
    A = solve_triangular(L2, L1, lower=True)
    w = solve_triangular(L2, jnp.asarray(m2) - m1, lower=True)
    d = L1.shape[-1]
    return 0.5 * (_chol_logdet(L2) - _chol_logdet(L1) - d + jnp.sum(A * A) + jnp.sum(w * w))


# ---------------------------------------------------------------------------------------------
# Predictive scores
# ---------------------------------------------------------------------------------------------

def _reduce(x, reduction):
    if reduction == "mean":
        return jnp.mean(x)
    if reduction == "sum":
        return jnp.sum(x)
    if reduction == "none":
        return x
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def logistic_log_loss(mean, cov, X, y, reduction: str = "mean"):
    """Predictive log-loss (negative log predictive probability, natural log) of a logistic belief.

    The predictive probability is the inverse-probit closed form of
    :func:`jaxrvga.kernels.special.logistic_predictive` ([RVGA] eqs. 62-63),
    ``p(y = 1 | x) = sig(k a)``, ``a = x^T mu``, ``k = k(x^T P x)``; the loss
    ``-[y log sig(k a) + (1 - y) log sig(-k a)]`` is evaluated in log space, so it stays finite
    for confident predictions where ``1 - p`` rounds to 0. ``X`` (n, d), ``y`` (n,) in {0, 1}.

    Args:
      mean: the belief's mean, (d,).
      cov: its covariance, (d, d).
      X: the inputs, (n, d).
      y: the labels in {0, 1}, (n,).
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
      The loss: a scalar, or (n,) with ``"none"``.
    """
    X = jnp.atleast_2d(X)
    a = X @ mean
    k = special.probit_k(jnp.einsum("ni,ij,nj->n", X, cov, X))
    y = jnp.asarray(y, dtype=a.dtype)
    loss = -(y * jax.nn.log_sigmoid(k * a) + (1.0 - y) * jax.nn.log_sigmoid(-k * a))
    return _reduce(loss, reduction)


def gaussian_nlpd(pred_mean, pred_var, y, reduction: str = "mean"):
    """Negative log predictive density of ``y`` under ``N(pred_mean, pred_var)``, elementwise then reduced.

    Args:
      pred_mean, pred_var: the predictive means and variances, (n,).
      y: the observations, (n,).
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
      The NLPD: a scalar, or (n,) with ``"none"``.
    """
    nlpd = 0.5 * (_LOG_2PI + jnp.log(pred_var) + (y - pred_mean) ** 2 / pred_var)
    return _reduce(nlpd, reduction)


def linear_gaussian_nlpd(mean, cov, X, y, noise_var, reduction: str = "mean"):
    """NLPD of the linear-Gaussian model: ``y | x ~ N(x^T mu, x^T P x + noise_var)`` under ``N(mu, P)``.

    Args:
      mean: the belief's mean, (d,).
      cov: its covariance, (d, d).
      X: the inputs, (n, d).
      y: the observations, (n,).
      noise_var: the observation noise variance.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
      The NLPD: a scalar, or (n,) with ``"none"``.
    """
    X = jnp.atleast_2d(X)
    return gaussian_nlpd(X @ mean, jnp.einsum("ni,ij,nj->n", X, cov, X) + noise_var, y, reduction)


# ---------------------------------------------------------------------------------------------
# Calibration
# ---------------------------------------------------------------------------------------------

def ece(probs, labels, bins: int = 10) -> float:
    """Expected calibration error of predicted class probabilities (NumPy, returns a float).

    ``probs``: (n, K) class probabilities, or (n,) probabilities of class 1 of a binary problem
    (read as ``[1 - p, p]``); ``labels`` (n,) integer classes. The confidence ``max_k p_k`` of each
    point falls in one of ``bins`` equal-width bins of [0, 1] (1 in the last); a point is accurate
    when its argmax is its label (binary: ``p > 1/2`` predicts 1). Then::

        ECE = sum_b (n_b / n) |accuracy_b - mean confidence_b|

    Args:
      probs: (n, K) or (n,) probabilities.
      labels: (n,) integer classes.
      bins: the number of bins.

    Returns:
      The ECE, a float.
    """
    probs, labels = np.asarray(probs), np.asarray(labels)
    if probs.ndim == 1:
        probs = np.stack([1 - probs, probs], axis=1)
    if probs.ndim != 2 or labels.shape != probs.shape[:1]:
        raise ValueError(f"probs must be (n, K) or (n,) and labels (n,), got {probs.shape} and {labels.shape}")
    conf = probs.max(axis=1)
    hit = (probs.argmax(axis=1) == labels).astype(float)
    idx = np.minimum((conf * bins).astype(int), bins - 1)
    gap = 0.0
    for b in range(bins):
        sel = idx == b
        if sel.any():
            gap += sel.sum() * abs(hit[sel].mean() - conf[sel].mean())
    return float(gap / len(labels))


__all__ = ["base_normals", "gaussian_entropy", "gaussian_log_density", "logistic_log_likelihood",
           "logistic_log_posterior", "mc_kl", "mc_kl_logistic", "mc_kl_logistic_terms", "mc_kl_logistic_fa",
           "mc_kl_logistic_fa_sampled", "gaussian_kl", "fa_kl",
           "logistic_log_loss", "gaussian_nlpd", "linear_gaussian_nlpd", "ece"]
