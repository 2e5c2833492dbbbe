"""Sparse inputs of the linear predictors: the indices and values of the non-zeros of a row, a ``SparseRow``."""
from __future__ import annotations

from typing import Optional

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..validation import check_float_array, is_concrete, positive_int


@jax.tree_util.register_pytree_node_class
class SparseRow:
    """Sparse input rows of a linear predictor: ``x[indices[..., k]] += values[..., k]`` for each k.

    ``indices`` (integers) and ``values`` share one shape ``(..., nnz)``: one row (nnz,), a
    minibatch (m, nnz), a stream (T, nnz) or (T, m, nnz). Every row holds the same number ``nnz``
    of entries, so that a stream is two arrays whose leading axis is time, which
    :func:`jaxrvga.run`, ``jax.lax.scan`` and ``jax.vmap`` slice as they slice a dense ``xs``.
    A row with fewer non-zeros is padded with entries of value 0 (index 0, say: they add
    nothing); repeated indices add up, as in a COO matrix. Indices outside ``[0, d)`` are refused
    with a ``ValueError`` where concrete; traced ones add nothing.

    It is a registered pytree of its own, not a NamedTuple (``jnp.asarray`` of a tuple would
    stack the two arrays silently), nor ``jax.experimental.sparse.BCOO``, whose static shape
    keeps the stream's (T, d) when ``lax.scan`` slices its arrays. The filters scatter each row
    into a dense (d,) vector inside their step (``todense``): a step's work is O(d) or more
    whatever the row (the mean alone is (d,)), so the results are those of the dense row, bit
    for bit, and the stream costs O(T nnz) memory instead of O(T d).
    """

    __slots__ = ("indices", "values")

    def __init__(self, indices, values):
        self.indices = indices
        self.values = values

    def tree_flatten(self):
        """The pytree children ``(indices, values)``."""
        return (self.indices, self.values), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        """The row of the pytree children ``(indices, values)``."""
        del aux
        return cls(*children)

    def __repr__(self):
        return f"SparseRow(indices={self.indices!r}, values={self.values!r})"

    @property
    def shape(self) -> tuple:
        """``(..., nnz)``: the shape of ``indices`` and ``values``."""
        return tuple(jnp.shape(self.indices))

    @property
    def ndim(self) -> int:
        """The number of axes of ``indices``, the last one the ``nnz`` entries."""
        return len(self.shape)

    def _kept(self, dim: int):
        """``(indices, values)`` with the entries outside ``[0, dim)`` set to index 0 and value 0."""
        idx = jnp.asarray(self.indices)
        ok = (idx >= 0) & (idx < dim)
        return jnp.where(ok, idx, 0), jnp.where(ok, jnp.asarray(self.values), 0)

    def todense(self, dim: int, dtype=None):
        """The dense rows ``(..., dim)``: zeros, plus ``values`` added at ``indices`` (a scatter-add)."""
        idx, val = self._kept(dim)
        if dtype is None:
            dtype = val.dtype if jnp.issubdtype(val.dtype, jnp.floating) else jnp.result_type(float)
        lead, nnz = idx.shape[:-1], idx.shape[-1]
        n = math.prod(lead)
        rows = jnp.arange(n)[:, None]
        out = jnp.zeros((n, dim), dtype).at[rows, idx.reshape(n, nnz)].add(val.reshape(n, nnz).astype(dtype))
        return out.reshape(lead + (dim,))

    def dot(self, theta):
        """``x @ theta`` for each row, in O(nnz): ``sum_k values[k] theta[indices[k]]``.

        ``theta`` is (d,) (a scalar per row) or (d, K) (K values per row)."""
        theta = jnp.asarray(theta)
        idx, val = self._kept(theta.shape[0])
        val = val.reshape(val.shape + (1,) * (theta.ndim - 1))
        return jnp.sum(val * theta[idx], axis=idx.ndim - 1)

    def checked(self, name: str, dim: int, dtype=None) -> "SparseRow":
        """The row checked against a state of dimension ``dim``: integer indices in ``[0, dim)``
        (where concrete), real values of the same shape (cast to ``dtype``); ``ValueError`` naming
        ``name`` otherwise."""
        idx = self.indices if isinstance(self.indices, (np.ndarray, jax.Array)) else np.asarray(self.indices)
        if not jnp.issubdtype(idx.dtype, jnp.integer):
            raise ValueError(f"{name}: the indices of a SparseRow must be integers, got dtype {idx.dtype}")
        val = check_float_array(f"{name} (the values of a SparseRow)", self.values)
        if idx.ndim == 0 or val.shape != idx.shape:
            raise ValueError(f"{name}: the indices and values of a SparseRow must share one shape (..., nnz), "
                             f"got {idx.shape} and {val.shape}")
        if is_concrete(idx) and idx.size:
            a = np.asarray(idx)
            bad = a[(a < 0) | (a >= dim)]
            if bad.size:
                raise ValueError(f"{name}: the indices of a SparseRow must lie in [0, {dim}) to match the "
                                 f"state, got {bad.ravel()[:3].tolist()}")
        return SparseRow(jnp.asarray(idx), val if dtype is None else val.astype(dtype))

    @classmethod
    def from_dense(cls, X, nnz: Optional[int] = None) -> "SparseRow":
        """The non-zeros of the dense rows ``X`` (..., d), in index order, each row padded with
        entries (0, 0.0) to ``nnz`` (default: the most non-zeros of a row, at least 1)."""
        X = np.asarray(X)
        if X.ndim == 0:
            raise ValueError(f"X must have at least one axis, got shape {X.shape}")
        count = int(np.max(np.sum(X != 0, axis=-1), initial=0))
        nnz = max(count, 1) if nnz is None else _row_width(nnz, count)
        order = np.argsort(X == 0, axis=-1, kind="stable")[..., :nnz]  # the non-zeros first
        values = np.take_along_axis(X, order, axis=-1)
        return cls(np.where(values != 0, order, 0), values)

    @classmethod
    def from_csr(cls, matrix, nnz: Optional[int] = None) -> "SparseRow":
        """The rows of a CSR matrix (``indptr``, ``indices``, ``data``, as ``scipy.sparse.csr_array``
        holds them), each padded with entries (0, 0.0) to ``nnz`` (default: the longest row)."""
        indptr, cols, data = (np.asarray(getattr(matrix, a)) for a in ("indptr", "indices", "data"))
        counts = np.diff(indptr)
        count = int(np.max(counts, initial=0))
        nnz = max(count, 1) if nnz is None else _row_width(nnz, count)
        row = np.repeat(np.arange(counts.size), counts)
        slot = np.arange(data.size) - indptr[row]
        idx = np.zeros((counts.size, nnz), cols.dtype)
        val = np.zeros((counts.size, nnz), data.dtype)
        idx[row, slot], val[row, slot] = cols, data
        return cls(idx, val)


def _row_width(nnz, count: int) -> int:
    """``nnz`` checked: a positive int, at least ``count`` (the most non-zeros of a row)."""
    nnz = positive_int("nnz", nnz)
    if nnz < count:
        raise ValueError(f"nnz must be at least {count}, the most non-zeros of a row, got {nnz}")
    return nnz


__all__ = ["SparseRow"]
