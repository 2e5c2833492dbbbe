"""A d = 1e6 stream of sparse rows, fed as ``jr.models.SparseRow`` and fed dense: ``python -m benchmarks.bench_sparse``.

Logistic L-RVGA (rank 10, the default implicit scheme, float64) over T rows of ``nnz`` non-zeros
each. Each way of feeding the rows runs in a process of its own (``--feed sparse`` or
``--feed dense``), so that each reports its own peak resident set; the same rows and labels
either way, and the final means compared. Time per row: a second ``jr.run`` of the same data
(compiled by the first), divided by T.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

import numpy as np


def stream(T: int, d: int, nnz: int, seed: int = 0):
    """``(indices (T, nnz), values (T, nnz), labels (T,))`` of a logistic model with a sparse truth."""
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.integers(0, d, size=(T, nnz)), axis=1)
    val = rng.normal(size=(T, nnz)) / np.sqrt(nnz)
    truth = np.zeros(d)
    truth[rng.integers(0, d, size=50 * nnz)] = 3.0 * rng.normal(size=50 * nnz)
    eta = np.sum(val * truth[idx], axis=1)
    return idx, val, (rng.random(T) < 1.0 / (1.0 + np.exp(-eta))).astype(float)


def one(feed: str, T: int, d: int, nnz: int, rank: int):
    """Run the filter on the stream fed ``feed``; print its figures as one line ``key=value ...``."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import jaxrvga as jr
    from benchmarks.machine import peak_rss_mb

    idx, val, y = stream(T, d, nnz)
    if feed == "sparse":
        xs = jr.models.SparseRow(idx, val)
    else:  # the same rows, each scattered into a dense (d,) row of the (T, d) stream
        xs = np.zeros((T, d))
        np.add.at(xs, (np.arange(T)[:, None], idx), val)
    flt = jr.lrvga(jr.models.logistic(), rank=rank)
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(0), d, rank, 1.0, eps=1e-3)
    times = []
    for _ in range(2):  # the first compiles
        state = flt.init(jnp.zeros(d), W0, psi0)
        t0 = time.perf_counter()
        state = jax.block_until_ready(jr.run(flt, state, xs, y)[0])
        times.append(time.perf_counter() - t0)
    stream_mb = sum(a.nbytes for a in jax.tree_util.tree_leaves(xs)) / 2**20
    print(f"feed={feed} first_s={times[0]:.2f} ms_per_row={1e3 * times[1] / T:.1f} stream_MB={stream_mb:.1f} "
          f"peak_MB={peak_rss_mb():.0f} converged={bool(state.info.converged)} "
          f"mean_head={','.join(f'{v:.17g}' for v in np.asarray(state.mean[idx[-1, :3]]))}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--feed", choices=("sparse", "dense"))
    parser.add_argument("--T", type=int, default=100)
    parser.add_argument("--d", type=int, default=1_000_000)
    parser.add_argument("--nnz", type=int, default=2000)
    parser.add_argument("--rank", type=int, default=10)
    args = parser.parse_args()
    if args.feed:
        return one(args.feed, args.T, args.d, args.nnz, args.rank)
    from benchmarks.machine import describe
    print(describe())
    print(f"logistic L-RVGA, d = {args.d:,}, rank {args.rank}, T = {args.T} rows of {args.nnz} non-zeros, "
          "float64, default scheme; one process per feed")
    for feed in ("sparse", "dense"):
        cmd = [sys.executable, "-m", "benchmarks.bench_sparse", "--feed", feed, "--T", str(args.T),
               "--d", str(args.d), "--nnz", str(args.nnz), "--rank", str(args.rank)]
        print(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
