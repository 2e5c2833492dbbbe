"""L-RVGA Fig. 4: the general nonlinear (sampled) L-RVGA, sensitivity to the number of samples K.

[LRVGA] §5.4.

Authors' code (``XP_LRVGA_LogisticRegression.py``, ``Test=["Sampling"]``): logistic data with
d = 1000, N = 1000, c = 1, seed 1, ``s = 1/d^0.15``; prior ``N(0, sigma0^2 I)``, sigma0 in {1, 2, 3};
p = 10, 1 inner loop, ``psi_0 = 1/sigma0^2``, ``W_0 = 1e-2 mvn(0, I_p, d)`` (seed 1). Methods, all
extragradient without the extra covariance update ([LRVGA] eqs. 143-145):

* "baseline": exact inverse-probit moments (D3, ``scheme="extragrad"``);
* "K samples": ensemble sampling from the corrected Proposition 1 with GGN curvature (D4,
  ``scheme="sampled"``), K in {1, 10, 100}, with the authors' *frozen* base noise: ``(z, e)`` drawn
  once by ``np.random.seed(1); z = mvn(0, I_d, K); e = mvn(0, I_p, K)`` and reused at every step and
  for both extragradient evaluations;
* extra line (not in the paper): K = 10 with fresh noise at every step (JAX key 0);
* batch Laplace (horizontal line).

Metric: MC-KL with M = 4 base normals (seed 1), as the authors; final values also with M = 1000
(seed 1234) and paired standard errors. ``quick``: d = 100, N = 300.
"""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from experiments.common import (ITERATIONS, MODEL, cli, label_axes, paired, progress, pyplot, save_figure,
                                write_columns, write_csv)
from experiments.common_lrvga import M_BIG, Problem, authors_w0, lrvga_kl_curve

from jaxrvga import lrvga  # noqa: E402

KS = (1, 10, 100)
P_RANK = 10
M_KL4 = 4


def frozen_draws(d, p, K, seed=1):
    """The authors' frozen base noise ``np.random.seed(seed); mvn(0, I_d, K); mvn(0, I_p, K)``."""
    rs = np.random.RandomState(seed)
    z = rs.multivariate_normal(np.zeros(d), np.identity(d), size=(K,))
    e = rs.multivariate_normal(np.zeros(p), np.identity(p), size=(K,))
    return jnp.asarray(z), jnp.asarray(e)


def methods(d, p):
    out = [("baseline", lrvga(MODEL, rank=p, scheme="extragrad", published=True), False)]
    out += [(f"K={K}", lrvga(MODEL, rank=p, scheme="sampled", frozen_draws=frozen_draws(d, p, K), published=True), False)
            for K in KS]
    out += [("K=10 fresh", lrvga(MODEL, rank=p, scheme="sampled", num_samples=10, published=True), True)]
    return out


COLORS = {"baseline": "k", "K=1": "r", "K=10": "b", "K=100": "g", "K=10 fresh": "c"}


def run(quick: bool, out: Path) -> dict:
    d, N = (100, 300) if quick else (1000, 1000)
    sigmas = (1.0, 2.0, 3.0)
    plt = pyplot()
    fig, axs = plt.subplots(1, len(sigmas), figsize=(5 * len(sigmas), 4.3))
    summary, rows = {}, []
    flts = methods(d, P_RANK)
    for ax, sigma0 in zip(axs, sigmas):
        prob = Problem(d, N, 0.15, sigma0, m_kl=M_KL4)
        W0 = jnp.asarray(authors_w0(d, P_RANK, 1e-2))
        psi0 = jnp.full(d, 1.0 / sigma0**2)
        curves = {}
        for name, flt, fresh in progress(flts, f"Fig 4 sigma0={sigma0:g}", quick):
            state0 = flt.init(prob.m0, W0, psi0, key=jax.random.PRNGKey(0) if fresh else None)
            t, kl, final, terms = lrvga_kl_curve(prob, flt, state0)
            curves[name] = (t, kl)
            big, diff = paired(terms), paired(terms, prob.terms_laplace)
            tag = f"sigma{sigma0:g}_{name.replace('=', '').replace(' ', '_')}"
            summary[f"{tag}_mc4"] = float(kl[-1])
            summary[f"{tag}_mc{M_BIG}"] = big[0]
            summary[f"{tag}_minus_laplace"] = diff[0]
            summary[f"{tag}_minus_laplace_stderr"] = diff[1]
            rows.append([sigma0, name, float(kl[-1]), *big, *diff])
            ls = "--" if fresh else "-"
            ax.semilogy(t, kl, ls, color=COLORS[name], lw=1.3, label=name if sigma0 == sigmas[0] else None)
        ax.axhline(prob.kl_laplace, color="orange", lw=1.3, label="Laplace" if sigma0 == sigmas[0] else None)
        lap_big = paired(prob.terms_laplace)
        summary[f"sigma{sigma0:g}_laplace_mc4"] = prob.kl_laplace
        summary[f"sigma{sigma0:g}_laplace_mc{M_BIG}"] = lap_big[0]
        rows.append([sigma0, "Laplace", prob.kl_laplace, *lap_big, 0.0, 0.0])
        kls = {name: kl for name, (_, kl) in curves.items()}
        write_columns(out / f"lrvga_fig04_sigma{sigma0:g}.csv",
                      {"t": curves["baseline"][0], **kls, "laplace": prob.kl_laplace})
        label_axes(ax, f"sigma0 = {sigma0:g}", ITERATIONS, f"MC-KL (M = {M_KL4}, Z_p = 1)")
    write_csv(out / "lrvga_fig04_final.csv",
              ["sigma0", "method", "mckl_M4", f"mckl_M{M_BIG}", "stderr", "minus_laplace",
               "minus_laplace_stderr"], rows)
    fig.legend(loc="lower center", ncol=6, fontsize=8)
    save_figure(fig, out / "lrvga_fig04.png",
                f"L-RVGA Fig. 4: sampled L-RVGA (extragradient, no extra covariance update), "
                f"d = {d}, N = {N}, p = {P_RANK}, c = 1, s = 1/d^0.15, frozen noise", rect=(0, 0.06, 1, 1))
    return summary


if __name__ == "__main__":
    cli(run, __doc__)
