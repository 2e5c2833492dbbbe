"""Head-to-head on real data: Bayesian logistic regression with seven Gaussian approximations.

Data sets (``jr.baselines.data``):

* **breast cancer** (LIBSVM ``breast-cancer_scale``, 683 x 10, features in [-1, 1], plus an
  intercept: d = 11). Prior ``N(0, 10^2 I)``: with features in [-1, 1] a weight of 10 moves the
  logit by up to 10, so the prior is weak and the 478 training points dominate.
* **digits 3 vs 5** (scikit-learn's 8x8 digits, 365 x 64, standardised with the training split's
  mean and std, constant pixels left at 0, plus an intercept: d = 65). Stand-in for the USPS 3-vs-5
  task of [KLPROX] Table 3, which is not bundled. Prior ``N(0, I)``: the 255 training points are
  linearly separable in 65 dimensions, so a flat prior has no finite posterior mode worth speaking
  of; with standardised features ``sigma0 = 1`` gives a prior logit standard deviation of about
  ``sqrt(65) ~ 8``, which is still far from informative about the sign of any single weight.

Random 70/30 train/test splits (5 splits); the training order is the split's random permutation
(that is the stream order of the recursive filters). Quick mode: breast cancer only, one split of
200 random points (140 for training), a 3-point ``delta`` grid.

Methods, all returning a Gaussian ``N(mean, cov)``:

* ``R-VGA``: ``jr.rvga(logistic, "implicit")``, one pass, full covariance ([RVGA] eqs. 69-77).
* ``L-RVGA p``: ``lrvga(logistic, rank=p, scheme="implicit")``, one pass, 1 EM inner loop,
  trace-matched initialisation ``jr.lowrank.init_factors`` ([LRVGA] App. D), p in {2, 10}.
* ``KL-prox``: ``jr.baselines.klprox.fit`` (batch, [KLPROX] eqs. 16-17, the paper's r = 0.8 with the
  library's default ELBO-vetted step control, which shrinks ``1 - r_k`` where the fixed step would
  lower the ELBO), with the same 64-node Gauss-Hermite expectations as the ELBO below, so it
  maximises exactly the reported ELBO. Each row records the final step parameter ``r_final`` and
  the number of ``rejected`` proposals (:data:`STEP_COLUMNS`).
* ``Dual-JJ``: ``jr.baselines.dual.fit`` ([DUAL] eq. 20 with the Jaakkola-Jordan bound; closed-form dual
  solve per ``xi``, SQUAREM on the ``xi`` EM). ``iterations`` counts its dual solves.
* ``Laplace``: ``jr.baselines.laplace.laplace`` (MAP + inverse Hessian).
* ``Mean-field``: written here (:func:`mean_field_fit`): diagonal Gaussian maximising the same
  Gauss-Hermite ELBO over ``(m, log s)`` with optax L-BFGS. Baseline of [KLPROX] Table 2.
* ``MAP plug-in``: ``sig(x^T m_MAP)`` (the Laplace mean, no covariance): [KLPROX] Table 2's MAP row.

Scores: test log-loss (nats per test point) with the inverse-probit predictive
``sig(k(x^T V x) x^T m)`` (``jr.baselines.metrics.logistic_log_loss``) for every Gaussian; the ELBO of
:func:`elbo_gh` (exact expected log-likelihood by Gauss-Hermite on each 1-D projection, no probit
approximation, minus ``KL(q || prior)``); and wall time of one fit of the ahead-of-time compiled
function (``jax.jit(f).lower(...).compile()``; the compile time is reported separately). The
trivial predictor (training-class frequency) gives the reference log-loss.

Hyper-parameter sweep ([KLPROX] Table 2 protocol, prior ``Sigma = delta I``): KL-prox (r = 0.8,
step control as above) and mean-field over a grid of ``delta`` = logspace(-2, 3, 11); each selects
``delta`` by its own ELBO ("Neg-Log-Lik" = -ELBO at the selected ``delta``); we report the test
log-loss at the selected ``delta``, the best test log-loss on the grid, and the total time over the
grid. Fits whose solver did not converge (if any) are excluded from the selection and from "best".
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks.machine import timed
from experiments.common import Split, cli, progress, pyplot, save_figure, write_csv
from experiments.common import make_split as common_split
from experiments.common_headtohead import STEP_COLUMNS, float64_scalar, step_report, trivial_log_loss

import jaxrvga as jr  # noqa: E402
from jaxrvga import lrvga  # noqa: E402

#: Gauss-Hermite nodes of the ELBO (and of KL-prox's expectations).
GH_NODES = 64
#: Datasets: name -> (loader, prior standard deviation sigma0, standardise features?).
DATASETS = {
    "breast_cancer": (jr.baselines.data.load_breast_cancer, 10.0, False),
    "digits_3v5": (lambda: jr.baselines.data.load_digits_pair(3, 5), 1.0, True),
}
#: Quick mode: one split of 200 points (140 for training) of breast cancer only.
QUICK_DATASETS = ("breast_cancer",)
LRVGA_RANKS = (2, 10)
METHODS = ("R-VGA", "L-RVGA p=2", "L-RVGA p=10", "KL-prox", "Dual-JJ", "Laplace", "Mean-field",
           "MAP plug-in")
GAUSSIAN_METHODS = METHODS[:-1]
TRAIN_FRACTION = 0.7
SEED = 0


# ---------------------------------------------------------------------------------------------
# Scores


def expected_log_lik_gh(mean, cov_or_var, X, y, nodes: int = GH_NODES):
    """``sum_n E_{theta ~ N(mean, V)}[log p(y_n | x_n^T theta)]`` by Gauss-Hermite on each projection.

    ``a_n = x_n^T theta ~ N(x_n^T m, x_n^T V x_n)`` exactly, so one 1-D quadrature per point gives
    the expectation without the inverse-probit approximation. ``cov_or_var``: (d, d) or a (d,)
    diagonal.
    """
    z, w = jr.kernels.special.gauss_hermite(nodes)
    z, w = jnp.asarray(z, X.dtype), jnp.asarray(w, X.dtype)
    m = X @ mean
    V = jnp.asarray(cov_or_var)
    v = X**2 @ V if V.ndim == 1 else jnp.einsum("nd,de,ne->n", X, V, X)
    sign = 2.0 * y - 1.0
    a = m[:, None] + jnp.sqrt(v)[:, None] * z[None, :]
    return jnp.sum(jax.nn.log_sigmoid(sign[:, None] * a) @ w)


def elbo_gh(mean, cov, X, y, prior_mean, prior_cov, nodes: int = GH_NODES):
    """ELBO of ``q = N(mean, cov)``: ``E_q[log p(y | X, theta)] - KL(q || N(prior_mean, prior_cov))``.

    A lower bound on the log marginal likelihood ([DUAL] eq. 11, [KLPROX] eq. 10).
    """
    return (expected_log_lik_gh(mean, cov, X, y, nodes)
            - jr.baselines.metrics.gaussian_kl(mean, cov, prior_mean, prior_cov))


def map_log_loss(mean, X, y):
    """Plug-in log-loss ``-log sig((2y - 1) x^T m)`` (no predictive variance)."""
    return float(-jnp.mean(jax.nn.log_sigmoid((2.0 * y - 1.0) * (X @ mean))))


# ---------------------------------------------------------------------------------------------
# Mean-field baseline (written here)


class MeanFieldResult(NamedTuple):
    """Diagonal Gaussian ``N(mean, diag(var))``; ``grad_norm`` of the negative ELBO at the end."""

    mean: jax.Array
    var: jax.Array
    iterations: jax.Array
    grad_norm: jax.Array


def mean_field_fit(X, y, prior_mean, prior_var, max_iter: int = 2000, tol=1e-6,
                   nodes: int = GH_NODES) -> MeanFieldResult:
    """Mean-field Gaussian VI: maximise the Gauss-Hermite ELBO over ``q = N(m, diag(s^2))``.

    The objective is :func:`elbo_gh` restricted to diagonal covariances, with the closed-form
    ``KL(N(m, diag s^2) || N(mu, diag(prior_var)))``, optimised over ``(m, log s)`` by optax
    L-BFGS (zoom line search), started at the prior; stops when ``||grad|| < tol``.
    ``prior_var``: (d,) prior variances (diagonal prior).
    """
    d = X.shape[1]

    def neg_elbo(params):
        m, log_s = params
        var = jnp.exp(2.0 * log_s)
        kl = 0.5 * jnp.sum(var / prior_var + (m - prior_mean) ** 2 / prior_var - 1.0
                           - 2.0 * log_s + jnp.log(prior_var))
        return kl - expected_log_lik_gh(m, var, X, y, nodes)

    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(neg_elbo)

    def body(carry):
        params, state = carry
        value, grad = value_and_grad(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=neg_elbo)
        return optax.apply_updates(params, updates), state

    def cond(carry):
        _, state = carry
        k = optax.tree_utils.tree_get(state, "count")
        g = optax.tree_utils.tree_norm(optax.tree_utils.tree_get(state, "grad"))
        return (k == 0) | ((k < max_iter) & (g >= tol))

    params = (jnp.asarray(prior_mean, X.dtype) * jnp.ones(d, X.dtype),
              0.5 * jnp.log(jnp.asarray(prior_var, X.dtype)) * jnp.ones(d, X.dtype))
    params, state = jax.lax.while_loop(cond, body, (params, opt.init(params)))
    g = jax.grad(neg_elbo)(params)
    return MeanFieldResult(params[0], jnp.exp(2.0 * params[1]),
                           optax.tree_utils.tree_get(state, "count"), optax.tree_utils.tree_norm(g))


# ---------------------------------------------------------------------------------------------
# Fitting: every method as a jitted (X, y, mu0, P0) -> dict(mean, cov, ok, iterations, residual)


def make_fitters(d: int, sigma0: float) -> dict[str, Callable]:
    """One jitted fit per method. Each returns a dict with ``mean``, ``cov``, ``ok`` (the solver's own
    convergence flag), ``iterations`` and ``residual`` (its stopping criterion; 0 for the one-pass
    filters, whose ``ok`` reports every step's implicit root solve); KL-prox adds ``r_final`` and
    ``rejected`` (its step control's report), Dual-JJ adds ``jj_elbo``, the Jaakkola-Jordan lower
    bound on its own ELBO ([DUAL] eq. 11 with the JJ LVB)."""
    model = jr.models.logistic()
    rvga_flt = jr.rvga(model, "implicit")
    lr_flts = {p: lrvga(model, rank=p, scheme="implicit", published=True) for p in LRVGA_RANKS}
    key = jax.random.PRNGKey(SEED)
    zero = jnp.zeros(())

    def one_pass(flt, state, X, y):
        final, info = jax.lax.scan(lambda s, xy: (flt.update(s, *xy),) * 2, state, (X, y))
        steps = info.info
        return final, jnp.all(steps.converged), jnp.max(steps.residual)

    @jax.jit
    def fit_rvga(X, y, mu0, P0):
        final, ok, res = one_pass(rvga_flt, rvga_flt.init(mu0, P0), X, y)
        return dict(mean=final.mean, cov=final.cov, ok=ok, iterations=jnp.asarray(1), residual=res)

    def fit_lr(p):
        W0, psi0 = jr.lowrank.init_factors(key, d, p, sigma0**2)

        @jax.jit
        def fit(X, y, mu0, P0):
            del P0  # the prior sigma0^2 I is encoded in (W0, psi0), trace-matched ([LRVGA] App. D)
            flt = lr_flts[p]
            final, ok, res = one_pass(flt, flt.init(mu0, W0, psi0), X, y)
            return dict(mean=final.mean, cov=jr.kernels.lowrank.to_dense_covariance(final.W, final.psi),
                        ok=ok, iterations=jnp.asarray(1), residual=res)
        return fit

    @jax.jit
    def fit_klprox(X, y, mu0, P0):
        r = klprox_fit(model, X, y, mu0, P0)
        return dict(mean=r.mean, cov=r.cov, ok=r.converged, iterations=r.iterations,
                    residual=r.residual, r_final=r.r, rejected=r.rejected)

    @jax.jit
    def fit_dual(X, y, mu0, P0):
        r = jr.baselines.dual.fit(model, X, y, mu0, P0)
        jj = jr.baselines.dual.lvb_elbo(jr.baselines.dual.jj_conjugate(r.xi), X, y, mu0, P0, r.mean, r.cov)
        return dict(mean=r.mean, cov=r.cov, ok=r.converged, iterations=r.iterations,
                    residual=r.residual, jj_elbo=jj)

    @jax.jit
    def fit_laplace(X, y, mu0, P0):
        r = jr.baselines.laplace.laplace(model, X, y, mu0, P0)
        return dict(mean=r.mean, cov=r.cov, ok=r.converged, iterations=r.iterations, residual=zero)

    @jax.jit
    def fit_mf(X, y, mu0, P0):
        r = mean_field_fit(X, y, mu0, jnp.diag(P0))
        return dict(mean=r.mean, cov=jnp.diag(r.var), ok=r.grad_norm < 1e-6,
                    iterations=r.iterations, residual=r.grad_norm)

    fits = {"R-VGA": fit_rvga}
    for p in LRVGA_RANKS:
        fits[f"L-RVGA p={p}"] = fit_lr(p)
    fits.update({"KL-prox": fit_klprox, "Dual-JJ": fit_dual, "Laplace": fit_laplace,
                 "Mean-field": fit_mf})
    return fits


def klprox_fit(model, X, y, mu0, P0):
    """``jr.baselines.klprox.fit`` as run here: the paper's ``r = 0.8`` ([KLPROX] beta = 0.25) with the
    library's default step control, tolerance 1e-9, the ELBO's :data:`GH_NODES` expectations.

    At most 10000 iterations: where the step control has to keep the step short (``r_k`` up to
    0.975 at ``delta = 1000`` on digits) convergence is linear and slow (up to ~8000 iterations).
    """
    return jr.baselines.klprox.fit(model, X, y, mu0, P0, r=0.8, max_iter=10000, tol=1e-9,
                         num_points=GH_NODES)


# ---------------------------------------------------------------------------------------------
# Data


def make_split(X, y, seed: int, standardise: bool, n_max=None) -> Split:
    """Random 70/30 split (:data:`TRAIN_FRACTION`) with an intercept column (:func:`common.make_split`)."""
    return common_split(X, y, seed, TRAIN_FRACTION, standardise, n_max, intercept=True)


# ---------------------------------------------------------------------------------------------
# Experiment

#: Columns of the per-split CSV.
COLUMNS = ["split", "method", "test_log_loss", "elbo", "time_s", "solver_ok", "iterations",
           "residual", "jj_elbo"] + STEP_COLUMNS


def head_to_head(name: str, n_splits: int, quick: bool, n_max=None):
    """Scores of every method on ``n_splits`` splits of data set ``name``.

    Returns ``(rows, compile_s)``: rows as :data:`COLUMNS` (ELBO nan for the MAP plug-in and the
    trivial predictor, ``jj_elbo`` nan except for Dual-JJ, :data:`STEP_COLUMNS` nan except for
    KL-prox; there is also one ``prior`` row per split with the prior's ELBO) and the compile time
    of each method.
    """
    loader, sigma0, standardise = DATASETS[name]
    ds = loader()
    d = ds.X.shape[1] + 1
    fits = make_fitters(d, sigma0)
    mu0, P0 = jnp.zeros(d), sigma0**2 * jnp.eye(d)
    nan = float("nan")
    fits = dict(fits)
    rows, compile_s = [], {}
    for s in progress(range(n_splits), f"head-to-head {name}", quick):
        sp = make_split(ds.X, ds.y, SEED + s, standardise, n_max)
        Xtr, ytr, Xte, yte = map(jnp.asarray, sp)
        for m, fn in fits.items():
            if s == 0:  # ahead-of-time compile, timed on its own; later calls run the executable
                fits[m], compile_s[m] = timed(lambda: fn.lower(Xtr, ytr, mu0, P0).compile())
            r, t = timed(fits[m], Xtr, ytr, mu0, P0)
            ll = float(jr.baselines.metrics.logistic_log_loss(r["mean"], r["cov"], Xte, yte))
            elbo = float(elbo_gh(r["mean"], r["cov"], Xtr, ytr, mu0, P0))
            rows.append([s, m, ll, elbo, t, bool(r["ok"]), int(r["iterations"]),
                         float(r["residual"])] + [float(r.get(k, nan))
                                                  for k in ["jj_elbo"] + STEP_COLUMNS])
            if m == "Laplace":
                rows.append([s, "MAP plug-in", map_log_loss(r["mean"], Xte, yte), nan, t,
                             bool(r["ok"]), int(r["iterations"]), 0.0, nan, nan, nan])
        rows.append([s, "trivial", trivial_log_loss(sp.ytr, sp.yte), nan, 0.0, True, 0, 0.0, nan,
                     nan, nan])
        rows.append([s, "prior", float(jr.baselines.metrics.logistic_log_loss(mu0, P0, Xte, yte)),
                     float(elbo_gh(mu0, P0, Xtr, ytr, mu0, P0)), 0.0, True, 0, 0.0, nan, nan, nan])
    return rows, compile_s


SWEEP_COLUMNS = ["split", "method", "delta", "elbo", "test_log_loss", "time_s", "converged",
                 "iterations", "residual"] + STEP_COLUMNS


def delta_sweep(name: str, n_splits: int, deltas, quick: bool, n_max=None):
    """[KLPROX] Table 2 protocol: KL-prox and mean-field over ``prior_cov = delta I``.

    Rows :data:`SWEEP_COLUMNS` (``residual``: KL-prox's stopping criterion, mean-field's gradient
    norm; :data:`STEP_COLUMNS`: KL-prox's step control, nan for mean-field).
    """
    loader, _, standardise = DATASETS[name]
    ds = loader()
    d = ds.X.shape[1] + 1
    model = jr.models.logistic()

    @jax.jit
    def kp(X, y, delta):
        r = klprox_fit(model, X, y, jnp.zeros(d), delta * jnp.eye(d))
        return r.mean, r.cov, r.converged, r.iterations, r.residual, r.r, r.rejected

    @jax.jit
    def mf(X, y, delta):
        r = mean_field_fit(X, y, jnp.zeros(d), delta * jnp.ones(d))
        nan = jnp.asarray(jnp.nan)
        return r.mean, jnp.diag(r.var), r.grad_norm < 1e-6, r.iterations, r.grad_norm, nan, nan

    rows, compiled = [], {"KL-prox": kp, "Mean-field": mf}
    for s in progress(range(n_splits), f"delta sweep {name}", quick):
        sp = make_split(ds.X, ds.y, SEED + s, standardise, n_max)
        Xtr, ytr, Xte, yte = map(jnp.asarray, sp)
        for m in compiled:
            if s == 0:
                compiled[m] = compiled[m].lower(Xtr, ytr, float64_scalar(deltas[0])).compile()
            for delta in deltas:
                dl = float64_scalar(delta)
                (mean, cov, ok, its, res, r_final, rejected), t = timed(compiled[m], Xtr, ytr, dl)
                elbo = float(elbo_gh(mean, cov, Xtr, ytr, jnp.zeros(d), dl * jnp.eye(d)))
                ll = float(jr.baselines.metrics.logistic_log_loss(mean, cov, Xte, yte))
                rows.append([s, m, float(delta), elbo, ll, t, bool(ok), int(its), float(res),
                             float(r_final), float(rejected)])
    return rows


def summarise(rows):
    """Mean and standard error over splits:
    ``{method: {"log_loss": (mean, se), "elbo": ..., "time": ..., "all_ok": bool}}``."""
    out = {}
    for m in {r[1] for r in rows}:
        sel = [r for r in rows if r[1] == m]
        stat = {}
        for k, j in (("log_loss", 2), ("elbo", 3), ("time", 4)):
            v = np.array([r[j] for r in sel], dtype=float)
            se = float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0
            stat[k] = (float(np.mean(v)), se)
        stat["all_ok"] = all(r[5] for r in sel)
        out[m] = stat
    return out


def summarise_sweep(rows):
    """Per method: the ELBO-selected delta, log-loss there, best log-loss on the grid, total time
    (all averaged over splits), the number of unconverged fits and the largest iteration count;
    for KL-prox also its :func:`step_report`. Selection and "best" use only the fits whose solver
    converged."""
    out = {}
    for m in ("KL-prox", "Mean-field"):
        sel_ll, best_ll, negelbo, tot_t, deltas = [], [], [], [], []
        for s in sorted({r[0] for r in rows}):
            rs = [r for r in rows if r[0] == s and r[1] == m]
            ok = [r for r in rs if r[6] and np.isfinite(r[3]) and np.isfinite(r[4])]
            best = max(ok, key=lambda r: r[3])
            sel_ll.append(best[4])
            negelbo.append(-best[3])
            deltas.append(best[2])
            best_ll.append(min(r[4] for r in ok))
            tot_t.append(sum(r[5] for r in rs))
        out[m] = {"selected_delta": float(np.exp(np.mean(np.log(deltas)))),
                  "neg_elbo": float(np.mean(negelbo)), "log_loss_selected": float(np.mean(sel_ll)),
                  "log_loss_best": float(np.mean(best_ll)), "time_total": float(np.mean(tot_t)),
                  "unconverged": sum(not r[6] for r in rows if r[1] == m),
                  "iterations_max": max(r[7] for r in rows if r[1] == m)}
    out["KL-prox"].update(step_report(rows))
    return out


def plot(out: Path, results: dict, sweeps: dict):
    plt = pyplot()
    names = list(results)
    fig, axs = plt.subplots(3, len(names), figsize=(6.5 * len(names), 11), squeeze=False)
    colors = plt.cm.tab10(np.arange(len(METHODS)))
    for j, name in enumerate(names):
        st, comp = results[name]["stats"], results[name]["compile"]
        x = np.arange(len(METHODS))
        ll = [st[m]["log_loss"] for m in METHODS]
        ax = axs[0, j]
        ax.bar(x, [v[0] for v in ll], yerr=[v[1] for v in ll], color=colors)
        ax.axhline(st["trivial"]["log_loss"][0], color="k", ls="--", lw=1, label="trivial predictor")
        ax.set_yscale("log")
        ax.set_ylabel("test log-loss (nats, mean over splits)")
        ax.set_title(f"{name}: test log-loss")
        ax.legend(fontsize=8)
        ax = axs[1, j]
        ref = st["KL-prox"]["elbo"][0]
        gaps = [max(ref - st[m]["elbo"][0], 1e-9) for m in GAUSSIAN_METHODS]
        ax.bar(x[:-1], gaps, color=colors[:-1])
        ax.set_yscale("log")
        ax.set_ylabel("ELBO(KL-prox) - ELBO(method)  [nats]")
        ax.set_title(f"{name}: ELBO gap to KL-prox (ELBO = {ref:.2f}; 1e-9 = floor)")
        ax = axs[2, j]
        t = [st[m]["time"][0] for m in METHODS[:-1]]
        c = [comp[m] for m in METHODS[:-1]]
        ax.bar(x[:-1] - 0.2, t, width=0.4, color=colors[:-1], label="fit (after compile)")
        ax.bar(x[:-1] + 0.2, c, width=0.4, color=colors[:-1], alpha=0.35, hatch="//",
               label="compile")
        ax.set_yscale("log")
        ax.set_ylabel("seconds")
        ax.set_title(f"{name}: wall time (CPU)")
        ax.legend(fontsize=8)
        for a in axs[:, j]:
            a.set_xticks(x)
            a.set_xticklabels(METHODS, rotation=35, ha="right", fontsize=8)
    save_figure(fig, out / "headtohead_logistic.png", dpi=100)

    fig, axs = plt.subplots(2, len(sweeps), figsize=(6 * len(sweeps), 7), squeeze=False)
    for j, (name, rows) in enumerate(sweeps.items()):
        for m, col in (("KL-prox", "C3"), ("Mean-field", "C6")):
            ds_ = sorted({r[2] for r in rows})
            e = [np.mean([r[3] for r in rows if r[1] == m and r[2] == dl]) for dl in ds_]
            ll = [np.mean([r[4] for r in rows if r[1] == m and r[2] == dl]) for dl in ds_]
            axs[0, j].semilogx(ds_, e, "o-", color=col, label=m)
            axs[1, j].semilogx(ds_, ll, "o-", color=col, label=m)
            bad = [i for i, dl in enumerate(ds_)
                   if not all(r[6] for r in rows if r[1] == m and r[2] == dl)]
            if bad:
                lab = f"{m}: solver not converged (some split)"
                axs[0, j].plot([ds_[i] for i in bad], [e[i] for i in bad], "kx", ms=10, label=lab)
                axs[1, j].plot([ds_[i] for i in bad], [ll[i] for i in bad], "kx", ms=10)
            k = int(np.argmax(e))
            axs[0, j].plot(ds_[k], e[k], "k*", ms=12)
            axs[1, j].plot(ds_[k], ll[k], "k*", ms=12)
        axs[0, j].set_title(f"{name}: ELBO vs prior variance delta (* = selected)")
        axs[1, j].set_title(f"{name}: test log-loss vs delta")
        axs[1, j].set_xlabel("delta (prior covariance delta I)")
        axs[0, j].set_ylabel("ELBO (mean over splits)")
        axs[1, j].set_ylabel("test log-loss (nats)")
        axs[0, j].legend(fontsize=8)
    save_figure(fig, out / "headtohead_logistic_delta.png", dpi=100)


def elbo_margins(rows):
    """Per split, ``ELBO(KL-prox) - ELBO(m)`` for every other Gaussian method ``m``: ``{m: [..]}``.

    KL-prox maximises the very ELBO of :func:`elbo_gh` (same 64-node quadrature) over all
    Gaussians, so these are >= 0 up to its solver tolerance."""
    out = {}
    for s in sorted({r[0] for r in rows}):
        ref = next(r[3] for r in rows if r[0] == s and r[1] == "KL-prox")
        for r in rows:
            if r[0] == s and r[1] in GAUSSIAN_METHODS and r[1] != "KL-prox":
                out.setdefault(r[1], []).append(ref - r[3])
    return out


def run(quick: bool, out: Path) -> dict:
    n_splits = 1 if quick else 5
    n_max = 200 if quick else None
    deltas = np.logspace(-2, 3, 3 if quick else 11)
    results, sweeps, summary = {}, {}, {}
    for name in QUICK_DATASETS if quick else DATASETS:
        rows, comp = head_to_head(name, n_splits, quick, n_max)
        st = summarise(rows)
        results[name] = {"stats": st, "compile": comp}
        write_csv(out / f"headtohead_logistic_{name}.csv", COLUMNS, rows)
        for m in METHODS + ("trivial", "prior"):
            summary[f"{name}_logloss_{m}"] = st[m]["log_loss"][0]
        summary[f"{name}_elbo_prior"] = st["prior"]["elbo"][0]
        for m in GAUSSIAN_METHODS:
            summary[f"{name}_elbo_{m}"] = st[m]["elbo"][0]
            summary[f"{name}_time_{m}"] = st[m]["time"][0]
            summary[f"{name}_compile_{m}"] = comp[m]
            summary[f"{name}_ok_{m}"] = st[m]["all_ok"]
        dual = [r for r in rows if r[1] == "Dual-JJ"]
        summary[f"{name}_dual_jj_elbo"] = float(np.mean([r[8] for r in dual]))
        summary[f"{name}_dual_max_bound_excess"] = max(r[8] - r[3] for r in dual)  # <= 0: JJ is a bound
        summary[f"{name}_dual_xi_residual"] = max(r[7] for r in dual)
        summary[f"{name}_dual_converged"] = sum(r[5] for r in dual)
        summary[f"{name}_dual_solves_min"] = min(r[6] for r in dual)
        summary[f"{name}_dual_solves_max"] = max(r[6] for r in dual)
        summary[f"{name}_klprox_iterations_max"] = max(r[6] for r in rows if r[1] == "KL-prox")
        for k, v in step_report(rows).items():
            summary[f"{name}_klprox_{k}"] = v
        for m, v in elbo_margins(rows).items():
            summary[f"{name}_min_elbo_margin_{m}"] = float(np.min(v))
        sweeps[name] = delta_sweep(name, n_splits, deltas, quick, n_max)
        write_csv(out / f"headtohead_logistic_delta_{name}.csv",
                  SWEEP_COLUMNS, sweeps[name])
        for m, v in summarise_sweep(sweeps[name]).items():
            for k, val in v.items():
                summary[f"{name}_sweep_{m}_{k}"] = val
    write_csv(out / "headtohead_logistic_summary.csv",
              ["dataset", "method", "test_log_loss", "se", "elbo", "se", "time_s", "compile_s",
               "all_converged"],
              [[n, m, r["stats"][m]["log_loss"][0], r["stats"][m]["log_loss"][1],
                r["stats"][m]["elbo"][0], r["stats"][m]["elbo"][1], r["stats"][m]["time"][0],
                r["compile"].get(m, 0.0), r["stats"][m]["all_ok"]]
               for n, r in results.items() for m in METHODS + ("trivial", "prior")])
    plot(out, results, sweeps)
    return summary


if __name__ == "__main__":
    cli(run, __doc__)
