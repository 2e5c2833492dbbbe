"""Full-covariance filters: per-observation time against NumPy baselines, vmapped fleets, batched
implicit solves, compile times.

    python -m benchmarks.bench_rvga [--quick] [--dtype float64|float32]

Every ratio compares two timings taken in this process, on the same data: jaxrvga's
jitted ``jr.run`` (one ``lax.scan``, compile time excluded and reported separately) against
the NumPy (+ SciPy hybr) transcription in :mod:`benchmarks.numpy_baselines`.
"""
from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxrvga as jr  # noqa: E402
from benchmarks import numpy_baselines as nb  # noqa: E402
from benchmarks.machine import describe, peak_rss_mb  # noqa: E402


def best_of(fn, repeat=3):
    """Smallest wall time of ``repeat`` calls (the least disturbed by other processes)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def problem(d, n, dtype, seed=0):
    ds = jr.baselines.data.logistic_data(s=2.0, N=n, d=d, c=1, key=jax.random.PRNGKey(seed))
    return np.asarray(ds.X, dtype), np.asarray(ds.y, dtype)


def block(tree):
    return jax.tree_util.tree_map(lambda a: a.block_until_ready(), tree)


def per_step_table(dims, quick, dtype):
    print("\n## Per-observation time, logistic regression, one pass (us / observation)")
    print(f"{'d':>6} {'filter':<16} {'jaxrvga':>10} {'NumPy':>10} {'speed-up':>9} {'max |diff|':>11}")
    rows = []
    cases = [("implicit", jr.rvga(jr.models.logistic(), "implicit"), nb.implicit_step),
             ("explicit", jr.rvga(jr.models.logistic(), "explicit"), nb.explicit_step),
             ("ekf", jr.ekf(jr.models.logistic()), nb.ekf_step)]
    for d in dims:
        n_jax = {10: 20000, 100: 5000, 1000: 300}[d] // (10 if quick else 1)
        n_np = {10: 2000, 100: 1000, 1000: 100}[d] // (10 if quick else 1)
        X, y = problem(d, max(n_jax, n_np), dtype)
        P0 = 10.0 * np.eye(d, dtype=dtype)
        for name, flt, np_step in cases:
            init = flt.init(jnp.zeros(d, dtype), jnp.asarray(P0))
            block(jr.run(flt, init, X[:n_jax], y[:n_jax]))  # compile
            t_jax = best_of(lambda: block(jr.run(flt, init, X[:n_jax], y[:n_jax]))) / n_jax

            def numpy_pass():
                mu, P = np.zeros(d), P0.astype(np.float64)
                for t in range(n_np):
                    mu, P = np_step(mu, P, X[t].astype(np.float64), float(y[t]))
                return mu

            t_np = best_of(numpy_pass, repeat=1 if d == 1000 else 2) / n_np
            ref = numpy_pass()
            ours = jr.run(flt, init, X[:n_np], y[:n_np])[0].mean
            diff = float(np.max(np.abs(np.asarray(ours, np.float64) - ref)))
            rows.append((d, name, t_jax, t_np))
            print(f"{d:>6} {name:<16} {t_jax * 1e6:>10.2f} {t_np * 1e6:>10.2f} {t_np / t_jax:>8.1f}x {diff:>11.2e}")
    return rows


def fleet_table(quick, dtype, num_filters=1000, d=20):
    print(f"\n## Fleet: {num_filters} independent implicit logistic R-VGA filters, d = {d} (filter-steps / s)")
    n = 200 if quick else 1000
    keys = jax.random.split(jax.random.PRNGKey(1), num_filters)
    X = jax.random.normal(keys[0], (num_filters, n, d), dtype)
    theta = jax.random.normal(keys[1], (num_filters, d), dtype)
    y = (jax.random.uniform(keys[2], (num_filters, n)) < jax.nn.sigmoid(jnp.einsum("fnd,fd->fn", X, theta)))
    y = y.astype(dtype)
    flt = jr.rvga(jr.models.logistic(), "implicit")
    init = flt.init(jnp.zeros(d, dtype), 10.0 * jnp.eye(d, dtype=dtype))
    inits = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (num_filters,) + a.shape), init)
    fleet = jax.jit(jax.vmap(lambda s, xs, ys: jr.scan(flt, s, xs, ys)[0]))
    block(fleet(inits, X, y))
    t_fleet = best_of(lambda: block(fleet(inits, X, y)))
    rate_fleet = num_filters * n / t_fleet
    # Baseline: a Python loop over jitted single filters (each a jitted scan over its stream).
    loop_filters = 20 if quick else 50
    block(jr.run(flt, init, X[0], y[0]))

    def loop():
        for i in range(loop_filters):
            block(jr.run(flt, init, X[i], y[i]))

    t_loop = best_of(loop, repeat=2)
    rate_loop = loop_filters * n / t_loop
    print(f"vmapped fleet        {rate_fleet:>12.3e} filter-steps/s   ({t_fleet:.3f} s for {num_filters} x {n})")
    print(f"loop of jitted runs  {rate_loop:>12.3e} filter-steps/s   ({t_loop:.3f} s for {loop_filters} x {n})")
    print(f"speed-up             {rate_fleet / rate_loop:>12.1f}x")
    return rate_fleet, rate_loop


def compile_table(dtype):
    print("\n## Compile time of jr.run (first call minus a warm call), d = 20, T = 100")
    X, y = problem(20, 100, dtype)
    key = jax.random.PRNGKey(0)
    cases = {
        "rvga implicit": (jr.rvga(jr.models.logistic(), "implicit"), None),
        "rvga explicit": (jr.rvga(jr.models.logistic(), "explicit"), None),
        "rvga poisson (convex 1-D)": (jr.rvga(jr.models.poisson(), "implicit"), None),
        "rvga nonlinear (MC)": (jr.rvga(jr.models.nonlinear(lambda th, x: x @ th, jr.models.bernoulli()),
                                        "sampled", num_samples=20), key),
        "ekf": (jr.ekf(jr.models.logistic()), None),
        "qkf": (jr.qkf(), None),
        "mirror prox": (jr.mirror_prox(jr.models.logistic()), None),
        "kalman": (jr.kalman(1.0), None),
    }
    lr = getattr(jr, "lrvga", None)
    if lr is not None:
        W0, psi0 = jr.lowrank.init_factors(key, 20, 5, 10.0)
        for scheme in ("implicit", "explicit", "extragrad", "sampled"):
            cases[f"lrvga {scheme}"] = (lr(jr.models.logistic(), rank=5, scheme=scheme), (W0, psi0, key))
    for name, (flt, extra) in cases.items():
        if isinstance(extra, tuple):
            init = flt.init(jnp.zeros(20, dtype), extra[0].astype(dtype), extra[1].astype(dtype), key=extra[2])
        else:
            init = flt.init(jnp.zeros(20, dtype), 10.0 * jnp.eye(20, dtype=dtype),
                            **({"key": extra} if extra is not None else {}))
        yy = y if "kalman" not in name else X @ np.ones(20, dtype)
        t0 = time.perf_counter()
        block(jr.run(flt, init, X, yy))
        first = time.perf_counter() - t0
        warm = best_of(lambda: block(jr.run(flt, init, X, yy)), repeat=2)
        print(f"{name:<28} {first - warm:>7.2f} s")


def solver_table(quick, dtype):
    """Batched implicit solves alone: fixed cost per Newton iteration against cost per element."""
    print("\n## Batched implicit solves (vmap of implicit.solve_logistic): cost per element and iteration")
    print(f"{'n':>7} {'time us':>10} {'max iters':>10} {'ns / (element x iter)':>23}")
    rng = np.random.default_rng(0)
    solve = jax.jit(jax.vmap(jr.kernels.root_solvers.solve_logistic))
    for n in ([100, 1000] if quick else [100, 1000, 10000]):
        args = (rng.normal(0.0, 3.0, n).astype(dtype), (10.0 ** rng.uniform(-1, 1.5, n)).astype(dtype),
                rng.integers(0, 2, n).astype(dtype))
        iters = int(block(solve(*args))[2].iterations.max())
        t = best_of(lambda: block(solve(*args)), repeat=20)
        print(f"{n:>7} {t * 1e6:>10.1f} {iters:>10} {t * 1e9 / (n * iters):>23.1f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    args = parser.parse_args(argv)
    dtype = np.dtype(args.dtype)
    print(describe())
    per_step_table([10, 100] if args.quick else [10, 100, 1000], args.quick, dtype)
    fleet_table(args.quick, dtype)
    solver_table(args.quick, dtype)
    compile_table(dtype)
    print(f"\npeak resident memory: {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
