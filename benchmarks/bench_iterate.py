"""Algorithm 1 with the iterate stored or recomputed: time and XLA's temporary memory.

    python -m benchmarks.bench_iterate [--d 1000000] [--p 10] [--loops 3] [--dtype float64 float32]

:func:`jaxrvga.kernels.factor_analysis.recursive_em_step` either keeps the iterate ``W_k`` between inner
loops (``store_iterate=True``: one more d x p array) or recomputes its rows from ``W_prev`` in
each pass (``store_iterate=False``: pass k multiplies the rows by a (p, k p) matrix). This
script times both on the same inputs, alternating them over ``--repeat`` rounds (best time of
each), and prints the temporary memory of each compiled step from XLA's own account
(``memory_analysis``, with ``W`` and ``psi`` donated) in units of ``W``.
"""
from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

from benchmarks.bench_rvga import block  # noqa: E402
from benchmarks.machine import describe  # noqa: E402
from jaxrvga.kernels import factor_analysis as fa  # noqa: E402


def compare(d: int, p: int, loops: int, dtype, repeat: int):
    """``{store: (best seconds, temporaries / W bytes)}`` for ``store_iterate`` True and False."""
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    W = 0.1 * jax.random.normal(keys[0], (d, p), dtype)
    psi = jnp.exp(jax.random.normal(keys[1], (d,), dtype))
    x = jax.random.normal(keys[2], (d,), dtype)
    steps, out = {}, {}
    for store in (True, False):
        step = jax.jit(lambda W, psi, x, store=store: fa.recursive_em_step(
            W, psi, x, 1.0, 1.0, loops, store_iterate=store))
        mem = jax.jit(step, donate_argnums=(0, 1)).lower(W, psi, x).compile().memory_analysis()
        block(step(W, psi, x))
        steps[store] = step
        out[store] = [float("inf"), mem.temp_size_in_bytes / W.nbytes]
    for _ in range(repeat):
        for store, step in steps.items():
            t0 = time.perf_counter()
            block(step(W, psi, x))
            out[store][0] = min(out[store][0], time.perf_counter() - t0)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, default=1_000_000)
    parser.add_argument("--p", type=int, default=10)
    parser.add_argument("--loops", type=int, default=3)
    parser.add_argument("--dtype", nargs="+", default=["float64", "float32"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(describe())
    print(f"Algorithm 1, d = {args.d:,}, p = {args.p}, {args.loops} inner loops; best of {args.repeat}, "
          "alternating; temporaries from XLA's memory_analysis, in units of W")
    print(f"{'dtype':<8} {'stored ms':>10} {'recomputed ms':>14} {'time ratio':>11} "
          f"{'stored temp':>12} {'recomputed temp':>16}")
    for name in args.dtype:
        res = compare(args.d, args.p, args.loops, jnp.dtype(name), args.repeat)
        (ts, ms), (tr, mr) = res[True], res[False]
        print(f"{name:<8} {1e3 * ts:>10.1f} {1e3 * tr:>14.1f} {tr / ts:>10.2f}x {ms:>11.2f}W {mr:>15.2f}W")


if __name__ == "__main__":
    main()
