"""The cost of the corrected Woodbury mean step: ``python -m benchmarks.bench_corrected_step``.

The default L-RVGA step (EKF, logistic, minibatch of one) timed in one process three ways: the
correction never taken (``CANCELLATION_TOL = inf``, the plain Woodbury step), taken where its bound
asks (the default, :meth:`jaxrvga.kernels.lowrank.Woodbury.solve_accurate`) and always taken
(``CANCELLATION_TOL = 0``), for float32 and float64 states; it prints ms per step and the ratio to
the plain step, and whether the default took the correction (the mean differs from the plain one).
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrvga as jr
from jaxrvga.kernels import lowrank


def _time(flt, state, X, y, repeat):
    jax.block_until_ready(jr.run(flt, state, X, y))  # compile
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        out = jax.block_until_ready(jr.run(flt, state, X, y))
        best = min(best, time.perf_counter() - t)
    return 1e3 * best / X.shape[0], out[0].mean


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, default=200_000)
    parser.add_argument("--p", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.steps, args.d))
    y = (rng.random(args.steps) < 0.5).astype(float)
    flt = jr.lrvga(jr.models.logistic(), rank=args.p, scheme="ekf")
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(0), args.d, args.p, prior_var=1.0)
    print(f"d = {args.d}, p = {args.p}, {args.steps} steps, best of {args.repeat}")
    print(f"{'dtype':8s} {'plain ms':>9s} {'default ms':>11s} {'always ms':>10s} {'default/plain':>14s} "
          f"{'always/plain':>13s} {'default corrects':>17s}")
    default_tol = lowrank.CANCELLATION_TOL
    try:
        for dtype in (jnp.float32, jnp.float64):
            state = flt.init(jnp.zeros(args.d, dtype), W0.astype(dtype), psi0.astype(dtype))
            Xd, yd = jnp.asarray(X, dtype), jnp.asarray(y, dtype)
            times, means = {}, {}
            for name, tol in (("plain", np.inf), ("default", default_tol), ("always", 0.0)):
                lowrank.CANCELLATION_TOL = tol
                jax.clear_caches()
                times[name], means[name] = _time(flt, state, Xd, yd, args.repeat)
            corrects = not np.array_equal(np.asarray(means["default"]), np.asarray(means["plain"]))
            print(f"{jnp.dtype(dtype).name:8s} {times['plain']:9.2f} {times['default']:11.2f} {times['always']:10.2f} "
                  f"{times['default'] / times['plain']:14.2f} {times['always'] / times['plain']:13.2f} "
                  f"{str(corrects):>17s}")
    finally:
        lowrank.CANCELLATION_TOL = default_tol


if __name__ == "__main__":
    main()
