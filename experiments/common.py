"""Shared plumbing of the experiment scripts.

Every script ``experiments/<paper>_<item>.py`` defines ``run(quick: bool, out: Path) -> dict``:
it writes its PNG and CSV files into ``out`` and returns the headline numbers (final KLs etc.)
that ``REPORT.md`` quotes and the tests check. ``quick=True`` runs reduced sizes in seconds.

Here, by section: CSV and figures; data splits; running filters (:func:`run_snapshots`); MC-KL
terms of logistic beliefs (:func:`kl_terms`, :func:`paired`); entry points (:func:`cli`,
:func:`quick_fixture`). By paper: :mod:`experiments.common_rvga` ([RVGA] Figs 3-16),
:mod:`experiments.common_lrvga` ([LRVGA] Figs 2-5), :mod:`experiments.common_headtohead` (the
head-to-head comparisons) and :mod:`experiments.memory` (the memory probes of [LRVGA] Tables 1-2).

BLAS threads: ``experiments/__init__.py`` defaults ``OPENBLAS_NUM_THREADS`` to 1 before anything
imports NumPy (the Makefile and ``tests/conftest.py`` set it too).
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from jaxrvga import models
from jaxrvga.baselines import metrics  # noqa: E402

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


# --------------------------------------------------------------------------- MC-KL terms of logistic beliefs

#: :func:`jaxrvga.baselines.metrics.mc_kl_logistic_terms`, compiled (``batch_size`` static).
kl_terms = jax.jit(metrics.mc_kl_logistic_terms, static_argnames="batch_size")


def paired(terms_a, terms_b=None):
    """Mean and MC standard error of an MC-KL from its :func:`kl_terms` (of the difference of two
    beliefs' MC-KLs when ``terms_b`` is given: with common random numbers far more precise than either)."""
    v = np.asarray(terms_a) - (0.0 if terms_b is None else np.asarray(terms_b))
    return float(np.mean(v)), float(np.std(v, ddof=1) / np.sqrt(len(v)))


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

    ``tests/reproduction/test_run_all.py`` checks that every module :mod:`experiments.run_all` discovers is
    passed to this function by some test file.
    """
    import pytest

    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory):
        out = tmp_path_factory.mktemp(module.__name__.rsplit(".", 1)[-1])
        return module.run(True, out), out

    return fixture

