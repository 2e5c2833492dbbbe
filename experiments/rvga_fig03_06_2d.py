"""R-VGA Figs 3-6: 2-D logistic regression, KL along the stream and final covariance ellipses.

Settings are the authors' code (``PaperResults.py``, ``XP_2D``): d = 2, N = 100, seed 10, c = 2,
``P_0 = sigma0^2 I``, ``mu_0 = mu0 1/sqrt(d)``:

* Fig. 3: sigma0 = 1,   mu0 = 0.1, s = 2
* Fig. 4: sigma0 = 10,  mu0 = 1,   s = 2
* Fig. 5: sigma0 = 100, mu0 = 10,  s = 2
* Fig. 6: sigma0 = 10,  mu0 = 0,   s = 5  (the paper's "ill-conditioned" case; c = 2 as in Figs 3-5)

Each figure: data and KL vs iteration (top), 1-sigma ellipses at t = N of R-VGA implicit,
explicit, EKF and QKF with the Laplace ellipse (red) over the true posterior's contours (bottom).

The helpers shared by every ``rvga_*`` script (:func:`~experiments.common_rvga.compare`,
:func:`~experiments.common_rvga.plot_kl`, :func:`~experiments.common_rvga.plot_ellipses`, ...) are in
:mod:`experiments.common_rvga`. The MC-KL ([RVGA] eqs. 92-94, ``Z_p = 1``) of the
belief after t observations is evaluated against the *final* posterior at every t, with
M = 300 base normals drawn once with the data seed (common random numbers), as the authors' code.
"""
from __future__ import annotations

from pathlib import Path

from experiments.common import cli
from experiments.common_rvga import run_2d_figures

# (figure, s, c, seed, sigma0, mu0): d = 2, N = 100 (XP_2D calls of PaperResults.py)
CONFIGS = ((3, 2.0, 2, 10, 1.0, 0.1), (4, 2.0, 2, 10, 10.0, 1.0), (5, 2.0, 2, 10, 100.0, 10.0),
           (6, 5.0, 2, 10, 10.0, 0.0))


def run(quick: bool, out: Path) -> dict:
    return run_2d_figures(CONFIGS, out, quick, "rvga_fig03_06_final.csv")


if __name__ == "__main__":
    cli(run, __doc__)
