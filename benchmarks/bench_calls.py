"""First and repeated calls of the un-jitted entry points: ``python -m benchmarks.bench_calls``.

The README quick start's patterns on its small problem (200 observations, d = 5): each entry point is
called three times with the same configuration and shapes (a filter built anew each call, as a
user's loop does), and the wall time of each call is printed, with a jitted ``jax.numpy`` dot of
the same data as the baseline of a call that does no tracing. The first call traces and compiles;
a repeated call should not (the goal: under 50 ms on a quiet 2-core machine).
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrvga as jr
from benchmarks.machine import describe


def _data(n: int = 200, d: int = 5):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d) + 0.3 * rng.normal(size=n)


def _calls(X, y):
    """``name -> fn()``: one call of each entry point, its filter built inside."""
    d = X.shape[1]

    def evidence():
        kf = jr.kalman(0.09, decay=0.99, additive_noise=1e-3)
        return jr.log_evidence(kf, kf.init(jnp.zeros(d), jnp.eye(d)), X, y)

    def run_logistic():
        flt = jr.rvga(jr.models.logistic(), scheme="implicit")
        return jr.run(flt, flt.init(jnp.zeros(d), 10.0 * jnp.eye(d)), X, (y > 0).astype(float))[0].mean

    def fleet_logistic():  # the README's pattern: jax.vmap of a function that calls jr.run
        flt = jr.rvga(jr.models.logistic(), scheme="implicit")
        labels = (y > 0).astype(float)

        def fit(prior_var):
            return jr.run(flt, flt.init(jnp.zeros(d), prior_var * jnp.eye(d)), X, labels)[0].mean

        return jax.vmap(fit)(jnp.logspace(-1, 1, 5))

    state = jr.kalman(0.09).init(jnp.zeros(d), jnp.eye(d))
    model = jr.models.linear_gaussian(0.09)
    return {"jr.log_evidence (Kalman, drift)": evidence,
            "jr.run (implicit logistic R-VGA)": run_logistic,
            "5-member implicit fleet (vmap of jr.run)": fleet_logistic,
            "jr.predictive (3 inputs)": lambda: jr.predictive(state, X[:3], model).mean,
            "jr.log_predictive (1 observation)": lambda: jr.log_predictive(state, X[0], y[0], model)}


def _seconds(fn) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def main():
    X, y = _data()
    dot = jax.jit(lambda a, b: a @ b)
    baseline = min(_seconds(lambda: dot(y, X)) for _ in range(5))
    print(describe())
    print(f"baseline: a jitted dot of the same data, {baseline * 1e3:.3f} ms per call\n")
    print("| entry point | first call | second | third | third / baseline |")
    print("|---|---|---|---|---|")
    for name, fn in _calls(X, y).items():
        times = [_seconds(fn) for _ in range(3)]
        print(f"| {name} | {times[0] * 1e3:.0f} ms | {times[1] * 1e3:.1f} ms | {times[2] * 1e3:.1f} ms | "
              f"{times[2] / baseline:.0f}x |")


if __name__ == "__main__":
    main()
