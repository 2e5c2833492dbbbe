"""R-VGA Figs 7-8: sensitivity to the dimension d, sharp prior (Fig. 7) and flat prior (Fig. 8).

Authors' code (``PaperResults.py``, tests HD1 and HD2): d in {30, 70, 100}, N = 500, s = 2, c = 0
("isotropic"), seed 10, ``mu_0 = 0``; sigma0 = 1 (Fig. 7) and sigma0 = 30 (Fig. 8). KL vs
iteration of R-VGA implicit / explicit, EKF, QKF, with batch Laplace as a horizontal line.

``quick``: d in {10, 20, 30}, N = 200 (the claims of Fig. 8 with d >= 30 still apply at d = 30), the
KL curves at every 10th t (the final MC-KLs are the same).
"""
from __future__ import annotations

from pathlib import Path

from experiments.common import cli
from experiments.common_rvga import compare, figure_hd, final_row, summary_of, write_curves, write_final_hd

# (figure, sigma0, title)
CONFIGS = ((7, 1.0, "sharp prior"), (8, 30.0, "flat prior"))
FULL = dict(dims=(30, 70, 100), N=500)
QUICK = dict(dims=(10, 20, 30), N=200, kl_stride=10)


def run(quick: bool, out: Path) -> dict:
    size = QUICK if quick else FULL
    s, c, seed, mu0, N = 2.0, 0, 10, 0.0, size["N"]
    summary, rows = {}, []
    for fig, sigma0, kind in CONFIGS:
        results = []
        for d in size["dims"]:
            res = compare(s, N, d, c, seed, sigma0, mu0, quick=quick, desc=f"Fig {fig} d={d}",
                          kl_stride=size.get("kl_stride", 1))
            results.append(res)
            write_curves(out / f"rvga_fig{fig:02d}_d{d}_kl.csv", res)
            rows.append([fig, sigma0, d, N, s, c, seed] + final_row(res))
            summary.update(summary_of(f"fig{fig}_d{d}", res, None))
        figure_hd(results, [f"d = {d}" for d in size["dims"]], out / f"rvga_fig{fig:02d}.png",
                  f"R-VGA Fig. {fig}: {kind}, sigma0 = {sigma0:g}, mu0 = 0, N = {N}, s = {s:g}, c = {c}, "
                  f"seed = {seed}")
    write_final_hd(out / "rvga_fig07_08_final.csv", rows)
    return summary


if __name__ == "__main__":
    cli(run, __doc__)
