"""R-VGA Figs 1-2: the inverse-probit approximation and the Jaakkola-Jordan bound (illustrations).

Fig. 1: ``sig(a)`` against ``Phi(lambda a)``, ``lambda = sqrt(pi/8)`` (left), and ``sig'(a)`` against
``N(a | 0, beta^2)`` = ``d/da Phi(lambda a)``, ``beta = 1/lambda`` (right) ([RVGA] §5.1). A third panel
checks what the filters actually use, the Gaussian expectations of eq. (58)
(``jr.kernels.special.probit_moments``), against dense quadrature over
``m in [-10, 10]``, ``v in [1e-4, 1e3]`` (experiments/REPORT.md).

Fig. 2: the lower bound (82)-(83) ``sig(a) >= sig(xi) exp((a - xi)/2 + eta(xi) (a^2 - xi^2))`` and
the corresponding quadratic upper bound on the logistic loss ``-log sig(a)``, for a few ``xi``.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy.special import expit, ndtr

from experiments.common import cli, pyplot, save_figure, write_csv

import jaxrvga as jr  # noqa: E402

LAM = math.sqrt(math.pi / 8)
BETA = 1 / LAM


def _moment_errors(n_m, n_v):
    m = np.linspace(-10, 10, n_m)
    v = np.logspace(-4, 3, n_v)
    M, V = np.meshgrid(m, v)
    # Dense quadrature in the standard-normal variable (Gauss-Hermite resolves the sigmoid's
    # transition badly when v is large): z in [-12, 12], 20001 nodes.
    z = np.linspace(-12, 12, 20001)
    w = np.exp(-0.5 * z**2)
    w = w / w.sum()
    ex_sig, ex_sig1 = np.empty_like(M), np.empty_like(M)
    for i in range(M.shape[0]):
        a = M[i, :, None] + np.sqrt(V[i, :, None]) * z
        ex_sig[i] = expit(a) @ w
        ex_sig1[i] = (expit(a) * expit(-a)) @ w
    ap_sig, ap_sig1 = (np.asarray(t) for t in jr.kernels.special.probit_moments(M, V))
    return M, V, np.abs(ap_sig - ex_sig), np.abs(ap_sig1 - ex_sig1)


def run(quick: bool, out: Path) -> dict:
    plt = pyplot()
    a = np.linspace(-10, 10, 2001)
    sig, probit = expit(a), ndtr(LAM * a)
    dsig, dprobit = sig * (1 - sig), np.exp(-0.5 * (a / BETA) ** 2) / (BETA * math.sqrt(2 * math.pi))
    M, V, err_sig, err_sig1 = _moment_errors(41 if quick else 201, 36 if quick else 141)

    fig, axs = plt.subplots(1, 3, figsize=(14, 3.8))
    axs[0].plot(a, sig, label="sig(a)")
    axs[0].plot(a, probit, "--", label="Phi(lambda a)")
    axs[0].set_title(f"value (max abs diff {np.max(np.abs(sig - probit)):.4f})", fontsize=9)
    axs[1].plot(a, dsig, label="sig'(a)")
    axs[1].plot(a, dprobit, "--", label="N(a | 0, beta^2)")
    axs[1].set_title(f"derivative (max abs diff {np.max(np.abs(dsig - dprobit)):.4f})", fontsize=9)
    for ax in axs[:2]:
        ax.legend(fontsize=8)
        ax.set_xlabel("a")
    cs = axs[2].contourf(M, np.log10(V), err_sig, 20)
    fig.colorbar(cs, ax=axs[2])
    axs[2].set_title(f"|E[sig(a)] eq.(58) - quadrature|, max {err_sig.max():.4f}\n"
                     f"(E[sig'(a)]: max {err_sig1.max():.4f})", fontsize=9)
    axs[2].set_xlabel("m")
    axs[2].set_ylabel("log10 v")
    save_figure(fig, out / "rvga_fig01.png", "R-VGA Fig. 1: logistic vs inverse probit")
    write_csv(out / "rvga_fig01.csv", ["a", "sig", "Phi_lambda_a", "dsig", "N_0_beta2"],
              zip(a[::10], sig[::10], probit[::10], dsig[::10], dprobit[::10]))

    # Fig. 2: Jaakkola-Jordan bound.
    a2 = np.linspace(-6, 6, 1201)
    fig, axs = plt.subplots(1, 2, figsize=(10, 3.8))
    axs[0].plot(a2, expit(a2), "k", lw=2, label="sig(a)")
    axs[1].plot(a2, np.logaddexp(0, -a2), "k", lw=2, label="-log sig(a)")
    gaps = []
    for xi in (0.5, 1.5, 3.0):
        eta = -(expit(xi) - 0.5) / (2 * xi)  # eq. (83)
        lower = expit(xi) * np.exp((a2 - xi) / 2 + eta * (a2**2 - xi**2))  # eq. (82)
        gaps.append(float(np.min(expit(a2) - lower)))
        axs[0].plot(a2, lower, "--", label=f"bound, xi = {xi:g}")
        axs[1].plot(a2, -np.log(lower), "--", label=f"bound, xi = {xi:g}")
    axs[0].set_title("quadratic-exponential lower bound on sig (82)-(83)", fontsize=9)
    axs[1].set_title("quadratic upper bound on the logistic loss", fontsize=9)
    for ax in axs:
        ax.legend(fontsize=7)
        ax.set_xlabel("a = x^T theta")
    save_figure(fig, out / "rvga_fig02.png")
    return {"fig1_max_abs_sig_minus_probit": float(np.max(np.abs(sig - probit))),
            "fig1_max_abs_dsig_minus_gauss": float(np.max(np.abs(dsig - dprobit))),
            "fig1_max_err_Esig_eq58": float(err_sig.max()),
            "fig1_max_err_Esig1_eq58": float(err_sig1.max()),
            "fig2_min_gap_sig_minus_bound": float(min(gaps))}


if __name__ == "__main__":
    cli(run, __doc__)
