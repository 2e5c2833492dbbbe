"""Ten-class digits with an equinox MLP and a categorical output: ``python -m examples.digits_multiclass``.

An ``equinox.nn.MLP`` 64-32-10 (2410 weights) gives 10 logits; its array leaves (``eqx.partition``)
are flattened by ``ravel_pytree`` and :func:`jaxrvga.models.nonlinear` with
:func:`jaxrvga.models.categorical` (full Fisher ``diag(p) - p p^T``) rebuilds the network through
``unravel``. ``jr.lrvga`` (rank 10) absorbs the training set in one pass; the test set is scored by
the linearised predictive (pairwise inverse probit) and by Monte Carlo over the belief: accuracy,
log-loss and expected calibration error (ECE) of the top class.
"""
from __future__ import annotations

import argparse
import time

import equinox as eqx
import jax
import numpy as np
from jax.flatten_util import ravel_pytree
from sklearn.datasets import load_digits

import jaxrvga as jr
from examples.common import as_f32, expected_calibration_error, log_loss, lowrank_init, split


def network(hidden: int, key):
    """``(theta0, h)``: the flat weights of an equinox MLP 64-hidden-10 and ``h(params, x) -> logits``."""
    mlp = eqx.nn.MLP(64, 10, hidden, depth=1, activation=jax.nn.relu, key=key)
    params, static = eqx.partition(mlp, eqx.is_array)
    theta0, unravel = ravel_pytree(params)
    return theta0, unravel, lambda p, x: eqx.combine(p, static)(x)


def scores(probs, labels):
    """Accuracy, log-loss and ECE of (n, 10) class probabilities."""
    probs = np.asarray(probs)
    return {"accuracy": float(np.mean(probs.argmax(axis=1) == labels)), "log_loss": log_loss(probs, labels),
            "ece": expected_calibration_error(probs, labels)}


def main(num_train: int = 1200, num_test: int = 597, hidden: int = 32, rank: int = 10,
         scheme: str = "ekf", prior_var: float = 0.1, seed: int = 0, verbose: bool = True) -> dict:
    """Train in one pass and score the test set; returns ``{"linearised": ..., "monte_carlo": ...}`` and the time."""
    X, y = load_digits(return_X_y=True)
    Xtr, ytr, Xte, yte = split(X / 16.0, y, num_train, num_test, seed)
    theta0, unravel, h = network(hidden, jax.random.PRNGKey(seed))
    model = jr.models.nonlinear(h, jr.models.categorical(10), unravel=unravel)
    flt = jr.lrvga(model, rank=rank, scheme=scheme)
    state = lowrank_init(flt, theta0, rank, prior_var, jax.random.PRNGKey(seed + 1))
    start = time.perf_counter()
    state, _ = jr.run(flt, state, *as_f32(Xtr, ytr))
    seconds = time.perf_counter() - start
    Xte_j, = as_f32(Xte)
    out = {"linearised": scores(jr.predictive(state, Xte_j, model=model).mean, yte),
           "monte_carlo": scores(jr.predictive(state, Xte_j, model=model, key=jax.random.PRNGKey(seed + 2),
                                               num_samples=256).mean, yte),
           "seconds": seconds, "dim": int(theta0.shape[0]), "dropped": float(state.info.dropped)}
    if verbose:
        print(f"d = {out['dim']}, rank {rank}, scheme {scheme!r}: {num_train} images in {seconds:.1f} s "
              "(compile included)")
        for name in ("linearised", "monte_carlo"):
            s = out[name]
            print(f"  {name:12s} accuracy {s['accuracy']:.3f}  log-loss {s['log_loss']:.3f}  ECE {s['ece']:.3f}")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-train", type=int, default=1200)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--scheme", default="ekf", choices=["ekf", "sampled"])
    a = parser.parse_args()
    main(a.num_train, hidden=a.hidden, rank=a.rank, scheme=a.scheme)
