"""L-RVGA Fig. 1: limited-memory factorisation of a large covariance matrix ([LRVGA] §5.1, App. C, E).

The target is the uncentred second moment ``S = X^T X / N`` of N samples; the methods approximate it
by ``W W^T + diag(psi)`` (rank p) and are scored by ``KL(N(0, S) || N(0, W W^T + Psi))`` ([LRVGA]
eq. 11, :func:`jaxrvga.baselines.metrics.fa_kl`) against the number of data processed:

* recursive EM (Algorithm 1 with ``alpha_t = (t-1)/t``, ``beta_t = 1/t``, App. C eq. 101;
  :func:`jaxrvga.baselines.fa_filters.recursive_em`), one pass, with 3 and 1 inner loops;
* online EM of Cappé & Moulines (App. E, ``gamma_t = t^-0.6``), with the authors' averaging
  (t > 500, averaged iterate fed back, "code") and the paper's (t > N/2, post-processing, "paper");
* batch EM (eqs. 20-21) on the dense S, iteration j drawn over x in [jN, (j+1)N) as in the authors'
  script, plus a long batch-EM run (``BATCH_REF`` iterations) as the best FA fit reference.

Panels and protocols (authors' ``XP_LRVGA_LargeScaleCovariance.py``; [LRVGA] §5.1):

* synthetic, d = 100, p = 10, N = 1000, 5 batch iterations: Dec-2021 protocol (rows divided by the
  mean row norm, ``S += 1e-12 I``, ``psi_0 = 1e-8``, ``W_0 = 1e-8 N(0, 1)`` drawn after the data);
* synthetic, d = 1000, p = 10, N = 10000, 10 batch iterations: HEAD protocol (unit-norm rows,
  App. D init with eps = 1e-8, ``W_0`` drawn after the data). Caption: 1 inner loop; HEAD code: 3.
* Breast Cancer (LIBSVM, 683 x 10), rows divided by the mean norm, HEAD init, 5 batch iterations,
  **p = 5**: the authors' LibSVM branch hard-codes p = 20, which exceeds d = 10 (not a valid FA).
* Madelon (500-d) is not bundled: that panel is not reproduced.

Full mode also measures the spread of the final KL of the one-pass methods over random orderings
of the data and over 1e-12 relative perturbations of the samples (:func:`variability`): while
``t < p`` the targets are rank deficient, ``psi`` is a catastrophic cancellation, and the
recursions amplify rounding to O(1) differences (``lrvga_fig01_variability_d*.png``).

``quick``: d = 100 (N = 1000) and Breast Cancer, no variability study.

This module also holds :func:`run_snapshots`, shared by the other ``lrvga_*`` scripts.
"""
from __future__ import annotations

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from experiments.common import cli, label_axes, progress, pyplot, run_snapshots, save_figure, write_csv

from jaxrvga.baselines import data
from jaxrvga.baselines import fa_filters
from jaxrvga.baselines import batch_fa
from jaxrvga.baselines import metrics  # noqa: E402

BATCH_REF = 1000  # iterations of the reference batch-EM run


@jax.jit
def _fa_kl_many(S, logdet_S, Ws, psis):
    return jax.lax.map(lambda wp: metrics.fa_kl(S, wp[0], wp[1], logdet_S), (Ws, psis), batch_size=16)


def _w_psi(state):
    return state.W, state.psi


def _w_psi_avg(state):
    return state.W_avg, state.psi_avg


# --------------------------------------------------------------------------- data and init

def head_init(rng: np.random.RandomState, d: int, p: int, eps: float = 1e-8):
    """HEAD init ([LRVGA] App. D with ``sigma_0^2 = d``): ``psi_0 = (1 - eps)/d``, columns of
    ``W_0 = mvn(0, I_p, d)`` rescaled to norm ``sqrt(eps / p)``, drawn from ``rng`` (no reseed)."""
    W0 = rng.multivariate_normal(np.zeros(p), np.identity(p), d)
    W0 = W0 / np.linalg.norm(W0, axis=0) * math.sqrt(eps / p)
    return W0, np.full(d, (1 - eps) / d)


def dec2021_init(rng: np.random.RandomState, d: int, p: int, scale: float = 1e-8):
    """Dec-2021 init: ``psi_0 = scale``, ``W_0 = scale * mvn(0, I_p, d)`` drawn from ``rng``."""
    return scale * rng.multivariate_normal(np.zeros(p), np.identity(p), d), np.full(d, scale)


def panel_data(name: str, d: int, p: int, N: int):
    """``(X, S, W0, psi0)`` of one panel, with the authors' normalisation and init."""
    if name == "breast_cancer":
        X = data.normalize_rows(data.load_breast_cancer().X, "mean")
        S = X.T @ X / X.shape[0]
        W0, psi0 = head_init(np.random.RandomState(1), X.shape[1], p)
        return X, S, W0, psi0
    variant = "dec2021" if name == "dec2021" else "head"
    ds = data.fa_covariance_data(d, p, N, seed=1, variant=variant)
    W0, psi0 = (dec2021_init if variant == "dec2021" else head_init)(ds.rng, d, p)
    return ds.X, ds.S, W0, psi0


# --------------------------------------------------------------------------- one panel

def run_panel(name, d, p, N, loops, batch_iters, quick):
    """All methods on one target. Returns ``dict`` of curves ``(t, kl)`` and final numbers."""
    X, S, W0, psi0 = panel_data(name, d, p, N)
    N, d = X.shape
    S = jnp.asarray(S)
    logdet_S = float(jnp.linalg.slogdet(S)[1])
    W0, psi0 = jnp.asarray(W0), jnp.asarray(psi0)
    Xj = jnp.asarray(X)
    dummy = jnp.zeros(N)
    stride = 1 if d * N <= 2e5 else max(1, N // 1000)
    kl0 = float(metrics.fa_kl(S, W0, psi0, logdet_S))
    curves, firsts = {}, {}
    methods = [(f"recEM_{n}", fa_filters.recursive_em(n, "covariance"), _w_psi) for n in loops]
    methods += [("onlineEM_code", fa_filters.online_fa_em(averaging="code"), _w_psi_avg),
                ("onlineEM_paper", fa_filters.online_fa_em(N, averaging="paper"), _w_psi_avg)]
    for label, flt, extract in progress(methods, f"Fig 1 {name}", quick):
        state0 = flt.init(W0, psi0)
        first = flt.update(state0, Xj[0])
        firsts[label] = float(metrics.fa_kl(S, *extract(first), logdet_S))
        _, (Ws, psis), t = run_snapshots(flt, state0, Xj, dummy, stride, extract)
        kl = np.asarray(_fa_kl_many(S, logdet_S, Ws, psis))
        if stride > 1:  # prepend t = 1 (the t = 1 identity of rec-EM and online EM)
            t, kl = np.concatenate([[1], t]), np.concatenate([[firsts[label]], kl])
        curves[label] = (np.concatenate([[0], t]), np.concatenate([[kl0], kl]))
    # batch EM: KL after j iterations, drawn over [jN, (j+1)N)
    step = jax.jit(batch_fa.batch_em_step)
    W, psi = W0, psi0
    kl_batch = [kl0]
    for _ in range(batch_iters):
        W, psi = step(S, W, psi)
        kl_batch.append(float(metrics.fa_kl(S, W, psi, logdet_S)))
    tb = np.concatenate([[j * N, (j + 1) * N] for j in range(batch_iters + 1)])
    curves["batchEM"] = (tb, np.repeat(kl_batch, 2))
    Wr, psir, _ = jax.jit(batch_fa.batch_em, static_argnums=(3,))(S, W0, psi0, BATCH_REF)
    kl_ref = float(metrics.fa_kl(S, Wr, psir, logdet_S))
    return dict(name=name, d=d, p=p, N=N, curves=curves, firsts=firsts, kl0=kl0,
                kl_batch=kl_batch, kl_ref=kl_ref, batch_iters=batch_iters)


def variability(name, d, p, N, loops, n_runs, kind, seed=0):
    """Final KLs over ``n_runs`` re-runs of the one-pass methods on the same target ``S``.

    ``kind="shuffle"``: random orderings of the N samples (the natural variability of a one-pass
    method). ``kind="rounding"``: the authors' ordering with the samples perturbed by a relative
    1e-12 (the recursions are numerically chaotic while ``S_t`` has rank < p: when the first
    t < p targets are rank deficient, ``psi_t`` is a catastrophic cancellation).
    Returns ``{method: array of n_runs final KLs}``.
    """
    X, S, W0, psi0 = panel_data(name, d, p, N)
    N, d = X.shape
    S = jnp.asarray(S)
    logdet_S = float(jnp.linalg.slogdet(S)[1])
    rng = np.random.default_rng(seed)
    flts = [(f"recEM_{n}", fa_filters.recursive_em(n, "covariance"), _w_psi) for n in loops]
    flts += [("onlineEM_code", fa_filters.online_fa_em(averaging="code"), _w_psi_avg)]
    finals = {m: [] for m, _, _ in flts}
    for _ in range(n_runs):
        if kind == "shuffle":
            Xr = X[rng.permutation(N)]
        else:
            Xr = X * (1 + 1e-12 * rng.standard_normal(X.shape))
        for m, flt, extract in flts:
            _, (Ws, psis), _ = run_snapshots(flt, flt.init(jnp.asarray(W0), jnp.asarray(psi0)),
                                             jnp.asarray(Xr), jnp.zeros(N), N, extract)
            finals[m].append(float(metrics.fa_kl(S, Ws[0], psis[0], logdet_S)))
    return {m: np.asarray(v) for m, v in finals.items()}


# --------------------------------------------------------------------------- figure

COLORS = {"recEM_3": "green", "recEM_1": "darkorange", "onlineEM_code": "red",
          "onlineEM_paper": "salmon", "batchEM": "blue"}
LABELS = {"recEM_3": "recursive EM, 3 inner loops", "recEM_1": "recursive EM, 1 inner loop",
          "onlineEM_code": "online EM (code averaging, t > 500)",
          "onlineEM_paper": "online EM (paper averaging, t > N/2)", "batchEM": "batch EM"}


def plot_panel(ax, res, title):
    for label, (t, kl) in res["curves"].items():
        keep = t >= (0 if label == "batchEM" else 1)
        ls = "--" if label.startswith("recEM") else "-"
        lw = 2.0 if label == "batchEM" else 1.3
        ax.plot(t[keep], kl[keep], ls, color=COLORS[label], lw=lw, label=LABELS[label])
    ax.axhline(res["kl_ref"], color="k", ls=":", lw=1, label=f"batch EM, {BATCH_REF} its")
    ax.set_yscale("log")
    # crop the first steps (the authors start each curve where it drops below KL_0)
    tenth = [np.interp(res["N"] / 10, *res["curves"][m]) for m in res["curves"] if m != "batchEM"]
    top = 20 * max(max(tenth), res["kl_batch"][min(1, len(res["kl_batch"]) - 1)])
    low = 0.5 * min(res["kl_ref"], min(float(np.min(k)) for _, k in res["curves"].values()))
    ax.set_ylim(low, top)
    label_axes(ax, title, "number of data processed", "KL(N(0,S) || N(0, WW^T + Psi))")


def plot_variability(path: Path, var: dict, title: str):
    plt = pyplot()
    fig, axs = plt.subplots(1, len(var), figsize=(4.6 * len(var), 3.8), squeeze=False)
    for ax, (kind, finals) in zip(axs[0], var.items()):
        names = list(finals)
        for j, m in enumerate(names):
            v = finals[m]
            ax.plot(np.full(len(v), j) + np.linspace(-0.15, 0.15, len(v)), v, "o", ms=4, color=COLORS[m])
            ax.plot([j - 0.25, j + 0.25], [np.median(v)] * 2, "k-", lw=1.5)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([LABELS[m].split(" (")[0].replace("recursive EM, ", "rec-EM ") for m in names],
                           fontsize=7)
        ax.set_yscale("log")
        panel = {"shuffle": "random orderings of the data",
                 "rounding": "same ordering, data x (1 + 1e-12 noise)"}[kind]
        label_axes(ax, panel, ylabel="final KL (t = N)")
    save_figure(fig, path, title)


PANELS_FULL = [("dec2021", 100, 10, 1000, (3, 1), 5), ("head", 1000, 10, 10000, (3, 1), 10),
               ("breast_cancer", 10, 5, None, (3, 1), 5)]
PANELS_QUICK = [("dec2021", 100, 10, 1000, (3, 1), 5), ("breast_cancer", 10, 5, None, (3, 1), 5)]
TITLES = {"dec2021": "synthetic (Dec-2021 protocol)", "head": "synthetic (HEAD protocol)",
          "breast_cancer": "Breast Cancer (LIBSVM), p = 5 (authors: p = 20 > d)"}
ONLINE = ("recEM_3", "recEM_1", "onlineEM_code", "onlineEM_paper")


def run(quick: bool, out: Path) -> dict:
    results = [run_panel(*pan, quick) for pan in (PANELS_QUICK if quick else PANELS_FULL)]
    plt = pyplot()
    fig, axs = plt.subplots(1, len(results), figsize=(5.2 * len(results), 4.3))
    summary, rows = {}, []
    for ax, res in zip(axs, results):
        tag = f"{res['name']}_d{res['d']}"
        plot_panel(ax, res, f"{TITLES[res['name']]}\nd = {res['d']}, p = {res['p']}, N = {res['N']}")
        write_csv(out / f"lrvga_fig01_{tag}.csv", ["method", "t", "kl"],
                  [(m, int(t), float(k)) for m, (ts, ks) in res["curves"].items() for t, k in zip(ts, ks)])
        checkpoints = {}
        for m in ONLINE:
            ts, ks = res["curves"][m]
            checkpoints[m] = [float(np.interp(res["N"] * f, ts, ks)) for f in (0.1, 0.5, 1.0)]
            for f, v in zip(("N10", "N2", "N"), checkpoints[m]):
                summary[f"{tag}_{m}_at_{f}"] = v
        summary[f"{tag}_batchEM_{res['batch_iters']}its"] = res["kl_batch"][-1]
        for m, v in res["firsts"].items():
            summary[f"{tag}_t1_{m}"] = v
        summary[f"{tag}_batchEM_{BATCH_REF}its"] = res["kl_ref"]
        summary[f"{tag}_kl0"] = res["kl0"]
        rows.append([tag, res["d"], res["p"], res["N"], res["kl0"]]
                    + [v for m in ONLINE for v in checkpoints[m]]
                    + [res["kl_batch"][-1], res["kl_ref"], res["firsts"]["recEM_1"],
                       res["firsts"]["onlineEM_code"]])
    axs[0].legend(fontsize=7)
    save_figure(fig, out / "lrvga_fig01.png",
                "L-RVGA Fig. 1: covariance factorisation, KL vs data processed "
                "(Madelon panel: data not bundled)")
    write_csv(out / "lrvga_fig01_final.csv",
              ["panel", "d", "p", "N", "kl0"]
              + [f"{m}_{f}" for m in ONLINE for f in ("N10", "N2", "N")]
              + ["batchEM", f"batchEM_{BATCH_REF}", "t1_recEM_1", "t1_onlineEM"], rows)
    if not quick:  # variability of the final KL: d = 100 (Dec-2021 protocol) and d = 1000 (HEAD)
        for name, d, N, runs in (("dec2021", 100, 1000, ((("shuffle", 20), ("rounding", 10)))),
                                 ("head", 1000, 10000, (("shuffle", 5), ("rounding", 5)))):
            var = {kind: variability(name, d, 10, N, (3, 1), n, kind) for kind, n in runs}
            plot_variability(out / f"lrvga_fig01_variability_d{d}.png", var,
                             f"L-RVGA Fig. 1, d = {d} ({TITLES[name]}): spread of the final KL")
            write_csv(out / f"lrvga_fig01_variability_d{d}.csv", ["kind", "method", "run", "kl"],
                      [(k, m, i, float(v)) for k, fin in var.items() for m, vs in fin.items()
                       for i, v in enumerate(vs)])
            for kind, fin in var.items():
                for m, v in fin.items():
                    for stat in ("median", "min", "max"):
                        summary[f"{name}_d{d}_{kind}_{m}_{stat}"] = float(getattr(np, stat)(v))
    return summary


if __name__ == "__main__":
    cli(run, __doc__)
