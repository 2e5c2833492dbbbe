"""The dense step against its arithmetic: ``python -m benchmarks.bench_dense [--d 1000 3000] [--steps 50]``.

A rank-one covariance step is a product ``v = P x`` (one read of ``P``) and the update
``P - s v v^T`` (one read and one write): three passes over d^2 numbers, whatever the scheme adds in
O(d). In the same process, on the same data, for the logistic EKF (float32, ``T = --steps``
observations, interleaved rounds, the best of ``--rounds``), per observation:

* ``jr.run(jr.ekf(logistic))``: the library's guarded step (prediction, the site, the rank-one
  update certified from scalars, the mean step from ``V``, the guard);
* ``floor (XLA)``: a ``lax.scan`` of exactly ``v = P x``, ``P <- P - s v v^T``, ``mu <- mu + c v``
  with the EKF's scalars, no checks;
* ``NumPy``: the same step in NumPy (``P @ x``, then ``P -= s np.outer(v, v)`` in place).

The ratio of the library to each floor is printed, and the memory traffic of three passes at
10 GB/s for scale.
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrvga as jr
from benchmarks.machine import describe, peak_rss_mb


def _problem(d, T, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d)).astype(np.float32) / np.sqrt(d)
    P = A @ A.T + np.eye(d, dtype=np.float32)
    X = (rng.normal(size=(T, d)) / np.sqrt(d)).astype(np.float32)
    y = (rng.random(T) < 0.5).astype(np.float32)
    return P, X, y


def _floor_xla():
    def step(carry, xy):
        mu, P = carry
        x, y = xy
        p = jax.nn.sigmoid(x @ mu)
        v = P @ x
        c = p * (1 - p)
        s = c / (1 + c * (x @ v))
        return (mu + (y - p) / (1 + c * (x @ v)) * v, P - s * jnp.outer(v, v)), None

    return jax.jit(lambda mu, P, X, y: jax.lax.scan(step, (mu, P), (X, y))[0], donate_argnums=1)


def _numpy_step(mu, P, X, y):
    for x, t in zip(X, y):
        p = 1 / (1 + np.exp(-x @ mu))
        v = P @ x
        c = p * (1 - p)
        q = 1 + c * (x @ v)
        mu = mu + (t - p) / q * v
        P -= (c / q) * np.outer(v, v)
    return mu, P


def main(dims=(1000, 3000), steps=50, rounds=5):
    print(describe())
    flt = jr.ekf(jr.models.logistic())
    floor = _floor_xla()
    for d in dims:
        P, X, y = _problem(d, steps)
        state = flt.init(jnp.zeros(d, jnp.float32), jnp.asarray(P))
        run = jax.jit(lambda s, X, y: jr.scan(flt, s, X, y)[0])
        jax.block_until_ready(run(state, X, y))
        jax.block_until_ready(floor(jnp.zeros(d, jnp.float32), jnp.asarray(P), X, y))
        times = {"jr.run(jr.ekf(logistic))": [], "floor (XLA)": [], "NumPy": []}
        for _ in range(rounds):
            start = time.perf_counter()
            jax.block_until_ready(run(state, X, y))
            times["jr.run(jr.ekf(logistic))"].append(time.perf_counter() - start)
            P_j = jnp.asarray(P)
            start = time.perf_counter()
            jax.block_until_ready(floor(jnp.zeros(d, jnp.float32), P_j, X, y))
            times["floor (XLA)"].append(time.perf_counter() - start)
            P_np = P.copy()
            start = time.perf_counter()
            _numpy_step(np.zeros(d, np.float32), P_np, X, y)
            times["NumPy"].append(time.perf_counter() - start)
        ms = {k: min(v) / steps * 1e3 for k, v in times.items()}
        lib = ms["jr.run(jr.ekf(logistic))"]
        traffic = 3 * d * d * 4 / 1e10 * 1e3
        print(f"\nd = {d}, float32, {steps} steps, best of {rounds} rounds: ms per observation "
              f"(three passes over P at 10 GB/s: {traffic:.2f} ms)")
        for k, v in ms.items():
            print(f"  {k:<28} {v:8.3f}   library / this: {lib / v:5.2f}")
    print(f"\npeak RSS {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    a = parser.parse_args()
    main(a.d, a.steps, a.rounds)
