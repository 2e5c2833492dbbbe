"""Sharded limited-memory filters (jaxrvga.sharding) equal the unsharded run.

The sharded run needs several devices; on CPU they come from
``XLA_FLAGS=--xla_force_host_platform_device_count=4``, which must be set before jax is
imported, so it runs in a subprocess and sends its results back through an .npz file.
"""
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga import sharding
from jaxrvga import lrvga

D, P_RANK, T, LOOPS = 64, 3, 12, 3
CASES = {"linear": "exact", "logistic": "explicit", "logistic_implicit": "implicit"}


def problem():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((T, D)) / np.sqrt(D) * 3.0
    theta = rng.standard_normal(D)
    eta = X @ theta
    y_lin = eta + rng.standard_normal(T)
    y_log = (rng.uniform(size=T) < 1 / (1 + np.exp(-eta))).astype(float)
    return X, y_lin, y_log


def make_filter(name):
    model = jr.models.linear_gaussian(1.0) if name == "linear" else jr.models.logistic()
    return lrvga(model, rank=P_RANK, inner_loops=LOOPS, scheme=CASES[name])


def initial_state(flt, prior_var=1.0):
    W0, psi0 = jr.kernels.lowrank.init_factors(jax.random.PRNGKey(1), D, P_RANK, prior_var, eps=1e-2)
    return flt.init(jnp.zeros(D), W0, psi0)


def learned_prior_average():
    """``(avg, state)``: a model average of two logistic L-RVGA members (prior variances 1 and 1/4)
    whose priors are learned on the stream, one per half of the weights (issue 51: a learned prior shards
    like any state field)."""
    flt = make_filter("logistic")
    members = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *(initial_state(flt, v) for v in (1.0, 0.25)))
    avg = jr.model_average(flt, scales=(0.0, 1.0), learn_prior=4.0, prior_groups=(D // 2, D - D // 2))
    return avg, avg.init(members, prior_precision=jnp.array([1.0, 4.0]))


CHILD = textwrap.dedent("""
    import sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    sys.path.insert(0, {root!r})
    from tests import test_sharding as ts
    from jaxrvga import sharding
    assert len(jax.devices()) == 4, jax.devices()
    X, y_lin, y_log = ts.problem()
    mesh = sharding.make_mesh()
    out = {{}}
    for name in ts.CASES:
        flt = ts.make_filter(name)
        ys = y_lin if name == "linear" else y_log
        final, _ = sharding.run(flt, ts.initial_state(flt), X, ys, mesh)
        shard_rows = {{s.data.shape[0] for s in final.W.addressable_shards}}
        assert shard_rows == {{ts.D // 4}}, shard_rows
        assert len(final.W.sharding.device_set) == 4
        for field in ("mean", "W", "psi"):
            out[name + "_" + field] = np.asarray(getattr(final, field))
    diag = ts.diagonal_filter()
    final, _ = sharding.run(diag, diag.init(np.zeros(ts.D), 1.0), X, y_log, mesh)
    assert {{s.data.shape[0] for s in final.psi.addressable_shards}} == {{ts.D // 4}}
    out["diagonal_mean"], out["diagonal_psi"] = np.asarray(final.mean), np.asarray(final.psi)
    avg, state = ts.learned_prior_average()
    final, _ = sharding.run(avg, state, X, y_log, mesh)
    assert {{s.data.shape[1] for s in final.members.W.addressable_shards}} == {{ts.D // 4}}
    for field in ("mean", "W", "psi"):
        out["average_" + field] = np.asarray(getattr(final.members, field))
    out["average_log_precision"] = np.asarray(final.prior.log_precision)
    out["average_log_weight"] = np.asarray(final.log_weight)
    np.savez(sys.argv[1], **out)
""")


def diagonal_filter():
    """The diagonal belief shards along d as it is (every d-length leaf split)."""
    return jr.diag_rvga(jr.models.logistic(), "ekf")


def test_sharded_run_equals_unsharded(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # here, not at the top: the child process imports this module without tests/ on its path
    from conftest import outer, with_host_devices
    env = dict(os.environ, XLA_FLAGS=with_host_devices(4), JAX_PLATFORMS="cpu")
    path = str(tmp_path / "sharded.npz")
    res = subprocess.run([sys.executable, "-c", CHILD.format(root=root), path], env=env, cwd=root,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    got = np.load(path)
    X, y_lin, y_log = problem()
    for name in CASES:
        flt = make_filter(name)
        ref, _ = jr.run(flt, initial_state(flt), X, y_lin if name == "linear" else y_log)
        for field in ("mean", "W", "psi"):
            a, b = got[f"{name}_{field}"], np.asarray(getattr(ref, field))
            if field == "W":  # W only up to a rotation of its columns: compare W W^T
                a, b = outer(a), outer(b)
            assert np.all(np.isfinite(b))
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * np.max(np.abs(b)),
                                       err_msg=f"{name}.{field}")
    diag = diagonal_filter()
    ref, _ = jr.run(diag, diag.init(np.zeros(D), 1.0), X, y_log)
    np.testing.assert_allclose(got["diagonal_mean"], ref.mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["diagonal_psi"], ref.psi, rtol=1e-10)
    avg, state = learned_prior_average()
    ref, _ = jr.run(avg, state, X, y_log)
    assert np.all(np.asarray(ref.info.converged))
    assert np.all(np.abs(ref.prior.log_precision - np.log([[1.0], [4.0]])) > 1e-3)  # the priors moved
    np.testing.assert_allclose(got["average_log_precision"], ref.prior.log_precision, rtol=1e-9)
    np.testing.assert_allclose(got["average_log_weight"], ref.log_weight, rtol=1e-9, atol=1e-9)
    for field in ("mean", "psi"):
        np.testing.assert_allclose(got[f"average_{field}"], getattr(ref.members, field), rtol=1e-9, atol=1e-10)
    for k in range(2):
        np.testing.assert_allclose(outer(got["average_W"][k]), outer(ref.members.W[k]), rtol=1e-9, atol=1e-10)


def test_single_device_mesh_matches_and_specs():
    from conftest import outer
    mesh = sharding.make_mesh(jax.devices()[:1])
    flt = make_filter("linear")
    X, y_lin, _ = problem()
    state = initial_state(flt)
    specs = sharding.state_specs(state, D, mesh)
    assert specs.mean == jax.sharding.PartitionSpec("d")
    assert specs.W == jax.sharding.PartitionSpec("d", None)
    assert specs.step == jax.sharding.PartitionSpec()
    got, _ = sharding.run(flt, state, X, y_lin, mesh)
    ref, _ = jr.run(flt, state, X, y_lin)
    np.testing.assert_allclose(outer(got.W), outer(ref.W), rtol=1e-12, atol=0)


def test_members_of_a_model_average_trace_one_row_block():
    """Row blocks would split the sharded axis: sharding rebuilds a low-rank filter, and the low-rank members
    of a model average, with one row block; another filter is kept as it is."""
    flt = jr.filters.with_block_rows(make_filter("logistic"), 2)
    avg = jr.model_average(flt, scales=(0.0, 1.0), learn_prior=4.0)
    assert sharding._one_row_block(flt).spec.belief.block_rows == 0
    assert jr.average.member_filter(sharding._one_row_block(avg)).spec.belief.block_rows == 0
    kalman = jr.kalman(1.0)
    assert sharding._one_row_block(kalman) is kalman


def test_validation():
    mesh = sharding.make_mesh(jax.devices()[:1])
    with pytest.raises(ValueError, match="xs"):
        sharding.shard_inputs(np.zeros(5), mesh)
    with pytest.raises(ValueError, match="flt"):
        sharding.sharded_filter(lambda s: s, mesh, 4)
    with pytest.raises(ValueError, match="mesh"):
        sharding.shard_inputs(np.zeros((2, 4)), "not a mesh")
    with pytest.raises(ValueError, match="devices"):
        sharding.make_mesh([])


def test_run_compiles_once_per_filter_and_mesh():
    """A second sharding.run with the same filter and mesh reuses the compiled scan (no re-trace)."""
    mesh = sharding.make_mesh(jax.devices()[:1])
    base = make_filter("logistic")
    traces = []

    def update(state, x, y):
        traces.append(1)  # runs only while jax traces the update
        return base.update(state, x, y)

    flt = jr.Filter(base.init, update, base.check)
    X, _, y_log = problem()
    state = initial_state(flt)
    first, _ = sharding.run(flt, state, X, y_log, mesh)
    n = len(traces)
    assert n >= 1
    second, _ = sharding.run(flt, state, X[::-1], y_log[::-1], mesh)
    assert len(traces) == n
    assert not np.allclose(first.mean, second.mean)  # the second call really ran on its data
    assert sharding.sharded_filter(flt, mesh, D) is sharding.sharded_filter(flt, mesh, D)


def test_gather_returns_full_host_values():
    mesh = sharding.make_mesh(jax.devices()[:1])
    flt = make_filter("linear")
    state = sharding.shard_state(initial_state(flt), mesh)
    key = jax.random.key(3)
    got = sharding.gather({"state": state, "host": np.arange(3.0), "key": key, "none": None})
    for a, b in zip(jax.tree_util.tree_leaves(got["state"]), jax.tree_util.tree_leaves(state)):
        assert isinstance(a, np.ndarray)
        np.testing.assert_array_equal(a, np.asarray(b))
    np.testing.assert_array_equal(got["host"], np.arange(3.0))
    assert got["none"] is None
    np.testing.assert_array_equal(jax.random.key_data(got["key"]), jax.random.key_data(key))
