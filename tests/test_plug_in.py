"""The plug-in forecaster (``scale=0``): ``p(y | theta = mean)`` at the cost of a forward pass."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr


def _mlp(num_outputs):
    """A one-hidden-layer network ``h(theta, x)`` with ``num_outputs`` outputs, and its weight count."""
    sizes = [(3, 4), (4,), (4, num_outputs), (num_outputs,)]
    count = sum(int(np.prod(s)) for s in sizes)

    def h(theta, x):
        parts, i = [], 0
        for s in sizes:
            n = int(np.prod(s))
            parts.append(theta[i:i + n].reshape(s))
            i += n
        W1, b1, W2, b2 = parts
        out = jnp.tanh(x @ W1 + b1) @ W2 + b2
        return out[0] if num_outputs == 1 else out

    return h, count


@pytest.mark.parametrize("family, k", [(jr.models.bernoulli(), 1), (jr.models.categorical(3), 3),
                                       (jr.models.gaussian(0.5), 1), (jr.models.gaussian(None), 1)])
def test_the_plug_in_is_the_forward_pass_and_agrees_with_the_linearised_route(family, k):
    """A concrete ``scale=0`` skips the Jacobian: the moments and the log density equal those of the
    linearised route at a traced scale of 0 (the same ``N(h(mean, x), 0)``), and the epistemic variance
    is 0."""
    h, d = _mlp(k)
    model = jr.models.nonlinear(h, family)
    flt = jr.rvga(model)
    state = flt.init(0.3 * jnp.arange(d, dtype=jnp.float64) / d, jnp.eye(d))
    X = jnp.linspace(-1, 1, 15).reshape(5, 3)
    plug = jr.predictive(state, X, model, scale=0.0)
    traced = jax.jit(lambda c: jr.predictive(state, X, model, scale=c))(0.0)
    np.testing.assert_allclose(plug.mean, traced.mean, rtol=1e-12)
    np.testing.assert_allclose(plug.var, 0.0, atol=1e-15)  # a closed form E[p^2] - E[p]^2 rounds
    y = jnp.asarray(1) if family.vector_output else jnp.asarray(0.4 if family.name == "gaussian" else 1.0)
    lp = jr.log_predictive(state, X[0], y, model, scale=0.0)
    lp_traced = jax.jit(lambda c: jr.log_predictive(state, X[0], y, model, scale=c))(0.0)
    np.testing.assert_allclose(lp, lp_traced, rtol=1e-12)


def test_is_plug_in():
    """Only a concrete 0 is the plug-in; a traced scale takes the general route."""
    from jaxrvga.predictive import is_plug_in

    assert is_plug_in(0.0) and is_plug_in(jnp.float32(0)) and not is_plug_in(1e-300) and not is_plug_in(1.0)
    assert jax.jit(lambda c: jnp.asarray(is_plug_in(c)))(0.0) == jnp.asarray(False)
