"""The filter contract and the scan driver.

Every online algorithm is a :class:`Filter`: a NamedTuple of pure functions
``init(...) -> state`` and ``update(state, x, y) -> state``. States are NamedTuple
pytrees, so filters jit, vmap and scan. :func:`run` drives one over a data set
with a single ``jax.lax.scan``.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.experimental import checkify


class Filter(NamedTuple):
    """A recursive estimator as two pure functions.

    ``init(...) -> state`` builds the state; ``update(state, x, y) -> state`` absorbs one
    observation. ``check(state, xs, ys)``, when given, validates a whole data set
    before :func:`run` scans it (label values, shapes); it never runs under ``jit``.
    """

    init: Callable[..., Any]
    update: Callable[[Any, Any, Any], Any]
    check: Optional[Callable[[Any, Any, Any], None]] = None


class SolverInfo(NamedTuple):
    """Diagnostics of an update: ``converged`` (bool), ``residual`` (float), ``iterations`` (int).

    ``dropped`` (float): for low-rank beliefs, the fraction of the step's whitened curvature that
    the rank-p projection could not keep (0 for dense beliefs; near 1: the rank is too small).
    """

    converged: jax.Array
    residual: jax.Array
    iterations: jax.Array
    dropped: Optional[jax.Array] = None


def solver_info(dtype=None, converged=True, residual=0.0, iterations=0, dropped=0.0) -> SolverInfo:
    """A :class:`SolverInfo` of scalars (the default marks an update with no inner solve)."""
    dtype = jnp.result_type(float) if dtype is None else dtype
    return SolverInfo(jnp.asarray(converged, dtype=bool), jnp.asarray(residual, dtype=dtype),
                      jnp.asarray(iterations, dtype=jnp.int32), jnp.asarray(dropped, dtype=dtype))


class GaussianState(NamedTuple):
    """State of a full-covariance filter: belief ``N(mean, cov)`` after ``step`` observations.

    ``info`` reports the last inner solve (always converged for closed-form updates);
    ``key`` is the PRNG key of Monte-Carlo filters (``None`` otherwise).
    """

    mean: jax.Array
    cov: jax.Array
    step: jax.Array
    info: SolverInfo
    key: Optional[jax.Array] = None


class LowRankState(NamedTuple):
    """State of a limited-memory filter: ``N(mean, (W W^T + diag(psi))^{-1})``.

    ``W`` is (d, p) and ``psi`` (d,); nothing of size d x d is ever stored.
    """

    mean: jax.Array
    W: jax.Array
    psi: jax.Array
    step: jax.Array
    info: SolverInfo
    key: Optional[jax.Array] = None


def _all_finite(tree):
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(tree)
              if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _scan(flt: Filter, state, xs, ys, trace_fn, validate=False):
    def body(carry, xy):
        i, x, y = xy
        new = flt.update(carry, x, y)
        if validate:
            checkify.check(_all_finite((x, y)), "jaxrvga.run: NaN or inf in the data at step {i}", i=i)
            checkify.check(_all_finite(new), "jaxrvga.run: the state became NaN or inf at step {i}", i=i)
        out = None if trace_fn is None else trace_fn(new, x, y)
        return new, out

    steps = jnp.arange(jax.tree_util.tree_leaves(xs)[0].shape[0])
    return jax.lax.scan(body, state, (steps, xs, ys))


_scan_jit = jax.jit(_scan, static_argnums=(0, 4))
_scan_jit_donate = jax.jit(_scan, static_argnums=(0, 4), donate_argnums=(1,))
_scan_checked = jax.jit(checkify.checkify(lambda *a: _scan(*a, validate=True)), static_argnums=(0, 4))


def run(flt: Filter, state, xs, ys, trace_fn: Optional[Callable] = None, *,
        donate: bool = False, validate: bool = False):
    """Run ``flt`` over the observations ``(xs[t], ys[t])`` with one jitted ``lax.scan``.

    Args:
      flt: a :class:`Filter`.
      state: its initial state.
      xs, ys: arrays (or pytrees) whose leading axis is time.
      trace_fn: optional ``trace_fn(state, x, y) -> pytree`` evaluated after each step;
        its outputs are stacked along time. Nothing else is stored, so a (T, d, d)
        covariance history exists only if ``trace_fn`` returns the covariance.
      donate: donate the initial state's buffers to the computation (the caller's
        ``state`` must not be used afterwards). Saves one copy of the state in memory.
      validate: checked mode (``jax.experimental.checkify``): raise ``ValueError`` naming
        the first step whose data or resulting state holds a NaN or inf. Costs one
        reduction over the state per step.

    Returns:
      ``(final_state, trace)`` with ``trace = None`` when no ``trace_fn`` is given.
    """
    lengths = {jnp.shape(leaf)[0] for leaf in jax.tree_util.tree_leaves((xs, ys))}
    if len(lengths) != 1:
        raise ValueError(f"xs and ys must share their leading (time) axis, got lengths {sorted(lengths)}")
    if flt.check is not None:
        flt.check(state, xs, ys)
    if validate:
        err, out = _scan_checked(flt, state, xs, ys, trace_fn)
        msg = err.get()
        if msg is not None:
            raise ValueError(msg.splitlines()[0])
        return out
    fn = _scan_jit_donate if donate else _scan_jit
    return fn(flt, state, xs, ys, trace_fn)


def trace_info(state, x=None, y=None) -> SolverInfo:
    """Trace function recording the solver diagnostics of each step."""
    del x, y
    return state.info


def trace_mean(state, x=None, y=None):
    """Trace function recording the mean after each step."""
    del x, y
    return state.mean


def tree_where(pred, a, b):
    """``a`` where ``pred`` else ``b``, leaf by leaf (``pred`` a scalar bool)."""
    return jax.tree_util.tree_map(lambda u, v: jnp.where(pred, u, v), a, b)


__all__ = ["Filter", "SolverInfo", "GaussianState", "LowRankState", "run", "solver_info",
           "trace_info", "trace_mean", "tree_where"]
