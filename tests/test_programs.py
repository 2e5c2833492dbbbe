"""Identical filters share one compiled program (jaxrvga._values): models and filters built twice
from the same functions and options are equal, so ``jr.run`` compiles them once."""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga import core
from jaxrvga._values import Bound, same, value_key

jax.config.update("jax_enable_x64", True)

X = np.random.default_rng(0).normal(size=(12, 3))
Y = (X[:, 0] > 0).astype(float)
def TANH(th, x):
    return jnp.tanh(x @ th)


def _dense(flt):
    return flt.init(jnp.zeros(3), jnp.eye(3))


def _lowrank(flt):
    return flt.init(jnp.zeros(3), 0.1 * jnp.ones((3, 2)), jnp.ones(3))


MAKERS = {
    "rvga logistic": (lambda: jr.rvga(jr.models.logistic()), _dense),
    "lrvga logistic": (lambda: jr.lrvga(jr.models.logistic(), 2), _lowrank),
    "diag poisson": (lambda: jr.diag_rvga(jr.models.poisson()), lambda f: f.init(jnp.zeros(3), 1.0)),
    "kalman with drift": (lambda: jr.kalman(0.5, decay=0.9, additive_noise=0.1), _dense),
    "nonlinear, same h": (lambda: jr.ekf(jr.models.nonlinear(TANH, jr.models.bernoulli())), _dense),
    "glm": (lambda: jr.rvga(jr.models.glm(jr.models.bernoulli()), "explicit"), _dense),
}


@pytest.mark.parametrize("name", MAKERS)
def test_identical_filters_compile_once(name):
    make, init = MAKERS[name]
    a, b = make(), make()
    assert a.program() == b.program() and hash(a.program()) == hash(b.program())
    before = core._scan_jit._cache_size()
    outs = [jr.run(f, init(f), X, Y)[0].mean for f in (a, b, make())]
    assert core._scan_jit._cache_size() - before == 1
    np.testing.assert_array_equal(outs[0], outs[2])  # the same program on the same data


def test_other_options_or_functions_are_other_programs():
    base = jr.rvga(jr.models.logistic()).program()
    assert base != jr.rvga(jr.models.logistic(), "ekf").program()
    assert base != jr.rvga(jr.models.logistic(), process_noise=0.1).program()
    assert jr.kalman(0.5).program() != jr.kalman(0.25).program()
    assert jr.ekf(jr.models.nonlinear(lambda th, x: x @ th)).program() != \
        jr.ekf(jr.models.nonlinear(lambda th, x: x @ th)).program()  # two lambdas: two functions
    noise = jnp.asarray(0.5)  # arrays compare by identity (no boolean ==)
    assert jr.kalman(noise).program() == jr.kalman(noise).program()
    assert jr.kalman(noise).program() != jr.kalman(jnp.asarray(0.5)).program()


def test_bound_and_same():
    add = Bound(np.add, 1.0)
    assert add(2.0) == 3.0 and add == Bound(np.add, 1.0) and add != Bound(np.add, 1)  # 1.0 and 1: other types
    assert hash(add) == hash(Bound(np.add, 1.0))
    assert same((1, (2.0, "a")), (1, (2.0, "a"))) and not same((1,), (1, 2))
    assert not same(np.zeros(2), np.zeros(2)) and value_key(np.zeros(2))[0] == "id"


# --------------------------------------------------------------------------- schemes and beliefs as values

class Tempering(NamedTuple):
    """The options of the tempered scheme: its own configuration value."""

    alpha: float


def _tempered_step(cfg, model, belief, prior, X, y):
    """A scheme written outside the library: the exact linear-Gaussian step with the likelihood
    raised to the power ``cfg.alpha`` (a tempered, or power, posterior)."""
    inc = jr.schemes.exact_site(model, prior, X, y)
    alpha = cfg.alpha
    new, ok = jr.schemes.absorb(belief, prior, inc._replace(c=alpha * inc.c, coef=alpha * inc.coef))
    return new, ok, jr.SolverInfo(jnp.asarray(True), jnp.zeros(()), jnp.zeros((), jnp.int32))


def tempered(alpha):
    return jr.schemes.Scheme("tempered", _tempered_step, Tempering(alpha), "has_exact_update")


def test_a_new_scheme_is_one_value():
    """A scheme defined here runs on every belief: the linear-Gaussian likelihood tempered by 1/2 is
    the Kalman filter with twice the noise variance (dense, low rank at full rank, diagonal with
    inputs along the axes), float64."""
    rng = np.random.default_rng(1)
    Xs, ys = rng.normal(size=(30, 3)), rng.normal(size=30)
    model = jr.models.linear_gaussian(0.5)
    ref, _ = jr.run(jr.kalman(1.0), jr.kalman(1.0).init(jnp.zeros(3), jnp.eye(3)), Xs, ys)
    dense = jr.build(jr.beliefs.Dense(), tempered(0.5), model)
    got, _ = jr.run(dense, dense.init(jnp.zeros(3), jnp.eye(3)), Xs, ys)
    np.testing.assert_allclose(got.cov, ref.cov, rtol=1e-12)
    np.testing.assert_allclose(got.mean, ref.mean, rtol=1e-12)
    low = jr.build(jr.beliefs.LowRank(3, 0), tempered(0.5), model)
    got, _ = jr.run(low, low.init(jnp.zeros(3), jnp.zeros((3, 3)), jnp.ones(3)), Xs, ys)
    np.testing.assert_allclose(got.mean, ref.mean, rtol=1e-10)
    np.testing.assert_allclose(jr.kernels.lowrank.to_dense_covariance(got.W, got.psi), ref.cov, rtol=1e-10, atol=1e-13)
    axes = np.eye(3)[rng.integers(0, 3, 30)] * rng.normal(size=(30, 1))
    ref, _ = jr.run(jr.kalman(1.0), jr.kalman(1.0).init(jnp.zeros(3), jnp.eye(3)), axes, ys)
    diag = jr.build(jr.beliefs.Diagonal(), tempered(0.5), model)
    got, _ = jr.run(diag, diag.init(jnp.zeros(3), 1.0), axes, ys)
    np.testing.assert_allclose(1.0 / got.psi, np.diagonal(ref.cov), rtol=1e-12)
    np.testing.assert_allclose(got.mean, ref.mean, rtol=1e-12)
    assert jr.build(jr.beliefs.Dense(), tempered(0.5), model) == jr.build(jr.beliefs.Dense(), tempered(0.5), model)
    assert jr.build(jr.beliefs.Dense(), tempered(0.5), model) != jr.build(jr.beliefs.Dense(), tempered(0.3), model)


def test_the_named_filters_are_built_from_values():
    """``jr.rvga`` / ``jr.lrvga`` / ``jr.diag_rvga`` with a scheme name equal ``jr.build`` of the values."""
    S, B = jr.schemes, jr.beliefs
    logistic, net = jr.models.logistic(), jr.models.nonlinear(TANH, jr.models.bernoulli())
    assert jr.rvga(logistic) == jr.build(B.Dense(), S.implicit(), logistic)
    assert jr.rvga(logistic, "ekf", max_move=3.0) == jr.build(B.Dense(), S.ekf(max_move=3.0), logistic)
    assert jr.rvga(net) == jr.build(B.Dense(), S.moment_ekf(), net)
    assert jr.rvga(net, "implicit") == jr.build(B.Dense(), S.sampled(num_iters=3), net)
    assert jr.diag_rvga(net, "explicit") == jr.build(B.Diagonal(), S.sampled(num_samples=10, num_iters=1), net)
    assert jr.lrvga(logistic, 2) == jr.build(B.LowRank(2, 0), S.implicit(), logistic)
    published = jr.lrvga(logistic, 2, scheme="extragrad", published=True)
    assert published == jr.build(B.PublishedLowRank(2, 1), S.extragrad(correction=False, update_cov_twice=False,
                                                                         max_move=np.inf), logistic)
    assert jr.lrvga(logistic, 2, scheme="sampled", published=True).spec.scheme == S.published_sampled()
    assert jr.rvga(logistic) != jr.build(B.Dense(), S.explicit(), logistic)


def test_scheme_factories_and_build_refuse_what_does_not_fit():
    S, B = jr.schemes, jr.beliefs
    for call, match in ((lambda: S.moment_ekf(jitter=0.0), "^jitter must be a number > 0"),
                        (lambda: S.ekf(curvature="hessian"), "^curvature='hessian' is only used by scheme 'sampled'"),
                        (lambda: S.sampled(num_samples=1), "^num_samples must be >= 2"),
                        (lambda: S.explicit(max_move=0), "^max_move must be a number > 0"),
                        (lambda: S.published_sampled(frozen_draws=(np.ones((0, 3)), np.ones((0, 1)))), "K >= 1"),
                        (lambda: jr.build(B.Dense(), S.qkf(), jr.models.poisson()), "scheme 'qkf' does not apply"),
                        (lambda: jr.build(B.LowRank(2), S.sampled(curvature="hessian"), jr.models.logistic()),
                         "curvature='hessian' needs a Dense belief"),
                        (lambda: jr.build(B.LowRank(2), S.published_sampled(), jr.models.logistic()),
                         "needs a PublishedLowRank belief"),
                        (lambda: jr.build(B.Dense(), "ekf", jr.models.logistic()), "^scheme must be a jaxrvga.schemes"),
                        (lambda: jr.build("dense", S.ekf(), jr.models.logistic()), "^belief must satisfy"),
                        (lambda: jr.build(B.Dense(), S.ekf(), jr.models.logistic(), 0.5), "^dynamics must be")):
        with pytest.raises(ValueError, match=match):
            call()


def test_a_filter_named_for_a_scheme_is_the_dense_filter_with_that_scheme():
    """``jr.ekf``/``jr.qkf`` (filters) and ``scheme="ekf"``/``"qkf"`` (the schemes) name one idea
    (docs/architecture.md, names that look alike): the same program."""
    logistic = jr.models.logistic()
    assert jr.ekf(logistic).program() == jr.rvga(logistic, scheme="ekf").program()
    assert jr.qkf().program() == jr.rvga(logistic, scheme="qkf").program()
    assert jr.ekf(logistic).program() != jr.rvga(logistic, scheme="qkf").program()
