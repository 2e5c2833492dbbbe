"""L-RVGA Table 1: memory and time of the covariance factorisation at d = 1e6, p = 100, 1 inner loop.

Paper ([LRVGA] Table 1, laptop i7 2.3 GHz): batch EM (estimated) 8000 GB; online EM 1 s/iteration,
1.6 GB; recursive EM 2 s/iteration, 0.8 GB. The memory column is the model ``8 d p`` bytes per d x p
array (recursive EM stores W: 0.8 GB; online EM also S2: 1.6 GB).

Here the memory is **measured**: each configuration runs in a fresh interpreter
(``subprocess``) that imports jax, enables float64, warms up (the same algorithm at d = 64) and
draws the T data vectors. It then runs T steps with :func:`jaxrvga.run` (``donate=True``, so the
initial state's buffers are reused) once, to compile. The baseline is the resident set size at
that point, once it has settled (XLA frees dropped buffers asynchronously): the interpreter with
jax, the compiled step and the data, but no state. The peak RSS is reset to it
(``/proc/self/clear_refs``), the initial state is built (one fused kernel: no RNG temporaries) and
the T steps run again, timed. Reported, in decimal MB: peak RSS - baseline during that run
(initial state + every buffer and temporary of the jitted steps), the initial state alone, and,
as a conservative figure, the peak over the compile-and-first run minus the RSS after the warm-up.

The peak is read as ``VmHWM`` (``/proc/self/status``), the kernel's peak RSS of the process's
address space, the quantity behind ``getrusage().ru_maxrss``. ``ru_maxrss`` itself cannot be used in
a child process: after fork + exec Linux folds the parent's RSS at fork time into it, and
``clear_refs`` does not reset that part (a probe started from a 1.8 GB ``run_all`` reported
>= 1.8 GB for every configuration).

Models: ``8 d p`` (recursive EM: W), ``2 x 8 d p`` (online EM: W and S2), ``8 d^2`` (batch EM:
the dense S, counted in its measured peak). Batch EM is measured at a small d to show the
quadratic scaling.

The machine is shared (2 cores, other jobs running): times are indicative only.
``quick``: d = 5e4 (batch EM at d = 3000), T = 2; full: d = 1e6 (batch EM at d = 5000), T = 5 steps.

This module also holds :func:`measure`, used by Table 2.
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import reset_peak, status_bytes
from experiments.common import cli, progress, write_csv

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- the probe (child process)

def _rss_mb(field):
    return status_bytes(field) / 1e6


def _settled_rss_mb():
    """``VmRSS`` once it stops falling: XLA frees donated / dropped buffers asynchronously."""
    gc.collect()
    prev = _rss_mb("VmRSS")
    for _ in range(40):
        time.sleep(0.25)
        cur = _rss_mb("VmRSS")
        if abs(cur - prev) < 0.5:
            return cur
        prev = cur
    return prev


def _make(algo, d, p, loops):
    """``(filter, init(W, psi))`` of one algorithm at dimension ``d``."""
    import jax.numpy as jnp

    import jaxrvga as jr
    from jaxrvga import factor_analysis as fa, models

    if algo == "recem":
        flt = fa.recursive_em(loops, "covariance")
        return flt, lambda W, psi: flt.init(W, psi)
    if algo == "online":
        flt = fa.online_fa_em(averaging="code")
        # online_fa_em.init puts the same W (psi) in two fields, which donate=True rejects
        # ("donate the same buffer twice"): give the running average its own copy.
        return flt, lambda W, psi: flt.init(W, psi)._replace(W_avg=jnp.array(W, copy=True),
                                                             psi_avg=jnp.array(psi, copy=True))
    if algo == "lrvga":
        flt = jr.lrvga(models.linear_gaussian(1.0), rank=p, inner_loops=loops, published=True)
        return flt, lambda W, psi: flt.init(jnp.zeros(d), W, psi)
    if algo == "kalman":
        flt = jr.kalman(1.0)
        return flt, lambda W, psi: flt.init(jnp.zeros(d), jnp.eye(d))
    raise ValueError(f"algo: unknown algorithm {algo!r}")


def _data(d, T):
    import jax

    key = jax.random.PRNGKey(1)
    return jax.random.normal(key, (T, d)) / np.sqrt(d), jax.random.normal(key, (T,))


def _factors(d, p):
    """Initial ``(W, psi)`` from one fused elementwise kernel: ``W`` is the only d x p buffer created
    (a random draw would add RNG temporaries of the same size to the measured peak)."""
    import jax
    import jax.numpy as jnp

    p = min(p, d)

    def make():
        i = jax.lax.broadcasted_iota(jnp.float64, (d, p), 0)
        j = jax.lax.broadcasted_iota(jnp.float64, (d, p), 1)
        return 1e-4 * jnp.cos(0.7071 * i * (j + 1.0) + 1.3 * j), jnp.ones((d,))

    return jax.jit(make)()


def _run_batch(S, W, psi, iters):
    import jax

    from jaxrvga import factor_analysis as fa

    step = jax.jit(fa.batch_em_step, donate_argnums=(1, 2))
    for _ in range(iters):
        W, psi = step(S, W, psi)
    return jax.block_until_ready(W)


def _run_stream(algo, d, p, loops, xs, ys):
    """Compile and run the filter, then (peak reset) build the state and run it again, timed."""
    import jax

    import jaxrvga as jr

    flt, init = _make(algo, d, p, loops)
    jax.block_until_ready(jr.run(flt, init(*_factors(d, p)), xs, ys, donate=True)[0])  # compile + run
    return lambda: jax.block_until_ready(init(*_factors(d, p))), \
        lambda state: jax.block_until_ready(jr.run(flt, state, xs, ys, donate=True)[0])


def probe(algo: str, d: int, p: int, T: int, loops: int = 1) -> dict:
    """The measurement of one configuration, in this (fresh) process (module docstring)."""
    import jax
    import jax.numpy as jnp

    # warm-up: the same algorithm at d = max(64, p) (loads XLA, the library, the compiler)
    if algo == "batch":
        xs, _ = _data(64, 8)
        _run_batch(xs.T @ xs + jnp.eye(64), *_factors(64, 4), 2)
    else:
        dw = max(64, p)
        _run_stream(algo, dw, p, loops, *_data(dw, 3))
    xs, ys = _data(d, T)
    jax.block_until_ready((xs, ys))
    base_total = _settled_rss_mb()
    reset_peak(trim=False)  # baseline of the whole-process figure: imports, warm-up, data
    if algo == "batch":
        S = xs.T @ xs / T + jnp.eye(d)
        _run_batch(S, *_factors(d, p), 1)  # compile + first run
        total = _rss_mb("VmHWM") - base_total
        base = _settled_rss_mb() - 8 * d * d / 1e6  # S (the batch target) is part of the algorithm's memory
        reset_peak(trim=False)
        make_state, steps = lambda: _factors(d, p), lambda state: _run_batch(S, *state, T)
    else:
        make_state, steps = _run_stream(algo, d, p, loops, xs, ys)
        total = _rss_mb("VmHWM") - base_total
        base = _settled_rss_mb()
        reset_peak(trim=False)
    state = make_state()
    state_mb = _rss_mb("VmRSS") - base
    t0 = time.perf_counter()
    steps(state)
    per_iter = (time.perf_counter() - t0) / T
    return dict(base_mb=base, state_mb=state_mb, peak_mb=_rss_mb("VmHWM") - base, peak_total_mb=total,
                time_per_iter=per_iter)


# --------------------------------------------------------------------------- the tables

def measure(algo: str, d: int, p: int, T: int, loops: int = 1, timeout: int = 1800) -> dict:
    """Run one configuration in a fresh interpreter (module docstring); returns ``base_mb``,
    ``state_mb`` (initial state), ``peak_mb`` (peak RSS of the timed run minus the baseline),
    ``peak_total_mb`` (whole-process peak minus the post-warm-up RSS) and ``time_per_iter`` (s)."""
    cfg = json.dumps(dict(algo=algo, d=d, p=p, T=T, loops=loops))
    # A fixed glibc mmap threshold (64 KiB) disables the dynamic one: every buffer above it is
    # mmapped and returned to the system when freed, so RSS tracks the live buffers (otherwise a
    # freed 8-32 MB buffer stays in the heap and a later one reuses it unseen).
    # One OpenBLAS thread: its busy-waiting threads slow LAPACK calls badly on a loaded machine.
    env = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.mmap_threshold=65536",
               MALLOC_MMAP_THRESHOLD_="65536", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "experiments.lrvga_table01_memory", "--probe", cfg], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"memory probe {cfg} failed (rc {proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


HEADER = ["algorithm", "d", "p", "time_per_iteration_s", "measured_peak_MB", "measured_initial_state_MB",
          "model_MB", "measured_over_model", "whole_process_peak_MB", "baseline_rss_MB"]


#: ``(d, d of batch EM, p, T)``.
QUICK, FULL = (50_000, 3000, 100, 2), (1_000_000, 5000, 100, 5)


def run(quick: bool, out: Path) -> dict:
    d, d_batch, p, T = QUICK if quick else FULL
    configs = [("online EM, 1 inner loop", "online", d, 2 * 8 * d * p),
               ("recursive EM, 1 inner loop", "recem", d, 8 * d * p),
               (f"batch EM (measured at d = {d_batch})", "batch", d_batch, 8 * d_batch**2)]
    summary, rows = {}, []
    for label, algo, dd, model in progress(configs, "Table 1", quick):
        res = measure(algo, dd, p, T)
        rows.append([label, dd, p, res["time_per_iter"], res["peak_mb"], res["state_mb"], model / 1e6,
                     res["peak_mb"] / (model / 1e6), res["peak_total_mb"], res["base_mb"]])
        summary[f"{algo}_d{dd}_peak_mb"] = res["peak_mb"]
        summary[f"{algo}_d{dd}_state_mb"] = res["state_mb"]
        summary[f"{algo}_d{dd}_peak_total_mb"] = res["peak_total_mb"]
        summary[f"{algo}_d{dd}_model_mb"] = model / 1e6
        summary[f"{algo}_d{dd}_time_per_iter_s"] = res["time_per_iter"]
    rows.append([f"batch EM at d = {d} (model only)", d, p, "", "", "", 8 * d**2 / 1e6, "", "", ""])
    summary[f"batch_d{d}_model_mb"] = 8 * d**2 / 1e6
    write_csv(out / "lrvga_table01.csv", HEADER, rows)
    return summary


if __name__ == "__main__":
    if sys.argv[1:2] == ["--probe"]:  # the child process of measure()
        print("RESULT " + json.dumps(probe(**json.loads(sys.argv[2]))))
    else:
        cli(run, __doc__)
