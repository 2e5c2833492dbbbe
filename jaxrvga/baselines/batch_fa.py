r"""Batch factor analysis of a dense target ``S ~ W W^T + diag(psi)`` ([LRVGA] §3, App. A-B): the
reference that the recursive EM of Algorithm 1 is measured against, and the scores of a fit.

Algorithm 1 itself is :mod:`jaxrvga.kernels.factor_analysis`, whose E- and M-steps these share.

* :func:`batch_em_step`, :func:`batch_em` - batch EM on a dense target ([LRVGA] eqs. 20-21;
  O(d^2 p), a baseline only), with the E- and M-steps of Algorithm 1;
* :func:`ml_residuals` (App. B eqs. 73-77), :func:`fa_neg_log_lik` (eq. 13) and :func:`fa_kl`
  (eq. 11, the y-axis of [LRVGA] Fig. 1).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve

from ..kernels import lowrank
from ..kernels.factor_analysis import PSI_FLOOR, e_step, m_step, rowdot
from ..validation import check_cov, check_positive


def check_factors(W, psi):
    """``(W, psi)`` of a factor analysis checked (:func:`jaxrvga.kernels.lowrank.check_factors`, a rank
    ``1 <= p <= d``, ``psi > 0``), ``psi`` in the dtype of ``W``. Raises ``ValueError``.

    Args:
      W: the factor, (d, p).
      psi: the diagonal, (d,).

    Returns:
      ``(W, psi)`` as arrays of one dtype.
    """
    W, psi = lowrank.check_factors(W, psi)
    psi = psi.astype(W.dtype)
    if not 1 <= W.shape[1] <= W.shape[0]:
        raise ValueError(f"the rank p = W.shape[1] must satisfy 1 <= p <= d, got W {W.shape}")
    check_positive("psi", psi)
    return W, psi


def batch_em_step(S, W, psi, *, psi_floor: float = PSI_FLOOR):
    """One batch-EM iteration for FA of a dense target ``S`` ([LRVGA] eqs. 20-21, App. A).

        W_new   = S Psi^{-1} W (I_p + M^{-1} W^T Psi^{-1} S Psi^{-1} W)^{-1}
        psi_new = Diag(S - W_new M^{-1} W^T Psi^{-1} S)

    O(d^2 p) time and O(d^2) memory (``S`` itself): a baseline, not a limited-memory method.
    Any exact representation ``S = W W^T + diag(psi)`` is a fixed point.

    Args:
      S: the dense target, (d, d).
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.
      psi_floor: the relative floor of ``psi``.

    Returns:
      ``(W_new, psi_new)``, (d, p) and (d,).
    """
    W, psi = check_factors(W, psi)
    S = check_cov("S", S, W.shape[0], semidefinite=True)
    Bt, Minv = e_step(W, psi)
    Q = S @ Bt
    return m_step(Q, Minv + lowrank.symmetrize(Bt.T @ Q), jnp.diagonal(S), psi_floor)


def batch_em(S, W0, psi0, max_iter: int = 1000, tol: float = 0.0, *,
             psi_floor: float = PSI_FLOOR):
    """Iterate :func:`batch_em_step` until the relative change of ``(W, psi)`` is <= ``tol``.

    Returns ``(W, psi, num_iterations)``. ``tol = 0`` runs exactly ``max_iter`` iterations.

    Args:
      S: the dense target, (d, d).
      W0, psi0: the starting factors, (d, p) and (d,).
      max_iter: the most iterations.
      tol: the stopping tolerance of the relative change (0: run ``max_iter``).
      psi_floor: the relative floor of ``psi``.

    Returns:
      ``(W, psi, num_iterations)``.
    """
    def change(W, psi, W_new, psi_new):
        num = jnp.sqrt(jnp.sum((W_new - W) ** 2) + jnp.sum((psi_new - psi) ** 2))
        return num / jnp.sqrt(jnp.sum(W_new**2) + jnp.sum(psi_new**2))

    def cond(c):
        _, _, it, delta = c
        return (it < max_iter) & (delta > tol)

    def body(c):
        W, psi, it, _ = c
        W_new, psi_new = batch_em_step(S, W, psi, psi_floor=psi_floor)
        return W_new, psi_new, it + 1, change(W, psi, W_new, psi_new)

    init = (W0, psi0, jnp.asarray(0, jnp.int32), jnp.asarray(jnp.inf, dtype=W0.dtype))
    W, psi, it, _ = jax.lax.while_loop(cond, body, init)
    return W, psi, it


def ml_residuals(S, W, psi):
    """Relative residuals of the FA maximum-likelihood equations ([LRVGA] App. B eqs. 73-77).

    ``W = S (W W^T + Psi)^{-1} W`` and ``psi = Diag(S - W W^T)``; returns the pair
    ``(||W - S Lam^{-1} W|| / ||W||, ||psi - Diag(S - W W^T)|| / ||psi||)``. At a fixed point
    of EM both vanish (App. B, Proposition 1).

    Args:
      S: the target, (d, d).
      W: the factor, (d, p).
      psi: the diagonal, (d,).

    Returns:
      The two relative residuals, scalars.
    """
    rW = W - S @ lowrank.solve(W, psi, W)
    rpsi = psi - (jnp.diagonal(S) - rowdot(W, W))
    return jnp.linalg.norm(rW) / jnp.linalg.norm(W), jnp.linalg.norm(rpsi) / jnp.linalg.norm(psi)


def fa_neg_log_lik(V, W, psi):
    """Average negative log-likelihood of samples ``V`` (n, d) under ``N(0, W W^T + Psi)`` ([LRVGA] eq. 13).

    ``= 1/2 [mean_i v_i^T Lam^{-1} v_i + logdet Lam + d log(2 pi)]``; equals
    ``fa_kl(S) + const`` with ``S = V^T V / n``. O(n d p + d p^2).

    Args:
      V: the samples, (n, d).
      W: the factor, (d, p).
      psi: the diagonal, (d,).

    Returns:
      The scalar average negative log-likelihood.
    """
    V = jnp.atleast_2d(V)
    fac = lowrank.factorize(W, psi)
    quad = jnp.mean(fac.quad_form(V.T))
    return 0.5 * (quad + fac.logdet() + V.shape[1] * jnp.log(2.0 * jnp.pi))


def fa_kl(S, W, psi, logdet_S=None):
    """``KL(N(0, S) || N(0, W W^T + diag(psi)))`` of [LRVGA] eq. (11), the y-axis of Fig. 1::

        1/2 [ tr((W W^T + Psi)^{-1} S) + logdet(W W^T + Psi) - logdet S - d ]

    Woodbury: ``tr(Lam^{-1} S) = sum_i S_ii / psi_i - tr(M^{-1} B^T S B)``, ``B = Psi^{-1} W``, so the
    cost is O(d^2 p) (one product ``S B``) and no d x d inverse is formed. ``logdet_S`` may be
    passed when S is fixed across many calls; otherwise it is computed by Cholesky (S must be
    positive definite). Equals the authors' ``KLDivergence_largeScale``.

    Args:
      S: the target covariance, (d, d), positive definite.
      W: the factor, (d, p).
      psi: the diagonal, (d,).
      logdet_S: ``logdet S``, if known.

    Returns:
      The scalar KL divergence.
    """
    S = jnp.asarray(S)
    fac = lowrank.factorize(W, psi)
    B = fac.Wp  # Psi^{-1} W
    trace = (jnp.sum(jnp.diagonal(S) / fac.psi)
             - jnp.trace(cho_solve((fac.chol, True), B.T @ (S @ B))))
    logdet_lam = fac.logdet()
    if logdet_S is None:
        logdet_S = 2.0 * jnp.sum(jnp.log(jnp.diagonal(jnp.linalg.cholesky(S))))
    return 0.5 * (trace + logdet_lam - logdet_S - S.shape[-1])


__all__ = ["batch_em_step", "batch_em", "ml_residuals", "fa_neg_log_lik", "fa_kl", "check_factors"]
