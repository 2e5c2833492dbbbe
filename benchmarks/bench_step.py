"""One observation at a time: a jitted single step against a NumPy step, and where the time goes.

    python -m benchmarks.bench_step [--d 100] [--steps 1000] [--rounds 7] [--dtype float64|float32]

Data arriving as it comes means one call per observation, so the fixed cost of a call counts
as much as the arithmetic. For the EKF and the implicit R-VGA (logistic regression) this times,
in the same process and on the same data, interleaved round by round:

* ``numpy``: the NumPy (+ SciPy hybr for the implicit scheme) step of :mod:`benchmarks.numpy_baselines`;
* ``jit(update)``: ``jax.jit(flt.update)`` called on the state (six arrays in, six new out);
* ``jit(update, donate)``: the same with the state's buffers donated;
* ``AOT compiled``: ``jax.jit(flt.update).lower(...).compile()`` (the Python-side call path);
* ``jr.step_fn``: the state packed into one buffer per dtype (two), donated;
* ``dispatch only``: a jitted identity of the state that also takes ``x`` and ``y`` (no arithmetic);
* ``in-scan compute``: the per-step time inside one ``jr.run`` scan (no per-step call at all).

Times are us per observation, the minimum and the median of the rounds (the machine may be shared).

Then two costs of long runs: the overhead of ``jr.run(..., progress=True)`` against the same run
without a bar (implicit R-VGA, d = 10, T = 1e5, interleaved rounds), and the time of each chunk of a
run fed in chunks of 1000, 1000 and 700 observations, exact lengths against ``bucket=True``.
"""
from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxrvga as jr  # noqa: E402
from benchmarks import numpy_baselines as nb  # noqa: E402
from benchmarks.machine import describe, peak_rss_mb  # noqa: E402


def problem(d, n, dtype, seed=0):
    ds = jr.baselines.data.logistic_data(s=2.0, N=n, d=d, c=1, key=jax.random.PRNGKey(seed))
    return np.asarray(ds.X, dtype), np.asarray(ds.y, dtype)


def variants(flt, np_step, s0, X, y):
    """Each variant: a function running the whole stream one observation at a time; returns the mean."""
    n, d = X.shape

    def numpy_loop():
        mu, P = np.zeros(d), np.asarray(s0.cov, np.float64)
        for t in range(n):
            mu, P = np_step(mu, P, X[t].astype(np.float64), float(y[t]))
        return mu

    def loop(update, fresh):
        def run():
            s = jax.tree_util.tree_map(jnp.copy, s0) if fresh else s0
            for t in range(n):
                s = update(s, X[t], y[t])
            return jax.block_until_ready(s).mean
        return run

    step = jr.step_fn(flt, s0, X[0], y[0])

    def step_loop():
        packed = step.pack(s0)
        for t in range(n):
            packed = step.update(packed, X[t], y[t])
        return step.unpack(jax.block_until_ready(packed)).mean

    scan = jax.jit(lambda s, X, y: jr.scan(flt, s, X, y)[0].mean)
    return {
        "numpy": numpy_loop,
        "jit(update)": loop(jax.jit(flt.update), False),
        "jit(update, donate)": loop(jax.jit(flt.update, donate_argnums=0), True),
        "AOT compiled": loop(jax.jit(flt.update).lower(s0, X[0], y[0]).compile(), False),
        "jr.step_fn": step_loop,
        "dispatch only": loop(jax.jit(lambda s, x, y: s, keep_unused=True), False),
        "in-scan compute": lambda: jax.block_until_ready(scan(s0, X, y)),
    }


def table(name, flt, np_step, d, n, rounds, dtype):
    X, y = problem(d, n, dtype)
    s0 = flt.init(jnp.zeros(d, dtype), jnp.eye(d, dtype=dtype))
    fns = variants(flt, np_step, s0, X, y)
    results = {k: f() for k, f in fns.items()}  # warm-up (compiles) and the answers
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append((time.perf_counter() - t0) / n * 1e6)
    t_np = min(times["numpy"])
    print(f"\n## {name}, d = {d}, {dtype}: one observation per call (us / observation, {n} steps, {rounds} rounds)")
    print(f"{'variant':<22} {'min':>8} {'median':>8} {'NumPy / this':>13} {'max |mean - NumPy|':>19}")
    for k, v in times.items():
        diff = float(np.max(np.abs(np.asarray(results[k], np.float64) - results["numpy"])))
        diff = "-" if k == "dispatch only" else f"{diff:.2e}"  # it computes nothing
        print(f"{k:<22} {min(v):>8.1f} {np.median(v):>8.1f} {t_np / min(v):>12.2f}x {diff:>19}")


def progress_overhead(rounds, dtype, T=100_000, d=10):
    import tqdm.auto

    class Quiet(tqdm.auto.tqdm):  # the bar's drawing is not what is measured
        def __init__(self, *a, **k):
            super().__init__(*a, file=open(os.devnull, "w"), **k)

    tqdm.auto.tqdm, plain_tqdm = Quiet, tqdm.auto.tqdm
    X, y = problem(d, T, dtype)
    flt = jr.rvga(jr.models.logistic())
    s0 = flt.init(jnp.zeros(d, dtype), jnp.eye(d, dtype=dtype))
    times = {False: [], True: []}
    for _ in range(rounds + 1):  # the first round compiles
        for progress in times:
            t0 = time.perf_counter()
            jax.block_until_ready(jr.run(flt, s0, X, y, progress=progress))
            times[progress].append(time.perf_counter() - t0)
    tqdm.auto.tqdm = plain_tqdm
    a, b = min(times[False][1:]), min(times[True][1:])
    print(f"\n## jr.run(progress=True), implicit R-VGA, d = {d}, T = {T}, {dtype}, best of {rounds}")
    print(f"without {a * 1e3:.1f} ms, with {b * 1e3:.1f} ms: overhead {b / a - 1:+.1%}")


def chunked_runs(dtype, d=20):
    X, y = problem(d, 2700, dtype)
    print(f"\n## A run fed in chunks of 1000, 1000, 700 observations (implicit R-VGA, d = {d}, {dtype}; s per call)")
    for bucket in [None, True]:
        flt = jr.rvga(jr.models.logistic())  # a fresh filter: nothing compiled yet
        s, times = flt.init(jnp.zeros(d, dtype), jnp.eye(d, dtype=dtype)), []
        for a, b in [(0, 1000), (1000, 2000), (2000, 2700)]:
            t0 = time.perf_counter()
            s = jax.block_until_ready(jr.run(flt, s, X[a:b], y[a:b], bucket=bucket)[0])
            times.append(time.perf_counter() - t0)
        print(f"bucket={bucket!s:<5} " + "  ".join(f"{t:7.3f}" for t in times))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    args = parser.parse_args(argv)
    print(describe())
    dtype = np.dtype(args.dtype)
    for name, flt, np_step in [("EKF", jr.ekf(jr.models.logistic()), nb.ekf_step),
                               ("implicit R-VGA", jr.rvga(jr.models.logistic()), nb.implicit_step)]:
        table(name, flt, np_step, args.d, args.steps, args.rounds, dtype)
    progress_overhead(args.rounds, dtype)
    chunked_runs(dtype)
    print(f"\npeak RSS {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
