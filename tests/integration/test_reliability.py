"""Reliability: numerical safety on long float32 streams, defined behaviour of degenerate
updates, implicit-solver diagnostics, determinism, and checkpoint / resume with real states.

* The key test runs 1e5 float32 steps of every logistic filter on the hardest setting of the
  R-VGA paper (sigma0 = 100, i.e. P0 = 1e4 I; ill-conditioned inputs c = 2; d = 30): means and
  covariances stay finite, exactly symmetric and positive definite; for L-RVGA psi > 0 and W
  finite.
* Full filters skip an update that would destroy positive definiteness (or is not finite) and
  flag it with ``info.converged = False`` (:func:`jaxrvga.guard._guarded`).
* L-RVGA keeps ``psi`` above the relative floor of Algorithm 1 (:mod:`jaxrvga.kernels.factor_analysis`).
* Same inputs and key give bit-identical results; ``jr.io.save`` / ``load`` round-trip every
  library state exactly, and a stream processed in two halves with a save / load between gives
  the one-run state to rounding (the two scans are different compiled programs).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import expit

import jaxrvga as jr
from jaxrvga.baselines import fa_filters
from jaxrvga.kernels import factor_analysis as fa
from jaxrvga.kernels import lowrank
from jaxrvga.baselines import online_em as oem
from jaxrvga.kernels.root_solvers import coarse_box, solve_logistic
from jaxrvga.models import Family
from jaxrvga.guard import _guarded
from jaxrvga.schemes import Increment, absorb

from conftest import (FULL_FILTERS, LOGISTIC, LOGISTIC_FILTERS, LOWRANK_SCHEMES, lowrank_filter, run_optimised,
                      with_fa_step)

lrvga = jr.lrvga

EPS32 = float(np.finfo(np.float32).eps)


def assert_bits_equal(a, b):
    """Same tree structure, dtypes, shapes and bits (typed PRNG keys by their key data)."""
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for u, v in zip(la, lb):
        if isinstance(u, jax.Array) and jnp.issubdtype(u.dtype, jax.dtypes.prng_key):
            assert v.dtype == u.dtype
            u, v = jax.random.key_data(u), jax.random.key_data(v)
        if isinstance(u, (jax.Array, np.ndarray, np.generic)):
            assert np.asarray(u).dtype == np.asarray(v).dtype and np.shape(u) == np.shape(v)
            np.testing.assert_array_equal(np.atleast_1d(np.asarray(u)).view(np.uint8),
                                          np.atleast_1d(np.asarray(v)).view(np.uint8))
        else:
            assert u == v


def assert_trees_close(a, b):
    """Same structure and dtypes; integer, bool and key leaves equal, floating leaves equal to
    rounding (relative 1e-12 in float64, 1e-5 in float32, of each leaf's largest entry): for
    results of differently compiled programs (another scan length, batch shape or jit)."""
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for u, v in zip(la, lb):
        if isinstance(u, jax.Array) and jnp.issubdtype(u.dtype, jax.dtypes.prng_key):
            u, v = jax.random.key_data(u), jax.random.key_data(v)
        if not isinstance(u, (jax.Array, np.ndarray, np.generic)):
            assert u == v
            continue
        u, v = np.asarray(u), np.asarray(v)
        assert u.dtype == v.dtype and u.shape == v.shape
        if jnp.issubdtype(u.dtype, jnp.floating):
            rtol = 1e-12 if u.dtype == np.float64 else 1e-5
            u, v = u.astype(np.float64), v.astype(np.float64)
            scale = float(np.max(np.abs(v), initial=0.0))
            np.testing.assert_allclose(u, v, rtol=rtol, atol=rtol * scale)
        else:
            np.testing.assert_array_equal(u, v)


def assert_gaussian_healthy(mean, cov):
    mean, cov = np.asarray(mean), np.asarray(cov)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))
    assert np.array_equal(cov, cov.T), "covariance lost exact symmetry"
    assert np.linalg.eigvalsh(cov.astype(np.float64))[0] > 0, "covariance is not positive definite"
    assert np.all(np.isfinite(np.asarray(jnp.linalg.cholesky(jnp.asarray(cov))))), \
        f"no {cov.dtype} Cholesky factor"


def assert_lowrank_healthy(state):
    for leaf in (state.mean, state.W, state.psi):
        assert bool(jnp.all(jnp.isfinite(leaf)))
    assert bool(jnp.all(state.psi > 0))
    # The p x p matrix M = I + W^T Psi^-1 W of every Woodbury solve factorises in the state's dtype.
    assert bool(jnp.all(jnp.isfinite(lowrank.factorize(state.W, state.psi).chol)))


# ============================================================================ 1e5 float32 steps

N_LONG, D_LONG, RANK_LONG = 100_000, 30, 10
SIGMA0 = 100.0  # P0 = sigma0^2 I = 1e4 I


@functools.lru_cache(maxsize=1)
def hardest_stream():
    """[RVGA] hardest setting: two classes at separation s = 2, c = 2, d = 30 (1e5 samples)."""
    data = jr.baselines.data.logistic_data(2.0, N_LONG, d=D_LONG, c=2, seed=10)
    return data.X.astype(np.float32), data.y.astype(np.float32)




@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOGISTIC_FILTERS))
def test_full_filters_1e5_float32_steps_stay_finite_symmetric_pd(name):
    X, y = hardest_stream()
    flt = LOGISTIC_FILTERS[name]()
    init = flt.init(jnp.zeros(D_LONG, jnp.float32), SIGMA0**2 * jnp.eye(D_LONG, dtype=jnp.float32))
    state, info = run_optimised(flt, init, X, y, jr.trace_info)
    assert state.mean.dtype == jnp.float32 and state.cov.dtype == jnp.float32
    assert int(state.step) == N_LONG
    assert_gaussian_healthy(state.mean, state.cov)
    # No update was skipped (a skip sets converged = False) and every implicit solve met its
    # float32 tolerance max(1e-12, 64 eps).
    assert info.converged.shape == (N_LONG,)
    assert bool(jnp.all(info.converged)), f"{int(jnp.sum(~info.converged))} steps flagged"
    assert float(jnp.max(info.residual)) <= 64 * EPS32


@pytest.mark.slow
@pytest.mark.parametrize("scheme,published", [(s, False) for s in sorted(LOWRANK_SCHEMES)] + [("explicit", True)])
def test_lrvga_1e5_float32_steps_keep_psi_positive_and_W_finite(scheme, published):
    X, y = hardest_stream()
    flt = lowrank_filter(scheme, RANK_LONG, num_samples=4, **({"published": True} if published else {}))
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), D_LONG, RANK_LONG, SIGMA0**2,
                                    dtype=jnp.float32)
    init = flt.init(jnp.zeros(D_LONG, jnp.float32), W0, psi0, jax.random.PRNGKey(1))
    state, info = run_optimised(flt, init, X, y, jr.trace_info)
    assert state.W.dtype == jnp.float32 and state.psi.dtype == jnp.float32
    assert int(state.step) == N_LONG
    assert_lowrank_healthy(state)
    flagged = np.asarray(~info.converged)
    if published:
        assert not flagged.any()  # the published projection keeps psi large: never singular here
    else:
        # The default keeps more curvature in W, so psi gets small: where W W^T + diag(psi) is no
        # longer factorisable in float32 (M = I + W^T Psi^-1 W with cond > 1/eps), the step is
        # skipped and flagged rather than applied (0.2 % of the steps for the explicit scheme).
        assert flagged.mean() <= 0.005, f"{flagged.sum()} steps flagged"
    if scheme == "sampled":  # flagged exactly where the Monte-Carlo iteration moved the mean > tol
        np.testing.assert_array_equal(flagged, np.asarray(info.residual) > 1e-2)
    else:
        assert float(jnp.max(info.residual)) <= 64 * EPS32


@pytest.mark.slow
def test_kalman_1e5_float32_steps_stay_symmetric_pd():
    data = jr.baselines.data.linear_data(1.0, N_LONG, D_LONG, 2, seed=10)
    flt = jr.kalman(1.0)
    init = flt.init(jnp.zeros(D_LONG, jnp.float32), SIGMA0**2 * jnp.eye(D_LONG, dtype=jnp.float32))
    state, _ = run_optimised(flt, init, data.X.astype(np.float32), data.y.astype(np.float32))
    assert state.cov.dtype == jnp.float32
    assert_gaussian_healthy(state.mean, state.cov)


# ============================================================================ degenerate updates


def test_dense_step_skips_and_flags_an_update_that_breaks_pd():
    """P^{-1} + c x x^T is PD iff 1 + c nu0 > 0; otherwise (or when the step is not finite) the belief is kept."""
    belief = jr.beliefs.Dense()
    st = belief.init(jnp.arange(1.0, 4.0), jnp.diag(jnp.array([1.0, 2.0, 3.0])))
    x = jnp.array([1.0, -1.0, 0.5])
    v = st.cov @ x
    nu0 = x @ v

    def step(c, coef):
        new, ok = absorb(belief, st, Increment(x[:, None], jnp.array([c]), jnp.array([coef])))
        return _guarded(belief, st, new, ok, st.info)

    for c, coef in ((-1.5 / nu0, 0.3), (0.1, jnp.nan), (jnp.inf, 0.3), (0.1, jnp.inf)):
        out = step(c, coef)
        np.testing.assert_array_equal(out.mean, st.mean)
        np.testing.assert_array_equal(out.cov, st.cov)
        assert int(out.step) == 1 and not bool(out.info.converged)
    c, coef = 0.9 / nu0, 0.3
    out = step(c, coef)
    s = c / (1 + c * nu0)
    np.testing.assert_allclose(out.cov, st.cov - s * jnp.outer(v, v), rtol=1e-15)
    np.testing.assert_allclose(out.mean, st.mean + coef * v / (1 + c * nu0), rtol=1e-14)
    np.testing.assert_allclose(x @ out.cov @ x, nu0 / (1 + c * nu0), rtol=1e-13)
    assert bool(out.info.converged) and int(out.step) == 1
    assert_gaussian_healthy(out.mean, out.cov)


def bimodal_family(a=3.0):
    """A non-log-concave likelihood, p(y | eta) ~ N(y - eta; a, 1) + N(y - eta; -a, 1): its
    expected curvature E[l''] is positive near the middle, so an explicit step can remove more
    precision than there is."""
    def log_prob(y, eta):
        r = y - eta
        return jnp.logaddexp(-0.5 * (r - a) ** 2, -0.5 * (r + a) ** 2)

    return Family("bimodal", log_prob, lambda e: e, jnp.ones_like, jnp.ones_like, lambda n, y: y)


@pytest.mark.parametrize("make", [lambda m: jr.rvga(m, "explicit"), lambda m: jr.mirror_prox(m)],
                         ids=["rvga_explicit", "mirror_prox"])
def test_non_log_concave_update_is_skipped_and_flagged(make):
    model = jr.models.glm(bimodal_family())
    flt = make(model)
    # At q = N(0, 1) along x = e1 with y = 0: E[l''] nu0 = 1.30 > 1, the new precision would be < 0.
    _, h = model.glm_moments(0.0, 1.0, 0.0)
    assert float(h) > 1.0
    st = flt.init(jnp.zeros(2), jnp.eye(2))
    # One compiled update (eagerly, each of its operations compiled on its own: 10 s).
    out = jax.jit(flt.update)(st, jnp.array([1.0, 0.0]), 0.0)
    np.testing.assert_array_equal(out.mean, st.mean)
    np.testing.assert_array_equal(out.cov, st.cov)
    assert int(out.step) == 1 and not bool(out.info.converged)
    # On a stream: flagged steps leave the belief unchanged; every covariance stays symmetric PD.
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 2))
    y = rng.normal(size=40)
    trace_fn = lambda s, x, y: (s.info.converged, s.mean, s.cov)  # noqa: E731
    _, (ok, means, covs) = jr.run(flt, flt.init(jnp.zeros(2), 4.0 * jnp.eye(2)), X, y, trace_fn)
    ok, means, covs = np.asarray(ok), np.asarray(means), np.asarray(covs)  # indexed on the host
    assert int(np.sum(~ok)) > 0 and int(np.sum(ok)) > 0
    for t in range(1, 40):
        assert_gaussian_healthy(means[t], covs[t])
        if not bool(ok[t]):
            np.testing.assert_array_equal(covs[t], covs[t - 1])
            np.testing.assert_array_equal(means[t], means[t - 1])


@pytest.mark.parametrize("name", sorted(FULL_FILTERS))
def test_update_whose_quadratic_form_overflows_is_skipped_and_flagged(name):
    """float32, P0 = 1e4 I and a finite x with entries 1e18: nu0 = x^T P x = 3e40 overflows.

    The guard of every filter promises that an update that is not finite (overflow) is skipped
    and flagged; the belief must stay the finite prior, not become NaN."""
    flt = FULL_FILTERS[name]()
    st = flt.init(jnp.full(3, 0.1, jnp.float32), 1e4 * jnp.eye(3, dtype=jnp.float32))
    out = jax.jit(flt.update)(st, jnp.full(3, 1e18, jnp.float32), jnp.float32(1.0))
    np.testing.assert_array_equal(out.mean, st.mean)
    np.testing.assert_array_equal(out.cov, st.cov)
    assert int(out.step) == 1 and not bool(out.info.converged)


# ============================================================================ implicit solver


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_implicit_solver_stays_in_its_bracket_and_reports(dtype):
    """The root of eqs. (69)-(70) lies in the coarse box (71)-(72), and the reported residual is
    the dimensionless residual of the returned point, below max(1e-12, 64 eps)."""
    rng = np.random.default_rng(11)
    n = 3000
    alpha0 = np.concatenate([rng.uniform(-1e3, 1e3, n // 2), rng.normal(0.0, 5.0, n - n // 2)])
    nu0 = 10.0 ** rng.uniform(-6, 6, n)
    y = rng.integers(0, 2, n).astype(np.float64)
    args = [jnp.asarray(a, dtype) for a in (alpha0, nu0, y)]
    alpha, nu, info = jax.jit(jax.vmap(solve_logistic))(*args)
    assert alpha.dtype == dtype and info.residual.dtype == dtype
    tol = max(1e-12, 64 * float(jnp.finfo(dtype).eps))
    assert bool(jnp.all(info.converged)) and float(jnp.max(info.residual)) <= tol
    # Independent float64 residual of the returned (alpha, nu).
    a0, n0, a, v = (np.asarray(t, np.float64) for t in (args[0], args[1], alpha, nu))
    beta = np.sqrt(8.0 / np.pi)
    k = beta / np.sqrt(v + beta**2)
    sig, sig_neg = expit(k * a), expit(-k * a)
    f = a + n0 * sig - a0 - n0 * y
    g = v - n0 / (1.0 + n0 * k * sig * sig_neg)
    res = np.maximum(np.abs(f) / (1.0 + np.abs(a0) + n0), np.abs(g) / n0)
    assert res.max() <= 2 * tol
    a_lo, a_hi, n_lo, n_hi = (np.asarray(b, np.float64) for b in coarse_box(*args))
    # Rounding slack: a few ulps of alpha; nu is iterated as log nu, so exp(log nu) carries
    # |log nu| ulps of relative error.
    eps = float(jnp.finfo(dtype).eps)
    assert np.all(a >= a_lo - 4 * eps * (1 + np.abs(a_lo))) and np.all(a <= a_hi + 4 * eps * (1 + np.abs(a_hi)))
    rel_nu = 4 * eps * (1 + np.abs(np.log(n0)))
    assert np.all(v >= n_lo * (1 - rel_nu)) and np.all(v <= n_hi * (1 + rel_nu))


# ============================================================================ psi floor of L-RVGA


def test_lrvga_psi_floor_is_relative_to_the_target_diagonal():
    """Algorithm 1 keeps psi_i >= psi_floor * mean(Diag(S)), S = W W^T + Psi + X X^T the target."""
    d, p, nv, floor = 6, 2, 0.5, 0.3
    rng = np.random.default_rng(4)
    W0 = jnp.asarray(0.3 * rng.normal(size=(d, p)))
    psi0 = jnp.asarray([0.05, 0.1, 1.0, 2.0, 4.0, 8.0])
    x = jnp.asarray(rng.normal(size=d))
    flt = lrvga(jr.models.linear_gaussian(nv), rank=p, psi_floor=floor)
    # Compiled updates: one program each (eagerly, each operation of the update compiled on its own).
    out = jax.jit(flt.update)(flt.init(jnp.zeros(d), W0, psi0), x, 1.0)
    diagS = jnp.sum(W0**2, axis=1) + psi0 + x**2 / nv
    bound = floor * float(jnp.mean(diagS))
    assert float(jnp.min(out.psi)) >= bound * (1 - 1e-12)
    assert int(jnp.sum(jnp.isclose(out.psi, bound, rtol=1e-12))) >= 1  # the floor binds here
    unfloored = jax.jit(lrvga(jr.models.linear_gaussian(nv), rank=p).update)(flt.init(jnp.zeros(d), W0, psi0), x, 1.0)
    assert float(jnp.min(unfloored.psi)) < bound


def test_lrvga_float32_psi_floor_binds_when_the_target_has_no_uniquenesses():
    """Target W0 W0^T + x x^T + 1e-30 I with x in span(W0): exactly representable with p factors
    and psi ~ 0, so in float32 the Schur complement Diag(S) - rowdot(W, Q) is rounding noise of
    size eps Diag(S), of either sign. The default floor max(1e-12, eps) * mean(Diag(S)) binds and
    keeps psi positive, W finite and M = I + W^T Psi^-1 W factorisable."""
    d, p = 6, 3
    rng = np.random.default_rng(5)
    W0 = jnp.asarray(rng.normal(size=(d, p)), jnp.float32)
    x = W0 @ jnp.asarray(rng.normal(size=p), jnp.float32)
    flt = lrvga(jr.models.linear_gaussian(1.0), rank=p, published=True)  # Algorithm 1's floor
    # Compiled updates: one program each (eagerly, each operation of the update compiled on its own).
    out = jax.jit(flt.update)(flt.init(jnp.zeros(d, jnp.float32), W0, jnp.full(d, 1e-30, jnp.float32)), x,
                              jnp.float32(0.5))
    diagS = np.sum(np.asarray(W0, np.float64) ** 2, axis=1) + 1e-30 + np.asarray(x, np.float64) ** 2
    floor = EPS32 * diagS.mean()
    assert out.psi.dtype == jnp.float32
    assert float(jnp.min(out.psi)) >= floor * (1 - 1e-5)
    assert bool(jnp.any(jnp.isclose(out.psi, floor, rtol=1e-5)))  # the floor is what keeps psi > 0
    assert bool(jnp.all(jnp.isfinite(out.W)))
    assert bool(jnp.all(jnp.isfinite(lowrank.factorize(out.W, out.psi).chol)))
    # The default's mean step solves with W W^T + x x^T + 1e-30 I itself, which float32 cannot
    # factorise: the step is skipped and flagged, the (finite) belief kept.
    default = lrvga(jr.models.linear_gaussian(1.0), rank=p)
    start = default.init(jnp.zeros(d, jnp.float32), W0, jnp.full(d, 1e-30, jnp.float32))
    out = jax.jit(default.update)(start, x, jnp.float32(0.5))
    assert not bool(out.info.converged) and bool(jnp.all(jnp.isfinite(out.W)))
    np.testing.assert_array_equal(out.psi, start.psi)


# ============================================================================ real states: zoo


def _logistic_stream(d, T, seed, dtype):
    rng = np.random.default_rng(seed)
    X = 2.0 * rng.normal(size=(T, d))
    theta = rng.normal(size=d)
    y = (rng.random(T) < 1.0 / (1.0 + np.exp(-X @ theta))).astype(float)
    return X.astype(dtype), y.astype(dtype)


def _gmm_stream(T, seed):
    rng = np.random.default_rng(seed)
    z = rng.random(T) < 0.3
    return np.where(z, rng.normal(-2.0, 0.5, T), rng.normal(1.5, 1.0, T))


def _gmm_params():
    return oem.GMMParams(jnp.array([0.5, 0.5]), jnp.array([-1.0, 1.0]), jnp.array([1.0, 1.0]))


def zoo(key_seed=3):
    """name -> (filter, initial state, xs, ys): every kind of library state, built from scratch."""
    d, p, T = 4, 2, 24
    out = {}
    X32, y32 = _logistic_stream(d, T, 0, np.float32)
    X64, y64 = _logistic_stream(d, T, 0, np.float64)
    flt = jr.rvga(LOGISTIC, "implicit")
    out["rvga_implicit_f32"] = (flt, flt.init(jnp.zeros(d, np.float32), 10.0 * jnp.eye(d, dtype=np.float32)),
                                X32, y32)
    flt = jr.ekf(LOGISTIC)
    out["ekf_f64"] = (flt, flt.init(jnp.zeros(d), 10.0 * jnp.eye(d)), X64, y64)
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), d, p, 10.0)
    flt = lrvga(LOGISTIC, rank=p, scheme="implicit")
    out["lrvga_implicit_f64"] = (flt, flt.init(jnp.zeros(d), W0, psi0), X64, y64)
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), d, p, 10.0, dtype=jnp.float32)
    flt = lrvga(LOGISTIC, rank=p, scheme="sampled", num_samples=3)
    out["lrvga_sampled_logistic_key_f32"] = (
        flt, flt.init(jnp.zeros(d, np.float32), W0, psi0, jax.random.key(key_seed)), X32, y32)
    h = lambda theta, x: jnp.tanh(x @ theta[:d]) * (1.0 + theta[d] ** 2)  # noqa: E731
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(1), d + 1, p, 1.0)
    flt = lrvga(jr.models.nonlinear(h), rank=p, scheme="sampled", num_samples=4)
    out["lrvga_nonlinear_sampled_key"] = (
        flt, flt.init(jnp.zeros(d + 1), W0, psi0, jax.random.PRNGKey(key_seed)), X64, y64)
    flt = jr.rvga(jr.models.nonlinear(lambda th, x: jnp.tanh(x @ th)), "sampled", num_samples=4)
    out["rvga_nonlinear_mc_key"] = (flt, flt.init(jnp.zeros(d), jnp.eye(d), key=jax.random.key(key_seed)),
                                    X64, y64)
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(2), d, p, 1.0)
    for name, flt in (("fa_recursive_em_covariance", fa_filters.recursive_em(2, "covariance")),
                      ("fa_recursive_em_precision", fa_filters.recursive_em(1, "precision", process_noise=0.01)),
                      ("fa_online_em", fa_filters.online_fa_em(num_steps=T))):
        out[name] = (flt, flt.init(W0, psi0), X64, None)
    g = _gmm_stream(T, 2)
    for name, flt in (("gmm_cappe_moulines", oem.cappe_moulines(0.6, burn_in=5, average_from=10)),
                      ("gmm_sato", oem.sato(0.95, burn_in=5)),
                      ("gmm_titterington", oem.titterington(20.0)),
                      ("gmm_incremental_decay", oem.incremental_em_decay(0.9, burn_in=5))):
        out[name] = (flt, flt.init(_gmm_params()), g, None)
    flt = oem.incremental_em()
    out["gmm_incremental"] = (flt, flt.init(_gmm_params(), g), (np.arange(T), g), None)
    return out


@functools.lru_cache(maxsize=1)
def shared_zoo():
    """One zoo for the module, so that ``jr.run``'s compilation cache is shared between tests."""
    return zoo()


def _trace_fn(state):
    return jr.trace_info if hasattr(state, "info") else None


@functools.lru_cache(maxsize=None)
def full_run(name):
    flt, st, xs, ys = shared_zoo()[name]
    return jr.run(flt, st, xs, ys, _trace_fn(st))


ZOO_NAMES = sorted(zoo())


def _split(a, lo, hi):
    return None if a is None else jax.tree_util.tree_map(lambda u: u[lo:hi], a)


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_save_load_real_state_roundtrip_is_exact(tmp_path, name):
    st, _ = full_run(name)  # a state that has seen data (solver info, keys, statistics)
    path = tmp_path / f"{name}.npz"
    jr.io.save(path, st)
    back = jr.io.load(path)
    assert type(back) is type(st)
    assert_bits_equal(back, st)
    for u, v in zip(jax.tree_util.tree_leaves(st), jax.tree_util.tree_leaves(back)):
        assert getattr(u, "weak_type", False) == getattr(v, "weak_type", False)


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_two_halves_with_save_load_equal_one_run(tmp_path, name):
    flt, st, xs, ys = shared_zoo()[name]
    T = jax.tree_util.tree_leaves(xs)[0].shape[0]
    h = T // 2
    trace_fn = _trace_fn(st)
    first, _ = jr.run(flt, st, _split(xs, 0, h), _split(ys, 0, h), trace_fn)
    jr.io.save(tmp_path / "half.npz", first)
    resumed, _ = jr.run(flt, jr.io.load(tmp_path / "half.npz"), _split(xs, h, T), _split(ys, h, T), trace_fn)
    # the halves and the whole stream are scans of different lengths (two compiled programs)
    assert_trees_close(resumed, full_run(name)[0])


@pytest.mark.parametrize("name", ["lrvga_sampled_logistic_key_f32", "rvga_nonlinear_mc_key"])
def test_same_inputs_and_key_are_bit_identical_and_the_key_matters(name):
    """A rebuilt filter (fresh closures, fresh compilation) reproduces a sampling run bit for bit;
    another key gives another result."""
    flt, st, xs, ys = zoo(3)[name]
    assert_bits_equal(jr.run(flt, st, xs, ys, _trace_fn(st)), full_run(name))
    flt_shared = shared_zoo()[name][0]
    st4 = zoo(4)[name][1]
    other, _ = jr.run(flt_shared, st4, xs, ys, _trace_fn(st4))
    assert not np.array_equal(np.asarray(other.mean), np.asarray(full_run(name)[0].mean))


@pytest.mark.parametrize("name", ["rvga_implicit_f32", "lrvga_implicit_f64"])
def test_trace_info_records_every_implicit_solve(name):
    st, info = full_run(name)
    dtype = st.mean.dtype
    T = shared_zoo()[name][2].shape[0]
    tol = max(1e-12, 64 * float(jnp.finfo(dtype).eps))
    assert info.converged.shape == info.residual.shape == info.iterations.shape == (T,)
    assert info.residual.dtype == dtype
    assert bool(jnp.all(info.converged)) and float(jnp.max(info.residual)) <= tol
    assert bool(jnp.any(info.residual > 0))  # real residuals, not placeholders


def test_data_generators_are_deterministic():
    a = jr.baselines.data.logistic_data(2.0, 200, d=5, c=2, seed=10)
    b = jr.baselines.data.logistic_data(2.0, 200, d=5, c=2, seed=10)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)
    k = jax.random.PRNGKey(7)
    a = jr.baselines.data.logistic_data(2.0, 200, d=5, c=2, key=k)
    b = jr.baselines.data.logistic_data(2.0, 200, d=5, c=2, key=k)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)


@pytest.mark.parametrize("make", [lambda: jr.ekf(LOGISTIC), lambda: jr.rvga(LOGISTIC, "explicit"),
                                  lambda: jr.rvga(LOGISTIC, "implicit"), lambda: jr.qkf()],
                         ids=["ekf", "explicit", "implicit", "qkf"])
def test_float32_huge_prior_and_inputs_every_step_pd_or_flagged(make):
    """Prior variance 1e4 and inputs of size 1e3 in float32: a step would create variances far below
    the rounding of the stored covariance (condition number ~1e10 > 1/eps). Every step either keeps
    the covariance positive definite or is skipped and flagged."""
    rng = np.random.default_rng(0)
    d, T = 10, 50
    X = (1e3 * rng.normal(size=(T, d))).astype(np.float32)
    y = (rng.random(T) < 0.5).astype(np.float32)
    flt = make()
    state = flt.init(jnp.zeros(d, jnp.float32), 1e4 * jnp.eye(d, dtype=jnp.float32))
    _, (covs, converged) = jr.run(flt, state, X, y, trace_fn=lambda s, x, y: (s.cov, s.info.converged))
    smallest = np.array([np.linalg.eigvalsh(np.asarray(c, np.float64))[0] for c in covs])
    assert np.all((smallest > 0) | ~np.asarray(converged)), smallest
    assert np.all(np.isfinite(np.asarray(covs)))


# ============================================================================ issue 26: reliability 3

KALMAN_MINIBATCH = jr.kalman(1e-2)  # one filter object: its compiled runs are reused across tests


def _minibatch_stream(d, m, spread, scale, seed, T=6):
    """``T`` minibatches of ``m`` rows in ``d`` dims: one random direction per step plus ``spread``
    noise (nearly collinear rows for a small spread), times ``scale``; float32."""
    rng = np.random.default_rng(seed)
    X = scale * (rng.normal(size=(T, 1, d)) + spread * rng.normal(size=(T, m, d)))
    return X.astype(np.float32), rng.normal(size=(T, m)).astype(np.float32)


MINIBATCH_CASES = {  # d, m, spread, scale, prior, seed, T
    "woodbury_collinear": (6, 3, 1e-3, 100.0, 1e3, 1, 6),  # the setting: eigenvalue -23 before
    "information_form_collinear": (3, 7, 1.4593278e-5, 3.6461594, 6132.0165, 17, 4),  # -1.9e-5 before
    "woodbury_benign": (6, 3, 0.3, 1.0, 1.0, 0, 6),
    "information_form_benign": (4, 9, 0.3, 1.0, 1.0, 0, 6),
}


@pytest.mark.parametrize("case", MINIBATCH_CASES)
def test_dense_minibatch_steps_are_pd_or_flagged_float32(case):
    """Issue 26.1: float32 minibatches of nearly collinear rows scaled by 100 with prior 1e3 I
    (``jr.kalman(1e-2)``) gave a covariance with a negative eigenvalue reported converged. Every
    step of both multi-column branches (Woodbury, 1 < m <= d; information form, m > d) is now
    positive definite (float64 eigenvalues of the stored float32 matrix) or flagged; the benign
    streams are accepted at every step and agree with a float64 run."""
    d, m, spread, scale, prior, seed, T = MINIBATCH_CASES[case]
    X, y = _minibatch_stream(d, m, spread, scale, seed, T)
    state = KALMAN_MINIBATCH.init(jnp.zeros(d, jnp.float32), prior * jnp.eye(d, dtype=jnp.float32))
    final, (covs, converged) = jr.run(KALMAN_MINIBATCH, state, X, y,
                                      trace_fn=lambda s, x, y: (s.cov, s.info.converged))
    smallest = np.array([np.linalg.eigvalsh(np.asarray(c, np.float64))[0] for c in covs])
    converged = np.asarray(converged)
    assert np.all(np.isfinite(np.asarray(covs)))
    assert np.all((smallest > 0) | ~converged), (smallest, converged)
    if case.endswith("benign"):
        assert converged.all()
        state64 = KALMAN_MINIBATCH.init(jnp.zeros(d), prior * jnp.eye(d))
        final64, _ = jr.run(KALMAN_MINIBATCH, state64, X.astype(np.float64), y.astype(np.float64))
        np.testing.assert_allclose(final.cov, final64.cov, rtol=1e-2, atol=1e-3 * float(jnp.max(final64.cov)))


_GRAD_FILTERS = {  # name -> (filter, dense)
    "kalman": (jr.kalman(1.0), True),
    "implicit": (jr.rvga(LOGISTIC), True),
    "explicit": (jr.rvga(LOGISTIC, "explicit"), True),
    "ekf": (jr.ekf(LOGISTIC), True),
    "lrvga": (jr.lrvga(LOGISTIC, rank=2), False),
    # The buffer's path through the guard with the explicit scheme (the implicit solver under the
    # guard is the case above and "implicit"; with it this program compiled for 24 s).
    "lrvga_buffered": (jr.lrvga(LOGISTIC, rank=1, buffer=1, scheme="explicit"), False),
}


@pytest.mark.parametrize("name", _GRAD_FILTERS)
def test_grad_through_a_skipped_step_equals_finite_differences(name):
    """Issue 26.2: step 5 holds an inf in x, so it is skipped and flagged; ``jax.grad`` of a loss of
    the final state with respect to the prior scale was NaN (the discarded branch's inf reached the
    gradient as 0 * inf). The guard's double ``where`` (:func:`jaxrvga.guard._clean_data`) makes
    it equal central finite differences (float64)."""
    flt, dense = _GRAD_FILTERS[name]
    d, T = 3, 8
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(T, d)), (rng.random(T) < 0.5).astype(float)
    X[5, 1] = np.inf
    W0 = jnp.asarray(rng.normal(size=(d, flt.spec.belief.rank))) if not dense else None

    def loss(s):
        state = flt.init(jnp.zeros(d), s * jnp.eye(d)) if dense else flt.init(jnp.zeros(d), W0, jnp.ones(d) / s)
        out, converged = jr.scan(flt, state, X, y, lambda st, x, y: st.info.converged)
        return jnp.sum(out.mean ** 2) + jnp.sum(out.cov if dense else out.psi), converged

    # One compiled program gives the loss (for the finite differences) and its gradient.
    value_and_grad = jax.jit(jax.value_and_grad(loss, has_aux=True))
    (value, converged), grad = value_and_grad(2.0)
    assert np.isfinite(float(value)) and not bool(converged[5]) and bool(np.all(np.delete(converged, 5)))
    h = 1e-6
    fd = (value_and_grad(2.0 + h)[0][0] - value_and_grad(2.0 - h)[0][0]) / (2 * h)
    assert np.isfinite(float(grad))
    np.testing.assert_allclose(float(grad), float(fd), rtol=1e-6)


@pytest.mark.parametrize("bad", [np.inf, np.nan, -1.0, "0.1", [0.1, 0.2], 1j, True, np.ones(2)])
def test_process_noise_is_validated_at_construction(bad):
    """Issue 26.5: inf, a string, a vector (and NaN, negative, complex, bool) raise ValueError naming
    ``process_noise`` in both factories."""
    for make in (lambda: jr.kalman(1.0, process_noise=bad),
                 lambda: jr.lrvga(LOGISTIC, rank=1, process_noise=bad)):
        with pytest.raises(ValueError, match="process_noise"):
            make()


def test_prediction_step_is_guarded():
    """Issue 26.5: ``process_noise = 1e308`` (dense: the update, then the prediction overflow) and a traced
    ``-1`` under vmap (it gave cov = 0 with every step converged) are skipped and flagged with the
    state finite and unchanged; a vmapped valid member equals its solo run."""
    d, T = 3, 5
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(T, d)), rng.normal(size=T)
    init = jr.kalman(1.0).init(jnp.zeros(d), jnp.eye(d))
    flag = lambda s, x, y: s.info.converged  # noqa: E731
    out, converged = jr.run(jr.kalman(1.0, process_noise=1e308), init, X, y, trace_fn=flag)
    assert not np.any(converged) and int(out.step) == T
    assert np.all(np.isfinite(out.cov)) and np.all(np.isfinite(out.mean))

    def run(eta):
        return jr.scan(jr.kalman(1.0, process_noise=eta), init, X, y, flag)

    fleet, flags = jax.jit(jax.vmap(run))(jnp.array([-1.0, jnp.nan, 0.1]))
    assert not np.any(flags[:2]) and np.all(flags[2])
    np.testing.assert_array_equal(fleet.cov[0], init.cov)
    np.testing.assert_array_equal(fleet.cov[1], init.cov)
    solo, _ = jr.run(jr.kalman(1.0, process_noise=0.1), init, X, y)
    np.testing.assert_allclose(fleet.cov[2], solo.cov, rtol=1e-12)


def test_lowrank_prediction_keeps_psi_above_its_floor_float32():
    """Issue 26.5: repeated prediction of directions no data reach took float32 ``psi`` to exactly 0
    (every later step flagged). :meth:`~jaxrvga.beliefs.LowRank.predict` floors it at
    :func:`~jaxrvga.beliefs.psi_min` and recomputes the whitened Gram of the floored rows; a run with
    a huge process noise stays finite with psi at or above the floor."""
    from jaxrvga.beliefs import psi_min
    belief = jr.beliefs.LowRank(1)
    W = jnp.array([[1.0], [0.5], [0.0], [0.0]], jnp.float32)
    state = belief.init(jnp.zeros(4, jnp.float32), W, jnp.array([1.0, 1.0, 1e-30, 1e-10], jnp.float32))
    predict = jax.jit(lambda s: belief.predict(s, jr.dynamics.Dynamics(process_noise=jnp.float32(1.0))))
    for _ in range(200):
        state = predict(state)
    floor = float(psi_min(jnp.float32))
    assert floor > 0 and bool(jnp.all(state.psi >= floor)) and bool(jnp.all(jnp.isfinite(state.W)))
    np.testing.assert_allclose(state.gram, lowrank.whitened_gram(state.W, state.psi), rtol=1e-5)
    d, T = 4, 20
    rng = np.random.default_rng(2)
    X = np.zeros((T, d), np.float32)
    X[:, :2] = rng.normal(size=(T, 2))
    y = (rng.random(T) < 0.5).astype(np.float32)
    flt = jr.lrvga(LOGISTIC, rank=1, process_noise=1e30)
    out, psis = jr.run(flt, flt.init(jnp.zeros(d, jnp.float32), W, jnp.ones(d, jnp.float32)), X, y,
                       trace_fn=lambda s, x, y: s.psi)
    assert np.all(np.asarray(psis) >= floor)
    assert_lowrank_healthy(out)


def test_em_tol_is_differentiable_in_both_modes():
    """With ``em_tol`` the projection's EM stops at a tolerance (a fixed-count scan of masked loops):
    ``jax.jvp`` and ``jax.grad`` of a run both equal central finite differences (README, "Gradients
    through skipped steps")."""
    d, T = 3, 6
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(T, d)), (rng.random(T) < 0.5).astype(float)
    # The explicit scheme: the claim is the projection's (its EM loops stopped at a tolerance); the
    # implicit solver's derivatives are test_autodiff's and the grad tests' above.
    flt = jr.lrvga(LOGISTIC, rank=1, inner_loops=30, em_tol=1e-2, scheme="explicit")
    W0 = jnp.asarray(rng.normal(size=(d, 1)))

    def loss(s):
        out, loops = jr.scan(flt, flt.init(jnp.zeros(d), W0, jnp.ones(d) / s), X, y,
                             trace_fn=lambda st, x, yy: st.info.em_loops)
        return jnp.sum(out.mean ** 2) + jnp.sum(out.psi), loops

    # One compiled program gives the loss (for the finite differences), the EM loop counts, the
    # forward-mode tangent and the reverse-mode gradient (four programs compiled for 65 s).
    @jax.jit
    def value_loops_tangent_grad(s):
        (value, loops), (tangent, _) = jax.jvp(loss, (s,), (jnp.ones_like(s),))
        grad, _ = jax.grad(loss, has_aux=True)(s)
        return value, loops, tangent, grad

    _, loops, tangent, grad = value_loops_tangent_grad(2.0)
    assert 0 < int(np.min(loops)) < 30  # stopped early
    value = lambda s: value_loops_tangent_grad(s)[0]  # noqa: E731
    h = 1e-6
    fd = float((value(2.0 + h) - value(2.0 - h)) / (2 * h))
    np.testing.assert_allclose(float(tangent), fd, rtol=1e-6)
    np.testing.assert_allclose(float(grad), fd, rtol=1e-6)


def _ys_cases():
    """(filter, state, xs, bad ys, what) of issue 26.3, on tiny models."""
    models = jr.models
    d, T = 3, 4
    xs = np.random.default_rng(0).normal(size=(T, 8, d))
    mb = jr.rvga(models.minibatch(models.nonlinear(lambda th, x: jnp.tanh(x @ th))), "ekf")
    two = jr.rvga(models.nonlinear(lambda th, x: jnp.stack([x @ th, jnp.sin(x @ th)])), "ekf")
    soft = jr.rvga(models.softmax_regression(d, 3), "ekf")
    mb0, two0, soft0 = mb.init(jnp.zeros(d), jnp.eye(d)), two.init(jnp.zeros(d), jnp.eye(d)), \
        soft.init(jnp.zeros(3 * d), jnp.eye(3 * d))
    return [(mb, mb0, xs, np.zeros(T), "minibatch y (T,)"), (mb, mb0, xs, np.zeros((T, 1)), "minibatch y (T, 1)"),
            (two, two0, xs[:, 0], np.zeros(T), "2 outputs, scalar y per step"),
            (soft, soft0, xs[:, 0], np.array([[1, 1, 0]] * T), "one-hot with two ones"),
            (soft, soft0, xs[:, 0], np.zeros((T, 3)), "one-hot all zeros"),
            (soft, soft0, xs[:, 0], np.array([[2, 0, 0]] * T), "one-hot entry 2"),
            (soft, soft0, xs[:, 0], np.zeros((T, 1)), "labels (T, 1)")]


def test_ys_that_would_broadcast_raise_naming_ys():
    """Issue 26.3: y of the wrong shape for the model's output (a minibatch model given (T,) or
    (T, 1), a 2-output ``h`` given a scalar) and invalid one-hot rows were accepted, every step
    converged. ``jr.run`` raises ValueError naming ``ys``, one update ValueError naming ``y``; the
    right shapes still run."""
    for flt, state, xs, ys, what in _ys_cases():
        with pytest.raises(ValueError, match=r"^ys"):
            jr.run(flt, state, xs, ys)
        with pytest.raises(ValueError, match=r"^y[ :]"):
            flt.update(state, jax.tree_util.tree_map(lambda a: a[0], xs), ys[0])
    flt, state, xs, _, _ = _ys_cases()[3]
    for ys in (np.eye(3)[[0, 1, 2, 0]], np.array([0, 1, 2, 0])):
        _, converged = jr.run(flt, state, xs, ys, trace_fn=lambda s, x, y: s.info.converged)
        assert np.all(converged)


def test_prng_keys_one_rule_at_init_for_both_filters():
    """Issue 26.9: ``key=42`` (a raw JAX TypeError), floats, strings and batches of keys raise a
    ValueError naming ``key`` at ``init`` of both filters; a ``sampled`` filter given no key fails at
    ``init`` for both (the dense one failed only in ``run``). Typed (``jax.random.key``) and raw
    (``jax.random.PRNGKey``) keys of the same seed give the same run."""
    d = 3
    dense = jr.rvga(LOGISTIC, "sampled", num_samples=4)
    low = jr.lrvga(LOGISTIC, rank=1, scheme="sampled", num_samples=4)
    inits = {"dense": lambda **k: dense.init(jnp.zeros(d), jnp.eye(d), **k),
             "lowrank": lambda **k: low.init(jnp.zeros(d), jnp.ones((d, 1)), jnp.ones(d), **k)}
    bad = [42, np.int64(3), True, "0", 1.5, jnp.zeros(2), jnp.zeros(2, jnp.int32),
           jax.random.split(jax.random.PRNGKey(0), 2), jax.random.split(jax.random.key(0), 2)]
    for name, init in inits.items():
        with pytest.raises(ValueError, match=r"^key is required"):
            init()
        for key in bad:
            with pytest.raises(ValueError, match=r"^key must be"):
                init(key=key)
    # The zoo's sampled runs of a dense (typed key) and a low-rank (raw key) filter, against a run
    # from the same init given the other kind of key of the same seed (the zoo's runs are shared
    # with the tests above: one new program each).
    inits = {"rvga_nonlinear_mc_key": lambda flt, st, key: flt.init(st.mean, st.cov, key=key),
             "lrvga_nonlinear_sampled_key": lambda flt, st, key: flt.init(st.mean, st.W, st.psi, key)}
    for name, other_key in (("rvga_nonlinear_mc_key", jax.random.PRNGKey),
                            ("lrvga_nonlinear_sampled_key", jax.random.key)):
        flt, st, xs, ys = shared_zoo()[name]
        start = inits[name](flt, st, other_key(3))  # the zoo's seed
        typed = [jnp.issubdtype(s.key.dtype, jax.dtypes.prng_key) for s in (st, start)]
        assert typed[0] != typed[1]
        other, _ = jr.run(flt, start, xs, ys, _trace_fn(st))
        np.testing.assert_array_equal(other.mean, full_run(name)[0].mean)
    # a key given to a filter that needs none is still checked, then dropped
    with pytest.raises(ValueError, match=r"^key must be"):
        jr.kalman(1.0).init(jnp.zeros(d), jnp.eye(d), key=0)
    assert jr.kalman(1.0).init(jnp.zeros(d), jnp.eye(d), key=jax.random.PRNGKey(0)).key is None


def test_raw_exceptions_are_value_errors_naming_the_argument():
    """Issue 26.8: each input that raised a raw TypeError, ZeroDivisionError, AttributeError,
    TracerBoolConversionError or NotImplementedError now raises ValueError naming the argument;
    ``klprox`` refuses ``max_iter=-5``, ``2.5``, ``tol=NaN`` and ``tol=inf`` (which reported
    converged) and still takes ``max_iter=0`` (the start) and ``tol=0``."""
    from jaxrvga import sharding
    from jaxrvga.baselines import klprox
    models, d = jr.models, 3
    rng = np.random.default_rng(0)
    soft = jr.rvga(models.softmax_regression(d, 3), "ekf")
    with pytest.raises(ValueError, match=r"^ys"):  # one-hot rows of width K + 1
        jr.run(soft, soft.init(jnp.zeros(3 * d), jnp.eye(3 * d)), rng.normal(size=(4, d)), np.eye(4))
    mb = jr.rvga(models.minibatch(models.nonlinear(lambda th, x: jnp.tanh(x @ th))), "ekf")
    with pytest.raises(ValueError, match=r"^ys"):  # y (T, 4) for minibatches of m = 8
        jr.run(mb, mb.init(jnp.zeros(d), jnp.eye(d)), rng.normal(size=(5, 8, d)), np.zeros((5, 4)))
    for bad in (np.ones(2), 1j):
        with pytest.raises(ValueError, match=r"^process_noise"):
            jr.kalman(1.0, process_noise=bad)
    with pytest.raises(ValueError, match=r"^frozen_draws .*K >= 1"):  # refused when the filter is built
        jr.lrvga(LOGISTIC, rank=1, scheme="sampled", published=True, frozen_draws=(np.zeros((0, d)), np.zeros((0, 1))))
    flt = jr.lrvga(LOGISTIC, rank=1)
    state = flt.init(jnp.zeros(4), jnp.ones((4, 1)), jnp.ones(4))
    for call in (lambda: sharding.run(flt, state, np.zeros((3, 4)), np.zeros(3), mesh="cpu"),
                 lambda: sharding.shard_state(state, "cpu"), lambda: sharding.shard_inputs(np.zeros((3, 4)), "cpu")):
        with pytest.raises(ValueError, match=r"^mesh must be"):
            call()
    params = oem.GMMParams(jnp.array([0.5, 0.5]), jnp.array([-1.0, 1.0]), jnp.array([1.0, 1.0]))
    jitted = jax.jit(lambda x: oem.incremental_em().init(params, x))(jnp.zeros(3))  # closed-over params
    eager = oem.incremental_em().init(params, jnp.zeros(3))
    np.testing.assert_array_equal(jitted.params.means, eager.params.means)
    jax.jit(lambda n0: oem.titterington(n0).init(params))(20.0)
    bad = params._replace(weights=jnp.array([0.9, 0.9]))
    with pytest.raises(ValueError, match=r"^weights"):  # closed over: still checked inside jit
        jax.jit(lambda x: oem.cappe_moulines().init(bad))(0.0)
    for dtype in (jnp.bfloat16, jnp.float16):
        with pytest.raises(ValueError, match=r"^mean has dtype .*float32 and float64"):
            jr.lrvga(LOGISTIC, rank=1, scheme="ekf").init(jnp.zeros(d, dtype), jnp.ones((d, 1), dtype),
                                                          jnp.ones(d, dtype))
    X, y = rng.normal(size=(10, 2)), (np.arange(10) % 2).astype(float)
    fits = (lambda **k: klprox.fit(LOGISTIC, X, y, np.zeros(2), np.eye(2), **k),
            lambda **k: klprox.fit_kernel(LOGISTIC, X @ X.T + np.eye(10), y, **k))
    for fit in fits:
        for kw, name in ((dict(max_iter=-5), "max_iter"), (dict(max_iter=2.5), "max_iter"),
                         (dict(tol=np.nan), "tol"), (dict(tol=np.inf), "tol"), (dict(tol=-1.0), "tol")):
            with pytest.raises(ValueError, match=rf"^{name}"):
                fit(**kw)
        start = fit(max_iter=0, tol=0.0)
        assert int(start.iterations) == 0 and not bool(start.converged)


def test_a_state_of_another_filter_is_refused():
    """Issue 26.7: ``step_fn(...).pack`` of a state of another size or structure garbled it silently;
    now ValueError naming ``state``. A low-rank filter that keeps no Gram (published, ``fa_step``)
    given a state that carries one (it failed with a TypeError, or left the Gram stale) and a
    state of another width are refused."""
    # The explicit scheme: the refusal is the belief's and the packing's, whatever the scheme (the
    # default implicit one compiled its root solver into every eager update: 18 s).
    low = functools.partial(jr.lrvga, LOGISTIC, scheme="explicit")
    flt = low(rank=1)
    state = flt.init(jnp.zeros(4), jnp.ones((4, 1)), jnp.ones(4))
    step = jr.step_fn(flt, state, jnp.ones(4), 1.0)
    others = (low(rank=1).init(jnp.zeros(5), jnp.ones((5, 1)), jnp.ones(5)),
              low(rank=2).init(jnp.zeros(4), jnp.ones((4, 2)), jnp.ones(4)),
              state._replace(gram=None), state._replace(mean=state.mean.astype(jnp.float32)))
    for other in others:
        with pytest.raises(ValueError, match=r"^state"):
            step.pack(other)
    out = step.unpack(step.update(step.pack(state), jnp.ones(4), 1.0))
    np.testing.assert_array_equal(out.mean, jax.jit(flt.update)(state, jnp.ones(4), 1.0).mean)
    fa_step = lambda W, psi, X: fa.recursive_em_step(W, psi, X, 1.0, 1.0, 1)  # noqa: E731
    for other in (low(rank=1, published=True), with_fa_step(low(rank=1), fa_step)):
        with pytest.raises(ValueError, match=r"^state carries a whitened Gram"):
            other.update(state, jnp.ones(4), 1.0)
        jax.jit(other.update)(state._replace(gram=None), jnp.ones(4), 1.0)
    with pytest.raises(ValueError, match=r"^state: W has 3 columns"):
        low(rank=1).update(low(rank=3).init(jnp.zeros(4), jnp.ones((4, 3)), jnp.ones(4)),
                           jnp.ones(4), 1.0)


# ============================================================================ no non-finite state, any machine


#: The whitened Gram (float32, upper triangle by (row, column)) on which LAPACK's ``ssyevd``, as
#: XLA's CPU eigh calls it, gave up (issue 36: step 34 of the sampled 1e5-step run above; every
#: other entry is 0): the squares of its entries near 1e-27 underflow in the Householder reduction.
REFUSED_GRAM = {(1, 7): "-0x1.12e53cp-90", (1, 8): "-0x1.201faep-67", (1, 9): "-0x1.dcf5f6p-71",
                (7, 7): "0x1.e01a72p-43", (7, 8): "0x1.1654c8p-21", (7, 9): "-0x1.6a4fa4p-17",
                (8, 8): "0x1.20003ep+2", (8, 9): "0x1.07391ap-17", (9, 9): "0x1.7bd1aep+9"}


def refused_gram():
    G = np.zeros((10, 10), np.float32)
    for (i, j), h in REFUSED_GRAM.items():
        G[i, j] = G[j, i] = float.fromhex(h)
    return G


def test_symmetric_eigh_of_the_gram_that_lapack_refused_is_its_eigen_decomposition():
    """Backward stable: ``V diag(lam) V^T = G`` and ``V^T V = I`` to ``q eps |G|``, and ``lam`` equals
    the float64 spectrum to that absolute accuracy (Weyl), on any machine."""
    G = refused_gram()
    lam, V = lowrank.symmetric_eigh(jnp.asarray(G))
    lam, V = np.asarray(lam, np.float64), np.asarray(V, np.float64)
    assert np.all(np.isfinite(lam)) and np.all(np.isfinite(V))
    tol = 10 * 10 * EPS32 * np.abs(G).max()
    np.testing.assert_allclose(V @ np.diag(lam) @ V.T, G, atol=tol)
    np.testing.assert_allclose(V.T @ V, np.eye(10), atol=10 * 10 * EPS32)
    np.testing.assert_allclose(lam, np.linalg.eigvalsh(G.astype(np.float64)), atol=tol)


def test_symmetric_eigh_equals_eigh_in_float64_and_batches():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(3, 6, 6))
    A = A + np.swapaxes(A, 1, 2)
    lam, V = lowrank.symmetric_eigh(jnp.asarray(A))
    np.testing.assert_allclose(lam, np.linalg.eigvalsh(A), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(V @ (lam[..., None] * np.swapaxes(V, 1, 2)), A, atol=1e-12)
    lam0, V0 = lowrank.symmetric_eigh(jnp.zeros((4, 4)))
    np.testing.assert_array_equal(lam0, 0.0)
    np.testing.assert_allclose(V0 @ V0.T, np.eye(4), atol=1e-15)


@pytest.fixture
def failing_eigh(monkeypatch):
    """Every eigen-decomposition of the projection fails (NaN), as LAPACK's did on issue 36's machine."""
    def nan_eigh(A):
        return jnp.full(A.shape[:-1], jnp.nan, A.dtype), jnp.full(A.shape, jnp.nan, A.dtype)
    monkeypatch.setattr(lowrank, "symmetric_eigh", nan_eigh)


def _belief_leaves(state):
    return [a for a in (state.mean, getattr(state, "cov", None), getattr(state, "W", None),
                        getattr(state, "psi", None), getattr(state, "gram", None)) if a is not None]


@pytest.mark.parametrize("options", [{}, {"inner_loops": 2}, {"inner_loops": 2, "em_tol": 1e-3}, {"buffer": 2},
                                     {"fa_step": "nan"}], ids=["start", "em", "em_tol", "buffer", "fa_step"])
def test_a_projection_that_cannot_be_computed_keeps_the_prior_and_is_flagged(failing_eigh, options):
    """Issue 36: a failed projection overwrote ``W`` in place with NaN and the guard kept it."""
    d, rng = 9, np.random.default_rng(3)  # d = 9: compiled for this test alone (the patched eigh)
    options = dict(options)
    fa_step = options.pop("fa_step", None)
    flt = lrvga(LOGISTIC, rank=2, scheme="ekf", **options)
    if fa_step:
        flt = with_fa_step(flt, lambda W, psi, X: (W * jnp.nan, psi))
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), d, 2, 1.0)
    prior = flt.init(jnp.asarray(rng.normal(size=d)), W0 + 0.1, psi0)
    state = prior
    update = jax.jit(flt.update)  # one program for the three steps (traced with the patched eigh)
    for _ in range(3):  # the buffer stores its first column, projects at the second
        state = update(state, jnp.asarray(rng.normal(size=d)), 1.0)
        for leaf in _belief_leaves(state):
            assert bool(jnp.all(jnp.isfinite(leaf)))
    assert not bool(state.info.converged)
    assert float(state.info.dropped) == 0.0
    if not options.get("buffer"):
        for a, b in zip(_belief_leaves(state), _belief_leaves(prior)):
            np.testing.assert_array_equal(a, b)


#: Both tests below run their filters on streams of the same shape (12 rows, d = 6) with one trace
#: function, so that a filter and dtype they share is one compiled run.
HOSTILE_D, HOSTILE_T = 6, 12


def _hostile_stream(dtype, d=HOSTILE_D, n=HOSTILE_T, seed=0):
    """Rows of ordinary size, then rows near overflow, NaN and inf rows, then ordinary ones again."""
    rng = np.random.default_rng(seed)
    big = np.sqrt(np.finfo(dtype).max)
    X = rng.normal(size=(n, d))
    X[3:5] *= big
    X[5] *= np.finfo(dtype).max / 4
    X[6, 0], X[7, 1] = np.nan, np.inf
    y = (rng.uniform(size=n) < 0.5).astype(float)
    return X.astype(dtype), y.astype(dtype)


HOSTILE_FILTERS = {
    **{f"dense-{s}": (lambda s=s: jr.rvga(LOGISTIC, s)) for s in ("implicit", "explicit", "ekf", "moment_ekf", "qkf")},
    **{f"lowrank-{s}": (lambda s=s: lowrank_filter(s, 2)) for s in LOWRANK_SCHEMES},
    "lowrank-buffer": lambda: lrvga(LOGISTIC, rank=2, scheme="ekf", buffer=2),
    "lowrank-published": lambda: lrvga(LOGISTIC, rank=2, scheme="explicit", published=True),
    **{f"diag-{s}": (lambda s=s: jr.diag_rvga(LOGISTIC, scheme=s)) for s in ("implicit", "ekf", "moment_ekf",
                                                                              "explicit")},
}


def _hostile_init(name, flt, dtype, scale):
    """The prior of filter ``name`` ("dense-...", "diag-..." or "lowrank-..."): mean 0, variances ``scale``."""
    mean = jnp.zeros(HOSTILE_D, dtype)
    if name.startswith("dense"):
        return flt.init(mean, scale * jnp.eye(HOSTILE_D, dtype=dtype))
    if name.startswith("diag"):
        return flt.init(mean, jnp.full(HOSTILE_D, scale, dtype))
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), HOSTILE_D, 2, scale, dtype=dtype)
    return flt.init(mean, W0, psi0, jax.random.PRNGKey(1))


def _finite_and_info(state, x, y):
    """Per step: whether each belief leaf is finite, and the step's solver info."""
    return jnp.stack([jnp.all(jnp.isfinite(a)) for a in _belief_leaves(state)]), state.info


@pytest.mark.parametrize("name,dtype", [(name, np.float32) for name in sorted(HOSTILE_FILTERS)]
                         + [(name, np.float64) for name in ("dense-ekf", "lowrank-ekf", "lowrank-sampled", "diag-ekf")])
def test_no_state_a_step_returns_holds_a_non_finite_belief(name, dtype):
    """Every scheme on every belief, driven into overflow, NaN and inf: every returned state is finite
    (a step that would not be is skipped and flagged), whatever the machine's rounding."""
    flt = HOSTILE_FILTERS[name]()
    X, y = _hostile_stream(dtype)
    _, (ok, info) = jr.run(flt, _hostile_init(name, flt, dtype, 100.0), X, y, _finite_and_info)
    assert np.asarray(ok).all(), f"non-finite belief after steps {np.flatnonzero(~np.asarray(ok).all(1))}"
    assert not np.asarray(info.converged)[6:8].any()  # the NaN and inf rows are flagged


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["dense-implicit", "dense-ekf", "dense-explicit", "lowrank-implicit", "lowrank-ekf",
                                  "lowrank-sampled", "diag-implicit", "diag-ekf", "diag-explicit"])
def test_a_run_of_only_skipped_steps_reports_finite_residuals(name, dtype):
    """Rows that overflow, NaN and inf: every step is flagged and leaves the belief as init's (a
    zero-information projection of ``sampled`` may refactor ``W``), and every step's
    ``info.residual`` is finite, for every belief."""
    flt = HOSTILE_FILTERS[name]()
    init = _hostile_init(name, flt, dtype, 1.0)
    X = np.full((HOSTILE_T, HOSTILE_D), np.finfo(dtype).max / 4, dtype)
    X[1::2] *= -1
    X[4::6, 0], X[5::6, 1] = np.nan, np.inf
    y = np.tile(np.array([1, 0], dtype), HOSTILE_T // 2)
    out, (_, info) = jr.run(flt, init, X, y, _finite_and_info)
    assert not np.asarray(info.converged).any()
    assert np.isfinite(np.asarray(info.residual)).all(), np.asarray(info.residual)
    kept = _belief_leaves(out) if not name.endswith("sampled") else [out.mean]
    for a, b in zip(kept, _belief_leaves(init)):
        np.testing.assert_array_equal(a, b)
