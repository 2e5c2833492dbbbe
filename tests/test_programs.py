"""Identical filters share one compiled program (jaxrvga._values): models and filters built twice
from the same functions and options are equal, so ``jr.run`` compiles them once."""
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga import core
from jaxrvga._values import Bound, same, value_key

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
