"""L-RVGA Fig. 2: Bayesian linear regression, sensitivity to the latent dimension p ([LRVGA] §5.2).

Model (48)-(49): ``x_t ~ N(0, C)``, ``C = M^T diag(1/i^c) M`` (c = 1, rotated, "normalised on
average", :func:`jaxrvga.baselines.data.linear_data`, seed 1), ``y_t = x_t^T theta* + N(0, 1)``; prior
``N(0, sigma0^2 I)`` with sigma0 = 1. Algorithms: the full Kalman filter (:func:`jaxrvga.kalman`) and
the linear L-RVGA (D1, :func:`jaxrvga.lrvga` with the exact scheme, 3 inner loops). Metric: the
exact KL from the belief at time t to the *final* full-data posterior (the authors' protocol):

    KL(N(mu, (W W^T + Psi)^{-1}) || N(m*, Lam*^{-1})) = fa_kl(Lam*, W, psi) + 1/2 (mu - m*)^T Lam* (mu - m*)

(:func:`jaxrvga.baselines.metrics.fa_kl` with ``S = Lam*``, O(d^2 p), no d x d inverse).

Panels (authors' ``XP_LRVGA_LinearRegression.py``; the paper gives neither sizes nor init for its figure):

* "paper text" d = 1000, N = 3000 ("to find exactly the paper result"), p in {100, 10, 2, 1}, App. D init;
* "HEAD" d = 100, N = 10000, p in {50, 20, 10, 1}, App. D init (eps = 1e-8), the current script;
* "shipped PNG" d = 100, N = 1000, p in {100, 10, 2, 1}, Dec-2021 init (``psi_0 = 1/sigma0^2``,
  ``W_0 = 1e-2 N(0, 1)``), the setting of ``outputs/LRVGA_LinReg_KL_1000_100_3.png``;
* ``check9`` (the CSV rows so named): p = d with n_in in {1, 3, 10, 100} inner loops against the KF
  (d = 50, N = 500 in full; d = 20, N = 200 quick), App. D init. With finite
  inner loops the FA projection is not exact: "p = d matches the KF" ([LRVGA] §5.2) holds only
  as n_in -> infinity.

``quick``: the shipped-PNG panel at d = 50, N = 500 (p in {50, 10, 2, 1}) and ``check9`` at d = 20.
"""
from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np

from experiments.common import (ITERATIONS, cli, label_axes, progress, pyplot, run_snapshots,
                                save_figure, write_columns, write_csv)
from experiments.common_lrvga import (KALMAN, LINEAR_MODEL, init_factors, linear_kl_fa, linear_kl_full,
                                      linear_posterior, precision_kl)
from experiments.common_lrvga import LINEAR_SEED as SEED
from experiments.common_lrvga import LINEAR_SIGMA0 as SIGMA0

from jaxrvga import lrvga
from jaxrvga.baselines import data  # noqa: E402

C = 1.0


def run_panel(d, N, ps, init, loops_list=(3,), quick=True, desc=""):
    """KF and L-RVGA runs on one data set: ``{label: (t, kl)}`` plus the check-9 precision KLs."""
    ds = data.linear_data(1.0, N, d, C, seed=SEED)
    X, y = jnp.asarray(ds.X), jnp.asarray(ds.y)
    lam, m_star = linear_posterior(ds.X, ds.y)
    lam_j, m_j = jnp.asarray(lam), jnp.asarray(m_star)
    logdet_lam = float(np.linalg.slogdet(lam)[1])
    stride = max(1, N // 300)
    curves, prec = {}, {}
    state0 = KALMAN.init(jnp.zeros(d), SIGMA0**2 * jnp.eye(d))
    _, kl, t = run_snapshots(KALMAN, state0, X, y, stride, linear_kl_full, lam_j, logdet_lam, m_j)
    t = np.concatenate([[0], t])
    kl0 = float(linear_kl_full(state0, lam_j, logdet_lam, m_j))
    curves["KF"] = (t, np.concatenate([[kl0], np.asarray(kl)]))
    configs = [(p, n) for p in ps for n in loops_list]
    for p, n_in in progress(configs, desc, quick):
        W0, psi0 = map(jnp.asarray, init_factors(d, p, init))
        flt = lrvga(LINEAR_MODEL, rank=p, inner_loops=n_in, published=True)
        state0 = flt.init(jnp.zeros(d), W0, psi0)
        final, kl, _ = run_snapshots(flt, state0, X, y, stride, linear_kl_fa, lam_j, logdet_lam, m_j)
        kl0 = float(linear_kl_fa(state0, lam_j, logdet_lam, m_j))
        curves[(p, n_in)] = (t, np.concatenate([[kl0], np.asarray(kl)]))
        if p == d:  # the p = d panel: the KF started from the same initial precision
            lam_kf = W0 @ W0.T + jnp.diag(psi0) + X.T @ X
            prec[n_in] = float(precision_kl(final, lam_kf))
    return dict(d=d, N=N, init=init, curves=curves, prec=prec)


def write_curves(path, res):
    """The KL curves of :func:`run_panel` (columns ``t``, ``KF`` and one per ``(p, inner loops)``)."""
    write_columns(path, {"t": res["curves"]["KF"][0], **{str(k): kl for k, (_, kl) in res["curves"].items()}})


def plot_panel(ax, res, title, key_label):
    t, kl = res["curves"]["KF"]
    ax.semilogy(t, np.maximum(kl, 1e-300), "k-", lw=2,
                label=f"Kalman filter (full), KL(t = N) = {kl[-1]:.1e}")
    cmap = pyplot().get_cmap("viridis")
    keys = [k for k in res["curves"] if k != "KF"]
    for j, key in enumerate(keys):
        t, kl = res["curves"][key]
        ax.semilogy(t, kl, "-", color=cmap(j / max(len(keys) - 1, 1)), lw=1.3, label=key_label(key))
    lo = min(float(np.min(res["curves"][k][1])) for k in keys)
    hi = max(float(np.max(v[1])) for v in res["curves"].values())
    ax.set_ylim(lo / 30, hi * 2)  # the KF's drop to ~1e-14 at t = N leaves the axis (value in the legend)
    label_axes(ax, title, ITERATIONS, "KL to the final posterior")
    ax.legend(fontsize=7)


FULL = [("paper_text", 1000, 3000, (100, 10, 2, 1), "head"),
        ("head", 100, 10000, (50, 20, 10, 1), "head"),
        ("shipped_png", 100, 1000, (100, 10, 2, 1), "dec2021")]
QUICK = [("shipped_png", 50, 500, (50, 10, 2, 1), "dec2021")]
CHECK9_FULL, CHECK9_QUICK = (50, 500), (20, 200)
LOOPS = (1, 3, 10, 100)
TITLES = {"paper_text": "paper text size, App. D init", "head": "HEAD script defaults, App. D init",
          "shipped_png": "shipped PNG setting, Dec-2021 init"}


def run(quick: bool, out: Path) -> dict:
    panels = QUICK if quick else FULL
    results = [(name, run_panel(d, N, ps, init, quick=quick, desc=f"Fig 2 {name}"))
               for name, d, N, ps, init in panels]
    d9, N9 = CHECK9_QUICK if quick else CHECK9_FULL
    check9 = run_panel(d9, N9, (d9,), "head", LOOPS, quick, "Fig 2 check 9")
    plt = pyplot()
    n = len(results) + 1
    fig, axs = plt.subplots(1, n, figsize=(4.8 * n, 4.2))
    summary, rows = {}, []
    for ax, (name, res) in zip(axs, results):
        plot_panel(ax, res, f"{TITLES[name]}\nd = {res['d']}, N = {res['N']}, 3 inner loops",
                   lambda k: f"L-RVGA p = {k[0]}")
        summary[f"{name}_d{res['d']}_N{res['N']}_KF"] = float(res["curves"]["KF"][1][-1])
        for key, (t, kl) in res["curves"].items():
            if key != "KF":
                summary[f"{name}_d{res['d']}_N{res['N']}_p{key[0]}"] = float(kl[-1])
        write_curves(out / f"lrvga_fig02_{name}.csv", res)
        rows += [[name, res["d"], res["N"], "KF", "", float(res["curves"]["KF"][1][-1]), ""]]
        rows += [[name, res["d"], res["N"], k[0], k[1], float(kl[-1]), ""]
                 for k, (_, kl) in res["curves"].items() if k != "KF"]
    plot_panel(axs[-1], check9, f"p = d = {d9} vs KF, N = {N9}, App. D init",
               lambda k: f"L-RVGA p = d, {k[1]} inner loops")
    summary[f"check9_d{d9}_KF"] = float(check9["curves"]["KF"][1][-1])
    for key, (t, kl) in check9["curves"].items():
        if key != "KF":
            summary[f"check9_d{d9}_loops{key[1]}"] = float(kl[-1])
            summary[f"check9_d{d9}_loops{key[1]}_precision_kl"] = check9["prec"][key[1]]
            rows.append(["check9", d9, N9, key[0], key[1], float(kl[-1]), check9["prec"][key[1]]])
    rows.append(["check9", d9, N9, "KF", "", float(check9["curves"]["KF"][1][-1]), ""])
    write_curves(out / "lrvga_fig02_check9.csv", check9)
    write_csv(out / "lrvga_fig02_final.csv",
              ["panel", "d", "N", "p", "inner_loops", "final_kl", "precision_kl_vs_KF"], rows)
    save_figure(fig, out / "lrvga_fig02.png",
                "L-RVGA Fig. 2: linear regression, KL to the full-data posterior "
                f"(sigma0 = {SIGMA0:g}, c = {C:g}, seed = {SEED})")
    return summary


if __name__ == "__main__":
    cli(run, __doc__)
