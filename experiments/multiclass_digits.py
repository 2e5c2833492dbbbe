"""Multi-class logistic (softmax) regression on scikit-learn's 10-class digits (issue 16).

Data: ``sklearn.datasets.load_digits`` (1797 x 64, 10 classes), one random 70/30 train/test split
(:func:`experiments.common.make_split`, seed :data:`SEED`), features standardised with the training
split's mean and std (constant pixels only centred), plus an intercept column: ``d = 65`` features,
``D = 65 * 10 = 650`` parameters of ``jr.models.softmax_regression(65, 10)``. Prior
``N(0, v I_D)``. The training order is the split's random permutation: that is the stream.

Methods (each filter makes one online pass over the 1258 training digits, one at a time):

* ``EKF``: ``jr.ekf(model)``, full 650 x 650 covariance ([RVGA] Thm 3, eqs. 54-55).
* ``L-RVGA ekf`` / ``L-RVGA sampled``: ``jr.lrvga(model, rank=p, scheme=...)``, p = 10 (the
  library's default projection), trace-matched start ``jr.lowrank.init_factors``.
* ``... published``: the same with ``published=True`` (the paper's algorithm).
* ``sklearn``: ``LogisticRegression`` (lbfgs, multinomial), batch, ``fit_intercept=False`` on the
  same intercept column and ``C = v``: its objective ``C sum_n loss_n + |w|^2 / 2`` is the negative
  log posterior under the same prior, so it is the MAP estimate (a point, no covariance).

Prior variance ``v``: every method picks its own ``v`` from :data:`PRIOR_VARS` by the log-loss on a
validation split (the last :data:`VAL_FRACTION` of the training stream; the filters are run on
the rest), never the test set; it is then refitted on the whole training split.

Scores on the test split: accuracy (argmax of the predictive probabilities), log-loss (nats per
test digit) of the predictive class probabilities ``jr.predictive(state, X, model=model)``, which
take the logits' Gaussian ``N(Theta^T x, J P J^T)`` through the pairwise inverse probit
(``jr.kernels.special.softmax_probit``, an approximation); as a check also the Monte Carlo predictive
(``key=``, :data:`MC_SAMPLES` exact draws of the belief) and the plug-in ``softmax(Theta_mean^T x)``;
the expected calibration error (:func:`jaxrvga.baselines.metrics.ece`, 10 equal-width confidence bins)
of the closed-form and of the Monte Carlo probabilities; time per training observation of
``jr.run`` over the training split (compile excluded: the validation fits ran the same compiled
program first; sklearn: its whole batch fit divided by the training size); the steps whose
``info.converged`` is False; ``skipped_max``, those of them after which the mean had not moved (a
step the guard skips keeps the mean and is flagged, so this bounds the skipped steps); the mean
``info.dropped`` (default low-rank projection only: the fraction of each step's curvature that
rank p could not keep; nan where not measured).
Quick mode: 286 digits (200 for training), p = 5, a 2-point grid of ``v``, 500 Monte Carlo draws.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from experiments.common import Split, cli, make_split, pyplot, results_dir, save_figure, write_csv

import jaxrvga as jr  # noqa: E402
from jaxrvga.baselines.metrics import ece  # noqa: E402

K = 10
SEED = 0
TRAIN_FRACTION = 0.7
#: Fraction of the training stream held out to choose the prior variance.
VAL_FRACTION = 0.2
PRIOR_VARS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
QUICK_PRIOR_VARS = (0.1, 1.0)
RANK = 10
QUICK_RANK = 5
MC_SAMPLES = 4000
FILTERS = ("EKF", "L-RVGA ekf", "L-RVGA sampled", "L-RVGA ekf published", "L-RVGA sampled published")
METHODS = FILTERS + ("sklearn",)


def load(quick: bool) -> Split:
    """The standardised 70/30 split with an intercept column (quick: 286 digits, 200 training)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return make_split(digits.data.astype(np.float64), digits.target.astype(np.int64), SEED,
                      TRAIN_FRACTION, standardise=True, n_max=286 if quick else None, intercept=True)


class Method(NamedTuple):
    """A filter and ``init(prior_var) -> state``."""

    flt: jr.Filter
    init: Callable


def make_methods(d: int, rank: int) -> dict[str, Method]:
    """The filters of :data:`FILTERS` for ``softmax_regression(d, K)``, each with its prior ``N(0, v I)``."""
    model = jr.models.softmax_regression(d, K)
    D = d * K
    key = jax.random.PRNGKey(SEED)
    k_init, k_run = jax.random.split(key)

    def dense(flt):
        return Method(flt, lambda v: flt.init(jnp.zeros(D), v * jnp.eye(D)))

    def low_rank(flt, sampled):
        def init(v):
            W0, psi0 = jr.lowrank.init_factors(k_init, D, rank, v)
            return flt.init(jnp.zeros(D), W0, psi0, key=k_run if sampled else None)
        return Method(flt, init)

    out = {"EKF": dense(jr.ekf(model))}
    for published in (False, True):
        tag = " published" if published else ""
        for scheme in ("ekf", "sampled"):
            flt = jr.lrvga(model, rank=rank, scheme=scheme, published=published)
            out[f"L-RVGA {scheme}{tag}"] = low_rank(flt, scheme == "sampled")
    return out


def log_loss(probs, y) -> float:
    """Mean ``-log p(y_n)`` over the rows of ``probs`` (n, K)."""
    p = np.asarray(probs)[np.arange(len(y)), np.asarray(y)]
    return float(-np.mean(np.log(p)))


def accuracy(probs, y) -> float:
    return float(np.mean(np.argmax(np.asarray(probs), axis=1) == np.asarray(y)))


def predict(state, X, model, key=None, num_samples: int = MC_SAMPLES):
    """Predictive class probabilities (n, K): closed form, or Monte Carlo given a ``key``."""
    return np.asarray(jr.predictive(state, jnp.asarray(X), model=model, key=key, num_samples=num_samples).mean)


def plug_in(state, X):
    """``softmax(Theta_mean^T x)`` for each row of ``X``: the mean's prediction, no covariance."""
    Theta = np.asarray(state.mean).reshape(X.shape[1], K)
    return np.asarray(jax.nn.softmax(jnp.asarray(X @ Theta), axis=-1))


class Fit(NamedTuple):
    """A filter's final state and its report over the pass."""

    state: object
    nonconverged: int  # steps with info.converged False (a step the guard skips is one of them)
    skipped_max: int  # non-converged steps after which the mean had not moved: >= the skipped steps
    dropped: float  # mean info.dropped (low rank: fraction of the curvature rank p could not keep)
    seconds: float


def _trace(state, x, y):
    return state.info, state.mean


def fit(method: Method, v, X, y, length: int) -> Fit:
    """One pass of the filter from its prior ``v``.

    ``jr.run(..., bucket=length)`` pads the stream to ``length`` steps (padded steps change
    nothing), so the validation fits and the final fit on the whole training split run one compiled
    program: the final fit, timed, comes after the validation fits have compiled it."""
    state0 = method.init(v)
    t0 = time.perf_counter()
    state, (info, means) = jax.block_until_ready(jr.run(method.flt, state0, X, y, trace_fn=_trace, bucket=length))
    seconds = time.perf_counter() - t0
    means = np.concatenate([np.asarray(state0.mean)[None], np.asarray(means)])
    bad = ~np.asarray(info.converged)
    still = np.all(means[1:] == means[:-1], axis=1)  # also on a confident right answer (zero gradient)
    return Fit(state, int(np.sum(bad)), int(np.sum(bad & still)), float(np.mean(info.dropped)), seconds)


def fit_sklearn(v, X, y):
    """Multinomial MAP with prior ``N(0, v I)`` (no separate intercept: the column of ones): ``(model, seconds)``."""
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=v, fit_intercept=False, max_iter=5000, tol=1e-8)
    t0 = time.perf_counter()
    clf.fit(X, y)
    return clf, time.perf_counter() - t0


def choose_prior_var(method, Xtr, ytr, grid, model):
    """The ``v`` of ``grid`` with the smallest validation log-loss: ``(v, [(v, log-loss, acc)])``.

    The validation split is the last :data:`VAL_FRACTION` of the training stream; the filter (or
    sklearn, ``method=None``) is fitted on the rest."""
    n_fit = int(round((1 - VAL_FRACTION) * len(ytr)))
    Xf, yf, Xv, yv = Xtr[:n_fit], ytr[:n_fit], Xtr[n_fit:], ytr[n_fit:]
    scores = []
    for v in grid:
        if method is None:
            probs = fit_sklearn(v, Xf, yf)[0].predict_proba(Xv)
        else:
            probs = predict(fit(method, v, jnp.asarray(Xf), jnp.asarray(yf), len(ytr)).state, Xv, model)
        scores.append((v, log_loss(probs, yv), accuracy(probs, yv)))
    best = min(scores, key=lambda s: s[1] if np.isfinite(s[1]) else np.inf)
    return best[0], scores


COLUMNS = ["method", "prior_var", "accuracy", "log_loss", "log_loss_mc", "log_loss_plugin", "ece", "ece_mc",
           "us_per_obs", "nonconverged_steps", "skipped_max", "mean_dropped", "steps"]


def evaluate(quick: bool = False):
    """Every method on the split: ``(rows as COLUMNS, sweep rows, {method: test probabilities}, split)``."""
    sp = load(quick)
    d = sp.Xtr.shape[1]
    model = jr.models.softmax_regression(d, K)
    methods = make_methods(d, QUICK_RANK if quick else RANK)
    grid = QUICK_PRIOR_VARS if quick else PRIOR_VARS
    num_mc = 500 if quick else MC_SAMPLES
    Xtr, ytr, yte = jnp.asarray(sp.Xtr), jnp.asarray(sp.ytr), sp.yte
    rows, sweep, probs = [], [], {}
    for name in METHODS:
        method = methods.get(name)
        v, scores = choose_prior_var(method, sp.Xtr, sp.ytr, grid, model)
        sweep += [[name, *s] for s in scores]
        if method is None:
            clf, seconds = fit_sklearn(v, sp.Xtr, sp.ytr)
            p = clf.predict_proba(sp.Xte)
            nan = float("nan")
            rows.append([name, v, accuracy(p, yte), log_loss(p, yte), nan, log_loss(p, yte), ece(p, yte), nan,
                         1e6 * seconds / len(ytr), 0, 0, nan, len(ytr)])
        else:
            f = fit(method, v, Xtr, ytr, len(ytr))
            dropped = float("nan") if "published" in name else f.dropped  # published: not measured
            p = predict(f.state, sp.Xte, model)
            p_mc = predict(f.state, sp.Xte, model, key=jax.random.PRNGKey(SEED + 1), num_samples=num_mc)
            rows.append([name, v, accuracy(p, yte), log_loss(p, yte), log_loss(p_mc, yte),
                         log_loss(plug_in(f.state, sp.Xte), yte), ece(p, yte), ece(p_mc, yte),
                         1e6 * f.seconds / len(ytr), f.nonconverged, f.skipped_max, dropped, len(ytr)])
        probs[name] = p
    return rows, sweep, probs, sp


def reliability(probs, y, bins: int = 10):
    """Per confidence bin: ``(mean confidence, accuracy, count)`` (bins with no point: nan)."""
    conf = np.max(probs, axis=1)
    hit = np.argmax(probs, axis=1) == y
    idx = np.minimum((conf * bins).astype(int), bins - 1)
    out = []
    for b in range(bins):
        sel = idx == b
        out.append((conf[sel].mean() if sel.any() else np.nan, hit[sel].mean() if sel.any() else np.nan,
                    int(sel.sum())))
    return np.array(out)


def plot(out: Path, rows, probs, y):
    plt = pyplot()
    fig, axs = plt.subplots(1, 2, figsize=(12, 4.6))
    ax = axs[0]
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="calibrated")
    for name, p in probs.items():
        r = reliability(p, y)
        ok = r[:, 2] > 0
        ax.plot(r[ok, 0], r[ok, 1], "o-", ms=3, label=name)
    ax.set_xlabel("confidence (max predictive probability)")
    ax.set_ylabel("accuracy in the bin")
    ax.set_title("reliability diagram, 10 bins (test split)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    ax = axs[1]
    x = np.arange(len(rows))
    ax.bar(x - 0.27, [r[3] for r in rows], width=0.27, label="log-loss (closed form)")
    ax.bar(x, [r[4] for r in rows], width=0.27, label="log-loss (Monte Carlo)")
    ax.bar(x + 0.27, [1 - r[2] for r in rows], width=0.27, label="error rate")
    ax.set_xticks(x)
    ax.set_xticklabels([r[0] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_title("test log-loss (nats) and error rate", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    save_figure(fig, out / "multiclass_digits.png", "softmax regression on sklearn digits (10 classes, D = 650)")


def run(quick: bool, out: Path) -> dict:
    rows, sweep, probs, sp = evaluate(quick)
    write_csv(out / "multiclass_digits.csv", COLUMNS, rows)
    write_csv(out / "multiclass_digits_prior.csv", ["method", "prior_var", "val_log_loss", "val_accuracy"], sweep)
    plot(out, rows, probs, sp.yte)
    summary = {}
    for r in rows:
        for k, c in (("accuracy", 2), ("log_loss", 3), ("log_loss_mc", 4), ("ece", 6), ("us_per_obs", 8),
                     ("nonconverged", 9), ("skipped_max", 10), ("prior_var", 1)):
            summary[f"{r[0]}_{k}"] = r[c]
    return summary


def main(quick: bool = False) -> dict:
    """Run into ``experiments/results`` (``results/quick`` when ``quick``); returns the summary."""
    return run(quick, results_dir(quick))


if __name__ == "__main__":
    cli(run, __doc__)
