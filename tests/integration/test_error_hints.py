"""Errors that point to the fix: a mistake whose remedy is another function or argument says so."""
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr

D = 5


def test_rank_zero_points_to_the_diagonal_belief():
    with pytest.raises(ValueError, match=r"rank must be a positive integer, got 0.*jr\.diag_rvga"):
        jr.lrvga(jr.models.logistic(), rank=0)


def test_rank_above_d_names_rank_and_d_at_init():
    flt = jr.lrvga(jr.models.logistic(), rank=D + 1)       # d is known only at init
    with pytest.raises(ValueError, match=rf"rank must satisfy rank <= d = {D}, got rank={D + 1}.*jr\.rvga"):
        flt.init(jnp.zeros(D), jnp.ones((D, D + 1)), jnp.ones(D))


@pytest.mark.parametrize("cov", [jnp.ones(D), 2.0])
def test_a_vector_covariance_points_to_the_diagonal_belief(cov):
    with pytest.raises(ValueError, match=r"cov must be a \(d, d\) covariance matrix.*jr\.diag_rvga"):
        jr.rvga(jr.models.logistic()).init(jnp.zeros(D), cov)


def _network_state():
    model = jr.models.nonlinear(lambda th, x: jnp.tanh(x @ th[:4]) * th[4], jr.models.bernoulli())
    return model, jr.rvga(model).init(jnp.zeros(D), jnp.eye(D))


def test_predictive_of_a_network_without_its_model_asks_for_model():
    model, state = _network_state()
    X = np.ones((3, 4))
    with pytest.raises(ValueError, match=r"X must have shape .*no model= was given.*pass model="):
        jr.predictive(state, X)
    p, _ = jr.predictive(state, X, model=model)                  # with its model it predicts
    assert p.shape == (3,)
    with pytest.raises(ValueError, match="X must have shape") as err:   # no hint where model= was given
        jr.predictive(jr.kalman(1.0).init(jnp.zeros(D), jnp.eye(D)), X, model=jr.models.linear_gaussian(1.0))
    assert "model=" not in str(err.value)
