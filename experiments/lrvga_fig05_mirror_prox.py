"""L-RVGA Fig. 5 (Appendix G): mirror prox / iterated R-VGA on 2-D logistic regression, plus the
code-only ``MirrorProxHighDim`` experiment.

2-D (authors' ``Test=["MirrorProx"]``): N = 10, d = 2, sigma0 = 10, s = 6, c = 1, seed 1, mu0 = 0,
full covariance. Columns: natural gradient (EKF, [RVGA] eq. 81), R-VGA explicit (eqs. 139-140),
R-VGA implicit (53-54) and mirror prox (139-142, :func:`jaxrvga.mirror_prox`, the authors'
``updateCovTwoTimes=True``, without the natural-parameter correction term, [LRVGA] App. G eq. 142). Each
panel: the 1-sigma ellipse at t = N, the Laplace ellipse (red) and the true posterior contours.
KL: MC-KL ([RVGA] eqs. 92-94) with 20000 normals plus ``log Z_p`` by quadrature, i.e. the true
``KL(q || p)``; also the distance of the mean to the MAP. Extra rows: mirror prox skipping the
second covariance update (eqs. 143-145) and with the correction term (exact mirror prox).

High-dimensional extra (``MirrorProxHighDim``, not in the paper): d = 100, N = 1000, seed 2,
``s = 1/d^0.15``, sigma0 in {1, 3, 10}, full covariance started at ``(W_0 W_0^T + Psi_0)^{-1}``
with ``W_0 = 1e-2 mvn(0, I_10, d)`` (seed 2), ``psi_0 = 1/sigma0^2``; explicit, implicit and mirror
prox; MC-KL with M = 5 (seed 2) along the stream and M = 1000 at t = N, and distance to the MAP.
``quick``: d = 50, N = 300 for the extra.
"""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from experiments.common import (ITERATIONS, MODEL, cli, label_axes, paired, progress, pyplot, save_figure,
                                write_csv)
from experiments.common_lrvga import M_BIG, Problem, authors_w0, lrvga_kl_curve
from experiments.common_rvga import RVGA_FILTERS, compare, ellipse, log_evidence_2d, posterior_grid

import jaxrvga as jr  # noqa: E402
from jaxrvga.baselines import metrics  # noqa: E402

M_2D = 20000
FLT_2D = {"EKF": jr.ekf(MODEL), "explicit": jr.rvga(MODEL, "explicit"),
          "implicit": jr.rvga(MODEL, "implicit"), "mirror prox": jr.mirror_prox(MODEL),
          "mirror prox, skip 2nd cov (143-145)": jr.mirror_prox(MODEL, update_cov_twice=False),
          "mirror prox, corrected": jr.mirror_prox(MODEL, correction=True)}
PANELS = ("EKF", "explicit", "implicit", "mirror prox")
TITLES = {"EKF": "natural gradient (EKF)", "explicit": "R-VGA explicit (139-140)",
          "implicit": "R-VGA implicit (53-54)", "mirror prox": "mirror prox (139-142)"}


@jax.jit
def _terms(mean, cov, z, X, y, m0, P0):
    L = jnp.linalg.cholesky(cov)
    lp = jax.vmap(lambda th: metrics.logistic_log_posterior(th, X, y, m0, P0))(mean + z @ L.T)
    return -lp - metrics.gaussian_entropy(2.0 * jnp.sum(jnp.log(jnp.diagonal(L))), mean.shape[0])


def run_2d(out: Path, summary: dict):
    res = compare(6.0, 10, 2, 1, 1, 10.0, 0.0, keep=True)
    log_z = log_evidence_2d(res)
    X, y = jnp.asarray(res.ds.X), jnp.asarray(res.ds.y)
    m0, P0 = jnp.asarray(res.m0), jnp.asarray(res.P0)
    z = jax.random.normal(jax.random.PRNGKey(0), (M_2D, 2))
    finals, rows = {}, []
    for name, flt in FLT_2D.items():
        if flt == RVGA_FILTERS.get(name):  # EKF, explicit, implicit: compare() ran it from this prior
            st = res.finals[name]
        else:
            st, _ = jr.run(flt, flt.init(m0, P0), X, y)
        finals[name] = (np.asarray(st.mean), np.asarray(st.cov))
    finals["Laplace"] = (res.lap_mean, res.lap_cov)
    for name, (mean, cov) in finals.items():
        t = np.asarray(_terms(jnp.asarray(mean), jnp.asarray(cov), z, X, y, m0, P0))
        kl = float(np.mean(t)) + log_z
        se = float(np.std(t, ddof=1) / np.sqrt(M_2D))
        dist = float(np.linalg.norm(mean - res.lap_mean))
        rows.append([name, kl, se, dist, *mean, cov[0, 0], cov[0, 1], cov[1, 1]])
        key = name.split(",")[0].replace(" ", "_") + ("_skipcov" if "skip" in name else
                                                        "_corrected" if "corrected" in name else "")
        summary[f"2d_kl_{key}"] = kl
        summary[f"2d_dist_map_{key}"] = dist
    summary["2d_log_Z"] = log_z
    write_csv(out / "lrvga_fig05_2d.csv", ["method", "kl", "kl_stderr", "dist_to_map", "mean_1", "mean_2",
                                           "cov_11", "cov_12", "cov_22"], rows)
    plt = pyplot()
    fig, axs = plt.subplots(1, 4, figsize=(15, 4.2))
    T1, T2, pdf = posterior_grid(res, n=80, width=4.5)
    for ax, name in zip(axs, PANELS):
        ax.contour(T1, T2, pdf, pdf.max() * np.arange(1, 7) / 7, colors="g", linewidths=0.8)
        ellipse(ax, *finals[name], "r", "-", 1.6, label="1-sigma ellipse, t = N")
        ellipse(ax, res.lap_mean, res.lap_cov, "k", "--", 1.2, label="Laplace")
        ax.plot(*res.lap_mean, "k+", ms=10)
        kl = summary[f"2d_kl_{name.replace(' ', '_')}"]
        ax.set_title(f"{TITLES[name]}\nKL = {kl:.3f}", fontsize=9)
        ax.set_xlim(T1.min(), T1.max())
        ax.set_ylim(T2.min(), T2.max())
    axs[0].legend(fontsize=7)
    save_figure(fig, out / "lrvga_fig05.png",
                "L-RVGA Fig. 5: 2-D logistic posterior (green contours), N = 10, sigma0 = 10, s = 6, c = 1, "
                "seed 1; red: 1-sigma ellipse at t = N, dashed: Laplace, +: MAP")


def run_highdim(out: Path, summary: dict, quick: bool):
    d, N = (50, 300) if quick else (100, 1000)
    sigmas = (1.0, 3.0, 10.0)
    flts = {"explicit": jr.rvga(MODEL, "explicit"), "implicit": jr.rvga(MODEL, "implicit"),
            "mirror prox": jr.mirror_prox(MODEL)}
    plt = pyplot()
    fig, axs = plt.subplots(2, len(sigmas), figsize=(5 * len(sigmas), 7.5))
    rows = []
    for j, sigma0 in enumerate(sigmas):
        prob = Problem(d, N, 0.15, sigma0, seed=2)
        W0 = authors_w0(d, 10, 1e-2, seed=2)
        P_init = jnp.asarray(np.linalg.inv(W0 @ W0.T + np.eye(d) / sigma0**2))
        for name, flt in progress(flts.items(), f"MirrorProxHighDim sigma0={sigma0:g}", quick):
            t, kl, final, terms = lrvga_kl_curve(prob, flt, flt.init(prob.m0, P_init), full=True)
            dist = jr.run(flt, flt.init(prob.m0, P_init), prob.X, prob.y, jr.trace_mean)[1]
            dist = np.linalg.norm(np.asarray(dist) - np.asarray(prob.lap_mean), axis=1)
            axs[0, j].semilogy(t, kl, label=name if j == 0 else None)
            axs[1, j].plot(np.arange(1, N + 1), dist, label=None)
            big, diff = paired(terms), paired(terms, prob.terms_laplace)
            key = f"hd_sigma{sigma0:g}_{name.replace(' ', '_')}"
            summary[f"{key}_mc{M_BIG}"] = big[0]
            summary[f"{key}_minus_laplace"] = diff[0]
            summary[f"{key}_dist_map"] = float(dist[-1])
            rows.append([sigma0, name, float(kl[-1]), *big, *diff, float(dist[-1])])
        axs[0, j].axhline(prob.kl_laplace, color="r", label="Laplace" if j == 0 else None)
        rows.append([sigma0, "Laplace", prob.kl_laplace, *paired(prob.terms_laplace), 0.0, 0.0, 0.0])
        summary[f"hd_sigma{sigma0:g}_laplace_mc{M_BIG}"] = paired(prob.terms_laplace)[0]
        label_axes(axs[0, j], f"sigma0 = {sigma0:g}: MC-KL (M = 5)", ITERATIONS)
        label_axes(axs[1, j], "distance of the mean to the MAP", ITERATIONS)
        axs[1, j].set_yscale("log")
    write_csv(out / "lrvga_fig05_highdim.csv",
              ["sigma0", "method", "mckl_M5", f"mckl_M{M_BIG}", "stderr", "minus_laplace",
               "minus_laplace_stderr", "dist_to_map"], rows)
    fig.legend(loc="lower center", ncol=4, fontsize=8)
    save_figure(fig, out / "lrvga_fig05_highdim.png",
                f"L-RVGA code extra MirrorProxHighDim (not in the paper): full covariance, "
                f"d = {d}, N = {N}, seed 2, s = 1/d^0.15", rect=(0, 0.05, 1, 1))


def run(quick: bool, out: Path) -> dict:
    summary: dict = {}
    run_2d(out, summary)
    run_highdim(out, summary, quick)
    return summary


if __name__ == "__main__":
    cli(run, __doc__)
