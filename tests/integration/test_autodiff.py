"""Derivatives through the filters: the implicit solves by the implicit function theorem, and
``jax.grad`` of a whole ``jr.run`` for every filter, against central finite differences (float64)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga.kernels import root_solvers as implicit

from conftest import LOGISTIC_FILTERS

# (alpha0, nu0, y): ordinary solves, a confident mean met by a surprising label (the first
# Newton pass fails there, so the refined box and the restart run) and a tiny nu0.
POINTS = [(0.3, 0.5, 1.0), (-2.0, 30.0, 1.0), (5.0, 1e3, 0.0), (-8.334215478130556, 328.07459713407525, 1.0),
          (0.1, 1e-6, 1.0)]


def central_differences(f, p, rel_step=1e-6):
    """Jacobian of ``f: (n,) -> (m,)`` at ``p`` by central differences, one column per input."""
    p = np.asarray(p, float)
    cols = []
    for i in range(p.size):
        h = rel_step * max(1.0, abs(p[i]))
        if 0 < p[i] < 2 * h:  # stay on the positive side of nu0
            h = 0.5 * p[i]
        e = np.eye(p.size)[i] * h
        cols.append((np.asarray(f(p + e)) - np.asarray(f(p - e))) / (2 * h))
    return np.stack(cols, axis=1)


def logistic_marginal(p):
    return jnp.stack(implicit.solve_logistic(p[0], p[1], p[2])[:2])


def poisson_marginal(p):
    return jnp.stack(implicit.solve_glm(p[0], p[1], p[2], jr.models.poisson().expected_log_lik)[:2])


def _solve_logistic(p):
    return implicit.solve_logistic(p[0], p[1], p[2])


def _solve_poisson(p):
    return implicit.solve_glm(p[0], p[1], p[2], jr.models.poisson().expected_log_lik)


# One compiled program per marginal, made once per module: the solve's convergence flag, the value
# (which the finite differences take) and both Jacobians (one program compiles in 60 % of the time
# of four: the solve is traced and compiled once).
COMPILED = {m: jax.jit(lambda p, m=m, solve=solve: (solve(p)[2].converged, m(p), jax.jacfwd(m)(p), jax.jacrev(m)(p)))
            for m, solve in ((logistic_marginal, _solve_logistic), (poisson_marginal, _solve_poisson))}


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("marginal", [logistic_marginal, poisson_marginal], ids=["logistic", "poisson"])
def test_solver_jacobian_matches_finite_differences(marginal, point):
    """d(alpha, nu) / d(alpha0, nu0, y), forward and reverse mode, equal central differences."""
    if marginal is poisson_marginal:
        point = (point[0] / 10, point[1] / 100, 3.0 * point[2])  # keep exp(alpha + nu / 2) in range
    p = jnp.asarray(point)
    converged, _, fwd, rev = COMPILED[marginal](p)
    assert bool(converged)
    fd = central_differences(lambda q: COMPILED[marginal](q)[1], point)
    scale = np.abs(fd).max()
    np.testing.assert_allclose(fwd, fd, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(rev, fwd, rtol=1e-12, atol=1e-14 * scale)


def test_batched_solver_gradients_equal_scalar_gradients():
    """Under vmap (the robust path running for one element of the batch) every gradient is the
    scalar one."""
    a0, n0, y = (np.array(v) for v in zip(*POINTS))
    grad = jax.grad(lambda a, n, yy: sum(implicit.solve_logistic(a, n, yy)[:2]), argnums=(0, 1))
    batched = jax.jit(jax.vmap(grad))(a0, n0, y)
    one_grad = jax.jit(grad)
    for i in range(len(POINTS)):
        one = one_grad(a0[i], n0[i], y[i])
        np.testing.assert_allclose([b[i] for b in batched], one, rtol=1e-12)


def test_solve_glm_differentiates_values_its_likelihood_closes_over():
    """A Gaussian GLM whose noise variance ``s`` is a traced closure value: the implicit step is the
    Kalman step ``alpha = alpha0 + nu0 (y - alpha0) / (nu0 + s)``, ``nu = nu0 s / (nu0 + s)``, and so
    are its derivatives in ``s``."""
    alpha0, nu0, y = 0.4, 2.5, 1.7

    def marginal(s):
        ell = jr.models.glm(jr.models.gaussian(s)).expected_log_lik
        return jnp.stack(implicit.solve_glm(alpha0, nu0, y, ell)[:2])

    s = 0.8
    exact = np.array([-nu0 * (y - alpha0) / (nu0 + s) ** 2, nu0**2 / (nu0 + s) ** 2])
    marginal = jax.jit(marginal)
    np.testing.assert_allclose(marginal(s), [alpha0 + nu0 * (y - alpha0) / (nu0 + s), nu0 * s / (nu0 + s)],
                               rtol=1e-10)
    np.testing.assert_allclose(jax.jit(jax.jacfwd(marginal))(s), exact, rtol=1e-8)
    np.testing.assert_allclose(jax.jit(jax.jacrev(marginal))(s), exact, rtol=1e-8)


D, T = 4, 25


def _full(flt, key=None):
    def loss(s, X, y):
        kw = {} if key is None else {"key": key}
        final, _ = jr.run(flt, flt.init(jnp.zeros(D, X.dtype), s * jnp.eye(D, dtype=X.dtype), **kw), X, y)
        return jnp.sum(final.mean) + jnp.trace(final.cov)
    return loss


def _lowrank(flt, key=None):
    W0 = jnp.asarray(np.random.default_rng(1).normal(size=(D, 2)))

    def loss(s, X, y):
        kw = {} if key is None else {"key": key}
        state = flt.init(jnp.zeros(D, X.dtype), (W0 / jnp.sqrt(s)).astype(X.dtype),
                         jnp.ones(D, X.dtype) / s, **kw)
        final, _ = jr.run(flt, state, X, y)
        return jnp.sum(final.mean) + jnp.sum(final.psi) + jnp.sum(final.W**2)
    return loss


KEY = jax.random.PRNGKey(0)
FILTERS = {
    **{name: (lambda make=make: _full(make())) for name, make in LOGISTIC_FILTERS.items()},
    "rvga_poisson": lambda: _full(jr.rvga(jr.models.poisson(), "implicit")),
    "rvga_nonlinear": lambda: _full(jr.rvga(jr.models.nonlinear(lambda th, x: x @ th, jr.models.bernoulli()),
                                            "sampled", num_samples=20), KEY),
    "kalman": lambda: _full(jr.kalman(0.5)),
    **{f"lrvga_{scheme}": (lambda scheme=scheme: _lowrank(
        jr.lrvga(jr.models.logistic(), rank=2, inner_loops=3, scheme=scheme), KEY))
       for scheme in ("implicit", "explicit", "extragrad", "sampled")},
    "lrvga_linear": lambda: _lowrank(jr.lrvga(jr.models.linear_gaussian(0.5), rank=2, inner_loops=3)),
}


def _data(name, dtype):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(T, D))
    if name in ("kalman", "lrvga_linear"):
        y = X @ np.ones(D) + rng.normal(size=T)
    elif "poisson" in name:
        y = rng.poisson(1.0, size=T).astype(float)
        X = 0.3 * X
    else:
        y = (rng.random(T) < 0.5).astype(float)
    return jnp.asarray(X, dtype), jnp.asarray(y, dtype)


_VALUE_AND_GRAD = {}


def _value_and_grad(name):
    """``jax.jit(jax.value_and_grad(loss))`` of filter ``name``, made once and shared by the tests
    below: one compiled program per filter and dtype gives both the gradient and the values that
    the finite differences take (the prior scale is passed as a NumPy/JAX scalar of the data's
    dtype throughout, so that the calls share it)."""
    if name not in _VALUE_AND_GRAD:
        _VALUE_AND_GRAD[name] = jax.jit(jax.value_and_grad(FILTERS[name]()))
    return _VALUE_AND_GRAD[name]


@pytest.mark.parametrize("name", list(FILTERS))
def test_grad_through_run_matches_finite_differences(name):
    """``jax.grad`` of a scalar of the final state with respect to the prior scale, through the
    whole ``lax.scan`` (reverse mode), equals central differences."""
    value_and_grad = _value_and_grad(name)
    X, y = _data(name, jnp.float64)
    s = 2.0
    g = value_and_grad(np.float64(s), X, y)[1]
    loss = lambda p: jnp.atleast_1d(value_and_grad(np.float64(p[0]), X, y)[0])  # noqa: E731
    fd = central_differences(loss, [s], rel_step=5e-6).item()  # h = 1e-5
    assert abs(float(g) - fd) <= 1e-6 * abs(fd)


@pytest.mark.parametrize("name", ["rvga_implicit", "lrvga_implicit"])
def test_grad_through_run_in_float32(name):
    """The same gradients in float32 agree with float64 to float32 accuracy."""
    grad = lambda s, X, y: _value_and_grad(name)(s, X, y)[1]  # noqa: E731
    g64 = float(grad(np.float64(2.0), *_data(name, jnp.float64)))
    g32 = grad(jnp.float32(2.0), *_data(name, jnp.float32))
    assert g32.dtype == jnp.float32
    assert abs(float(g32) - g64) <= 1e-3 * abs(g64)
