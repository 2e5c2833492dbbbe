"""R-VGA Fig. 11: predictive probability maps ``p(y = 1 | x)`` ([RVGA] eqs. 62-63, App. 9.4).

Authors' code (``TestKalmanMachine.py``): d = 2, **N = 100** (the caption says N = 300;
experiments/REPORT.md), s = 5, c = 2, seed 10, sigma0 = 10, mu0 = 0. Maps on the authors' grid
``[-3, 3]^2`` (100 x 100; 40 x 40 in quick mode) for R-VGA implicit, explicit, EKF, QKF and batch
Laplace, all with the inverse-probit predictive ``sig(k(x^T P x) x^T mu)``.

Claim: Laplace predicts low probabilities (close to 1/2) for unseen inputs, QKF high ones, R-VGA
in between. Measured by the mean confidence ``|p - 1/2|`` over the grid. The caption's N = 300 is
run too (numbers only, not in quick mode).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments.common import cli, pyplot, save_figure, write_csv
from experiments.common_rvga import LABELS, METHODS, compare

import jaxrvga as jr  # noqa: E402

ALL = METHODS + ("Laplace",)


def maps(res, n):
    g = np.linspace(-3, 3, n)
    G1, G2 = np.meshgrid(g, g)
    pts = np.stack([G1.ravel(), G2.ravel()], axis=1)
    return G1, G2, {m: np.asarray(jr.predictive(res.finals[m], pts)[0]).reshape(G1.shape) for m in ALL}


def run(quick: bool, out: Path) -> dict:
    s, d, c, seed, sigma0, mu0 = 5.0, 2, 2, 10, 10.0, 0.0
    n = 40 if quick else 100
    summary, rows = {}, []
    for N in (100,) if quick else (100, 300):
        res = compare(s, N, d, c, seed, sigma0, mu0, quick=quick, desc=f"Fig 11 N={N}")
        G1, G2, P = maps(res, n)
        conf = {m: float(np.mean(np.abs(P[m] - 0.5))) for m in ALL}
        rows.append([N] + [conf[m] for m in ALL])
        tag = "" if N == 100 else f"_N{N}"
        for m in ALL:
            summary[f"fig11{tag}_confidence_{m}"] = conf[m]
        if N != 100:
            continue
        plt = pyplot()
        fig, axs = plt.subplots(1, 5, figsize=(19, 4.2))
        for ax, m in zip(axs, ALL):
            cs = ax.contourf(G1, G2, P[m], levels=np.linspace(0, 1, 21), cmap="jet")
            for lab, col in ((0, "w"), (1, "k")):
                sel = res.ds.y == lab
                ax.scatter(res.ds.X[sel, 0], res.ds.X[sel, 1], s=5, color=col, edgecolors="none")
            ax.set_xlim(-3, 3)
            ax.set_ylim(-3, 3)
            ax.set_aspect("equal")
            ax.set_title(f"{LABELS[m]}\nmean |p - 1/2| = {conf[m]:.3f}", fontsize=9)
        fig.colorbar(cs, ax=axs, shrink=0.8, label="p(y = 1 | x)")
        save_figure(fig, out / "rvga_fig11.png",
                    f"R-VGA Fig. 11: predictive maps, s = {s:g}, c = {c}, N = {N} (code; caption 300), "
                    f"sigma0 = {sigma0:g}, mu0 = 0, seed = {seed} (white: y = 0, black: y = 1)", tight=False)
        sub = (slice(None, None, 2), slice(None, None, 2))  # every other grid point keeps the CSV small
        write_csv(out / "rvga_fig11_maps.csv", ["x1", "x2"] + [f"p_{m}" for m in ALL],
                  zip(G1[sub].ravel(), G2[sub].ravel(), *(P[m][sub].ravel() for m in ALL)))
    write_csv(out / "rvga_fig11_confidence.csv", ["N"] + [f"mean_abs_p_minus_half_{m}" for m in ALL], rows)
    return summary


if __name__ == "__main__":
    cli(run, __doc__)
