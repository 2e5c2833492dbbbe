"""Save and restore filter states exactly, as plain ``.npz`` files (no pickle).

A state is a pytree of NamedTuples (``GaussianState``, ``LowRankState`` with its nested
``SolverInfo``, or any NamedTuple another module defines), tuples, lists, dicts with string keys,
``None``, arrays and Python scalars. :func:`save` writes every array leaf as its own ``.npz`` entry
and the tree structure as a JSON document (entry ``__jaxrvga_state__``): NamedTuples are recorded
by their class's module, qualified name and field names, and :func:`load` rebuilds them by
importing that class. Nothing is pickled; the file loads with ``allow_pickle=False``.

Round trips are bit-identical: dtypes are kept (float32 stays float32, bfloat16 is stored by its
bits), JAX weak types are kept, typed PRNG keys (``jax.random.key``) are stored as their key data
plus the PRNG implementation name, and raw ``uint32`` keys (``jax.random.PRNGKey``) as arrays.
So a stream processed in two halves with a save/load between gives the same state as one run.
"""
from __future__ import annotations

import importlib
import json
import os
import pickle
import warnings
import zipfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: Name of the ``.npz`` entry holding the JSON description of the tree.
META_KEY = "__jaxrvga_state__"
FORMAT = "jaxrvga-state"
VERSION = 1


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _resolve(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


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
            try:
                ok = _resolve(module, qualname) is cls
            except (ImportError, AttributeError):
                ok = False
            if not ok:
                raise ValueError(f"cannot save NamedTuple {qualname!r}: the class is not importable "
                                 f"as {module}.{qualname} (define it at module level)")
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
    store exactly (arbitrary objects, NamedTuples defined inside functions).
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


class _Decoder:
    def __init__(self, archive, where: str):
        self.archive = archive
        self.where = where

    def _fail(self, msg):
        raise ValueError(f"{self.where}: {msg}")

    def _array(self, spec):
        arr = self.archive[spec["leaf"]]
        dtype = jnp.dtype(spec["dtype"])
        if spec.get("bits"):
            arr = arr.view(dtype)
        if arr.dtype != dtype:
            self._fail(f"leaf {spec['leaf']} has dtype {arr.dtype}, expected {dtype}")
        kind = spec["kind"]
        if kind == "numpy":
            return arr
        if kind == "numpy_scalar":
            return arr[()]
        if jax.dtypes.canonicalize_dtype(dtype) != dtype:
            self._fail(f"a leaf has dtype {dtype}, which JAX would truncate: enable "
                       "jax.config.update('jax_enable_x64', True) before loading")
        out = jnp.asarray(arr)
        return _make_weak(out) if spec.get("weak") else out

    def decode(self, spec):
        t = spec.get("t")
        if t == "none":
            return None
        if t == "array":
            return self._array(spec)
        if t == "key":
            return jax.random.wrap_key_data(jnp.asarray(self.archive[spec["leaf"]]), impl=spec["impl"])
        if t == "py":
            v = spec["value"]
            return complex(*v) if spec["type"] == "complex" else v
        children = [self.decode(c) for c in spec.get("children", [])]
        if t == "tuple":
            return tuple(children)
        if t == "list":
            return children
        if t == "dict":
            return dict(zip(spec["keys"], children))
        if t == "namedtuple":
            name = f"{spec['module']}.{spec['qualname']}"
            try:
                cls = _resolve(spec["module"], spec["qualname"])
            except (ImportError, AttributeError) as err:
                self._fail(f"cannot import the state class {name} ({err})")
            fields = list(getattr(cls, "_fields", ()))
            if fields != spec["fields"]:
                self._fail(f"{name} has fields {fields}, the file has {spec['fields']}")
            return cls(*children)
        self._fail(f"unknown node type {t!r}")


def load(path):
    """Read a state written by :func:`save`; NamedTuple classes are imported by name.

    Raises ``ValueError`` when the file is not a jaxrvga state (not an ``.npz`` archive, no
    ``__jaxrvga_state__`` entry, a newer format version) or a class no longer matches the file.
    """
    where = str(path) if not hasattr(path, "read") else "<file>"
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError) as err:
        raise ValueError(f"{where} is not a jaxrvga state file ({err})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{where} is not a jaxrvga state file (a plain .npy array)")
    with archive:
        if META_KEY not in archive.files:
            raise ValueError(f"{where} is not a jaxrvga state file (no {META_KEY} entry)")
        try:
            meta = json.loads(str(archive[META_KEY]))
        except (ValueError, TypeError) as err:
            raise ValueError(f"{where}: unreadable state description ({err})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"{where} is not a jaxrvga state file (format {meta!r:.60})")
        if meta.get("version", 0) > VERSION:
            raise ValueError(f"{where} was written by a newer jaxrvga (state format version "
                             f"{meta['version']} > {VERSION})")
        return _Decoder(archive, where).decode(meta["tree"])


__all__ = ["save", "load"]
