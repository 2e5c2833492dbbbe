"""Limited-memory filters (L-RVGA): time per observation against the NumPy transcription.

    python -m benchmarks.bench_lrvga [--quick] [--dtype float64 float32] [--d ...] [--p ...]

Every ratio compares two timings taken in this process, on the same data and the same
initial factors: jaxrvga's jitted ``jr.run`` (one ``lax.scan``; compile time excluded and
reported separately) against the NumPy transcription of Algorithm 1 and of the L-RVGA steps
in :mod:`benchmarks.numpy_baselines`:

* ``linear``: linear-Gaussian L-RVGA, scheme ``"exact"`` ([LRVGA] eqs. 23-27) vs
  ``lrvga_linear_step``;
* ``logistic``: explicit logistic L-RVGA, scheme ``"explicit"`` ([LRVGA] §5.3) vs
  ``lrvga_logistic_explicit_step``;
* ``linear-default``: the library's default (accurate) projection against the same NumPy
  published step: a speed ratio only, ``rel diff`` is not defined.

``linear`` and ``logistic`` use ``published=True``, the algorithm the NumPy side transcribes.

Both sides take the best of 3 repetitions (the machine may be shared). Data: ``x_t ~ N(0,
I_d / d)``, ``y`` from a fixed Gaussian ``theta*``; factors from
:func:`jaxrvga.kernels.lowrank.init_factors` (prior variance 1). ``max |diff|`` is the largest
difference of the final means (the NumPy side runs in the input dtype, except that its
``np.eye`` / ``np.linalg.inv`` p x p parts are float64, as a user's transcription would be).
The number of steps per case shrinks with ``d p^2`` to keep the whole run to minutes.
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
from benchmarks.bench_rvga import best_of, block  # noqa: E402
from benchmarks.machine import describe, peak_rss_mb  # noqa: E402
from jaxrvga import lrvga  # noqa: E402

MODELS = {
    "linear": (lambda p, n: lrvga(jr.models.linear_gaussian(1.0), rank=p, inner_loops=n, scheme="exact",
                                  published=True), nb.lrvga_linear_step),
    "logistic": (lambda p, n: lrvga(jr.models.logistic(), rank=p, inner_loops=n, scheme="explicit", published=True),
                 nb.lrvga_logistic_explicit_step),
    # The library's default projection (spectral warm start, unprojected mean step) against the same
    # NumPy transcription of the published step: a speed ratio only (the results differ by design).
    "linear-default": (lambda p, n: lrvga(jr.models.linear_gaussian(1.0), rank=p, inner_loops=n, scheme="exact"),
                       nb.lrvga_linear_step),
}


def num_steps(d, p, loops, budget):
    """Steps per case: about ``budget`` multiply-adds of the d p^2 work, between 1 and 40."""
    return int(max(1, min(40, budget // (d * max(p, 3) ** 2 * (loops + 1)))))


def problem(d, steps, dtype, model, seed=0):
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((steps, d)) / np.sqrt(d)).astype(dtype)
    theta = rng.standard_normal(d).astype(dtype)
    eta = X @ theta
    if model == "linear":
        y = eta + rng.standard_normal(steps).astype(dtype)
    else:
        y = (rng.uniform(size=steps) < 1 / (1 + np.exp(-eta))).astype(dtype)
    return X, y


def run_case(model, d, p, loops, dtype, budget, repeat=3):
    """Time one case; returns a dict of figures."""
    steps = num_steps(d, p, loops, budget)
    X, y = problem(d, steps, dtype, model)
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(1), d, p, 1.0, dtype=dtype)
    W0, psi0 = np.asarray(W0), np.asarray(psi0)
    make, np_step = MODELS[model]
    flt = make(p, loops)
    init = flt.init(jnp.zeros(d, dtype), jnp.asarray(W0), jnp.asarray(psi0))
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    t0 = time.perf_counter()
    out = block(jr.run(flt, init, Xj, yj)[0])
    first = time.perf_counter() - t0
    t_jax = best_of(lambda: block(jr.run(flt, init, Xj, yj)[0]), repeat)
    del out

    def numpy_pass():
        mu, W, psi = np.zeros(d, dtype), W0, psi0
        for t in range(steps):
            mu, W, psi = np_step(mu, W, psi, X[t], float(y[t]), loops)
        return mu

    t_np = best_of(numpy_pass, repeat)
    ref = numpy_pass()
    ours = np.asarray(jr.run(flt, init, Xj, yj)[0].mean)
    scale = max(float(np.max(np.abs(ref))), 1e-300) if not model.endswith("-default") else np.nan
    return {"model": model, "d": d, "p": p, "loops": loops, "dtype": np.dtype(dtype).name,
            "steps": steps, "jax_ms": 1e3 * t_jax / steps, "numpy_ms": 1e3 * t_np / steps,
            "speedup": t_np / t_jax, "compile_s": first - t_jax,
            "rel_diff": float(np.max(np.abs(ours.astype(np.float64) - ref))) / scale}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="d in {1e3, 1e4}, p in {1, 10}")
    parser.add_argument("--dtype", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    parser.add_argument("--d", nargs="+", type=int)
    parser.add_argument("--p", nargs="+", type=int)
    parser.add_argument("--loops", nargs="+", type=int, default=[1, 3])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--budget", type=float, default=3e9,
                        help="multiply-adds of d p^2 work per case (sets the number of steps)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    dims = args.d or ([1000, 10_000] if args.quick else [10_000, 100_000, 1_000_000])
    ranks = args.p or ([1, 10] if args.quick else [1, 10, 100])
    budget = 3e8 if args.quick and args.budget == 3e9 else args.budget
    print(describe())
    print(f"best of {args.repeat}; times per observation; speed-up = NumPy / jaxrvga (same process, same data)")
    header = (f"{'model':<9} {'dtype':<8} {'d':>9} {'p':>4} {'n_in':>4} {'steps':>5} {'jaxrvga ms':>11} "
              f"{'NumPy ms':>10} {'speed-up':>9} {'compile s':>9} {'rel diff':>9}")
    for dtype in args.dtype:
        print("\n" + header)
        print("-" * len(header))
        for model in args.models:
            for d in dims:
                for p in ranks:
                    for loops in args.loops:
                        r = run_case(model, d, p, loops, np.dtype(dtype), budget, args.repeat)
                        print(f"{model:<9} {dtype:<8} {d:>9,} {p:>4} {loops:>4} {r['steps']:>5} "
                              f"{r['jax_ms']:>11.2f} {r['numpy_ms']:>10.2f} {r['speedup']:>8.2f}x "
                              f"{r['compile_s']:>9.2f} {r['rel_diff']:>9.1e}", flush=True)
    print(f"\npeak resident memory of this process (NumPy baseline included): {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
