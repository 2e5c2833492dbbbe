"""Oracle tests of the full-covariance R-VGA family (reproduction spec §3, checks 1-8, 18, 19)."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from conftest import run_together
from jaxrvga.kernels import root_solvers as implicit
from jaxrvga.kernels import special


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b)))


def rotated_inputs(rng, d, n, c):
    """Inputs with covariance Q diag(1/i^c) Q^T (a random rotation), as in [RVGA] eq. (91)."""
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    scales = 1.0 / np.arange(1, d + 1) ** c
    return (rng.normal(size=(n, d)) * np.sqrt(scales)) @ q.T


def batch_posterior(X, y, mu0, P0, noise_var):
    """The linear-Gaussian posterior (B3): Sigma* = (P0^-1 + X^T X / s2)^-1, m* = Sigma* (P0^-1 mu0 + X^T y / s2)."""
    prec = np.linalg.inv(P0) + X.T @ X / noise_var
    cov = np.linalg.inv(prec)
    return cov @ (np.linalg.solve(P0, mu0) + X.T @ y / noise_var), cov


def logistic_data(rng, d, n, scale=1.0):
    X = rng.normal(size=(n, d)) * scale
    theta = rng.normal(size=d)
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ theta))).astype(float)
    return X, y


def final_states(*runs):
    """The final states of :func:`conftest.run_together` of ``runs``."""
    return [state for state, _ in run_together(*runs)]


# ----------------------------------------------------------------------------- check 1, 2


@pytest.mark.parametrize("d,n,c,tol", [(20, 200, 1, 1e-10), (100, 3000, 2, 1e-8)])
def test_check1_linear_rvga_is_kalman_information_newton_and_batch(d, n, c, tol):
    rng = np.random.default_rng(1)
    X = rotated_inputs(rng, d, n, c)
    theta = rng.uniform(-1, 1, d)
    y = X @ theta + rng.normal(size=n)
    mu0, P0 = np.zeros(d), np.eye(d)
    m_star, S_star = batch_posterior(X, y, mu0, P0, 1.0)

    flt = jr.rvga(jr.models.linear_gaussian(1.0))
    state, _ = jr.run(flt, flt.init(mu0, P0), X, y)
    assert rel(state.mean, m_star) <= tol
    assert rel(state.cov, S_star) <= tol

    # Information filter (eq. 109) and online Newton (eq. 39), written independently.
    Q, mu_info, mu_newton = np.linalg.inv(P0), mu0.copy(), mu0.copy()
    for x, yt in zip(X, y):
        Q = Q + np.outer(x, x)
        P = np.linalg.inv(Q)
        mu_info = mu_info + P @ x * (yt - x @ mu_info)
        mu_newton = mu_newton - np.linalg.solve(Q, -(yt - x @ mu_newton) * x)
    assert rel(state.mean, mu_info) <= tol
    assert rel(state.mean, mu_newton) <= tol
    assert rel(state.cov, np.linalg.inv(Q)) <= tol


def test_check2_implicit_equals_explicit_on_linear_gaussian():
    """The implicit scheme (35)-(36) solved exactly equals the explicit (37)-(38) on a linear model."""
    rng = np.random.default_rng(2)
    d, n = 20, 200
    X = rotated_inputs(rng, d, n, 1)
    y = X @ rng.uniform(-1, 1, d) + rng.normal(size=n)
    mu0, P0 = np.zeros(d), np.eye(d)
    gaussian_glm = jr.models.glm(jr.models.gaussian(1.0))  # generic path: convex 1-D implicit solve
    imp = jr.rvga(gaussian_glm, "implicit")
    exp = jr.rvga(gaussian_glm, "explicit")
    kf = jr.rvga(jr.models.linear_gaussian(1.0))
    s_imp, info = jr.run(imp, imp.init(mu0, P0), X, y, jr.trace_info)
    s_exp, _ = jr.run(exp, exp.init(mu0, P0), X, y)
    s_kf, _ = jr.run(kf, kf.init(mu0, P0), X, y)
    assert bool(jnp.all(info.converged))
    assert rel(s_imp.mean, s_exp.mean) <= 1e-10 and rel(s_imp.cov, s_exp.cov) <= 1e-10
    assert rel(s_exp.mean, s_kf.mean) <= 1e-10 and rel(s_exp.cov, s_kf.cov) <= 1e-10


@pytest.mark.parametrize("num_iters", [1, 2, 5])
def test_iterated_nonlinear_rvga_never_counts_an_observation_twice(num_iters):
    """A linear model passed as a generic nonlinear one: every number of implicit iterations
    reproduces the Kalman filter exactly (antithetic samples make the MC gradient exact)."""
    rng = np.random.default_rng(3)
    d, n = 6, 40
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + 0.5 * rng.normal(size=n)
    model = jr.models.nonlinear(lambda th, x: x @ th, jr.models.gaussian(0.25))
    flt = jr.rvga(model, "implicit", num_iters=num_iters, num_samples=8)
    kf = jr.kalman(0.25)
    s, _ = jr.run(flt, flt.init(np.zeros(d), 2 * np.eye(d), key=jax.random.PRNGKey(0)), X, y)
    s_kf, _ = jr.run(kf, kf.init(np.zeros(d), 2 * np.eye(d)), X, y)
    assert rel(s.mean, s_kf.mean) <= 1e-10
    assert rel(s.cov, s_kf.cov) <= 1e-10


def test_kalman_vector_observations_match_batch():
    rng = np.random.default_rng(4)
    d, n, m = 5, 30, 3
    H = rng.normal(size=(n, m, d))
    y = H @ rng.normal(size=d) + rng.normal(size=(n, m))
    kf = jr.kalman(1.0)
    s, _ = jr.run(kf, kf.init(np.zeros(d), np.eye(d)), H, y)
    m_star, S_star = batch_posterior(H.reshape(-1, d), y.reshape(-1), np.zeros(d), np.eye(d), 1.0)
    assert rel(s.mean, m_star) <= 1e-10 and rel(s.cov, S_star) <= 1e-10


# ----------------------------------------------------------------------------- check 3, 4, 5


def test_check3_linearised_rvga_is_ekf_is_online_natural_gradient():
    rng = np.random.default_rng(5)
    d, n = 10, 200
    X, y = logistic_data(rng, d, n)
    P0 = 4 * np.eye(d)
    flt = jr.ekf(jr.models.logistic())
    s, means = jr.run(flt, flt.init(np.zeros(d), P0), X, y, jr.trace_mean)
    # Online natural gradient (eq. 54) with lr 1/(t+1), J_0 = P_0^-1.
    J, mu = np.linalg.inv(P0), np.zeros(d)
    sig = lambda z: 1 / (1 + np.exp(-z))
    for t, (x, yt) in enumerate(zip(X, y), start=1):
        a = x @ mu
        J = t / (t + 1) * J + 1 / (t + 1) * sig(a) * (1 - sig(a)) * np.outer(x, x)
        mu = mu - 1 / (t + 1) * np.linalg.solve(J, -(yt - sig(a)) * x)
        assert rel(means[t - 1], mu) <= 1e-10
    assert rel(s.cov, np.linalg.inv(J) / (n + 1)) <= 1e-10


def test_check4_ekf_compact_form_equals_kalman_gain_form():
    rng = np.random.default_rng(6)
    d, n = 5, 50
    X, y = logistic_data(rng, d, n)
    flt = jr.ekf(jr.models.logistic())
    s, _ = jr.run(flt, flt.init(np.zeros(d), np.eye(d)), X, y)
    mu, P = np.zeros(d), np.eye(d)
    sig = lambda z: 1 / (1 + np.exp(-z))
    for x, yt in zip(X, y):
        R = sig(x @ mu) * (1 - sig(x @ mu))
        H = R * x[None, :]
        K = P @ H.T / (R + H @ P @ H.T)
        mu = mu + (K * (yt - sig(x @ mu))).ravel()
        P = P - K @ H @ P
    assert rel(s.mean, mu) <= 1e-12
    assert rel(s.cov, P) <= 1e-12


def test_check5_qkf_equals_jaakkola_jordan_form():
    rng = np.random.default_rng(7)
    d, n = 5, 50
    X, y = logistic_data(rng, d, n)
    flt = jr.qkf()
    s, _ = jr.run(flt, flt.init(np.zeros(d), np.eye(d)), X, y)
    mu, P = np.zeros(d), np.eye(d)
    for x, yt in zip(X, y):
        xi = np.sqrt(x @ (P + np.outer(mu, mu)) @ x)
        eta = -(1 / (1 + np.exp(-xi)) - 0.5) / (2 * xi)
        Pn = np.linalg.inv(np.linalg.inv(P) - 2 * eta * np.outer(x, x))
        mu = Pn @ (np.linalg.solve(P, mu) + (yt - 0.5) * x)
        P = Pn
    assert rel(s.mean, mu) <= 1e-10
    assert rel(s.cov, P) <= 1e-10


def test_qkf_series_at_zero():
    """At xi = 0 the JJ coefficient (sig(xi) - 1/2)/xi is 0/0; its limit is 1/4."""
    from jaxrvga.kernels.special import jj_lambda

    def _jj_lambda(xi):  # R^{-1} = (sig(xi) - 1/2) / xi of [RVGA] eq. (90) = 2 lambda(xi)
        return 2.0 * jj_lambda(xi)
    xi = jnp.array([0.0, 1e-8, 1e-4, 1e-3, 1.0])
    exact = jnp.array([0.25, 0.25, (special.sigmoid(1e-4) - 0.5) / 1e-4,
                       (special.sigmoid(1e-3) - 0.5) / 1e-3, special.sigmoid(1.0) - 0.5])
    assert np.allclose(_jj_lambda(xi), exact, rtol=1e-9, atol=0)


# ----------------------------------------------------------------------------- check 6, 7


def random_gaussians(rng, n, d, nu_range):
    out = []
    for _ in range(n):
        A = rng.normal(size=(d, d))
        P = A @ A.T / d + 0.1 * np.eye(d)
        x = rng.normal(size=d)
        x *= np.sqrt(10 ** rng.uniform(*np.log10(nu_range)) / (x @ P @ x))
        out.append((rng.normal(size=d) * 3, P, x, float(rng.integers(0, 2))))
    return out


def test_check6_implicit_logistic_solves_its_own_fixed_point():
    rng = np.random.default_rng(8)
    flt = jr.rvga(jr.models.logistic(), "implicit")
    upd = jax.jit(flt.update)
    for mu, P, x, y in random_gaussians(rng, 200, 4, (1e-3, 1e2)):
        s = upd(flt.init(mu, P), x, y)
        assert bool(s.info.converged)
        k = special.probit_k(x @ s.cov @ x)
        a = x @ s.mean
        r_mean = s.mean - mu - P @ x * (y - special.sigmoid(k * a))
        r_prec = np.linalg.inv(s.cov) - np.linalg.inv(P) - k * special.sig1(k * a) * np.outer(x, x)
        assert np.linalg.norm(r_mean) / np.linalg.norm(s.mean - mu) <= 1e-9
        assert np.linalg.norm(r_prec) / np.linalg.norm(np.linalg.inv(P)) <= 1e-9


def test_check7_root_lies_in_coarse_and_every_refined_box():
    rng = np.random.default_rng(9)
    n = 3000
    alpha0 = rng.normal(0, 10, n)
    nu0 = 10 ** rng.uniform(-3, 3, n)
    y = rng.integers(0, 2, n).astype(float)
    alpha, nu, info = jax.jit(jax.vmap(implicit.solve_logistic))(alpha0, nu0, y)
    assert bool(jnp.all(info.converged)) and float(jnp.max(info.residual)) <= 1e-9
    box = implicit.coarse_box(alpha0, nu0, y)
    refine = jax.jit(lambda b: implicit.refine_box(b, alpha0, nu0, y, sweeps=1))
    for sweep in range(50):
        if sweep:
            box = refine(box)
        a_lo, a_hi, n_lo, n_hi = (np.asarray(b) for b in box)
        tol_a = 1e-9 * (1 + np.abs(alpha0) + nu0)
        assert np.all(alpha >= a_lo - tol_a) and np.all(alpha <= a_hi + tol_a)
        assert np.all(nu >= n_lo * (1 - 1e-9)) and np.all(nu <= n_hi * (1 + 1e-9))


def test_implicit_solver_residual_over_wide_range():
    """Issue 6 property, on a grid: residual <= 1e-9 for nu0 in [1e-6, 1e6], alpha0 in [-1e3, 1e3]."""
    a0, n0, y = np.meshgrid(np.linspace(-1e3, 1e3, 41), np.logspace(-6, 6, 49), [0.0, 1.0])
    _, _, info = jax.jit(jax.vmap(implicit.solve_logistic))(a0.ravel(), n0.ravel(), y.ravel())
    assert bool(jnp.all(info.converged))
    assert float(jnp.max(info.residual)) <= 1e-9


def test_batched_solve_equals_scalar_solves_with_and_without_the_robust_path():
    """A batch of solves under vmap (and vmap of vmap) equals the solves one by one (to a relative
    1e-12: the vmapped and scalar programs are compiled differently and may round differently),
    whether or not some element needs the robust path (refined box and restart): the first Newton
    pass fails on (alpha0, nu0, y) = (-8.334, 328.07, 1), a surprising label met by a vmapped fleet."""
    easy = (np.array([0.3, -1.2, 2.0]), np.array([0.5, 0.01, 2.0]), np.array([1.0, 0.0, 1.0]))
    a0, n0, y0 = -8.334215478130556, 328.07459713407525, 1.0
    first = jax.jit(lambda a0, n0, y0: implicit._newton(  # one compiled program, not one per operation
        a0, n0, y0, implicit.coarse_box(a0, n0, y0), implicit._tolerance(jnp.float64), implicit._NEWTON_ITERS,
        implicit._explicit_start(a0, n0, y0)))(a0, n0, y0)
    assert not bool(first[3])
    # The hard batch: the last easy element replaced, so both batches share their (vmapped) programs.
    hard = tuple(np.append(a[:-1], v) for a, v in zip(easy, (a0, n0, y0)))
    one = jax.jit(implicit.solve_logistic)
    # made once, outside the loop: jax.jit(jax.vmap(f)) made anew is a new function, traced and
    # compiled again for the second batch
    vmapped = jax.jit(jax.vmap(implicit.solve_logistic))
    vmapped_twice = jax.jit(jax.vmap(jax.vmap(implicit.solve_logistic)))
    for batch in (easy, hard):
        got = vmapped(*batch)
        twice = vmapped_twice(*(np.stack([b, b[::-1]]) for b in batch))
        for i in range(len(batch[0])):
            ref = one(*(b[i] for b in batch))
            assert bool(ref[2].converged)
            for a, b in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(got)):
                np.testing.assert_allclose(b[i], a, rtol=1e-12, atol=1e-14)
            for a, b in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(twice)):
                np.testing.assert_allclose(b[0, i], a, rtol=1e-12, atol=1e-14)
                np.testing.assert_allclose(b[1, len(batch[0]) - 1 - i], a, rtol=1e-12, atol=1e-14)


def test_run_if_runs_only_when_some_element_needs_it():
    """implicit._run_if: fn's result where pred, the operands elsewhere; fn runs once for a batch
    with some pred (batched and masked) and not at all for a batch with none, also under jit and
    with a batched pred over unbatched operands."""
    calls = []

    def fn(a, x):
        jax.debug.callback(lambda: calls.append(1))
        return (x + a,)

    run = jax.jit(jax.vmap(lambda p, a, x: implicit._run_if(p, fn, (a,), (x,))[0]))
    a, x = jnp.arange(4.0), 10.0 * jnp.ones(4)
    np.testing.assert_array_equal(run(jnp.array([True, False, True, False]), a, x), [10.0, 10.0, 12.0, 10.0])
    assert len(calls) == 1
    np.testing.assert_array_equal(run(jnp.zeros(4, bool), a, x), x)
    assert len(calls) == 1
    shared = jax.jit(jax.vmap(lambda p: implicit._run_if(p, fn, (2.0,), (1.0,))[0]))
    np.testing.assert_array_equal(shared(jnp.array([False, True])), [1.0, 3.0])
    assert len(calls) == 2
    assert float(jax.jit(lambda p: implicit._run_if(p, fn, (2.0,), (1.0,))[0])(False)) == 1.0
    assert len(calls) == 2


# ----------------------------------------------------------------------------- check 8


def test_check8_small_prior_variance_limit():
    """P = s I, s -> 0: |mu_imp - mu_exp| = O(s^3) and |mu_exp - mu_ekf| = O(s^2)."""
    rng = np.random.default_rng(10)
    d = 4
    mu, x, y = rng.normal(size=d), rng.normal(size=d), 1.0
    diffs = []
    filters = [jr.rvga(jr.models.logistic(), "implicit"), jr.rvga(jr.models.logistic(), "explicit"),
               jr.ekf(jr.models.logistic())]
    updates = [jax.jit(f.update) for f in filters]
    for s in [1e-2, 1e-3, 1e-4]:
        states = [u(f.init(mu, s * np.eye(d)), x, y) for f, u in zip(filters, updates)]
        diffs.append((np.linalg.norm(states[0].mean - states[1].mean),
                      np.linalg.norm(states[1].mean - states[2].mean)))
    diffs = np.array(diffs)
    ratio_ie = diffs[:-1, 0] / diffs[1:, 0]
    ratio_ee = diffs[:-1, 1] / diffs[1:, 1]
    assert np.all((ratio_ie > 700) & (ratio_ie < 1400)), ratio_ie
    assert np.all((ratio_ee > 70) & (ratio_ee < 140)), ratio_ee


# ----------------------------------------------------------------------------- check 18


def test_check18_mirror_prox_paper_form_regression_and_corrected_form():
    paper = jr.mirror_prox(jr.models.linear_gaussian(1.0))
    s = paper.update(paper.init(jnp.zeros(1), jnp.eye(1)), jnp.ones(1), 1.0)
    assert float(s.mean[0]) == pytest.approx(0.25, abs=1e-15)
    fixed = jr.mirror_prox(jr.models.linear_gaussian(1.0), correction=True)
    s = fixed.update(fixed.init(jnp.zeros(1), jnp.eye(1)), jnp.ones(1), 1.0)
    assert float(s.mean[0]) == pytest.approx(0.5, abs=1e-15)

    rng = np.random.default_rng(11)
    d, n = 10, 100
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n)
    kf = jr.kalman(1.0)
    s_fixed, _ = jr.run(fixed, fixed.init(np.zeros(d), np.eye(d)), X, y)
    s_kf, _ = jr.run(kf, kf.init(np.zeros(d), np.eye(d)), X, y)
    assert rel(s_fixed.mean, s_kf.mean) <= 1e-12 and rel(s_fixed.cov, s_kf.cov) <= 1e-12


# ----------------------------------------------------------------------------- check 19


def test_check19_inverse_probit_moment_error():
    """Error of the closed forms of A1 against exact expectations (trapezoid rule on a fine grid,
    which agrees with 200-node Gauss-Hermite to 1e-7).

    The spec quotes 0.0135 for E[sig] and 0.0096 for E[sig'] (its own grid). On this grid,
    which contains m = -10, v = 10^1.5, the E[sig] error reaches 0.0160 there; E[sig'] stays
    below 0.006. We assert the measured values, not the spec's.
    """
    m, v = np.meshgrid(np.linspace(-10, 10, 81), np.logspace(-4, 3, 57))
    m, v = m.ravel(), v.ravel()
    z = np.linspace(-12, 12, 4001)
    w = np.exp(-0.5 * z**2)
    w /= w.sum()
    a = m[:, None] + np.sqrt(v)[:, None] * z
    s = 1 / (1 + np.exp(-a))
    exact_sig, exact_sig1 = (s * w).sum(1), (s * (1 - s) * w).sum(1)
    approx_sig, approx_sig1 = special.probit_moments(m, v)
    err0 = np.max(np.abs(approx_sig - exact_sig))
    err1 = np.max(np.abs(approx_sig1 - exact_sig1))
    assert 0.0155 < err0 <= 0.0165 and err1 <= 0.010, (err0, err1)


# ----------------------------------------------------------------------------- other oracles


def test_glm_implicit_satisfies_stationarity_with_exact_expectations():
    """Generic implicit R-VGA (Poisson, exact Gaussian expectations) solves eqs. (28)-(29)."""
    rng = np.random.default_rng(12)
    flt = jr.rvga(jr.models.poisson(), "implicit")
    upd = jax.jit(flt.update)
    for mu, P, x, _ in random_gaussians(rng, 50, 3, (1e-2, 10.0)):
        y = float(rng.poisson(2.0))
        s = upd(flt.init(mu, P), x, y)
        assert bool(s.info.converged)
        m, v = x @ s.mean, x @ s.cov @ x
        rate = np.exp(m + v / 2)
        assert np.allclose(s.mean, mu + P @ x * (y - rate), rtol=1e-9, atol=1e-12)
        assert np.allclose(np.linalg.inv(s.cov), np.linalg.inv(P) + rate * np.outer(x, x), rtol=1e-8)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-9), (np.float32, 1e-4)])
def test_poisson_implicit_solve_over_wide_range(dtype, tol):
    """The convex 1-D solve converges for broad priors too, and its root satisfies the Poisson
    implicit equations alpha = alpha0 + nu0 (y - e^(alpha + nu/2)), 1/nu = 1/nu0 + e^(alpha + nu/2).
    Where the solver starts, the prior's marginal, exp overflows for nu0 >~ 1400 (float64) or
    >~ 170 (float32); plain Newton advances one unit of eta per step from there. Before the
    start was shrunk and full steps doubled, 27 % of this grid (nu0 >= 56) did not converge."""
    a0, n0, y = (g.ravel().astype(dtype) for g in np.meshgrid(
        np.linspace(-20, 20, 21), np.logspace(-4, 4, 33), [0.0, 1.0, 3.0, 20.0]))
    ell = jr.models.poisson().expected_log_lik
    alpha, nu, info = jax.jit(jax.vmap(lambda *p: implicit.solve_glm(*p, ell)))(a0, n0, y)
    assert alpha.dtype == dtype and bool(jnp.all(info.converged))
    assert float(jnp.max(info.residual)) <= implicit._tolerance(dtype)
    a0, n0, y, alpha, nu = (np.asarray(v, np.float64) for v in (a0, n0, y, alpha, nu))
    rate = np.exp(alpha + nu / 2)
    assert np.all(np.abs(alpha - (a0 + n0 * (y - rate))) <= tol * (1 + np.abs(a0) + n0))
    # Both equations to the solver's tolerance in its dimensionless residual (|.| / nu0 for nu).
    assert np.all(np.abs(nu - n0 / (1 + n0 * rate)) <= tol * n0)
    if dtype == np.float64:
        np.testing.assert_allclose(1 / nu, 1 / n0 + rate, rtol=tol)


def test_logistic_glm_with_exact_expectations_is_close_to_probit_version():
    rng = np.random.default_rng(13)
    X, y = logistic_data(rng, 4, 100)
    exact = jr.rvga(jr.models.glm(jr.models.bernoulli()), "implicit")
    probit = jr.rvga(jr.models.logistic(), "implicit")
    s1, s2 = final_states((exact, exact.init(np.zeros(4), np.eye(4)), X, y),
                          (probit, probit.init(np.zeros(4), np.eye(4)), X, y))
    # The probit moments are accurate to ~1e-2 (check 19), so the filters agree to that order.
    assert rel(s1.mean, s2.mean) < 0.05 and rel(s1.cov, s2.cov) < 0.05


def test_nonlinear_mc_rvga_matches_exact_glm_on_logistic():
    """Monte-Carlo R-VGA on a logistic model written as nonlinear matches the GH version."""
    rng = np.random.default_rng(14)
    d = 3
    X, y = logistic_data(rng, d, 30)
    mc = jr.rvga(jr.models.nonlinear(lambda th, x: x @ th, jr.models.bernoulli()), "implicit",
                 num_iters=5, num_samples=4000)
    gh = jr.rvga(jr.models.glm(jr.models.bernoulli()), "implicit")
    s1, s2 = final_states((mc, mc.init(np.zeros(d), np.eye(d), key=jax.random.PRNGKey(1)), X, y),
                          (gh, gh.init(np.zeros(d), np.eye(d)), X, y))
    assert rel(s1.mean, s2.mean) < 0.03 and rel(s1.cov, s2.cov) < 0.05


def test_laplace_is_map_with_inverse_hessian():
    from scipy.optimize import minimize
    rng = np.random.default_rng(15)
    d = 5
    X, y = logistic_data(rng, d, 200, scale=2.0)
    P0 = 9 * np.eye(d)
    res = jr.baselines.laplace.laplace(jr.models.logistic(), X, y, np.zeros(d), P0)
    assert bool(res.converged)

    def nlp(th):
        z = X @ th
        return np.sum(np.logaddexp(0, z) - y * z) + 0.5 * th @ th / 9

    ref = minimize(nlp, np.zeros(d), method="BFGS", options={"gtol": 1e-10})
    assert rel(res.mean, ref.x) <= 1e-6
    p = 1 / (1 + np.exp(-X @ res.mean))
    H = np.eye(d) / 9 + X.T @ (X * (p * (1 - p))[:, None])
    assert rel(res.cov, np.linalg.inv(H)) <= 1e-10


def test_predictive_equations_62_63():
    rng = np.random.default_rng(16)
    mu, x = rng.normal(size=3), rng.normal(size=(7, 3))
    A = rng.normal(size=(3, 3))
    P = A @ A.T
    state = jr.rvga(jr.models.logistic()).init(mu, P)
    p, var = jr.predictive(state, x)
    k = np.sqrt(8 / np.pi) / np.sqrt(np.einsum("ni,ij,nj->n", x, P, x) + 8 / np.pi)
    pk = 1 / (1 + np.exp(-k * (x @ mu)))
    assert np.allclose(p, pk, rtol=1e-12) and np.allclose(var, pk * (1 - pk) * (1 - k), rtol=1e-12)
    p0, var0 = jr.predictive(state._replace(cov=0 * P), x)  # no uncertainty: plug-in and zero variance
    assert np.allclose(p0, 1 / (1 + np.exp(-x @ mu))) and np.allclose(var0, 0)


# ----------------------------------------------------------------------------- JAX transformations


FILTERS = {
    "implicit": lambda: jr.rvga(jr.models.logistic(), "implicit"),
    "explicit": lambda: jr.rvga(jr.models.logistic(), "explicit"),
    "ekf": lambda: jr.ekf(jr.models.logistic()),
    "qkf": lambda: jr.qkf(),
    "mirror_prox": lambda: jr.mirror_prox(jr.models.logistic()),
}


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_jit_vmap_scan_agree(name):
    flt = FILTERS[name]()
    rng = np.random.default_rng(17)
    d, n, b = 4, 8, 3
    X, y = logistic_data(rng, d, n)
    init = flt.init(np.zeros(d), 3 * np.eye(d))
    # Python loop, non-jitted.
    s_loop = init
    for x, yt in zip(X, y):
        s_loop = flt.update(s_loop, jnp.asarray(x), jnp.asarray(yt))
    # jitted single steps, and scan.
    chex.clear_trace_counter()  # chex counts traces per function code, shared by every filter's update
    def step(state, x, y):  # flt.update compares by configuration: a callable object, not a function
        return flt.update(state, x, y)

    upd = jax.jit(chex.assert_max_traces(step, n=1))
    s_jit = init
    for x, yt in zip(X, y):
        s_jit = upd(s_jit, jnp.asarray(x), jnp.asarray(yt))
    s_scan, _ = jr.run(flt, init, X, y)
    np.testing.assert_allclose(s_jit.mean, s_loop.mean, rtol=1e-12)
    np.testing.assert_allclose(s_scan.mean, s_loop.mean, rtol=1e-12)
    np.testing.assert_allclose(s_scan.cov, s_loop.cov, rtol=1e-12, atol=1e-15)
    # vmap over independent filters equals the filters run one by one.
    Xb = np.stack([X * (1 + 0.1 * i) for i in range(b)])
    inits = jax.tree_util.tree_map(lambda a: jnp.stack([a] * b), init)
    batched, _ = jax.vmap(lambda s, xs: jr.run(flt, s, xs, y))(inits, Xb)
    for i in range(b):
        single, _ = jr.run(flt, init, Xb[i], y)
        np.testing.assert_allclose(batched.mean[i], single.mean, rtol=1e-12)


def test_vmap_over_noise_variance_hyperparameter():
    rng = np.random.default_rng(18)
    d, n = 3, 20
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n)

    def final_mean(noise_var):
        flt = jr.rvga(jr.models.linear_gaussian(noise_var))
        return jr.run(flt, flt.init(jnp.zeros(d), jnp.eye(d)), X, y)[0].mean

    noise = jnp.array([0.5, 1.0, 2.0])
    batched = jax.vmap(final_mean)(noise)
    for i, nv in enumerate(noise):
        m_star, _ = batch_posterior(X, y, np.zeros(d), np.eye(d), float(nv))
        assert rel(batched[i], m_star) <= 1e-10


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_float32_stays_finite_at_sigma0_100(name):
    rng = np.random.default_rng(19)
    d, n = 10, 500
    X = rotated_inputs(rng, d, n, 2).astype(np.float32)
    y = (rng.random(n) < 0.5).astype(np.float32)
    flt = FILTERS[name]()
    init = flt.init(jnp.zeros(d, jnp.float32), 1e4 * jnp.eye(d, dtype=jnp.float32))
    s, _ = jr.run(flt, init, X, y)
    assert s.mean.dtype == jnp.float32 and s.cov.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(s.mean))) and bool(jnp.all(jnp.isfinite(s.cov)))
    assert bool(jnp.all(s.cov == s.cov.T))
    assert float(jnp.min(jnp.linalg.eigvalsh(s.cov.astype(jnp.float64)))) > 0


def test_trace_records_only_what_is_asked():
    flt = FILTERS["implicit"]()
    rng = np.random.default_rng(20)
    X, y = logistic_data(rng, 3, 10)
    s, trace = jr.run(flt, flt.init(np.zeros(3), np.eye(3)), X, y)
    assert trace is None
    s, trace = jr.run(flt, flt.init(np.zeros(3), np.eye(3)), X, y, jr.trace_info)
    assert trace.residual.shape == (10,) and bool(jnp.all(trace.converged))


# ----------------------------------------------------------------------------- input checking


def test_input_errors_name_the_argument():
    flt = jr.rvga(jr.models.logistic())
    with pytest.raises(ValueError, match="cov must be a square"):
        flt.init(np.zeros(3), np.ones((3, 2)))
    with pytest.raises(ValueError, match="cov must be symmetric"):
        flt.init(np.zeros(2), np.array([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"cov must have shape \(3, 3\)"):
        flt.init(np.zeros(3), np.eye(2))
    state = flt.init(np.zeros(3), np.eye(3))
    with pytest.raises(ValueError, match=r"x must have shape \(3,\)"):
        flt.update(state, np.ones(4), 1.0)
    with pytest.raises(ValueError, match="y must contain labels in"):
        flt.update(state, np.ones(3), 2.0)
    with pytest.raises(ValueError, match="ys must contain labels in"):
        jr.run(flt, state, np.ones((5, 3)), np.array([0, 1, 2, 0, 1.0]))
    with pytest.raises(ValueError, match=r"xs must have shape \(T, 3\)"):
        jr.run(flt, state, np.ones((5, 4)), np.zeros(5))
    with pytest.raises(ValueError, match="unknown scheme"):
        jr.rvga(jr.models.logistic(), scheme="newton")
    with pytest.raises(ValueError, match="noise_var must be positive"):
        jr.models.linear_gaussian(-1.0)
    with pytest.raises(ValueError, match="process_noise must be >= 0"):
        jr.rvga(jr.models.logistic(), process_noise=-0.1)
    with pytest.raises(ValueError, match="key"):
        mc = jr.rvga(jr.models.nonlinear(lambda th, x: x @ th), "sampled")
        mc.update(mc.init(np.zeros(3), np.eye(3)), np.ones(3), 0.0)


def test_process_noise_is_fading_memory():
    """With Q_t = eta P_{t-1}, the Kalman filter equals batch weighted least squares with
    weights (1 + eta)^-(N - t) and prior precision scaled by (1 + eta)^-N."""
    rng = np.random.default_rng(21)
    d, n, eta = 3, 30, 0.05
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n)
    flt = jr.rvga(jr.models.linear_gaussian(1.0), process_noise=eta)
    s, _ = jr.run(flt, flt.init(np.zeros(d), np.eye(d)), X, y)
    w = (1 + eta) ** -(n - 1 - np.arange(n))
    prec = np.eye(d) * (1 + eta) ** -n + X.T @ (X * w[:, None])
    assert rel(s.cov, np.linalg.inv(prec)) <= 1e-10
    assert rel(s.mean, np.linalg.solve(prec, X.T @ (w * y))) <= 1e-10


def test_analytic_jacobian_of_the_implicit_equations_equals_autodiff():
    rng = np.random.default_rng(22)
    for _ in range(50):
        a0, nu0, y = rng.normal(0, 10), 10 ** rng.uniform(-3, 3), float(rng.integers(0, 2))
        a, log_nu = rng.normal(0, 10), rng.uniform(-5, 5)
        F, J = implicit.residuals_and_jacobian(a, log_nu, a0, nu0, y)
        Fref = lambda z: jnp.stack(implicit.residuals(z[0], jnp.exp(z[1]), a0, nu0, y))
        np.testing.assert_allclose(F, Fref(jnp.array([a, log_nu])), rtol=1e-12, atol=1e-12 * (1 + nu0))
        np.testing.assert_allclose(J, jax.jacfwd(Fref)(jnp.array([a, log_nu])), rtol=1e-9, atol=1e-12 * (1 + nu0))
