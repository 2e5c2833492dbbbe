"""R-VGA Figs 12-13 (Appendix 9.5): the 2-D implicit equation F = (f, g) of eqs. (69)-(70).

Fig. 12: f and g over the coarse box (71)-(72) for ``alpha0 = 100, nu0 = 300, y = 0``, with the
paper's marked start ``(alpha0, nu0)`` (a corner of the box), the authors' code start (the box
centre), the root found by ``jr.kernels.root_solvers.solve_logistic`` and the refined box (129)-(136).

Fig. 13: for ``nu0 in {1, 5, 10}`` the bounds of the iterated refinement (129)-(136) (green) and
the fixed-point iteration of ``Ftilde`` (125)-(126) from two starts (red: lower corner of the
box, blue: upper corner). The paper does not give ``alpha0`` and ``y`` for Fig. 13; we use
``alpha0 = 2, y = 0``. Claims: the box shrinks fast for moderate nu0 but not for large nu0;
the Ftilde iteration is not contractive (it oscillates).
"""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from experiments.common import cli, pyplot, save_figure, write_csv

import jaxrvga as jr  # noqa: E402
from jaxrvga.kernels.special import probit_k, sig1, sigmoid  # noqa: E402

SWEEPS = 30


@jax.jit
def ftilde(alpha, nu, alpha0, nu0, y):
    """Eqs. (125)-(126): the map whose fixed points are the roots of F."""
    k = probit_k(nu)
    return (-nu0 * sigmoid(alpha * k) + alpha0 + nu0 * y, nu0 / (1 + nu0 * k * sig1(alpha * k)))


@jax.jit
def _sweep(box, alpha0, nu0, y):
    return jr.kernels.root_solvers.refine_box(box, alpha0, nu0, y, sweeps=1)


def box_history(alpha0, nu0, y, sweeps):
    box = tuple(jnp.asarray(b) for b in jr.kernels.root_solvers.coarse_box(alpha0, nu0, y))
    hist = [np.array([float(b) for b in box])]
    for _ in range(sweeps):
        box = _sweep(box, alpha0, nu0, y)
        hist.append(np.array([float(b) for b in box]))
    return np.array(hist)  # (sweeps + 1, 4): alpha_min, alpha_max, nu_min, nu_max


def fixed_point_history(start, alpha0, nu0, y, iters):
    a, n = start
    hist = [(a, n)]
    for _ in range(iters):
        a, n = (float(v) for v in ftilde(a, n, alpha0, nu0, y))
        hist.append((a, n))
    return np.array(hist)


def fig12(out: Path, n):
    plt = pyplot()
    alpha0, nu0, y = 100.0, 300.0, 0.0
    a_lo, a_hi, n_lo, n_hi = (float(v) for v in jr.kernels.root_solvers.coarse_box(alpha0, nu0, y))
    A, Nu = np.meshgrid(np.linspace(a_lo, a_hi, n), np.linspace(n_lo, n_hi, n))
    f, g = (np.asarray(v) for v in jr.kernels.root_solvers.residuals(jnp.asarray(A), jnp.asarray(Nu), alpha0, nu0, y))
    alpha, nu, info = jr.kernels.root_solvers.solve_logistic(alpha0, nu0, y)
    alpha, nu = float(alpha), float(nu)
    refined = box_history(alpha0, nu0, y, 50)[-1]
    centre = (0.5 * (a_lo + a_hi), 0.5 * (n_lo + n_hi))
    fig, axs = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, val, name in ((axs[0], f, "f"), (axs[1], g, "g"),
                          (axs[2], np.log10(np.hypot(f, g) + 1e-12), "log10 ||F||")):
        cs = ax.contourf(A, Nu, val, 30, cmap="viridis")
        fig.colorbar(cs, ax=ax)
        if name != "log10 ||F||":
            ax.contour(A, Nu, val, [0.0], colors="w", linewidths=1.5)
        ax.plot(alpha0, nu0, "o", color="b", ms=8, label="(alpha0, nu0): paper's start")
        ax.plot(*centre, "x", color="c", ms=9, mew=2, label="box centre: code's start")
        ax.plot(alpha, nu, "o", color="r", ms=8, label="root")
        r = refined
        ax.plot([r[0], r[1], r[1], r[0], r[0]], [r[2], r[2], r[3], r[3], r[2]], "g-", lw=1.5,
                label="refined box (50 sweeps)")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("alpha")
        ax.set_ylabel("nu")
    axs[0].legend(fontsize=7, loc="lower left")
    save_figure(fig, out / "rvga_fig12.png",
                f"R-VGA Fig. 12: F for alpha0 = {alpha0:g}, nu0 = {nu0:g}, y = {y:g}; root "
                f"({alpha:.4f}, {nu:.4f}), scaled residual {float(info.residual):.1e}")
    sub = (slice(None, None, 4), slice(None, None, 4))  # a 50 x 50 subgrid keeps the CSV small
    write_csv(out / "rvga_fig12.csv", ["alpha", "nu", "f", "g"],
              zip(A[sub].ravel(), Nu[sub].ravel(), f[sub].ravel(), g[sub].ravel()))
    return {"fig12_root_alpha": alpha, "fig12_root_nu": nu, "fig12_residual": float(info.residual),
            "fig12_newton_iterations": int(info.iterations),
            "fig12_refined_alpha_width_ratio": (refined[1] - refined[0]) / (a_hi - a_lo),
            "fig12_refined_nu_width_ratio": (refined[3] - refined[2]) / (n_hi - n_lo)}


def fig13(out: Path):
    plt = pyplot()
    alpha0, y = 2.0, 0.0
    nus = (1.0, 5.0, 10.0)
    fig, axs = plt.subplots(2, 3, figsize=(14, 6.5))
    summary, rows = {}, []
    it = np.arange(SWEEPS + 1)
    for j, nu0 in enumerate(nus):
        boxes = box_history(alpha0, nu0, y, SWEEPS)
        root_a, root_n, _ = jr.kernels.root_solvers.solve_logistic(alpha0, nu0, y)
        starts = ((boxes[0, 0], boxes[0, 2]), (boxes[0, 1], boxes[0, 3]))
        fps = [fixed_point_history(s, alpha0, nu0, y, SWEEPS) for s in starts]
        for row, (lo, hi, root, name) in enumerate(((0, 1, float(root_a), "alpha"), (2, 3, float(root_n), "nu"))):
            ax = axs[row, j]
            ax.plot(it, boxes[:, lo], "g-", lw=1.5, label="refined bounds")
            ax.plot(it, boxes[:, hi], "g-", lw=1.5)
            ax.plot(it, fps[0][:, row], "r.-", lw=0.8, label="Ftilde iteration (start: lower corner)")
            ax.plot(it, fps[1][:, row], "b.-", lw=0.8, label="Ftilde iteration (start: upper corner)")
            ax.axhline(root, color="k", ls=":", lw=1, label="root")
            ax.set_ylabel(name)
            ax.set_xlabel("iteration")
            if row == 0:
                ax.set_title(f"nu0 = {nu0:g}", fontsize=9)
        width = [(boxes[-1, 1] - boxes[-1, 0]) / (boxes[0, 1] - boxes[0, 0]),
                 (boxes[-1, 3] - boxes[-1, 2]) / (boxes[0, 3] - boxes[0, 2])]
        # Oscillation of the fixed-point iteration: spread of its last 10 alpha iterates.
        spread = max(float(np.ptp(fp[-10:, 0])) for fp in fps)
        tag = f"nu0_{nu0:g}"
        summary[f"fig13_{tag}_alpha_width_ratio"] = width[0]
        summary[f"fig13_{tag}_nu_width_ratio"] = width[1]
        summary[f"fig13_{tag}_ftilde_alpha_spread_last10"] = spread
        for k in it:
            rows.append([nu0, k, *boxes[k], fps[0][k, 0], fps[0][k, 1], fps[1][k, 0], fps[1][k, 1]])
    axs[0, 0].legend(fontsize=7)
    save_figure(fig, out / "rvga_fig13.png",
                f"R-VGA Fig. 13: refinement (129)-(136) vs Ftilde iteration, alpha0 = {alpha0:g}, y = {y:g}")
    write_csv(out / "rvga_fig13.csv", ["nu0", "iteration", "alpha_min", "alpha_max", "nu_min", "nu_max",
                                       "fp_lower_alpha", "fp_lower_nu", "fp_upper_alpha", "fp_upper_nu"], rows)
    return summary


def run(quick: bool, out: Path) -> dict:
    summary = fig12(out, 60 if quick else 200)
    summary.update(fig13(out))
    return summary


if __name__ == "__main__":
    cli(run, __doc__)
