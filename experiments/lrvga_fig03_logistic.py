"""L-RVGA Fig. 3: logistic regression with the implicit L-RVGA, sensitivity to p ([LRVGA] §5.3).

Authors' code (``XP_LRVGA_LogisticRegression.py``, ``Test=["LogHD"]``): two Gaussian classes
(:func:`jaxrvga.baselines.data.logistic_data`) at separation ``s = 1/d^coef_s``, c = 1, seed 1; prior
``N(0, sigma0^2 I)`` with sigma0 = 4 (the caption's "P_0 = sigma0 I" is sigma0^2 I in the code);
implicit L-RVGA (D2, :func:`jaxrvga.lrvga` with ``scheme="implicit"``) with 1 inner loop,
``psi_0 = 1/sigma0^2`` and ``W_0 = 1e-3 mvn(0, I_p, d)`` (seed 1) for p in {100, 10, 2, 1}; batch
Laplace (Newton, :func:`jaxrvga.laplace`) as a horizontal line. Metric: the MC-KL of [RVGA] eqs.
92-94 to the unnormalised final posterior (``Z_p = 1``) with M = 5 base normals drawn once with
seed 1 (the authors' ``nbSamplesKL = 5``), dense Cholesky sampling of the FA covariance
(:func:`jaxrvga.baselines.metrics.mc_kl_logistic_fa`). Because M = 5 is very noisy, the final values are also
estimated with M = 1000 fresh normals (seed 1234), with paired standard errors against Laplace.

Panels: the code defaults (d = 200, N = 1000, coef_s = 0.2) and, in full mode, the sizes the code
comment gives for the paper's figure (d = 1000, N = 10000, coef_s = 0.26).
``quick``: d = 100, N = 500, coef_s = 0.2.

The left column is the authors' ``plotOutputs``: the histogram of ``sig(x_i^T theta_opt/||theta_opt||)``.
This module also holds the helpers of the logistic L-RVGA figures (:func:`lrvga_kl_curve`, ...).
"""
from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np

from experiments.common import (ITERATIONS, MODEL, cli, label_axes, paired, progress, pyplot, save_figure,
                                write_columns, write_csv)
from experiments.common_lrvga import M_BIG, M_KL, Problem, authors_w0, cosine, lrvga_kl_curve

from jaxrvga import lrvga  # noqa: E402


def plot_outputs(ax, prob: Problem):
    """The authors' ``plotOutputs``: histogram of ``sig(x_i^T theta_opt / ||theta_opt||)``."""
    u = prob.ds.theta_opt / np.linalg.norm(prob.ds.theta_opt)
    ax.hist(1 / (1 + np.exp(-prob.ds.X @ u)), bins=50)
    ax.set_xlabel("sig(x_i^T theta_opt / ||theta_opt||)", fontsize=8)
    ax.set_title(f"outputs, d = {prob.d}, N = {prob.N}, s = {prob.s:.3f}", fontsize=9)


# --------------------------------------------------------------------------- Fig. 3

def run_config(d, N, coef_s, ps, quick, sigma0=4.0):
    prob = Problem(d, N, coef_s, sigma0)
    psi0 = jnp.full(d, 1.0 / sigma0**2)
    curves, finals = {}, {}
    for p in progress(ps, f"Fig 3 d={d}", quick):
        flt = lrvga(MODEL, rank=p, inner_loops=1, scheme="implicit", published=True)
        state0 = flt.init(prob.m0, jnp.asarray(authors_w0(d, p, 1e-3)), psi0)
        t, kl, final, terms = lrvga_kl_curve(prob, flt, state0)
        curves[p] = (t, kl)
        finals[p] = dict(mc5=float(kl[-1]), big=paired(terms), diff=paired(terms, prob.terms_laplace),
                         cos_map=cosine(final.mean, prob.lap_mean),
                         rel_map=float(jnp.linalg.norm(final.mean - prob.lap_mean)
                                       / jnp.linalg.norm(prob.lap_mean)),
                         solver_ok=bool(final.info.converged))
    return prob, curves, finals


def run(quick: bool, out: Path) -> dict:
    configs = [(100, 500, 0.2)] if quick else [(200, 1000, 0.2), (1000, 10000, 0.26)]
    ps = (100, 10, 2, 1) if not quick else (50, 10, 2, 1)
    plt = pyplot()
    fig, axs = plt.subplots(len(configs), 2, figsize=(11, 4.2 * len(configs)), squeeze=False,
                            gridspec_kw=dict(width_ratios=(1, 2)))
    summary, rows = {}, []
    for row, (d, N, coef_s) in enumerate(configs):
        prob, curves, finals = run_config(d, N, coef_s, ps, quick)
        plot_outputs(axs[row, 0], prob)
        ax = axs[row, 1]
        cmap = plt.get_cmap("viridis")
        for j, (p, (t, kl)) in enumerate(curves.items()):
            ax.semilogy(t, kl, color=cmap(j / max(len(curves) - 1, 1)), lw=1.3, label=f"L-RVGA p = {p}")
        ax.axhline(prob.kl_laplace, color="r", lw=1.3, label="Laplace (batch)")
        label_axes(ax, f"implicit L-RVGA, 1 inner loop: d = {d}, N = {N}, sigma0 = {prob.sigma0:g}, "
                   f"coef_s = {coef_s}", ITERATIONS, f"MC-KL (M = {M_KL}, Z_p = 1)")
        ax.legend(fontsize=7, ncol=2)
        tag = f"d{d}_N{N}"
        kls = {f"kl_p{p}": kl for p, (_, kl) in curves.items()}
        write_columns(out / f"lrvga_fig03_{tag}.csv",
                      {"t": curves[ps[0]][0], **kls, "kl_laplace": prob.kl_laplace})
        lap_big = paired(prob.terms_laplace)
        summary[f"{tag}_laplace_mc5"] = prob.kl_laplace
        summary[f"{tag}_laplace_mc{M_BIG}"] = lap_big[0]
        rows.append([tag, "Laplace", prob.kl_laplace, *lap_big, "", "", 1.0, 0.0])
        for p, f in finals.items():
            summary[f"{tag}_p{p}_mc5"] = f["mc5"]
            summary[f"{tag}_p{p}_mc{M_BIG}"] = f["big"][0]
            summary[f"{tag}_p{p}_minus_laplace"] = f["diff"][0]
            summary[f"{tag}_p{p}_minus_laplace_stderr"] = f["diff"][1]
            summary[f"{tag}_p{p}_cos_to_map"] = f["cos_map"]
            rows.append([tag, f"p={p}", f["mc5"], *f["big"], *f["diff"], f["cos_map"], f["rel_map"]])
    write_csv(out / "lrvga_fig03_final.csv",
              ["config", "method", "mckl_M5", f"mckl_M{M_BIG}", "stderr", "minus_laplace",
               "minus_laplace_stderr", "cos_to_map", "rel_dist_to_map"], rows)
    save_figure(fig, out / "lrvga_fig03.png",
                "L-RVGA Fig. 3: logistic regression, sensitivity to the latent dimension p")
    return summary


if __name__ == "__main__":
    cli(run, __doc__)
