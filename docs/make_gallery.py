"""Figures and printed results of the example gallery (``docs/gallery/``), at small sizes.

Run once by hand from the repository root after an example changes, and commit what it writes::

    make gallery                                                          # every example
    OPENBLAS_NUM_THREADS=1 .venv/bin/python docs/make_gallery.py drifting_stream   # one

For each example of ``examples/`` it writes ``docs/_static/gallery/<name>.txt`` (what the
example's ``main`` prints at the size given in ``SIZES``) and ``docs/_static/gallery/<name>.png``
(a plot of its result, computed here with the example's own functions). The documentation build
only reads these files: it never runs an example. Needs the ``nn`` and ``experiments`` extras.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
OUT = os.path.join(ROOT, "docs", "_static", "gallery")

import jax  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402

import jaxrvga as jr  # noqa: E402

# The sizes the gallery runs each example at (smaller than the examples' defaults).
SIZES = {
    "digits_binary": dict(num_train=600, num_test=597, hidden=16),
    "digits_multiclass": dict(num_train=600, num_test=597, hidden=16),
    "diabetes_regression": dict(),
    "drifting_stream": dict(T=2000),
    "empirical_bayes": dict(),
    "ekf_calibration": dict(num_train=600, num_test=597, hidden=16, num_samples=256),
    "tuning_free": dict(),
    "network_recipe": dict(),
    "thompson_bandit": dict(),
    "neural_bandit": dict(rounds=2000),
}


def printed(name):
    """What ``examples.<name>.main(**SIZES[name])`` prints, and what it returns."""
    module = importlib.import_module(f"examples.{name}")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        out = module.main(**SIZES[name])
    args = ", ".join(f"{k}={v!r}" for k, v in SIZES[name].items())
    text = f">>> from examples import {name}\n>>> {name}.main({args})\n" + buffer.getvalue()
    with open(os.path.join(OUT, name + ".txt"), "w") as f:
        f.write(text)
    return out


def reliability(ax, conf, correct, label, bins=10):
    """Accuracy against mean confidence in the equal-width bins of ``conf`` that hold a point."""
    idx = np.minimum((conf * bins).astype(int), bins - 1)
    xs, ys, ns = [], [], []
    for b in range(bins):
        inside = idx == b
        if inside.any():
            xs.append(conf[inside].mean()); ys.append(correct[inside].mean()); ns.append(inside.sum())
    ax.plot(xs, ys, "o-", label=label, markersize=3)


def _digits_fit(name, hidden, num_train, num_test, rank=10, prior_var=0.1, seed=0):
    """The digits examples' fit (as their ``main``): the state, the model and the test set."""
    from sklearn.datasets import load_digits

    from examples.common import as_f32, lowrank_init, split

    X, y = load_digits(return_X_y=True)
    if name == "digits_binary":
        from examples.digits_binary import MLP
        Xtr, ytr, Xte, yte = split(X / 16.0, (y % 2 == 0), num_train, num_test, seed)
        net = MLP(hidden)
        theta0, unravel = ravel_pytree(net.init(jax.random.PRNGKey(seed), Xtr[0]))
        model = jr.models.nonlinear(net.apply, jr.models.bernoulli(), unravel=unravel)
    else:
        from examples.digits_multiclass import network
        Xtr, ytr, Xte, yte = split(X / 16.0, y, num_train, num_test, seed)
        theta0, unravel, h = network(hidden, jax.random.PRNGKey(seed))
        model = jr.models.nonlinear(h, jr.models.categorical(10), unravel=unravel)
    flt = jr.lrvga(model, rank=rank, scheme="ekf")
    state = lowrank_init(flt, theta0, rank, prior_var, jax.random.PRNGKey(seed + 1))
    state, _ = jr.run(flt, state, *as_f32(Xtr, ytr))
    Xte_j, = as_f32(Xte)
    lin = np.asarray(jr.predictive(state, Xte_j, model=model).mean, np.float64)
    mc = np.asarray(jr.predictive(state, Xte_j, model=model, key=jax.random.PRNGKey(seed + 2),
                                  num_samples=256).mean, np.float64)
    return lin, mc, yte.astype(int)


def fig_digits_binary(out):
    lin, mc, y = _digits_fit("digits_binary", **{k: SIZES["digits_binary"][k]
                                                  for k in ("hidden", "num_train", "num_test")})
    fig, (a, b) = plt.subplots(1, 2, figsize=(7.5, 3.2))
    for probs, label in ((lin, "linearised"), (mc, "Monte Carlo")):
        conf = np.maximum(probs, 1 - probs)
        reliability(a, conf, (probs > 0.5) == y, f"{label} (ECE {out[_key(label)]['ece']:.3f})")
    a.plot([0.5, 1], [0.5, 1], "k:", lw=1)
    a.set(xlabel="predicted probability of the chosen class", ylabel="fraction correct",
          title="reliability on the test set")
    a.legend(fontsize=8)
    b.hist([lin[y == 1], lin[y == 0]], bins=20, range=(0, 1), label=["even digits", "odd digits"], stacked=True)
    b.set(xlabel="linearised P(even)", ylabel="test images", title=f"accuracy {out['linearised']['accuracy']:.3f}")
    b.legend(fontsize=8)
    return fig


def _key(label):
    return "linearised" if label == "linearised" else "monte_carlo"


def fig_digits_multiclass(out):
    lin, mc, y = _digits_fit("digits_multiclass", **{k: SIZES["digits_multiclass"][k]
                                                      for k in ("hidden", "num_train", "num_test")})
    fig, (a, b) = plt.subplots(1, 2, figsize=(7.5, 3.4))
    for probs, label in ((lin, "linearised"), (mc, "Monte Carlo")):
        reliability(a, probs.max(1), probs.argmax(1) == y, f"{label} (ECE {out[_key(label)]['ece']:.3f})")
    a.plot([0.1, 1], [0.1, 1], "k:", lw=1)
    a.set(xlabel="top-class probability", ylabel="fraction correct", title="reliability on the test set")
    a.legend(fontsize=8)
    confusion = np.zeros((10, 10))
    np.add.at(confusion, (y, lin.argmax(1)), 1)
    b.imshow(confusion / confusion.sum(1, keepdims=True), cmap="Blues", vmin=0, vmax=1)
    b.set(xticks=range(10), yticks=range(10), xlabel="predicted digit", ylabel="true digit",
          title=f"confusion (accuracy {out['linearised']['accuracy']:.3f})")
    return fig


def fig_diabetes_regression(out):
    from sklearn.datasets import load_diabetes

    from examples.common import as_f32, lowrank_init, split
    from examples.diabetes_regression import MLP, standardise

    X, y = load_diabetes(return_X_y=True)                 # main()'s defaults (SIZES is empty)
    Xtr, ytr, Xte, yte = split(X, y, 352, 90, 0)
    (Xtr, Xte), (ytr, yte) = standardise(Xtr, Xte), standardise(ytr, yte)
    net = MLP(16)
    theta0, unravel = ravel_pytree(net.init(jax.random.PRNGKey(0), Xtr[0]))
    model = jr.models.nonlinear(net.apply, jr.models.gaussian(0.5), unravel=unravel)
    flt = jr.lrvga(model, rank=10, scheme="ekf")
    state = lowrank_init(flt, theta0, 10, 0.3, jax.random.PRNGKey(1))
    state, _ = jr.run(flt, state, *as_f32(Xtr, ytr))
    mean, var = jr.predictive(state, *as_f32(Xte), model=model, observation_noise=True)
    mean, sd = np.asarray(mean), np.sqrt(np.asarray(var))
    order = np.argsort(mean)
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    t = np.arange(len(order))
    ax.fill_between(t, (mean - 1.96 * sd)[order], (mean + 1.96 * sd)[order], alpha=0.3,
                    label="95 % predictive interval")
    ax.plot(t, mean[order], "C0", label="predictive mean")
    ax.plot(t, yte[order], "k.", markersize=4, label="observed")
    s = out["linearised"]
    ax.set(xlabel="test patients, sorted by predictive mean", ylabel="standardised progression",
           title=f"RMSE {s['rmse']:.3f} (mean predictor {out['baseline_rmse']:.3f}), "
                 f"coverage {s['coverage95']:.2f}")
    ax.legend(fontsize=8, loc="upper left")
    return fig


def fig_drifting_stream(out):
    import equinox as eqx
    import jax.numpy as jnp

    from examples.common import lowrank_init
    from examples.drifting_stream import prequential, stream

    T = SIZES["drifting_stream"]["T"]
    xs, ys, p_true = stream(T, 0, 2.0)
    mlp = eqx.nn.MLP(2, "scalar", 16, depth=2, activation=jnp.tanh, key=jax.random.PRNGKey(0))
    params, static = eqx.partition(mlp, eqx.is_array)
    theta0, unravel = ravel_pytree(params)
    model = jr.models.nonlinear(lambda q, x: eqx.combine(q, static)(x), jr.models.bernoulli(), unravel=unravel)
    window = 200
    smooth = lambda v: np.convolve(v, np.ones(window) / window, mode="valid")  # noqa: E731
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.5, 3.4))
    t = np.arange(window, T + 1)
    drifts = (("no drift model", {}), ("process_noise = 1e-4", dict(process_noise=1e-4)),
              ("additive_noise = 1e-4", dict(additive_noise=1e-4)))
    for name, dynamics in drifts:
        flt = jr.lrvga(model, rank=10, scheme="ekf", **dynamics)
        state = lowrank_init(flt, theta0, 10, 0.3, jax.random.PRNGKey(1))
        _, (probs, log_pred) = prequential(flt, state, model, jnp.asarray(xs), jnp.asarray(ys))
        a.plot(t, smooth((np.asarray(probs) > 0.5) == ys), label=name)
        b.plot(t, smooth(np.asarray(log_pred)), label=name)
    a.plot(t, smooth((p_true > 0.5) == ys), "k:", label="the true law (Bayes)")
    a.set(xlabel="point of the stream", ylabel=f"accuracy, last {window} points",
          title="prediction of each point before its update", ylim=(0.4, 1.0))
    a.legend(fontsize=8, loc="lower right")
    b.set(xlabel="point of the stream", ylabel=f"mean log p(y_t | y_1:t-1), last {window}",
          title="one-step-ahead log predictive")
    return fig


def fig_empirical_bayes(out):
    import jax.numpy as jnp

    from examples.empirical_bayes import data, filter_and_prior

    X, y, _, _ = data()
    grid = np.linspace(-5.0, 1.0, 41), np.linspace(-1.5, 0.5, 41)
    evidence = jax.jit(jax.vmap(jax.vmap(lambda a, b: jr.log_evidence(*filter_and_prior(jnp.stack([a, b]), 10),
                                                                       X, y), (None, 0)), (0, None)))
    values = np.asarray(evidence(jnp.asarray(grid[0]), jnp.asarray(grid[1])))
    fig, ax = plt.subplots(figsize=(6.0, 4.2))
    levels = np.sort(values.max() - np.array([0.5, 2, 5, 10, 20, 50, 100, 200]))
    cs = ax.contour(np.exp(grid[1]), np.exp(grid[0]), values, levels=levels, cmap="viridis")
    ax.clabel(cs, fontsize=7, fmt="%.0f")
    for name, marker in (("default", "o"), ("fitted", "*")):
        r = out[name]
        ax.plot(r["noise_var"], r["prior_var"], marker, ms=10, label=f"{name}: log evidence {r['log_evidence']:.1f}")
    b = out["bayesian_ridge"]
    ax.plot(b["noise_var"], b["prior_var"], "k+", ms=14, label="sklearn BayesianRidge")
    ax.set(xscale="log", yscale="log", xlabel="noise variance s2", ylabel="prior variance s0",
           title="log evidence of the Kalman filter (jr.log_evidence)")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def fig_ekf_calibration(out):
    from examples.ekf_calibration import SCALES

    fig, (a, b) = plt.subplots(1, 2, figsize=(7.5, 3.2))
    x = np.arange(len(SCALES))
    for i, scheme in enumerate(("ekf", "sampled")):
        r = out[scheme]
        a.bar(x + (i - 0.5) * 0.38, [r[c]["var_ratio"] for c in SCALES], 0.38, label=f"scheme={scheme!r}")
        b.bar(x + (i - 0.5) * 0.38, [r[c]["ece_network"] for c in SCALES], 0.38, label=f"scheme={scheme!r}")
    a.axhline(1.0, color="k", ls=":", lw=1)
    for ax in (a, b):
        ax.set_xticks(x, [f"c = {c:g}" for c in SCALES])
        ax.set_xlabel("covariance scaled by c")
    a.set(ylabel="MC logit variance / c J P J^T", title="dispersion through the network")
    b.set(ylabel="ECE", title="ECE of the Monte-Carlo predictive")
    a.legend(fontsize=8)
    return fig


def fig_tuning_free(out):
    from examples.tuning_free import PRIOR_VARIANCES

    t = out["tuning_free"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(8.0, 3.3))
    steps = np.arange(1, len(t["noise_var_trace"]) + 1)
    for k, v in enumerate(PRIOR_VARIANCES):
        if t["weight_trace"][:, k].max() > 0.05:
            a.plot(steps, t["weight_trace"][:, k], label=f"prior variance {v:.2g}")
    a.set(xlabel="observations", ylabel="weight (posterior probability)", title="members weighted by their evidence")
    a.legend(fontsize=7)
    b.plot(steps, t["noise_var_trace"], label="E[s2], learned (heaviest member)")
    b.axhline(out["empirical_bayes"]["noise_var"], color="k", ls=":", label="fitted by empirical Bayes")
    b.set(xlabel="observations", ylabel="noise variance", yscale="log", title="the noise variance learned")
    b.legend(fontsize=7)
    return fig


def fig_network_recipe(out):
    from examples.network_recipe import PRIOR_VAR, READINGS

    fig, (a, b) = plt.subplots(1, 2, figsize=(8.0, 3.3))
    steps = np.arange(1, len(out["prior_var_trace"]) + 1)
    for k, size in enumerate(out["blocks"]):
        a.plot(steps, out["prior_var_trace"][:, k], label=f"layer {k + 1} ({size} weights)")
    a.axhline(PRIOR_VAR, color="k", ls=":", label="the start")
    a.set(xlabel="images", ylabel="prior variance", yscale="log", title="the prior learned per layer")
    a.legend(fontsize=7)
    for name, label in READINGS.items():
        probs = out[name]["probs"]
        reliability(b, probs.max(1), probs.argmax(1) == out["labels"], f"{label} (ECE {out[name]['ece']:.3f})")
    b.plot([0.1, 1], [0.1, 1], "k:", lw=1)
    b.set(xlabel="top-class probability", ylabel="fraction correct", title="reliability on the test set")
    b.legend(fontsize=7)
    return fig


def fig_thompson_bandit(out):
    from examples.thompson_bandit import POLICIES

    titles = {"contextual": "contexts x ~ N(0, I)", "no_context": "no context (x = e_1)"}
    labels = {"thompson": "Thompson sampling", "greedy": "greedy", "epsilon_greedy": "epsilon-greedy (0.1)"}
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.3))
    rounds = np.arange(1, out["rounds"] + 1)
    for ax, (setting, title) in zip(axes, titles.items()):
        for policy in POLICIES:
            ax.plot(rounds, out[setting][policy]["curve"], label=labels[policy])
        ax.set(xlabel="round", ylabel=f"cumulative regret (mean of {out['seeds']} seeds)", title=title)
    axes[0].legend(fontsize=8)
    return fig


def fig_neural_bandit(out):
    from examples.neural_bandit import AGENTS

    labels = {"neural_thompson": "neural Thompson (L-RVGA, library)", "neural_greedy": "neural greedy (same network)",
              "linear_thompson": "linear Thompson", "linear_ids": "linear IDS (jr.bandits.linear)",
              "linear_greedy": "linear greedy",
              "neural_linear": "NeuralLinear (Adam + last-layer BLR)", "linucb": "LinUCB, alpha 1 (MABWiser's default)",
              "linucb_tuned": "LinUCB, alpha 0.05 (tuned on seeds 2-4)", "uniform": "uniform"}
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    rounds = np.arange(1, out["rounds"] + 1)
    for name in AGENTS:
        ax.plot(rounds, out[name]["curve"], label=f"{labels[name]}: {out[name]['regret']:.0f}",
                lw=2 if name == "neural_thompson" else 1)
    ax.set(xlabel="round", ylabel="cumulative regret (wrong arms)",
           title=f"mnist bandit, seed {out['seed']}")
    ax.legend(fontsize=7)
    return fig


def make(name):
    out = printed(name)
    fig = globals()["fig_" + name](out)
    fig.tight_layout()
    path = os.path.join(OUT, name + ".png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"{name}: {path} ({os.path.getsize(path) // 1024} kB)")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for name in sys.argv[1:] or list(SIZES):
        make(name)
