"""The default L-RVGA's cached whitened Gram and its column buffer (``lrvga(..., buffer=b)``).

Oracles: between projections the buffered belief is the exact precision step (linear model:
the Kalman posterior); the cached Gram equals ``W^T Psi^{-1} W`` after every step; a buffer
that overflows projects the same factor the unbuffered filter would from the same columns.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga import io
from jaxrvga.kernels import factor_analysis
from jaxrvga.kernels import lowrank

jax.config.update("jax_enable_x64", True)


def _linear(n=12, d=8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) / np.sqrt(d)
    return X, X @ rng.normal(size=d) + rng.normal(size=n), rng


def _prior(rng, d, p):
    return rng.normal(size=(d, p)), rng.uniform(0.5, 2.0, size=d)


def test_buffered_belief_is_exact_until_the_buffer_overflows():
    X, y, rng = _linear()
    d, p, b = X.shape[1], 2, 5
    W0, psi0 = _prior(rng, d, p)
    flt = jr.lrvga(jr.models.linear_gaussian(1.0), rank=p, buffer=b)
    state = flt.init(jnp.zeros(d), W0, psi0)
    update = jax.jit(flt.update)  # one compiled update for every step (eagerly: one program per operation)
    prec = W0 @ W0.T + np.diag(psi0)
    mean = np.zeros(d)
    for t in range(b):  # b observations of one column each fill the buffer exactly
        state = update(state, X[t], y[t])
        prec_new = prec + np.outer(X[t], X[t])
        mean = np.linalg.solve(prec_new, prec @ mean + X[t] * y[t])  # Kalman / Bayes, noise variance 1
        prec = prec_new
        np.testing.assert_allclose(lowrank.to_dense_precision(state.W, state.psi), prec, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(state.mean, mean, rtol=1e-10, atol=1e-12)
        assert state.W.shape == (d, p + b) and float(state.info.dropped) == 0.0
    state = update(state, X[b], y[b])  # overflow: projected back to rank p
    assert np.allclose(state.W[:, p:], 0.0) and float(state.info.dropped) > 0.0


@pytest.mark.parametrize("buffer", [0, 3])
@pytest.mark.parametrize("process_noise", [None, 0.05])
def test_cached_gram_is_the_whitened_gram_after_every_step(buffer, process_noise):
    rng = np.random.default_rng(1)
    d, p, n = 10, 3, 40
    X = rng.normal(size=(n, d))
    y = (rng.random(n) < 0.5).astype(float)
    flt = jr.lrvga(jr.models.logistic(), rank=p, scheme="ekf", buffer=buffer, process_noise=process_noise)
    W0, psi0 = _prior(rng, d, p)
    state, trace = jr.run(flt, flt.init(jnp.zeros(d), W0, psi0), X, y,
                          trace_fn=lambda s, x, y: (s.W, s.psi, s.gram))
    for W, psi, gram in zip(*trace):
        np.testing.assert_allclose(gram, W.T @ (W / psi[:, None]), rtol=1e-10, atol=1e-12)


def test_buffer_overflow_projects_what_the_unbuffered_projection_would():
    """Projecting the buffer and the new column at once is the spectral step of ``[W_p, B, x]``."""
    X, y, rng = _linear(n=4)
    d, p, b = X.shape[1], 2, 3
    W0, psi0 = _prior(rng, d, p)
    flt = jr.lrvga(jr.models.linear_gaussian(1.0), rank=p, buffer=b)
    state = flt.init(jnp.zeros(d), W0, psi0)
    update = jax.jit(flt.update)  # one compiled update for every step
    for t in range(b):
        state = update(state, X[t], y[t])
    out = update(state, X[b], y[b])
    pending = jnp.concatenate([state.W[:, p:], jnp.asarray(X[b])[:, None]], axis=1)
    W, psi, _ = jax.jit(lambda W, psi, X: factor_analysis.spectral_em_step(W, psi, X, 1.0, 1.0, 0))(
        state.W[:, :p], state.psi, pending)  # compiled (eagerly: one program per operation)
    np.testing.assert_allclose(out.W[:, :p] @ out.W[:, :p].T, W @ W.T, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out.psi, psi, rtol=1e-9)


def test_minibatch_columns_that_do_not_fit_project_with_the_buffer():
    X, y, rng = _linear(n=12)
    d, p = X.shape[1], 2
    W0, psi0 = _prior(rng, d, p)
    flt = jr.lrvga(jr.models.linear_gaussian(1.0), rank=p, buffer=3)
    state = flt.init(jnp.zeros(d), W0, psi0)
    update = jax.jit(flt.update)  # one compiled update for both steps
    state = update(state, X[:2], y[:2])  # 2 of 3 columns used
    assert np.allclose(state.W[:, p + 2:], 0.0) and not np.allclose(state.W[:, p:p + 2], 0.0)
    prec = W0 @ W0.T + np.diag(psi0) + X[:2].T @ X[:2]
    np.testing.assert_allclose(lowrank.to_dense_precision(state.W, state.psi), prec, rtol=1e-12)
    state = update(state, X[2:4], y[2:4])  # 2 more do not fit: all 4 projected
    assert np.allclose(state.W[:, p:], 0.0) and float(state.info.dropped) > 0.0


def test_gram_cache_matches_the_uncached_default_and_float32_runs():
    """A state without the cache (built by hand) gives the same run as the cached one, and keeps its structure."""
    rng = np.random.default_rng(2)
    d, p, n = 12, 3, 60
    X = rng.normal(size=(n, d))
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ rng.normal(size=d)))).astype(float)
    flt = jr.lrvga(jr.models.logistic(), rank=p, scheme="explicit")
    W0, psi0 = _prior(rng, d, p)
    cached = flt.init(jnp.zeros(d), W0, psi0)
    bare = cached._replace(gram=None)
    a, _ = jr.run(flt, cached, X, y)
    b, _ = jr.run(flt, bare, X, y)
    assert a.gram is not None and b.gram is None
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-9, atol=1e-12)
    f32 = jr.lrvga(jr.models.logistic(), rank=p, scheme="ekf", buffer=4)
    s32, info = jr.run(f32, f32.init(jnp.zeros(d, jnp.float32), W0.astype(np.float32), psi0.astype(np.float32)),
                       X.astype(np.float32), y.astype(np.float32), trace_fn=jr.trace_info)
    assert s32.W.dtype == jnp.float32 and bool(info.converged.all())
    np.testing.assert_allclose(s32.gram, s32.W.T @ (s32.W / s32.psi[:, None]), rtol=2e-4, atol=1e-4)


def test_buffer_options_are_checked():
    model = jr.models.logistic()
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="buffer"):
            jr.lrvga(model, rank=2, buffer=bad)
    with pytest.raises(ValueError, match="buffer"):
        jr.lrvga(model, rank=2, buffer=2, published=True)
    flt = jr.lrvga(model, rank=2, buffer=3)
    with pytest.raises(ValueError, match="rank \\+ buffer"):
        flt.init(jnp.zeros(4), jnp.zeros((4, 2)), jnp.ones(4))
    other = jr.lrvga(model, rank=2).init(jnp.zeros(6), jnp.zeros((6, 2)), jnp.ones(6))
    with pytest.raises(ValueError, match="columns"):
        flt.update(other, jnp.ones(6), 1.0)


def test_state_with_gram_round_trips_and_older_files_load(tmp_path):
    import json
    flt = jr.lrvga(jr.models.logistic(), rank=2, buffer=1)
    state = jax.jit(flt.update)(flt.init(jnp.zeros(5), np.eye(5)[:, :2], np.ones(5)), jnp.ones(5), 1.0)  # compiled
    io.save(tmp_path / "s.npz", state)
    back = io.load(tmp_path / "s.npz")
    np.testing.assert_array_equal(back.gram, state.gram)
    # a file of the format before the gram and noise fields: LowRankState with six fields
    old = jr.lrvga(jr.models.logistic(), rank=2, published=True).init(jnp.zeros(5), np.eye(5)[:, :2], np.ones(5))
    io.save(tmp_path / "o.npz", old)
    with np.load(tmp_path / "o.npz", allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    meta = json.loads(str(arrays[io.META_KEY]))
    assert meta["tree"]["fields"][-2:] == ["gram", "noise"]
    assert [c["t"] for c in meta["tree"]["children"][-2:]] == ["none", "none"]
    for _ in range(2):
        meta["tree"]["fields"].pop()
        meta["tree"]["children"].pop()
    arrays[io.META_KEY] = np.array(json.dumps(meta))
    np.savez(tmp_path / "o.npz", **arrays)
    loaded = io.load(tmp_path / "o.npz")
    assert loaded.gram is None and loaded.noise is None
    np.testing.assert_array_equal(loaded.W, old.W)
    # a gram of the wrong shape is refused
    io.save(tmp_path / "b.npz", state._replace(gram=jnp.zeros((2, 2))))
    with pytest.raises(ValueError, match="gram"):
        io.load(tmp_path / "b.npz")


def test_whitened_and_bordered_gram():
    rng = np.random.default_rng(3)
    d, p, m = 64, 4, 2
    W, X, psi = rng.normal(size=(d, p)), rng.normal(size=(d, m)), rng.uniform(0.5, 2.0, size=d)
    full = np.concatenate([W, X], 1)
    want = full.T @ (full / psi[:, None])
    np.testing.assert_allclose(lowrank.whitened_gram((W, X), psi), want, rtol=1e-12)
    np.testing.assert_allclose(lowrank.whitened_gram(full, psi, block_rows=16), want, rtol=1e-12)  # 4 row blocks
    bordered = lowrank.bordered_gram(lowrank.whitened_gram(W, psi), W, psi, X)
    np.testing.assert_allclose(bordered, want, rtol=1e-12)
    np.testing.assert_array_equal(bordered, bordered.T)
    v = rng.normal(size=d)
    for rows in (0, 16):  # one block, 4 row blocks: the border and L^T Psi^{-1} v summed over the blocks
        blocked, Lv = lowrank.bordered_gram(lowrank.whitened_gram(W, psi), W, psi, X, v, block_rows=rows)
        np.testing.assert_allclose(blocked, want, rtol=1e-12)
        np.testing.assert_array_equal(blocked, blocked.T)
        np.testing.assert_allclose(Lv, full.T @ (v / psi), rtol=1e-12)
    np.testing.assert_allclose(lowrank.gram_m(W, psi), np.eye(p) + want[:p, :p], rtol=1e-12)
    given = lowrank.factorize(W, psi, lowrank.whitened_gram(W, psi))  # a known Gram: no pass over W
    np.testing.assert_allclose(given.chol, lowrank.factorize(W, psi).chol, rtol=1e-12)
    P = np.linalg.inv(W @ W.T + np.diag(psi))
    np.testing.assert_allclose(given.solve(v), P @ v, rtol=1e-10)


@pytest.mark.parametrize("loops", [0, 2])
def test_spectral_em_step_takes_and_returns_the_gram(loops):
    rng = np.random.default_rng(4)
    d, p, m = 30, 3, 2
    W, X, psi = rng.normal(size=(d, p)), rng.normal(size=(d, m)), rng.uniform(0.5, 2.0, size=d)
    alpha, beta = 0.8, 1.3
    @jax.jit  # both steps in one compiled program (eagerly: one program per operation)
    def steps(W, psi, X):
        G = lowrank.whitened_gram((W, X), psi)
        return (factor_analysis.spectral_em_step(W, psi, X, alpha, beta, loops),
                factor_analysis.spectral_em_step(W, psi, X, alpha, beta, loops, gram=G, details=True), G)

    plain, (W1, psi1, dropped, G1, used, ok), G = steps(W, psi, X)
    assert int(used) == loops and bool(ok)
    np.testing.assert_allclose(W1 @ W1.T, plain[0] @ plain[0].T, rtol=1e-10, atol=1e-12)  # columns up to sign
    np.testing.assert_allclose(psi1, plain[1], rtol=1e-10)
    np.testing.assert_allclose(dropped, plain[2], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(G1, W1.T @ (W1 / psi1[:, None]), rtol=1e-10)
    with pytest.raises(ValueError, match="gram"):
        factor_analysis.spectral_em_step(W, psi, X, gram=G[:p, :p])


def test_predictive_and_sampling_of_a_state_with_a_partly_filled_buffer():
    """Zero buffer columns change nothing: predictions equal those of the dense covariance."""
    rng = np.random.default_rng(6)
    d, p = 7, 2
    X = rng.normal(size=(3, d))
    y = (rng.random(3) < 0.5).astype(float)
    flt = jr.lrvga(jr.models.logistic(), rank=p, scheme="ekf", buffer=4)
    W0, psi0 = _prior(rng, d, p)
    state, _ = jr.run(flt, flt.init(jnp.zeros(d), W0, psi0), X, y)  # 3 of 4 buffer columns used
    assert not np.allclose(state.W[:, p + 2], 0.0) and np.allclose(state.W[:, p + 3], 0.0)
    cov = np.asarray(lowrank.to_dense_covariance(state.W, state.psi))
    dense = jr.GaussianState(state.mean, jnp.asarray(cov), state.step, state.info)
    Xq = rng.normal(size=(4, d))
    for a, b in zip(jr.predictive(state, Xq), jr.predictive(dense, Xq)):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    draws = flt.spec.belief.sample(state, jax.random.PRNGKey(0), 20000)
    np.testing.assert_allclose(np.cov(np.asarray(draws).T), cov, atol=0.05 * np.abs(cov).max())


@pytest.mark.parametrize("m", [1, 2])
def test_settle_of_a_buffer_is_finish_where_ok_and_the_prior_where_not(m):
    """``LowRank.settle`` (the guard's path, columns written outside the projecting conditional)
    equals ``finish`` of the pending factor where ``ok`` and returns the prior where not, on the
    steps that store and on the step that overflows and projects."""
    from jaxrvga.beliefs import LowRank
    rng = np.random.default_rng(3)
    d, p, b = 9, 2, 4
    belief = LowRank(rank=p, inner_loops=0, buffer=b)
    W0, psi0 = _prior(rng, d, p)
    prior = belief.init(jnp.asarray(rng.normal(size=d)), W0, psi0)
    def pending(prior, X):
        new, _ = belief.add(prior, X, None)
        return new._replace(mean=prior.mean + 0.1)

    # traced with the step, as in the guard: the pending factor holds the prior's own W and psi
    settle = jax.jit(lambda prior, X, ok: belief.settle(prior, pending(prior, X), ok))
    finish = jax.jit(lambda prior, X: belief.finish(pending(prior, X)))  # compiled, as settle
    for step in range(4):  # m = 1: stores 4 times; m = 2: stores twice, projects, stores
        X = jnp.asarray(rng.normal(size=(d, m)))
        done, (dropped, _, _) = finish(prior, X)
        assert (step == 2 and m == 2) == (float(dropped) > 0)  # the overflow projects
        for ok in (True, False):
            out, _ = settle(prior, X, jnp.asarray(ok))
            want = done if ok else prior
            for field in ("mean", "W", "psi", "gram"):
                np.testing.assert_allclose(getattr(out, field), getattr(want, field), rtol=1e-12, atol=1e-12)
        prior = done


def test_buffer_counts_columns_and_refuses_one_too_small_for_a_step():
    """A 3-class step brings K - 1 = 2 curvature columns (the rows of its Fisher with curvature):
    ``buffer=1`` could never hold one (it silently projected every step before); ``buffer=2`` stores
    the step's columns: the precision is then exact."""
    K, d = 3, 2
    model = jr.models.softmax_regression(d, K)
    state0 = dict(mean=jnp.zeros(d * K), W=0.1 * np.eye(d * K)[:, :2], psi=np.ones(d * K))
    with pytest.raises(ValueError, match=r"buffer=1 curvature columns cannot hold the 2 columns"):
        flt = jr.lrvga(model, rank=2, scheme="ekf", buffer=1)
        flt.update(flt.init(**state0), jnp.ones(d), 1)
    held = jr.lrvga(model, rank=2, scheme="ekf", buffer=2)
    dense = jr.ekf(model)
    # both steps in one compiled program (eagerly: one program per operation, 150 in all)
    out, want = jax.jit(lambda a, b: (held.update(a, jnp.ones(d), 1), dense.update(b, jnp.ones(d), 1)))(
        held.init(**state0),
        dense.init(state0["mean"], np.linalg.inv(jr.kernels.lowrank.to_dense_precision(state0["W"], state0["psi"]))))
    assert out.W.shape == (d * K, 4) and np.all(np.asarray(jnp.diagonal(out.gram)[2:]) > 0)  # stored, not projected
    np.testing.assert_allclose(jr.kernels.lowrank.to_dense_covariance(out.W, out.psi), want.cov, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.mean, want.mean, rtol=1e-5, atol=1e-6)
