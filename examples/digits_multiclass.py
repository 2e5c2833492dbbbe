"""Ten-class digits with an equinox MLP and a categorical output:
``python -m examples.digits_multiclass``.

An ``equinox.nn.MLP`` 64-32-10 (2410 weights) gives 10 logits; its array leaves
(``eqx.partition``) are flattened by ``ravel_pytree`` and
:func:`jaxrvga.models.nonlinear` with :func:`jaxrvga.models.categorical` (full Fisher
``diag(p) - p p^T``) rebuilds the network through ``unravel``. ``jr.lrvga`` (rank 10)
absorbs the training set in one pass; the test set is scored by the linearised
predictive (pairwise inverse probit) and by Monte Carlo over the belief: accuracy,
log-loss and expected calibration error (ECE) of the top class.
"""
from __future__ import annotations


import equinox as eqx
import jax
import numpy as np
from jax.flatten_util import ravel_pytree
from sklearn.datasets import load_digits

import jaxrvga as jr
from jaxrvga.baselines.metrics import ece
from examples.common import digits_cli, fit_and_score, log_loss, split


def network(hidden: int, key):
    """``(theta0, h)``: the flat weights of an equinox MLP 64-hidden-10 and
    ``h(params, x) -> logits``."""
    mlp = eqx.nn.MLP(64, 10, hidden, depth=1, activation=jax.nn.relu, key=key)
    params, static = eqx.partition(mlp, eqx.is_array)
    theta0, unravel = ravel_pytree(params)
    return theta0, unravel, lambda p, x: eqx.combine(p, static)(x)


def scores(probs, labels):
    """Accuracy, log-loss and ECE of (n, 10) class probabilities."""
    probs = np.asarray(probs)
    return {"accuracy": float(np.mean(probs.argmax(axis=1) == labels)),
            "log_loss": log_loss(probs, labels),
            "ece": ece(np.asarray(probs, np.float64), labels)}


def main(num_train: int = 1200, num_test: int = 597, hidden: int = 32, rank: int = 10,
         scheme: str = "ekf", prior_var: float = 0.1, seed: int = 0,
         verbose: bool = True, batch: int = 1, buffer: int = 0) -> dict:
    """Train in one pass (``batch`` images per update) and score the test set; returns
    ``{"linearised": ..., "monte_carlo": ...}`` and the time."""
    X, y = load_digits(return_X_y=True)
    Xtr, ytr, Xte, yte = split(X / 16.0, y, num_train, num_test, seed)
    theta0, unravel, h = network(hidden, jax.random.PRNGKey(seed))
    model = jr.models.nonlinear(h, jr.models.categorical(10), unravel=unravel)
    return fit_and_score(model, theta0, (Xtr, ytr), (Xte, yte), rank, scheme, prior_var,
                         seed, scores, verbose, batch, buffer)


if __name__ == "__main__":
    digits_cli(main, __doc__)
