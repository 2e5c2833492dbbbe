"""Sparse input rows (jr.models.SparseRow): every filter, predictive and evidence gives the results of
the same rows fed dense (float64 to rounding, float32 too); the stream stays (T, nnz); bad rows are
refused with a ValueError naming the argument."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse

import jaxrvga as jr
from jaxrvga.models import SparseRow

T, D, M = 24, 10, 3  # steps, dimension, minibatch size
TIGHT = dict(rtol=1e-12, atol=1e-12)


def rows(shape, seed=0, density=0.3):
    """Dense rows of ``shape`` (..., D) with about ``density`` non-zeros, and their SparseRow."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=shape) * (rng.random(shape) < density)
    X[..., 0] = 0.0  # index 0 is then only a padding entry's
    return X, SparseRow.from_dense(X)


def labels(X, model, seed=1):
    """Observations of ``model`` at the rows ``X`` (..., D)."""
    rng = np.random.default_rng(seed)
    eta = X @ rng.normal(size=D)
    if model.family.name == "bernoulli":
        return (rng.random(eta.shape) < 1 / (1 + np.exp(-eta))).astype(float)
    if model.family.name == "poisson":
        return rng.poisson(np.exp(0.5 * eta)).astype(float)
    return eta + 0.3 * rng.normal(size=eta.shape)


def initial(flt, belief, dtype=np.float64):
    """The prior N(0, I) of ``belief`` (a generic rank-2 ``W`` for the low-rank one)."""
    key = {"key": jax.random.PRNGKey(3)} if flt.spec.scheme.needs_key else {}
    mean = jnp.zeros(D, dtype)
    if belief == "dense":
        return flt.init(mean, jnp.eye(D, dtype=dtype), **key)
    if belief == "lowrank":
        W = jnp.asarray(0.1 * np.random.default_rng(2).normal(size=(D, 2)), dtype)
        return flt.init(mean, W, jnp.ones(D, dtype), **key)
    return flt.init(mean, jnp.ones(D, dtype), **key)


def make(belief, model, scheme):
    if belief == "dense":
        return jr.rvga(model, scheme, num_samples=4 if scheme == "sampled" else None)
    if belief == "lowrank":
        return jr.lrvga(model, rank=2, scheme=scheme, num_samples=4 if scheme == "sampled" else None)
    return jr.diag_rvga(model, scheme, num_samples=4 if scheme == "sampled" else None)


def sparse_and_dense(flt, init, S, X, y):
    """The final states of ``flt`` over the sparse rows ``S`` and over the same rows ``X`` fed dense,
    both scans (``jr.scan``, what ``jr.run`` compiles) in one compiled program: one compilation
    instead of two per filter."""
    both = jax.jit(lambda init, S, X, y: (jr.scan(flt, init, S, y)[0], jr.scan(flt, init, X, y)[0]))
    return both(init, S, X, jnp.asarray(y))


def assert_states_close(a, b, **tol):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_allclose(np.asarray(u, float), np.asarray(v, float), **(tol or TIGHT))


# --- the representation -------------------------------------------------------------------------

def test_from_dense_todense_and_dot_are_the_dense_rows():
    X, S = rows((T, M, D))
    assert S.shape[:2] == (T, M) and S.shape[2] < D
    np.testing.assert_array_equal(np.asarray(S.todense(D)), X)
    theta = np.random.default_rng(5).normal(size=D)
    np.testing.assert_allclose(np.asarray(S.dot(theta)), X @ theta, **TIGHT)
    Theta = np.random.default_rng(6).normal(size=(D, 4))  # K = 4 values per row
    np.testing.assert_allclose(np.asarray(S.dot(Theta)), X @ Theta, **TIGHT)


def test_padding_adds_nothing_and_repeated_indices_add_up():
    S = SparseRow(np.array([3, 0, 3, 0]), np.array([1.5, 0.0, 2.0, 0.0]))
    want = np.zeros(D)
    want[3] = 3.5
    np.testing.assert_array_equal(np.asarray(S.todense(D)), want)
    assert float(S.dot(np.arange(D, dtype=float))) == 10.5


def test_from_csr_is_from_dense():
    X, S = rows((T, D))
    C = SparseRow.from_csr(scipy.sparse.csr_array(X))
    np.testing.assert_array_equal(np.asarray(C.todense(D)), X)
    assert C.shape == S.shape
    assert SparseRow.from_csr(scipy.sparse.csr_array(X), nnz=D).shape == (T, D)


def test_traced_out_of_range_indices_add_nothing():
    idx = jnp.array([-1, 2, D, 4])
    out = jax.jit(lambda i: SparseRow(i, jnp.ones(4)).todense(D))(idx)
    np.testing.assert_array_equal(np.asarray(out), np.eye(D)[2] + np.eye(D)[4])
    assert float(jax.jit(lambda i: SparseRow(i, jnp.ones(4)).dot(jnp.arange(D) * 1.0))(idx)) == 6.0


def test_a_sparse_row_is_a_pytree_that_jax_slices():
    X, S = rows((T, D))
    leaves, treedef = jax.tree_util.tree_flatten(S)
    assert len(leaves) == 2 and isinstance(jax.tree_util.tree_unflatten(treedef, leaves), SparseRow)
    first = jax.tree_util.tree_map(lambda a: a[0], S)
    np.testing.assert_array_equal(np.asarray(first.todense(D)), X[0])
    with pytest.raises(TypeError):
        jnp.asarray(S)  # never silently stacked into an array


# --- the linear predictors ----------------------------------------------------------------------

@pytest.mark.parametrize("model", [jr.models.linear_gaussian(0.5), jr.models.logistic(), jr.models.poisson(),
                                   jr.models.glm(jr.models.bernoulli(), 8)], ids=lambda m: m.kind)
def test_predict_and_log_lik_take_sparse_rows(model):
    X, S = rows((M, D))
    y = labels(X, model)
    theta = jnp.asarray(np.random.default_rng(7).normal(size=D) * 0.3)
    np.testing.assert_allclose(np.asarray(model.predict(theta, S)), np.asarray(model.predict(theta, X)), **TIGHT)
    np.testing.assert_allclose(float(model.log_lik(theta, S, y)), float(model.log_lik(theta, X, y)), **TIGHT)


def test_softmax_regression_takes_sparse_rows():
    K = 3
    model = jr.models.softmax_regression(D, K)
    X, S = rows((T, D))
    y = np.random.default_rng(8).integers(0, K, size=T).astype(float)
    flt = jr.rvga(model, "ekf")
    init = flt.init(jnp.zeros(D * K), jnp.eye(D * K))
    assert_states_close(*sparse_and_dense(flt, init, S, X, y))


# --- every filter, as the dense rows --------------------------------------------------------------

GLM_SCHEMES = ("implicit", "explicit", "extragrad", "ekf", "moment_ekf", "sampled")
CASES = ([("dense", s) for s in GLM_SCHEMES + ("qkf",)] + [("lowrank", s) for s in GLM_SCHEMES]
         + [("diagonal", s) for s in GLM_SCHEMES])


@pytest.mark.parametrize("belief,scheme", CASES, ids=lambda v: v)
def test_logistic_filters_match_the_dense_rows(belief, scheme):
    model = jr.models.logistic()
    X, S = rows((T, D))
    y = labels(X, model)
    flt = make(belief, model, scheme)
    sparse, dense = sparse_and_dense(flt, initial(flt, belief), S, X, y)
    assert bool(sparse.info.converged) or scheme == "implicit"
    assert_states_close(sparse, dense)


@pytest.mark.parametrize("belief", ["dense", "lowrank", "diagonal"])
@pytest.mark.parametrize("model", [jr.models.linear_gaussian(0.5), jr.models.poisson()], ids=lambda m: m.kind)
def test_other_glms_match_the_dense_rows(belief, model):
    X, S = rows((T, D), seed=4)
    y = labels(X, model)
    flt = make(belief, model, None)
    assert_states_close(*sparse_and_dense(flt, initial(flt, belief), S, X, y))


@pytest.mark.parametrize("belief,scheme", [("dense", "explicit"), ("lowrank", "ekf"), ("diagonal", "extragrad")])
def test_minibatches_match_the_dense_rows(belief, scheme):
    model = jr.models.logistic()
    X, S = rows((T, M, D), seed=9)
    y = labels(X, model)
    flt = make(belief, model, scheme)
    assert S.shape[:2] == (T, M)
    assert_states_close(*sparse_and_dense(flt, initial(flt, belief), S, X, y))


def test_kalman_one_update_and_bucketed_run_match_the_dense_rows():
    kf = jr.kalman(0.5, decay=0.99, additive_noise=1e-3)
    state = kf.init(jnp.zeros(D), jnp.eye(D))
    X, S = rows((T, D), seed=10)
    y = labels(X, jr.models.linear_gaussian(0.5))
    one = jax.tree_util.tree_map(lambda a: a[0], S)
    updates = jax.jit(lambda s, one, x, y: (kf.update(s, one, y), kf.update(s, x, y)))  # one compiled program
    assert_states_close(*updates(state, one, jnp.asarray(X[0]), y[0]))
    assert_states_close(jr.run(kf, state, S, y, bucket=16)[0], jr.run(kf, state, X, y, bucket=16)[0])


@pytest.mark.parametrize("belief", ["dense", "lowrank", "diagonal"])
def test_float32_runs_match_the_dense_rows(belief):
    model = jr.models.logistic()
    X, S = rows((T, D), seed=11)
    X32, y = X.astype(np.float32), labels(X, model).astype(np.float32)
    S32 = SparseRow(S.indices.astype(np.int32), S.values.astype(np.float32))
    flt = make(belief, model, "ekf")
    sparse, dense = sparse_and_dense(flt, initial(flt, belief, np.float32), S32, X32, y)
    assert sparse.mean.dtype == jnp.float32 and bool(sparse.info.converged)
    assert_states_close(sparse, dense, rtol=1e-5, atol=1e-6)


def test_a_vmapped_fleet_scans_a_sparse_stream():
    model = jr.models.logistic()
    X, S = rows((T, D), seed=12)
    y = labels(X, model)
    flt = jr.lrvga(model, rank=2, scheme="ekf")

    def fit(xs, scale):
        W = scale * jnp.asarray(0.1 * np.random.default_rng(2).normal(size=(D, 2)))
        return jr.scan(flt, flt.init(jnp.zeros(D), W, jnp.ones(D)), xs, jnp.asarray(y))[0].mean

    scales = jnp.array([0.5, 1.0, 2.0])
    fleets = jax.jit(lambda S, X: (jax.vmap(fit, (None, 0))(S, scales), jax.vmap(fit, (None, 0))(X, scales)))
    sparse, dense = fleets(S, jnp.asarray(X))  # both fleets in one compiled program
    np.testing.assert_allclose(np.asarray(sparse), np.asarray(dense), **TIGHT)


def test_the_low_rank_scan_holds_no_dense_stream():
    """The scan carries the (T, nnz) arrays: no array of T x d entries enters the compiled loop."""
    model = jr.models.logistic()
    _, S = rows((T, D))
    flt = jr.lrvga(model, rank=2, scheme="ekf")
    state = initial(flt, "lowrank")
    jaxpr = jax.make_jaxpr(lambda s, xs, ys: jr.scan(flt, s, xs, ys))(state, S, jnp.zeros(T))
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
    sizes = [v.aval.size for v in eqn.invars]
    assert max(sizes) < T * D and T * S.shape[-1] in sizes


# --- predictions and the evidence ---------------------------------------------------------------

@pytest.mark.parametrize("belief", ["dense", "lowrank", "diagonal"])
def test_predictive_log_predictive_and_evidence_match_the_dense_rows(belief):
    model = jr.models.poisson()
    X, S = rows((T, D), seed=13)
    y = labels(X, model)
    flt = make(belief, model, "ekf")
    init = initial(flt, belief)
    state = jr.run(flt, init, _head(S, 10), y[:10])[0]

    def scores(rows, one):
        """The predictive of the first 5 rows and of row 0 alone, the log predictive of row 0, the evidence."""
        return (jr.predictive(state, _head(rows, 5), model), jr.predictive(state, one, model).mean,
                jr.log_predictive(state, one, y[0], model), jr.log_evidence(flt, init, rows, jnp.asarray(y)))

    one = jax.tree_util.tree_map(lambda a: a[0], S)
    both = jax.jit(lambda sparse, dense: (scores(*sparse), scores(*dense)))  # one compiled program
    (p_s, one_s, lp_s, ev_s), (p_d, _, lp_d, ev_d) = both((S, one), (jnp.asarray(X), jnp.asarray(X[0])))
    np.testing.assert_allclose(np.asarray(p_s.mean), np.asarray(p_d.mean), **TIGHT)
    np.testing.assert_allclose(np.asarray(p_s.var), np.asarray(p_d.var), **TIGHT)
    np.testing.assert_allclose(float(one_s), float(p_d.mean[0]), **TIGHT)
    np.testing.assert_allclose(float(lp_s), float(lp_d), **TIGHT)
    np.testing.assert_allclose(float(ev_s), float(ev_d), **TIGHT)


def test_kalman_evidence_and_monte_carlo_predictive_match_the_dense_rows():
    kf = jr.kalman(0.5)
    state = kf.init(jnp.zeros(D), jnp.eye(D))
    X, S = rows((T, D), seed=14)
    y = labels(X, jr.models.linear_gaussian(0.5))
    key, model = jax.random.PRNGKey(0), jr.models.linear_gaussian(0.5)

    def scores(rows):
        """The log evidence of the rows, and the Monte Carlo predictive of the first 4."""
        return (jr.log_evidence(kf, state, rows, jnp.asarray(y)),
                jr.predictive(state, _head(rows, 4), model, key=key, num_samples=64))

    (ev_s, a), (ev_d, b) = jax.jit(lambda S, X: (scores(S), scores(X)))(S, jnp.asarray(X))  # one program
    np.testing.assert_allclose(float(ev_s), float(ev_d), **TIGHT)
    np.testing.assert_allclose(np.asarray(a.var), np.asarray(b.var), **TIGHT)


def _head(S, n):
    return jax.tree_util.tree_map(lambda a: a[:n], S)


# --- bad rows -----------------------------------------------------------------------------------

def test_bad_sparse_rows_are_refused_naming_the_argument():
    kf = jr.kalman(1.0)
    state = kf.init(jnp.zeros(D), jnp.eye(D))
    model = jr.models.linear_gaussian(1.0)
    ok = np.array([1, 2])
    with pytest.raises(ValueError, match=r"x: the indices of a SparseRow must lie in \[0, 10\)"):
        kf.update(state, SparseRow(np.array([1, D]), np.ones(2)), 0.0)
    with pytest.raises(ValueError, match="x: the indices .* lie in"):
        kf.update(state, SparseRow(np.array([-1, 2]), np.ones(2)), 0.0)
    with pytest.raises(ValueError, match="x: the indices of a SparseRow must be integers"):
        kf.update(state, SparseRow(np.array([1.0, 2.0]), np.ones(2)), 0.0)
    with pytest.raises(ValueError, match="x: the indices and values of a SparseRow must share"):
        kf.update(state, SparseRow(ok, np.ones(3)), 0.0)
    with pytest.raises(ValueError, match="must be a real array"):
        kf.update(state, SparseRow(ok, np.ones(2) * 1j), 0.0)
    with pytest.raises(ValueError, match=r"y must have shape \(\) to match x"):
        kf.update(state, SparseRow(ok, np.ones(2)), np.zeros(2))
    with pytest.raises(ValueError, match=r"x: a SparseRow must have shape \(nnz,\) or \(m, nnz\)"):
        kf.update(state, SparseRow(np.ones((2, 2, 2), int), np.ones((2, 2, 2))), np.zeros(2))
    with pytest.raises(ValueError, match=r"xs: the indices of a SparseRow must lie in \[0, 10\)"):
        jr.run(kf, state, SparseRow(np.full((T, 2), D), np.ones((T, 2))), np.zeros(T))
    with pytest.raises(ValueError, match=r"ys must have shape \(24,\) to match xs"):
        jr.run(kf, state, SparseRow(np.ones((T, 2), int), np.ones((T, 2))), np.zeros((T, 2)))
    with pytest.raises(ValueError, match=r"xs: a SparseRow stream must have shape \(T, nnz\)"):
        jr.run(kf, state, SparseRow(np.ones(T, int), np.ones(T)), np.zeros(T))
    with pytest.raises(ValueError, match=r"X: the indices of a SparseRow must lie in \[0, 10\)"):
        jr.predictive(state, SparseRow(np.array([[0, D]]), np.ones((1, 2))), model)
    with pytest.raises(ValueError, match="nnz must be at least"):
        SparseRow.from_dense(np.ones((2, 3)), nnz=2)


def test_the_implicit_scheme_refuses_a_sparse_minibatch_as_a_dense_one():
    flt = jr.rvga(jr.models.logistic(), "implicit")
    state = flt.init(jnp.zeros(D), jnp.eye(D))
    _, S = rows((M, D))
    with pytest.raises(ValueError, match="x: the implicit scheme takes one observation per update"):
        flt.update(state, S, np.zeros(M))
