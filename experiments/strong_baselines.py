"""What a user with the data set in hand picks instead of one filter: ``python -m experiments.strong_baselines``.

    python -m experiments.strong_baselines [--tasks binary,multiclass,diabetes] [--seeds N] [--quick] [--json FILE]
    python -m experiments.strong_baselines --tasks mlp28 --seeds 3

The three network tasks of :mod:`experiments.tuning_free` (the same data, splits, MLPs and initial weights
of each seed, float32) and ``mlp28``, the 28 x 28 MLP of :mod:`benchmarks.bench_images` (its training
images in the order ``seed``, its ``--order``), trained as the strong baselines that people pick with the
data set in hand:

* ``adam_validated``: optax Adam (learning rate 1e-3, minibatches of 32) for :data:`EPOCHS` epochs on the
  first 80 % of the training stream; the epoch, and a temperature of the logits (classification) or the
  noise variance (regression), chosen by the NLPD of the other 20 %, the validation split;
* ``laplace_last_layer``: that network with a Laplace posterior of its last layer around its weights (the
  generalised Gauss-Newton of the 80 %, MacKay's fixed point of the Laplace evidence for the
  prior precision of ``N(0, I / alpha)``; the noise variance of the regression the validated one): the
  logits' predictive ``N(f, J Sigma J^T)``, by the probit approximation (binary), 512 draws (10 classes)
  or exactly (regression);
* ``ivon``: IVON (Shen et al. 2024, Algorithm 1) on the whole training set, nothing tuned: fixed
  settings, the ivon package's defaults as we read them (learning rate 0.1 rescaled by ``h0 + delta``,
  ``h0 = 1``, ``beta1 = 0.9``, ``beta2 = 0.99999``, weight decay ``delta = 1e-4``, effective sample size
  the training set's, one draw a step), minibatches of 32, 5 and 20 epochs (:data:`IVON_EPOCHS`); its
  predictive averages 64 draws of the weights; the regression's loss is the squared error (unit noise
  variance) and its noise variance the mean squared training residual of its mean.

Per task and seed: test NLPD, accuracy and ECE (classification) and the seconds of training (compiled);
``--recipe`` runs the library's recipe beside them in the same process, one pass and two tempered passes
(not on ``mlp28``, where it takes a minute a pass: ``benchmarks.bench_images`` runs it; experiments/REPORT.md,
"The strong baselines, run here").
"""
from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import common  # noqa: F401  (float64 enabled: the Laplace algebra; the networks stay float32)
from jaxrvga.baselines.metrics import ece

EPOCHS = 20
BATCH = 32
LEARNING_RATE = 1e-3
VALIDATION = 0.2
#: IVON's settings, fixed (the ivon package's defaults as we read them; module docstring).
IVON = {"lr": 0.1, "hess_init": 1.0, "beta1": 0.9, "beta2": 0.99999, "weight_decay": 1e-4, "draws": 64}
#: IVON's numbers of epochs: 20, as in the classifiers' figures the docs quote, and 5, as in diabetes'.
IVON_EPOCHS = (5, 20)
#: The passes of the library's recipe run beside them (``--recipe``).
RECIPE_PASSES = (1, 2)
TASKS = ("binary", "multiclass", "diabetes", "mlp28")
TEMPERATURES = np.exp(np.linspace(-3.0, 3.0, 241))


def log_lik(task, f, y, scale=1.0):
    """``log p(y | f)`` of each point: ``f / scale`` the logits of a classifier (``scale`` its temperature),
    or the mean of a Gaussian of variance ``scale`` (the regression)."""
    if task == "binary":
        f = f / scale
        return y * f - jax.nn.softplus(f)
    if task == "multiclass":
        return jnp.take_along_axis(jax.nn.log_softmax(f / scale, -1), y[:, None], -1)[:, 0]
    return -0.5 * (jnp.log(2 * jnp.pi * scale) + (y - f) ** 2 / scale)


def _batches(n, key):
    """The epoch's minibatches: a permutation of ``n`` cut into ``n // BATCH`` rows of :data:`BATCH`."""
    return jax.random.permutation(key, n)[: n // BATCH * BATCH].reshape(-1, BATCH)


def _loss(task, h, theta, X, y):
    """Mean negative log likelihood of a minibatch (the regression's at unit noise variance)."""
    return -jnp.mean(log_lik(task, _outputs(h, theta, X), y))


def adam_epochs(task, h, theta0, X, y, key, epochs=EPOCHS):
    """The weights after each of ``epochs`` epochs of Adam, (epochs, d)."""
    opt = optax.adam(LEARNING_RATE)

    def step(carry, rows):
        theta, opt_state = carry
        grad = jax.grad(lambda t: _loss(task, h, t, X[rows], y[rows]))(theta)
        updates, opt_state = opt.update(grad, opt_state, theta)
        return (optax.apply_updates(theta, updates), opt_state), None

    def epoch(carry, k):
        carry, _ = jax.lax.scan(step, carry, _batches(X.shape[0], k))
        return carry, carry[0]

    return jax.lax.scan(epoch, (theta0, opt.init(theta0)), jax.random.split(key, epochs))[1]


def ivon_train(task, h, theta0, X, y, key, epochs=EPOCHS, cfg=IVON):
    """IVON's mean ``m`` and Hessian estimate ``h`` after ``epochs`` epochs (Shen et al. 2024, Alg. 1):
    a draw ``theta = m + sigma e`` a step, ``sigma = 1 / sqrt(N (h + delta))``, the gradient ``g`` and its
    reparameterised Hessian ``g e / sigma`` averaged, ``m`` moved by ``lr (h0 + delta) (g + delta m) / (h + delta)``."""
    n, b1, b2, delta = X.shape[0], cfg["beta1"], cfg["beta2"], cfg["weight_decay"]
    lr = cfg["lr"] * (cfg["hess_init"] + delta)

    def step(carry, inputs):
        m, hess, g, t = carry
        rows, k = inputs
        sigma = 1.0 / jnp.sqrt(n * (hess + delta))
        e = jax.random.normal(k, m.shape, m.dtype)
        grad = jax.grad(lambda w: _loss(task, h, w, X[rows], y[rows]))(m + sigma * e)
        g = b1 * g + (1 - b1) * grad
        h_hat = grad * e / sigma
        hess = b2 * hess + (1 - b2) * h_hat + 0.5 * (1 - b2) ** 2 * (hess - h_hat) ** 2 / (hess + delta)
        t = t + 1
        m = m - lr * (g / (1 - b1**t) + delta * m) / (hess + delta)
        return (m, hess, g, t), None

    def epoch(carry, k):
        k_rows, k_draws = jax.random.split(k)
        rows = _batches(n, k_rows)
        carry, _ = jax.lax.scan(step, carry, (rows, jax.random.split(k_draws, rows.shape[0])))
        return carry, None

    start = (theta0, jnp.full_like(theta0, cfg["hess_init"]), jnp.zeros_like(theta0), jnp.zeros((), theta0.dtype))
    (m, hess, _, _), _ = jax.lax.scan(epoch, start, jax.random.split(key, epochs))
    return m, hess


def _outputs(h, theta, X):
    return jax.vmap(h, (None, 0))(theta, X)


def fit_scale(task, f, y):
    """The temperature of a classifier's logits ``f`` that minimises the NLPD of ``y`` (a grid of
    :data:`TEMPERATURES`), or a regression's noise variance (the mean squared residual)."""
    if task == "diabetes":
        return float(jnp.mean((y - f) ** 2))
    nlpd = jax.vmap(lambda T: -jnp.mean(log_lik(task, f, y, T)))(jnp.asarray(TEMPERATURES, f.dtype))
    return float(TEMPERATURES[int(jnp.argmin(nlpd))])


def _scores(task, log_density, probs, y):
    out = {"nlpd": float(-np.mean(log_density))}
    if task != "diabetes":
        labels = np.asarray(y).astype(int)
        probs = np.asarray(probs, np.float64)
        probs = np.stack([1 - probs, probs], 1) if probs.ndim == 1 else probs
        out.update(accuracy=float(np.mean(probs.argmax(1) == labels)), ece=ece(probs, labels))
    return out


def _probs(task, f):
    """A classifier's probabilities of its logits ``f`` (the positive class's for ``binary``); None for the
    regression."""
    if task == "diabetes":
        return None
    return jax.nn.sigmoid(f) if task == "binary" else jax.nn.softmax(f, -1)


def _plug_in(task, f, y, scale):
    """Scores of the plug-in predictive: logits ``f`` at temperature ``scale``, or ``N(f, scale)``."""
    return _scores(task, log_lik(task, f, y, scale), _probs(task, f / scale), y)


def adam_validated(task, h, theta0, data, key, epochs=EPOCHS):
    """``(scores, weights, scale, seconds)``: Adam on the first 80 % of the training stream, its epoch and
    scale (temperature or noise variance) chosen on the last 20 %."""
    Xtr, ytr, Xte, yte = data
    n_fit = int(round(Xtr.shape[0] * (1 - VALIDATION)))
    train = jax.jit(lambda t, k: adam_epochs(task, h, t, Xtr[:n_fit], ytr[:n_fit], k, epochs))
    jax.block_until_ready(train(theta0, key))
    start = time.perf_counter()
    thetas = jax.block_until_ready(train(theta0, key))
    seconds = time.perf_counter() - start
    best = None
    for theta in thetas:
        f = _outputs(h, theta, Xtr[n_fit:])
        scale = fit_scale(task, f, ytr[n_fit:])
        nlpd = float(-jnp.mean(log_lik(task, f, ytr[n_fit:], scale)))
        if best is None or nlpd < best[0]:
            best = (nlpd, theta, scale)
    _, theta, scale = best
    return _plug_in(task, _outputs(h, theta, Xte), yte, scale), theta, scale, seconds


def last_layer_laplace(task, h, theta, last, X, y, noise_var, Xte, yte, key, iterations=100):
    """Scores of the Laplace posterior of the last ``last`` weights of ``theta`` (the flat MLP's last layer)
    on ``(X, y)``: GGN precision ``alpha I + sum J^T Lambda J``, ``alpha`` by the evidence's fixed point
    ``alpha = (p - alpha tr Sigma) / |w|^2`` (from 1)."""
    head, w = theta[:-last], theta[-last:]

    def f(tail, x):
        return jnp.atleast_1d(h(jnp.concatenate([head, tail]), x))

    def outputs_and_jacobians(Xc):
        return jax.vmap(f, (None, 0))(w, Xc), jax.vmap(jax.jacrev(f), (None, 0))(w, Xc)   # (B, K), (B, K, p)

    @jax.jit
    def ggn(Xc):
        out, J = outputs_and_jacobians(Xc)
        if task == "binary":
            p = jax.nn.sigmoid(out)
            lam = jax.vmap(jnp.diag)(p * (1 - p))
        elif task == "multiclass":
            p = jax.nn.softmax(out)
            lam = jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]
        else:
            lam = jnp.ones((Xc.shape[0], 1, 1), out.dtype) / noise_var
        return jnp.einsum("bkp,bkl,blq->pq", J, lam, J)

    G = sum(ggn(X[i:i + 64]).astype(jnp.float64) for i in range(0, X.shape[0], 64))   # chunks: no (n, p, p)
    eig = jnp.linalg.eigvalsh(G)
    alpha = 1.0
    for _ in range(iterations):
        gamma = float(jnp.sum(eig / (eig + alpha)))
        alpha = gamma / float(jnp.sum(w.astype(jnp.float64) ** 2))
    Sigma = jnp.linalg.inv(G + alpha * jnp.eye(last, dtype=G.dtype))
    mean, J = (a.astype(jnp.float64) for a in outputs_and_jacobians(Xte))
    V = jnp.einsum("nkq,nlq->nkl", jnp.einsum("nkp,pq->nkq", J, Sigma), J)
    if task == "binary":
        probs = jax.nn.sigmoid(mean[:, 0] / jnp.sqrt(1 + jnp.pi / 8 * V[:, 0, 0]))
        log_density = jnp.where(yte > 0, jnp.log(probs), jnp.log1p(-probs))
    elif task == "multiclass":
        L = jnp.linalg.cholesky(V + 1e-10 * jnp.eye(V.shape[-1]))
        z = jax.random.normal(key, (512,) + mean.shape, jnp.float64)
        probs = jnp.mean(jax.nn.softmax(mean + jnp.einsum("nkl,snl->snk", L, z), -1), 0)
        log_density = jnp.log(jnp.take_along_axis(probs, yte[:, None], -1)[:, 0])
    else:
        probs = None
        log_density = log_lik(task, mean[:, 0], yte, V[:, 0, 0] + noise_var)
    return {**_scores(task, log_density, probs, yte), "alpha": alpha}


def ivon(task, h, theta0, data, key, epochs=EPOCHS):
    """``(scores, seconds)`` of IVON on the whole training set: its predictive of 64 weight draws."""
    Xtr, ytr, Xte, yte = data
    train = jax.jit(lambda t, k: ivon_train(task, h, t, Xtr, ytr, k, epochs))
    jax.block_until_ready(train(theta0, key))
    start = time.perf_counter()
    m, hess = jax.block_until_ready(train(theta0, key))
    seconds = time.perf_counter() - start
    sigma = 1.0 / jnp.sqrt(Xtr.shape[0] * (hess + IVON["weight_decay"]))
    draws = m + sigma * jax.random.normal(jax.random.fold_in(key, 1), (IVON["draws"],) + m.shape, m.dtype)
    F = jax.vmap(lambda t: _outputs(h, t, Xte))(draws)                     # (S, n[, K])
    noise_var = fit_scale(task, _outputs(h, m, Xtr), ytr) if task == "diabetes" else 1.0
    log_density = jax.scipy.special.logsumexp(jax.vmap(lambda f: log_lik(task, f, yte, noise_var))(F), 0)
    log_density = log_density - np.log(F.shape[0])                         # log of the mean density
    probs = None if task == "diabetes" else jnp.mean(_probs(task, F), 0)
    return _scores(task, log_density, probs, yte), seconds


def task_data(task, seed=0, quick=False):
    """``(data, theta0, h, last)``: a task's ``(Xtr, ytr, Xte, yte)``, initial weights, network and the size
    of its last layer. The tuning_free networks (:func:`experiments.tuning_free.network_task`), or ``mlp28``:
    :mod:`benchmarks.bench_images`' MLP 784-256-256-10 on 1,000 training and 1,000 test images of
    mnist_5k, the training images in the order ``seed`` (its ``--order``), the initial weights its own."""
    if task == "mlp28":
        from benchmarks import bench_images as bi

        n_train, n_test = (bi.QUICK["train"], bi.QUICK["test"]) if quick else (1000, 1000)
        _, theta0, h, blocks = bi.network("mlp")
        Xtr, ytr, Xte, yte = (jnp.asarray(a) for a in bi.digits(n_train, n_test))
        if seed:
            order = np.random.default_rng(seed).permutation(n_train)
            Xtr, ytr = Xtr[order], ytr[order]
        return (Xtr, ytr, Xte, yte), theta0, h, blocks[-1]
    from experiments.tuning_free import layer_sizes, mlp_sizes, network_task

    _, _, _, data, theta0, h = network_task(task, quick, seed)
    return data, theta0, h, layer_sizes(mlp_sizes(task, quick))[-1]


def task_rows(task, seed=0, quick=False):
    """The three baselines' rows of ``task`` at ``seed`` (:func:`task_data`; ``quick``: its small sizes and
    2 epochs)."""
    data, theta0, h, last = task_data(task, seed, quick)
    kind = "multiclass" if task == "mlp28" else task      # the likelihood
    key, epochs = jax.random.PRNGKey(100 + seed), (2 if quick else EPOCHS)
    row = {"task": task, "seed": seed}
    scores, theta, scale, seconds = adam_validated(kind, h, theta0, data, key, epochs)
    rows = [{**row, "method": "adam_validated", "scale": scale, "seconds": seconds, **scores}]
    Xtr, ytr, Xte, yte = data
    n_fit = int(round(Xtr.shape[0] * (1 - VALIDATION)))
    laplace = last_layer_laplace(kind, h, theta, last, Xtr[:n_fit], ytr[:n_fit], scale, Xte, yte, key)
    rows.append({**row, "method": "laplace_last_layer", **laplace})
    for epochs in (IVON_EPOCHS if not quick else (2,)):
        scores, seconds = ivon(kind, h, theta0, data, key, epochs)
        rows.append({**row, "method": f"ivon_{epochs}", "seconds": seconds, **scores})
    return rows


def recipe_rows(task, seed=0, quick=False, passes=RECIPE_PASSES, members=1, rank=None):
    """The library's recipe beside them (``jr.average.recipe`` from prior variance 0.1, as
    :func:`experiments.tuning_free.learned_average`): its test NLPD after E passes at power ``1 / E`` for
    each E of ``passes``, and the seconds of those passes (compiled, best of 3:
    :func:`experiments.tuning_free.seconds_per_observation`). ``members`` > 1: the recipe over that many
    members, the initial weights of keys ``seed``, ``1000 + seed``, ... (the same stream;
    experiments/REPORT.md, "Several initial weights in one pass"). ``rank``: the low-rank belief's
    (default the tasks' :data:`experiments.tuning_free.RANK`)."""
    import jaxrvga as jr
    from experiments.networks_any_prior import initial_state, mlp
    from experiments.tuning_free import RANK, layer_sizes, mlp_sizes, network_task, seconds_per_observation, test_nlpd

    rank = RANK if rank is None else rank
    model, _, _, data, _, _ = network_task(task, quick, seed)
    rows, sizes, prior_var = [], mlp_sizes(task, quick), 0.1
    weights = [mlp(sizes, jnp.float32, 1000 * i + seed)[0] for i in range(members)]
    for E in passes:
        hot = jr.lrvga(jr.models.tempered(model, 1.0 / E), rank=rank)
        starts = [initial_state(hot, theta0, prior_var, False, rank) for theta0 in weights]
        stack = starts[0] if members == 1 else jax.tree_util.tree_map(lambda *a: jnp.stack(a), *starts)
        avg, state = jr.average.recipe(hot, stack, prior_var, layer_sizes(sizes))
        seconds = E * seconds_per_observation(avg, state, data) * data[0].shape[0]
        state = jr.passes(avg, state, data[0], data[1])  # E = 1 / power
        scores = jr.predictive_scores(state, data[2], data[3], model)
        probs = None if task == "diabetes" else scores.mean
        method = (f"recipe_{E}_passes" + (f"_{members}_members" if members > 1 else "")
                  + (f"_rank_{rank}" if rank != RANK else ""))
        rows.append({"task": task, "seed": seed, "method": method, "seconds": seconds,
                     **_scores(task, scores.log_density, probs, data[3]),
                     "nlpd_log_predictive": test_nlpd(state, model, *data[2:])})
    return rows


def summary(rows):
    """Mean (worst) test NLPD of each task and method over the seeds, and the mean accuracy, ECE, seconds."""
    out = {}
    for r in rows:
        out.setdefault(r["task"], {}).setdefault(r["method"], []).append(r)
    return {task: {method: {"nlpd": float(np.mean([r["nlpd"] for r in rs])),
                            "worst_nlpd": float(np.max([r["nlpd"] for r in rs])),
                            **{k: float(np.mean([r[k] for r in rs])) for k in ("accuracy", "ece", "seconds")
                               if k in rs[0]}, "seeds": len(rs)}
                   for method, rs in methods.items()} for task, methods in out.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="binary,multiclass,diabetes", help=f"of {', '.join(TASKS)}")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None, help="write the rows and their summary to this file")
    parser.add_argument("--recipe", action="store_true", help="run the library's recipe beside them (1 and 2 passes)")
    parser.add_argument("--recipe-members", type=int, default=1, help="the recipe over this many initial weights")
    parser.add_argument("--recipe-rank", type=int, default=None, help="the recipe's rank (default the tasks' 10)")
    a = parser.parse_args(argv)
    tasks = [t for t in a.tasks.split(",") if t]
    if (not tasks or any(t not in TASKS for t in tasks) or a.seeds < 1 or a.recipe_members < 1
            or (a.recipe_rank is not None and a.recipe_rank < 1)):
        raise SystemExit(f"--tasks must be among {TASKS}, --seeds, --recipe-members and --recipe-rank >= 1")
    rows = []
    for task in tasks:
        for seed in range(a.seeds):
            recipe = (recipe_rows(task, seed, a.quick, members=a.recipe_members, rank=a.recipe_rank)
                      if a.recipe and task != "mlp28" else [])
            for r in task_rows(task, seed, a.quick) + recipe:
                rows.append(r)
                print(json.dumps(r), flush=True)
    table = summary(rows)
    print("\n| task | method | test NLPD, mean (worst) | accuracy | ECE | seconds |\n|---|---|---|---|---|---|")
    for task, methods in table.items():
        for method, v in methods.items():
            acc, ece_, sec = (v.get(k, float("nan")) for k in ("accuracy", "ece", "seconds"))
            nlpd = f"{v['nlpd']:.3f} ({v['worst_nlpd']:.3f})"
            print(f"| {task} | {method} | {nlpd} | {acc:.3f} | {ece_:.3f} | {sec:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "summary": table}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
