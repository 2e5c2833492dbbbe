"""Nothing to tune for a network: the prior learned per layer, read through forecasters.

``python -m examples.network_recipe``. The equinox MLP 64-32-10 of
``examples.digits_multiclass`` on the ten-class digits, no validation split. Four
readings of the same data:

* one filter (``jr.lrvga``, rank 10, prior ``N(theta0, 0.1 I)``) read by its plug-in,
  ``p(y | theta = mean)``;
* the same filter read by its own linearised predictive, far too wide for a network;
* the documented recipe (docs/uncertainty.md, "The recipe"), ``jr.average.recipe``:
  ``jr.model_average`` of that one filter with its prior precision learned per layer on
  the stream (``learn_prior=jr.average.LEARN_PRIOR``, the layers' sizes as groups), the
  forecasters' weights forgetting at ``jr.average.FORGET``, read through the scales;
* the same recipe over :data:`PASSES` passes of the training set, its likelihood
  tempered to ``1 / PASSES`` (``jr.models.tempered``: each image counted once in all;
  docs/uncertainty.md, "With the data set in hand").

Each is scored on the test set by ``jr.predictive_scores`` (one call: probabilities
and log densities): NLPD, accuracy and ECE; the learned prior variance of each layer
is printed.
"""
from __future__ import annotations

import argparse
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from sklearn.datasets import load_digits

import jaxrvga as jr
from examples.common import as_f32, lowrank_init, split
from jaxrvga.baselines.metrics import ece

PRIOR_VAR = 0.1  # the recipe's start: around LeCun-normal weights, standardised inputs
PASSES = 3  # tempered passes of the last reading
READINGS = {"plug_in": "one filter, plug-in", "linearised": "one filter, linearised",
            "recipe": "the recipe", "passes": f"the recipe, {PASSES} passes"}


def network(hidden: int, key):
    """``(theta0, model, blocks)``: the flat weights of an equinox MLP 64-hidden-10,
    its categorical model and the sizes of its layers (one prior precision each)."""
    mlp = eqx.nn.MLP(64, 10, hidden, depth=1, activation=jax.nn.relu, key=key)
    params, static = eqx.partition(mlp, eqx.is_array)
    theta0, unravel = ravel_pytree(params)
    h = lambda p, x: eqx.combine(p, static)(x)  # noqa: E731
    model = jr.models.nonlinear(h, jr.models.categorical(10), unravel=unravel)
    return theta0, model, jr.learned_prior.block_sizes(params.layers)


def _trace(state, x, y):
    """The learned prior variance of each layer after each step."""
    return jnp.exp(-state.prior.log_precision[0])


def scores(state, model, X, y, scale=1.0):
    """Test NLPD, accuracy and ECE of ``state``'s predictive at covariance ``scale``,
    and its class probabilities (``"probs"``)."""
    out = jr.predictive_scores(state, X, y, model, scale=scale)
    probs, labels = np.asarray(out.mean, np.float64), np.asarray(y).astype(int)
    return {"nlpd": float(-jnp.mean(out.log_density)),
            "accuracy": float(np.mean(probs.argmax(1) == labels)),
            "ece": ece(probs, labels), "probs": probs}


def timed_pass(flt, state, X, y, trace=None, passes=1):
    """``(jr.run's result, seconds)`` of ``passes`` passes (the last one's trace),
    compiled before the clock."""
    def run(s, X, y):
        for _ in range(passes - 1):
            s = jr.run(flt, s, X, y)[0]
        return jr.run(flt, s, X, y, trace)

    run = jax.jit(run)
    jax.block_until_ready(run(state, X, y))
    start = time.perf_counter()
    out = jax.block_until_ready(run(state, X, y))
    return out, time.perf_counter() - start


def main(num_train: int = 1200, num_test: int = 597, hidden: int = 32, seed: int = 0,
         verbose: bool = True) -> dict:
    """One pass of the filter and of the recipe, and :data:`PASSES` tempered passes of
    the recipe; scores of the four readings, the learned prior variances (per layer,
    and the trace of the one pass), the seconds of each run."""
    X, y = load_digits(return_X_y=True)
    Xtr, ytr, Xte, yte = as_f32(*split(X / 16.0, y, num_train, num_test, seed))
    theta0, model, blocks = network(hidden, jax.random.PRNGKey(seed))
    flt = jr.lrvga(model, rank=10)
    member = lowrank_init(flt, theta0, 10, PRIOR_VAR, jax.random.PRNGKey(seed + 1))
    avg, start = jr.average.recipe(flt, member, PRIOR_VAR, blocks)
    (alone, _), seconds = timed_pass(flt, member, Xtr, ytr)
    (state, prior_vars), recipe_seconds = timed_pass(avg, start, Xtr, ytr, _trace)
    hot = jr.lrvga(jr.models.tempered(model, 1.0 / PASSES), rank=10)
    hot, start = jr.average.recipe(hot, member, PRIOR_VAR, blocks)
    (passed, _), passes_seconds = timed_pass(hot, start, Xtr, ytr, passes=PASSES)
    out = {"plug_in": scores(alone, model, Xte, yte, 0.0),
           "linearised": scores(alone, model, Xte, yte),
           "recipe": scores(state, model, Xte, yte),
           "passes": scores(passed, model, Xte, yte),
           "hidden": hidden, "blocks": blocks, "labels": np.asarray(yte).astype(int),
           "prior_var": np.asarray(prior_vars[-1]),
           "prior_var_trace": np.asarray(prior_vars),
           "prior_var_passes": np.exp(-np.asarray(passed.prior.log_precision[0])),
           "seconds": {"filter": seconds, "recipe": recipe_seconds,
                       "passes": passes_seconds},
           "converged": bool(state.info.converged & passed.info.converged)}
    if verbose:
        report(out, num_train)
    return out


def report(out, num_train):
    """Print the table of :func:`main`."""
    print(f"ten-class digits, MLP 64-{out['hidden']}-10 (layers of {out['blocks']} "
          f"weights), {num_train} images")
    print("                          NLPD    accuracy  ECE")
    for name, label in READINGS.items():
        s = out[name]
        print(f"  {label:<23} {s['nlpd']:.4f}  {s['accuracy']:.3f}     {s['ece']:.3f}")
    variances = ", ".join(f"{v:.3g}" for v in out["prior_var"])
    passed = ", ".join(f"{v:.3g}" for v in out["prior_var_passes"])
    print(f"  learned prior variance per layer: {variances} (from {PRIOR_VAR}; "
          f"{passed} after {PASSES} passes)")
    s = out["seconds"]
    print(f"  one pass: filter {s['filter']:.2f} s, recipe {s['recipe']:.2f} s "
          f"({s['recipe'] / s['filter']:.1f}x, compiled); {PASSES} passes of the "
          f"recipe {s['passes']:.2f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-train", type=int, default=1200)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args()
    main(a.num_train, hidden=a.hidden, seed=a.seed)
