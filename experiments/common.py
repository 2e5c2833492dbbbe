"""Shared plumbing of the experiment scripts.

Every script ``experiments/<paper>_<item>.py`` defines ``run(quick: bool, out: Path) -> dict``:
it writes its PNG and CSV files into ``out`` and returns the headline numbers (final KLs etc.)
that ``REPORT.md`` quotes and the tests check. ``quick=True`` runs reduced sizes in seconds.

BLAS threads: ``experiments/__init__.py`` defaults ``OPENBLAS_NUM_THREADS`` to 1 before anything
imports NumPy (the Makefile and ``tests/conftest.py`` set it too).
"""
from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxrvga as jr  # noqa: E402
from jaxrvga import data, metrics, models  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: Module-name prefixes that run_all discovers, in this order.
PREFIXES = ("rvga_", "lrvga_", "klprox_", "dual_", "headtohead_")


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


# --------------------------------------------------------------------------- L-RVGA logistic experiments
# (Figs 3-5 of [LRVGA])

MODEL = models.logistic()
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
        lap = jax.jit(lambda X, y, m, P: jr.laplace(MODEL, X, y, m, P))(self.X, self.y, self.m0, self.P0)
        self.lap_mean, self.lap_cov, self.lap_ok = lap.mean, lap.cov, bool(lap.converged)
        self.kl_laplace = float(full_kl(self.lap_mean, self.lap_cov, self.z, self.X, self.y, self.m0,
                                        sigma0**2))
        self.terms_laplace = kl_terms(self.lap_mean, self.lap_cov, self.z_big, self.X, self.y, self.m0,
                                      sigma0**2)

    def stride(self):
        return max(1, self.N // N_POINTS)


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
