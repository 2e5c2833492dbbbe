"""Memory probes of [LRVGA] Tables 1-2 (``lrvga_table01_memory``, ``lrvga_table02_memory``): one
configuration per fresh interpreter (``python -m experiments.memory --probe CONFIG``).
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks.machine import reset_peak, status_bytes
from experiments.common import ROOT

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
    from jaxrvga import models
    from jaxrvga.baselines import fa_filters

    if algo == "recem":
        flt = fa_filters.recursive_em(loops, "covariance")
        return flt, lambda W, psi: flt.init(W, psi)
    if algo == "online":
        flt = fa_filters.online_fa_em(averaging="code")
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

    from jaxrvga.baselines import batch_fa

    step = jax.jit(batch_fa.batch_em_step, donate_argnums=(1, 2))
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


def probe_memory(algo: str, d: int, p: int, T: int, loops: int = 1) -> dict:
    """The measurement of one configuration in this (fresh) process (``experiments/lrvga_table01_memory.py``)."""
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


def measure_memory(algo: str, d: int, p: int, T: int, loops: int = 1, timeout: int = 1800) -> dict:
    """Run :func:`probe_memory` in a fresh interpreter (the protocol of ``experiments/lrvga_table01_memory.py``,
    [LRVGA] Tables 1-2); returns ``base_mb``,
    ``state_mb`` (initial state), ``peak_mb`` (peak RSS of the timed run minus the baseline),
    ``peak_total_mb`` (whole-process peak minus the post-warm-up RSS) and ``time_per_iter`` (s)."""
    cfg = json.dumps(dict(algo=algo, d=d, p=p, T=T, loops=loops))
    # A fixed glibc mmap threshold (64 KiB) disables the dynamic one: every buffer above it is
    # mmapped and returned to the system when freed, so RSS tracks the live buffers (otherwise a
    # freed 8-32 MB buffer stays in the heap and a later one reuses it unseen).
    # One OpenBLAS thread: its busy-waiting threads slow LAPACK calls badly on a loaded machine.
    env = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.mmap_threshold=65536",
               MALLOC_MMAP_THRESHOLD_="65536", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "experiments.memory", "--probe", cfg], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"memory probe {cfg} failed (rc {proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


MEMORY_HEADER = ["algorithm", "d", "p", "time_per_iteration_s", "measured_peak_MB", "measured_initial_state_MB",
                 "model_MB", "measured_over_model", "whole_process_peak_MB", "baseline_rss_MB"]


if __name__ == "__main__" and sys.argv[1:2] == ["--probe"]:  # the child process of measure_memory()
    print("RESULT " + json.dumps(probe_memory(**json.loads(sys.argv[2]))))
