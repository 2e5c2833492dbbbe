"""Even/odd digits with a flax MLP trained online by L-RVGA: ``python -m examples.digits_binary``.

The 8 x 8 sklearn digits (pixels / 16) are labelled 1 for an even digit; an MLP 64-32-1
(``flax.linen``, 2113 weights) gives the logit, :func:`jaxrvga.models.nonlinear` with a Bernoulli
output reads its weights through ``ravel_pytree``'s ``unravel``, and ``jr.lrvga`` (rank 10) absorbs
the training set in one pass, one image at a time. The test set is scored by the linearised
predictive (``jr.predictive`` without a key) and by Monte Carlo over the belief (with a key):
accuracy, log-loss and expected calibration error (ECE).
"""
from __future__ import annotations

import argparse
import time

import flax.linen as nn
import jax
import numpy as np
from jax.flatten_util import ravel_pytree
from sklearn.datasets import load_digits

import jaxrvga as jr
from examples.common import as_f32, expected_calibration_error, log_loss, lowrank_init, split


class MLP(nn.Module):
    """``64 -> hidden -> 1`` with ReLU; returns the scalar logit."""

    hidden: int = 32

    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(nn.relu(nn.Dense(self.hidden)(x)))[0]


def scores(probs, labels):
    """Accuracy, log-loss and ECE of probabilities of class 1."""
    return {"accuracy": float(np.mean((np.asarray(probs) > 0.5) == labels)),
            "log_loss": log_loss(probs, labels), "ece": expected_calibration_error(probs, labels)}


def main(num_train: int = 1200, num_test: int = 597, hidden: int = 32, rank: int = 10,
         scheme: str = "ekf", prior_var: float = 0.1, seed: int = 0, verbose: bool = True) -> dict:
    """Train in one pass and score the test set; returns ``{"linearised": ..., "monte_carlo": ...}`` and the time."""
    X, y = load_digits(return_X_y=True)
    Xtr, ytr, Xte, yte = split(X / 16.0, (y % 2 == 0), num_train, num_test, seed)
    net = MLP(hidden)
    theta0, unravel = ravel_pytree(net.init(jax.random.PRNGKey(seed), Xtr[0]))
    model = jr.models.nonlinear(net.apply, jr.models.bernoulli(), unravel=unravel)
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
