"""The Filter contract and the scan driver."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr


def kalman_problem(n=12, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d) + rng.normal(size=n)


def test_run_equals_python_loop_and_trace_is_stacked():
    X, y = kalman_problem()
    flt = jr.kalman(1.0)
    s0 = flt.init(np.zeros(3), np.eye(3))
    final, means = jr.run(flt, s0, X, y, jr.trace_mean)
    s = s0
    for t in range(len(y)):
        s = flt.update(s, X[t], y[t])
        np.testing.assert_allclose(means[t], s.mean, rtol=1e-13)
    assert int(final.step) == len(y)


def test_run_rejects_mismatched_lengths():
    flt = jr.kalman(1.0)
    with pytest.raises(ValueError, match="leading \\(time\\) axis"):
        jr.run(flt, flt.init(np.zeros(3), np.eye(3)), np.ones((5, 3)), np.ones(4))


def test_donated_run_gives_the_same_result():
    X, y = kalman_problem()
    flt = jr.kalman(1.0)
    ref, _ = jr.run(flt, flt.init(np.zeros(3), np.eye(3)), X, y)
    don, _ = jr.run(flt, flt.init(np.zeros(3), np.eye(3)), X, y, donate=True)
    # two compiled programs (with and without donation): equal to rounding, not bit for bit
    np.testing.assert_allclose(don.mean, ref.mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(don.cov, ref.cov, rtol=1e-12, atol=1e-14)


def test_validate_mode_names_the_first_bad_step():
    X, y = kalman_problem()
    flt = jr.kalman(1.0)
    s0 = flt.init(np.zeros(3), np.eye(3))
    ok, _ = jr.run(flt, s0, X, y, validate=True)
    np.testing.assert_allclose(ok.mean, jr.run(flt, s0, X, y)[0].mean, rtol=1e-12, atol=1e-14)
    X_bad = X.copy()
    X_bad[7, 1] = np.inf
    with pytest.raises(ValueError, match="NaN or inf in the data at step 7"):
        jr.run(flt, s0, X_bad, y, validate=True)


def test_skipped_update_is_flagged_and_keeps_the_belief():
    """An update that would make the covariance indefinite (a non-log-concave likelihood
    with strongly negative curvature) is skipped and flagged, never applied."""
    from jaxrvga.guard import _guarded
    from jaxrvga.schemes import Increment, absorb
    belief = jr.beliefs.Dense()
    s0 = belief.init(np.zeros(2), np.eye(2))
    inc = Increment(jnp.array([[1.0], [0.0]]), jnp.array([-2.0]), jnp.array([0.3]))  # 1 + c nu0 = -1
    bad = _guarded(belief, s0, *absorb(belief, s0, inc), s0.info)
    assert not bool(bad.info.converged)
    np.testing.assert_array_equal(bad.cov, s0.cov)
    np.testing.assert_array_equal(bad.mean, s0.mean)
    assert int(bad.step) == 1


def counting_trace():
    """A ``trace_fn`` (the mean) counting how often it is traced: once per compiled scan."""
    calls = []

    def trace(s, x, y):
        calls.append(1)
        return s.mean

    return trace, calls


def test_scan_is_the_unjitted_run_and_vmaps():
    X, y = kalman_problem(n=10)
    flt = jr.kalman(1.0)
    s0 = flt.init(np.zeros(3), np.eye(3))
    ref, ref_means = jr.run(flt, s0, X, y, jr.trace_mean)
    fin, means = jax.jit(jr.scan, static_argnums=(0, 4))(flt, s0, X, y, jr.trace_mean)
    np.testing.assert_allclose(fin.mean, ref.mean, rtol=1e-13)
    np.testing.assert_allclose(means, ref_means, rtol=1e-13)
    fleet = jax.vmap(lambda xs, ys: jr.scan(flt, s0, xs, ys)[0].mean)(np.stack([X, 2 * X]), np.stack([y, y]))
    np.testing.assert_allclose(fleet[0], ref.mean, rtol=1e-12)


@pytest.mark.parametrize("bucket", [8, True])
def test_chunked_bucketed_runs_equal_one_run_and_compile_once(bucket):
    """Chunks of 7, 5 and 3 steps (padded to 8 steps, or to 8, 8, 4) end in the state of one run over
    the 15 steps; the padded steps leave the state and its step counter alone and are not traced out."""
    X, y = kalman_problem(n=15)
    flt, (trace, calls) = jr.kalman(1.0), counting_trace()
    s0 = flt.init(np.zeros(3), np.eye(3))
    ref, ref_means = jr.run(flt, s0, X, y, jr.trace_mean)
    s, means = s0, []
    for a, b in [(0, 7), (7, 12), (12, 15)]:
        s, m = jr.run(flt, s, X[a:b], y[a:b], trace, bucket=bucket)
        assert m.shape == (b - a, 3)
        means.append(m)
    assert int(s.step) == 15
    np.testing.assert_allclose(s.mean, ref.mean, rtol=1e-12)
    np.testing.assert_allclose(s.cov, ref.cov, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.concatenate(means), ref_means, rtol=1e-12)
    assert len(calls) == (1 if bucket == 8 else 2)  # 8 steps only, or 8 and 4 steps


def test_chunks_of_5_and_3_steps_trace_once():
    X, y = kalman_problem(n=8)
    flt, (trace, calls) = jr.kalman(1.0), counting_trace()
    s = flt.init(np.zeros(3), np.eye(3))
    s, _ = jr.run(flt, s, X[:5], y[:5], trace, bucket=8)
    s, _ = jr.run(flt, s, X[5:], y[5:], trace, bucket=8)
    assert len(calls) == 1
    np.testing.assert_allclose(s.mean, jr.run(flt, flt.init(np.zeros(3), np.eye(3)), X, y)[0].mean, rtol=1e-12)


def test_bucketed_runs_keep_donate_and_validate():
    X, y = kalman_problem(n=12)
    flt = jr.kalman(1.0)
    ref, _ = jr.run(flt, flt.init(np.zeros(3), np.eye(3)), X, y)
    don, _ = jr.run(flt, flt.init(np.zeros(3), np.eye(3)), X, y, donate=True, bucket=True)
    np.testing.assert_allclose(don.mean, ref.mean, rtol=1e-12)
    chk, _ = jr.run(flt, flt.init(np.zeros(3), np.eye(3)), X, y, validate=True, bucket=5)
    np.testing.assert_allclose(chk.mean, ref.mean, rtol=1e-12)
    X_bad = X.copy()
    X_bad[10, 0] = np.nan
    with pytest.raises(ValueError, match=r"NaN or inf in the data at step 10\b"):
        jr.run(flt, flt.init(np.zeros(3), np.eye(3)), X_bad, y, validate=True, bucket=True)
    with pytest.raises(ValueError, match="bucket must be"):
        jr.run(flt, flt.init(np.zeros(3), np.eye(3)), X, y, bucket=0)


def test_validate_and_progress_under_jit_or_vmap_raise_value_error():
    X, y = kalman_problem(n=6)
    flt = jr.kalman(1.0)
    s0 = flt.init(np.zeros(3), np.eye(3))
    for kw in [dict(validate=True), dict(progress=True)]:
        with pytest.raises(ValueError, match="runs outside jit/vmap"):
            jax.jit(lambda xs, ys, kw=kw: jr.run(flt, s0, xs, ys, **kw)[0].mean)(X, y)
        with pytest.raises(ValueError, match="runs outside jit/vmap"):
            jax.vmap(lambda ys, kw=kw: jr.run(flt, s0, X, ys, **kw)[0].mean)(np.stack([y, y]))


class RecordingBar:
    """Stands in for ``tqdm``: records the updates it receives."""
    bars = []

    def __init__(self, total, **kw):
        self.total, self.n, self.updates, self.closed = total, 0, 0, False
        RecordingBar.bars.append(self)

    def update(self, k):
        self.n += k
        self.updates += 1

    def close(self):
        self.closed = True


def test_progress_bar_counts_every_step_and_leaves_the_result(monkeypatch):
    import tqdm.auto
    monkeypatch.setattr(tqdm.auto, "tqdm", RecordingBar)
    X, y = kalman_problem(n=20)
    flt = jr.kalman(1.0)
    s0 = flt.init(np.zeros(3), np.eye(3))
    ref, _ = jr.run(flt, s0, X, y)
    out, _ = jr.run(flt, s0, X, y, progress=True)
    np.testing.assert_array_equal(out.mean, jr.run(flt, s0, X, y, progress=False)[0].mean)
    np.testing.assert_allclose(out.mean, ref.mean, rtol=1e-13)
    bar = RecordingBar.bars[-1]
    assert (bar.total, bar.n, bar.updates, bar.closed) == (20, 20, 1, True)  # cheap steps: one block
    jr.run(flt, s0, X, y, progress=1)
    assert (RecordingBar.bars[-1].n, RecordingBar.bars[-1].updates) == (20, 20)
    jr.run(flt, s0, X, y, progress=6, bucket=True)  # 32 padded steps: 6, 12, 18, 20 (24 clamped)
    bar = RecordingBar.bars[-1]
    assert (bar.total, bar.n, bar.updates) == (20, 20, 4)


def test_progress_without_tqdm_says_so(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    flt = jr.kalman(1.0)
    with pytest.raises(ImportError, match="needs tqdm"):
        jr.run(flt, flt.init(np.zeros(3), np.eye(3)), *kalman_problem(n=4), progress=True)


def test_progress_updates_are_about_100_per_run_but_at_least_10ms_of_work_apart():
    from jaxrvga.core import _progress_every
    big = np.empty((2000, 2000))  # 32 MB: a step of >= 3.2 ms at 10 GB/s
    assert _progress_every(1000, big) == 10
    assert _progress_every(10**5, np.empty(110)) == 10**4  # a 1 us step: 10 ms = 1e4 steps
    assert _progress_every(50, np.empty(110)) == 50  # never more than the run


def step_problem(n=8, d=4, seed=2):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), (rng.random(n) < 0.5).astype(float)


@pytest.mark.parametrize("name", ["ekf", "rvga_nonlinear_typed_key", "lrvga", "rvga_float32"])
def test_step_fn_follows_the_update_one_observation_at_a_time(name):
    X, y = step_problem()
    d = X.shape[1]
    if name == "ekf":
        flt = jr.ekf(jr.models.logistic())
        s = flt.init(np.zeros(d), np.eye(d))
    elif name == "rvga_nonlinear_typed_key":
        flt = jr.rvga(jr.models.nonlinear(lambda th, x: x @ th, jr.models.gaussian(0.25)), "sampled", num_samples=4)
        s = flt.init(np.zeros(d), np.eye(d), key=jax.random.key(0))
    elif name == "lrvga":
        flt = jr.lrvga(jr.models.logistic(), 2)
        s = flt.init(np.zeros(d), 0.1 * np.ones((d, 2)), np.ones(d))
    else:
        flt = jr.rvga(jr.models.logistic())
        s = flt.init(np.zeros(d, np.float32), np.eye(d, dtype=np.float32))
        X = X.astype(np.float32)
    step = jr.step_fn(flt, s, X[0], y[0])
    assert len(step.pack(s)) <= 3  # one buffer per dtype, not one per leaf
    back = step.unpack(step.pack(s))
    for u, v in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(s)):
        assert u.dtype == v.dtype
        if jnp.issubdtype(u.dtype, jax.dtypes.prng_key):
            u, v = jax.random.key_data(u), jax.random.key_data(v)
        np.testing.assert_array_equal(u, v)
    update = jax.jit(flt.update)
    packed, ref = step.pack(s), s
    for t in range(len(y)):
        packed = step.update(packed, X[t], y[t])
        ref = update(ref, X[t], y[t])
    out = step.unpack(packed)
    tol = 1e-5 if name == "rvga_float32" else 1e-12
    for u, v in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(ref)):
        if jnp.issubdtype(u.dtype, jax.dtypes.prng_key):
            u, v = jax.random.key_data(u), jax.random.key_data(v)
        np.testing.assert_allclose(np.asarray(u, float), np.asarray(v, float), rtol=tol, atol=tol)
    assert int(out.step) == len(y)


def test_predicted_is_the_prediction_step_or_the_state_itself():
    """``Filter.predicted``: a filter without dynamics conditions on the state itself; with fading memory
    on ``(1 + eta) P`` (the prediction step, float64)."""
    static, fading = jr.kalman(1.0), jr.kalman(1.0, process_noise=0.25)
    state = static.init(jnp.array([0.5, -1.0]), jnp.eye(2))
    bare = jr.Filter(static.init, static.update)  # no prediction step at all
    assert bare.predict is None and bare.predicted(state) is state
    for a, b in zip(jax.tree_util.tree_leaves(static.predicted(state)), jax.tree_util.tree_leaves(state)):
        np.testing.assert_array_equal(a, b)  # identity dynamics
    moved = fading.predicted(state)
    np.testing.assert_allclose(moved.cov, 1.25 * np.eye(2), rtol=1e-15)
    np.testing.assert_array_equal(moved.mean, state.mean)
