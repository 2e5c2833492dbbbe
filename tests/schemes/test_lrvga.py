"""L-RVGA ([LRVGA] §3-4): oracles against dense filters, sampling schemes, memory, transforms.

Oracle tests: with an exact precision stage (the FA
step replaced by an exact update, p = d) every scheme must equal its dense R-VGA
counterpart; the update of every limited-memory filter is traced at d = 20,000 to show
that no d x d intermediate exists. float64 unless stated.
"""
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jex_core
from jax.flatten_util import ravel_pytree

import jaxrvga as jr
from jaxrvga.baselines import fa_filters
from jaxrvga.kernels import factor_analysis as fa
from jaxrvga.baselines import batch_fa
from jaxrvga import models
from jaxrvga.kernels import lowrank
from jaxrvga.core import run
from jaxrvga.kernels.root_solvers import solve_logistic
from jaxrvga import lrvga
from jaxrvga.kernels.special import probit_k, sig1, sigmoid

from conftest import lowrank_variants, outer, rel, with_fa_step


def rotated_inputs(d, N, c=1.0, seed=0):
    """x_t ~ N(0, Q diag(1/i^c) Q^T), Q a random rotation ([LRVGA] eq. 48)."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    v = 1.0 / np.arange(1, d + 1) ** c
    X = rng.normal(size=(N, d)) * np.sqrt(v) @ Q.T
    return X, rng


def linear_data(d, N, sigma=1.0, seed=0):
    X, rng = rotated_inputs(d, N, seed=seed)
    theta = rng.uniform(-1, 1, d)
    theta /= np.linalg.norm(theta)
    return X, X @ theta + sigma * rng.normal(size=N)


def logistic_data(d, N, seed=0):
    X, rng = rotated_inputs(d, N, seed=seed)
    X *= 3.0
    theta = rng.normal(size=d)
    return X, (rng.uniform(size=N) < 1 / (1 + np.exp(-X @ theta))).astype(float)


def exact_fa(W, psi, X):
    """Exact precision stage (p = d): W_new W_new^T + Psi = W W^T + Psi + X X^T."""
    X = X[:, None] if X.ndim == 1 else X
    return jnp.linalg.cholesky(W @ W.T + X @ X.T), psi


def dense_precision(state):
    return np.asarray(lowrank.to_dense_precision(state.W, state.psi))


# --------------------------------------------------------------------------- p = d vs the Kalman filter


@pytest.mark.parametrize("process_noise", [None, 0.05])
def test_exact_precision_stage_reproduces_kalman_filter(process_noise):
    d, N, nv = 20, 200, 1.0
    X, y = linear_data(d, N)
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), d, d, 1.0, eps=1e-8)
    flt = with_fa_step(lrvga(models.linear_gaussian(nv), rank=d, process_noise=process_noise), exact_fa)
    state, _ = run(flt, flt.init(jnp.zeros(d), W0, psi0), X, y)

    # dense Kalman filter (covariance form, [RVGA] eqs. 40-42) with P_{t|t-1} = (1 + eta) P_{t-1}
    P = np.linalg.inv(np.asarray(W0 @ W0.T) + np.diag(np.asarray(psi0)))
    mu = np.zeros(d)
    for x, yt in zip(X, y):
        P = (1 + (process_noise or 0.0)) * P
        Px = P @ x
        gain = Px / (nv + x @ Px)
        mu = mu + gain * (yt - x @ mu)
        P = P - np.outer(gain, Px)
    assert rel(state.mean, mu) <= 1e-10
    assert rel(dense_precision(state), np.linalg.inv(P)) <= 1e-10
    if process_noise is None:  # = the batch posterior ([RVGA] Thm 2)
        Lam0 = np.asarray(W0 @ W0.T) + np.diag(np.asarray(psi0))
        Lam_N = Lam0 + X.T @ X / nv
        assert rel(dense_precision(state), Lam_N) <= 1e-10
        assert rel(state.mean, np.linalg.solve(Lam_N, X.T @ y / nv)) <= 1e-10


def test_p_equal_d_precision_kl_decreases_with_inner_loops():
    d, N = 20, 200
    X, y = linear_data(d, N)
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), d, d, 1.0, eps=1e-8)
    Lam_kf = np.asarray(W0 @ W0.T) + np.diag(np.asarray(psi0)) + X.T @ X
    kls = []
    for n_in in (1, 3, 10, 100):
        flt = lrvga(models.linear_gaussian(1.0), rank=d, inner_loops=n_in, published=True)
        state, _ = run(flt, flt.init(jnp.zeros(d), W0, psi0), X, y)
        kls.append(float(batch_fa.fa_kl(jnp.asarray(Lam_kf), state.W, state.psi)))
    assert np.all(np.diff(kls) < 0), kls
    assert kls[-1] < 1e-2, kls


# --------------------------------------------------------------------------- GLM oracles


@partial(jax.jit, static_argnums=(0, 5))
def dense_logistic(scheme, mu, P, x, y, cov_twice=False):
    """Dense R-VGA for logistic regression: B5 (implicit), B6 (explicit), B9 (extragrad)."""
    Px = P @ x
    nu0, a0 = x @ Px, x @ mu
    if scheme == "implicit":
        alpha, nu, _ = solve_logistic(a0, nu0, y)
        k = probit_k(nu)
        return mu + Px * (y - sigmoid(k * alpha)), P - jnp.outer(Px, Px) / (1 / (k * sig1(k * alpha)) + nu0)
    k = probit_k(nu0)
    Phat = P - jnp.outer(Px, Px) / (1 / (k * sig1(k * a0)) + nu0)
    muhat = mu + Phat @ x * (y - sigmoid(k * a0))
    if scheme == "explicit":
        return muhat, Phat
    kh, ah = probit_k(x @ Phat @ x), x @ muhat
    if cov_twice:
        Phat = P - jnp.outer(Px, Px) / (1 / (kh * sig1(kh * ah)) + nu0)
    return mu + Phat @ x * (y - sigmoid(kh * ah)), Phat


@pytest.mark.parametrize("scheme,cov_twice", [("implicit", False), ("explicit", False),
                                              ("extragrad", False), ("extragrad", True)])
def test_logistic_schemes_with_exact_precision_stage_equal_dense_rvga(scheme, cov_twice):
    d, N = 8, 60
    X, y = logistic_data(d, N, seed=1)
    W0, psi0 = lowrank.init_factors_plain(jax.random.PRNGKey(1), d, d, 4.0, scale=1e-2)
    twice = {"update_cov_twice": cov_twice} if scheme == "extragrad" else {}
    flt = with_fa_step(lrvga(models.logistic(), rank=d, scheme=scheme, published=True, **twice), exact_fa)
    state, info = run(flt, flt.init(jnp.zeros(d), W0, psi0), X, y, trace_fn=jr.trace_info)
    mu = np.zeros(d)
    P = np.linalg.inv(np.asarray(W0 @ W0.T) + np.diag(np.asarray(psi0)))
    for x, yt in zip(X, y):
        mu, P = dense_logistic(scheme, mu, P, x, yt, cov_twice)
    assert rel(state.mean, mu) <= 1e-10
    assert rel(dense_precision(state), np.linalg.inv(P)) <= 1e-10
    assert bool(jnp.all(info.converged))


def test_poisson_glm_explicit_equals_dense_explicit_rvga():
    """GLMs through model.glm_moments: Poisson, exact Gaussian moments ([RVGA] eqs. 30-31)."""
    d, N = 5, 40
    X, _ = rotated_inputs(d, N, seed=2)
    y = np.random.default_rng(3).poisson(np.exp(0.3 * X.sum(1)))
    W0, psi0 = lowrank.init_factors_plain(jax.random.PRNGKey(2), d, d, 1.0)
    flt = with_fa_step(lrvga(models.poisson(), rank=d, scheme="explicit"), exact_fa)
    state, _ = run(flt, flt.init(jnp.zeros(d), W0, psi0), X, y)
    mu = np.zeros(d)
    Lam = np.asarray(W0 @ W0.T) + np.diag(np.asarray(psi0))
    for x, yt in zip(X, y):
        rate = np.exp(x @ mu + 0.5 * x @ np.linalg.solve(Lam, x))
        Lam = Lam + rate * np.outer(x, x)
        mu = mu + np.linalg.solve(Lam, x) * (yt - rate)
    assert rel(state.mean, mu) <= 1e-10 and rel(dense_precision(state), Lam) <= 1e-10


@pytest.mark.parametrize("kind", ["logistic", "nonlinear"])
def test_ekf_scheme_with_exact_precision_stage_equals_dense_ekf(kind):
    """D5 linearised L-RVGA with an exact FA stage = the full-covariance EKF ([RVGA] eqs. 54-55, 81)."""
    d, N, eta = 6, 40, 0.02
    X, y = logistic_data(d, N, seed=6)
    if kind == "logistic":
        model = models.logistic()
    else:  # vector output, Gaussian family: eta = (x^T th, tanh(x^T th))
        model = models.nonlinear(lambda th, x: jnp.stack([x @ th, jnp.tanh(x @ th)]), models.gaussian(0.5))
        y = np.stack([y, y], axis=1)
    W0, psi0 = lowrank.init_factors_plain(jax.random.PRNGKey(4), d, d, 2.0)
    flt = with_fa_step(lrvga(model, rank=d, scheme="ekf", process_noise=eta), exact_fa)
    state, _ = run(flt, flt.init(jnp.zeros(d), W0, psi0), X, y)
    ref = jr.ekf(model, process_noise=eta)
    cov0 = lowrank.to_dense_covariance(W0, psi0)
    ref_state, _ = run(ref, ref.init(jnp.zeros(d), cov0), X, y)
    assert rel(state.mean, ref_state.mean) <= 1e-10
    assert rel(dense_precision(state), jnp.linalg.inv(ref_state.cov)) <= 1e-10


def test_ekf_scheme_on_linear_gaussian_equals_exact_scheme():
    d, p = 12, 3
    X, y = linear_data(d, 30, seed=7)
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(5), d, p, 1.0, eps=1e-3)
    out = []
    for scheme in ("exact", "ekf"):
        flt = lrvga(models.linear_gaussian(0.8), rank=p, inner_loops=2, scheme=scheme)
        out.append(run(flt, flt.init(jnp.zeros(d), W0, psi0), X, y)[0])
    assert rel(out[1].mean, out[0].mean) <= 1e-12 and rel(outer(out[1].W), outer(out[0].W)) <= 1e-12
    assert rel(out[1].psi, out[0].psi) <= 1e-12


# --------------------------------------------------------------------------- sampled scheme (D4)


def antithetic(key, K, d, p):
    kz, ke = jax.random.split(key)
    z, e = jax.random.normal(kz, (K, d)), jax.random.normal(ke, (K, p))
    return jnp.vstack([z, -z]), jnp.vstack([e, -e])


def _assert_replay_matches(state, step, W0, psi0, xs, ys):
    """Replay ``step(mu, W, psi, x, y)`` (the authors' code written out) from ``(0, W0, psi0)`` over
    the stream: the filter's final ``state`` must match it (rel <= 1e-10)."""
    mu, W, psi = jnp.zeros(W0.shape[0]), W0, psi0
    for x, yt in zip(xs, ys):
        mu, W, psi = step(mu, W, psi, x, yt)
    assert rel(state.W, W) <= 1e-10 and rel(state.psi, psi) <= 1e-10
    assert rel(state.mean, mu) <= 1e-10


def test_sampled_linear_gaussian_with_antithetic_noise_equals_hand_computed_extragradient():
    """A linear h: the GGN stage equals Algorithm 1 on x/sigma, and the sample means are exact."""
    d, p, N, nv, n_in = 15, 3, 25, 0.5, 2
    X, y = linear_data(d, N, sigma=np.sqrt(nv), seed=4)
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(3), d, p, 1.0, eps=1e-3)
    z, e = antithetic(jax.random.PRNGKey(4), 3, d, p)
    model = models.nonlinear(lambda th, x: x @ th, models.gaussian(nv))
    flt = lrvga(model, rank=p, inner_loops=n_in, scheme="sampled", frozen_draws=(z, e), published=True)
    state, _ = run(flt, flt.init(jnp.zeros(d), W0, psi0), X, y)
    @jax.jit
    def step(mu, W, psi, x, yt):
        W, psi = fa.recursive_em_step(W, psi, x / np.sqrt(nv), 1.0, 1.0, n_in)
        Phx = lowrank.solve(W, psi, x)
        muhat = mu + Phx * (yt - x @ mu) / nv  # eq. 144
        return mu + Phx * (yt - x @ muhat) / nv, W, psi  # eq. 145

    _assert_replay_matches(state, step, W0, psi0, X, y)


def test_sampled_logistic_with_given_noise_equals_authors_code_d4():
    """LargeScaleRVGALogRegSampled2 (extragrad, skip cov, frozen noise) written out by hand."""
    d, p, K, N = 12, 3, 7, 30
    X, y = logistic_data(d, N, seed=5)
    W0, psi0 = lowrank.init_factors_plain(jax.random.PRNGKey(5), d, p, 4.0, scale=1e-2)
    kz, ke = jax.random.split(jax.random.PRNGKey(6))
    z, e = jax.random.normal(kz, (K, d)), jax.random.normal(ke, (K, p))
    flt = lrvga(models.logistic(), rank=p, scheme="sampled", frozen_draws=(z, e), published=True)
    state, _ = run(flt, flt.init(jnp.zeros(d), W0, psi0), X, y)
    @jax.jit
    def step(mu, W, psi, x, yt):
        a = lowrank.sample_from_draws(mu, W, psi, z, e) @ x
        m, c = jnp.mean(sigmoid(a)), jnp.mean(sig1(a))
        W, psi = fa.recursive_em_step(W, psi, x * jnp.sqrt(c), 1.0, 1.0, 1)
        Phx = lowrank.solve(W, psi, x)
        muhat = mu + (yt - m) * Phx
        m2 = jnp.mean(sigmoid(lowrank.sample_from_draws(muhat, W, psi, z, e) @ x))
        return mu + (yt - m2) * Phx, W, psi

    _assert_replay_matches(state, step, W0, psi0, X, y)


@pytest.mark.parametrize("n_eta,d", [(2, 6), (8, 3)])  # reverse-mode and forward-mode Jacobians
def test_sampled_vector_output_and_pytree_input(n_eta, d):
    p, nv, N = 2, 0.7, 10
    rng = np.random.default_rng(7)
    xs = {"A": rng.normal(size=(N, n_eta, d))}
    ys = rng.normal(size=(N, n_eta))
    z, e = antithetic(jax.random.PRNGKey(8), 2, d, p)
    model = models.nonlinear(lambda th, x: x["A"] @ th, models.gaussian(nv))
    flt = lrvga(model, rank=p, scheme="sampled", frozen_draws=(z, e), published=True)
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(9), d, p, 1.0, eps=1e-2)
    state, _ = run(flt, flt.init(jnp.zeros(d), W0, psi0), xs, ys)
    @jax.jit
    def step(mu, W, psi, A, yt):
        W, psi = fa.recursive_em_step(W, psi, A.T / np.sqrt(nv), 1.0, 1.0, 1)
        muhat = mu + lowrank.solve(W, psi, A.T @ (yt - A @ mu)) / nv
        return mu + lowrank.solve(W, psi, A.T @ (yt - A @ muhat)) / nv, W, psi

    _assert_replay_matches(state, step, W0, psi0, xs["A"], ys)


def test_frozen_draws_reuses_the_same_draws_and_fresh_noise_splits_the_key():
    d, p, K = 10, 2, 5
    X, y = logistic_data(d, 6, seed=8)
    W0, psi0 = lowrank.init_factors_plain(jax.random.PRNGKey(0), d, p, 1.0)
    key = jax.random.PRNGKey(11)
    frozen = lrvga(models.logistic(), rank=p, scheme="sampled", num_samples=K, frozen_draws=True, published=True)
    kz, ke = jax.random.split(key)  # the draws lowrank.sample(key, ...) makes
    given = lrvga(models.logistic(), rank=p, scheme="sampled",
                  frozen_draws=(jax.random.normal(kz, (K, d)), jax.random.normal(ke, (K, p))), published=True)
    s1, _ = run(frozen, frozen.init(jnp.zeros(d), W0, psi0, key), X, y)
    s2, _ = run(given, given.init(jnp.zeros(d), W0, psi0), X, y)
    assert rel(s1.mean, s2.mean) <= 1e-13 and rel(s1.W, s2.W) <= 1e-13
    assert bool(jnp.all(s1.key == key))
    fresh = lrvga(models.logistic(), rank=p, scheme="sampled", num_samples=K, published=True)
    s3, _ = run(fresh, fresh.init(jnp.zeros(d), W0, psi0, key), X, y)
    assert not bool(jnp.all(s3.key == key)) and rel(s3.mean, s1.mean) > 1e-6


def test_mlp_pytree_parameters_with_unravel():
    """A 2-layer MLP over a parameter pytree: unravel gives the same filter as a flat h."""
    din, hidden = 3, 4
    params = {"W1": jnp.zeros((din, hidden)), "b1": jnp.zeros(hidden), "w2": jnp.zeros(hidden),
              "b2": jnp.zeros(())}
    flat, unravel = ravel_pytree(params)
    d, p = flat.shape[0], 3

    def mlp(prm, x):
        return jnp.tanh(x @ prm["W1"] + prm["b1"]) @ prm["w2"] + prm["b2"]

    def mlp_flat(th, x):  # the same network written on the flat vector by hand
        prm = unravel(th)
        return mlp(prm, x)

    rng = np.random.default_rng(9)
    X = rng.normal(size=(80, din))
    y = (X[:, 0] * X[:, 1] > 0).astype(float)
    W0, psi0 = lowrank.init_factors_plain(jax.random.PRNGKey(0), d, p, 1.0, scale=0.1)
    mean0 = 0.3 * jax.random.normal(jax.random.PRNGKey(1), (d,))
    key = jax.random.PRNGKey(2)
    a = lrvga(models.nonlinear(mlp, models.bernoulli(), unravel=unravel), rank=p, scheme="sampled", num_samples=8)
    b = lrvga(models.nonlinear(mlp_flat, models.bernoulli()), rank=p, scheme="sampled", num_samples=8)
    sa, _ = run(a, a.init(mean0, W0, psi0, key), X, y)
    sb, _ = run(b, b.init(mean0, W0, psi0, key), X, y)
    assert rel(sa.mean, sb.mean) <= 1e-12 and rel(sa.psi, sb.psi) <= 1e-12
    assert bool(jnp.all(jnp.isfinite(sa.mean))) and bool(jnp.all(sa.psi > 0))
    assert rel(sa.mean, mean0) > 1e-3  # it learned something
    assert int(sa.step) == 80


# --------------------------------------------------------------------------- memory: no d x d


def _subjaxprs(params):
    for v in params.values():
        for item in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(item, jex_core.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, jex_core.Jaxpr):
                yield item


def _big_vars(jaxpr, d):
    """Every variable (recursively, inside scan/while/cond/pjit) with two dimensions >= d."""
    bad = []
    variables = list(jaxpr.invars) + list(jaxpr.constvars)
    for eqn in jaxpr.eqns:
        variables += list(eqn.outvars)
        for sub in _subjaxprs(eqn.params):
            bad += _big_vars(sub, d)
    for v in variables:
        shape = getattr(v.aval, "shape", ())
        if sum(s >= d for s in shape) >= 2:
            bad.append((str(v), shape))
    return bad


def _abstract(tree):
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), tree)


@pytest.mark.parametrize("name", list(lowrank_variants(5)))
def test_jaxpr_of_lrvga_update_has_no_d_by_d_intermediate(name):
    d, p = 20_000, 5
    flt = lowrank_variants(5)[name]
    state = jr.LowRankState(jnp.zeros(d), jnp.zeros((d, p)), jnp.ones(d), jnp.asarray(0, jnp.int32),
                            jr.core.solver_info(jnp.float64),
                            jax.random.PRNGKey(0) if name.startswith("sampled") else None)
    jaxpr = jax.make_jaxpr(flt.update)(_abstract(state), jax.ShapeDtypeStruct((d,), jnp.float64),
                                       jax.ShapeDtypeStruct((), jnp.float64))
    assert len(jaxpr.jaxpr.eqns) > 10
    assert _big_vars(jaxpr.jaxpr, d) == []


@pytest.mark.parametrize("name", ["rec_cov", "rec_prec", "rec_fading", "online_paper", "online_code"])
def test_jaxpr_of_fa_filters_has_no_d_by_d_intermediate(name):
    d, p = 20_000, 5
    flt = {"rec_cov": fa_filters.recursive_em(2, "covariance"), "rec_prec": fa_filters.recursive_em(1, "precision"),
           "rec_fading": fa_filters.recursive_em(3, "precision", process_noise=0.1),
           "online_paper": fa_filters.online_fa_em(num_steps=100), "online_code": fa_filters.online_fa_em(averaging="code")}[name]
    W = jax.ShapeDtypeStruct((d, p), jnp.float64)
    psi = jax.ShapeDtypeStruct((d,), jnp.float64)
    state = jax.eval_shape(lambda W, psi: flt.init(W, psi), W, psi) if name.startswith("online") \
        else fa_filters.FAState(W, psi, jax.ShapeDtypeStruct((), jnp.int32))
    jaxpr = jax.make_jaxpr(flt.update)(state, jax.ShapeDtypeStruct((d,), jnp.float64), None)
    assert _big_vars(jaxpr.jaxpr, d) == []


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_default_update_memory_at_a_blocked_size(model):
    """The default L-RVGA update with 3 EM loops at a blocked size (compiled only, state donated):
    ``W`` and ``psi`` are written into the donated state and XLA's own account of the temporaries
    stays under ``inner_loops + 6`` d-vectors: those of the projection's kernel
    (``test_recursive_em_step_memory``: ``Diag(S)``, one ``psi`` per pass, the new ``psi``), the
    pending column ``x sqrt(c)``, the copy of it that the row-block loop takes, the new mean, and
    block-sized temporaries (under one d-vector). Two more were held before: the new mean returned
    by the guard's conditional (copied into its result) and the guard's ``where`` on ``x``, which
    XLA materialised once per shape it is read in (``jaxrvga.guard._zero_unless``)."""
    from jaxrvga.kernels import row_blocks

    d, p, loops = 1 << 19, 8, 3
    assert row_blocks.num_blocks(d, p) > 1 and d >= jr.guard.CLEAN_BY_COND_MIN_ELEMENTS
    flt = jr.lrvga(models.linear_gaussian(1.0) if model == "linear" else models.logistic(), rank=p,
                   inner_loops=loops)
    state = jax.eval_shape(lambda: flt.init(jnp.zeros(d), jnp.ones((d, p)), jnp.ones(d)))
    S = jax.ShapeDtypeStruct
    mem = jax.jit(flt.update, donate_argnums=0).lower(state, S((d,), jnp.float64), S((), jnp.float64)) \
        .compile().memory_analysis()
    assert mem.alias_size_in_bytes >= 8 * d * (p + 2)  # mean, W and psi are written into the state
    assert mem.temp_size_in_bytes < (loops + 6) * d * 8


def test_big_var_detector_catches_a_dense_matrix():
    d = 20_000
    jaxpr = jax.make_jaxpr(lambda x: jnp.sum(jnp.outer(x, x) @ x))(jax.ShapeDtypeStruct((d,), jnp.float32))
    assert _big_vars(jaxpr.jaxpr, d)
    inner = jax.make_jaxpr(lambda x: jax.lax.fori_loop(0, 2, lambda i, v: jnp.outer(v, v) @ v, x))(
        jax.ShapeDtypeStruct((d,), jnp.float32))
    assert _big_vars(inner.jaxpr, d)


# --------------------------------------------------------------------------- transforms and dtypes


def _setup(scheme, d=10, p=3, seed=0):
    model = models.linear_gaussian(1.0) if scheme == "exact" else models.logistic()
    flt = lrvga(model, rank=p, inner_loops=2, scheme=scheme,
                num_samples=4 if scheme == "sampled" else None)
    X, y = (linear_data if scheme == "exact" else logistic_data)(d, 30, seed=seed)
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(seed), d, p, 2.0, eps=1e-3)
    state = flt.init(jnp.zeros(d), W0, psi0, jax.random.PRNGKey(seed + 100))
    return flt, state, X, y


@pytest.mark.parametrize("scheme", ["exact", "implicit", "explicit", "extragrad", "sampled"])
def test_vmap_over_independent_filters_equals_loop(scheme):
    setups = [_setup(scheme, seed=s) for s in range(3)]
    flt = setups[0][0]
    states = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *[s[1] for s in setups])
    XS = jnp.stack([s[2] for s in setups])
    YS = jnp.stack([s[3] for s in setups])
    batched = jax.vmap(lambda st, xs, ys: run(flt, st, xs, ys)[0])(states, XS, YS)
    for i, (_, st, X, y) in enumerate(setups):
        single, _ = run(flt, st, X, y)
        assert rel(batched.mean[i], single.mean) <= 1e-12
        assert rel(outer(batched.W[i]), outer(single.W)) <= 1e-12
        assert rel(batched.psi[i], single.psi) <= 1e-12


@pytest.mark.parametrize("scheme", ["exact", "implicit", "explicit", "extragrad", "sampled"])
def test_jit_equals_eager(scheme):
    flt, state, X, y = _setup(scheme)
    with jax.disable_jit():
        eager = flt.update(flt.update(state, X[0], y[0]), X[1], y[1])
    jitted = jax.jit(flt.update)(jax.jit(flt.update)(state, X[0], y[0]), X[1], y[1])
    assert rel(jitted.mean, eager.mean) <= 1e-12 and rel(outer(jitted.W), outer(eager.W)) <= 1e-12
    assert rel(jitted.psi, eager.psi) <= 1e-12


@pytest.mark.parametrize("scheme", ["exact", "implicit", "explicit", "extragrad", "sampled"])
def test_float32_long_stream_stays_finite(scheme):
    d, p, N = 30, 4, 2000
    model = models.linear_gaussian(1.0) if scheme == "exact" else models.logistic()
    flt = lrvga(model, rank=p, scheme=scheme, num_samples=4 if scheme == "sampled" else None)
    X, y = (linear_data if scheme == "exact" else logistic_data)(d, N, seed=3)
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), d, p, 1.0, eps=1e-3, dtype=jnp.float32)
    state = flt.init(jnp.zeros(d, jnp.float32), W0, psi0, jax.random.PRNGKey(1))
    state, _ = run(flt, state, X.astype(np.float32), y.astype(np.float32))
    assert state.mean.dtype == jnp.float32 and state.W.dtype == jnp.float32
    for leaf in (state.mean, state.W, state.psi):
        assert bool(jnp.all(jnp.isfinite(leaf)))
    assert bool(jnp.all(state.psi > 0))


# --------------------------------------------------------------------------- validation


def test_input_validation():
    d, p = 6, 2
    W0, psi0 = lowrank.init_factors_plain(jax.random.PRNGKey(0), d, p, 1.0)
    lin = lrvga(models.linear_gaussian(1.0), rank=p)
    st = lin.init(jnp.zeros(d), W0, psi0)
    with pytest.raises(ValueError, match=r"x must have shape \(6,\)"):
        lin.update(st, jnp.ones(d + 1), 0.0)
    with pytest.raises(ValueError, match="W must have shape"):
        lin.init(jnp.zeros(d), W0[:, :1], psi0)
    with pytest.raises(ValueError, match="psi must have shape"):
        lin.init(jnp.zeros(d), W0, psi0[:-1])
    with pytest.raises(ValueError, match="psi must be positive"):
        lin.init(jnp.zeros(d), W0, psi0.at[0].set(0.0))
    with pytest.raises(ValueError, match="rank must be a positive"):
        lrvga(models.linear_gaussian(1.0), rank=0)
    with pytest.raises(ValueError, match="rank must satisfy"):
        lrvga(models.linear_gaussian(1.0), rank=d + 1).init(jnp.zeros(d), jnp.zeros((d, d + 1)), psi0)
    with pytest.raises(ValueError, match="scheme"):
        lrvga(models.logistic(), rank=p, scheme="newton")
    with pytest.raises(ValueError, match="scheme"):
        lrvga(models.poisson(), rank=p, scheme="qkf")
    with pytest.raises(ValueError, match="inner_loops"):
        lrvga(models.logistic(), rank=p, inner_loops=0, published=True)
    with pytest.raises(ValueError, match="inner_loops"):
        lrvga(models.logistic(), rank=p, inner_loops=-1)
    with pytest.raises(ValueError, match="num_samples"):
        lrvga(models.logistic(), rank=p, scheme="explicit", num_samples=3)
    with pytest.raises(ValueError, match="process_noise"):
        lrvga(models.logistic(), rank=p, process_noise=-0.1)
    with pytest.raises(ValueError, match="key is required"):
        lrvga(models.logistic(), rank=p, scheme="sampled").init(jnp.zeros(d), W0, psi0)
    log = lrvga(models.logistic(), rank=p)
    st = log.init(jnp.zeros(d), W0, psi0)
    with pytest.raises(ValueError, match="labels"):
        log.update(st, jnp.ones(d), 2.0)
    with pytest.raises(ValueError, match="labels"):
        run(log, st, jnp.ones((3, d)), jnp.array([0.0, 1.0, 0.5]))
