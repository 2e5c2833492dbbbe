"""One guard for every kept belief (issue 38, item 2), and the values ``jr.build`` and ``init`` take.

Every state a step returns has finite arrays and positive variances, or the step is skipped and
flagged (``info.converged`` False, the prior kept): after a scheme of the user's that returns
``ok=True`` with a broken belief, after a prediction that collapses or overflows the covariance,
and for a member of a vmapped fleet whose prior is degenerate.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga.core import solver_info

from conftest import package_beliefs

LINEAR = jr.models.linear_gaussian(0.5)


def _factors(cls):
    """``factors(d, dtype)``: the ``init`` factors of the class's example for ``d`` dimensions, in ``dtype``."""
    return lambda d, dt: tuple(jnp.asarray(f, dt) for f in cls.example(d, np.random.default_rng(0))[1])


#: Every belief of the package (:func:`conftest.package_beliefs`), by its lower-case class name.
BELIEFS = {cls.__name__.lower(): (cls.example(3, np.random.default_rng(0))[0], _factors(cls))
           for cls in package_beliefs()}


def _stream(d=3, n=6, dtype=np.float64):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d)).astype(dtype)
    return jnp.asarray(X), jnp.asarray(X @ np.ones(d) + 0.3 * rng.normal(size=n), dtype)


def _run(flt, init, X, y):
    def trace(state, x, y):
        arrays = [a for a in jax.tree_util.tree_leaves(state._replace(info=None, key=None, step=None))]
        return jnp.stack([jnp.all(jnp.isfinite(a)) for a in arrays]).all(), state.info.converged
    return jr.run(flt, init, X, y, trace)


def _breaking_step(field, value):
    """A user's step that returns ``ok=True`` with ``field`` replaced by ``value(old)``."""
    def step(cfg, model, belief, prior, x, y):
        new, ok, info = jr.schemes.ekf().step(jr.schemes.ekf().cfg, model, belief, prior, x, y)
        return new._replace(**{field: value(getattr(new, field))}), jnp.asarray(True), info
    return step


@pytest.mark.parametrize("name,field,value", [
    ("dense", "cov", lambda c: c * jnp.nan), ("dense", "cov", lambda c: -c),
    ("dense", "cov", lambda c: c.at[0, 1].set(jnp.inf)),
    ("lowrank", "psi", lambda p: -jnp.ones_like(p)), ("lowrank", "psi", lambda p: p * jnp.nan),
    ("diagonal", "psi", lambda p: -jnp.ones_like(p)), ("diagonal", "psi", lambda p: p * jnp.nan)])
def test_a_user_step_that_breaks_the_belief_is_skipped_and_flagged(name, field, value):
    belief, factors = BELIEFS[name]
    scheme = jr.schemes.Scheme("breaks", _breaking_step(field, value))
    assert not scheme.certified and jr.schemes.ekf().certified
    flt = jr.build(belief, scheme, LINEAR)
    X, y = _stream()
    init = flt.init(jnp.zeros(3), *factors(3, jnp.float64))
    final, (finite, converged) = _run(flt, init, X, y)
    assert np.asarray(finite).all() and not np.asarray(converged).any()
    for a, b in zip(jax.tree_util.tree_leaves(final._replace(info=None, step=None)),
                    jax.tree_util.tree_leaves(init._replace(info=None, step=None))):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", sorted(BELIEFS))
@pytest.mark.parametrize("dtype,decay", [(np.float64, 0.0), (np.float64, 1e-200), (np.float64, 1e200),
                                         (np.float32, 1e-30), (np.float32, 1e20)])
def test_a_prediction_that_collapses_or_overflows_the_covariance_is_flagged(name, dtype, decay):
    """``decay = 0`` (or one whose square underflows) without noise predicts a zero covariance;
    one whose square overflows an infinite one: neither is kept, every step is flagged."""
    belief, factors = BELIEFS[name]
    flt = jr.build(belief, jr.schemes.ekf(), LINEAR, jr.dynamics.dynamics(decay=decay))
    X, y = _stream(dtype=dtype)
    init = flt.init(jnp.zeros(3, dtype), *factors(3, dtype))
    _, (finite, converged) = _run(flt, init, X, y)
    assert np.asarray(finite).all() and not np.asarray(converged).any()


def test_decay_zero_with_noise_is_a_valid_prediction():
    """``decay = 0`` with additive noise ``q`` predicts ``N(0, q I)``: valid, every step converged."""
    flt = jr.rvga(LINEAR, "exact", decay=0.0, additive_noise=2.0)
    X, y = _stream()
    final, (finite, converged) = _run(flt, flt.init(jnp.zeros(3), jnp.eye(3)), X, y)
    assert np.asarray(converged).all()
    x = X[-1]  # the last step is one Kalman step from N(0, 2 I)
    cov = np.linalg.inv(np.eye(3) / 2.0 + np.outer(x, x) / 0.5)
    np.testing.assert_allclose(final.cov, cov, rtol=1e-12)
    np.testing.assert_allclose(final.mean, cov @ (x * y[-1] / 0.5), rtol=1e-12)


def test_a_vmapped_member_with_a_zero_prior_variance_is_flagged_and_the_others_are_not():
    flt = jr.rvga(LINEAR, "exact")
    X, y = _stream()
    scales = jnp.asarray([1.0, 0.0, 2.0])
    init = jax.vmap(lambda s: flt.init(jnp.zeros(3), s * jnp.eye(3)))(scales)
    _, (_, converged) = jax.vmap(lambda st: _run(flt, st, X, y))(init)
    np.testing.assert_array_equal(np.asarray(converged).all(axis=1), [True, False, True])
    assert not np.asarray(converged)[1].any()


def test_a_user_step_may_report_float32_info_in_a_float64_run():
    def step(cfg, model, belief, prior, x, y):
        new, ok, _ = jr.schemes.ekf().step(jr.schemes.ekf().cfg, model, belief, prior, x, y)
        return new, ok, solver_info(jnp.float32)
    flt = jr.build(jr.beliefs.Dense(), jr.schemes.Scheme("f32", step), LINEAR)
    want = jr.build(jr.beliefs.Dense(), jr.schemes.ekf(), LINEAR)
    X, y = _stream()
    got, _ = jr.run(flt, flt.init(jnp.zeros(3), jnp.eye(3)), X, y)
    ref, _ = jr.run(want, want.init(jnp.zeros(3), jnp.eye(3)), X, y)
    assert got.info.residual.dtype == jnp.float64
    np.testing.assert_allclose(got.mean, ref.mean, rtol=1e-14)
    bad = jr.build(jr.beliefs.Dense(), jr.schemes.Scheme("bad", lambda *a: step(*a)[:2] + ((1.0, 2.0),)), LINEAR)
    with pytest.raises(ValueError, match="scheme 'bad': its step must return info as a jaxrvga.core.SolverInfo"):
        bad.update(bad.init(jnp.zeros(3), jnp.eye(3)), X[0], y[0])


@pytest.mark.parametrize("belief,match", [
    (jr.beliefs.Dense, r"^belief must be a belief value such as Dense\(\.\.\.\), got the class itself"),
    (jr.beliefs.LowRank(2, psi_floor=2.0), r"^psi_floor must be a number in \[0, 1\), got 2.0"),
    (jr.beliefs.LowRank(2, psi_floor=float("nan")), r"^psi_floor must be a number in \[0, 1\), got nan"),
    (jr.beliefs.LowRank(2, buffer=-1), r"^buffer must be an integer >= 0, got -1"),
    (jr.beliefs.LowRank(0), r"^rank must be a positive integer, got 0"),
    (jr.beliefs.PublishedLowRank(2, inner_loops=0), r"^inner_loops must be a positive integer, got 0")])
def test_build_checks_the_belief_value_as_lrvga_checks_its_options(belief, match):
    with pytest.raises(ValueError, match=match):
        jr.build(belief, jr.schemes.ekf(), LINEAR)


@pytest.mark.parametrize("scheme", [jr.schemes.Scheme("none", jr.schemes.ekf().step, None),
                                    jr.schemes.Scheme("three", 3)])
def test_build_checks_a_user_scheme_value(scheme):
    with pytest.raises(ValueError, match=rf"^scheme '{scheme.name}': step must be callable and cfg a "):
        jr.build(jr.beliefs.Dense(), scheme, LINEAR)


@pytest.mark.parametrize("dtype,tiny,huge", [(np.float64, 1e-320, 1e200), (np.float32, 1e-42, 1e30)])
def test_init_refuses_values_whose_precision_or_gram_overflows(dtype, tiny, huge):
    d = 3
    with pytest.raises(ValueError, match="^var must be large enough that 1 / var is finite"):
        jr.diag_rvga(LINEAR).init(jnp.zeros(d, dtype), jnp.full(d, tiny, dtype))
    low = jr.lrvga(LINEAR, rank=1)
    with pytest.raises(ValueError, match="^W and psi: the whitened Gram"):
        low.init(jnp.zeros(d, dtype), jnp.full((d, 1), huge, dtype), jnp.ones(d, dtype))
    for flt in (low, jr.lrvga(LINEAR, rank=1, published=True)):
        with pytest.raises(ValueError, match="^psi must be large enough that 1 / psi is finite"):
            flt.init(jnp.zeros(d, dtype), jnp.ones((d, 1), dtype), jnp.full(d, tiny, dtype))
    assert np.isfinite(np.asarray(jr.diag_rvga(LINEAR).init(jnp.zeros(d, dtype), 1e-30).psi)).all()
