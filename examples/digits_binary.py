"""Even/odd digits with a flax MLP trained online by L-RVGA:
``python -m examples.digits_binary``.

The 8 x 8 sklearn digits (pixels / 16) are labelled 1 for an even digit; an MLP 64-32-1
(``flax.linen``, 2113 weights) gives the logit, :func:`jaxrvga.models.nonlinear` with a
Bernoulli output reads its weights through ``ravel_pytree``'s ``unravel``, and
``jr.lrvga`` (rank 10) absorbs the training set in one pass, one image at a time
(``--batch m --buffer b``: m images per update through :func:`jaxrvga.models.minibatch`,
faster per image). The test set is scored by the linearised predictive
(``jr.predictive`` without a key) and by Monte Carlo over the belief (with a key):
accuracy, log-loss and expected calibration error (ECE).
"""
from __future__ import annotations


import flax.linen as nn
import jax
import numpy as np
from jax.flatten_util import ravel_pytree
from sklearn.datasets import load_digits

import jaxrvga as jr
from jaxrvga.baselines.metrics import ece
from examples.common import digits_cli, fit_and_score, log_loss, split


class MLP(nn.Module):
    """``64 -> hidden -> 1`` with ReLU; returns the scalar logit."""

    hidden: int = 32

    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(nn.relu(nn.Dense(self.hidden)(x)))[0]


def scores(probs, labels):
    """Accuracy, log-loss and ECE of probabilities of class 1."""
    return {"accuracy": float(np.mean((np.asarray(probs) > 0.5) == labels)),
            "log_loss": log_loss(probs, labels),
            "ece": ece(np.asarray(probs, np.float64), labels)}


def main(num_train: int = 1200, num_test: int = 597, hidden: int = 32, rank: int = 10,
         scheme: str = "ekf", prior_var: float = 0.1, seed: int = 0,
         verbose: bool = True, batch: int = 1, buffer: int = 0) -> dict:
    """Train in one pass (``batch`` images per update) and score the test set; returns
    ``{"linearised": ..., "monte_carlo": ...}`` and the time."""
    X, y = load_digits(return_X_y=True)
    Xtr, ytr, Xte, yte = split(X / 16.0, (y % 2 == 0), num_train, num_test, seed)
    net = MLP(hidden)
    theta0, unravel = ravel_pytree(net.init(jax.random.PRNGKey(seed), Xtr[0]))
    model = jr.models.nonlinear(net.apply, jr.models.bernoulli(), unravel=unravel)
    return fit_and_score(model, theta0, (Xtr, ytr), (Xte, yte), rank, scheme, prior_var,
                         seed, scores, verbose, batch, buffer)


if __name__ == "__main__":
    digits_cli(main, __doc__)
