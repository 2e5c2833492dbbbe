"""Nothing to tune: the noise variance learned, the prior averaged by its evidence.

``python -m examples.tuning_free``. Bayesian linear regression on sklearn's diabetes
data (the split of ``examples.empirical_bayes``) in one pass, with no hyper-parameter
set by hand or fitted:

* the noise variance is unknown and learned as the data arrive (``jr.kalman(None)``:
  the normal-inverse-gamma filter, its predictive a Student-t), from the weak default
  prior ``noise=(1, 1)``;
* the prior variance is averaged over a fixed grid ``10^-3 .. 10^2`` by
  ``jr.model_average``: each member's weight is its evidence, accumulated one
  observation at a time. Each member is read through the default forecasters of
  ``jr.average.PREDICTIVE_SCALES`` (from the plug-in to its own predictive), weighted
  by their prequential scores in the same way.

The held-out log predictive per point and the RMSE are compared with the filter
whose two variances empirical Bayes fitted beforehand by L-BFGS on the whole training
set (``examples.empirical_bayes``), and with the default ``s0 = s2 = 1``.
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import jaxrvga as jr
from examples import empirical_bayes

#: The prior variances the average runs over (a documented default, not fitted).
PRIOR_VARIANCES = 10.0 ** np.arange(-3.0, 2.5, 0.5)


def averaged_filter(dim: int):
    """The model average of learned-noise Kalman filters, one per prior variance of
    the grid, and its initial state."""
    flt = jr.kalman(None)
    avg = jr.model_average(flt)
    grid = jnp.asarray(PRIOR_VARIANCES, jnp.float32)
    members = jax.vmap(lambda v: flt.init(jnp.zeros(dim), v * jnp.eye(dim)))(grid)
    return avg, avg.init(members)


def _trace(state, x, y):
    """Weights of the members (summed over their forecasters) and of the forecasters
    (summed over the members), and ``E[s2]`` of the heaviest member."""
    w = jr.average.weights(state)
    heaviest = jax.tree_util.tree_map(lambda a: a[jnp.argmax(w.sum(1))],
                                      state.members.noise)
    return w.sum(1), w.sum(0), jr.noise.expected_variance(heaviest)


def run(X, y):
    """One pass: the final state and the trace of :func:`_trace` per step."""
    avg, state = averaged_filter(X.shape[1])
    return jr.run(avg, state, X, y, _trace)


def scores(state, model, X_test, y_test):
    """Held-out mean log predictive and RMSE of the predictive mean."""
    log_p = jax.vmap(lambda x, t: jr.log_predictive(state, x, t, model))
    mean = jr.predictive(state, X_test, model).mean
    rmse = jnp.sqrt(jnp.mean((mean - y_test) ** 2))
    return float(jnp.mean(log_p(X_test, y_test))), float(rmse)


def report(out):
    """Print the table of :func:`main`."""
    print("                          held-out log p  RMSE    prior var  noise var")
    t = out["tuning_free"]
    best = PRIOR_VARIANCES[int(np.argmax(t["weights"]))]
    print(f"  averaged, noise learned {t['test_log_predictive']:14.4f}  "
          f"{t['test_rmse']:.4f}  {best:9.4f}* {t['noise_var']:9.4f}")
    for name in ("empirical_bayes", "default"):
        r = out[name]
        print(f"  {name:<23} {r['test_log_predictive']:14.4f}  {r['test_rmse']:.4f}  "
              f"{r['prior_var']:9.4f}  {r['noise_var']:9.4f}")
    heaviest = float(np.max(t["weights"]))
    print(f"  * the heaviest member (weight {heaviest:.2f}) and its E[s2]")
    scales = zip(jr.average.PREDICTIVE_SCALES, t["scale_weights"])
    print("  covariance scales' weights "
          + " ".join(f"{c:.2g}:{w:.2f}" for c, w in scales))


def main(num_test: int = 100, verbose: bool = True) -> dict:
    """Run the averaged learned-noise filter, score it, and score the filters of
    empirical Bayes and of the default variances."""
    X, y, X_test, y_test = empirical_bayes.data(num_test)
    state, (w, w_scales, s2) = run(X, y)
    log_p, rmse = scores(state, jr.models.linear_gaussian(None), X_test, y_test)
    fitted = empirical_bayes.fit(X, y)
    out = {"tuning_free": {"test_log_predictive": log_p, "test_rmse": rmse,
                           "weights": np.asarray(w[-1]),
                           "scale_weights": np.asarray(w_scales[-1]),
                           "noise_var": float(s2[-1]), "weight_trace": np.asarray(w),
                           "noise_var_trace": np.asarray(s2)}}
    for name, params in (("default", jnp.zeros(2)), ("empirical_bayes", fitted)):
        lp, r = empirical_bayes.held_out(params, X, y, X_test, y_test)
        out[name] = {"test_log_predictive": lp, "test_rmse": r,
                     "prior_var": float(jnp.exp(params[0])),
                     "noise_var": float(jnp.exp(params[1]))}
    if verbose:
        print(f"diabetes, {len(y)} training points (one pass), {len(y_test)} held out")
        report(out)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-test", type=int, default=100)
    a = parser.parse_args()
    main(a.num_test)
