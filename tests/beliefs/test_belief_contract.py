"""Every belief against the same oracles (jaxrvga.beliefs.Belief), float64, d = 5.

Each belief's state is turned into its covariance ``P`` by its own definition (dense: ``cov``;
low rank: ``(W W^T + diag psi)^{-1}``; diagonal: ``diag(1 / psi)``); then ``marginal``, ``solve``,
the sampler's moments, the prediction step, the predictive and save/load must agree with ``P``.
The precision step is checked against ``P^{-1} + X diag(c) X^T`` for the dense belief and the
low-rank one (whose ``add`` keeps the sum exactly), against its diagonal for the diagonal one, and
against Algorithm 1 of [LRVGA] applied to that sum for the published low-rank belief (which
projects at once). The mean step solves with that sum (the diagonal belief's too: its mean step
uses the unprojected precision), the published belief's with its projection.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga import beliefs
from jaxrvga.kernels import factor_analysis
from jaxrvga.kernels import lowrank
from jaxrvga.dynamics import Dynamics

from conftest import package_beliefs

jax.config.update("jax_enable_x64", True)

D = 5
RNG = np.random.default_rng(0)
MEAN = RNG.normal(size=D)
_A = RNG.normal(size=(D, D))
COV = _A @ _A.T / D + 0.5 * np.eye(D)
W0, PSI0 = RNG.normal(size=(D, 2)), RNG.uniform(0.5, 2.0, D)
VAR0 = RNG.uniform(0.3, 2.0, D)


def _covariance(state):
    if isinstance(state, jr.GaussianState):
        return np.asarray(state.cov)
    if isinstance(state, jr.LowRankState):
        W = np.concatenate(state.W, axis=1) if isinstance(state.W, tuple) else state.W
        return np.asarray(lowrank.to_dense_covariance(W, state.psi))
    if isinstance(state, jr.DiagonalState):
        return np.diag(1.0 / np.asarray(state.psi))
    belief, read = beliefs.of_state(state)  # a belief written after these tests: P by its own sandwich
    return np.asarray(belief.sandwich(read, jnp.eye(state.mean.shape[0], dtype=state.mean.dtype)))


BELIEFS = {cls.__name__: cls.example(D, np.random.default_rng(1)) for cls in package_beliefs()}


def test_the_package_has_its_four_beliefs_and_each_state_type_is_registered():
    """The list is the package's own (:func:`conftest.package_beliefs`, not written here); each state type is read and saved by its
    registration (:func:`jaxrvga.beliefs.base.register_state`)."""
    assert set(BELIEFS) == {"Dense", "Diagonal", "LowRank", "PublishedLowRank"}
    for cls in package_beliefs():
        assert cls.state_type in beliefs.base.READERS and cls.state_type in jr.io.registered()


@pytest.fixture(params=list(BELIEFS))
def belief_and_state(request):
    belief, factors = BELIEFS[request.param]
    return belief, belief.init(MEAN, *factors)


def test_satisfies_the_protocol(belief_and_state):
    belief, state = belief_and_state
    assert isinstance(belief, beliefs.Belief) and isinstance(state, belief.state_type)


def test_marginal_and_solve_follow_the_covariance(belief_and_state):
    belief, state = belief_and_state
    P = _covariance(state)
    X, g = RNG.normal(size=(3, D)), RNG.normal(size=D)
    m, v = belief.marginal(state, X)
    np.testing.assert_allclose(m, X @ MEAN, rtol=1e-12)
    np.testing.assert_allclose(v, np.einsum("ij,jk,ik->i", X, P, X), rtol=1e-10)
    np.testing.assert_allclose(belief.solve(state, g), P @ g, rtol=1e-10)


def test_sampler_moments_are_the_covariance(belief_and_state):
    belief, state = belief_and_state
    P = _covariance(state)
    n = 200_000
    draws = np.asarray(belief.sample(state, jax.random.PRNGKey(0), n))
    assert np.all(np.abs(draws.mean(0) - MEAN) <= 5 * np.sqrt(np.diagonal(P) / n))  # independent draws
    np.testing.assert_allclose(np.cov(draws.T), P, atol=0.02 * np.abs(P).max())
    # the base noise and draw of the schemes (antithetic pairs: the mean exactly) follow P too
    noise = belief.base_draws(jax.random.PRNGKey(1), n, D, jnp.float64)
    pairs = np.asarray(belief.draw(state, noise))
    np.testing.assert_allclose(pairs.mean(0), MEAN, atol=1e-12)
    np.testing.assert_allclose(np.cov(pairs.T), P, atol=0.02 * np.abs(P).max())


def test_precision_step(belief_and_state):
    belief, state = belief_and_state
    X, c = RNG.normal(size=(D, 2)), np.array([0.7, 1.3])
    new, ok = belief.add(state, X, c)
    precision = np.linalg.inv(_covariance(state)) + X @ np.diag(c) @ X.T
    gain = precision  # the precision of the mean step: the unprojected sum
    if isinstance(belief, beliefs.Diagonal):
        precision = np.diag(np.diagonal(precision))
    if isinstance(belief, beliefs.PublishedLowRank):
        W, psi = factor_analysis.recursive_em_step(state.W, state.psi, X * np.sqrt(c), 1.0, 1.0, 2)
        precision = gain = np.asarray(lowrank.to_dense_precision(W, psi))
    assert bool(ok)
    np.testing.assert_allclose(np.linalg.inv(_covariance(new)), precision, rtol=1e-9, atol=1e-10)
    g = RNG.normal(size=D)
    stepped, _ = belief.absorb(state, X, c, g)
    np.testing.assert_allclose(stepped.mean, MEAN + np.linalg.solve(gain, g), rtol=1e-9)


def test_prediction_step(belief_and_state):
    """``N(gamma mu + (1 - gamma) m, s P + Q)``; for the diagonal belief ``P`` is diagonal, so exact too."""
    belief, state = belief_and_state
    q = RNG.uniform(0.0, 0.2, D)
    prior = belief.predict(state, Dynamics(decay=0.9, additive_noise=q, process_noise=0.1, decay_to=1.0))
    np.testing.assert_allclose(prior.mean, 0.9 * MEAN + 0.1, rtol=1e-12)
    np.testing.assert_allclose(_covariance(prior), 0.81 * 1.1 * _covariance(state) + np.diag(q), rtol=1e-9, atol=1e-12)


def test_of_state_reads_the_state_with_its_belief(belief_and_state):
    """``beliefs.of_state``: the belief type that reads a state (what the predictions ask), and the
    matrix ``J P J^T`` it gives."""
    belief, state = belief_and_state
    read, canonical = beliefs.of_state(state)
    assert type(read) is (beliefs.LowRank if isinstance(belief, beliefs.LowRank) else type(belief))
    J = RNG.normal(size=(3, D))
    np.testing.assert_allclose(read.sandwich(canonical, J), J @ _covariance(state) @ J.T, rtol=1e-10)
    np.testing.assert_allclose(belief.sandwich(state, J), J @ _covariance(state) @ J.T, rtol=1e-10)
    with pytest.raises(ValueError, match="state.psi"):
        beliefs.of_state(state._replace(psi=-state.psi) if hasattr(state, "psi") else
                         jr.DiagonalState(state.mean, -np.ones(D), state.step, state.info))


def test_predictive_and_save_load(belief_and_state, tmp_path):
    belief, state = belief_and_state
    dense = jr.GaussianState(state.mean, jnp.asarray(_covariance(state)), state.step, state.info)
    X = RNG.normal(size=(4, D))
    for got, want in zip(jr.predictive(state, X), jr.predictive(dense, X)):
        np.testing.assert_allclose(got, want, rtol=1e-10)
    jr.io.save(tmp_path / "s.npz", state)
    back = jr.io.load(tmp_path / "s.npz")
    assert type(back) is type(state)
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(state)):
        np.testing.assert_array_equal(a, b)


def test_a_finish_that_moves_the_mean_is_refused():
    """The guard chooses the mean by a ``where`` outside its conditional (``beliefs.base.finish_or_keep``:
    as the conditional's output it was copied and held through a projection), which relies on
    ``Belief.finish`` leaving the mean as it is; a belief whose ``finish`` moves it is refused."""
    class Moving(beliefs.Diagonal):
        __slots__ = ()

        def finish(self, state):
            out, report = super().finish(state)
            return out._replace(mean=out.mean + 1.0), report

    flt = jr.build(Moving(), jr.schemes.exact(), jr.models.linear_gaussian(1.0))
    state = flt.init(MEAN, VAR0)
    with pytest.raises(ValueError, match="finish changed the mean"):
        flt.update(state, np.ones(D), 1.0)
    plain = jr.build(beliefs.Diagonal(), jr.schemes.exact(), jr.models.linear_gaussian(1.0))
    assert np.all(np.isfinite(plain.update(state, np.ones(D), 1.0).mean))


def test_variances_and_a_shifted_precision_follow_the_covariance(belief_and_state):
    """``variances`` is ``diag(P)``; ``shift_precision(delta)`` is ``(P^{-1} + diag(delta))^{-1}``, the
    mean unchanged, for a delta of either sign (what :func:`jaxrvga.evidence.fit_prior_precision` moves)."""
    belief, state = belief_and_state
    P = _covariance(state)
    np.testing.assert_allclose(belief.variances(state), np.diag(P), rtol=1e-10)
    delta = 0.2 * RNG.uniform(-1.0, 1.0, D)
    shifted, ok = belief.shift_precision(state, jnp.asarray(delta))
    assert bool(ok)
    np.testing.assert_allclose(_covariance(shifted), np.linalg.inv(np.linalg.inv(P) + np.diag(delta)), rtol=1e-9)
    np.testing.assert_array_equal(shifted.mean, state.mean)
