"""How much curvature ``fisher_rank=r`` leaves out on a 10-class network, before and after training.

    python -m benchmarks.fisher_rank_error [--train 1200] [--test 300]

The MLP 64-128-64-10 of :mod:`benchmarks.bench_minibatch` (sklearn digits, float32): for each test
image, the fraction of the trace of its GGN curvature ``J^T F J`` (the default scheme's root,
``moment_ekf`` with its jitter) that the ``r`` leading eigen-directions of its 10 x 10 Fisher keep
(``schemes.linearise(..., fisher_rank=r)``; the trace of ``C^T C`` over that of all rows), at the
network's start and after one pass of the default filter (rank 10) over the training images.
Printed: the median and the 10th percentile over the test images, for r = 1, 2, 3.
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import bench_minibatch as bm
from jaxrvga import schemes

RANKS = (1, 2, 3)


def kept_fraction(model, jitter=0.1):
    """``fraction(theta, x, y)``: the part of one image's curvature trace kept at each of ``RANKS``."""
    def fraction(theta, x, y):
        full = jnp.sum(schemes.linearise(model, theta, x, y, jitter)[0] ** 2)
        return jnp.stack([jnp.sum(schemes.linearise(model, theta, x, y, jitter, fisher_rank=r)[0] ** 2) / full
                          for r in RANKS])
    return jax.jit(jax.vmap(fraction, in_axes=(None, 0, 0)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=1200)
    parser.add_argument("--test", type=int, default=300)
    args = parser.parse_args(argv)
    Xtr, ytr, Xte, yte = bm.digits(args.train)
    theta0, h = bm.mlp(jax.random.PRNGKey(0))
    run, state, model = bm.lrvga_run(h, theta0, 1, "moment_ekf", {})
    trained = jax.jit(run)(state, jnp.asarray(Xtr, jnp.float32), jnp.asarray(ytr)).mean
    fraction = kept_fraction(model)
    X, y = jnp.asarray(Xte[:args.test], jnp.float32), jnp.asarray(yte[:args.test])
    rows = {}
    for label, theta in (("start", theta0), (f"after one pass of {args.train}", trained)):
        k = np.asarray(fraction(theta, X, y))
        rows[label] = (np.median(k, 0), np.percentile(k, 10, 0))
        print(f"{label}: kept trace, r = {RANKS}: median {np.round(rows[label][0], 3)}, "
              f"10th percentile {np.round(rows[label][1], 3)}")
    return rows


if __name__ == "__main__":
    main()
