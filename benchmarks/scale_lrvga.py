"""Time and host memory of L-RVGA at large scale ([LRVGA] Table 2: d = 1e6).

Runs ``--steps`` updates of the linear-Gaussian (exact scheme, D1) and the logistic
(implicit scheme, D2) L-RVGA at dimension ``--d`` and rank ``--p`` as one jitted
``lax.scan`` through :func:`jaxrvga.core.run`, and prints the time per step and the peak
resident memory above the baseline, next to the size of the state ``8 d (p + 2)`` bytes
(float64: ``W``, ``mean`` and ``psi``; [LRVGA] Table 2's memory model).

Data. A stored stream of ``steps`` inputs would take ``8 d steps`` bytes (800 MB for
d = 1e6 and 100 steps, eight times the state) and dominate the measurement. Instead the
scanned "inputs" are PRNG keys and each step draws its own ``x_t ~ N(0, I_d / d)`` inside
the scan, then its label from a fixed ``theta*`` (also regenerated from a fixed key inside
the step, so no d-vector constant is captured): ``y = x^T theta* + N(0, 1)`` (linear) or
``y ~ Bernoulli(sig(x^T theta*))`` (logistic). Both are drawn in the row blocks of the filter's
passes and ``x^T theta*`` is summed block by block, so the data cost one d-vector (``x``) per step:
drawn whole, the random-number generator's d-sized integer temporaries (six d-vectors) set XLA's
temporary peak, above the filter's own.

Memory. ``ru_maxrss`` is the peak resident set of the process. Each model runs in a fresh
subprocess that (1) imports JAX and compiles the whole scan ahead of time from abstract
shapes, (2) records ``ru_maxrss`` as the baseline (interpreter + JAX + compiled program,
no state allocated), (3) allocates the state, resets the peak (``/proc/self/clear_refs``,
Linux) and runs the scan with the state donated. Reported: the peak of the initialisation and
the peak of the steps above the baseline (which includes the state itself), the state size and
their ratio (target <= 2). The time per step includes the data draw, which is also timed alone.

Usage::

    python -m benchmarks.scale_lrvga                       # d = 1e6, p = 10, 100 steps, float64
    python -m benchmarks.scale_lrvga --d 100000 --p 5 --steps 50 --dtype float32
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from benchmarks.machine import reset_peak, status_bytes


def _rss_bytes() -> int:
    """Peak resident set size of this process (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024




def _time_draws(draw_input, keys, dtype) -> float:
    """Seconds that the data draws of the scan take alone (a scan that sums ``x^T theta*``), after the run."""
    import jax
    import jax.numpy as jnp

    def step(total, key):
        return total + draw_input(jax.random.split(key)[0])[1], None

    draws = jax.jit(lambda keys: jax.lax.scan(step, jnp.zeros((), dtype), keys)[0]).lower(keys).compile()
    jax.block_until_ready(draws(keys))
    t0 = time.perf_counter()
    jax.block_until_ready(draws(keys))
    return time.perf_counter() - t0


def measure(model_name: str, d: int, p: int, steps: int, dtype_name: str, inner_loops: int,
            published: bool = False) -> dict:
    """Run one model in this process and return its figures (call in a fresh process)."""
    import jax

    if dtype_name == "float64":
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import jaxrvga as jr
    from jaxrvga import core, models
    from jaxrvga.kernels import row_blocks as blocks
    from jaxrvga import lrvga

    dtype = jnp.dtype(dtype_name)
    model = models.linear_gaussian(1.0) if model_name == "linear" else models.logistic()
    base = lrvga(model, rank=p, inner_loops=inner_loops, published=published)

    nb = max(blocks.num_blocks(d, p), 1)

    def draw_input(kx):
        """``x ~ N(0, I_d / d)`` and ``x^T theta*``, drawn block by block (``theta*`` from a fixed key), so
        that the data cost one d-vector and no d-sized random-number temporaries."""
        kt = jax.random.PRNGKey(12345)

        def block(i, carry):
            x, eta = carry
            x_b = jax.random.normal(jax.random.fold_in(kx, i), (d // nb,), dtype) / jnp.sqrt(jnp.asarray(d, dtype))
            theta_b = jax.random.normal(jax.random.fold_in(kt, i), (d // nb,), dtype)
            return x.at[i].set(x_b), eta + x_b @ theta_b

        x, eta = jax.lax.fori_loop(0, nb, block, (jnp.zeros((nb, d // nb), dtype), jnp.zeros((), dtype)))
        return x.reshape(d), eta

    def update(state, key, y_unused):
        """Draw (x_t, y_t) inside the step, then the L-RVGA update."""
        del y_unused
        kx, ky = jax.random.split(key)
        x, eta = draw_input(kx)
        if model_name == "linear":
            y = eta + jax.random.normal(ky, (), dtype)
        else:
            y = jax.random.bernoulli(ky, jax.nn.sigmoid(eta)).astype(dtype)
        return base.update(state, x, y)

    flt = core.Filter(base.init, update)
    keys = jax.random.split(jax.random.PRNGKey(0), steps)
    ys = jnp.zeros(steps, dtype)

    # (1) compile ahead of time from abstract shapes, (2) baseline
    def abstract_state():
        S = jax.ShapeDtypeStruct
        return jr.LowRankState(S((d,), dtype), S((d, p), dtype), S((d,), dtype), S((), jnp.int32),
                               jax.eval_shape(lambda: core.solver_info(dtype)), None,
                               None if published else S((p, p), dtype))

    def make_state(key):
        """App. D initialisation (sigma0 = 1, eps = 1e-8) drawn block by block, so that the
        initialisation leaves no d x p garbage in the heap to blur the measurement."""
        def draw(i):
            return jax.random.normal(jax.random.fold_in(key, i), (d // nb, p), dtype)

        sq = jax.lax.fori_loop(0, nb, lambda i, acc: acc + jnp.sum(draw(i) ** 2, axis=0), jnp.zeros(p, dtype))
        scale = jnp.sqrt(jnp.asarray(1e-8 * d / p, dtype)) / jnp.sqrt(sq)
        W0 = jax.lax.fori_loop(0, nb, lambda i, W: W.at[i].set(draw(i) * scale),
                               jnp.zeros((nb, d // nb, p), dtype)).reshape(d, p)
        psi0 = jnp.full(d, 1.0 - 1e-8, dtype)
        gram = None if published else jr.kernels.lowrank.whitened_gram(W0, psi0)  # the default's cached Gram
        return jr.LowRankState(jnp.zeros(d, dtype), W0, psi0, jnp.asarray(0, jnp.int32), core.solver_info(dtype),
                               None, gram)

    t0 = time.perf_counter()
    init_exe = jax.jit(make_state).lower(jax.random.PRNGKey(1)).compile()
    scan = jax.jit(jr.scan, static_argnums=(0, 4), donate_argnums=(1,))
    exe = scan.lower(flt, abstract_state(), keys, ys, None).compile()
    xla_temp = exe.memory_analysis().temp_size_in_bytes  # XLA's own account of the step's temporaries
    compile_s = time.perf_counter() - t0
    jax.block_until_ready((keys, ys))
    reset = reset_peak()  # returns the compiler's freed memory, so the baseline is what stays
    baseline = status_bytes("VmRSS") if reset else _rss_bytes()

    # (3) allocate the state (its own peak: App. D draws a d x p matrix), then run
    state = init_exe(jax.random.PRNGKey(1))
    jax.block_until_ready(state)
    init_peak = status_bytes("VmHWM") if reset else _rss_bytes()
    reset_peak()  # from here on, the peak of the filter steps alone
    after_state = status_bytes("VmRSS") if reset else _rss_bytes()

    t0 = time.perf_counter()
    state, _ = exe(state, keys, ys)  # the executable compiled above (state donated): no compile in the peak
    jax.block_until_ready(state)
    run_s = time.perf_counter() - t0
    peak = status_bytes("VmHWM") if reset else _rss_bytes()
    draw_s = _time_draws(draw_input, keys, dtype)  # after the peak was read

    state_bytes = dtype.itemsize * d * (p + 2)
    return {
        "model": model_name, "d": d, "p": p, "steps": steps, "dtype": dtype_name,
        "inner_loops": inner_loops, "published": published, "compile_s": compile_s, "run_s": run_s,
        "ms_per_step": 1e3 * run_s / steps, "draw_ms": 1e3 * draw_s / steps, "baseline_MB": baseline / 1e6,
        "state_alloc_MB": (after_state - baseline) / 1e6, "init_peak_MB": (init_peak - baseline) / 1e6,
        "peak_above_baseline_MB": (peak - baseline) / 1e6, "run_peak_only": reset,
        "xla_temp_MB": xla_temp / 1e6,
        "state_MB": state_bytes / 1e6, "ratio": (peak - baseline) / state_bytes,
        "finite": bool(jnp.all(jnp.isfinite(state.mean)) & jnp.all(jnp.isfinite(state.W))),
        "solver_converged": bool(state.info.converged),
        "device": str(jax.devices()[0]),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d", type=int, default=1_000_000, help="parameter dimension")
    parser.add_argument("--p", type=int, default=10, help="rank of W")
    parser.add_argument("--steps", type=int, default=100, help="number of observations")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--inner-loops", type=int, default=1, help="EM inner loops (n_in)")
    parser.add_argument("--published", action="store_true",
                        help="the published L-RVGA (jr.lrvga(..., published=True)); default: the library default")
    parser.add_argument("--models", nargs="+", choices=("linear", "logistic"),
                        default=["linear", "logistic"])
    parser.add_argument("--single", choices=("linear", "logistic"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.single:  # child process: one model, JSON on the last line
        print(json.dumps(measure(args.single, args.d, args.p, args.steps, args.dtype,
                                 args.inner_loops, args.published)))
        return 0

    print(f"L-RVGA at d = {args.d:,}, p = {args.p}, {args.steps} steps, {args.dtype}, "
          f"{args.inner_loops} inner loop(s), {'published' if args.published else 'default'} projection; "
          "data drawn inside the scan; state donated")
    header = (f"{'model':<9} {'ms/step':>9} {'draw ms':>8} {'compile s':>9} {'baseline MB':>11} {'init MB':>8} "
              f"{'peak-base MB':>12} {'state MB':>9} {'ratio':>6} {'XLA temp':>8}")
    print(header)
    print("-" * len(header))
    status = 0
    for name in args.models:
        cmd = [sys.executable, "-m", "benchmarks.scale_lrvga", "--single", name, "--d", str(args.d),
               "--p", str(args.p), "--steps", str(args.steps), "--dtype", args.dtype,
               "--inner-loops", str(args.inner_loops)] + (["--published"] if args.published else [])
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
        if out.returncode != 0:
            print(f"{name}: failed\n{out.stderr[-3000:]}")
            status = 1
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{name:<9} {r['ms_per_step']:>9.1f} {r['draw_ms']:>8.1f} {r['compile_s']:>9.1f} {r['baseline_MB']:>11.0f} "
              f"{r['init_peak_MB']:>8.0f} {r['peak_above_baseline_MB']:>12.0f} {r['state_MB']:>9.0f} {r['ratio']:>6.2f} {r['xla_temp_MB'] / r['state_MB']:>8.2f}"
              f"{'' if r['finite'] else '  NON-FINITE'}")
    print("ms/step includes the data draw; draw ms = the draws alone (a scan without the filter). "
          "ratio = (peak RSS of the filter steps - baseline RSS) / state size (target <= 2); "
          "XLA temp = XLA's own account of the scan's temporary buffers / state size; "
          "init MB = peak of the initialisation, before the steps. "
          f"Device: {r['device'] if status == 0 else '?'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
