"""The plug-in forecaster (``scale=0``): ``p(y | theta = mean)`` at the cost of a forward pass."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from conftest import small_mlp as _mlp


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
    from jaxrvga.validation import is_plug_in

    assert is_plug_in(0.0) and is_plug_in(jnp.float32(0)) and not is_plug_in(1e-300) and not is_plug_in(1.0)
    assert jax.jit(lambda c: jnp.asarray(is_plug_in(c)))(0.0) == jnp.asarray(False)


def test_predictive_scores_read_one_predictive():
    """``jr.predictive_scores``: a classifier's densities are its predictive probabilities (over the
    classes they sum to 1, the probit forms of ``jr.predictive``), a Gaussian's equal ``jr.log_predictive``
    of each point (the exact N(y; x^T m, x^T P x + s2)), and chunking changes nothing."""
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.normal(size=(7, 3)))
    state = jr.rvga(jr.models.logistic()).init(jnp.array([0.5, -1.0, 0.2]), 2.0 * jnp.eye(3))
    ones, zeros = (jr.predictive_scores(state, X, jnp.full(7, v), chunk_size=3) for v in (1.0, 0.0))
    np.testing.assert_allclose(np.exp(ones.log_density) + np.exp(zeros.log_density), 1.0, rtol=1e-12)
    np.testing.assert_allclose(ones.mean, jr.predictive(state, X).mean, rtol=1e-12)

    K = 3
    model = jr.models.softmax_regression(3, K)
    cat = jr.ekf(model).init(jnp.asarray(rng.normal(size=3 * K)), jnp.eye(3 * K))
    per_class = [jr.predictive_scores(cat, X, jnp.full(7, k), model).log_density for k in range(K)]
    np.testing.assert_allclose(np.sum(np.exp(per_class), axis=0), 1.0, rtol=1e-10)

    lg = jr.models.linear_gaussian(0.3)
    gs = jr.kalman(0.3).init(jnp.zeros(3), jnp.eye(3))
    y = jnp.asarray(rng.normal(size=7))
    whole = jr.predictive_scores(gs, X, y, lg, chunk_size=None)
    by_hand = -0.5 * (np.log(2 * np.pi * (np.sum(X * X, 1) + 0.3)) + np.asarray(y) ** 2 / (np.sum(X * X, 1) + 0.3))
    np.testing.assert_allclose(whole.log_density, by_hand, rtol=1e-12)
    np.testing.assert_allclose(jr.predictive_scores(gs, X, y, lg, chunk_size=2).log_density, by_hand, rtol=1e-12)
    np.testing.assert_allclose(whole.var, np.sum(X * X, 1) + 0.3, rtol=1e-12)
    np.testing.assert_allclose(whole.param_var, np.sum(X * X, 1), rtol=1e-12)  # x^T P x, P = I
    np.testing.assert_allclose(whole.noise_var, 0.3, rtol=1e-12)
    np.testing.assert_allclose(ones.noise_var + ones.param_var, ones.mean * (1 - ones.mean), rtol=1e-12)
    assert np.all(np.asarray(ones.param_var) > 0) and np.all(np.asarray(ones.noise_var) > 0)
    plug = jr.predictive_scores(gs, X, y, lg, scale=0.0)
    np.testing.assert_array_equal(plug.param_var, 0.0)
    np.testing.assert_allclose(plug.noise_var, 0.3, rtol=1e-12)
    learned = jr.kalman(None).init(jnp.zeros(3), jnp.eye(3), noise=(3.0, 2.0))  # E[s2] = 1
    parts = jr.predictive_scores(learned, X, y, jr.models.linear_gaussian(None))
    np.testing.assert_allclose(parts.noise_var, 1.0, rtol=1e-12)
    np.testing.assert_allclose(parts.param_var, np.sum(X * X, 1), rtol=1e-12)  # E[s2] x^T P x
    prior = jr.predictive_scores(jr.kalman(None).init(jnp.zeros(3), jnp.eye(3)), X, y, jr.models.linear_gaussian(None))
    assert np.all(np.isposinf(prior.noise_var)) and np.all(np.isposinf(prior.var))  # InvGamma(1, 1): E[s2] = inf
    avg = jr.model_average(jr.kalman(None))
    mixed = jr.predictive_scores(avg.init(jax.tree_util.tree_map(lambda a: a[None], jr.kalman(None).init(
        jnp.zeros(3), jnp.eye(3)))), X, y, jr.models.linear_gaussian(None))
    assert np.all(np.isposinf(mixed.noise_var))  # the average's too: not inf - inf
    # a network's scalar Gaussian output, noise learned: each density is jr.log_predictive's, from the same moments
    tanh = jr.models.nonlinear(lambda th, x: jnp.tanh(x @ th), jr.models.gaussian(None))
    net = jr.lrvga(tanh, rank=2).init(jnp.array([0.3, -0.2, 0.5]), 0.1 * jnp.ones((3, 2)), jnp.ones(3), noise=(3.0, 2.0))
    np.testing.assert_allclose(jr.predictive_scores(net, X, y, tanh).log_density,
                               [jr.log_predictive(net, X[i], y[i], tanh) for i in range(7)], rtol=1e-12)
    with pytest.raises(ValueError, match="^X must be a batch of n test inputs and y their n outputs"):
        jr.predictive_scores(gs, X, y[:3], lg)
    with pytest.raises(ValueError, match="chunk_size"):
        jr.predictive_scores(gs, X, y, lg, chunk_size=0)


def test_predictive_scores_take_one_chunk_at_a_time_inside_jit():
    """Chunks are the steps of one loop (``jax.lax.map``), so that under an outer ``jit`` memory stays that
    of one chunk (unrolled calls let XLA hold every chunk's Jacobians at once: 26 GB for 1,000 images of a
    269k-weight network): the traced program holds a loop, and its values are the unchunked ones."""
    rng = np.random.default_rng(2)
    lg = jr.models.linear_gaussian(0.3)
    gs = jr.kalman(0.3).init(jnp.asarray(rng.normal(size=3)), jnp.eye(3))
    X, y = jnp.asarray(rng.normal(size=(7, 3))), jnp.asarray(rng.normal(size=7))
    chunked = jax.jit(lambda s, X, y: jr.predictive_scores(s, X, y, lg, chunk_size=2))
    assert "while" in chunked.lower(gs, X, y).as_text()
    got, whole = chunked(gs, X, y), jr.predictive_scores(gs, X, y, lg, chunk_size=None)
    for a, b in zip(got, whole):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_predictive_scores_compile_once_per_model_and_scale():
    """A second call with another state and another number of test points reuses the compiled chunk
    program; a model holding an array (unhashable) still works."""
    from jaxrvga import posterior_predictive

    rng = np.random.default_rng(1)
    model = jr.models.logistic()
    states = [jr.rvga(model).init(jnp.asarray(rng.normal(size=3)), s * jnp.eye(3)) for s in (1.0, 2.0)]
    program = posterior_predictive._chunk_program(model, 0.5)
    for state, n in zip(states, (6, 11)):  # another number of chunks too
        X = jnp.asarray(rng.normal(size=(n, 3)))
        jr.predictive_scores(state, X, jnp.ones(n), model, scale=0.5, chunk_size=4)
    assert posterior_predictive._chunk_program(model, 0.5) is program
    assert program._cache_size() == 1
    array_noise = jr.models.linear_gaussian(jnp.asarray(0.3))
    gs = jr.kalman(0.3).init(jnp.zeros(3), jnp.eye(3))
    X, y = jnp.asarray(rng.normal(size=(5, 3))), jnp.asarray(rng.normal(size=5))
    np.testing.assert_allclose(jr.predictive_scores(gs, X, y, array_noise).log_density,
                               jr.predictive_scores(gs, X, y, jr.models.linear_gaussian(0.3)).log_density,
                               rtol=1e-12)


def _sure_states(dtype):
    """A logistic belief sure of ``x^T theta = 30`` at ``x = (1, 0)``, a two-member average of it and of a
    belief at 8, and a three-class softmax belief of logits (0, 60, -60) there: float32 rounds their
    probabilities to 0 and 1."""
    logistic = jr.rvga(jr.models.logistic())
    sure = logistic.init(jnp.asarray([30.0, 0.0], dtype), jnp.asarray(1e-6 * np.eye(2), dtype))
    avg = jr.model_average(logistic, scales=(1.0, 0.0))
    members = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), sure, logistic.init(
        jnp.asarray([8.0, 0.0], dtype), jnp.asarray(np.eye(2), dtype)))
    softmax = jr.models.softmax_regression(2, 3)
    Theta = np.array([[0.0, 60.0, -60.0], [0.0, 0.0, 0.0]])
    cat = jr.ekf(softmax).init(jnp.asarray(Theta.ravel(), dtype), jnp.asarray(1e-6 * np.eye(6), dtype))
    return sure, avg.init(members, log_prior=jnp.log(jnp.asarray([0.3, 0.7], dtype))), cat, softmax


def test_predictive_scores_stay_finite_where_a_probability_rounds_to_zero_or_one():
    """The classes' log densities are taken in log space (``log sig(+-k m)``, the log-softmax of the probit
    logits, a mixture's log-sum-exp): in float32 a probability that rounds to 1 gave ``log(1 - p) = -inf``
    and a NaN for both labels. Each float32 density equals the float64 one, a plain belief's, a model
    average's and a categorical's."""
    X = jnp.asarray([[1.0, 0.0], [1.0, 0.0]])
    for y, labels in (((0.0, 1.0), None), ((0, 1, 2), "categorical")):
        for scale in (0.0, 1.0):
            out = {}
            for dtype in (jnp.float32, jnp.float64):
                sure, avg, cat, softmax = _sure_states(dtype)
                states = ((cat, softmax),) if labels else ((sure, None), (avg, None))
                out[dtype] = [jr.predictive_scores(s, jnp.asarray(X[:1].repeat(len(y), 0), dtype),
                                                   jnp.asarray(y, None if labels else dtype), model,
                                                   scale=scale).log_density
                              for s, model in states]
            for low, high in zip(out[jnp.float32], out[jnp.float64]):
                assert low.dtype == jnp.float32 and np.all(np.isfinite(low))
                np.testing.assert_allclose(low, high, rtol=1e-5, atol=1e-6)
    sure, avg, *_ = _sure_states(jnp.float64)
    np.testing.assert_allclose(jr.predictive_scores(sure, X, jnp.asarray([0.0, 1.0]), scale=0.0).log_density,
                               [-30.0 - np.log1p(np.exp(-30.0)), -np.log1p(np.exp(-30.0))], rtol=1e-12, atol=1e-14)


def test_predictive_scores_of_an_average_are_its_mixture():
    """A model average's scores: the moments equal ``jr.predictive`` of the average (with and without the
    observation noise), and each log density is ``jr.log_predictive`` of the average at that point (the
    mixture of its forecasters' densities, a Gaussian's exact ones here)."""
    rng = np.random.default_rng(2)
    X, y = jnp.asarray(rng.normal(size=(6, 3))), jnp.asarray(rng.normal(size=6))
    flt = jr.kalman(None)
    members = jax.vmap(lambda v: flt.init(jnp.zeros(3), v * jnp.eye(3), noise=(3.0, 2.0)))(jnp.array([0.3, 3.0]))
    avg = jr.model_average(flt, scales=(0.0, 1.0))
    state, _ = jr.run(avg, avg.init(members), X, y)
    model = jr.models.linear_gaussian(None)
    scores = jr.predictive_scores(state, X, y, model)
    total = jr.predictive(state, X, model, observation_noise=True)
    np.testing.assert_allclose(scores.mean, total.mean, rtol=1e-12)
    np.testing.assert_allclose(scores.var, total.var, rtol=1e-12)
    np.testing.assert_allclose(scores.param_var, jr.predictive(state, X, model).var, rtol=1e-12)
    np.testing.assert_allclose(scores.log_density, [jr.log_predictive(state, X[i], y[i], model) for i in range(6)],
                               rtol=1e-12)
