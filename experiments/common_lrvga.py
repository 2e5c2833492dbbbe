"""Shared pieces of the L-RVGA experiments ([LRVGA] Figs 2-5).

Linear regression (Fig. 2): the authors' initial factors (:func:`init_factors`), the full-data
posterior (:func:`linear_posterior`) and the exact KL to it of a factor-analysis or a dense belief.
Logistic regression (Figs 3-5): one problem's data, prior, MC-KL normals and Laplace
(:class:`Problem`), the MC-KL along the stream (:func:`lrvga_kl_curve`) and the authors' initial
``W`` (:func:`authors_w0`).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from experiments.common import MODEL, kl_terms, run_snapshots

import jaxrvga as jr  # noqa: E402
from jaxrvga import models
from jaxrvga.baselines import data
from jaxrvga.baselines import metrics  # noqa: E402

# --------------------------------------------------------------------------- linear regression (Fig. 2)

LINEAR_SIGMA0, LINEAR_SEED, EPS = 1.0, 1, 1e-8
#: The linear-Gaussian model of Fig. 2 (noise variance 1) and its exact filter.
LINEAR_MODEL = models.linear_gaussian(1.0)
KALMAN = jr.kalman(1.0)


def init_factors(d, p, init, seed=LINEAR_SEED, sigma0=LINEAR_SIGMA0):
    """``(W0, psi0)`` of the authors' scripts, ``np.random.seed(seed); mvn(0, I_p, d)`` per p.

    ``"head"``: [LRVGA] App. D, columns rescaled to ``sqrt(eps d / p) / sigma0``,
    ``psi0 = (1 - eps) / sigma0^2``. ``"dec2021"``: ``W0 = 1e-2 mvn``, ``psi0 = 1 / sigma0^2``.
    """
    W0 = np.random.RandomState(seed).multivariate_normal(np.zeros(p), np.identity(p), d)
    if init == "head":
        W0 = W0 / np.linalg.norm(W0, axis=0) * (math.sqrt(EPS * d / p) / sigma0)
        return W0, np.full(d, (1 - EPS) / sigma0**2)
    return 1e-2 * W0, np.full(d, 1 / sigma0**2)


def linear_posterior(X, y, sigma0=LINEAR_SIGMA0):
    """Full-data posterior precision ``Lam* = I/sigma0^2 + X^T X`` and mean ``m*`` (noise variance 1)."""
    d = X.shape[1]
    lam = np.eye(d) / sigma0**2 + X.T @ X
    return lam, np.linalg.solve(lam, X.T @ y)


def linear_kl_fa(state, lam, logdet_lam, m_star):
    """Exact ``KL(N(mu, (W W^T + Psi)^{-1}) || N(m*, Lam*^{-1}))`` of a factor-analysis belief::

        fa_kl(Lam*, W, psi) + 1/2 (mu - m*)^T Lam* (mu - m*)

    (:func:`jaxrvga.baselines.metrics.fa_kl` with ``S = Lam*``, O(d^2 p); ``logdet_lam = logdet Lam*``)."""
    dm = state.mean - m_star
    return metrics.fa_kl(lam, state.W, state.psi, logdet_lam) + 0.5 * dm @ (lam @ dm)


def linear_kl_full(state, lam, logdet_lam, m_star):
    """The same KL for a dense belief ``N(mu, P)`` (the Kalman filter) in precision form::

        1/2 [tr(Lam* P) - logdet P - logdet Lam* - d + (mu - m*)^T Lam* (mu - m*)]

    (one Cholesky of P per evaluation; :func:`jaxrvga.baselines.metrics.gaussian_kl` would factor both
    covariances, twice the cost at d = 1000)."""
    P = state.cov
    dm = state.mean - m_star
    logdet_p = 2.0 * jnp.sum(jnp.log(jnp.diagonal(jnp.linalg.cholesky(P))))
    return 0.5 * (jnp.sum(lam * P) - logdet_p - logdet_lam - P.shape[0] + dm @ (lam @ dm))


def precision_kl(state, lam_kf):
    """``KL(N(0, Lam_KF) || N(0, W W^T + Psi))`` of the p = d panel ([LRVGA] eq. 11)."""
    return metrics.fa_kl(lam_kf, state.W, state.psi)

# --------------------------------------------------------------------------- logistic regression (Figs 3-5)

M_KL, SEED_KL = 5, 1  # the authors' nbSamplesKL and seed
M_BIG, SEED_BIG = 1000, 1234  # precise final estimates
N_POINTS = 100  # MC-KL evaluations along the stream
TERMS_BATCH = 50  # samples per batch of the M_BIG terms (bounds memory at large d and N)


class Problem:
    """Data, prior, MC-KL normals and Laplace of one logistic experiment."""

    def __init__(self, d, N, coef_s, sigma0, seed=1, c=1.0, mu0=0.0, m_kl=M_KL, seed_kl=None):
        self.d, self.N, self.sigma0, self.seed = d, N, sigma0, seed
        self.s = 1.0 / d**coef_s
        self.ds = data.logistic_data(self.s, N, d, c, seed=seed)
        self.X, self.y = jnp.asarray(self.ds.X), jnp.asarray(self.ds.y)
        self.m0 = jnp.asarray(data.prior_mean(mu0, d))
        self.P0 = sigma0**2 * jnp.eye(d)
        self.z = jnp.asarray(metrics.base_normals(d, m_kl, seed=seed if seed_kl is None else seed_kl))
        self.z_big = jax.random.normal(jax.random.PRNGKey(SEED_BIG), (M_BIG, d))
        lap = _problem_laplace(self.X, self.y, self.m0, self.P0)
        self.lap_mean, self.lap_cov, self.lap_ok = lap.mean, lap.cov, bool(lap.converged)
        self.kl_laplace = float(full_kl(self.lap_mean, self.lap_cov, self.z, self.X, self.y, self.m0,
                                        sigma0**2))
        self.terms_laplace = kl_terms(self.lap_mean, self.lap_cov, self.z_big, self.X, self.y, self.m0,
                                      sigma0**2, batch_size=TERMS_BATCH)

    def stride(self):
        return max(1, self.N // N_POINTS)


#: The Laplace approximation of a :class:`Problem`, compiled once per shape (shared by every problem
#: of that size).
_problem_laplace = jax.jit(lambda X, y, m, P: jr.baselines.laplace.laplace(MODEL, X, y, m, P))


@jax.jit
def full_kl(mean, cov, z, X, y, m0, prior_var):
    """:func:`jaxrvga.baselines.metrics.mc_kl_logistic`, compiled."""
    return metrics.mc_kl_logistic(mean, cov, z, X, y, m0, prior_var)


def _fa_kl(state, z, X, y, m0, prior_var):
    return metrics.mc_kl_logistic_fa(state.mean, state.W, state.psi, z, X, y, m0, prior_var)


def _full_kl_state(state, z, X, y, m0, prior_var):
    return metrics.mc_kl_logistic(state.mean, state.cov, z, X, y, m0, prior_var)


def lrvga_kl_curve(prob: Problem, flt, state0, full=False):
    """Run a filter over the stream; MC-KL (M = 5 normals) at t = 0, stride, ..., N.

    Returns ``(t, kl, final_state, final_terms)`` with the M_BIG terms of the final belief.
    """
    extract = _full_kl_state if full else _fa_kl
    args = (prob.z, prob.X, prob.y, prob.m0, prob.sigma0**2)
    stride = prob.stride()
    final, kl, t = run_snapshots(flt, state0, prob.X, prob.y, stride, extract, *args)
    kl0 = float(jax.jit(extract)(state0, *args))
    t = np.concatenate([[0], t])
    cov = final.cov if full else jr.kernels.lowrank.to_dense_covariance(final.W, final.psi)
    terms = kl_terms(final.mean, cov, prob.z_big, prob.X, prob.y, prob.m0, prob.sigma0**2,
                     batch_size=TERMS_BATCH)
    return t, np.concatenate([[kl0], np.asarray(kl)]), final, np.asarray(terms)


def authors_w0(d, p, scale, seed=1):
    """``np.random.seed(seed); W0 = scale * mvn(0, I_p, d)`` (the authors' logistic init)."""
    return scale * np.random.RandomState(seed).multivariate_normal(np.zeros(p), np.identity(p), d)


def cosine(a, b):
    """Cosine of the angle between two vectors (e.g. a filter's mean and the MAP)."""
    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
