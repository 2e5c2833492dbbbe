"""Save and restore filter states exactly, as plain ``.npz`` files (no pickle, no code from the file).

A state is a pytree of registered NamedTuples (``GaussianState``, ``LowRankState`` with its nested
``SolverInfo``, the states and results of :mod:`jaxrvga.baselines`, which registers its own, or a
class the user passes to :func:`register`), tuples, lists, dicts with string keys, ``None``, arrays and Python scalars. :func:`save` writes every array leaf
as its own ``.npz`` entry and the tree structure as a JSON document (entry ``__jaxrvga_state__``):
NamedTuples are recorded by their class's module, qualified name and field names. :func:`load`
looks that name up in the registry, never imports it, and checks the rebuilt state (for instance
a ``GaussianState`` whose mean is (7,) and covariance (5, 5) is refused). Nothing is pickled; the
file loads with ``allow_pickle=False``. A user-defined state is saved and loaded after::

    jaxrvga.io.register(MyState)                  # or register(MyState, check=my_check)

Round trips are bit-identical: dtypes are kept (float32 stays float32, bfloat16 is stored by its
bits), JAX weak types are kept, typed PRNG keys (``jax.random.key``) are stored as their key data
plus the PRNG implementation name, and raw ``uint32`` keys (``jax.random.PRNGKey``) as arrays.
So a stream processed in two halves with a save/load between continues exactly from the saved
state (equal to one run to rounding: scans of different lengths are different compiled programs).
"""
from __future__ import annotations

import json
import os
import warnings
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

#: Name of the ``.npz`` entry holding the JSON description of the tree.
META_KEY = "__jaxrvga_state__"
FORMAT = "jaxrvga-state"
VERSION = 1


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


_PRNG_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")

#: ``"module.qualname" -> (class, check)``; filled with the library's states on first use.
_REGISTRY: dict = {}


def _name(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register(cls, check: Optional[Callable[[Any], None]] = None):
    """Allow :func:`save` and :func:`load` to handle the NamedTuple class ``cls``.

    ``check(obj)``, when given, validates a rebuilt instance and raises ``ValueError`` when its
    leaves are inconsistent (shapes, dtypes); :func:`load` reports that as a corrupted file.
    Registration is explicit, in code: a file can never name a class to import. Re-registering the
    same class replaces its check; another class with the same module and qualified name raises
    ``ValueError``. Returns ``cls``, so it also works as a class decorator.
    """
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise ValueError(f"cls must be a NamedTuple class, got {cls!r}")
    if check is not None and not callable(check):
        raise ValueError(f"check must be callable or None, got {check!r}")
    reg = _registry()
    old = reg.get(_name(cls))
    if old is not None and old[0] is not cls:
        raise ValueError(f"another class is already registered as {_name(cls)}")
    reg[_name(cls)] = (cls, check)
    return cls


def registered() -> tuple:
    """The registered NamedTuple classes."""
    return tuple(cls for cls, _ in _registry().values())


# ----------------------------------------------------------------------- consistency checks

def _shape(x):
    return tuple(np.shape(x))


def _dtype_of(x):
    return np.dtype(x.dtype) if hasattr(x, "dtype") else None


def _need(cond, msg):
    if not cond:
        raise ValueError(msg)


def _is_array(x):
    return isinstance(x, (jax.Array, np.ndarray, np.generic))


def _floating(name, x):
    _need(_is_array(x) and jnp.issubdtype(_dtype_of(x), jnp.floating),
          f"{name} must be a floating array, got {type(x).__name__} {getattr(x, 'dtype', '')}")


def _check_key(key, batch):
    """``key`` None, typed PRNG keys of shape ``batch`` or raw ``uint32`` key data of ``batch`` plus the
    default implementation's shape (what :func:`jaxrvga.validation.check_key` takes, per state)."""
    if key is None:
        return
    from .validation import _raw_key_shape

    _need(_is_array(key), f"key must be a PRNG key or None, got {type(key).__name__}")
    dtype, shape = key.dtype, _shape(key)
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
        _need(shape == batch, f"key has shape {shape}, expected {batch}")
        return
    want = batch + tuple(_raw_key_shape())
    _need(dtype == np.uint32 and shape == want,
          f"key must be a PRNG key or None; raw key data must be uint32 of shape {want}, got {dtype} of shape {shape}")


def _completed(obj):
    """A ``SolverInfo`` of a file written before its trailing fields existed gets them as zeros
    (``dropped``, ``em_loops``), so that a filter can go on from it (a scan needs the same fields)."""
    from .core import SolverInfo

    if not isinstance(obj, SolverInfo) or not _is_array(obj.converged):
        return obj
    shape = _shape(obj.converged)
    if obj.dropped is None and _is_array(obj.residual):
        obj = obj._replace(dropped=jnp.zeros(shape, _dtype_of(obj.residual)))
    return obj._replace(em_loops=jnp.zeros(shape, jnp.int32)) if obj.em_loops is None else obj


def _check_solver_info(s):
    for f in s._fields:
        _need(_is_array(getattr(s, f)), f"SolverInfo.{f} must be an array")
    _need(np.dtype(s.converged.dtype) == np.bool_, f"SolverInfo.converged must be bool, got {s.converged.dtype}")
    _floating("SolverInfo.residual", s.residual)
    _need(np.issubdtype(s.iterations.dtype, np.integer), "SolverInfo.iterations must be integer")
    _floating("SolverInfo.dropped", s.dropped)
    _need(np.issubdtype(s.em_loops.dtype, np.integer), "SolverInfo.em_loops must be integer")
    _need(len({_shape(getattr(s, f)) for f in s._fields}) == 1, "the SolverInfo fields must share one shape")


def _check_info_and_step(state, batch):
    """``step``, ``info`` and ``key`` of a filter state whose mean has batch shape ``batch``: as the
    beliefs' ``init`` makes them (:func:`jaxrvga.core.solver_info`), so that a filter can go on from it."""
    from .core import SolverInfo

    _need(isinstance(state.info, SolverInfo), "info must be a SolverInfo")
    real, i32, info = _dtype_of(state.mean), np.dtype(np.int32), state.info
    fields = {"step": (state.step, i32), "info.converged": (info.converged, np.dtype(np.bool_)),
              "info.residual": (info.residual, real), "info.iterations": (info.iterations, i32),
              "info.dropped": (info.dropped, real), "info.em_loops": (info.em_loops, i32)}
    for f, (x, dtype) in fields.items():
        _need(_is_array(x) and _dtype_of(x) == dtype,
              f"{f} must be an array of dtype {dtype}, got {type(x).__name__} {getattr(x, 'dtype', '')}")
        _need(_shape(x) == batch, f"{f} has shape {_shape(x)}, expected {batch}")
    _check_key(state.key, batch)
    _check_noise(getattr(state, "noise", None), real, batch)


def _check_noise_stats(noise):
    """A bare ``NoiseStats``: floating ``shape`` and ``rate`` of one shape and dtype, positive and finite."""
    for f in ("shape", "rate"):
        _floating(f"noise.{f}", getattr(noise, f))
        _positive(f"noise.{f}", getattr(noise, f))
    _need(_shape(noise.shape) == _shape(noise.rate) and _dtype_of(noise.shape) == _dtype_of(noise.rate),
          "noise.shape and noise.rate must share one shape and dtype")


def _check_noise(noise, dtype, batch):
    """A learned noise variance's ``NoiseStats``: ``shape`` and ``rate`` arrays of the state's dtype
    and batch shape, positive and finite (:mod:`jaxrvga.noise`); ``None`` for a known variance."""
    from .core import NoiseStats

    if noise is None:
        return
    _need(isinstance(noise, NoiseStats), f"noise must be a NoiseStats, got {type(noise).__name__}")
    for f in ("shape", "rate"):
        x = getattr(noise, f)
        _need(_is_array(x) and _dtype_of(x) == dtype and _shape(x) == batch,
              f"noise.{f} must be an array of dtype {dtype} and shape {batch}")
        _positive(f"noise.{f}", x)


def _values(x):
    """``x`` in NumPy float64 (value checks of a load; bfloat16 and other ml_dtypes included)."""
    return np.asarray(x).astype(np.float64)


def _finite(name, x):
    _need(np.all(np.isfinite(_values(x))), f"{name} must be finite (it holds NaN or inf)")


def _positive(name, x):
    v = _values(x)
    _need(np.all(np.isfinite(v)) and np.all(v > 0), f"{name} must be positive and finite, got min {np.min(v)!r}")


def _symmetric_pd(name, cov):
    """``cov`` (..., d, d): finite, symmetric to ``sqrt(eps)`` of its dtype relative to its largest
    entry, and positive definite (a float64 Cholesky factorisation of each matrix succeeds): what
    the skip-and-flag guard of every filter keeps (:mod:`jaxrvga.filters`)."""
    c = _values(cov)
    _finite(name, c)
    tol = np.sqrt(np.finfo(_dtype_of(cov)).eps) * max(float(np.max(np.abs(c), initial=0.0)), 1e-300)
    asym = float(np.max(np.abs(c - np.swapaxes(c, -1, -2)), initial=0.0))
    _need(asym <= tol, f"{name} must be symmetric, max |{name} - {name}^T| = {asym:.3g}")
    try:
        np.linalg.cholesky(0.5 * (c + np.swapaxes(c, -1, -2)))
    except np.linalg.LinAlgError:
        raise ValueError(f"{name} must be positive definite") from None


def _check_moments(st, vectors=(), cov="cov", scalars=()):
    """``mean`` (..., D) and ``cov`` (..., D, D) of one floating dtype, the listed per-datum
    vectors (``alpha``, ``gamma``: (..., N)) of one shape and the same batch shape, and the listed
    scalars (``converged``, ``iterations``, ...) of the batch shape (the batch results: Laplace,
    dual, KL-prox)."""
    for f in scalars:
        x = getattr(st, f)
        _need(x is None or (_is_array(x) and _shape(x) == _shape(st.mean)[:-1]),
              f"{f} must be an array of shape {_shape(st.mean)[:-1]}, got {_shape(x) if _is_array(x) else type(x).__name__}")
    _floating("mean", st.mean)
    _floating(cov, getattr(st, cov))
    m, c = _shape(st.mean), _shape(getattr(st, cov))
    _need(len(m) >= 1 and c == m + m[-1:], f"{cov} has shape {c}, expected {m + m[-1:]} for a mean of shape {m}")
    _need(_dtype_of(getattr(st, cov)) == _dtype_of(st.mean), f"mean and {cov} must share one dtype")
    shapes = {_shape(getattr(st, f)) for f in vectors if getattr(st, f) is not None}
    for f in vectors:
        if getattr(st, f) is not None:
            _floating(f, getattr(st, f))
    _need(len(shapes) <= 1, f"{', '.join(vectors)} must share one shape, got {sorted(shapes)}")
    _need(all(len(s) >= 1 and s[:-1] == m[:-1] for s in shapes),
          f"{', '.join(vectors)} must have the batch shape {m[:-1]} of the mean plus one axis, got {sorted(shapes)}")


def _check_gaussian(st):
    """Shapes and dtypes of ``GaussianState``; finite mean and a finite, symmetric, positive
    definite covariance (every filter state is, by its guard)."""
    _check_moments(st)
    m = _shape(st.mean)
    _finite("mean", st.mean)
    _symmetric_pd("cov", st.cov)
    _check_info_and_step(st, m[:-1])


def _check_lowrank(st):
    """Shapes and dtypes of ``LowRankState``; finite ``mean`` and ``W``, ``psi > 0``, and a cached
    ``gram`` equal to ``W^T diag(psi)^-1 W`` recomputed from them (:func:`_check_gram`)."""
    for f in ("mean", "W", "psi"):
        _floating(f, getattr(st, f))
    m, W = _shape(st.mean), _shape(st.W)
    _need(len(m) >= 1 and len(W) == len(m) + 1 and W[:-1] == m and 1 <= W[-1] <= m[-1],
          f"W has shape {W}, expected {m} + (p,) with 1 <= p <= d for a mean of shape {m}")
    _need(_shape(st.psi) == m, f"psi has shape {_shape(st.psi)}, expected {m}")
    _need(_dtype_of(st.W) == _dtype_of(st.mean) == _dtype_of(st.psi), "mean, W and psi must share one dtype")
    if st.gram is not None:
        _floating("gram", st.gram)
        _need(_shape(st.gram) == W[:-2] + (W[-1], W[-1]),
              f"gram has shape {_shape(st.gram)}, expected {W[:-2] + (W[-1], W[-1])} for W of shape {W}")
        _need(_dtype_of(st.gram) == _dtype_of(st.W), "gram must have the dtype of W")
    _check_info_and_step(st, m[:-1])
    _finite("mean", st.mean)
    _finite("W", st.W)
    _positive("psi", st.psi)
    if st.gram is not None:
        _check_gram(st.gram, st.W, st.psi)


def _check_gram(gram, W, psi):
    """The cached whitened Gram is verified, not trusted (nor silently replaced, which would change
    a round trip's bits): ``G = B^T B``, ``B = W / sqrt(psi)``, recomputed in float64, must match
    the stored one entry by entry to ``sqrt(eps)`` of the dtype in the metric of ``I + G``,
    ``|G_ij - stored_ij| <= sqrt(eps) sqrt((1 + G_ii)(1 + G_jj))`` (a filter's own Gram is within
    a few eps: it is recomputed at every projection). A Gram edited by hand gave wrong steps with
    every step converged."""
    B = _values(W) / np.sqrt(_values(psi))[..., None]
    G = np.einsum("...ip,...iq->...pq", B, B)
    d = 1.0 + np.diagonal(G, axis1=-2, axis2=-1)
    scale = np.sqrt(d[..., :, None] * d[..., None, :])
    err = np.abs(_values(gram) - G) / scale
    worst = float(np.max(np.where(np.isnan(err), np.inf, err), initial=0.0))
    tol = float(np.sqrt(np.finfo(_dtype_of(W)).eps))
    _need(worst <= tol, f"gram does not match W and psi (relative deviation {worst:.3g} > {tol:.1g}); "
                        f"save the state with gram=None to have it recomputed")


def _check_diagonal(st):
    """Shapes and dtypes of ``DiagonalState``; a finite mean and precisions ``psi > 0``."""
    _floating("mean", st.mean)
    _floating("psi", st.psi)
    m = _shape(st.mean)
    _need(len(m) >= 1 and _shape(st.psi) == m, f"psi has shape {_shape(st.psi)}, expected {m}")
    _need(_dtype_of(st.psi) == _dtype_of(st.mean), "mean and psi must share one dtype")
    _check_info_and_step(st, m[:-1])
    _finite("mean", st.mean)
    _positive("psi", st.psi)


def _check_average(st):
    """``AverageState``: ``log_weight`` (K, S) floating, not NaN and not +inf (-inf: a forecaster of
    weight 0) with at least one finite entry, ``scales`` (S,) finite and >= 0, K the leading axis of the
    stacked ``members`` (each checked by its own class), ``step`` and ``info`` scalars."""
    _floating("log_weight", st.log_weight)
    _floating("scales", st.scales)
    KS = _shape(st.log_weight)
    lw, sc = _values(st.log_weight), _values(st.scales)
    _need(len(KS) == 2 and not np.any(np.isnan(lw)) and not np.any(lw == np.inf) and np.any(np.isfinite(lw)),
          f"log_weight must be a (K, S) array without NaN or +inf and with a finite entry, got shape {KS}")
    _need(_shape(st.scales) == KS[1:] and np.all(np.isfinite(sc)) and np.all(sc >= 0),
          f"scales must be {KS[1:]} finite values >= 0, one per column of log_weight")
    sizes = {_shape(a)[:1] for a in jax.tree_util.tree_leaves(st.members)}
    _need(sizes == {KS[:1]}, f"members must be stacked along a leading axis of {KS[0]} (one per row of log_weight)")
    _check_solver_info(st.info)
    _need(_shape(st.info.converged) == (), f"info fields must be scalars, got shape {_shape(st.info.converged)}")
    _need(_dtype_of(st.info.residual) == _dtype_of(st.log_weight) == _dtype_of(st.scales),
          "log_weight, scales and info.residual must share one dtype")
    _need(_is_array(st.step) and _shape(st.step) == () and _dtype_of(st.step) == np.dtype(np.int32),
          "step must be an int32 scalar")


def factors_check(st):
    """The check of a state with factors ``W`` (..., d, p) and ``psi`` (..., d): floating, finite
    ``W``, positive ``psi`` (the factor-analysis filters' states)."""
    _floating("W", st.W)
    _floating("psi", st.psi)
    W = _shape(st.W)
    _need(len(W) >= 2 and _shape(st.psi) == W[:-1], f"W {W} and psi {_shape(st.psi)} must be (d, p) and (d,)")
    _finite("W", st.W)
    _positive("psi", st.psi)


def vectors_check(*fields):
    """A check that the named fields are floating arrays of one shape (at least one axis) and one dtype."""
    def check(st):
        shapes = {_shape(getattr(st, f)) for f in fields}
        for f in fields:
            _floating(f, getattr(st, f))
        _need(len(shapes) == 1 and len(next(iter(shapes))) >= 1,
              f"{', '.join(fields)} must be arrays of one shape, got {sorted(shapes)}")
        one_float_dtype(st)
    return check


def one_float_dtype(st):
    """The check of a state whose floating arrays, nested ones included, share one dtype (a scan carry
    of mixed float32 and float64 leaves fails in :func:`jaxrvga.run`)."""
    dtypes = {str(_dtype_of(a)) for a in jax.tree_util.tree_leaves(st)
              if _is_array(a) and np.issubdtype(_dtype_of(a), np.floating)}
    _need(len(dtypes) <= 1, f"{type(st).__name__}: its floating arrays must share one dtype, got {sorted(dtypes)}")


def moments_check(vectors=(), cov="cov", scalars=(), like_mean=()):
    """A check of a batch result with a ``mean`` (..., D) and a ``cov`` (..., D, D) (see
    :func:`_check_moments`); the fields ``like_mean`` must have the mean's shape."""
    def check(st):
        _check_moments(st, vectors, cov, scalars)
        for f in like_mean:
            _need(_shape(getattr(st, f)) == _shape(st.mean),
                  f"{f} has shape {_shape(getattr(st, f))}, expected {_shape(st.mean)}")
    return check


#: Where the classes of files written before the package was laid out by role now live.
_FORMER_MODULES = {"jaxrvga.batch": "jaxrvga.baselines.laplace", "jaxrvga.dual": "jaxrvga.baselines.dual",
                   "jaxrvga.klprox": "jaxrvga.baselines.klprox", "jaxrvga.online_em": "jaxrvga.baselines.online_em",
                   "jaxrvga.factor_analysis": "jaxrvga.baselines.fa_filters"}
_FORMER_NAMES = {f"jaxrvga.core.{cls}": f"jaxrvga.beliefs.{module}.{cls}" for module, cls in
                 (("dense", "GaussianState"), ("lowrank", "LowRankState"), ("diagonal", "DiagonalState"))}


def _registry() -> dict:
    """The registry, with the filter layer's own states added on first use (imports are local:
    the state modules import this one's package). The baselines register theirs on import."""
    if not _REGISTRY:
        from . import average, beliefs, core

        entries = [(core.SolverInfo, _check_solver_info), (core.NoiseStats, _check_noise_stats),
                   (beliefs.GaussianState, _check_gaussian), (beliefs.LowRankState, _check_lowrank),
                   (beliefs.DiagonalState, _check_diagonal), (average.AverageState, _check_average)]
        for cls, check in entries:
            _REGISTRY.setdefault(_name(cls), (cls, check))
    return _REGISTRY


def _make_weak(x):
    """``x`` marked as a JAX weakly-typed array (as arrays made from Python scalars are).

    JAX has no public constructor for weak arrays; if its private one moves, the array comes
    back strongly typed (same bits) with a warning.
    """
    try:
        from jax._src.lax.lax import _convert_element_type

        return _convert_element_type(x, np.dtype(x.dtype), weak_type=True)
    except Exception as err:  # pragma: no cover - depends on the JAX version
        warnings.warn(f"jaxrvga.io: could not restore a weak type ({err}); loaded as strong")
        return x


def _needs_bit_view(dtype: np.dtype) -> bool:
    """Dtypes NumPy's .npy format cannot name (ml_dtypes: bfloat16, float8, int4 ...)."""
    return dtype.kind == "V" or dtype.type.__module__ != "numpy"


class _Encoder:
    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def _leaf(self, arr: np.ndarray) -> str:
        name = f"leaf_{len(self.arrays):05d}"
        self.arrays[name] = arr
        return name

    def _array(self, x, kind: str) -> dict:
        arr = np.asarray(x)
        spec = {"t": "array", "kind": kind, "dtype": arr.dtype.name}
        if _needs_bit_view(arr.dtype):
            arr = arr.view(np.dtype(f"u{arr.dtype.itemsize}"))
            spec["bits"] = True
        if kind == "jax" and getattr(x, "weak_type", False):
            spec["weak"] = True
        spec["leaf"] = self._leaf(arr)
        return spec

    def encode(self, node: Any) -> dict:
        if node is None:
            return {"t": "none"}
        if _is_namedtuple(node):
            cls = type(node)
            module, qualname = cls.__module__, cls.__qualname__
            entry = _registry().get(_name(cls))
            if entry is None or entry[0] is not cls:
                raise ValueError(f"cannot save NamedTuple {qualname!r}: the class is not registered; "
                                 f"call jaxrvga.io.register({cls.__name__}) first")
            return {"t": "namedtuple", "module": module, "qualname": qualname,
                    "fields": list(cls._fields), "children": [self.encode(c) for c in node]}
        if isinstance(node, (tuple, list)):
            return {"t": type(node).__name__, "children": [self.encode(c) for c in node]}
        if isinstance(node, dict):
            if not all(isinstance(k, str) for k in node):
                raise ValueError("cannot save a dict with non-string keys")
            keys = list(node)
            return {"t": "dict", "keys": keys, "children": [self.encode(node[k]) for k in keys]}
        if isinstance(node, jax.Array):
            if jnp.issubdtype(node.dtype, jax.dtypes.prng_key):
                return {"t": "key", "impl": str(jax.random.key_impl(node)),
                        "leaf": self._leaf(np.asarray(jax.random.key_data(node)))}
            return self._array(node, "jax")
        if isinstance(node, np.ndarray):
            return self._array(node, "numpy")
        if isinstance(node, np.generic):
            return self._array(node, "numpy_scalar")
        if isinstance(node, (bool, int, float, str)):  # JSON keeps these exactly (floats by repr)
            return {"t": "py", "type": type(node).__name__, "value": node}
        if isinstance(node, complex):
            return {"t": "py", "type": "complex", "value": [node.real, node.imag]}
        raise ValueError(f"cannot save a state leaf of type {type(node).__name__}")


def save(path, state) -> None:
    """Write ``state`` to ``path`` (a ``.npz`` archive; no suffix is added) atomically.

    ``path`` may also be a writable binary file object. Raises ``ValueError`` for leaves it cannot
    store exactly (arbitrary objects) and for NamedTuple classes not passed to :func:`register`.
    """
    enc = _Encoder()
    tree = enc.encode(state)
    meta = json.dumps({"format": FORMAT, "version": VERSION, "tree": tree})
    arrays = dict(enc.arrays)
    arrays[META_KEY] = np.array(meta)
    if hasattr(path, "write"):
        np.savez(path, **arrays)
        return
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


_MAX_DEPTH = 64
#: Default cap of :func:`load`: the arrays of a file may expand to at most this many times the
#: bytes stored in it, plus :data:`LOAD_SLACK` (``save`` does not compress, so its files expand
#: by about 1x; a zip bomb expands by 1000x).
LOAD_EXPANSION = 8
LOAD_SLACK = 1 << 20


def _check_sizes(archive, where, max_bytes):
    """Refuse, before anything is decompressed, an archive whose entries would expand to more than
    ``max_bytes`` (default ``LOAD_EXPANSION`` x the stored bytes + ``LOAD_SLACK``), and any
    ``.npy`` entry whose header declares more array bytes than the entry holds (NumPy allocates
    the declared array before reading it)."""
    infos = archive.zip.infolist()
    stored = sum(i.compress_size for i in infos)
    total = sum(i.file_size for i in infos)
    limit = LOAD_EXPANSION * stored + LOAD_SLACK if max_bytes is None else max_bytes
    if total > limit:
        raise ValueError(f"{where}: the arrays would expand to {total} bytes from {stored} stored, over the "
                         f"limit of {limit} (pass load(..., max_bytes=...) to allow more)")
    for info in infos:
        if not info.filename.endswith(".npy"):
            continue
        with archive.zip.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            shape, _, dtype = (np.lib.format.read_array_header_1_0(fh) if version == (1, 0)
                               else np.lib.format.read_array_header_2_0(fh))
        declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if declared > info.file_size:
            raise ValueError(f"{where}: entry {info.filename!r:.40} declares {declared} bytes of array "
                             f"data but holds {info.file_size}")
_PY_TYPES = {"bool": bool, "int": int, "float": float, "str": str}


class _Decoder:
    """Rebuilds the tree from its JSON description; every malformed part raises ``ValueError``."""

    def __init__(self, archive, where: str):
        self.archive = archive
        self.where = where

    def _fail(self, msg):
        raise ValueError(f"{self.where}: {msg}")

    def _leaf(self, spec):
        name = spec.get("leaf")
        if not isinstance(name, str) or name == META_KEY or name not in self.archive.files:
            self._fail(f"missing array entry {name!r:.40}")
        return self.archive[name]

    def _dtype(self, spec):
        name = spec.get("dtype")
        try:
            dtype = np.dtype(jnp.dtype(name)) if isinstance(name, str) else None
        except (TypeError, ValueError):
            dtype = None
        if dtype is None or dtype.kind not in "biufc" and not _needs_bit_view(dtype):
            self._fail(f"unsupported array dtype {name!r:.40}")
        return dtype

    def _array(self, spec):
        arr = self._leaf(spec)
        dtype = self._dtype(spec)
        if spec.get("bits"):
            if arr.dtype != np.dtype(f"u{dtype.itemsize}"):
                self._fail(f"leaf {spec['leaf']} stores {arr.dtype}, not the bits of {dtype}")
            arr = arr.view(dtype)
        if arr.dtype != dtype:
            self._fail(f"leaf {spec['leaf']} has dtype {arr.dtype}, expected {dtype}")
        kind = spec.get("kind")
        if kind == "numpy":
            return arr
        if kind == "numpy_scalar":
            if arr.ndim != 0:
                self._fail(f"leaf {spec['leaf']} is a scalar of shape {arr.shape}")
            return arr[()]
        if kind != "jax":
            self._fail(f"unknown array kind {kind!r:.40}")
        if jax.dtypes.canonicalize_dtype(dtype) != dtype:
            self._fail(f"a leaf has dtype {dtype}, which JAX would truncate: enable "
                       "jax.config.update('jax_enable_x64', True) before loading")
        out = jnp.asarray(arr)
        return _make_weak(out) if spec.get("weak") is True else out

    def _key(self, spec):
        data = self._leaf(spec)
        impl = spec.get("impl")
        if impl not in _PRNG_IMPLS or data.dtype != np.uint32:
            self._fail(f"bad PRNG key (impl {impl!r:.40}, data {data.dtype})")
        return jax.random.wrap_key_data(jnp.asarray(data), impl=impl)

    def _py(self, spec):
        v, kind = spec.get("value"), spec.get("type")
        if kind == "complex" and isinstance(v, list) and len(v) == 2 \
                and all(type(u) in (int, float) for u in v):
            return complex(*v)
        if kind in _PY_TYPES and type(v) is _PY_TYPES[kind]:
            return v
        self._fail(f"bad Python scalar of type {kind!r:.20}")

    def decode(self, spec, depth=0):
        if not isinstance(spec, dict):
            self._fail("malformed tree description")
        if depth > _MAX_DEPTH:
            self._fail(f"tree nested deeper than {_MAX_DEPTH}")
        t = spec.get("t")
        if t == "none":
            return None
        if t == "array":
            return self._array(spec)
        if t == "key":
            return self._key(spec)
        if t == "py":
            return self._py(spec)
        kids = spec.get("children")
        if not isinstance(kids, list):
            self._fail(f"node {t!r:.20} has no list of children")
        children = [self.decode(c, depth + 1) for c in kids]
        if t == "tuple":
            return tuple(children)
        if t == "list":
            return children
        if t == "dict":
            keys = spec.get("keys")
            if not isinstance(keys, list) or len(keys) != len(children) \
                    or not all(isinstance(k, str) for k in keys):
                self._fail("malformed dict node")
            return dict(zip(keys, children))
        if t == "namedtuple":
            return self._namedtuple(spec, children)
        self._fail(f"unknown node type {t!r:.40}")

    def _namedtuple(self, spec, children):
        name = f"{spec.get('module')}.{spec.get('qualname')}"
        name = _FORMER_NAMES.get(name, name)
        module, _, qualname = name.rpartition(".")
        name = f"{_FORMER_MODULES.get(module, module)}.{qualname}"
        entry = _registry().get(name)
        if entry is None:  # never imported: only registered classes are built
            self._fail(f"the state class {name!r:.80} is not registered (jaxrvga.io.register)")
        cls, check = entry
        fields, stored = list(cls._fields), spec.get("fields")
        # a file written before trailing fields with defaults were added (LowRankState.gram) lacks them
        older = isinstance(stored, list) and fields[:len(stored)] == stored \
            and all(f in cls._field_defaults for f in fields[len(stored):])
        if not older or len(children) != len(stored):
            self._fail(f"{name} has fields {fields}, the file has {stored!r:.80}")
        obj = _completed(cls(*children))
        if check is not None:
            try:
                check(obj)
            except ValueError as err:
                self._fail(f"inconsistent {cls.__name__}: {err}")
        return obj


def load(path, *, max_bytes: Optional[int] = None):
    """Read a state written by :func:`save`.

    ``max_bytes``: the most bytes the file's entries may expand to (default: 8 times the bytes
    stored in the file plus 1 MiB; :func:`save` does not compress, so its files never come near):
    checked from the archive's directory and the arrays' headers before anything is read, so a
    zip bomb is refused without being expanded.

    Only registered NamedTuple classes are rebuilt (the library's states and those passed to
    :func:`register`); nothing is imported or called by a name read from the file, and each
    rebuilt state passes its registered consistency check (shapes and dtypes of its leaves).
    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` for anything else that is
    not a well-formed jaxrvga state (not an ``.npz`` archive, truncated or corrupted bytes, no
    ``__jaxrvga_state__`` entry, a newer format version, an unregistered class, leaves that
    disagree with their declared type, values that break a type's invariants: a covariance that
    is not symmetric positive definite, ``psi <= 0``, non-finite means, a cached ``gram`` of a
    low-rank state that does not match its ``W`` and ``psi``, entries that would expand past
    ``max_bytes``).
    """
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer))
                                  or max_bytes < 0):
        raise ValueError(f"max_bytes must be an integer >= 0 or None, got {max_bytes!r}")
    where = str(path) if not hasattr(path, "read") else "<file>"
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except Exception as err:  # noqa: BLE001 - any unreadable file is a ValueError
        raise ValueError(f"{where} is not a jaxrvga state file ({type(err).__name__}: {err})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{where} is not a jaxrvga state file (a plain .npy array)")
    with archive:
        try:
            _check_sizes(archive, where, max_bytes)
            return _load_archive(archive, where)
        except ValueError:
            raise
        except Exception as err:  # noqa: BLE001 - corrupted entries (zlib, zip CRC, EOF, ...)
            raise ValueError(f"{where}: corrupted state file ({type(err).__name__}: {err})") from None


def _load_archive(archive, where):
    if META_KEY not in archive.files:
        raise ValueError(f"{where} is not a jaxrvga state file (no {META_KEY} entry)")
    raw = archive[META_KEY]
    if raw.dtype.kind != "U" or raw.ndim != 0:
        raise ValueError(f"{where}: unreadable state description (dtype {raw.dtype})")
    meta = json.loads(str(raw))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{where} is not a jaxrvga state file (format {meta!r:.60})")
    version = meta.get("version")
    if type(version) is not int or version < 1:
        raise ValueError(f"{where}: bad state format version {version!r:.20}")
    if version > VERSION:
        raise ValueError(f"{where} was written by a newer jaxrvga (state format version "
                         f"{version} > {VERSION})")
    return _Decoder(archive, where).decode(meta.get("tree"))


__all__ = ["save", "load", "register", "registered", "factors_check", "vectors_check", "moments_check",
           "one_float_dtype"]
