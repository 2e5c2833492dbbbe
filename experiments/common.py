"""Shared plumbing of the experiment scripts.

Every script ``experiments/<paper>_<item>.py`` defines ``run(quick: bool, out: Path) -> dict``:
it writes its PNG and CSV files into ``out`` and returns the headline numbers (final KLs etc.)
that ``REPORT.md`` quotes and the tests check. ``quick=True`` runs reduced sizes in seconds.

Shared helpers, by section: CSV and figures; data splits; running filters (:func:`run_snapshots`);
R-VGA comparisons (:func:`compare` and the plots and CSVs of [RVGA] Figs 3-16); L-RVGA logistic
experiments (:class:`Problem`, :func:`lrvga_kl_curve`, [LRVGA] Figs 3-5); head-to-head comparisons
(:func:`timed`, :func:`step_report`); memory probes (:func:`measure_memory`, [LRVGA] Tables 1-2);
entry points (:func:`cli`, :func:`quick_fixture`).

BLAS threads: ``experiments/__init__.py`` defaults ``OPENBLAS_NUM_THREADS`` to 1 before anything
imports NumPy (the Makefile and ``tests/conftest.py`` set it too).
"""
from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

jax.config.update("jax_enable_x64", True)

import jaxrvga as jr  # noqa: E402
from benchmarks.machine import reset_peak, status_bytes  # noqa: E402
from jaxrvga import data, metrics, models  # noqa: E402

#: The logistic model of every logistic-regression experiment.
MODEL = models.logistic()

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
#: Module-name prefixes that run_all discovers, in this order.
PREFIXES = ("rvga_", "lrvga_", "klprox_", "dual_", "headtohead_", "multiclass_")


def results_dir(quick: bool) -> Path:
    """``experiments/results`` for full runs, ``experiments/results/quick`` (not committed) for quick ones."""
    out = RESULTS / "quick" if quick else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    return out


# --------------------------------------------------------------------------- CSV and figures

def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence]) -> None:
    """Write rows of numbers or strings to a CSV file with a header."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for row in rows:
            w.writerow([f"{v:.6g}" if isinstance(v, float) else v for v in row])


def write_columns(path: Path, columns: Mapping[str, object]) -> None:
    """Write named columns (e.g. ``{"t": t, "kl_p10": kl, "kl_laplace": 0.3}``) as a CSV file.

    The first column sets the length; a scalar column is repeated on every row.
    """
    n = len(next(iter(columns.values())))
    cols = [np.broadcast_to(np.asarray(c), (n,)) for c in columns.values()]
    write_csv(path, list(columns), zip(*cols))


def pyplot():
    """matplotlib.pyplot with the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: x-axis label of the KL-along-the-stream panels.
ITERATIONS = "number of iterations t"


def label_axes(ax, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None):
    """Panel style of the figures: title (fontsize 9), axis labels and a light grid."""
    if title is not None:
        ax.set_title(title, fontsize=9)
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)


def save_figure(fig, path: Path, suptitle: str | None = None, *, rect=None, dpi: int = 110,
                tight: bool = True) -> None:
    """Title (fontsize 10), ``tight_layout(rect)`` and save ``fig`` to ``path``, then close it.

    ``tight=False`` saves with ``bbox_inches="tight"`` instead (figures with a shared colorbar).
    """
    if suptitle is not None:
        fig.suptitle(suptitle, fontsize=10)
    if tight:
        fig.tight_layout(**({} if rect is None else {"rect": rect}))
        fig.savefig(path, dpi=dpi)
    else:
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
    pyplot().close(fig)


def progress(iterable, desc: str, quick: bool):
    """A tqdm progress bar on long (non-quick) runs; a plain iterator otherwise."""
    if quick:
        return iterable
    try:
        from tqdm import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, desc=desc)


# --------------------------------------------------------------------------- data splits

class Split(NamedTuple):
    Xtr: np.ndarray
    ytr: np.ndarray
    Xte: np.ndarray
    yte: np.ndarray


def make_split(X, y, seed: int, train_fraction: float, standardise: bool, n_max=None,
               intercept: bool = False) -> Split:
    """Random train/test split of (the first ``n_max`` rows of a random permutation of) the data.

    ``round(train_fraction * n)`` training rows, in the permutation's (random) order. Optional
    standardisation with the training mean and std (zero-variance columns only centred), then an
    optional intercept column of ones.
    """
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(y))[:n_max]
    n_tr = int(round(train_fraction * len(perm)))
    tr, te = perm[:n_tr], perm[n_tr:]
    Xtr, Xte = X[tr], X[te]
    if standardise:
        mu, sd = Xtr.mean(0), Xtr.std(0)
        sd = np.where(sd > 0, sd, 1.0)
        Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    if intercept:
        Xtr, Xte = (np.hstack([A, np.ones((A.shape[0], 1))]) for A in (Xtr, Xte))
    return Split(Xtr, y[tr], Xte, y[te])


# --------------------------------------------------------------------------- calibration

def ece(probs, labels, bins: int = 10) -> float:
    """Expected calibration error of class probabilities ``probs`` (n, K) for integer ``labels`` (n,).

    The confidence ``max_k p_k`` of each point falls in one of ``bins`` equal-width bins of [0, 1]
    (1 in the last); ECE ``= sum_b (n_b / n) |accuracy_b - mean confidence_b|``, where a point is
    accurate when its argmax is its label.
    """
    probs, labels = np.asarray(probs), np.asarray(labels)
    if probs.ndim != 2 or labels.shape != probs.shape[:1]:
        raise ValueError(f"probs must be (n, K) and labels (n,), got {probs.shape} and {labels.shape}")
    conf = probs.max(axis=1)
    hit = (probs.argmax(axis=1) == labels).astype(float)
    idx = np.minimum((conf * bins).astype(int), bins - 1)
    gap = 0.0
    for b in range(bins):
        sel = idx == b
        if sel.any():
            gap += sel.sum() * abs(hit[sel].mean() - conf[sel].mean())
    return float(gap / len(labels))


# --------------------------------------------------------------------------- running filters

def run_snapshots(flt, state, xs, ys, stride: int, extract=lambda s: s, *args):
    """Run ``flt`` over ``(xs, ys)`` and return ``extract(state, *args)`` after every ``stride`` steps.

    One jitted nested ``lax.scan`` over ``len(xs) // stride`` chunks, so only ``len(xs) / stride``
    snapshots are kept in memory: the trajectories of d x p factors at every step would not fit
    for the larger experiments. The remaining ``len(xs) % stride`` observations are then absorbed
    and one last snapshot is taken at ``t = len(xs)``. ``extract`` may compute a metric directly
    (its extra arrays passed as ``args``).

    Returns ``(final_state, snapshots, t)``: snapshots stacked along a leading axis and ``t`` the
    number of observations absorbed at each snapshot (the last one is ``len(xs)``).
    """
    N = len(xs)
    n = (N // stride) * stride
    xc = jnp.asarray(xs[:n]).reshape((n // stride, stride) + tuple(np.shape(xs)[1:]))
    yc = jnp.asarray(ys[:n]).reshape((n // stride, stride) + tuple(np.shape(ys)[1:]))
    final, snaps = _snapshots(flt, extract, state, xc, yc, args)
    t = np.arange(1, n // stride + 1) * stride
    if n < N:
        final, last = _snapshots(flt, extract, final, jnp.asarray(xs[n:])[None], jnp.asarray(ys[n:])[None],
                                 args)
        snaps = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), snaps, last)
        t = np.append(t, N)
    return final, snaps, t


def _snapshots_impl(flt, extract, state, xs, ys, args):
    def chunk(s, xy):
        s, _ = jax.lax.scan(lambda c, z: (flt.update(c, *z), None), s, xy)
        return s, extract(s, *args)

    return jax.lax.scan(chunk, state, (xs, ys))


_snapshots = jax.jit(_snapshots_impl, static_argnums=(0, 1))


# --------------------------------------------------------------------------- R-VGA comparisons
# ([RVGA] Figs 3-16: the MC-KL of [RVGA] eqs. 92-94 against the final posterior, common random numbers)

METHODS = ("implicit", "explicit", "EKF", "QKF")
LABELS = {"implicit": "R-VGA implicit", "explicit": "R-VGA explicit", "EKF": "EKF", "QKF": "QKF",
          "Laplace": "Laplace (batch)"}
COLORS = {"implicit": "b", "explicit": "k", "EKF": "orchid", "QKF": "g", "Laplace": "r"}
STYLES = {"implicit": "-", "explicit": "--", "EKF": "-", "QKF": "-", "Laplace": "-"}
RVGA_M_KL = 300  # MC samples of the KL ([RVGA] code: nbSamplesKL = 300, seeded with the data seed)

# Built once, so that jr.run's jit cache (keyed on the filter) is shared by every script.
RVGA_FILTERS = {"implicit": jr.rvga(MODEL, "implicit"), "explicit": jr.rvga(MODEL, "explicit"),
                "EKF": jr.ekf(MODEL), "QKF": jr.qkf()}


def _trace(state, x, y):
    del x, y
    return state.mean, state.cov, state.info.residual


@jax.jit
def kl_curve(means, covs, z, X, y, m0, P0):
    """MC-KL of each belief ``N(means[t], covs[t])`` to the final posterior (common ``z``)."""
    one = lambda mc: metrics.mc_kl_logistic(mc[0], mc[1], z, X, y, m0, P0)
    return jax.lax.map(one, (means, covs), batch_size=32)


@jax.jit
def rvga_kl_terms(mean, cov, z, X, y, m0, P0):
    """The M terms ``-log ptilde(theta_m) - entropy`` whose mean is the MC-KL (for standard errors)."""
    L = jnp.linalg.cholesky(cov)
    thetas = mean + z @ L.T
    lp = jax.vmap(lambda th: metrics.logistic_log_posterior(th, X, y, m0, P0))(thetas)
    return -lp - metrics.gaussian_entropy(2.0 * jnp.sum(jnp.log(jnp.diagonal(L))), mean.shape[0])


@jax.jit
def _laplace(X, y, m0, P0):
    lap = jr.laplace(MODEL, X, y, m0, P0)
    return lap.mean, lap.cov, lap.converged


class Comparison(NamedTuple):
    """Output of :func:`compare`. ``kl[name]`` has N + 1 entries (t = 0..N, t = 0 the prior)."""

    ds: data.LogisticData
    m0: np.ndarray
    P0: np.ndarray
    kl: dict
    kl_laplace: float
    lap_mean: np.ndarray
    lap_cov: np.ndarray
    lap_converged: bool
    max_residual: float  # largest scaled residual of the implicit 2-D root along the stream
    terms: dict  # name -> the M terms of the final MC-KL ("Laplace" included), see paired_stderr
    finals: dict  # name -> final GaussianState ("Laplace" included)
    means: Optional[dict] = None  # name -> (N + 1, d), when keep=True
    covs: Optional[dict] = None  # name -> (N + 1, d, d), when keep=True


def paired_stderr(res: "Comparison", a: str, b: str | None = None) -> float:
    """MC standard error of the final MC-KL of ``a`` (``b=None``) or of the difference ``a - b``.

    The same base normals serve every method (common random numbers), so the difference of two
    final MC-KLs is far more precise than either value.
    """
    t = res.terms[a] - (0.0 if b is None else res.terms[b])
    return float(np.std(t, ddof=1) / np.sqrt(len(t)))


def compare(s, N, d, c, seed, sigma0, mu0, *, keep=False, quick=True, desc="") -> Comparison:
    """Run the four filters and Laplace on the authors' generator; MC-KL curves against the final posterior."""
    ds = data.logistic_data(s, N, d, c, seed=seed)
    m0 = data.prior_mean(mu0, d)
    P0 = sigma0**2 * np.eye(d)
    z = metrics.base_normals(d, RVGA_M_KL, seed=seed)
    X, y = jnp.asarray(ds.X), jnp.asarray(ds.y)
    kl, means, covs, max_res, se, finals = {}, {}, {}, 0.0, {}, {}
    for name in progress(METHODS, desc or f"d={d} N={N}", quick):
        flt = RVGA_FILTERS[name]
        finals[name], (ms, cs, res) = jr.run(flt, flt.init(m0, P0), X, y, _trace)
        se[name] = np.asarray(rvga_kl_terms(ms[-1], cs[-1], z, X, y, m0, P0))
        ms = jnp.concatenate([jnp.asarray(m0)[None], ms])
        cs = jnp.concatenate([jnp.asarray(P0)[None], cs])
        kl[name] = np.asarray(kl_curve(ms, cs, z, X, y, m0, P0))
        if name == "implicit":
            max_res = float(jnp.max(res))
        if keep:
            means[name], covs[name] = np.asarray(ms), np.asarray(cs)
    lm, lc, ok = _laplace(X, y, jnp.asarray(m0), jnp.asarray(P0))
    kl_lap = float(kl_curve(lm[None], lc[None], z, X, y, m0, P0)[0])
    se["Laplace"] = np.asarray(rvga_kl_terms(lm, lc, z, X, y, m0, P0))
    finals["Laplace"] = RVGA_FILTERS["implicit"].init(lm, lc)
    return Comparison(ds, m0, P0, kl, kl_lap, np.asarray(lm), np.asarray(lc), bool(ok), max_res,
                      se, finals, means if keep else None, covs if keep else None)


# --------------------------------------------------------------------------- 2-D posterior

@jax.jit
def _log_post_points(pts, X, y, m0, P0):
    return jax.vmap(lambda th: metrics.logistic_log_posterior(th, X, y, m0, P0))(pts)


def _log_post_grid(res: Comparison, th1, th2):
    T1, T2 = np.meshgrid(th1, th2)
    pts = jnp.asarray(np.stack([T1.ravel(), T2.ravel()], axis=1))
    lp = _log_post_points(pts, jnp.asarray(res.ds.X), jnp.asarray(res.ds.y), jnp.asarray(res.m0),
                          jnp.asarray(res.P0))
    return T1, T2, np.asarray(lp).reshape(T1.shape)


def posterior_grid(res: Comparison, n=30, width=3.0):
    """The authors' contour grid: n x n over ``MAP +- width sqrt(max eig(Laplace cov))``."""
    r = width * np.sqrt(np.max(np.linalg.eigvalsh(res.lap_cov)))
    th1 = np.linspace(res.lap_mean[0] - r, res.lap_mean[0] + r, n)
    th2 = np.linspace(res.lap_mean[1] - r, res.lap_mean[1] + r, n)
    T1, T2, lp = _log_post_grid(res, th1, th2)
    return T1, T2, np.exp(lp)


def log_evidence_2d(res: Comparison, n=301, width=10.0):
    """``log Z_p`` of a 2-D posterior by quadrature on a wide grid (the KL offset of the MC-KL).

    ``Z_p <= 1`` (labels are discrete and the prior is normalised), so ``MC-KL = KL - log Z_p >= KL``.
    """
    r = width * np.sqrt(np.max(np.linalg.eigvalsh(res.lap_cov)))
    th1 = np.linspace(res.lap_mean[0] - r, res.lap_mean[0] + r, n)
    th2 = np.linspace(res.lap_mean[1] - r, res.lap_mean[1] + r, n)
    _, _, lp = _log_post_grid(res, th1, th2)
    return float(logsumexp(jnp.asarray(lp)) + np.log((th1[1] - th1[0]) * (th2[1] - th2[0])))


# --------------------------------------------------------------------------- plotting

def kl_offset(values):
    """A common offset making every plotted value positive on a log axis (0 when all already are)."""
    lo = float(np.min(values))
    return 0.0 if lo > 0 else np.floor(lo) - 1.0


def plot_kl(ax, res: Comparison, legend=True):
    """KL vs iteration on a log axis, the authors' ``plotKL`` (Laplace as a horizontal line)."""
    allv = np.concatenate([np.concatenate(list(res.kl.values())), [res.kl_laplace]])
    off = kl_offset(allv)
    t = np.arange(len(res.kl["implicit"]))
    for name in ("implicit", "EKF", "QKF", "explicit"):
        ax.semilogy(t, res.kl[name] - off, STYLES[name], color=COLORS[name],
                    label=LABELS[name] if legend else None)
    ax.semilogy(t, np.full(t.shape, res.kl_laplace - off), color=COLORS["Laplace"],
                label=LABELS["Laplace"] if legend else None)
    ax.set_xlabel("iteration t")
    ax.set_ylabel("MC-KL (Z_p = 1)" if off == 0 else f"MC-KL - ({off:g})")
    return off


def ellipse(ax, mean, cov, color, ls="-", lw=1.2, label=None, alpha=1.0):
    """1-sigma ellipse ``mean + chol(cov) u``, ``||u|| = 1``."""
    u = np.linspace(0, 2 * np.pi, 200)
    pts = mean[:2, None] + np.linalg.cholesky(cov[:2, :2]) @ np.stack([np.cos(u), np.sin(u)])
    ax.plot(pts[0], pts[1], ls, color=color, lw=lw, label=label, alpha=alpha)
    ax.plot(mean[0], mean[1], ".", color=color, alpha=alpha)


def plot_ellipses(axs, res: Comparison, times=None, grid_n=30):
    """One panel per filter: its ellipse at t = N (black when ``times`` are drawn too, else its colour),
    the Laplace ellipse (red) and 6 contour levels of the true posterior."""
    T1, T2, pdf = posterior_grid(res, n=grid_n)
    N = len(res.kl["implicit"]) - 1
    for ax, name in zip(axs, METHODS):
        # 6 levels evenly spaced in (0, max): the authors' ``contour(..., 6)`` also draws a level
        # at ~0, which only traces where exp(log p) underflows.
        ax.contour(T1, T2, pdf, pdf.max() * np.arange(1, 7) / 7, zorder=1, linewidths=0.8)
        for j, t in enumerate(times or ()):
            ellipse(ax, res.means[name][t], res.covs[name][t], COLORS[name], "-", 0.9,
                    alpha=0.35 + 0.5 * j / max(len(times), 1), label=f"t = {t}")
        ellipse(ax, res.means[name][N], res.covs[name][N], "k" if times else COLORS[name], "-", 1.6,
                label=f"t = N = {N}" if times else LABELS[name])
        ellipse(ax, res.lap_mean, res.lap_cov, COLORS["Laplace"], "-", 1.2, label="Laplace")
        ax.set_title(LABELS[name], fontsize=9)
        ax.set_xlim(T1.min(), T1.max())
        ax.set_ylim(T2.min(), T2.max())
    axs[0].legend(fontsize=6, loc="best")


def plot_data(ax, ds):
    for lab, col in ((0, "tab:blue"), (1, "tab:orange")):
        sel = ds.y == lab
        ax.scatter(ds.X[sel, 0], ds.X[sel, 1], s=6, color=col, label=f"y = {lab}")
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_title("inputs", fontsize=9)
    ax.legend(fontsize=6)


def figure_2d(res: Comparison, title, path: Path, times=None):
    """The 2-D figure layout: data + KL (top), four ellipse panels (bottom)."""
    plt = pyplot()
    fig = plt.figure(figsize=(13, 6.5))
    gs = fig.add_gridspec(2, 4)
    plot_data(fig.add_subplot(gs[0, 0]), res.ds)
    ax = fig.add_subplot(gs[0, 1:])
    plot_kl(ax, res)
    ax.legend(fontsize=7, ncol=3)
    ax.set_title("KL to the final posterior", fontsize=9)
    plot_ellipses([fig.add_subplot(gs[1, j]) for j in range(4)], res, times=times)
    save_figure(fig, path, title)


def figure_hd(results, titles, path: Path, suptitle, hist=False):
    """High-dimensional layout: one KL panel per configuration; with ``hist`` a top row of the
    50-bin histogram of ``sig(x_i^T theta_opt / ||theta_opt||)`` (the authors' ``plotOutputs``)."""
    plt = pyplot()
    n = len(results)
    rows = 2 if hist else 1
    fig, axs = plt.subplots(rows, n, figsize=(4.3 * n, 3.6 * rows), squeeze=False)
    for j, (res, title) in enumerate(zip(results, titles)):
        if hist:
            u = res.ds.theta_opt / np.linalg.norm(res.ds.theta_opt)
            axs[0, j].hist(1 / (1 + np.exp(-res.ds.X @ u)), bins=50)
            axs[0, j].set_title(title, fontsize=9)
            axs[0, j].set_xlabel("sig(x_i^T theta_opt / ||theta_opt||)", fontsize=8)
        ax = axs[-1, j]
        plot_kl(ax, res, legend=(j == 0))
        if not hist:
            ax.set_title(title, fontsize=9)
    fig.legend(loc="lower center", ncol=5, fontsize=8)
    save_figure(fig, path, suptitle, rect=(0, 0.06, 1, 1))


def final_row(res: Comparison, log_z=None):
    """Final MC-KLs (t = N) of the five methods, and the true KLs when ``log_z`` is known."""
    vals = [res.kl[m][-1] for m in METHODS] + [res.kl_laplace]
    return vals + ([v + log_z for v in vals] if log_z is not None else [])


def summary_of(prefix, res: Comparison, log_z):
    out = {f"{prefix}_kl_{m}": float(res.kl[m][-1]) for m in METHODS}
    out[f"{prefix}_kl_Laplace"] = res.kl_laplace
    if log_z is not None:
        out[f"{prefix}_log_Z"] = log_z
    out[f"{prefix}_stderr_implicit"] = paired_stderr(res, "implicit")
    for other in ("explicit", "Laplace"):
        out[f"{prefix}_stderr_implicit_minus_{other}"] = paired_stderr(res, "implicit", other)
    out[f"{prefix}_max_residual"] = res.max_residual
    return out


def write_curves(path: Path, res: Comparison):
    """The MC-KL curves of the four filters (t = 0..N) and Laplace's final MC-KL on every row."""
    kls = {f"kl_{m}": res.kl[m] for m in METHODS}
    write_columns(path, {"t": np.arange(len(res.kl["implicit"])), **kls, "kl_Laplace": res.kl_laplace})


HEADER_2D = (["figure", "sigma0", "mu0", "s", "c", "N", "seed", "log_Z"]
             + [f"mckl_{m}" for m in METHODS + ("Laplace",)]
             + [f"kl_{m}" for m in METHODS + ("Laplace",)])

HEADER_HD = ["figure", "sigma0", "d", "N", "s", "c", "seed"] + [f"mckl_{m}" for m in METHODS + ("Laplace",)]


def write_final_hd(path: Path, rows):
    """Final MC-KLs of the high-dimensional figures (rows ``[figure, sigma0, d, N, s, c, seed, ...]``)."""
    write_csv(path, HEADER_HD, rows)


def run_2d_config(fig, s, c, seed, sigma0, mu0, N, out: Path, quick, times=None):
    """One 2-D figure: run, draw, write its KL curves; returns (CSV row, summary entries)."""
    res = compare(s, N, 2, c, seed, sigma0, mu0, keep=True, quick=quick, desc=f"Fig {fig}")
    log_z = log_evidence_2d(res)
    when = f"; ellipses at t = {times} and N" if times else ""
    figure_2d(res, f"R-VGA Fig. {fig}: sigma0 = {sigma0:g}, ||mu0|| = {mu0:g}, s = {s:g}, c = {c}, N = {N}, "
                   f"d = 2, seed = {seed}{when}  (log Z_p = {log_z:.3f})",
              out / f"rvga_fig{fig:02d}.png", times=times)
    write_curves(out / f"rvga_fig{fig:02d}_kl.csv", res)
    return [fig, sigma0, mu0, s, c, N, seed, log_z] + final_row(res, log_z), summary_of(f"fig{fig}", res, log_z)


def run_2d_figures(configs, out: Path, quick, csv_name, times=None) -> dict:
    """Several 2-D figures, ``configs`` of ``(fig, s, c, seed, sigma0, mu0)`` at N = 100 (the paper's
    size already runs in seconds, so there is no quick size); final KLs into ``csv_name``."""
    summary, rows = {}, []
    for fig, s, c, seed, sigma0, mu0 in configs:
        row, entries = run_2d_config(fig, s, c, seed, sigma0, mu0, 100, out, quick, times)
        rows.append(row)
        summary.update(entries)
    write_csv(out / csv_name, HEADER_2D, rows)
    return summary


# --------------------------------------------------------------------------- L-RVGA logistic experiments
# (Figs 3-5 of [LRVGA])

M_KL, SEED_KL = 5, 1  # the authors' nbSamplesKL and seed
M_BIG, SEED_BIG = 1000, 1234  # precise final estimates
N_POINTS = 100  # MC-KL evaluations along the stream


class Problem:
    """Data, prior, MC-KL normals and Laplace of one logistic experiment."""

    def __init__(self, d, N, coef_s, sigma0, seed=1, c=1.0, mu0=0.0, m_kl=M_KL, seed_kl=None):
        self.d, self.N, self.sigma0, self.seed = d, N, sigma0, seed
        self.s = 1.0 / d**coef_s
        self.ds = data.logistic_data(self.s, N, d, c, seed=seed)
        self.X, self.y = jnp.asarray(self.ds.X), jnp.asarray(self.ds.y)
        self.m0 = jnp.asarray(data.prior_mean(mu0, d))
        self.P0 = sigma0**2 * jnp.eye(d)
        self.z = jnp.asarray(metrics.base_normals(d, m_kl, seed=seed if seed_kl is None else seed_kl))
        self.z_big = jax.random.normal(jax.random.PRNGKey(SEED_BIG), (M_BIG, d))
        lap = _problem_laplace(self.X, self.y, self.m0, self.P0)
        self.lap_mean, self.lap_cov, self.lap_ok = lap.mean, lap.cov, bool(lap.converged)
        self.kl_laplace = float(full_kl(self.lap_mean, self.lap_cov, self.z, self.X, self.y, self.m0,
                                        sigma0**2))
        self.terms_laplace = kl_terms(self.lap_mean, self.lap_cov, self.z_big, self.X, self.y, self.m0,
                                      sigma0**2)

    def stride(self):
        return max(1, self.N // N_POINTS)


#: The Laplace approximation of a :class:`Problem`, compiled once per shape (shared by every problem
#: of that size).
_problem_laplace = jax.jit(lambda X, y, m, P: jr.laplace(MODEL, X, y, m, P))


@jax.jit
def full_kl(mean, cov, z, X, y, m0, prior_var):
    return metrics.mc_kl_logistic(mean, cov, z, X, y, m0, prior_var)


def _fa_kl(state, z, X, y, m0, prior_var):
    return metrics.mc_kl_logistic_fa(state.mean, state.W, state.psi, z, X, y, m0, prior_var)


def _full_kl_state(state, z, X, y, m0, prior_var):
    return metrics.mc_kl_logistic(state.mean, state.cov, z, X, y, m0, prior_var)


@jax.jit
def kl_terms(mean, cov, z, X, y, m0, prior_var):
    """The M terms ``-log ptilde(theta_m) - entropy`` whose mean is the MC-KL (paired standard errors)."""
    L = jnp.linalg.cholesky(cov)
    thetas = mean + z @ L.T
    lp = jax.lax.map(lambda th: metrics.logistic_log_posterior(th, X, y, m0, prior_var), thetas,
                     batch_size=50)
    return -lp - metrics.gaussian_entropy(2.0 * jnp.sum(jnp.log(jnp.diagonal(L))), mean.shape[0])


def lrvga_kl_curve(prob: Problem, flt, state0, full=False):
    """Run a filter over the stream; MC-KL (M = 5 normals) at t = 0, stride, ..., N.

    Returns ``(t, kl, final_state, final_terms)`` with the M_BIG terms of the final belief.
    """
    extract = _full_kl_state if full else _fa_kl
    args = (prob.z, prob.X, prob.y, prob.m0, prob.sigma0**2)
    stride = prob.stride()
    final, kl, t = run_snapshots(flt, state0, prob.X, prob.y, stride, extract, *args)
    kl0 = float(jax.jit(extract)(state0, *args))
    t = np.concatenate([[0], t])
    cov = final.cov if full else jr.lowrank.to_dense_covariance(final.W, final.psi)
    terms = kl_terms(final.mean, cov, prob.z_big, prob.X, prob.y, prob.m0, prob.sigma0**2)
    return t, np.concatenate([[kl0], np.asarray(kl)]), final, np.asarray(terms)


def paired(terms_a, terms_b=None):
    """Mean and MC standard error of the M_BIG-sample KL (of a difference when ``terms_b`` given)."""
    v = np.asarray(terms_a) - (0.0 if terms_b is None else np.asarray(terms_b))
    return float(np.mean(v)), float(np.std(v, ddof=1) / np.sqrt(len(v)))


def authors_w0(d, p, scale, seed=1):
    """``np.random.seed(seed); W0 = scale * mvn(0, I_p, d)`` (the authors' logistic init)."""
    return scale * np.random.RandomState(seed).multivariate_normal(np.zeros(p), np.identity(p), d)


# --------------------------------------------------------------------------- head-to-head comparisons

def trivial_log_loss(y_train, y_test):
    """Log-loss of the constant predictor ``p = mean(y_train)``."""
    p = float(np.clip(np.mean(y_train), 1e-12, 1 - 1e-12))
    return float(-np.mean(y_test * np.log(p) + (1 - y_test) * np.log1p(-p)))


#: KL-prox step-control columns of the CSVs: the final step parameter ``r_k`` (``result.r``; the
#: requested 0.8 unless the step had to stay shrunk, then larger) and the number of rejected
#: proposals (nan for the other methods).
STEP_COLUMNS = ["r_final", "rejected"]


def step_report(rows) -> dict:
    """Summary of KL-prox's step control over the ``"KL-prox"`` rows of a CSV table whose last
    columns are :data:`STEP_COLUMNS`: total rejected proposals, fits with at least one rejection,
    largest final ``r`` (the shortest step any fit ended with; the control only shrinks
    ``1 - r_k`` below ``1 - r``)."""
    r_final, rejected = np.array([r[-2:] for r in rows if r[1] == "KL-prox"], dtype=float).T
    return {"rejected": int(np.sum(rejected)), "fits_with_rejections": int(np.sum(rejected > 0)),
            "r_final_max": float(np.max(r_final))}


def float64_scalar(v):
    """A strongly typed float64 scalar (matches the avals of an ahead-of-time compiled function)."""
    return jnp.asarray(float(v), dtype=jnp.float64)


def timed(fn, *args):
    """``(result, seconds)`` of one call, waiting for the device."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0


# --------------------------------------------------------------------------- memory probes
# ([LRVGA] Tables 1-2: one configuration per fresh interpreter)

def _rss_mb(field):
    return status_bytes(field) / 1e6


def _settled_rss_mb():
    """``VmRSS`` once it stops falling: XLA frees donated / dropped buffers asynchronously."""
    gc.collect()
    prev = _rss_mb("VmRSS")
    for _ in range(40):
        time.sleep(0.25)
        cur = _rss_mb("VmRSS")
        if abs(cur - prev) < 0.5:
            return cur
        prev = cur
    return prev


def _make(algo, d, p, loops):
    """``(filter, init(W, psi))`` of one algorithm at dimension ``d``."""
    import jax.numpy as jnp

    import jaxrvga as jr
    from jaxrvga import factor_analysis as fa, models

    if algo == "recem":
        flt = fa.recursive_em(loops, "covariance")
        return flt, lambda W, psi: flt.init(W, psi)
    if algo == "online":
        flt = fa.online_fa_em(averaging="code")
        # online_fa_em.init puts the same W (psi) in two fields, which donate=True rejects
        # ("donate the same buffer twice"): give the running average its own copy.
        return flt, lambda W, psi: flt.init(W, psi)._replace(W_avg=jnp.array(W, copy=True),
                                                             psi_avg=jnp.array(psi, copy=True))
    if algo == "lrvga":
        flt = jr.lrvga(models.linear_gaussian(1.0), rank=p, inner_loops=loops, published=True)
        return flt, lambda W, psi: flt.init(jnp.zeros(d), W, psi)
    if algo == "kalman":
        flt = jr.kalman(1.0)
        return flt, lambda W, psi: flt.init(jnp.zeros(d), jnp.eye(d))
    raise ValueError(f"algo: unknown algorithm {algo!r}")


def _data(d, T):
    import jax

    key = jax.random.PRNGKey(1)
    return jax.random.normal(key, (T, d)) / np.sqrt(d), jax.random.normal(key, (T,))


def _factors(d, p):
    """Initial ``(W, psi)`` from one fused elementwise kernel: ``W`` is the only d x p buffer created
    (a random draw would add RNG temporaries of the same size to the measured peak)."""
    import jax
    import jax.numpy as jnp

    p = min(p, d)

    def make():
        i = jax.lax.broadcasted_iota(jnp.float64, (d, p), 0)
        j = jax.lax.broadcasted_iota(jnp.float64, (d, p), 1)
        return 1e-4 * jnp.cos(0.7071 * i * (j + 1.0) + 1.3 * j), jnp.ones((d,))

    return jax.jit(make)()


def _run_batch(S, W, psi, iters):
    import jax

    from jaxrvga import factor_analysis as fa

    step = jax.jit(fa.batch_em_step, donate_argnums=(1, 2))
    for _ in range(iters):
        W, psi = step(S, W, psi)
    return jax.block_until_ready(W)


def _run_stream(algo, d, p, loops, xs, ys):
    """Compile and run the filter, then (peak reset) build the state and run it again, timed."""
    import jax

    import jaxrvga as jr

    flt, init = _make(algo, d, p, loops)
    jax.block_until_ready(jr.run(flt, init(*_factors(d, p)), xs, ys, donate=True)[0])  # compile + run
    return lambda: jax.block_until_ready(init(*_factors(d, p))), \
        lambda state: jax.block_until_ready(jr.run(flt, state, xs, ys, donate=True)[0])


def probe_memory(algo: str, d: int, p: int, T: int, loops: int = 1) -> dict:
    """The measurement of one configuration in this (fresh) process (``experiments/lrvga_table01_memory.py``)."""
    import jax
    import jax.numpy as jnp

    # warm-up: the same algorithm at d = max(64, p) (loads XLA, the library, the compiler)
    if algo == "batch":
        xs, _ = _data(64, 8)
        _run_batch(xs.T @ xs + jnp.eye(64), *_factors(64, 4), 2)
    else:
        dw = max(64, p)
        _run_stream(algo, dw, p, loops, *_data(dw, 3))
    xs, ys = _data(d, T)
    jax.block_until_ready((xs, ys))
    base_total = _settled_rss_mb()
    reset_peak(trim=False)  # baseline of the whole-process figure: imports, warm-up, data
    if algo == "batch":
        S = xs.T @ xs / T + jnp.eye(d)
        _run_batch(S, *_factors(d, p), 1)  # compile + first run
        total = _rss_mb("VmHWM") - base_total
        base = _settled_rss_mb() - 8 * d * d / 1e6  # S (the batch target) is part of the algorithm's memory
        reset_peak(trim=False)
        make_state, steps = lambda: _factors(d, p), lambda state: _run_batch(S, *state, T)
    else:
        make_state, steps = _run_stream(algo, d, p, loops, xs, ys)
        total = _rss_mb("VmHWM") - base_total
        base = _settled_rss_mb()
        reset_peak(trim=False)
    state = make_state()
    state_mb = _rss_mb("VmRSS") - base
    t0 = time.perf_counter()
    steps(state)
    per_iter = (time.perf_counter() - t0) / T
    return dict(base_mb=base, state_mb=state_mb, peak_mb=_rss_mb("VmHWM") - base, peak_total_mb=total,
                time_per_iter=per_iter)


def measure_memory(algo: str, d: int, p: int, T: int, loops: int = 1, timeout: int = 1800) -> dict:
    """Run :func:`probe_memory` in a fresh interpreter (the protocol of ``experiments/lrvga_table01_memory.py``,
    [LRVGA] Tables 1-2); returns ``base_mb``,
    ``state_mb`` (initial state), ``peak_mb`` (peak RSS of the timed run minus the baseline),
    ``peak_total_mb`` (whole-process peak minus the post-warm-up RSS) and ``time_per_iter`` (s)."""
    cfg = json.dumps(dict(algo=algo, d=d, p=p, T=T, loops=loops))
    # A fixed glibc mmap threshold (64 KiB) disables the dynamic one: every buffer above it is
    # mmapped and returned to the system when freed, so RSS tracks the live buffers (otherwise a
    # freed 8-32 MB buffer stays in the heap and a later one reuses it unseen).
    # One OpenBLAS thread: its busy-waiting threads slow LAPACK calls badly on a loaded machine.
    env = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.mmap_threshold=65536",
               MALLOC_MMAP_THRESHOLD_="65536", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "experiments.common", "--probe", cfg], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"memory probe {cfg} failed (rc {proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


MEMORY_HEADER = ["algorithm", "d", "p", "time_per_iteration_s", "measured_peak_MB", "measured_initial_state_MB",
                 "model_MB", "measured_over_model", "whole_process_peak_MB", "baseline_rss_MB"]


# --------------------------------------------------------------------------- entry points

def cli(run: Callable[[bool, Path], dict], doc: str | None = None) -> None:
    """Command line of one script: ``python -m experiments.<name> [--quick]``."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--quick", action="store_true", help="reduced sizes (seconds)")
    args = parser.parse_args()
    summary = run(args.quick, results_dir(args.quick))
    for key, value in summary.items():
        print(f"{key}: {value}")


def quick_fixture(module):
    """A module-scoped pytest fixture returning ``(module.run(True, out), out)``, ``out`` a fresh
    temporary folder: each test module runs each experiment once, at quick sizes.

    ``tests/test_run_all.py`` checks that every module :mod:`experiments.run_all` discovers is
    passed to this function by some test file.
    """
    import pytest

    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory):
        out = tmp_path_factory.mktemp(module.__name__.rsplit(".", 1)[-1])
        return module.run(True, out), out

    return fixture


if __name__ == "__main__" and sys.argv[1:2] == ["--probe"]:  # the child process of measure_memory()
    print("RESULT " + json.dumps(probe_memory(**json.loads(sys.argv[2]))))
