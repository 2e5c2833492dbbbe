"""The cost of the prediction step and of one-step-ahead scores: ``python -m benchmarks.bench_predict``.

In the same process, on the same data, interleaved round by round (us per observation, the minimum
and the median of the rounds), for the Kalman filter (d = 50) and the L-RVGA on logistic
regression (d = 1000, p = 10, EKF scheme, float32):

* ``scan(update)``: a hand-written ``jax.jit(lax.scan)`` of ``flt.update``, the baseline;
* ``jr.run``: the library's driver, no trace (the prediction step is the identity);
* ``jr.run + log predictive``: with ``jr.trace_log_predictive`` (scored before each update);
* ``additive noise``: ``jr.run`` of the filter with ``additive_noise`` (a prediction step that changes
  the belief: for the L-RVGA, two passes over ``W``, the new factors and their Gram).

The ratios to the baseline are printed; ``jr.run`` without a trace must cost what the scan costs.
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrvga as jr
from benchmarks.machine import describe, peak_rss_mb


def _timer(fn, *args):
    jax.block_until_ready(fn(*args))  # compile

    def once():
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        return time.perf_counter() - start

    return once


def _cases(d_kalman: int, d_lowrank: int, rank: int, T: int):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(T, d_kalman))
    y = X @ rng.normal(size=d_kalman) + 0.3 * rng.normal(size=T)
    kalman = (jr.kalman(0.09), jr.kalman(0.09, additive_noise=1e-4), jr.models.linear_gaussian(0.09),
              jr.kalman(0.09).init(jnp.zeros(d_kalman), jnp.eye(d_kalman)), X, y)
    X = (rng.normal(size=(T, d_lowrank)) / np.sqrt(d_lowrank)).astype(np.float32)
    y = (rng.random(T) < 0.5).astype(np.float32)
    model = jr.models.logistic()
    flt = jr.lrvga(model, rank, scheme="ekf")
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(0), d_lowrank, rank, 1.0, dtype=jnp.float32)
    lowrank = (flt, jr.lrvga(model, rank, scheme="ekf", additive_noise=1e-4), model,
               flt.init(jnp.zeros(d_lowrank, jnp.float32), W0, psi0), X, y)
    return {f"kalman d={d_kalman}": kalman, f"lrvga d={d_lowrank} p={rank}": lowrank}


def main(d_kalman: int = 50, d_lowrank: int = 1000, rank: int = 10, T: int = 2000, rounds: int = 7):
    print(describe())
    for name, (flt, noisy, model, state, X, y) in _cases(d_kalman, d_lowrank, rank, T).items():
        scan = jax.jit(lambda s, xs, ys: jax.lax.scan(lambda c, xy: (flt.update(c, *xy), None), s, (xs, ys))[0])
        trace = jr.trace_log_predictive(model)
        timers = {"scan(update)": _timer(scan, state, X, y),
                  "jr.run": _timer(lambda s, xs, ys: jr.run(flt, s, xs, ys)[0], state, X, y),
                  "jr.run + log predictive": _timer(lambda s, xs, ys: jr.run(flt, s, xs, ys, trace)[1], state, X, y),
                  "additive noise": _timer(lambda s, xs, ys: jr.run(noisy, s, xs, ys)[0], state, X, y)}
        times = {k: [] for k in timers}
        for _ in range(rounds):
            for k, once in timers.items():
                times[k].append(once() / T * 1e6)
        base = min(times["scan(update)"])
        print(f"\n{name}, T = {T}: us per observation (min, median of {rounds} rounds), ratio of the minima")
        for k, v in times.items():
            print(f"  {k:<26} {min(v):9.2f} {np.median(v):9.2f}   x{min(v) / base:.2f}")
    print(f"\npeak RSS {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--T", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    a = parser.parse_args()
    main(T=a.T, rounds=a.rounds)
