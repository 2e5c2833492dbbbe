"""MLP regression with predictive uncertainty on sklearn's diabetes data: ``python -m
examples.diabetes_regression``.

The ten standardised covariates feed a ``flax.linen`` MLP 10-16-1 (193 weights); the
standardised disease progression ``y`` has a Gaussian output ``N(h(theta, x),
noise_var)``. ``jr.lrvga`` (rank 10) absorbs the training set in ``epochs`` passes (each
pass counts the data again: a tempered posterior, so the default is one pass). The test
set is scored by the predictive mean (RMSE, in the units of the standardised ``y``) and
by the 95 % coverage of ``mean +- 1.96 sd``, with ``sd`` from ``jr.predictive(...,
observation_noise=True)``: the weights' uncertainty plus the noise.
"""
from __future__ import annotations

import argparse
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from sklearn.datasets import load_diabetes

import jaxrvga as jr
from examples.common import as_f32, interval_coverage, lowrank_init, split


class MLP(nn.Module):
    """``10 -> hidden -> 1`` with tanh; returns the scalar prediction."""

    hidden: int = 16

    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(nn.tanh(nn.Dense(self.hidden)(x)))[0]


def standardise(train, test):
    """``(train, test)`` centred and scaled by the training mean and standard deviation.
    """
    mu, sd = train.mean(axis=0), train.std(axis=0)
    return (train - mu) / sd, (test - mu) / sd


def main(num_train: int = 352, num_test: int = 90, hidden: int = 16, rank: int = 10,
         noise_var: float = 0.5, prior_var: float = 0.3, epochs: int = 1, seed: int = 0,
         verbose: bool = True) -> dict:
    """Train and score the test set; returns RMSE, 95 % coverage and the mean predictive
    sd (linearised and MC)."""
    X, y = load_diabetes(return_X_y=True)
    Xtr, ytr, Xte, yte = split(X, y, num_train, num_test, seed)
    (Xtr, Xte), (ytr, yte) = standardise(Xtr, Xte), standardise(ytr, yte)
    net = MLP(hidden)
    theta0, unravel = ravel_pytree(net.init(jax.random.PRNGKey(seed), Xtr[0]))
    model = jr.models.nonlinear(net.apply, jr.models.gaussian(noise_var),
                                unravel=unravel)
    flt = jr.lrvga(model, rank=rank, scheme="ekf")
    state = lowrank_init(flt, theta0, rank, prior_var, jax.random.PRNGKey(seed + 1))
    xs, ys = as_f32(np.tile(Xtr, (epochs, 1)), np.tile(ytr, epochs))
    start = time.perf_counter()
    state, _ = jr.run(flt, state, xs, ys)
    seconds = time.perf_counter() - start
    Xte_j, = as_f32(Xte)
    out = {"seconds": seconds, "dim": int(theta0.shape[0]),
           # predicting the training mean (0)
           "baseline_rmse": float(np.sqrt(np.mean(yte**2)))}
    keys = (("linearised", None), ("monte_carlo", jax.random.PRNGKey(seed + 2)))
    for name, key in keys:
        mean, var = jr.predictive(state, Xte_j, model=model, key=key,
                                  observation_noise=True)
        out[name] = {"rmse": float(jnp.sqrt(jnp.mean((mean - yte) ** 2))),
                     "coverage95": interval_coverage(mean, var, yte),
                     "mean_sd": float(jnp.mean(jnp.sqrt(var)))}
    if verbose:
        print(f"d = {out['dim']}, rank {rank}: {num_train} x {epochs} observations "
              f"in {seconds:.1f} s (compile included); "
              f"RMSE of the mean of y: {out['baseline_rmse']:.3f}")
        for name in ("linearised", "monte_carlo"):
            s = out[name]
            print(f"  {name:12s} RMSE {s['rmse']:.3f}  "
                  f"95% coverage {s['coverage95']:.3f}  mean sd {s['mean_sd']:.3f}")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--noise-var", type=float, default=0.5)
    a = parser.parse_args()
    main(hidden=a.hidden, rank=a.rank, noise_var=a.noise_var, epochs=a.epochs)
