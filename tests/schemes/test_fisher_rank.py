"""``fisher_rank``: the leading directions of a vector output's Fisher alone (:func:`jaxrvga.schemes.linearise`).

* ``C^T C`` with the r leading eigen-rows of each observation's K x K Fisher equals ``J^T Q_r L_r Q_r^T J``
  computed from the eigen-decomposition by hand, and never exceeds the full GGN (Loewner order);
* ``fisher_rank = K - 1`` is exact for the categorical family (``F 1 = 0``): the filters of all
  three beliefs equal those without it (float64);
* the gradient is unchanged; bad values and families without a K x K Fisher are refused.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from conftest import outer
from jaxrvga import schemes

K = 4


def _network(d_in=3, hidden=5, seed=0):
    rng = np.random.default_rng(seed)
    theta = jnp.asarray(rng.normal(size=d_in * hidden + hidden * K) / 2.0)

    def h(theta, x):
        A = theta[:d_in * hidden].reshape(d_in, hidden)
        return jnp.tanh(x @ A) @ theta[d_in * hidden:].reshape(hidden, K)

    return theta, h


def _data(m=None, seed=1):
    rng = np.random.default_rng(seed)
    shape = (3,) if m is None else (m, 3)
    return jnp.asarray(rng.normal(size=shape)), jnp.asarray(rng.integers(0, K, size=shape[:-1]))


@pytest.mark.parametrize("jitter", [0.0, 0.1])
@pytest.mark.parametrize("m", [None, 3])
@pytest.mark.parametrize("r", [1, 2])
def test_truncated_curvature_is_the_leading_eigen_part(jitter, m, r):
    """One image and a minibatch of 3: ``C^T C`` equals the sum over observations of ``J_i^T Q_r
    diag(s lam)_r Q_r^T J_i`` (eigen-decomposition of ``F_i`` by numpy), lies below the full
    curvature, and the gradient equals the full one."""
    theta, h = _network()
    base = jr.models.nonlinear(h, jr.models.categorical(K))
    model = base if m is None else jr.models.minibatch(base)
    x, y = _data(m)
    C, g = schemes.linearise(model, theta, x, y, jitter, fisher_rank=r)
    C_full, g_full = schemes.linearise(model, theta, x, y, jitter)
    assert C.shape == (r * (1 if m is None else m), theta.shape[0])
    np.testing.assert_allclose(g, g_full, rtol=0, atol=1e-13)
    expect = np.zeros((theta.shape[0],) * 2)
    for xi in (x[None] if m is None else x):
        J = np.asarray(jax.jacfwd(h)(theta, xi))
        p = np.asarray(jax.nn.softmax(h(theta, xi)))
        lam, Q = np.linalg.eigh(np.diag(p) - np.outer(p, p))
        lam = np.maximum(lam, 0.0)
        s = lam * (lam / (lam + jitter) if jitter else 1.0)
        keep = Q[:, -r:] * s[-r:]
        expect += J.T @ keep @ Q[:, -r:].T @ J
    np.testing.assert_allclose(C.T @ C, expect, rtol=0, atol=1e-12)
    gap = np.linalg.eigvalsh(np.asarray(C_full.T @ C_full - C.T @ C))
    assert gap.min() > -1e-12


@pytest.mark.parametrize("scheme", ["moment_ekf", "ekf"])
@pytest.mark.parametrize("belief", ["dense", "lowrank", "diagonal"])
def test_all_but_the_null_direction_is_exact(belief, scheme):
    """Five steps on minibatches of 3 with K - 1 rows per image equal those with all K rows to 1e-10:
    the categorical Fisher's null direction holds no curvature. Both schemes keep K - 1 rows by
    default (``Family.null_directions``), all K with ``fisher_rank=K``."""
    theta, h = _network()
    model = jr.models.minibatch(jr.models.nonlinear(h, jr.models.categorical(K)))
    rng = np.random.default_rng(2)
    xs = jnp.asarray(rng.normal(size=(5, 3, 3)))
    ys = jnp.asarray(rng.integers(0, K, size=(5, 3)))
    d = theta.shape[0]

    def start(**opt):
        opt["scheme"] = scheme
        if belief == "dense":
            flt = jr.rvga(model, **opt)
            return flt, flt.init(theta, 0.5 * jnp.eye(d))
        if belief == "lowrank":
            flt = jr.lrvga(model, rank=4, **opt)
            return flt, flt.init(theta, jnp.zeros((d, 4)), jnp.full(d, 2.0))
        flt = jr.diag_rvga(model, **opt)
        return flt, flt.init(theta, jnp.full(d, 0.5))

    (fa, sa), (fb, sb) = start(fisher_rank=K), start()
    # both scans in one compiled program (an unjitted scan compiles one program per call)
    a, b = jax.jit(lambda sa, sb: (jr.scan(fa, sa, xs, ys)[0], jr.scan(fb, sb, xs, ys)[0]))(sa, sb)
    np.testing.assert_allclose(b.mean, a.mean, rtol=0, atol=1e-10)
    spread = {"dense": lambda s: (s.cov,), "lowrank": lambda s: (outer(s.W), s.psi), "diagonal": lambda s: (s.psi,)}
    for u, v in zip(spread[belief](a), spread[belief](b)):
        np.testing.assert_allclose(v, u, rtol=0, atol=1e-10)
    assert bool(jnp.all(b.info.converged))


def test_one_direction_runs_in_float32_and_keeps_a_wider_belief():
    """float32, rank 1 of the Fisher: a finite filter whose predictive variances are no smaller than
    those of the full curvature from the same state (less curvature: a wider belief)."""
    theta, h = _network()
    model = jr.models.nonlinear(h, jr.models.categorical(K))
    rng = np.random.default_rng(3)
    xs = jnp.asarray(rng.normal(size=(20, 3)), jnp.float32)
    ys = jnp.asarray(rng.integers(0, K, size=20))
    d = theta.shape[0]
    flt = jr.diag_rvga(model, fisher_rank=1)
    state = flt.init(theta.astype(jnp.float32), jnp.full(d, 0.5, jnp.float32))
    full = jr.diag_rvga(model)
    # one compiled program: the run, and the first step with rank 1 and with the full curvature
    out, step_r, step_full = jax.jit(lambda state: (jr.scan(flt, state, xs, ys)[0], flt.update(state, xs[0], ys[0]),
                                                    full.update(state, xs[0], ys[0])))(state)
    assert out.mean.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(out.mean)))
    assert bool(jnp.all(out.info.converged))
    assert bool(jnp.all(step_r.psi <= step_full.psi * (1 + 1e-5)))  # precisions
    assert bool(jnp.any(step_r.psi < step_full.psi * (1 - 1e-3)))  # and some curvature was left out


@pytest.mark.parametrize("m", [None, 3])
def test_moment_root_keeps_the_rows_with_curvature(m):
    """The root of a categorical output has K - 1 rows per observation (the family's
    ``null_directions = 1``), for the moment-matched and the plain EKF, K with ``fisher_rank=K``, and
    the empirical Fisher one."""
    theta, h = _network()
    base = jr.models.nonlinear(h, jr.models.categorical(K))
    model = base if m is None else jr.models.minibatch(base)
    x, y = _data(m)
    n = 1 if m is None else m
    assert base.family.null_directions == 1 and jr.models.logistic().family.null_directions == 0
    assert schemes.linearise(model, theta, x, y, 0.1)[0].shape[0] == (K - 1) * n
    assert schemes.linearise(model, theta, x, y, 0.1, fisher_rank=K)[0].shape[0] == K * n
    assert schemes.linearise(model, theta, x, y)[0].shape[0] == (K - 1) * n
    assert schemes.linearise(model, theta, x, y, fisher_rank=K)[0].shape[0] == K * n
    assert schemes.linearise(model, theta, x, y, 0.1, empirical=True)[0].shape[0] == n


def test_refused():
    """Bad values, the empirical curvature, a family without a K x K Fisher, more rows than outputs,
    and a family's bad ``null_directions``."""
    theta, h = _network()
    with pytest.raises(ValueError, match="fisher_rank must be a positive integer"):
        jr.schemes.ekf(fisher_rank=0)
    with pytest.raises(ValueError, match="fisher_rank must be a positive integer"):
        jr.schemes.moment_ekf(fisher_rank=1.5)
    with pytest.raises(ValueError, match="empirical"):
        jr.schemes.ekf(curvature="empirical", fisher_rank=1)
    logistic = jr.lrvga(jr.models.logistic(), rank=1, scheme="ekf", fisher_rank=1)
    state = logistic.init(jnp.zeros(3), jnp.zeros((3, 1)), jnp.ones(3))
    with pytest.raises(ValueError, match="no K x K Fisher"):
        logistic.update(state, jnp.ones(3), 1.0)
    wide = jr.diag_rvga(jr.models.nonlinear(h, jr.models.categorical(K)), fisher_rank=K + 1)
    with pytest.raises(ValueError, match="exceeds the 4 outputs"):
        wide.update(wide.init(theta, jnp.full(theta.shape[0], 0.5)), *_data())
    family = jr.models.categorical(3)
    with pytest.raises(ValueError, match="null_directions"):
        jr.models.Family(*family[:-2], False, 1)   # an elementwise family has none
    with pytest.raises(ValueError, match="null_directions"):
        jr.models.Family(*family[:-1], -1)


def test_kept_fraction_of_the_benchmark_grows_with_the_rank():
    """benchmarks/fisher_rank_error.py: the kept part of each image's curvature trace lies in (0, 1] and
    does not decrease with r; here K = 4, so r = 3 = K - 1 keeps all of it."""
    from benchmarks import fisher_rank_error as fre

    theta, h = _network()
    model = jr.models.nonlinear(h, jr.models.categorical(K))
    rng = np.random.default_rng(5)
    x, y = jnp.asarray(rng.normal(size=(6, 3))), jnp.asarray(rng.integers(0, K, size=6))
    k = np.asarray(fre.kept_fraction(model)(theta, x, y))
    assert k.shape == (6, len(fre.RANKS)) and fre.RANKS == (1, 2, 3)
    assert np.all(k > 0) and np.all(np.diff(k, axis=1) >= -1e-12)
    np.testing.assert_allclose(k[:, -1], 1.0, rtol=1e-10)
