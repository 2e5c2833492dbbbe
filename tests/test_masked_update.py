"""jr.masked_update: a fleet of filters updated only where a mask says so (float64).

The members updated must equal ``flt.update`` of each member alone (the per-member loop); the
others must keep their state bit for bit, step counter, key and diagnostics included.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr

D, N = 3, 4
RNG = np.random.default_rng(11)
X = RNG.normal(size=(N, D))
Y = np.array([1.0, 0.0, 1.0, 1.0])
MASK = np.array([True, False, True, False])


def _dense_fleet(flt):
    covs = np.stack([(1.0 + i) * np.eye(D) for i in range(N)])
    return jax.vmap(flt.init)(jnp.asarray(RNG.normal(size=(N, D))), jnp.asarray(covs))


FLEETS = {
    "implicit": lambda: (jr.rvga(jr.models.logistic()), _dense_fleet(jr.rvga(jr.models.logistic()))),
    "kalman_drift": lambda: (jr.kalman(0.5, decay=0.9, additive_noise=0.1),
                             _dense_fleet(jr.kalman(0.5, decay=0.9, additive_noise=0.1))),
    "lowrank": lambda: (jr.lrvga(jr.models.logistic(), rank=2, scheme="ekf"),
                        jax.vmap(jr.lrvga(jr.models.logistic(), rank=2, scheme="ekf").init)(
                            jnp.zeros((N, D)), jnp.asarray(RNG.normal(size=(N, D, 2))), jnp.ones((N, D)))),
    "diagonal_sampled": lambda: (jr.diag_rvga(jr.models.logistic(), "sampled"),
                                 jax.vmap(lambda k: jr.diag_rvga(jr.models.logistic(), "sampled").init(
                                     jnp.zeros(D), 2.0, key=k))(jax.random.split(jax.random.key(0), N))),
}


def _member(tree, i):
    return jax.tree_util.tree_map(lambda a: a[i], tree)


def _leaves_equal(a, b):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        if jnp.issubdtype(u.dtype, jax.dtypes.prng_key):
            u, v = jax.random.key_data(u), jax.random.key_data(v)
        assert u.dtype == v.dtype and np.array_equal(np.asarray(u), np.asarray(v)), (u, v)


@pytest.mark.parametrize("name", list(FLEETS))
def test_masked_members_update_and_the_others_keep_their_state(name):
    flt, fleet = FLEETS[name]()
    out = jax.jit(lambda s, x, y, m: jr.masked_update(flt, s, x, y, m))(fleet, X, Y, MASK)
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(fleet)
    for i in range(N):
        if MASK[i]:
            alone = flt.update(_member(fleet, i), X[i], Y[i])
            for u, v in zip(jax.tree_util.tree_leaves(_member(out, i)), jax.tree_util.tree_leaves(alone)):
                if jnp.issubdtype(u.dtype, jax.dtypes.prng_key):
                    u, v = jax.random.key_data(u), jax.random.key_data(v)
                np.testing.assert_allclose(np.asarray(u, float), np.asarray(v, float), rtol=1e-10, atol=1e-12)
            assert int(_member(out, i).step) == 1
        else:
            _leaves_equal(_member(out, i), _member(fleet, i))        # bit for bit, step counter 0


def test_a_scalar_mask_updates_one_filter_or_keeps_it():
    flt = jr.rvga(jr.models.logistic())
    state = flt.init(jnp.zeros(D), jnp.eye(D))
    _leaves_equal(jr.masked_update(flt, state, X[0], Y[0], False), state)
    _leaves_equal(jr.masked_update(flt, state, X[0], Y[0], True), flt.update(state, X[0], Y[0]))


def test_a_loop_of_masked_updates_is_the_loop_of_each_member():
    # a stream where each round updates one member: each member ends as its own run over its data
    flt, fleet = FLEETS["kalman_drift"]()
    rounds = 12
    xs, ys = RNG.normal(size=(rounds, N, D)), RNG.normal(size=(rounds, N))
    chosen = np.arange(rounds) % N
    state = fleet
    for t in range(rounds):
        state = jr.masked_update(flt, state, xs[t], ys[t], np.arange(N) == chosen[t])
    for i in range(N):
        alone, _ = jr.run(flt, _member(fleet, i), xs[chosen == i, i], ys[chosen == i, i])
        np.testing.assert_allclose(_member(state, i).mean, alone.mean, rtol=1e-10)
        np.testing.assert_allclose(_member(state, i).cov, alone.cov, rtol=1e-10)
        assert int(_member(state, i).step) == int(np.sum(chosen == i))


def test_bad_masks_and_axes_are_refused():
    flt, fleet = FLEETS["implicit"]()
    with pytest.raises(ValueError, match="mask must be a bool"):
        jr.masked_update(flt, fleet, X, Y, np.array([1, 0, 1, 0]))
    with pytest.raises(ValueError, match="mask must be a bool"):
        jr.masked_update(flt, fleet, X, Y, np.ones((2, 2), bool))
    with pytest.raises(ValueError, match="x: every array must have the leading"):
        jr.masked_update(flt, fleet, X[:3], Y, MASK)
