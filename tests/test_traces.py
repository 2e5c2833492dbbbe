"""jr.traces: several trace functions, before and after each step, in one run (float64).

Each entry of the combined trace must equal the trace of a run with that trace function alone; the
filters drift (decay, additive noise), so that the predicted belief a prequential score sees differs
from the belief after the previous step.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr

D, T = 3, 40
RNG = np.random.default_rng(7)
X = RNG.normal(size=(T, D))
THETA = RNG.normal(size=D)
Y_LINEAR = X @ THETA + 0.3 * RNG.normal(size=T)
Y_BINARY = (RNG.random(T) < 1 / (1 + np.exp(-X @ THETA))).astype(float)


def _cov(state, x, y):
    return state.cov


CASES = {
    "kalman": (jr.kalman(0.09, decay=0.97, additive_noise=1e-2), jr.models.linear_gaussian(0.09), Y_LINEAR),
    "implicit": (jr.rvga(jr.models.logistic(), "implicit", process_noise=0.05), jr.models.logistic(), Y_BINARY),
}


@pytest.mark.parametrize("name", list(CASES))
def test_one_run_gives_what_separate_runs_give(name):
    flt, model, y = CASES[name]
    state = flt.init(jnp.zeros(D), jnp.eye(D))
    score = jr.trace_log_predictive(model)
    final, both = jr.run(flt, state, X, y, jr.traces(log_pred=score, mean=jr.trace_mean,
                                                     inner=jr.traces(cov=_cov)))
    _, log_pred = jr.run(flt, state, X, y, score)
    _, means = jr.run(flt, state, X, y, jr.trace_mean)
    _, covs = jr.run(flt, state, X, y, _cov)
    assert set(both) == {"log_pred", "mean", "inner"} and set(both["inner"]) == {"cov"}
    assert both["log_pred"].shape == (T,) and both["mean"].shape == (T, D)
    np.testing.assert_allclose(both["log_pred"], log_pred, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(both["mean"], means, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(both["inner"]["cov"], covs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(both["mean"][-1], final.mean, rtol=1e-12)
    # the prequential entry saw the predicted belief, not the previous posterior
    previous = _states_before(flt, state, y)
    unpredicted = jax.vmap(lambda s, x, y: jr.log_predictive(s, x, y, model))(previous, X, y)
    assert not np.allclose(both["log_pred"], unpredicted)


def _states_before(flt, state, y):
    """The belief before each step without its prediction (the previous posterior), stacked."""
    _, after = jr.run(flt, state, X, y, lambda s, x, y: s)
    return jax.tree_util.tree_map(lambda first, rest: jnp.concatenate([first[None], rest[:-1]]), state, after)


def test_equal_traces_are_equal_values():
    score = jr.trace_log_predictive(jr.models.logistic())
    assert jr.traces(a=score, b=jr.trace_mean) == jr.traces(a=score, b=jr.trace_mean)
    assert hash(jr.traces(a=score)) == hash(jr.traces(a=score))


def test_scan_inside_jit_takes_traces():
    flt, model, y = CASES["kalman"]
    state = flt.init(jnp.zeros(D), jnp.eye(D))
    trace = jr.traces(lp=jr.trace_log_predictive(model), mean=jr.trace_mean)
    _, out = jax.jit(lambda s: jr.scan(flt, s, X, y, trace))(state)
    _, alone = jr.run(flt, state, X, y, jr.trace_log_predictive(model))
    np.testing.assert_allclose(out["lp"], alone, rtol=1e-12)


def test_bad_traces_name_the_argument():
    with pytest.raises(ValueError, match="at least one"):
        jr.traces()
    with pytest.raises(ValueError, match="mean must be a trace function"):
        jr.traces(mean=3)
