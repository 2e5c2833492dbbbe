"""Exact save / load of filter states (jaxrvga.io)."""
import json
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrvga import io
from jaxrvga.beliefs import GaussianState, LowRankState
from jaxrvga.core import Filter, run, solver_info


class OnlineEMState(NamedTuple):
    """Stand-in for a state another module defines (online EM for factor analysis)."""

    W: jax.Array
    psi: jax.Array
    stats: dict
    history: list
    t: int
    rate: float
    extra: Optional[jax.Array] = None


io.register(OnlineEMState)


def _leaves_identical(a, b):
    """Same tree structure, and every leaf has the same type, dtype, weak type and bits."""
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        assert type(x) is type(y) or (isinstance(x, jax.Array) and isinstance(y, jax.Array))
        if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(jax.random.key_data(x), jax.random.key_data(y))
        elif isinstance(x, (jax.Array, np.ndarray, np.generic)):
            assert x.dtype == y.dtype and np.shape(x) == np.shape(y)
            assert getattr(x, "weak_type", False) == getattr(y, "weak_type", False)
            np.testing.assert_array_equal(np.atleast_1d(np.asarray(x)).view(np.uint8),
                                          np.atleast_1d(np.asarray(y)).view(np.uint8))
        else:
            assert x == y or (x != x and y != y)


def _roundtrip(tmp_path, state, name="state.npz"):
    path = tmp_path / name
    io.save(path, state)
    out = io.load(path)
    _leaves_identical(state, out)
    return out


def test_gaussian_state_float64(tmp_path):
    rng = np.random.default_rng(0)
    A = rng.normal(size=(4, 4))
    st = GaussianState(jnp.asarray(rng.normal(size=4)), jnp.asarray(A @ A.T), jnp.asarray(7, jnp.int32),
                       solver_info(jnp.float64, converged=False, residual=1e-9, iterations=3))
    out = _roundtrip(tmp_path, st)
    assert type(out) is GaussianState and out.key is None
    assert type(out.info).__name__ == "SolverInfo"


@pytest.mark.parametrize("key", [jax.random.PRNGKey(3), jax.random.key(3),
                                 jax.random.key(5, impl="rbg"), None])
def test_lowrank_state_float32_with_keys(tmp_path, key):
    rng = np.random.default_rng(1)
    st = LowRankState(jnp.asarray(rng.normal(size=6), jnp.float32),
                      jnp.asarray(rng.normal(size=(6, 2)), jnp.float32),
                      jnp.asarray(rng.uniform(size=6), jnp.float32), jnp.asarray(0, jnp.int32),
                      solver_info(jnp.float32), key)
    out = _roundtrip(tmp_path, st)
    assert out.mean.dtype == jnp.float32 and out.W.dtype == jnp.float32
    if key is not None:
        # The restored key draws the same numbers.
        np.testing.assert_array_equal(jax.random.normal(out.key, (3,)), jax.random.normal(key, (3,)))


def test_batched_typed_keys_and_vmapped_state(tmp_path):
    keys = jax.random.split(jax.random.key(0), 3)
    st = GaussianState(jnp.zeros((3, 2)), jnp.broadcast_to(jnp.eye(2), (3, 2, 2)),
                       jnp.zeros(3, jnp.int32),
                       jax.vmap(lambda _: solver_info(jnp.float64))(jnp.arange(3)), keys)
    _roundtrip(tmp_path, st)


def test_generic_namedtuple_and_containers(tmp_path):
    st = OnlineEMState(
        W=jnp.arange(6.0).reshape(3, 2),
        psi=np.linspace(0.1, 1.0, 3).astype(np.float32),
        stats={"S2": jnp.ones((2, 3), jnp.bfloat16), "S3": jnp.eye(2), "count": np.int64(12)},
        history=[jnp.asarray(1.5), (np.float32(2.5), None)],  # jnp.asarray(1.5) is weakly typed
        t=501, rate=0.1 + 0.2, extra=jnp.asarray([np.nan, -np.inf, 1e-308]))
    out = _roundtrip(tmp_path, st)
    assert out.history[0].weak_type and out.stats["S2"].dtype == jnp.bfloat16
    assert isinstance(out.psi, np.ndarray) and isinstance(out.stats["count"], np.int64)
    assert out.rate == 0.1 + 0.2 and isinstance(out.t, int)


def test_save_to_file_object(tmp_path):
    st = GaussianState(jnp.ones(2), jnp.eye(2), jnp.asarray(1, jnp.int32), solver_info())
    with open(tmp_path / "f.bin", "wb") as fh:
        io.save(fh, st)
    _leaves_identical(st, io.load(tmp_path / "f.bin"))


# --------------------------------------------------------------------- resuming a stream

def _jittered_kalman(noise_var):
    """A Kalman filter (Joseph-free, scalar y) whose observation is jittered by the state's key.

    Written inline because the library's filters evolve separately; the key makes the test
    sensitive to an inexact restore of the PRNG state as well as of the moments.
    """

    def init(mean, cov, key):
        return GaussianState(mean, cov, jnp.zeros((), jnp.int32), solver_info(mean.dtype), key)

    def update(state, x, y):
        key, sub = jax.random.split(state.key)
        y = y + 1e-3 * jax.random.normal(sub, dtype=state.mean.dtype)
        Px = state.cov @ x
        gain = Px / (x @ Px + noise_var)
        return GaussianState(state.mean + gain * (y - x @ state.mean), state.cov - jnp.outer(gain, Px),
                             state.step + 1, state.info, key)

    return Filter(init, update)


@pytest.mark.parametrize("dtype,key", [(jnp.float64, jax.random.key(1)),
                                       (jnp.float32, jax.random.PRNGKey(2))])
def test_two_halves_equal_one_run(tmp_path, dtype, key):
    rng = np.random.default_rng(3)
    d, n = 5, 80
    xs = jnp.asarray(rng.normal(size=(n, d)), dtype)
    ys = jnp.asarray(rng.normal(size=n), dtype)
    flt = _jittered_kalman(jnp.asarray(0.5, dtype))
    s0 = flt.init(jnp.zeros(d, dtype), jnp.eye(d, dtype=dtype), key)

    full, _ = run(flt, s0, xs, ys)
    half, _ = run(flt, s0, xs[: n // 2], ys[: n // 2])
    io.save(tmp_path / "ckpt.npz", half)
    loaded = io.load(tmp_path / "ckpt.npz")
    _leaves_identical(half, loaded)  # the round trip itself is exact
    resumed, _ = run(flt, loaded, xs[n // 2:], ys[n // 2:])
    # scans of n/2 and n steps are two compiled programs: equal to rounding, keys exactly
    np.testing.assert_array_equal(jax.random.key_data(resumed.key) if jnp.issubdtype(
        resumed.key.dtype, jax.dtypes.prng_key) else resumed.key,
        jax.random.key_data(full.key) if jnp.issubdtype(full.key.dtype, jax.dtypes.prng_key) else full.key)
    rtol = 1e-12 if dtype == jnp.float64 else 1e-5
    np.testing.assert_allclose(resumed.mean, full.mean, rtol=rtol, atol=rtol * float(jnp.max(jnp.abs(full.mean))))
    np.testing.assert_allclose(resumed.cov, full.cov, rtol=rtol, atol=rtol * float(jnp.max(jnp.abs(full.cov))))
    assert int(resumed.step) == n


# --------------------------------------------------------------------- errors

def test_not_a_state_file(tmp_path):
    txt = tmp_path / "notes.txt"
    txt.write_text("hello")
    with pytest.raises(ValueError, match="not a jaxrvga state"):
        io.load(txt)
    npz = tmp_path / "plain.npz"
    np.savez(npz, a=np.ones(3))
    with pytest.raises(ValueError, match="not a jaxrvga state"):
        io.load(npz)
    npy = tmp_path / "plain.npy"
    np.save(npy, np.ones(3))
    with pytest.raises(ValueError, match="not a jaxrvga state"):
        io.load(npy)
    with pytest.raises(FileNotFoundError):
        io.load(tmp_path / "missing.npz")


def test_unsupported_leaves_and_local_classes(tmp_path):
    with pytest.raises(ValueError, match="cannot save a state leaf"):
        io.save(tmp_path / "x.npz", GaussianState(object(), None, None, None))

    class Local(NamedTuple):
        a: jax.Array

    with pytest.raises(ValueError, match="not registered"):
        io.save(tmp_path / "x.npz", Local(jnp.ones(1)))
    assert not (tmp_path / "x.npz").exists()
    io.register(Local)
    try:
        io.save(tmp_path / "x.npz", Local(jnp.ones(1)))
        assert type(io.load(tmp_path / "x.npz")) is Local
    finally:
        io._REGISTRY.pop(io._name(Local))


def _rewrite_meta(path, edit):
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    meta = json.loads(str(arrays[io.META_KEY]))
    edit(meta)
    arrays[io.META_KEY] = np.array(json.dumps(meta))
    np.savez(path, **arrays)


def test_schema_mismatch_and_newer_version(tmp_path):
    path = tmp_path / "s.npz"
    io.save(path, GaussianState(jnp.ones(2), jnp.eye(2), jnp.asarray(0, jnp.int32), solver_info()))

    def rename(meta):
        meta["tree"]["fields"][0] = "mu"

    _rewrite_meta(path, rename)
    with pytest.raises(ValueError, match="has fields"):
        io.load(path)
    _rewrite_meta(path, lambda m: m.update(version=io.VERSION + 1))
    with pytest.raises(ValueError, match="newer"):
        io.load(path)


def test_float64_needs_x64_on_load(tmp_path):
    path = tmp_path / "s64.npz"
    io.save(path, {"m": jnp.ones(2, jnp.float64)})
    with jax.enable_x64(False):
        with pytest.raises(ValueError, match="jax_enable_x64"):
            io.load(path)


# --------------------------------------------------------------------- untrusted files

def _gaussian_file(path, d=3):
    st = GaussianState(jnp.arange(float(d)), jnp.eye(d), jnp.asarray(2, jnp.int32), solver_info())
    io.save(path, st)
    return st


@pytest.mark.parametrize("module,qualname", [("os", "system"), ("builtins", "exec"),
                                             ("subprocess", "call"), ("jaxrvga.io", "save")])
@pytest.mark.parametrize("fields", [[], ["a"]])
def test_a_file_naming_a_callable_runs_nothing(tmp_path, module, qualname, fields):
    """A crafted checkpoint whose NamedTuple node names an arbitrary callable with the command as
    its child. Before the registry, ``fields: []`` matched ``getattr(os.system, "_fields", ())`` and
    load ran ``os.system(cmd)``. Now load refuses it and runs nothing (``pwned`` is not created)."""
    path, marker = tmp_path / "evil.npz", tmp_path / "pwned"
    arg = f"open({str(marker)!r}, 'w')" if module == "builtins" else f"touch {marker}"
    if module == "subprocess":
        arg = ["touch", str(marker)]
    child = ({"t": "py", "type": "str", "value": arg} if isinstance(arg, str) else
             {"t": "list", "children": [{"t": "py", "type": "str", "value": a} for a in arg]})
    tree = {"t": "namedtuple", "module": module, "qualname": qualname, "fields": fields, "children": [child]}
    np.savez(path, **{io.META_KEY: np.array(json.dumps({"format": io.FORMAT, "version": 1, "tree": tree}))})
    with pytest.raises(ValueError, match="not registered"):
        io.load(path)
    assert not marker.exists()


def test_register_only_namedtuple_classes():
    with pytest.raises(ValueError, match="NamedTuple"):
        io.register(dict)
    with pytest.raises(ValueError, match="NamedTuple"):
        io.register(OnlineEMState(1, 2, 3, 4, 5, 6))
    assert GaussianState in io.registered() and LowRankState in io.registered()


def test_inconsistent_leaves_are_refused(tmp_path):
    path = tmp_path / "s.npz"
    io.save(path, GaussianState(jnp.zeros(7), jnp.eye(5), jnp.asarray(0, jnp.int32), solver_info()))
    with pytest.raises(ValueError, match="cov has shape"):  # save does not validate; load does
        io.load(path)
    io.save(path, GaussianState(jnp.zeros(3), jnp.eye(3, dtype=jnp.float32), jnp.asarray(0, jnp.int32),
                                solver_info()))
    with pytest.raises(ValueError, match="one dtype"):
        io.load(path)
    # a covariance relabelled as the W of a LowRankState: psi would be the int step
    _gaussian_file(path, 4)

    def relabel(meta):
        tree = meta["tree"]
        tree["module"], tree["qualname"] = LowRankState.__module__, "LowRankState"
        tree["fields"] = list(LowRankState._fields)
        tree["children"] = tree["children"] + [{"t": "none"}] * (len(LowRankState._fields) - len(tree["children"]))

    _rewrite_meta(path, relabel)
    with pytest.raises(ValueError, match="inconsistent LowRankState"):
        io.load(path)
    # W with more columns than rows, psi of the wrong length
    for W, psi in ((jnp.ones((3, 5)), jnp.ones(3)), (jnp.ones((3, 2)), jnp.ones(4))):
        io.save(path, LowRankState(jnp.zeros(3), W, psi, jnp.asarray(0, jnp.int32), solver_info()))
        with pytest.raises(ValueError, match="inconsistent LowRankState"):
            io.load(path)
    # a SolverInfo whose flag is a float
    io.save(path, solver_info()._replace(converged=jnp.asarray(1.0)))
    with pytest.raises(ValueError, match="converged must be bool"):
        io.load(path)


@pytest.mark.parametrize("edit", [
    lambda m: m.pop("tree"),
    lambda m: m.update(version="1"),
    lambda m: m.update(version=0),
    lambda m: m["tree"].update(children="abc"),
    lambda m: m["tree"]["children"][0].update(leaf="leaf_99999"),
    lambda m: m["tree"]["children"][0].update(leaf=io.META_KEY),
    lambda m: m["tree"]["children"][0].update(dtype="object"),
    lambda m: m["tree"]["children"][0].update(dtype="no such dtype"),
    lambda m: m["tree"]["children"][0].update(dtype=["float64"]),
    lambda m: m["tree"]["children"][0].update(kind="pickle"),
    lambda m: m["tree"]["children"][0].update(bits=True),
    lambda m: m["tree"]["children"][2].update(t="py", type="int", value="2"),
    lambda m: m["tree"]["children"][3].update(t="key", impl="os.system", leaf="leaf_00000"),
    lambda m: m["tree"].update(children=m["tree"]["children"][:2]),
], ids=lambda f: "")
def test_malformed_descriptions_raise_value_error(tmp_path, edit):
    path = tmp_path / "s.npz"
    _gaussian_file(path)
    _rewrite_meta(path, edit)
    with pytest.raises(ValueError):
        io.load(path)


def test_deep_nesting_and_a_non_string_description(tmp_path):
    path = tmp_path / "deep.npz"
    tree = {"t": "none"}
    for _ in range(100):
        tree = {"t": "list", "children": [tree]}
    np.savez(path, **{io.META_KEY: np.array(json.dumps({"format": io.FORMAT, "version": 1, "tree": tree}))})
    with pytest.raises(ValueError, match="deeper"):
        io.load(path)
    raw = '{"format": "jaxrvga-state", "version": 1, "tree": ' + "[" * 100000 + "]" * 100000 + "}"
    np.savez(path, **{io.META_KEY: np.array(raw)})
    with pytest.raises(ValueError):
        io.load(path)
    np.savez(path, **{io.META_KEY: np.arange(3)})
    with pytest.raises(ValueError, match="unreadable"):
        io.load(path)


def _lowrank_run(dtype=jnp.float64, **kw):
    """A real L-RVGA state (it carries the whitened Gram) after a few logistic steps."""
    import jaxrvga as jr
    rng = np.random.default_rng(0)
    d = 5
    flt = jr.lrvga(jr.models.logistic(), rank=2, **kw)
    state = flt.init(jnp.zeros(d, dtype), jnp.asarray(rng.normal(size=(d, 2)), dtype), jnp.ones(d, dtype))
    X, y = rng.normal(size=(6, d)).astype(dtype), (rng.random(6) < 0.5).astype(dtype)
    return flt, run(flt, state, X, y)[0], X, y


def test_load_checks_values_and_the_cached_gram(tmp_path):
    """Issue 26.4: a low-rank state whose cached ``gram`` was edited loaded and gave a wrong answer
    with every step converged; ``psi = -1``, NaN means, a non-PD covariance loaded too. The loader
    verifies the Gram against ``W`` and ``psi`` (recomputed in float64, to ``sqrt(eps)``) and each
    type's values; the filter's own states (float32 and float64, buffered) still load bit for bit."""
    path = tmp_path / "s.npz"
    for dtype, kw in ((jnp.float64, {"buffer": 2}), (jnp.float32, {"process_noise": 0.5})):
        _, state, _, _ = _lowrank_run(dtype, **kw)
        _leaves_identical(_roundtrip(tmp_path, state), state)
    flt, state, X, y = _lowrank_run()
    G = np.asarray(state.gram)
    bad = {"gram": G + np.diag([0.5, 0.0]) * G[0, 0], "psi": -np.ones_like(state.psi),
           "mean": np.asarray(state.mean).copy() * np.nan, "W": np.asarray(state.W) * np.inf}
    match = {"gram": "gram does not match", "psi": "psi must be positive", "mean": "mean must be finite",
             "W": "W must be finite"}
    for field, value in bad.items():
        io.save(path, state._replace(**{field: jnp.asarray(value)}))
        with pytest.raises(ValueError, match=match[field]):
            io.load(path)
    io.save(path, state._replace(gram=None))  # no cache: loads, and the filter rebuilds it
    out = run(flt, io.load(path), X, y)[0]
    np.testing.assert_allclose(out.mean, run(flt, state, X, y)[0].mean, rtol=1e-10)
    info, step = solver_info(), jnp.asarray(0, jnp.int32)
    for cov, what in ((-jnp.eye(3), "positive definite"), (jnp.array([[1.0, 2, 0], [0, 1, 0], [0, 0, 1]]), "symmetric"),
                      (jnp.eye(3).at[0, 0].set(jnp.nan), "finite")):
        io.save(path, GaussianState(jnp.zeros(3), cov, step, info))
        with pytest.raises(ValueError, match=what):
            io.load(path)


def test_load_checks_the_batch_results(tmp_path):
    """Issue 26.4: KL-prox, dual and Laplace results loaded with a (7, 7) covariance for a (4,) mean
    and mismatched per-datum vectors; each is refused, and real results round-trip."""
    import jaxrvga as jr
    from jaxrvga.baselines import laplace as batch
    from jaxrvga.baselines import dual
    from jaxrvga.baselines import klprox
    rng = np.random.default_rng(1)
    X = rng.normal(size=(8, 2))
    y = (X[:, 0] > 0).astype(float)
    L = jr.models.logistic()
    results = [batch.laplace(L, X, y, np.zeros(2), np.eye(2)), dual.fit(L, X, y, np.zeros(2), np.eye(2)),
               klprox.fit(L, X, y, np.zeros(2), np.eye(2), max_iter=20),
               klprox.fit_kernel(L, X @ X.T + np.eye(8), y, max_iter=20)]
    path = tmp_path / "r.npz"
    for res in results:
        _leaves_identical(_roundtrip(tmp_path, res), res)
        cov = "chol" if hasattr(res, "chol") else "cov"
        for broken in (res._replace(**{cov: jnp.eye(7)}), res._replace(mean=jnp.zeros(4)),
                       res._replace(converged=jnp.ones(3, bool))):
            io.save(path, broken)
            with pytest.raises(ValueError, match="inconsistent"):
                io.load(path)
        if hasattr(res, "alpha"):
            io.save(path, res._replace(alpha=jnp.zeros(3)))
            with pytest.raises(ValueError, match="alpha"):
                io.load(path)


def test_load_refuses_a_zip_bomb(tmp_path):
    """Issue 26.4: a 126 kB file whose entries expand to 128 MB is refused before anything is
    expanded (the archive's directory against ``max_bytes``, default 8x the stored bytes + 1 MiB),
    and so is an entry whose ``.npy`` header declares more bytes than it holds (NumPy would
    allocate them); an explicit ``max_bytes`` admits the large file."""
    import zipfile
    path = tmp_path / "bomb.npz"
    meta = json.dumps({"format": io.FORMAT, "version": 1, "tree": {"t": "array", "kind": "numpy",
                                                                   "dtype": "float64", "leaf": "leaf_00000"}})
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in ((io.META_KEY, np.array(meta)), ("leaf_00000", np.zeros(2 ** 24))):
            with zf.open(name + ".npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, arr)
    assert path.stat().st_size < 200_000
    with pytest.raises(ValueError, match="expand"):
        io.load(path)
    assert io.load(path, max_bytes=2 ** 28).shape == (2 ** 24,)
    with pytest.raises(ValueError, match="max_bytes"):
        io.load(path, max_bytes=-1)
    # a header that declares 2**40 float64 in a small entry
    lie = tmp_path / "lie.npz"
    with zipfile.ZipFile(lie, "w") as zf:
        with zf.open(io.META_KEY + ".npy", "w") as fh:
            np.lib.format.write_array(fh, np.array(meta))
        with zf.open("leaf_00000.npy", "w") as fh:
            np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (2 ** 40,)})
            fh.write(b"\0" * 64)
    with pytest.raises(ValueError, match="declares"):
        io.load(lie)


# --------------------------------------------------------------------- filter states as init makes them

def _filter_states(dtype):
    """``name -> (filter, state)``: the dense, low-rank and diagonal filters' own states, with a key."""
    import jaxrvga as jr
    from jaxrvga.kernels import lowrank

    model, d = jr.models.logistic(), 3
    key = jax.random.key(4)
    W, psi = lowrank.init_factors(jax.random.PRNGKey(0), d, 2, 1.0, dtype=dtype)
    dense = jr.rvga(model, "sampled")
    low = jr.lrvga(model, 2, scheme="sampled")
    diag = jr.diag_rvga(model, "sampled")
    return {"dense": (dense, dense.init(jnp.zeros(d, dtype), jnp.eye(d, dtype=dtype), key=key)),
            "lowrank": (low, low.init(jnp.zeros(d, dtype), W, psi, key=key)),
            "diagonal": (diag, diag.init(jnp.zeros(d, dtype), jnp.ones(d, dtype), key=key))}


def _bad_fields(st):
    """``(field, edited state)``: each breaks what the filter's ``init`` makes in one field."""
    other = jnp.float32 if st.mean.dtype == jnp.float64 else jnp.float64
    info = st.info
    return [("info.residual", st._replace(info=info._replace(residual=info.residual.astype(other)))),
            ("info.dropped", st._replace(info=info._replace(dropped=info.dropped.astype(other)))),
            ("info.iterations", st._replace(info=info._replace(iterations=info.iterations.astype(jnp.int64)))),
            ("info.em_loops", st._replace(info=info._replace(em_loops=info.em_loops.astype(jnp.int16)))),
            ("info.converged", st._replace(info=jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), info))),
            ("key", st._replace(key=jnp.zeros(2, st.mean.dtype))),
            ("key", st._replace(key=jax.random.split(st.key, 2))),
            ("key", st._replace(key=jnp.zeros(3, jnp.uint32))),
            ("step", st._replace(step=st.step.astype(jnp.int64))),
            ("step", st._replace(step=jnp.zeros(2, jnp.int32)))]


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("name", ["dense", "lowrank", "diagonal"])
def test_a_filter_state_loads_only_as_its_init_makes_it(tmp_path, name, dtype):
    """Every field of a loaded filter state has the dtype and shape ``init`` gives it (a state that
    loaded otherwise failed inside ``jr.run``); a good one round-trips exactly and runs on."""
    import jaxrvga as jr

    flt, st = _filter_states(dtype)[name]
    xs, ys = jnp.ones((2, 3), dtype), jnp.array([1.0, 0.0], dtype)
    st, _ = jr.run(flt, st, xs, ys)
    loaded = _roundtrip(tmp_path, st)
    _leaves_identical(jr.run(flt, loaded, xs, ys)[0], jr.run(flt, st, xs, ys)[0])
    path = tmp_path / "bad.npz"
    for field, bad in _bad_fields(st):
        io.save(path, bad)
        with pytest.raises(ValueError, match=f"inconsistent \\w+State: {field}\\b"):
            io.load(path)
