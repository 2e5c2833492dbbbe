"""The filter contract and the scan driver.

Every online algorithm is a :class:`Filter`: a NamedTuple of pure functions
``init(...) -> state`` and ``update(state, x, y) -> state``. States are NamedTuple
pytrees, so filters jit, vmap and scan. :func:`run` drives one over a data set
with a single jitted ``jax.lax.scan`` (:func:`scan` is the same scan, not jitted).
:func:`step_fn` compiles one update for data arriving one observation at a time.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from . import file_checks as fc
from . import io
from ._values import same, value_key
from .validation import all_finite, check_key, is_concrete


class Filter(NamedTuple):
    """A recursive estimator as two pure functions.

    ``init(...) -> state`` builds the state; ``update(state, x, y) -> state`` absorbs one
    observation. ``check(state, xs, ys)``, when given, validates a whole data set
    before :func:`run` scans it (label values, shapes); it never runs under ``jit``.
    ``predict(state) -> state``, when given, is the prediction step alone: the prior that the
    next ``update`` conditions on the observation (:mod:`jaxrvga.dynamics`; ``None``: a filter
    without dynamics, whose prior is the state itself). ``model``: the observation model, when the
    filter has one (used by :func:`jaxrvga.log_evidence`). ``spec``: for a filter made by
    :func:`jaxrvga.build`, its :class:`~jaxrvga.guard.Spec` (belief, scheme, model, dynamics),
    which :func:`jaxrvga.filters.with_block_rows` and :mod:`jaxrvga.sharding` rebuild from (a filter
    whose ``update`` you replace should carry ``spec=None``). The library's filters make ``update``
    and ``predict`` callables that compare by configuration (:meth:`program`), not Python
    functions: tools that read a function's source (``chex.assert_max_traces``) need them wrapped
    in one.
    """

    init: Callable[..., Any]
    update: Callable[[Any, Any, Any], Any]
    check: Optional[Callable[[Any, Any, Any], None]] = None
    predict: Optional[Callable[[Any], Any]] = None
    model: Optional[Any] = None
    spec: Optional[Any] = None

    def __eq__(self, other):
        """Field by field by value (:func:`jaxrvga._values.same`: arrays by identity)."""
        return isinstance(other, Filter) and same(tuple(self), tuple(other))

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        """Hashable as a static ``jit`` argument, consistently with ``==``."""
        return hash(value_key(tuple(self)))

    def predicted(self, state):
        """The prior that the next ``update`` conditions on (:mod:`jaxrvga.dynamics`): ``predict(state)``, or
        ``state`` itself for a filter without dynamics.

        Args:
          state: a state of this filter.

        Returns:
          The predicted state.
        """
        return state if self.predict is None else self.predict(state)

    def program(self) -> "Filter":
        """The parts of the filter a run compiles (``update`` and ``predict``): two filters built from
        the same model and options have equal programs, and :func:`run` compiles them once.

        Returns:
          A :class:`Filter` of ``update`` and ``predict`` alone (``init``, ``check`` and ``model`` None).
        """
        return Filter(None, self.update, None, self.predict)


class SolverInfo(NamedTuple):
    """Diagnostics of an update: ``converged`` (bool), ``residual`` (float), ``iterations`` (int).

    ``dropped`` (float): for low-rank beliefs, the fraction of the step's whitened curvature that
    the rank-p projection could not keep (0 for dense beliefs; near 1: the rank is too small).
    ``em_loops`` (int): the EM loops of the step's low-rank projection (0 when it did not project).
    """

    converged: jax.Array
    residual: jax.Array
    iterations: jax.Array
    dropped: Optional[jax.Array] = None
    em_loops: Optional[jax.Array] = None


def solver_info(dtype=None, converged=True, residual=0.0, iterations=0, dropped=0.0, em_loops=0) -> SolverInfo:
    """A :class:`SolverInfo` of scalars (the default marks an update with no inner solve).

    Args:
      dtype: the floating dtype of ``residual`` and ``dropped`` (default: JAX's default float).
      converged, residual, iterations, dropped, em_loops: the fields' values (scalars).

    Returns:
      A :class:`SolverInfo` of 0-d arrays: ``converged`` bool, ``iterations`` and ``em_loops`` int32.
    """
    dtype = jnp.result_type(float) if dtype is None else dtype
    return SolverInfo(jnp.asarray(converged, dtype=bool), jnp.asarray(residual, dtype=dtype),
                      jnp.asarray(iterations, dtype=jnp.int32), jnp.asarray(dropped, dtype=dtype),
                      jnp.asarray(em_loops, dtype=jnp.int32))


class NoiseStats(NamedTuple):
    """The belief ``s2 ~ InvGamma(shape, rate)`` on an unknown observation noise variance
    (:mod:`jaxrvga.noise`): the ``noise`` field of a state whose model learns it, ``None`` otherwise.
    Its prior mean is ``rate / (shape - 1)`` (for ``shape > 1``)."""

    shape: jax.Array
    rate: jax.Array


class Prequential(NamedTuple):
    """A trace function evaluated before each update, on the predicted belief (the prior of the
    step): ``fn(predicted_state, x, y) -> pytree``. Pass one as ``trace_fn`` of :func:`run` or
    :func:`scan` for one-step-ahead (prequential) scores; make one with :func:`prequential`."""

    fn: Callable[[Any, Any, Any], Any]


def prequential(fn: Callable[[Any, Any, Any], Any]) -> Prequential:
    """Mark ``fn(state, x, y)`` to see the predicted belief before ``(x, y)`` is absorbed
    (``flt.predict(state)``; the state itself for a filter without a prediction step), not the
    belief after it: e.g. ``jr.run(flt, state, xs, ys, jr.prequential(score))``.

    Args:
      fn: a trace function ``fn(state, x, y) -> pytree``.

    Returns:
      A :class:`Prequential` wrapping ``fn``, to pass as ``trace_fn`` of :func:`run` or :func:`scan`.
    """
    if not callable(fn):
        raise ValueError(f"prequential takes a trace function fn(state, x, y), got {type(fn).__name__}")
    return Prequential(fn)


class Traces(NamedTuple):
    """Several trace functions of one run, by name (make one with :func:`traces`): each is evaluated
    as it would be alone (a :class:`Prequential` one on the predicted belief before the step, any
    other on the belief after it) and the run's trace is a dict of their traces by name."""

    named: tuple


def traces(**named) -> Traces:
    """Trace several things in one run: ``jr.traces(log_pred=jr.trace_log_predictive(model),
    mean=jr.trace_mean)`` as the ``trace_fn`` of :func:`run` or :func:`scan` gives the trace
    ``{"log_pred": ..., "mean": ...}``, each entry what a run with that trace function alone gives.

    Each value is a trace function ``fn(state, x, y)`` (evaluated after each step), a
    :class:`Prequential` one (from :func:`prequential` or :func:`jaxrvga.trace_log_predictive`: evaluated
    before each step, on the predicted belief, computed once for all of them) or another
    :class:`Traces`. Equal arguments give equal values, so a run compiles once for them.

    Args:
      named: the trace functions by name (at least one).

    Returns:
      A :class:`Traces`; the run's trace is a dict with the same names.
    """
    if not named:
        raise ValueError("traces needs at least one named trace function, e.g. traces(mean=jr.trace_mean)")
    for name, fn in named.items():
        if not (callable(fn) or isinstance(fn, (Prequential, Traces))):
            raise ValueError(f"traces: {name} must be a trace function fn(state, x, y), a prequential one or "
                             f"traces(...), got {type(fn).__name__}")
    return Traces(tuple(named.items()))


def _trace(flt: Filter, trace_fn, before, after, x, y):
    """The trace of one step: ``trace_fn`` of the belief after it, a :class:`Prequential` one of
    the predicted belief before it, or a dict of those of a :class:`Traces`."""
    if trace_fn is None:
        return None
    predicted = []  # the predicted belief, computed once for every prequential trace of the step

    def prior():
        if not predicted:
            predicted.append(flt.predicted(before))
        return predicted[0]

    def evaluate(fn):
        if isinstance(fn, Traces):
            return {name: evaluate(member) for name, member in fn.named}
        if isinstance(fn, Prequential):
            return fn.fn(prior(), x, y)
        return fn(after, x, y)

    return evaluate(trace_fn)


def _keep(state, x, y):
    del x, y
    return state


def _scan(flt: Filter, state, xs, ys, trace_fn, length=None, every=None, validate=False):
    """The scan of :func:`run`. ``length`` (traced): steps ``i >= length`` are padding and leave the
    state as it is. ``every`` (static int): report progress to the host after each block of
    ``every`` steps, by an outer scan over blocks (no per-step branch)."""
    def body(carry, xy):
        i, x, y = xy
        if length is None:
            new = flt.update(carry, x, y)
        else:
            new = jax.lax.cond(i < length, flt.update, _keep, carry, x, y)
        if validate:
            padded = False if length is None else i >= length
            leaves = jax.tree_util.tree_leaves
            checkify.check(padded | all_finite(*leaves((x, y))), "jaxrvga.run: NaN or inf in the data at step {i}", i=i)
            checkify.check(all_finite(*leaves(new)), "jaxrvga.run: the state became NaN or inf at step {i}", i=i)
        return new, _trace(flt, trace_fn, carry, new, x, y)

    seq = (jnp.arange(jax.tree_util.tree_leaves(xs)[0].shape[0]), xs, ys)
    if every is None:
        return jax.lax.scan(body, state, seq)
    return _scan_blocks(body, state, seq, every)


def _scan_blocks(body, state, seq, every: int):
    """``lax.scan(body, state, seq)`` as an outer scan over blocks of ``every`` steps, each followed by
    a progress callback, then a scan over the remaining ``len % every`` steps."""
    n = seq[0].shape[0] // every
    head = jax.tree_util.tree_map(lambda a: a[:n * every].reshape((n, every) + a.shape[1:]), seq)
    tail = jax.tree_util.tree_map(lambda a: a[n * every:], seq)

    def block(carry, xy):
        carry, out = jax.lax.scan(body, carry, xy)
        jax.debug.callback(_progress_tick, xy[0][-1] + 1)
        return carry, out

    state, out_head = jax.lax.scan(block, state, head)
    state, out_tail = jax.lax.scan(body, state, tail)
    out = jax.tree_util.tree_map(lambda h, t: jnp.concatenate([h.reshape((-1,) + h.shape[2:]), t]),
                                 out_head, out_tail)
    return state, out


def scan(flt: Filter, state, xs, ys, trace_fn: Optional[Callable] = None):
    """``jax.lax.scan`` of ``flt.update`` over ``(xs[t], ys[t])``, not jitted: what :func:`run` compiles.

    Use it inside your own ``jax.jit`` / ``jax.vmap`` / ``jax.grad`` (e.g. a vmapped fleet of
    filters). Returns ``(final_state, trace)`` as :func:`run` does; no input checks.

    Args:
      flt: a :class:`Filter`.
      state: its initial state.
      xs, ys: arrays (or pytrees) whose leading axis is time.
      trace_fn: as :func:`run`'s.

    Returns:
      ``(final_state, trace)``, with ``trace = None`` when no ``trace_fn`` is given.
    """
    return _scan(flt, state, xs, ys, trace_fn)


_STATIC = dict(static_argnums=(0, 4), static_argnames=("every",))  # flt, trace_fn, progress block
_scan_jit = jax.jit(_scan, **_STATIC)
_scan_jit_donate = jax.jit(_scan, donate_argnums=(1,), **_STATIC)
_scan_checked = jax.jit(checkify.checkify(functools.partial(_scan, validate=True)), **_STATIC)

_PROGRESS_BARS = []  # the bars of the runs in flight, innermost last


def _progress_tick(n):
    if _PROGRESS_BARS:
        bar = _PROGRESS_BARS[-1]
        if min(int(n), bar.total) > bar.n:  # padded steps tick past the total
            bar.update(min(int(n), bar.total) - bar.n)


def _progress_every(T: int, state) -> int:
    """Steps between two progress updates: about 100 per run, but at least ~10 ms of work apart,
    so the updates (one host callback: 0.13 ms on an idle CPU, up to ~0.5 ms on a loaded one) cost
    under 5 % of the run. A step's work is guessed from the state's size: 1 us, or one pass over
    the state at 10 GB/s if longer."""
    nbytes = sum(jnp.size(leaf) * jnp.result_type(leaf).itemsize for leaf in jax.tree_util.tree_leaves(state))
    step_s = max(1e-6, nbytes / 1e10)
    return min(max(-(-T // 100), int(1e-2 / step_s), 1), max(T, 1))


def _bucket_length(T: int, bucket) -> int:
    if bucket is True:
        return 1 << max(T - 1, 0).bit_length()
    return max(-(-T // bucket), 1) * bucket


def _pad_time(tree, T: int, total: int):
    """Pad the leading (time) axis of every leaf to ``total`` by repeating its last row (zeros when empty)."""
    def pad(a):
        xp = np if isinstance(a, np.ndarray) else jnp  # NumPy data: no XLA program per new length
        a = xp.asarray(a)
        fill = a[-1:] if T else xp.zeros((1,) + a.shape[1:], a.dtype)
        return xp.concatenate([a, xp.repeat(fill, total - T, axis=0)])
    return jax.tree_util.tree_map(pad, tree)


def _as_arrays(name, data):
    """Nested lists (of numbers) become one array; ragged nesting raises ``ValueError``."""
    if not isinstance(data, list):
        return data
    try:
        return np.asarray(data, dtype=float) if not np.iscomplexobj(np.asarray(data)) else np.asarray(data)
    except ValueError as err:
        raise ValueError(f"{name} must be an array (or a pytree of arrays) with a leading time axis; "
                         f"the nested lists given are ragged ({err})") from None


def _check_run_args(state, xs, ys, bucket, progress, validate) -> int:
    if any(jnp.ndim(leaf) == 0 for leaf in jax.tree_util.tree_leaves((xs, ys))):
        raise ValueError("xs and ys must have a leading (time) axis: got a scalar leaf")
    lengths = {jnp.shape(leaf)[0] for leaf in jax.tree_util.tree_leaves((xs, ys))}
    if len(lengths) != 1:
        raise ValueError(f"xs and ys must share their leading (time) axis, got lengths {sorted(lengths)}")
    if bucket is not None and bucket is not True and (
            isinstance(bucket, bool) or not isinstance(bucket, int) or bucket < 1):
        raise ValueError(f"bucket must be None, True or a positive int, got {bucket!r}")
    if progress is not False and (not isinstance(progress, (bool, int)) or progress < 1):
        raise ValueError(f"progress must be a bool or a positive int, got {progress!r}")
    traced = not is_concrete((state, xs, ys))
    for flag, name in ((validate, "validate=True"), (progress, "progress")):
        if flag is not False and traced:
            raise ValueError(f"{name} runs outside jit/vmap; call jaxrvga.run on concrete arrays, "
                             "or use jaxrvga.scan inside your own jit/vmap")
    return lengths.pop()


def run(flt: Filter, state, xs, ys, trace_fn: Optional[Callable] = None, *,
        donate: bool = False, validate: bool = False, bucket=None, progress=False):
    """Run ``flt`` over the observations ``(xs[t], ys[t])`` with one jitted ``lax.scan``.

    Args:
      flt: a :class:`Filter`.
      state: its initial state.
      xs, ys: arrays (or pytrees) whose leading axis is time.
      trace_fn: optional ``trace_fn(state, x, y) -> pytree`` evaluated after each step;
        its outputs are stacked along time. Nothing else is stored, so a (T, d, d)
        covariance history exists only if ``trace_fn`` returns the covariance. Wrapped by
        :func:`prequential`, it is evaluated before each step on the predicted belief instead
        (one-step-ahead scores such as :func:`jaxrvga.trace_log_predictive`). Several at once,
        of either kind: :func:`traces`.
      donate: donate the initial state's buffers to the computation (the caller's
        ``state`` must not be used afterwards). Saves one copy of the state in memory.
      validate: checked mode (``jax.experimental.checkify``): raise ``ValueError`` naming
        the first step whose data or resulting state holds a NaN or inf. Costs one
        reduction over the state per step. Runs outside ``jit``/``vmap`` only.
      bucket: for data arriving in chunks of varying lengths. ``True`` pads the time axis
        to the next power of two, an int ``n`` to a multiple of ``n``; padded steps leave
        the state (and its step counter) unchanged and their trace is dropped, so only a
        few lengths are ever compiled. ``None`` (default) compiles for the exact length.
      progress: ``True`` shows a ``tqdm`` progress bar updated from inside the scan (by
        ``jax.debug.callback``) about 100 times per run, fewer when the steps are cheap so the
        updates cost under 5 %; an int ``k`` updates it every ``k`` steps. Needs ``tqdm``.

    Returns:
      ``(final_state, trace)`` with ``trace = None`` when no ``trace_fn`` is given.
    """
    xs, ys = _as_arrays("xs", xs), _as_arrays("ys", ys)
    T = _check_run_args(state, xs, ys, bucket, progress, validate)
    if flt.check is not None:
        flt.check(state, xs, ys)
    extra = {}
    if bucket is not None:
        total = _bucket_length(T, bucket)
        xs, ys = _pad_time((xs, ys), T, total)
        extra["length"] = jnp.asarray(T, jnp.int32)
    if progress is not False:
        total = jax.tree_util.tree_leaves(xs)[0].shape[0]  # the padded length (a static shape)
        extra["every"] = _progress_every(total, state) if progress is True else int(progress)
        with _progress_bar(T) as bar:
            out = _dispatch(flt, state, xs, ys, trace_fn, donate, validate, extra)
            jax.block_until_ready(out)
            if bar.n < T:  # the last steps after the last multiple of ``every``
                bar.update(T - bar.n)
    else:
        out = _dispatch(flt, state, xs, ys, trace_fn, donate, validate, extra)
    if bucket is not None and trace_fn is not None:
        out = (out[0], jax.tree_util.tree_map(lambda a: a[:T], out[1]))
    return out


def passes(flt: Filter, state, xs, ys, *, key=None, progress=False):
    """``E`` passes of ``flt`` over a data set in hand, ``E = 1 / p`` for a model tempered to the power ``p``
    (:func:`jaxrvga.models.tempered`): each observation counts once in all, and is relinearised at later
    means; a linear-Gaussian model ends at the batch posterior, as one pass does ([RVGA] Thm 2;
    experiments/REPORT.md, "Tempered passes over a data set in hand"). An untempered filter makes
    one pass. A power that is not ``1 / E`` is refused: the passes would count an observation more or
    less than once. Passes are for a static parameter: a filter with dynamics applies its transition at
    every step of every pass.

    Args:
      flt: a :class:`Filter` whose model is tempered to ``1 / E`` (a model average's members' model).
      state: its initial state.
      xs, ys: the data set, as :func:`run`'s.
      key: a PRNG key to reshuffle the data before each pass after the first (the first in the given
        order), or ``None``: every pass in the given order.
      progress: as :func:`run`'s, for each pass.

    Returns:
      The state after the ``E`` passes.
    """
    power = 1.0 if flt.model is None else flt.model.power  # in (0, 1] (jr.models.tempered)
    E = round(1.0 / power)
    if abs(E * power - 1.0) > 1e-6:
        raise ValueError(f"flt.model.power must be 1 / E for E passes (jr.models.tempered(model, 1 / E)), got "
                         f"{power}: {E} passes would count each observation {E * power:.4g} times")
    xs, ys = _as_arrays("xs", xs), _as_arrays("ys", ys)
    key = check_key(key)
    for e in range(E):
        if key is not None and e > 0:
            order = jax.random.permutation(jax.random.fold_in(key, e), jax.tree_util.tree_leaves(xs)[0].shape[0])
            xs, ys = jax.tree_util.tree_map(lambda a: a[order], (xs, ys))
        state = run(flt, state, xs, ys, progress=progress)[0]
    return state


def _dispatch(flt, state, xs, ys, trace_fn, donate, validate, extra):
    flt = flt.program()  # the static argument: identical filters share one compiled program
    if validate:
        err, out = _scan_checked(flt, state, xs, ys, trace_fn, **extra)
        msg = err.get()
        if msg is not None:
            raise ValueError(msg.splitlines()[0])
        return out
    fn = _scan_jit_donate if donate else _scan_jit
    return fn(flt, state, xs, ys, trace_fn, **extra)


@contextlib.contextmanager
def _progress_bar(total: int):
    try:
        from tqdm.auto import tqdm
    except ImportError as e:
        raise ImportError("jaxrvga.run(progress=...) needs tqdm: pip install tqdm") from e
    bar = tqdm(total=total, unit="step")
    _PROGRESS_BARS.append(bar)
    try:
        yield bar
    finally:
        _PROGRESS_BARS.remove(bar)
        bar.close()


class Step(NamedTuple):
    """A compiled one-observation update on a packed state (see :func:`step_fn`).

    ``update(packed, x, y) -> packed`` (the input buffers are donated), ``pack(state) -> packed``
    and ``unpack(packed) -> state``; ``packed`` is a tuple of flat arrays, one per dtype.
    """

    update: Callable
    pack: Callable
    unpack: Callable


def _stored(a):
    """A leaf as it is packed: key data for a PRNG key, int32 for a bool, else itself."""
    if jnp.issubdtype(jnp.result_type(a), jax.dtypes.prng_key):
        return jax.random.key_data(a)
    a = jnp.asarray(a)
    return a.astype(jnp.int32) if a.dtype == jnp.bool_ else a


def step_fn(flt: Filter, state, x, y) -> Step:
    """Compile ``flt.update`` for data arriving one observation at a time.

    A jitted call pays a fixed cost for every array it returns; a state has about six
    (mean, covariance, step, solver info), so the step works on a packed state instead: one
    flat buffer per dtype (usually two: the floats and the integers), donated to the next call
    (no new allocation). ``state``, ``x``, ``y`` are examples fixing shapes and dtypes; the step
    is compiled here. Usage::

        step = jr.step_fn(flt, state, x0, y0)
        packed = step.pack(state)
        for x, y in stream:
            packed = step.update(packed, x, y)
        state = step.unpack(packed)

    Args:
      flt: a :class:`Filter`.
      state: an example state (its structure, leaf shapes and dtypes are those of every packed state).
      x, y: an example observation (its shapes and dtypes are those of every later one).

    Returns:
      A :class:`Step` ``(update, pack, unpack)`` of jitted functions, ``update`` already compiled.
    """
    leaves, treedef = jax.tree_util.tree_flatten(state)
    stored = [_stored(a) for a in leaves]
    groups = sorted({a.dtype.str for a in stored})
    layout, used = [], dict.fromkeys(groups, 0)  # per leaf: group, start, stored shape, dtype, key impl
    for a, orig in zip(stored, leaves):
        is_key = jnp.issubdtype(jnp.result_type(orig), jax.dtypes.prng_key)
        layout.append((groups.index(a.dtype.str), used[a.dtype.str], a.shape, jnp.result_type(orig),
                       jax.random.key_impl(orig) if is_key else None))
        used[a.dtype.str] += a.size
    del leaves, stored  # keep no example arrays alive

    def check(s):
        """``s`` has the structure, leaf shapes and dtypes of the example state (a state of another
        filter or size would be packed into the wrong slots); checked when traced."""
        got, tree = jax.tree_util.tree_flatten(s)
        if tree != treedef:
            raise ValueError(f"state has the structure {tree}, not that of the state step_fn compiled for ({treedef})")
        for (_, _, shape, dtype, _), a in zip(layout, got):
            if tuple(jnp.shape(_stored(a))) != tuple(shape) or jnp.result_type(a) != dtype:
                raise ValueError(f"state has a leaf of shape {jnp.shape(a)} and dtype {jnp.result_type(a)} where "
                                 f"the state step_fn compiled for has {shape} and {dtype}")

    def pack(s):
        check(s)
        parts = [[] for _ in groups]
        for a in jax.tree_util.tree_leaves(s):
            a = _stored(a)
            parts[groups.index(a.dtype.str)].append(a.reshape(-1))
        return tuple(jnp.concatenate(p) for p in parts)

    def unpack(bufs):
        out = []
        for g, start, shape, dtype, impl in layout:
            a = bufs[g][start:start + int(np.prod(shape))].reshape(shape)
            out.append(a.astype(dtype) if impl is None else jax.random.wrap_key_data(a, impl=impl))
        return jax.tree_util.tree_unflatten(treedef, out)

    update = jax.jit(lambda buf, x, y: pack(flt.update(unpack(buf), x, y)), donate_argnums=0)
    pack, unpack = jax.jit(pack), jax.jit(unpack)
    jax.block_until_ready(update(pack(state), x, y))  # compile now
    return Step(update, pack, unpack)


def tree_where(pred, a, b):
    """``a`` where ``pred`` else ``b``, leaf by leaf (``pred`` a scalar bool): the skip-and-flag select."""
    return jax.tree_util.tree_map(lambda u, v: jnp.where(pred, u, v), a, b)


def masked_update(flt: Filter, state, x, y, mask):
    """``flt.update(state, x, y)`` where ``mask`` is True; elsewhere the state kept bit for bit (its
    step counter, key and diagnostics too).

    For a fleet of filters stacked along a leading axis (``jax.vmap(flt.init)``), ``mask`` is a
    bool vector (n,) and ``x``, ``y`` hold one observation per member along that axis: the update is
    vmapped and each member takes its new state or keeps its own, e.g. a bandit updates only the arm
    it pulled. A scalar ``mask`` updates one (unstacked) filter or keeps it. Every member's update
    is computed and then discarded where ``mask`` is False, so each member needs valid data (e.g.
    the pulled arm's ``x`` and ``y`` repeated for all); jits and differentiates like ``update``.

    Args:
      flt: a :class:`Filter`.
      state: its state, or a stacked state whose leaves have a leading (n,) member axis.
      x, y: one observation, or one per member along the leading axis.
      mask: a bool scalar, or a bool vector (n,) for a stacked state.

    Returns:
      The state (same structure, shapes and dtypes), updated where ``mask`` is True.
    """
    mask = jnp.asarray(mask)
    if mask.dtype != jnp.bool_ or mask.ndim > 1:
        raise ValueError(f"mask must be a bool scalar or a bool vector (one entry per member of a stacked "
                         f"state), got dtype {mask.dtype} and shape {mask.shape}")
    if mask.ndim == 0:
        return tree_where(mask, flt.update(state, x, y), state)
    n = mask.shape[0]
    for name, tree in (("state", state), ("x", x), ("y", y)):
        bad = [jnp.shape(a) for a in jax.tree_util.tree_leaves(tree) if jnp.shape(a)[:1] != (n,)]
        if bad:
            raise ValueError(f"{name}: every array must have the leading (member) axis of mask, {n}, got "
                             f"shape {bad[0]}")
    new = jax.vmap(flt.update)(state, x, y)

    def pick(a, b):
        return jnp.where(mask.reshape((n,) + (1,) * (jnp.ndim(a) - 1)), a, b)

    return jax.tree_util.tree_map(pick, new, state)


def trace_info(state, x=None, y=None) -> SolverInfo:
    """Trace function recording the solver diagnostics of each step.

    Args:
      state: the state after a step.
      x, y: the step's observation (unused).

    Returns:
      ``state.info``, a :class:`SolverInfo` of scalars (stacked along time by the run).
    """
    del x, y
    return state.info


def trace_mean(state, x=None, y=None):
    """Trace function recording the mean after each step.

    Args:
      state: the state after a step.
      x, y: the step's observation (unused).

    Returns:
      ``state.mean``, the (d,) mean (stacked to (T, d) by the run).
    """
    del x, y
    return state.mean


# --------------------------------------------------------------------------- in a file (jaxrvga.io)

def _completed_info(obj):
    """A ``SolverInfo`` of a file written before its trailing fields existed gets them as zeros
    (``dropped``, ``em_loops``), so that a filter can go on from it (a scan needs the same fields)."""
    if not isinstance(obj, SolverInfo) or not fc.is_array(obj.converged):
        return obj
    shape = fc.shape_of(obj.converged)
    if obj.dropped is None and fc.is_array(obj.residual):
        obj = obj._replace(dropped=jnp.zeros(shape, fc.dtype_of(obj.residual)))
    return obj._replace(em_loops=jnp.zeros(shape, jnp.int32)) if obj.em_loops is None else obj


def check_solver_info(s):
    """The check of a loaded :class:`SolverInfo`: arrays of one shape, ``converged`` bool, ``residual`` and
    ``dropped`` floating, ``iterations`` and ``em_loops`` integer (``ValueError``).

    Args:
      s: a :class:`SolverInfo` read from a file.

    Returns:
      None; raises ``ValueError`` when a field is not as described.
    """
    for f in s._fields:
        fc.need(fc.is_array(getattr(s, f)), f"SolverInfo.{f} must be an array")
    fc.need(np.dtype(s.converged.dtype) == np.bool_, f"SolverInfo.converged must be bool, got {s.converged.dtype}")
    fc.floating("SolverInfo.residual", s.residual)
    fc.need(np.issubdtype(s.iterations.dtype, np.integer), "SolverInfo.iterations must be integer")
    fc.floating("SolverInfo.dropped", s.dropped)
    fc.need(np.issubdtype(s.em_loops.dtype, np.integer), "SolverInfo.em_loops must be integer")
    fc.need(len({fc.shape_of(getattr(s, f)) for f in s._fields}) == 1, "the SolverInfo fields must share one shape")


def _check_noise_stats(noise):
    """A bare ``NoiseStats``: floating ``shape`` and ``rate`` of one shape and dtype, positive and finite."""
    for f in ("shape", "rate"):
        fc.floating(f"noise.{f}", getattr(noise, f))
        fc.positive(f"noise.{f}", getattr(noise, f))
    fc.need(fc.shape_of(noise.shape) == fc.shape_of(noise.rate) and fc.dtype_of(noise.shape) == fc.dtype_of(noise.rate),
          "noise.shape and noise.rate must share one shape and dtype")


io.register(SolverInfo, check_solver_info, upgrade=_completed_info)
io.register(NoiseStats, _check_noise_stats)


__all__ = ["Filter", "SolverInfo", "NoiseStats", "run", "passes", "solver_info", "Prequential", "prequential",
           "Traces", "traces", "masked_update", "trace_info", "trace_mean", "scan", "Step", "step_fn",
           "check_solver_info"]
