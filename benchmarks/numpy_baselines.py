"""Plain NumPy transcriptions of the papers' steps: what a user would write from the equations.

They are the baselines of the benchmark tables (run in the same process, on the same data).
The implicit R-VGA step follows the authors' style: NumPy plus ``scipy.optimize.root``
(MINPACK hybr) on ``(alpha, log nu)`` per observation ([RVGA] eqs. 69-77).
Algorithm 1 of [LRVGA] is transcribed directly.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import root

BETA = np.sqrt(8.0 / np.pi)


def _sig(z):
    return 1.0 / (1.0 + np.exp(-np.clip(z, -100, 100)))


def _k(v):
    return BETA / np.sqrt(v + BETA**2)


def ekf_step(mu, P, x, y):
    """EKF = online natural gradient for logistic regression ([RVGA] eq. 81)."""
    a = x @ mu
    m = max(_sig(a) * (1 - _sig(a)), 1e-100)
    Px = P @ x
    P = P - np.outer(Px, Px) / (1.0 / m + x @ Px)
    return mu + P @ x * (y - _sig(a)), P


def explicit_step(mu, P, x, y):
    """Explicit R-VGA for logistic regression ([RVGA] eqs. 78-80)."""
    Px = P @ x
    nu = x @ Px
    k = _k(nu)
    a = x @ mu
    m = max(k * _sig(k * a) * (1 - _sig(k * a)), 1e-100)
    P = P - np.outer(Px, Px) / (1.0 / m + nu)
    return mu + P @ x * (y - _sig(k * a)), P


def implicit_step(mu, P, x, y):
    """Implicit R-VGA for logistic regression with SciPy's hybr root, as in the authors' code."""
    Px = P @ x
    nu0, a0 = x @ Px, x @ mu

    def F(z):
        a, nu = z[0], np.exp(z[1])
        k = _k(nu)
        s = _sig(k * a)
        return [a + nu0 * s - a0 - nu0 * y, nu - nu0 / (1 + nu0 * k * s * (1 - s))]

    nu_min = 4 * nu0 / (4 + nu0)
    sol = root(F, [a0 + nu0 * y - nu0 / 2, np.log((nu_min + nu0) / 2)], method="hybr", tol=1e-6)
    a, nu = sol.x[0], np.exp(sol.x[1])
    k = _k(nu)
    s = _sig(k * a)
    mu = mu + Px * (y - s)
    P = P - np.outer(Px, Px) / (1.0 / (k * s * (1 - s)) + nu0)
    return mu, P


def recursive_em_step(W_prev, psi_prev, X, alpha, beta, inner_loops):
    """Algorithm 1 of [LRVGA], transcribed line by line. ``X`` is (d, m)."""
    W, psi = W_prev, psi_prev
    p = W.shape[1]
    diag_s = beta * np.einsum("ij,ij->i", X, X) + alpha * (np.einsum("ij,ij->i", W_prev, W_prev) + psi_prev)
    for _ in range(inner_loops):
        Wp = W / psi[:, None]
        M = np.eye(p) + W.T @ Wp
        V = beta * X @ (X.T @ Wp) + alpha * (W_prev @ (W_prev.T @ Wp) + (psi_prev / psi)[:, None] * W)
        Minv = np.linalg.inv(M)
        W_new = V @ np.linalg.inv(np.eye(p) + Minv @ W.T @ (V / psi[:, None]))
        psi = diag_s - np.einsum("ij,ij->i", W_new @ Minv, V)
        W = W_new
    return W, psi


def woodbury_apply(W, psi, v):
    """``(W W^T + diag(psi))^{-1} v`` (Woodbury, [LRVGA] eq. 27)."""
    p = W.shape[1]
    Wp = W / psi[:, None]
    M = np.eye(p) + W.T @ Wp
    return (v - W @ np.linalg.solve(M, Wp.T @ v)) / psi


def lrvga_linear_step(mu, W, psi, x, y, inner_loops):
    """Linear L-RVGA ([LRVGA] eqs. 23-27): FA stage, then the mean with the new factors."""
    W, psi = recursive_em_step(W, psi, x[:, None], 1.0, 1.0, inner_loops)
    return mu + woodbury_apply(W, psi, x) * (y - x @ mu), W, psi


def lrvga_logistic_explicit_step(mu, W, psi, x, y, inner_loops):
    """Explicit logistic L-RVGA ([LRVGA] §4.2.1 and §5.3 without the extragradient step)."""
    Px = woodbury_apply(W, psi, x)
    k = _k(x @ Px)
    a = x @ mu
    s = _sig(k * a)
    c = max(k * s * (1 - s), 1e-100)
    W, psi = recursive_em_step(W, psi, (x * np.sqrt(c))[:, None], 1.0, 1.0, inner_loops)
    return mu + woodbury_apply(W, psi, x) * (y - s), W, psi
