"""R-VGA Figs 14-16 (Appendix 9.6): 2-D sensitivity to the separation s, ellipses along the stream.

Authors' code (``PaperResults.py``, test LD3: ``XP_2D(10, 0, 100, s, 1, 1, nbLevels=4)``):
d = 2, N = 100, **c = 1, seed = 1** (not the c = 2, seed = 10 of Figs 3-6), sigma0 = 10, mu0 = 0,
s = 2 (Fig. 14), 5 (Fig. 15), 10 (Fig. 16). Ellipses at t = N/4, N/2, 3N/4 (faint) and t = N
(black), with the Laplace ellipse (red) over 6 contour levels of the true posterior.
The paper's size already runs in seconds, so ``quick`` runs it too.
"""
from __future__ import annotations

from pathlib import Path

from experiments.common import cli
from experiments.common_rvga import run_2d_figures

# (figure, s, c, seed, sigma0, mu0)
CONFIGS = ((14, 2.0, 1, 1, 10.0, 0.0), (15, 5.0, 1, 1, 10.0, 0.0), (16, 10.0, 1, 1, 10.0, 0.0))


def run(quick: bool, out: Path) -> dict:
    return run_2d_figures(CONFIGS, out, quick, "rvga_fig14_16_final.csv", times=[25, 50, 75])


if __name__ == "__main__":
    cli(run, __doc__)
