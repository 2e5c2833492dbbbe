"""The R-VGA comparisons of [RVGA] Figs 3-16: the four filters and Laplace on the authors'
generator, MC-KL ([RVGA] eqs. 92-94) against the final posterior with common random numbers
(:func:`compare`); the 2-D posterior (:func:`posterior_grid`, :func:`log_evidence_2d`); the plots
and CSVs of the ``rvga_*`` scripts.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from experiments.common import MODEL, kl_terms, paired, progress, pyplot, save_figure, write_columns, write_csv

import jaxrvga as jr  # noqa: E402
from jaxrvga.baselines import data
from jaxrvga.baselines import metrics  # noqa: E402

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
def _laplace(X, y, m0, P0):
    lap = jr.baselines.laplace.laplace(MODEL, X, y, m0, P0)
    return lap.mean, lap.cov, lap.converged


class Comparison(NamedTuple):
    """Output of :func:`compare`. ``kl[name]``: the MC-KL at the times ``t`` (t = 0..N, t = 0 the
    prior; every ``kl_stride``-th t and N when :func:`compare` is given a stride)."""

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
    t: np.ndarray  # the times of the curves kl[name]
    means: Optional[dict] = None  # name -> (N + 1, d), when keep=True
    covs: Optional[dict] = None  # name -> (N + 1, d, d), when keep=True


def paired_stderr(res: "Comparison", a: str, b: str | None = None) -> float:
    """MC standard error of the final MC-KL of ``a`` (``b=None``) or of the difference ``a - b``.

    The same base normals serve every method (common random numbers), so the difference of two
    final MC-KLs is far more precise than either value.
    """
    return paired(res.terms[a], None if b is None else res.terms[b])[1]


def compare(s, N, d, c, seed, sigma0, mu0, *, keep=False, quick=True, desc="", kl_stride=1) -> Comparison:
    """Run the four filters and Laplace on the authors' generator; MC-KL curves against the final posterior.

    ``kl_stride``: the curves at t = 0, kl_stride, ..., and N (1: every t). Each point costs an
    M x N likelihood evaluation, so quick sizes take a stride; the final MC-KL is the same.
    """
    ds = data.logistic_data(s, N, d, c, seed=seed)
    m0 = data.prior_mean(mu0, d)
    P0 = sigma0**2 * np.eye(d)
    z = metrics.base_normals(d, RVGA_M_KL, seed=seed)
    X, y = jnp.asarray(ds.X), jnp.asarray(ds.y)
    kl, means, covs, max_res, se, finals = {}, {}, {}, 0.0, {}, {}
    t = np.union1d(np.arange(0, N + 1, kl_stride), [N])
    for name in progress(METHODS, desc or f"d={d} N={N}", quick):
        flt = RVGA_FILTERS[name]
        finals[name], (ms, cs, res) = jr.run(flt, flt.init(m0, P0), X, y, _trace)
        se[name] = np.asarray(kl_terms(ms[-1], cs[-1], z, X, y, m0, P0))
        ms = jnp.concatenate([jnp.asarray(m0)[None], ms])
        cs = jnp.concatenate([jnp.asarray(P0)[None], cs])
        at = slice(None) if kl_stride == 1 else t
        kl[name] = np.asarray(kl_curve(ms[at], cs[at], z, X, y, m0, P0))
        if name == "implicit":
            max_res = float(jnp.max(res))
        if keep:
            means[name], covs[name] = np.asarray(ms), np.asarray(cs)
    lm, lc, ok = _laplace(X, y, jnp.asarray(m0), jnp.asarray(P0))
    kl_lap = float(kl_curve(lm[None], lc[None], z, X, y, m0, P0)[0])
    se["Laplace"] = np.asarray(kl_terms(lm, lc, z, X, y, m0, P0))
    finals["Laplace"] = RVGA_FILTERS["implicit"].init(lm, lc)
    return Comparison(ds, m0, P0, kl, kl_lap, np.asarray(lm), np.asarray(lc), bool(ok), max_res,
                      se, finals, t, means if keep else None, covs if keep else None)


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
    t = res.t
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
    N = int(res.t[-1])
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
    write_columns(path, {"t": res.t, **kls, "kl_Laplace": res.kl_laplace})


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

