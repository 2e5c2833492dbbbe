"""Networks from any prior: which step keeps a network's belief finite over a grid of prior variances.

    python -m experiments.networks_any_prior [--f64] [--dense] [--quick]

Three tasks, one pass over each training stream, one observation per update:

* binary digits: sklearn digits labelled even/odd, ``train_test_split(test_size=0.3, random_state=0)``,
  pixels standardised with the training mean and standard deviation, MLP 64-128-64-1 (ReLU,
  d = 16 641), Bernoulli output;
* 10-class digits: the same images and network with 10 outputs (d = 17 226), categorical output;
* diabetes: sklearn diabetes, the same split and standardisation (targets too), MLP 10-50-50-1
  (d = 3 151), Gaussian output with noise variance 0.5.

Weights start at ``N(0, 1/fan_in)``, biases at 0 (key 0); the prior is ``N(theta0, v I)`` for ``v`` in
:data:`PRIORS`. Each method runs all the priors at once (``jax.vmap`` over the initial states) and
reports per prior: finite or not, the first flagged step, the prequential log-likelihood (the mean
of ``log p(y_t | theta = mu_{t-1})``, plug-in), test log-loss (classification) or RMSE (regression)
and accuracy of the linearised predictive (``jr.predictive``). The prior of a method is chosen on
the last 20 % of the training stream (the prequential log-likelihood there). Time per observation
(compile excluded) is of a run at the chosen prior, as a ratio to optax Adam (batch 1, learning
rate 1e-3) on the same network in the same process.

Low-rank beliefs (``jr.lrvga``, rank 10) by default; ``--dense`` runs ``jr.rvga`` on smaller networks
(hidden layers 16, 16-16 for diabetes... see :data:`DENSE_SIZES`), where a full covariance fits.
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.machine import best_time

PRIORS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
RANK = 10
SIZES = {"binary": (64, 128, 64, 1), "multiclass": (64, 128, 64, 10), "diabetes": (10, 50, 50, 1)}
DENSE_SIZES = {"binary": (64, 16, 1), "multiclass": (64, 16, 10), "diabetes": (10, 16, 16, 1)}
NOISE_VAR = 0.5
#: name -> options of ``jr.rvga`` / ``jr.lrvga``.
METHODS = {
    "ekf (no max_move)": dict(scheme="ekf", max_move=float("inf")),
    "ekf": dict(scheme="ekf"),
    "moment_ekf": dict(scheme="moment_ekf"),
    "moment_ekf (empirical)": dict(scheme="moment_ekf", curvature="empirical"),
}


def load(task, dtype):
    """``(Xtr, ytr, Xte, yte)`` of ``task``, standardised with the training statistics."""
    from sklearn.datasets import load_diabetes, load_digits
    from sklearn.model_selection import train_test_split

    X, y = (load_diabetes if task == "diabetes" else load_digits)(return_X_y=True)
    if task == "binary":
        y = (y % 2 == 0)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0)
    mean, std = Xtr.mean(0), Xtr.std(0)
    std = np.where(std > 0, std, 1.0)  # constant pixels
    Xtr, Xte = (Xtr - mean) / std, (Xte - mean) / std
    if task == "diabetes":
        ym, ys = ytr.mean(), ytr.std()
        ytr, yte = (ytr - ym) / ys, (yte - ym) / ys
    cast = lambda a, t=dtype: jnp.asarray(a, t)  # noqa: E731
    label = jnp.int32 if task == "multiclass" else dtype
    return cast(Xtr), cast(ytr, label), cast(Xte), cast(yte, label)


def mlp(sizes, dtype, seed=0):
    """``(theta0, h)``: a ReLU MLP with flat weights, ``N(0, 1/fan_in)`` weights and zero biases (key
    ``seed``)."""
    from jax.flatten_util import ravel_pytree

    key, params = jax.random.PRNGKey(seed), []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        scale = jnp.asarray(1.0 / np.sqrt(fan_in), dtype)  # a NumPy float64 would promote the weights under x64
        params.append((jax.random.normal(sub, (fan_in, fan_out), dtype) * scale, jnp.zeros(fan_out, dtype)))
    theta0, unravel = ravel_pytree(params)
    scalar = sizes[-1] == 1

    def h(theta, x):
        layers = unravel(theta)
        for W, b in layers[:-1]:
            x = jax.nn.relu(x @ W + b)
        out = x @ layers[-1][0] + layers[-1][1]
        return out[0] if scalar else out

    return theta0, h


def model_of(task, h):
    import jaxrvga as jr

    family = {"binary": jr.models.bernoulli(), "multiclass": jr.models.categorical(10),
              "diabetes": jr.models.gaussian(NOISE_VAR)}[task]
    return jr.models.nonlinear(h, family)


def initial_state(flt, theta0, prior_var, dense, rank=RANK):
    import jaxrvga as jr

    d = theta0.shape[0]
    if dense:
        return flt.init(theta0, prior_var * jnp.eye(d, dtype=theta0.dtype))
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(1), d, rank, prior_var=prior_var)
    return flt.init(theta0, W0.astype(theta0.dtype), psi0.astype(theta0.dtype))


def prequential_run(flt, model):
    """``run(state, X, y) -> (state, (log p(y_t | mu_{t-1}), converged_t, max |mu_t|))``: one scan
    that scores each observation under the belief before its update."""

    def step(state, xy):
        x, y = xy
        score = model.log_lik(state.mean, x, y)
        new = flt.update(state, x, y)
        return new, (score, new.info.converged, jnp.max(jnp.abs(new.mean)))

    def run(state, X, y):
        return jax.lax.scan(step, state, (X, y))

    return run


def test_scores(task, model, state, Xte, yte):
    """Test log-loss (or RMSE) and accuracy of the linearised predictive of ``state``."""
    import jaxrvga as jr

    y = np.asarray(yte)
    out = {}
    for kind, mean in (("", jr.predictive(state, Xte, model=model).mean),
                       ("plugin_", model.family.mean(jax.vmap(model.predict, (None, 0))(state.mean, Xte)))):
        mean = np.asarray(mean, np.float64)
        if task == "diabetes":
            out[kind + "rmse"] = float(np.sqrt(np.mean((mean - y) ** 2)))
        elif task == "binary":
            p = np.clip(mean, 1e-7, 1 - 1e-7)
            out[kind + "log_loss"] = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
            out[kind + "accuracy"] = float(np.mean((p > 0.5) == y))
        else:
            p = np.clip(mean[np.arange(len(y)), y], 1e-7, 1.0)
            out[kind + "log_loss"] = float(-np.mean(np.log(p)))
            out[kind + "accuracy"] = float(np.mean(np.argmax(mean, 1) == y))
    return out


def adam_time(task, h, theta0, Xtr, ytr, lr=1e-3):
    """Seconds per observation of one pass of optax Adam (batch 1) on the negative log-likelihood."""
    import optax

    model = model_of(task, h)
    opt = optax.adam(lr)

    def step(carry, xy):
        theta, opt_state = carry
        grad = jax.grad(lambda th: -model.log_lik(th, *xy))(theta)
        updates, opt_state = opt.update(grad, opt_state)
        return (optax.apply_updates(theta, updates), opt_state), None

    run = jax.jit(lambda th: jax.lax.scan(step, (th, opt.init(th)), (Xtr, ytr))[0][0])
    return best_time(run, theta0) / Xtr.shape[0]


def evaluate(task, name, options, dtype, dense, priors=PRIORS):
    """One method on one task over the prior grid: a row per prior, the chosen prior and its time."""
    import jaxrvga as jr

    Xtr, ytr, Xte, yte = load(task, dtype)
    theta0, h = mlp((DENSE_SIZES if dense else SIZES)[task], dtype)
    model = model_of(task, h)
    flt = jr.rvga(model, **options) if dense else jr.lrvga(model, rank=RANK, **options)
    states = [initial_state(flt, theta0, v, dense) for v in priors]
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *states)
    run = prequential_run(flt, model)
    finals, (scores, converged, size) = jax.jit(jax.vmap(run, in_axes=(0, None, None)))(stacked, Xtr, ytr)
    T, tail = Xtr.shape[0], Xtr.shape[0] - Xtr.shape[0] // 5
    rows = []
    for i, v in enumerate(priors):
        final = jax.tree_util.tree_map(lambda a, i=i: a[i], finals)
        flagged = np.flatnonzero(~np.asarray(converged[i]))
        finite = bool(np.all(np.isfinite(np.asarray(final.mean))))
        row = {"prior": v, "finite": finite, "max_mean": float(np.max(np.asarray(size[i]))),
               "first_flag": int(flagged[0]) if flagged.size else None, "flags": int(flagged.size),
               "preq": float(np.mean(np.asarray(scores[i]))), "select": float(np.mean(np.asarray(scores[i, tail:])))}
        row.update(test_scores(task, model, final, Xte, yte) if finite else {})
        rows.append(row)
    usable = [r for r in rows if r["finite"] and np.isfinite(r["select"])]
    chosen = max(usable, key=lambda r: r["select"]) if usable else None
    seconds = None
    if chosen is not None:
        state = initial_state(flt, theta0, chosen["prior"], dense)
        seconds = best_time(jax.jit(lambda s: run(s, Xtr, ytr)[0].mean), state) / T
    return {"task": task, "method": name, "d": int(theta0.shape[0]), "rows": rows, "chosen": chosen,
            "seconds": seconds, "adam": adam_time(task, h, theta0, Xtr, ytr)}


def report(result):
    """Print one method's rows as a Markdown table."""
    metric = "rmse" if result["task"] == "diabetes" else "log_loss"
    print(f"\n{result['task']} (d = {result['d']}), {result['method']}:"
          + (f" {result['seconds'] * 1e6:.0f} us/obs, {result['seconds'] / result['adam']:.1f}x Adam"
             if result["seconds"] else ""))
    print(f"| prior | finite | max abs mean | first flag | flags | prequential | last 20 % | test {metric} | accuracy "
          f"| plug-in {metric} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in result["rows"]:
        mark = " (chosen)" if r is result["chosen"] else ""
        print(f"| {r['prior']}{mark} | {r['finite']} | {r['max_mean']:.3g} | {r['first_flag']} | {r['flags']} | "
              f"{r['preq']:.3f} | {r['select']:.3f} | {r.get(metric, float('nan')):.3f} | "
              f"{r.get('accuracy', float('nan')):.3f} | {r.get('plugin_' + metric, float('nan')):.3f} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--f64", action="store_true", help="float64 (default float32)")
    parser.add_argument("--dense", action="store_true", help="jr.rvga on the smaller networks of DENSE_SIZES")
    parser.add_argument("--tasks", default="binary,multiclass,diabetes")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--jitter", type=float, default=None, help="jitter of the moment_ekf methods")
    args = parser.parse_args(argv)
    if args.jitter is not None:
        for name, options in METHODS.items():
            if options["scheme"] == "moment_ekf":
                options["jitter"] = args.jitter
    if args.f64:
        jax.config.update("jax_enable_x64", True)
    dtype = jnp.float64 if args.f64 else jnp.float32
    print(f"# {'dense' if args.dense else f'low-rank (rank {RANK})'} beliefs, {jnp.dtype(dtype).name}")
    results = []
    for task in args.tasks.split(","):
        for name in args.methods.split(","):
            results.append(evaluate(task, name, METHODS[name], dtype, args.dense))
            report(results[-1])
    return results


if __name__ == "__main__":
    main()
