"""Limited-memory filters sharded along the parameter dimension ``d`` over a device mesh.

A limited-memory state ``N(mean, (W W^T + diag(psi))^{-1})`` holds O(d p) numbers; every
operation of an L-RVGA step is either d-length work (row-wise scalings, rowdots, the products
``W c`` and ``W^T v``) or p x p work (Grams, Cholesky factorisations, the 2-D root solve).
Sharding ``mean``, ``W``, ``psi`` and the inputs ``x_t`` along ``d`` therefore splits all the
O(d p^2) work and memory across devices; each Gram ``W^T v`` becomes a local product plus one
all-reduce of a p x p (or p-vector) block, and all p x p work is replicated.

This module uses ``jax.sharding.NamedSharding`` with a one-axis mesh: the state and the data
are placed with :func:`shard_state` / :func:`shard_inputs` and :func:`run` wraps the filter so
that every step keeps the d-length leaves sharded (``with_sharding_constraint``); XLA's SPMD
partitioner inserts the all-reduces. Results equal the unsharded run up to the summation order
of the reductions.

Several GPUs (or ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` on CPU, set before
importing jax)::

    mesh = jaxrvga.sharding.make_mesh()             # all devices, axis "d"
    state = flt.init(mean0, W0, psi0)
    final, _ = jaxrvga.sharding.run(flt, state, xs, ys, mesh)

``d`` must be divisible by the number of devices.

Several processes (one per host, after ``jax.distributed.initialize``): ``make_mesh()`` spans
the devices of every process, each process passes the same host arrays (or arrays built with
``jax.make_array_from_callback`` from its own columns of ``xs``), and :func:`gather` returns
the full final state in every process.
"""
from __future__ import annotations

import functools
from typing import Optional

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from . import core, filters
from .average import AverageState, member_filter, with_member_filter
from .beliefs import LowRank
from .core import Filter

AXIS = "d"


def make_mesh(devices=None, axis_name: str = AXIS) -> Mesh:
    """A one-axis :class:`jax.sharding.Mesh` over ``devices`` (default: all of ``jax.devices()``).

    Args:
      devices: the devices (default ``jax.devices()``).
      axis_name: the name of the mesh's axis.

    Returns:
      A :class:`jax.sharding.Mesh`.
    """
    devices = jax.devices() if devices is None else list(devices)
    if len(devices) < 1:
        raise ValueError("devices must name at least one device")
    return Mesh(np.asarray(devices), (axis_name,))


def _axis(mesh: Mesh) -> str:
    if not isinstance(mesh, Mesh) or len(mesh.axis_names) != 1:
        raise ValueError(f"mesh must be a one-axis jax.sharding.Mesh, got {mesh!r}")
    return mesh.axis_names[0]


def _check_divisible(d: int, mesh: Mesh):
    """``d`` splits evenly over the devices of ``mesh``, a one-axis Mesh (checked first, so that
    ``mesh="cpu"`` raises ValueError naming ``mesh``, not an AttributeError)."""
    _axis(mesh)
    n = mesh.devices.size
    if d % n:
        raise ValueError(f"the dimension d = {d} must be divisible by the number of devices {n} of mesh")


def state_specs(state, d: int, mesh: Mesh):
    """PartitionSpecs of a state: leaves whose leading axis has length ``d`` are split along it.

    ``mean`` (d,), ``W`` (d, p) and ``psi`` (d,) of a :class:`~jaxrvga.beliefs.LowRankState` are
    sharded; scalars, solver diagnostics and PRNG keys are replicated. A ``jr.model_average`` state
    (:class:`~jaxrvga.average.AverageState`) stacks its members along a first axis K, so its leaves
    are split along their second axis where it has length ``d`` (the members' ``mean``, ``W``,
    ``psi``, a learned prior's ``mean``); its weights and learned precisions are replicated.

    Args:
      state: a filter's state.
      d: the dimension of the parameter.
      mesh: the one-axis mesh.

    Returns:
      A pytree of ``PartitionSpec`` of the state's structure.
    """
    name = _axis(mesh)
    axis = 1 if isinstance(state, AverageState) else 0

    def spec(leaf):
        shape = np.shape(leaf)
        if len(shape) > axis and shape[axis] == d:
            return P(*([None] * axis), name, *([None] * (len(shape) - axis - 1)))
        return P()

    return jax.tree_util.tree_map(spec, state)


def _shardings(specs, mesh):
    return jax.tree_util.tree_map(lambda s: NamedSharding(mesh, s), specs,
                                  is_leaf=lambda s: isinstance(s, P))


def shard_state(state, mesh: Mesh):
    """Place a limited-memory state on ``mesh``, its d-length leaves split along ``d``.

    Args:
      state: a filter's state.
      mesh: the one-axis mesh.

    Returns:
      The state, placed on ``mesh``.
    """
    d = _dimension(state)
    _check_divisible(d, mesh)
    return jax.device_put(state, _shardings(state_specs(state, d, mesh), mesh))


def shard_inputs(xs, mesh: Mesh):
    """Place inputs ``xs`` of shape (T, d) on ``mesh``, split along ``d`` (the last axis).

    Args:
      xs: the inputs, (T, d).
      mesh: the one-axis mesh.

    Returns:
      ``xs``, placed on ``mesh``.
    """
    name = _axis(mesh)
    shape = np.shape(xs)
    if len(shape) != 2:
        raise ValueError(f"xs must have shape (T, d), got {shape}")
    _check_divisible(shape[1], mesh)
    return jax.device_put(xs, NamedSharding(mesh, P(None, name)))


def _dimension(state) -> int:
    stacked = isinstance(state, AverageState)
    mean = getattr(state.members if stacked else state, "mean", None)
    if mean is None or np.ndim(mean) != 1 + stacked:
        raise ValueError("state must have a vector field 'mean' (a limited-memory filter state, or a "
                         "jr.model_average state of such members)")
    return int(np.shape(mean)[-1])


def sharded_filter(flt: Filter, mesh: Mesh, d: int) -> Filter:
    """``flt`` whose ``update`` constrains the d-length leaves of the new state to stay sharded.

    Each device's rows form one block (no row blocks across devices): a filter of a low-rank belief
    is rebuilt with ``block_rows=0`` (:func:`jaxrvga.filters.with_block_rows`), and so are the members of
    a model average of such filters (:func:`jaxrvga.average.with_member_filter`); other filters are
    used as they are (a hand-written filter that calls the row-blocked functions of
    :mod:`jaxrvga.kernels.factor_analysis` or :mod:`jaxrvga.kernels.lowrank` should pass them ``block_rows=0``).
    The same ``(flt, mesh, d)`` give the same filter object (a bounded cache), so
    :func:`jaxrvga.run` compiles it once rather than on every call.

    Args:
      flt: a :class:`~jaxrvga.Filter`.
      mesh: the one-axis mesh.
      d: the dimension of the parameter.

    Returns:
      A :class:`~jaxrvga.Filter`.
    """
    if not isinstance(flt, Filter):
        raise ValueError(f"flt must be a jaxrvga Filter, got {type(flt).__name__}")
    _axis(mesh)
    _check_divisible(d, mesh)
    return _sharded_filter(flt, mesh, int(d))


def _one_row_block(flt: Filter) -> Filter:
    """``flt`` tracing one row block (row blocks of an axis sharded across devices would gather rows
    between them): a low-rank filter, or the low-rank members of a model average."""
    if flt.spec is not None and isinstance(flt.spec.belief, LowRank):
        return filters.with_block_rows(flt, 0)
    if member_filter(flt) is not None:
        return with_member_filter(flt, _one_row_block)
    return flt


@functools.lru_cache(maxsize=64)
def _sharded_filter(flt: Filter, mesh: Mesh, d: int) -> Filter:
    inner = _one_row_block(flt)

    def update(state, x, y):
        new = inner.update(state, x, y)
        return jax.lax.with_sharding_constraint(new, _shardings(state_specs(new, d, mesh), mesh))

    return flt._replace(update=update, spec=None)


def run(flt: Filter, state, xs, ys, mesh: Optional[Mesh] = None, trace_fn=None, *,
        donate: bool = False):
    """:func:`jaxrvga.run` with the state and the inputs sharded along ``d`` over ``mesh``.

    Args:
      flt: a limited-memory filter (e.g. :func:`jaxrvga.lrvga`) whose inputs ``x_t`` are (d,), or a
        :func:`jaxrvga.model_average` of one (its learned prior included).
      state: its initial state (host or device arrays; placed on ``mesh`` here).
      xs: (T, d) inputs; ys: (T,) labels (replicated).
      mesh: a one-axis mesh (default :func:`make_mesh` over all devices).
      trace_fn, donate: as in :func:`jaxrvga.run`.

    Returns:
      ``(final_state, trace)``; the final ``mean``, ``W`` and ``psi`` stay sharded along ``d``.
    """
    mesh = make_mesh() if mesh is None else mesh
    d = _dimension(state)
    state = shard_state(state, mesh)
    xs = shard_inputs(xs, mesh)
    ys = jax.device_put(ys, NamedSharding(mesh, P()))
    return core.run(sharded_filter(flt, mesh, d), state, xs, ys, trace_fn, donate=donate)


def gather(tree):
    """Every leaf of ``tree`` as a host NumPy array holding its full value, in every process.

    Leaves split over the devices of several processes (the final state of :func:`run` on a
    mesh spanning several hosts) are gathered with
    ``jax.experimental.multihost_utils.process_allgather``; the others are copied to the host.
    PRNG key leaves stay keys (on the default device). In a multi-process run this is a
    collective: every process must call it with the same tree.

    Args:
      tree: a pytree of arrays (a state, a trace).

    Returns:
      The pytree with NumPy leaves (keys stay keys).
    """
    def leaf(x):
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(leaf(jax.random.key_data(x)), impl=jax.random.key_impl(x))
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)

    return jax.tree_util.tree_map(leaf, tree)


__all__ = ["make_mesh", "state_specs", "shard_state", "shard_inputs", "sharded_filter", "run",
           "gather"]
