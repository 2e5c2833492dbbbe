"""Minibatches of a 10-class network: time per image of batch 1 against minibatches, with Adam.

    python -m benchmarks.bench_minibatch [--repeat 3] [--batches 1 16] [--scheme ekf] [--flops]
                                         [--profile] [--options '{"projection": "..."}']

The MLP 64-128-64-10 (ReLU, d = 17 226, LeCun-normal start) on the sklearn digits (10 classes,
1200 training images, 597 test, pixels / 16), categorical output, float32, ``jr.lrvga(rank=10)``
with prior ``N(theta0, 0.1 I)``, one pass; optax Adam (batch 1, learning rate 1e-3) in the same
process. Each method is one jitted ``jr.scan`` (compile excluded), best of ``--repeat`` rounds
that run every method in turn. Test scores of the linearised predictive (``jr.predictive``):
accuracy and NLPD (mean negative log predictive probability of the label). ``--flops``: XLA's
count of one update per image (units of d). ``--profile``: the pieces of one minibatch update
(linearisation, bordered Gram, projection) jitted alone.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxrvga as jr
from benchmarks import bench_nn
from benchmarks.machine import describe

RANK = 10
PRIOR_VAR = 0.1
SIZES = (64, 128, 64, 10)


def digits(num_train=1200):
    """10-class sklearn digits (pixels / 16), shuffled: ``(Xtr, ytr, Xte, yte)``."""
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(0).permutation(len(X))
    X, y = (X[perm] / 16.0).astype(np.float32), y[perm].astype(np.int32)
    return X[:num_train], y[:num_train], X[num_train:], y[num_train:]


def mlp(key):
    """``(theta0, h)``: the MLP ``SIZES`` of :func:`benchmarks.bench_nn.mlp`, ``h(theta, x) -> logits``."""
    return bench_nn.mlp(key, SIZES)


def filter_and_state(h, theta0, batch, scheme, options):
    model = jr.models.nonlinear(h, jr.models.categorical(SIZES[-1]))
    flt = jr.lrvga(model if batch == 1 else jr.models.minibatch(model), rank=RANK, scheme=scheme, **options)
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(1), theta0.shape[0], RANK, PRIOR_VAR)
    return model, flt, flt.init(theta0, W0, psi0)


def lrvga_run(h, theta0, batch, scheme, options):
    model, flt, state = filter_and_state(h, theta0, batch, scheme, options)

    def run(state, xs, ys):
        T = xs.shape[0] // batch
        if batch > 1:
            xs, ys = xs[:T * batch].reshape(T, batch, -1), ys[:T * batch].reshape(T, batch)
        return jr.scan(flt, state, xs, ys)[0]

    return run, state, model


def adam_run(h, lr=1e-3):
    opt = optax.adam(lr)

    def loss(theta, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(h(theta, x), y)

    def step(carry, xy):
        theta, s = carry
        upd, s = opt.update(jax.grad(loss)(theta, *xy), s, theta)
        return (optax.apply_updates(theta, upd), s), None

    def run(theta, xs, ys):
        return jax.lax.scan(step, (theta, opt.init(theta)), (xs, ys))[0][0]

    return run


def nlpd(probs, y):
    probs = np.clip(np.asarray(probs, np.float64), 1e-12, 1.0)
    return float(-np.mean(np.log(probs[np.arange(len(y)), y]))), float(np.mean(probs.argmax(1) == y))


def update_flops(flt, state, x, y):
    cost = jax.jit(flt.update).lower(state, x, y).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost["flops"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--scheme", default="ekf")
    parser.add_argument("--options", default="{}", help="JSON options of jr.lrvga for the minibatch runs")
    parser.add_argument("--train", type=int, default=1200)
    parser.add_argument("--flops", action="store_true")
    a = parser.parse_args()
    print(describe())
    print(f"# load average at start: {os.getloadavg()}")
    Xtr, ytr, Xte, yte = digits(a.train)
    xs, ys = jnp.asarray(Xtr), jnp.asarray(ytr)
    theta0, h = mlp(jax.random.PRNGKey(0))
    d, T = theta0.shape[0], xs.shape[0]
    options = json.loads(a.options)
    print(f"# MLP {SIZES} (d = {d}), categorical, {T} images, rank {RANK}, scheme {a.scheme!r}, options {options}")
    runs = [("adam, batch 1", jax.jit(adam_run(h)), (theta0, xs, ys), None)]
    for b in a.batches:
        run, state, model = lrvga_run(h, theta0, b, a.scheme, options if b > 1 else {})
        runs.append((f"lrvga, batch {b}", jax.jit(run), (state, xs, ys), model))
    best, outs = {}, {}
    for name, fn, args, _ in runs:
        t0 = time.perf_counter()
        outs[name] = jax.block_until_ready(fn(*args))
        print(f"# compiled and ran {name} in {time.perf_counter() - t0:.1f} s", flush=True)
    for _ in range(a.repeat):
        for name, fn, args, _ in runs:
            spent, reps = 0.0, 0
            while spent < 0.25 or reps == 0:
                t0 = time.perf_counter()
                jax.block_until_ready(fn(*args))
                t = time.perf_counter() - t0
                spent, reps = spent + t, reps + 1
                best[name] = min(best.get(name, np.inf), t)
    base = best["adam, batch 1"] / T
    print("| method | us / image | x Adam | test accuracy | test NLPD |")
    print("|---|---|---|---|---|")
    Xte_j = jnp.asarray(Xte)
    for name, _, _, model in runs:
        if model is None:
            probs = jax.nn.softmax(jax.vmap(h, in_axes=(None, 0))(outs[name], Xte_j))
        else:
            probs = jr.predictive(outs[name], Xte_j, model=model).mean
        nl, acc = nlpd(probs, yte)
        us = best[name] / T * 1e6
        print(f"| {name} | {us:.0f} | {us / base / 1e6:.1f} | {acc:.3f} | {nl:.3f} |")
    print(f"# load average at end: {os.getloadavg()}")
    if a.flops:
        for b in a.batches:
            _, flt, state = filter_and_state(h, theta0, b, a.scheme, options if b > 1 else {})
            x, y = (xs[0], ys[0]) if b == 1 else (xs[:b], ys[:b])
            print(f"# flops / image, batch {b}: {update_flops(flt, state, x, y) / b / d:.0f} d")


if __name__ == "__main__":
    main()
