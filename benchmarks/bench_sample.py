"""The cost of ``jr.sample`` on a fleet of small dense beliefs: ``python -m benchmarks.bench_sample``.

Five dense 8 x 8 beliefs, vmapped, ``num`` draws each, both jitted, in the same process and
interleaved round by round: ``jr.sample`` against a hand-written Cholesky draw
``mean + z L^T`` (``P = L L^T``), the cheapest exact draw of a positive definite ``P``. Prints the
median time of each (us per call) and their ratio; the goal is a ratio within 1.5.
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrvga as jr
from benchmarks.machine import describe


def _fleet(members: int, d: int):
    """``members`` dense states of dimension ``d`` stacked along a leading axis, and one key each."""
    rng = np.random.default_rng(0)
    A = rng.normal(size=(members, d, d))
    covs = A @ np.swapaxes(A, 1, 2) / d + 0.1 * np.eye(d)
    flt = jr.kalman(1.0)
    states = jax.vmap(flt.init)(jnp.asarray(rng.normal(size=(members, d))), jnp.asarray(covs))
    return states, jax.random.split(jax.random.PRNGKey(1), members)


def _cholesky_draw(state, key, num):
    z = jax.random.normal(key, (num, state.mean.shape[0]), state.mean.dtype)
    return state.mean + z @ jnp.linalg.cholesky(state.cov).T


def _median_us(fn, args, rounds, calls):
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / calls * 1e6)
    return float(np.median(times))


def main(members: int = 5, d: int = 8, num: int = 64, rounds: int = 21, calls: int = 200):
    print(describe())
    states, keys = _fleet(members, d)
    ours = jax.jit(jax.vmap(lambda s, k: jr.sample(s, k, num)))
    hand = jax.jit(jax.vmap(lambda s, k: _cholesky_draw(s, k, num)))
    for fn in (ours, hand):
        jax.block_until_ready(fn(states, keys))  # compile
    ratios, t_ours, t_hand = [], [], []
    for _ in range(rounds):  # interleaved: a load change hits both alike
        t_ours.append(_median_us(ours, (states, keys), 1, calls))
        t_hand.append(_median_us(hand, (states, keys), 1, calls))
        ratios.append(t_ours[-1] / t_hand[-1])
    print(f"{members} vmapped dense {d}x{d} beliefs, {num} draws each, {jnp.result_type(states.mean)}: "
          f"jr.sample {np.median(t_ours):.1f} us, Cholesky by hand {np.median(t_hand):.1f} us, "
          f"ratio {np.median(ratios):.2f} (median of {rounds} rounds of {calls} calls)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--d", type=int, default=8)
    parser.add_argument("--num", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    main(args.members, args.d, args.num, args.rounds)
