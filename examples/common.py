"""Shared pieces of the examples: data, a prior for the weights of a network, scores.

The expected calibration error of the digits examples is
:func:`jaxrvga.baselines.metrics.ece`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxrvga as jr


def split(X, y, num_train: int, num_test: int, seed: int = 0):
    """A random train/test split of ``(X, y)`` as float32 arrays
    (``num_train + num_test <= len(X)``)."""
    if num_train + num_test > len(X):
        raise ValueError(f"num_train + num_test must be <= {len(X)}, "
                         f"got {num_train} + {num_test}")
    perm = np.random.default_rng(seed).permutation(len(X))
    tr, te = perm[:num_train], perm[len(X) - num_test:]
    return (np.asarray(X[tr], np.float32), np.asarray(y[tr], np.float32),
            np.asarray(X[te], np.float32), np.asarray(y[te], np.float32))


def lowrank_init(flt, theta0, rank: int, prior_var: float, key):
    """State of ``flt`` (an L-RVGA) for the prior ``N(theta0, prior_var I)``,
    trace-matched factors.

    ``key`` makes the factors and, for the sampled scheme, the state's key (other
    schemes ignore it).
    """
    kw, ks = jax.random.split(key)
    W0, psi0 = jr.lowrank.init_factors(kw, theta0.shape[0], rank, prior_var,
                                       dtype=theta0.dtype)
    return flt.init(theta0, W0, psi0, key=ks)


def log_loss(probs, labels, eps: float = 1e-7) -> float:
    """Mean negative log-probability of the true class.

    ``probs`` (n, K) class probabilities (or (n,) probabilities of class 1 of a binary
    output), ``labels`` (n,) integer classes.
    """
    probs = np.asarray(probs, np.float64)
    if probs.ndim == 1:
        probs = np.stack([1.0 - probs, probs], axis=1)
    labels = np.asarray(labels).astype(int)
    true_class = probs[np.arange(len(labels)), labels]
    return float(-np.mean(np.log(np.clip(true_class, eps, 1.0))))


def interval_coverage(mean, var, y, z: float = 1.959964) -> float:
    """Fraction of ``y`` inside the Gaussian intervals ``mean +- z sqrt(var)`` (95 % for
    the default ``z``)."""
    mean, var, y = (np.asarray(a, np.float64) for a in (mean, var, y))
    return float(np.mean(np.abs(y - mean) <= z * np.sqrt(var)))


def as_f32(*arrays):
    """The arrays as float32 JAX arrays (the examples run in float32 even where x64 is
    on)."""
    return tuple(jnp.asarray(a, jnp.float32) for a in arrays)


def run_minibatches(flt, state, X, y, batch: int):
    """``jr.run`` of ``flt`` over ``(X, y)`` in minibatches of ``batch`` rows (``flt``
    built on a :func:`jaxrvga.models.minibatch` model when ``batch > 1``); the rows left
    over make one last, smaller update, so every observation is absorbed once. Returns
    the final state."""
    if batch == 1:
        return jr.run(flt, state, X, y)[0]
    full = len(X) // batch * batch
    state, _ = jr.run(flt, state, X[:full].reshape((-1, batch) + X.shape[1:]),
                      y[:full].reshape((-1, batch) + y.shape[1:]))
    return state if full == len(X) else flt.update(state, X[full:], y[full:])


def fit_and_score(model, theta0, train, test, rank: int, scheme: str, prior_var: float,
                  seed: int, scores, verbose: bool, batch: int = 1,
                  buffer: int = 0) -> dict:
    """One L-RVGA pass over ``train`` and the linearised and Monte-Carlo predictive
    scores on ``test``.

    ``scores(probs, labels) -> dict`` turns predictive means into metrics. ``batch``:
    observations per update (:func:`run_minibatches`); ``buffer``: that of
    :func:`jaxrvga.lrvga`. Returns
    ``{"linearised": ..., "monte_carlo": ..., "seconds", "dim", "dropped"}``.
    """
    import time

    flt = jr.lrvga(model if batch == 1 else jr.models.minibatch(model), rank=rank,
                   scheme=scheme, buffer=buffer)
    state = lowrank_init(flt, theta0, rank, prior_var, jax.random.PRNGKey(seed + 1))
    start = time.perf_counter()
    state = run_minibatches(flt, state, *as_f32(*train), batch)
    seconds = time.perf_counter() - start
    Xte, yte = test
    Xte_j, = as_f32(Xte)
    mc = jr.predictive(state, Xte_j, model=model, key=jax.random.PRNGKey(seed + 2),
                       num_samples=256)
    out = {"linearised": scores(jr.predictive(state, Xte_j, model=model).mean, yte),
           "monte_carlo": scores(mc.mean, yte),
           "seconds": seconds, "dim": int(theta0.shape[0]),
           "dropped": float(state.info.dropped)}
    if verbose:
        print(f"d = {out['dim']}, rank {rank}, scheme {scheme!r}, {batch} per update: "
              f"{len(train[1])} examples in {seconds:.1f} s (compile included)")
        for name in ("linearised", "monte_carlo"):
            s = out[name]
            print(f"  {name:12s} accuracy {s['accuracy']:.3f}  "
                  f"log-loss {s['log_loss']:.3f}  ECE {s['ece']:.3f}")
    return out


def digits_cli(main, doc: str):
    """The command line shared by the digits examples:
    ``--num-train --hidden --rank --scheme --batch --buffer``."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--num-train", type=int, default=1200)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--scheme", default="ekf", choices=["ekf", "sampled"])
    parser.add_argument("--batch", type=int, default=1,
                        help="observations per update (a minibatch)")
    parser.add_argument("--buffer", type=int, default=0,
                        help="curvature columns held unprojected")
    a = parser.parse_args()
    main(a.num_train, hidden=a.hidden, rank=a.rank, scheme=a.scheme, batch=a.batch,
         buffer=a.buffer)
