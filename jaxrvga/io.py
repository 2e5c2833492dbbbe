"""Save and restore filter states exactly, as plain ``.npz`` files (no pickle, no code from the file).

A state is a pytree of registered NamedTuples, tuples, lists, dicts with string keys, ``None``,
arrays and Python scalars. :func:`save` writes every array leaf as its own ``.npz`` entry and the
tree structure as a JSON document (entry ``__jaxrvga_state__``): NamedTuples are recorded by their
class's module, qualified name and field names. :func:`load` looks that name up in the registry,
never imports it, and checks the rebuilt state with the check its class registered (a belief's
state whose mean is (7,) and covariance (5, 5) is refused). Every state type registers itself in its
own module (the beliefs' states, :class:`~jaxrvga.core.SolverInfo`, the model average's, the
baselines' results), so this module is the codec alone and names none. Nothing is pickled; the
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

# the checks of the baselines' results, by their published names here
from .file_checks import factors_check, moments_check, one_float_dtype, vectors_check

#: Name of the ``.npz`` entry holding the JSON description of the tree.
META_KEY = "__jaxrvga_state__"
FORMAT = "jaxrvga-state"
VERSION = 1


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


_PRNG_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")

#: ``"module.qualname" -> (class, check, upgrade)``: every class :func:`register` was given.
_REGISTRY: dict = {}
#: ``"former_module.qualname" -> "module.qualname"``: where files written earlier recorded a class.
_FORMER: dict = {}


def _name(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register(cls, check: Optional[Callable[[Any], None]] = None, *, former: tuple = (),
             upgrade: Optional[Callable[[Any], Any]] = None):
    """Allow :func:`save` and :func:`load` to handle the NamedTuple class ``cls``.

    Each state type registers itself in its own module (the beliefs' states through
    :func:`jaxrvga.beliefs.base.register_state`), so this module names none.

    Args:
      cls: a NamedTuple class.
      check: ``check(obj)`` validates a rebuilt instance and raises ``ValueError`` when its leaves are
        inconsistent (shapes, dtypes); :func:`load` reports that as a corrupted file
        (:mod:`jaxrvga.file_checks` has the pieces).
      former: modules that held ``cls`` in files written earlier (``"jaxrvga.core"``): such a file
        still loads.
      upgrade: ``upgrade(obj)`` completes an instance read from a file written before trailing
        fields of ``cls`` existed, before ``check``.

    Returns:
      ``cls``, so it also works as a class decorator.

    Registration is explicit, in code: a file can never name a class to import. Re-registering the
    same class replaces its check; another class with the same module and qualified name raises
    ``ValueError``.
    """
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise ValueError(f"cls must be a NamedTuple class, got {cls!r}")
    if check is not None and not callable(check):
        raise ValueError(f"check must be callable or None, got {check!r}")
    old = _REGISTRY.get(_name(cls))
    if old is not None and old[0] is not cls:
        raise ValueError(f"another class is already registered as {_name(cls)}")
    _REGISTRY[_name(cls)] = (cls, check, upgrade)
    for module in former:
        _FORMER[f"{module}.{cls.__qualname__}"] = _name(cls)
    return cls


def registered() -> tuple:
    """The registered NamedTuple classes.

    Returns:
      A tuple of the classes.
    """
    return tuple(entry[0] for entry in _REGISTRY.values())


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
            entry = _REGISTRY.get(_name(cls))
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

    Args:
      path: a file path (str or path-like), or a writable binary file object.
      state: a pytree of arrays, scalars, None, tuples, lists, dicts and registered NamedTuples.

    Returns:
      None.
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
        name = _FORMER.get(name, name)
        entry = _REGISTRY.get(name)
        if entry is None:  # never imported: only registered classes are built
            self._fail(f"the state class {name!r:.80} is not registered (jaxrvga.io.register)")
        cls, check, upgrade = entry
        fields, stored = list(cls._fields), spec.get("fields")
        # a file may lack trailing fields that have defaults (a cached Gram, absent from older files): they take them
        older = isinstance(stored, list) and fields[:len(stored)] == stored \
            and all(f in cls._field_defaults for f in fields[len(stored):])
        if not older or len(children) != len(stored):
            self._fail(f"{name} has fields {fields}, the file has {stored!r:.80}")
        obj = cls(*children) if upgrade is None else upgrade(cls(*children))
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

    Args:
      path: a file path (str or path-like), or a readable binary file object.
      max_bytes: the most bytes the entries may expand to (None: the default above).

    Returns:
      The state, rebuilt with the types it was saved with (JAX arrays, NumPy arrays and scalars as saved).
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
