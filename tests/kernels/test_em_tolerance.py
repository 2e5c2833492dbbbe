"""EM inner loops to a tolerance (``spectral_em_step(tol=...)``, ``lrvga(em_tol=...)``) and ``info.em_loops``.

Properties: the loops stop at the first loop that moves ``W`` by at most ``tol`` relative to it (checked
against the fixed-count projection, loop by loop); ``tol = 0`` runs every loop and equals the fixed
count; row blocks change nothing; the filters report the loops they ran.
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga.kernels import factor_analysis as fa
from jaxrvga import io
from jaxrvga.kernels import lowrank

jax.config.update("jax_enable_x64", True)


def _problem(d=40, p=4, m=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(d, p)), rng.uniform(0.5, 2.0, size=d), rng.normal(size=(d, m))


def _signs_of(W, ref):
    """``W`` with each column's sign chosen to agree with ``ref``'s: two separately compiled
    projections may return a spectral start's eigenvector with either sign, and the loops'
    tolerance is about the move of ``W`` within one program, not about that choice."""
    W, ref = np.asarray(W), np.asarray(ref)
    return W * np.where(np.sum(W * ref, axis=0) < 0, -1.0, 1.0)


def _relative_move(a, b):
    return np.linalg.norm(b - a) / np.linalg.norm(b)


@pytest.mark.parametrize("tol", [1e-2, 1e-4])
def test_loops_stop_at_the_first_loop_within_tol(tol):
    W, psi, X = _problem()
    out = fa.spectral_em_step(W, psi, X, 0.9, 1.2, 200, tol=tol, details=True)
    k = int(out.loops)
    assert 1 <= k < 200
    fixed = [fa.spectral_em_step(W, psi, X, 0.9, 1.2, j, store_iterate=True) for j in (k - 2, k - 1, k)]
    fixed = [(_signs_of(f[0], out.W),) + tuple(f[1:]) for f in fixed]
    np.testing.assert_allclose(out.W, fixed[2][0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.psi, fixed[2][1], rtol=1e-10)
    assert _relative_move(fixed[1][0], fixed[2][0]) <= tol  # loop k moved W by at most tol ...
    if k >= 2:
        assert _relative_move(fixed[0][0], fixed[1][0]) > tol  # ... and loop k - 1 by more
    np.testing.assert_allclose(out.gram, out.W.T @ (out.W / out.psi[:, None]), rtol=1e-10)


@pytest.mark.parametrize("block_rows", [None, 10])
def test_zero_tolerance_runs_every_loop_and_equals_the_fixed_count(block_rows):
    W, psi, X = _problem(seed=1)
    a = fa.spectral_em_step(W, psi, X, 1.0, 1.0, 5, tol=0.0, details=True, block_rows=block_rows)
    b = fa.spectral_em_step(W, psi, X, 1.0, 1.0, 5, details=True)
    assert int(a.loops) == 5
    np.testing.assert_allclose(a.W, _signs_of(b.W, a.W), rtol=1e-10, atol=1e-13)
    for got, want in zip(a[1:4], b[1:4]):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)
    zero = fa.spectral_em_step(W, psi, X, 1.0, 1.0, 0, tol=1e-3, details=True)
    assert int(zero.loops) == 0
    plain = fa.spectral_em_step(W, psi, X, 1.0, 1.0, 0)[0]
    np.testing.assert_allclose(zero.W, _signs_of(plain, zero.W), rtol=1e-12)
    with pytest.raises(ValueError, match="tol"):
        fa.spectral_em_step(W, psi, X, 1.0, 1.0, 3, tol=-1.0)


def _logistic(n=30, d=6, seed=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-X @ rng.normal(size=d)))).astype(float)
    return jnp.asarray(X), jnp.asarray(y)


def test_filter_reports_em_loops_and_zero_tolerance_equals_fixed_loops():
    X, y = _logistic()
    d, p = X.shape[1], 2
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), d, p, 1.0)
    run = lambda flt: jr.run(flt, flt.init(jnp.zeros(d), W0, psi0), X, y, trace_fn=lambda s, x, y: s.info.em_loops)
    (fixed, loops_fixed), (zero, loops_zero) = run(jr.lrvga(jr.models.logistic(), p, inner_loops=4)), \
        run(jr.lrvga(jr.models.logistic(), p, inner_loops=4, em_tol=0.0))
    assert np.all(np.asarray(loops_fixed) == 4) and np.all(np.asarray(loops_zero) == 4)
    np.testing.assert_allclose(zero.mean, fixed.mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(zero.W @ zero.W.T, fixed.W @ fixed.W.T, rtol=1e-9, atol=1e-12)
    early, loops = run(jr.lrvga(jr.models.logistic(), p, inner_loops=50, em_tol=1e-3))
    loops = np.asarray(loops)
    assert np.all(loops >= 1) and np.all(loops <= 50) and loops.min() < 50 and bool(early.info.converged)
    _, default = run(jr.lrvga(jr.models.logistic(), p))
    _, published = run(jr.lrvga(jr.models.logistic(), p, inner_loops=3, published=True))
    assert np.all(np.asarray(default) == 0) and np.all(np.asarray(published) == 3)


def test_em_tol_float32():
    X, y = _logistic(seed=3)
    d, p = X.shape[1], 2
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), d, p, 1.0, dtype=jnp.float32)
    flt = jr.lrvga(jr.models.logistic(), p, inner_loops=20, em_tol=1e-3)
    state, _ = jr.run(flt, flt.init(jnp.zeros(d, jnp.float32), W0, psi0), X.astype(jnp.float32), y.astype(jnp.float32))
    assert state.W.dtype == jnp.float32 and np.all(np.isfinite(state.W)) and 1 <= int(state.info.em_loops) <= 20


@pytest.mark.parametrize("kwargs, match", [
    (dict(em_tol=1e-3), "inner_loops >= 1"),
    (dict(em_tol=-1.0, inner_loops=3), "em_tol"),
    (dict(em_tol=True, inner_loops=3), "em_tol"),
    (dict(em_tol=1e-3, inner_loops=3, published=True), "published"),
])
def test_em_tol_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        jr.lrvga(jr.models.logistic(), 2, **kwargs)


def test_files_without_em_loops_load_and_resume(tmp_path):
    """A state saved before ``SolverInfo.em_loops`` existed loads with zeros there and a filter goes on from it."""
    X, y = _logistic(seed=4)
    d, p = X.shape[1], 2
    flt = jr.lrvga(jr.models.logistic(), p)
    state = flt.init(jnp.zeros(d), *lowrank.init_factors(jax.random.PRNGKey(1), d, p, 1.0))
    io.save(tmp_path / "s.npz", state)
    with np.load(tmp_path / "s.npz", allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    meta = json.loads(str(arrays[io.META_KEY]))
    info = next(c for c in meta["tree"]["children"] if c.get("fields", [None])[0] == "converged")
    assert info["fields"][-1] == "em_loops"
    info["fields"].pop()
    info["children"].pop()
    arrays[io.META_KEY] = np.array(json.dumps(meta))
    np.savez(tmp_path / "s.npz", **arrays)
    back = io.load(tmp_path / "s.npz")
    assert back.info.em_loops.dtype == jnp.int32 and int(back.info.em_loops) == 0
    np.testing.assert_allclose(jr.run(flt, back, X, y)[0].mean, jr.run(flt, state, X, y)[0].mean, rtol=1e-12)


def test_beliefs_that_do_not_project_report_no_loops():
    """The dense belief and a skipped low-rank step report ``(dropped, em_loops) = (0, 0)`` (``no_projection``)."""
    X, y = _logistic(seed=5)
    d = X.shape[1]
    dense = jr.rvga(jr.models.logistic(), "ekf")
    state, _ = jr.run(dense, dense.init(jnp.zeros(d), jnp.eye(d)), X, y)
    assert int(state.info.em_loops) == 0 and float(state.info.dropped) == 0.0
    flt = jr.lrvga(jr.models.logistic(), 2, inner_loops=3)
    start = flt.init(jnp.zeros(d), *lowrank.init_factors(jax.random.PRNGKey(2), d, 2, 1.0))
    update = jax.jit(flt.update)  # one program for both steps (eager: a few hundred one-operation programs)
    assert int(update(start, X[0], y[0]).info.em_loops) == 3
    skipped = update(start, X[0] * jnp.nan, y[0])  # a non-finite input: the step is skipped and flagged
    assert not bool(skipped.info.converged) and int(skipped.info.em_loops) == 0
    np.testing.assert_array_equal(skipped.W, start.W)
