"""The one filter layer: beliefs x schemes.

* Oracle: the low-rank belief at full rank follows the dense belief, scheme by scheme (the
  default projection is exact when ``rank(L) <= p``), and both equal the exact posterior of a
  linear-Gaussian model, one observation or a minibatch at a time.
* Below full rank the default projection is far closer to the posterior than the published one.
* Multi-class: the categorical EKF with logits ``(0, x^T theta)`` is the logistic EKF.
* Same options, defaults and errors for both beliefs; skip-and-flag on non-finite input.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from conftest import outer, run_together

D = 6


def full_rank_factors(P0):
    """``(W, psi)`` with ``W W^T + diag(psi) = P0^{-1}`` exactly, ``W`` square."""
    prec = np.linalg.inv(np.asarray(P0))
    psi = np.full(prec.shape[0], 0.5 * np.linalg.eigvalsh(prec)[0])
    return jnp.asarray(np.linalg.cholesky(prec - np.diag(psi))), jnp.asarray(psi)


def logistic_data(T=100, d=D, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, d))
    y = (rng.random(T) < 1 / (1 + np.exp(-X @ rng.normal(size=d)))).astype(float)
    return jnp.asarray(X), jnp.asarray(y)


def updates_together(*steps):
    """``flt.update(state, x, y)`` of each ``(flt, state, x, y)`` of ``steps``, all in one compiled
    program (one compilation instead of one per filter)."""
    filters = [flt for flt, *_ in steps]
    together = jax.jit(lambda data: [flt.update(*args) for flt, args in zip(filters, data)])
    return together([tuple(args) for _, *args in steps])


def dense_cov(state):
    return np.asarray(jr.kernels.lowrank.to_dense_covariance(state.W, state.psi))


def run_both(model, scheme, X, y, P0, key=None, **kw):
    """The dense filter and the low-rank one at full rank from the same prior: their final states and
    mean trajectories ``(a, ta, b, tb)``."""
    dense = jr.rvga(model, scheme, **kw)
    low = jr.lrvga(model, rank=X.shape[-1], scheme=scheme, **kw)
    W0, psi0 = full_rank_factors(P0)
    mu0 = jnp.zeros(X.shape[-1])
    (a, ta), (b, tb) = run_together((dense, dense.init(mu0, P0, key=key), X, y),
                                    (low, low.init(mu0, W0, psi0, key=key), X, y), trace_fn=jr.trace_mean)
    return a, ta, b, tb


@pytest.mark.parametrize("scheme", ["implicit", "explicit", "extragrad", "ekf", "qkf"])
def test_low_rank_at_full_rank_follows_the_dense_filter(scheme):
    """lrvga(rank=d) and rvga give the same trajectory (1e-8) for every scheme of the logistic model."""
    X, y = logistic_data()
    P0 = 2.0 * jnp.eye(D)
    a, ta, b, tb = run_both(jr.models.logistic(), scheme, X, y, P0)
    scale = float(jnp.max(jnp.abs(ta)))
    np.testing.assert_allclose(tb, ta, rtol=0, atol=1e-8 * scale)
    np.testing.assert_allclose(dense_cov(b), a.cov, rtol=0, atol=1e-8 * float(jnp.max(a.cov)))
    assert bool(a.info.converged) and bool(b.info.converged)
    assert float(b.info.dropped) < 1e-10


@pytest.mark.parametrize("scheme", ["sampled", "ekf"])
def test_low_rank_at_full_rank_follows_the_dense_filter_nonlinear(scheme):
    """A linear-Gaussian model written as ``nonlinear``: GGN and the antithetic sample mean are exact,
    so both beliefs follow the Kalman filter."""
    rng = np.random.default_rng(1)
    X = jnp.asarray(rng.normal(size=(40, D)))
    y = X @ jnp.asarray(rng.normal(size=D)) + jnp.asarray(rng.normal(size=40))
    model = jr.models.nonlinear(lambda th, x: x @ th)
    P0 = 3.0 * jnp.eye(D)
    a, ta, b, tb = run_both(model, scheme, X, y, P0, key=jax.random.PRNGKey(0))
    k, tk = jr.run(jr.kalman(1.0), jr.kalman(1.0).init(jnp.zeros(D), P0), X, y, trace_fn=jr.trace_mean)
    np.testing.assert_allclose(ta, tk, rtol=0, atol=1e-9)
    np.testing.assert_allclose(tb, tk, rtol=0, atol=1e-8)
    np.testing.assert_allclose(dense_cov(b), k.cov, rtol=0, atol=1e-8)


def exact_posterior(X, y, P0, noise_var=1.0):
    prec = np.linalg.inv(P0) + X.T @ X / noise_var
    cov = np.linalg.inv(prec)
    return cov @ (X.T @ y) / noise_var, cov


def correlated_linear(d=20, N=300, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d))
    X = rng.multivariate_normal(np.zeros(d), A @ A.T / d + 0.1 * np.eye(d), size=N)
    y = X @ rng.normal(size=d) + rng.normal(size=N)
    return X, y


@pytest.mark.parametrize("batch", [1, 5])
def test_full_rank_default_is_the_exact_posterior_one_by_one_and_in_minibatches(batch):
    X, y = correlated_linear(d=8, N=60)
    P0 = 9.0 * np.eye(8)
    m, P = exact_posterior(X, y, P0)
    xs, ys = X.reshape(-1, batch, 8), y.reshape(-1, batch)
    W0, psi0 = full_rank_factors(P0)
    low = jr.lrvga(jr.models.linear_gaussian(), rank=8)
    dense = jr.rvga(jr.models.linear_gaussian())
    (b, _), (a, _) = run_together((low, low.init(jnp.zeros(8), W0, psi0), xs, ys),
                                  (dense, dense.init(jnp.zeros(8), P0), xs, ys))
    for mean, cov in ((a.mean, a.cov), (b.mean, dense_cov(b))):
        np.testing.assert_allclose(mean, m, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(cov, P, rtol=1e-9, atol=1e-12)


def gaussian_kl(m, P, m_ref, P_ref):
    """KL(N(m, P) || N(m_ref, P_ref))."""
    prec = np.linalg.inv(P_ref)
    d = len(m)
    return 0.5 * (np.trace(prec @ P) + (m_ref - m) @ prec @ (m_ref - m) - d
                  + np.linalg.slogdet(P_ref)[1] - np.linalg.slogdet(P)[1])


@pytest.mark.parametrize("rank", [2, 5, 10])
def test_default_projection_is_far_closer_to_the_posterior_than_the_published_one(rank):
    """KL(q || exact posterior) at least 4x smaller than published=True on a correlated linear problem."""
    X, y = correlated_linear()
    d = X.shape[1]
    m, P = exact_posterior(X, y, 9.0 * np.eye(d))
    W0, psi0 = jr.kernels.lowrank.init_factors(jax.random.PRNGKey(0), d, rank, prior_var=9.0)
    filters = {published: jr.lrvga(jr.models.linear_gaussian(), rank=rank, published=published)
               for published in (False, True)}
    finals = run_together(*((flt, flt.init(jnp.zeros(d), W0, psi0), X, y) for flt in filters.values()))
    kls = {published: gaussian_kl(np.asarray(s.mean), dense_cov(s), m, P)
           for published, (s, _) in zip(filters, finals)}
    assert kls[False] * 4 <= kls[True], kls


def test_dropped_fraction_reports_when_the_rank_is_too_small():
    X, y = correlated_linear(d=10, N=30)
    W0, psi0 = jr.kernels.lowrank.init_factors(jax.random.PRNGKey(0), 10, 1, prior_var=1.0)
    flt = jr.lrvga(jr.models.linear_gaussian(), rank=1)
    s, dropped = jr.run(flt, flt.init(jnp.zeros(10), W0, psi0), X, y,
                        trace_fn=lambda st, x, y: st.info.dropped)
    assert np.all((np.asarray(dropped) >= 0) & (np.asarray(dropped) <= 1))
    assert float(np.max(dropped)) > 0.1  # rank 1 cannot hold a 10-dimensional posterior


def test_categorical_ekf_with_two_classes_is_the_logistic_ekf():
    """Logits (0, x^T theta): the categorical likelihood and full Fisher give the logistic EKF (both beliefs)."""
    X, y = logistic_data(T=50)
    model = jr.models.nonlinear(lambda th, x: jnp.stack([jnp.zeros((), th.dtype), x @ th]),
                                jr.models.categorical(2))
    P0 = 2.0 * jnp.eye(D)
    ref = jr.ekf(jr.models.logistic())
    r, tr = jr.run(ref, ref.init(jnp.zeros(D), P0), X, y, trace_fn=jr.trace_mean)
    a, ta, b, tb = run_both(model, "ekf", X, y.astype(jnp.int32), P0)
    np.testing.assert_allclose(ta, tr, rtol=0, atol=1e-10)
    np.testing.assert_allclose(tb, tr, rtol=0, atol=1e-8)


@pytest.mark.parametrize("scheme", ["exact", "implicit", "explicit", "extragrad", "ekf", "sampled"])
def test_a_minibatch_of_one_is_the_single_observation_update(scheme):
    model = jr.models.linear_gaussian(0.5)
    X, y = correlated_linear(d=D, N=5)
    for flt, state in ((jr.rvga(model, scheme), None), (jr.lrvga(model, rank=3, scheme=scheme), None)):
        if isinstance(flt.spec.belief, jr.beliefs.LowRank):  # init(mean, W, psi)
            W0, psi0 = jr.kernels.lowrank.init_factors(jax.random.PRNGKey(1), D, 3, prior_var=2.0)
            state = flt.init(jnp.zeros(D), W0, psi0, key=jax.random.PRNGKey(2))
        else:
            state = flt.init(jnp.zeros(D), 2.0 * jnp.eye(D), key=jax.random.PRNGKey(2))
        if scheme == "implicit":
            with pytest.raises(ValueError, match="one observation"):
                flt.update(state, X[:2], y[:2])
        (one, _), (batch, _) = run_together((flt, state, X, y), (flt, state, X[:, None, :], y[:, None]))
        np.testing.assert_allclose(batch.mean, one.mean, rtol=1e-12, atol=1e-12)


def test_same_options_and_errors_for_both_beliefs():
    model = jr.models.logistic()
    for make in (lambda **kw: jr.rvga(model, **kw), lambda **kw: jr.lrvga(model, rank=2, **kw)):
        with pytest.raises(ValueError, match="num_samples"):
            make(scheme="ekf", num_samples=5)
        with pytest.raises(ValueError, match="max_iter"):
            make(scheme="explicit", max_iter=5)
        with pytest.raises(ValueError, match="scheme"):
            make(scheme="exact")
        with pytest.raises(ValueError, match="process_noise"):
            make(process_noise=-1.0)
        with pytest.raises(ValueError, match="correction"):
            make(scheme="ekf", correction=True)
    with pytest.raises(ValueError, match="hessian"):
        jr.lrvga(jr.models.nonlinear(lambda th, x: x @ th), rank=2, curvature="hessian")


@pytest.mark.parametrize("scheme", ["exact", "explicit", "extragrad", "ekf", "sampled"])
def test_low_rank_skips_and_flags_non_finite_input(scheme):
    """A NaN or huge input keeps the (predicted) belief and sets converged = False."""
    model = jr.models.linear_gaussian()
    flt = jr.lrvga(model, rank=2, scheme=scheme)
    W0, psi0 = jr.kernels.lowrank.init_factors(jax.random.PRNGKey(1), D, 2, prior_var=2.0)
    state = flt.init(jnp.ones(D), W0, psi0, key=jax.random.PRNGKey(0))
    update = jax.jit(flt.update)  # one compiled update for both inputs (not one per operation)
    for x in (jnp.full(D, jnp.nan), jnp.full(D, 1e200)):
        new = update(state, x, 1.0)
        assert not bool(new.info.converged) and int(new.step) == 1
        for field in ("mean", "W", "psi"):
            np.testing.assert_array_equal(getattr(new, field), getattr(state, field))


@pytest.mark.parametrize("buffer", [0, 3])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_guard_sees_a_non_finite_curvature_column_through_the_bordered_gram(buffer, bad):
    """The guard checks a pending column ``X`` by the bordered whitened Gram (no pass over ``X``):
    a step whose only non-finite value is in ``X`` (the mean step finite) is skipped and flagged,
    and the same step with a finite ``X`` is taken (the control)."""
    from jaxrvga.beliefs import LowRank
    from jaxrvga.core import solver_info
    from jaxrvga.guard import _guarded
    belief = LowRank(rank=2, inner_loops=0, buffer=buffer)
    W0, psi0 = jr.kernels.lowrank.init_factors(jax.random.PRNGKey(1), D, 2, prior_var=2.0)
    prior = belief.init(jnp.ones(D), W0, psi0)
    for X, taken in ((jnp.ones((D, 1)).at[3, 0].set(bad), False), (jnp.ones((D, 1)), True)):
        new, ok = belief.add(prior, X, None)
        new = new._replace(mean=prior.mean + 0.1)  # a finite mean step
        out = jax.jit(lambda new, ok: _guarded(belief, prior, new, ok, solver_info(jnp.float64)))(new, ok)
        assert bool(out.info.converged) == taken and int(out.step) == 1
        np.testing.assert_array_equal(out.mean, new.mean if taken else prior.mean)
        if not taken:
            for field in ("W", "psi", "gram"):
                np.testing.assert_array_equal(getattr(out, field), getattr(prior, field))
        else:  # stored (buffer) or projected: the precision gained the column
            gained = jr.kernels.lowrank.to_dense_precision(out.W, out.psi) - jr.kernels.lowrank.to_dense_precision(prior.W, prior.psi)
            assert np.trace(np.asarray(gained)) > 0.5 * D


def test_published_option_keeps_the_papers_defaults():
    """published=True: one EM loop from W_{t-1}, no mirror-prox correction (experiments/REPORT.md)."""
    flt = jr.lrvga(jr.models.logistic(), rank=2, scheme="extragrad", published=True)
    spec = flt.spec
    assert type(spec.belief) is jr.beliefs.PublishedLowRank and spec.belief.inner_loops == 1
    assert not spec.scheme.cfg.correction and not spec.scheme.cfg.update_cov_twice
    assert spec.scheme.cfg.max_move is None
    default = jr.lrvga(jr.models.logistic(), rank=2, scheme="extragrad").spec
    assert default.scheme.cfg.correction and default.scheme.cfg.update_cov_twice
    assert type(default.belief) is jr.beliefs.LowRank and default.scheme.cfg.max_move == jr.schemes.MAX_MOVE


def test_categorical_minibatch_ekf_is_the_information_form_update():
    """Softmax regression, a minibatch of m = 3 observations: the EKF step adds sum_i J_i^T F_i J_i
    (full Fisher diag(p) - p p^T per observation) to the precision, exactly, in both beliefs."""
    d, K, m = 4, 3, 3
    rng = np.random.default_rng(0)
    X, y = jnp.asarray(rng.normal(size=(m, d))), jnp.asarray(rng.integers(0, K, size=m))
    model = jr.models.softmax_regression(d, K)
    mu = jnp.asarray(rng.normal(size=d * K)) * 0.3
    P0 = np.eye(d * K)
    prec, g = np.linalg.inv(P0), np.zeros(d * K)
    Js = jax.jit(jax.vmap(jax.jacfwd(model.predict), (None, 0)))(mu, X)  # one program (not one per operation)
    for i in range(m):
        J = np.asarray(Js[i])
        p = np.asarray(jax.nn.softmax(J @ np.asarray(mu)))
        prec += J.T @ (np.diag(p) - np.outer(p, p)) @ J
        g += J.T @ (np.eye(K)[int(y[i])] - p)
    cov = np.linalg.inv(prec)
    dense = jr.rvga(model, "ekf")
    low = jr.lrvga(model, rank=d * K, scheme="ekf")
    a, b = updates_together((dense, dense.init(mu, P0), X, y), (low, low.init(mu, *full_rank_factors(P0)), X, y))
    np.testing.assert_allclose(a.cov, cov, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.mean, mu + cov @ g, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.mean, mu + cov @ g, rtol=0, atol=1e-10)
    np.testing.assert_allclose(dense_cov(b), cov, rtol=0, atol=1e-10)


def test_explicit_row_blocks_give_the_same_filter():
    """block_rows only changes how the projection streams over W: blocked = unblocked (to rounding)."""
    d, p = 64, 3
    X, y = correlated_linear(d=d, N=20)
    W0, psi0 = jr.kernels.lowrank.init_factors(jax.random.PRNGKey(0), d, p, prior_var=1.0)
    flt = jr.lrvga(jr.models.linear_gaussian(), rank=p, inner_loops=2, block_rows=16)
    one = jr.filters.with_block_rows(flt, 0)
    (a, _), (b, _) = run_together((flt, flt.init(jnp.zeros(d), W0, psi0), X, y),
                                  (one, one.init(jnp.zeros(d), W0, psi0), X, y))
    np.testing.assert_allclose(outer(a.W), outer(b.W), rtol=0, atol=1e-12)  # W only up to a rotation
    np.testing.assert_allclose(a.psi, b.psi, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.mean, b.mean, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="lrvga"):
        jr.filters.with_block_rows(jr.ekf(jr.models.logistic()), 0)


def test_bad_inputs_raise_value_errors_naming_the_argument():
    dense = jr.rvga(jr.models.logistic())
    low = jr.lrvga(jr.models.logistic(), rank=2)
    st = dense.init(jnp.zeros(3), jnp.eye(3))
    with pytest.raises(ValueError, match="mean must be finite"):
        dense.init(jnp.array([0.0, jnp.nan, 0.0]), jnp.eye(3))
    with pytest.raises(ValueError, match="at least one entry"):
        dense.init(jnp.zeros(0), jnp.eye(0))
    with pytest.raises(ValueError, match="state must be a LowRankState"):
        low.update(st, jnp.ones(3), 1.0)
    with pytest.raises(ValueError, match="ragged"):
        jr.run(dense, st, [[1.0, 2.0, 3.0], [1.0, 2.0]], [0.0, 1.0])
    with pytest.raises(ValueError, match="leading"):
        jr.run(dense, st, jnp.array(1.0), jnp.array(1.0))
    nonlinear = jr.rvga(jr.models.nonlinear(lambda th, x: x @ th), "ekf")
    with pytest.raises(ValueError, match="y must be real"):
        nonlinear.update(nonlinear.init(jnp.zeros(3), jnp.eye(3)), jnp.ones(3), 1 + 2j)
    with pytest.raises(ValueError, match=r"y must have the shape \(\) of the model's output"):  # a scalar output, two labels
        nonlinear.update(nonlinear.init(jnp.zeros(3), jnp.eye(3)), jnp.ones(3), jnp.ones(2))
    # Lists of numbers are data: the same result as arrays.
    a, _ = jr.run(dense, st, [[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], [0.0, 1.0])
    b, _ = jr.run(dense, st, jnp.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]]), jnp.array([0.0, 1.0]))
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-13)


def test_hessian_curvature_on_a_non_log_concave_model_stays_finite_and_flags():
    """A bimodal likelihood: -E[hess] can be indefinite, so some steps cannot be applied. They are
    skipped and flagged (the dense belief stays finite and positive definite), never NaN."""
    from jaxrvga.models import Family

    def log_prob(y, eta):
        return jnp.logaddexp(-0.5 * (y - eta - 3.0) ** 2, -0.5 * (y - eta + 3.0) ** 2)

    ones = jnp.ones_like
    family = Family("bimodal", log_prob, lambda e: e, ones, ones, lambda name, y: y)
    flt = jr.rvga(jr.models.nonlinear(lambda th, x: x @ th, family), "sampled", curvature="hessian",
                  num_samples=10)
    rng = np.random.default_rng(0)
    X, y = jnp.asarray(rng.normal(size=(20, 3))), jnp.asarray(3.0 * rng.normal(size=20))
    s, info = jr.run(flt, flt.init(jnp.zeros(3), 10.0 * jnp.eye(3), key=jax.random.PRNGKey(0)), X, y,
                     trace_fn=jr.trace_info)
    assert bool(jnp.all(jnp.isfinite(s.mean))) and np.linalg.eigvalsh(np.asarray(s.cov))[0] > 0
    assert int(jnp.sum(~info.converged)) > 0


def test_mean_rows_is_the_mean_of_the_rows():
    """``schemes.mean_rows`` (the sampled site's mean gradient, written as a product) equals the mean."""
    from jaxrvga.schemes import mean_rows
    A = np.random.default_rng(0).normal(size=(7, 13))
    np.testing.assert_allclose(mean_rows(jnp.asarray(A)), A.mean(axis=0), rtol=1e-14, atol=1e-15)
    assert mean_rows(jnp.asarray(A, jnp.float32)).dtype == jnp.float32


def _tiny_network(sizes=(3, 4, 1)):
    """``(theta0, h)``: a tanh MLP ``h(theta, x)`` with a scalar output, flat float64 weights."""
    rng = np.random.default_rng(5)
    shapes = [(m, n) for m, n in zip(sizes[:-1], sizes[1:])]
    flat = [rng.normal(size=s) / np.sqrt(s[0]) for s in shapes] + [0.1 * rng.normal(size=s[1]) for s in shapes]
    theta0 = jnp.asarray(np.concatenate([a.ravel() for a in flat]))

    def h(theta, x):
        offset, layers = 0, []
        for m, n in shapes:
            layers.append(theta[offset:offset + m * n].reshape(m, n))
            offset += m * n
        for i, (m, n) in enumerate(shapes):
            x = x @ layers[i] + theta[offset:offset + n]
            offset += n
            x = jnp.tanh(x) if i < len(shapes) - 1 else x
        return x[0]

    return theta0, h


@pytest.mark.parametrize("family", ["bernoulli", "poisson", "gaussian"])
@pytest.mark.parametrize("batch", [None, 3])
def test_linearise_of_an_elementwise_family_is_the_jacobian_scaled_by_the_fisher_root(family, batch):
    """One pullback per output gives ``C = diag(sqrt F) J`` and ``grad = J^T d log p / d eta``, the
    general form (a root given as a matrix, one more pullback for the gradient) and the Jacobian's;
    so does a :func:`~jaxrvga.models.minibatch` model, differentiated per input."""
    from jaxrvga.schemes import linearise as eager_linearise

    def linearise(model, theta, x, y):  # one compiled program per model (not one per operation)
        return jax.jit(lambda *args: eager_linearise(model, *args))(theta, x, y)

    fam = {"bernoulli": jr.models.bernoulli(), "poisson": jr.models.poisson_family(),
           "gaussian": jr.models.gaussian(0.7)}[family]
    theta, h = _tiny_network()
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(batch, 3) if batch else (3,)))
    y = jnp.asarray(rng.integers(0, 2, size=batch) if batch else 1.0, jnp.float64)
    f = h if batch is None else (lambda th, X: jax.vmap(h, in_axes=(None, 0))(th, X))
    model = jr.models.nonlinear(f, fam)
    C, g = linearise(model, theta, x, y)
    matrix_root = fam._replace(fisher_root=lambda e: jnp.diag(jnp.sqrt(jnp.atleast_1d(fam.fisher(e)))))
    C_ref, g_ref = linearise(jr.models.nonlinear(f, matrix_root), theta, x, y)
    @jax.jit  # the reference, one compiled program (eagerly: one program per operation)
    def reference(theta, x, y):
        J = jnp.atleast_2d(jax.jacfwd(f)(theta, x))
        eta = f(theta, x)
        dlogp = jnp.atleast_1d(jax.grad(lambda e: jnp.sum(fam.log_prob(y, e)))(eta))
        return jnp.sqrt(jnp.atleast_1d(fam.fisher(eta)))[:, None] * J, dlogp @ J

    C_want, g_want = reference(theta, x, y)
    pairs = [(C, C_ref), (g, g_ref), (C, C_want), (g, g_want)]
    if batch:  # a minibatch model is differentiated per input (models.minibatch)
        pairs += list(zip(linearise(jr.models.minibatch(jr.models.nonlinear(h, fam)), theta, x, y), (C, g)))
    for got, want in pairs:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    C32, g32 = linearise(model, theta.astype(jnp.float32), x.astype(jnp.float32), y.astype(jnp.float32))
    assert C32.dtype == g32.dtype == jnp.float32
    np.testing.assert_allclose(C32, C, rtol=1e-4, atol=1e-5)


def test_network_minibatch_ekf_is_the_information_form_update():
    """A minibatch of m = 4 images through a network (``h`` vmapped over the batch): the EKF step adds
    ``sum_i J_i^T F_i J_i`` to the precision and moves the mean by ``P_new sum_i J_i^T (y_i - p_i)``,
    exactly, for the dense belief, the low-rank one at full rank, and a rank-2 one whose buffer
    holds the m columns (its precision is then the exact sum)."""
    theta, h = _tiny_network()
    d, m = theta.shape[0], 4
    rng = np.random.default_rng(3)
    X, y = jnp.asarray(rng.normal(size=(m, 3))), jnp.asarray(rng.integers(0, 2, size=m), jnp.float64)
    model = jr.models.minibatch(jr.models.nonlinear(h, jr.models.bernoulli()))
    P0 = 0.5 * np.eye(d)
    J, eta = jax.jit(lambda theta, X: (jax.vmap(jax.grad(h), in_axes=(None, 0))(theta, X),  # (m, d)
                                       jax.vmap(h, in_axes=(None, 0))(theta, X)))(theta, X)
    J, p = np.asarray(J), 1 / (1 + np.exp(-np.asarray(eta)))
    prec = np.linalg.inv(P0) + J.T @ np.diag(p * (1 - p)) @ J
    cov = np.linalg.inv(prec)
    mean = np.asarray(theta) + cov @ (J.T @ (np.asarray(y) - p))
    dense = jr.rvga(model, "ekf")
    low = jr.lrvga(model, rank=d, scheme="ekf")
    buffered = jr.lrvga(model, rank=2, scheme="ekf", buffer=m)
    W0 = jnp.zeros((d, 2)).at[0, 0].set(1.0).at[1, 1].set(0.5)
    psi0 = jnp.full(d, 2.0)
    a, b, c = updates_together((dense, dense.init(theta, P0), X, y),
                               (low, low.init(theta, *full_rank_factors(P0)), X, y),
                               (buffered, buffered.init(theta, W0, psi0), X, y))
    np.testing.assert_allclose(a.cov, cov, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.mean, mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.mean, mean, rtol=0, atol=1e-10)
    np.testing.assert_allclose(dense_cov(b), cov, rtol=0, atol=1e-10)
    prec = np.asarray(W0 @ W0.T) + np.diag(np.asarray(psi0)) + J.T @ np.diag(p * (1 - p)) @ J
    np.testing.assert_allclose(jr.kernels.lowrank.to_dense_precision(c.W, c.psi), prec, rtol=0, atol=1e-12)
    np.testing.assert_allclose(c.mean, np.asarray(theta) + np.linalg.solve(prec, J.T @ (np.asarray(y) - p)),
                               rtol=0, atol=1e-10)


def test_minibatch_model_of_softmax_regression_is_its_native_minibatch():
    """``models.minibatch`` vmaps the predictor: for softmax regression (whose ``x @ Theta`` takes (m, d)
    as it is) the EKF step of a minibatch is the same, in both beliefs; GLMs and non-models are refused."""
    d, K, m = 4, 3, 5
    rng = np.random.default_rng(2)
    X, y = jnp.asarray(rng.normal(size=(m, d))), jnp.asarray(rng.integers(0, K, size=m))
    native = jr.models.softmax_regression(d, K)
    mapped = jr.models.minibatch(native)
    mu = jnp.asarray(rng.normal(size=d * K)) * 0.3
    for make, init in ((lambda mod: jr.rvga(mod, "ekf"), (mu, np.eye(d * K))),
                       (lambda mod: jr.lrvga(mod, rank=3, scheme="ekf"),  # m K = 15 columns: no buffer fits d = 12
                        (mu, 0.5 * jnp.eye(d * K)[:, :3], jnp.ones(d * K)))):
        a, b = make(native), make(mapped)
        sa, sb = updates_together((a, a.init(*init), X, y), (b, b.init(*init), X, y))
        np.testing.assert_allclose(sb.mean, sa.mean, rtol=1e-12, atol=1e-14)
    for bad in (jr.models.logistic(), jr.models.linear_gaussian(1.0), "model"):
        with pytest.raises(ValueError, match="nonlinear model"):
            jr.models.minibatch(bad)


# --------------------------------------------------------------------------- one home per option

@pytest.mark.parametrize("factory, extra", [(jr.rvga, {}), (jr.lrvga, {"rank": 2}), (jr.diag_rvga, {})])
def test_a_scheme_value_is_the_scheme_its_name_and_options_make(factory, extra):
    """``scheme=jr.schemes.ekf(curvature="empirical")`` and ``scheme="ekf", curvature="empirical"``
    build the same filter (one program), and a value's options are not given twice."""
    model = jr.models.logistic()
    by_value = factory(model, scheme=jr.schemes.ekf(curvature="empirical"), decay=0.9, **extra)
    by_name = factory(model, scheme="ekf", curvature="empirical", decay=0.9, **extra)
    assert by_value.spec == by_name.spec and by_value.program() == by_name.program()
    with pytest.raises(ValueError, match="^jitter: a scheme value carries its own options"):
        factory(model, scheme=jr.schemes.moment_ekf(), jitter=0.2, **extra)
    with pytest.raises(TypeError, match="unexpected option 'jiter'"):
        factory(model, scheme="moment_ekf", jiter=0.2, **extra)


def test_every_dynamics_option_reaches_every_factory():
    """The dynamics are one value (``jr.dynamics.dynamics``) with one list of options: each factory
    takes all of them, ``noise_discount`` included, and refuses anything else."""
    want = jr.dynamics.dynamics(decay=0.9, additive_noise=1e-3, noise_discount=0.99)
    opts = dict(decay=0.9, additive_noise=1e-3, noise_discount=0.99)
    learned = jr.models.linear_gaussian(None)  # noise_discount needs a learned noise variance
    logistic = jr.models.logistic()
    for flt in (jr.kalman(None, **opts), jr.ekf(learned, **opts), jr.rvga(learned, **opts),
                jr.lrvga(learned, 2, **opts), jr.diag_rvga(learned, **opts)):
        assert flt.spec.dynamics == want
    known = dict(decay=0.9, additive_noise=1e-3)
    for make in (lambda **o: jr.kalman(1.0, **o), lambda **o: jr.ekf(logistic, **o), jr.qkf,
                 lambda **o: jr.mirror_prox(logistic, **o), lambda **o: jr.rvga(logistic, **o),
                 lambda **o: jr.lrvga(logistic, 2, **o), lambda **o: jr.diag_rvga(logistic, **o)):
        assert make(**known).spec.dynamics == jr.dynamics.dynamics(**known)
        with pytest.raises(ValueError, match="^noise_discount discounts the statistics of a learned noise"):
            make(**opts)
    with pytest.raises(TypeError, match="takes only the dynamics"):
        jr.kalman(1.0, num_iters=2)
