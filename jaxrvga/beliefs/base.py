"""The contract every belief satisfies and the steps they share."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from .. import file_checks as fc
from .. import io
from ..core import NoiseStats, SolverInfo
from ..kernels.lowrank import symmetrize
from ..validation import check_finite, check_vector, raw_key_shape


@runtime_checkable
class Belief(Protocol):
    """The contract every belief satisfies (:class:`Dense`, :class:`LowRank`, :class:`Diagonal`); the
    schemes and the guard of :mod:`jaxrvga.guard` use nothing else. ``state_type`` is the
    NamedTuple of its states (fields ``mean``, ``step``, ``info``, ``key`` and the belief's own).

    Besides the protocol, a belief of the package has a classmethod ``example(dim, rng) -> (belief,
    factors)`` (what the conformance tests run) and, where it takes options, ``check_options()``
    (``ValueError`` where they are invalid; :func:`jaxrvga.build` calls it); its module registers its
    state type with :func:`register_state`."""

    state_type: type

    def init(self, mean, *factors, key=None):
        """The initial state from the mean and the belief's own factors (checked where concrete).

        Args:
          mean: the prior mean, (d,).
          factors: the belief's own factors (``cov``; ``W, psi``; ``var``).
          key: a PRNG key, stored in the state for the schemes that sample (None: none).

        Returns:
          A state of ``state_type``, its step counter at 0.
        """

    def predict(self, state, dynamics):
        """The prediction step under :class:`~jaxrvga.dynamics.Dynamics`, exact.

        Args:
          state: a state of the belief (its ``state_type``).
          dynamics: a :class:`~jaxrvga.dynamics.Dynamics`.

        Returns:
          The predicted state (the step counter unchanged).
        """

    def marginal(self, state, X):
        """``(X mean, diag(X P X^T))`` for inputs ``X`` ((m, d), or one input (d,)).

        Args:
          state: a state of the belief (its ``state_type``).
          X: the inputs, (m, d) or (d,).

        Returns:
          ``(m, v)``, each (m,) (scalars for one input).
        """

    def sandwich(self, state, J):
        """``J P J^T`` (k, k) for ``J`` (k, d), symmetrised.

        Args:
          state: a state of the belief (its ``state_type``).
          J: a (k, d) matrix.

        Returns:
          The (k, k) matrix.
        """

    def solve(self, state, g):
        """``P g``.

        Args:
          state: a state of the belief (its ``state_type``).
          g: a vector, (d,).

        Returns:
          ``P g``, (d,).
        """

    def base_draws(self, key, num: int, dim: int, dtype):
        """Standard-normal base draws that :meth:`draw` maps to draws of ``theta``.

        Args:
          key: a PRNG key.
          num: the number of draws.
          dim: ``d``.
          dtype: the floating dtype.

        Returns:
          The base draws, in the form the belief's :meth:`draw` takes (an array (num, d), or a tuple).
        """

    def draw(self, state, draws):
        """Draws of ``theta`` (num, d) from base draws: common random numbers across passes.

        Args:
          state: a state of the belief (its ``state_type``).
          draws: base draws from :meth:`base_draws`.

        Returns:
          The (num, d) draws of ``theta``.
        """

    def sample(self, state, key, num: int):
        """``num`` independent exact draws of ``theta``, (num, d) (for Monte-Carlo estimates).

        Args:
          state: a state of the belief (its ``state_type``).
          key: a PRNG key.
          num: the number of draws.

        Returns:
          The (num, d) draws.
        """

    def variances(self, state):
        """``diag(P)`` (d,), the marginal variances.

        Args:
          state: a state of the belief (its ``state_type``).

        Returns:
          The (d,) variances.
        """

    def shift_precision(self, state, delta):
        """The precision ``P^{-1} + diag(delta)``, the mean unchanged: ``(state, ok)`` (a prior's
        precision moved, :func:`jaxrvga.evidence.fit_prior_precision`).

        Args:
          state: a state of the belief (its ``state_type``).
          delta: the (d,) shift, of either sign.

        Returns:
          ``(state, ok)``: the state and a 0-d bool, False where the result is not positive definite.
        """

    def add(self, state, X, c):
        """The precision step ``P^{-1} + X diag(c) X^T`` (as the belief keeps it): ``(state, ok)``.

        Args:
          state: a state of the belief (its ``state_type``).
          X: the curvature factor, (d, q).
          c: the weights of its columns, (q,) (None: ones).

        Returns:
          ``(state, ok)``: the state and a 0-d bool, False where the result is not positive definite.
        """

    def absorb(self, prior, X, c, g, prior_gain: bool = False):
        """:meth:`add` and the mean step ``mu + P g``: ``(state, ok)``.

        Args:
          prior: the state before the step.
          X: the curvature factor, (d, q).
          c: the weights of its columns, (q,) (None: ones).
          g: the gradient of the mean step, (d,).
          prior_gain: solve with the prior's covariance instead of the new one.

        Returns:
          ``(state, ok)``, unprojected.
        """

    def finish(self, state):
        """The belief's projection of a step's result: ``(state, (dropped, em_loops, projected))``,
        the mean left as it is (the same array: the guard chooses it outside, :func:`finish_or_keep`);
        ``projected`` is False where the projection could not be computed (a gain not finite) and
        the unprojected factors were kept, so that the guard keeps the prior (:func:`no_projection`).

        Args:
          state: a state of the belief (its ``state_type``).

        Returns:
          ``(state, (dropped, em_loops, projected))``: 0-d arrays of the mean's dtype, int32 and bool.
        """

    def settle(self, prior, new, ok):
        """:meth:`finish` of ``new`` where ``ok``, else ``prior``: ``(state, (dropped, em_loops, projected))``.

        Args:
          prior: the state before the step.
          new: the state after it, before :meth:`finish`.
          ok: a 0-d bool, whether the step is taken.

        Returns:
          ``(state, (dropped, em_loops, projected))``, as :meth:`finish`.
        """

    def checked_fields(self, state):
        """The arrays whose finiteness the guard checks, the mean first.

        Args:
          state: a state of the belief (its ``state_type``).

        Returns:
          A tuple of arrays.
        """

    def positive(self, state):
        """Whether the belief's variances are positive (a traced bool, O(d)): checked by the guard on
        every state it keeps and every prediction.

        Args:
          state: a state of the belief (its ``state_type``).

        Returns:
          A 0-d bool array.
        """


def antithetic_normals(key, num: int, dim: int, dtype):
    """``num`` standard normal rows of length ``dim`` in antithetic pairs ``(z, -z)``.

    Args:
      key: a PRNG key.
      num: the number of rows (odd: the last pair loses its ``-z``).
      dim: the length of each row.
      dtype: the floating dtype.

    Returns:
      A (num, dim) array.
    """
    half = jax.random.normal(key, ((num + 1) // 2, dim), dtype)
    return jnp.concatenate([half, -half])[:num]


def no_projection(dtype):
    """The report ``(dropped, em_loops, projected) = (0, 0, True)`` of a step whose belief projected
    nothing (``projected``: False only where a projection failed and kept its input).

    Args:
      dtype: the floating dtype of ``dropped``.

    Returns:
      ``(dropped, em_loops, projected)``: 0-d arrays of ``dtype``, int32 and bool.
    """
    return jnp.zeros((), dtype), jnp.zeros((), jnp.int32), jnp.asarray(True)


def add_then_solve(belief, prior, X, c, g, prior_gain: bool = False):
    """``belief.add`` then the mean step ``mu + P g`` (``P`` the new covariance, or the prior's with
    ``prior_gain``). Returns ``(state, ok)``.

    Args:
      belief: a :class:`Belief`.
      prior: its state before the step.
      X: the curvature factor of the step, (d, q).
      c: the curvature weights of its rows, (q,).
      g: the mean step's gradient, (d,).
      prior_gain: solve with the prior's covariance instead of the new one.

    Returns:
      ``(state, ok)``: the state after the step (not yet finished) and a 0-d bool, False where the
      precision update failed.
    """
    pre, ok = belief.add(prior, X, c)
    return pre._replace(mean=prior.mean + belief.solve(prior if prior_gain else pre, g)), ok


def finish_or_keep(belief, prior, new, ok):
    """``belief.finish(new)`` where ``ok``, else ``prior`` (its key advanced to ``new``'s); returns
    ``(state, (dropped, em_loops, projected))``.

    One conditional, so that a low-rank projection can rewrite the prior's ``W`` and ``psi`` in
    place (no second d x p buffer): when ``new`` holds them in its pending factor, they enter the
    branch once, through ``new`` (passed twice, XLA would copy them, and the projection's row-block
    loop would copy ``psi`` in every block). The mean is chosen by a ``where`` outside the conditional
    (:func:`_finish_keeping_mean`): as an output of the conditional it would be copied into the
    branch's result and held through the projection (one d-vector more at the peak).

    Args:
      belief: a :class:`Belief`.
      prior: its state before the step.
      new: the state after the step, before :meth:`Belief.finish`.
      ok: a 0-d bool, whether the step is taken.

    Returns:
      ``(state, (dropped, em_loops, projected))``, the report as :func:`no_projection`'s.
    """
    shared = isinstance(getattr(new, "W", None), tuple) and new.W[0] is prior.W and new.psi is prior.psi
    rest = prior._replace(W=None, psi=None, mean=None) if shared else prior._replace(mean=None)

    def keep(new, rest):
        back = rest._replace(W=new.W[0], psi=new.psi) if shared else rest
        return back._replace(key=new.key), no_projection(prior.mean.dtype)

    out, report = jax.lax.cond(ok, lambda new, rest: _finish_keeping_mean(belief, new), keep, new, rest)
    return out._replace(mean=jnp.where(ok, new.mean, prior.mean)), report


def _finish_keeping_mean(belief, state):
    """``belief.finish(state)`` with the mean taken out (``None``) of the result, which the contract
    (:meth:`Belief.finish`) says is ``state.mean`` itself; a ``finish`` that changes the mean is refused."""
    out, report = belief.finish(state)
    if out.mean is not state.mean:
        raise ValueError(f"{type(belief).__name__}.finish changed the mean; a belief's projection must leave the "
                         f"mean as it is (the guard does not check it again)")
    return out._replace(mean=None), report


def check_mean(mean):
    """A finite real vector with at least one entry.

    Args:
      mean: the prior mean, (d,).

    Returns:
      ``mean`` as a floating JAX array; raises ``ValueError`` otherwise.
    """
    mean = check_finite("mean", check_vector("mean", mean))
    if mean.shape[0] == 0:
        raise ValueError("mean must have at least one entry (d >= 1)")
    return mean


def psi_min(dtype):
    """The absolute floor of ``psi`` after a prediction step: ``sqrt(tiny)`` of ``dtype`` (1e-19 in
    float32), so that ``1 / psi`` and the whitened Gram of a unit-scale ``W`` stay finite.

    Args:
      dtype: a floating dtype.

    Returns:
      A 0-d array of ``dtype``.
    """
    return jnp.sqrt(jnp.finfo(dtype).tiny).astype(dtype)


def pivots_resolved(chol, gram):
    """Every pivot of the Cholesky factor of ``M = I + gram`` exceeds the rounding of its diagonal.

    The exact pivots of ``M >= I`` are >= 1; one below ``2 q eps M_jj`` is rounding noise (a new
    column in the span of the others at a scale the dtype cannot resolve, e.g. ``psi = 1e-30``), so
    the Woodbury solve is meaningless there and the step is refused (and flagged). NaN fails too.

    Args:
      chol: the lower Cholesky factor of ``M``, (q, q).
      gram: the Gram matrix whose diagonal ``M`` adds to the identity, (q, q).

    Returns:
      A 0-d bool array.
    """
    eps = jnp.finfo(chol.dtype).eps
    return jnp.all(jnp.diagonal(chol) ** 2 >= 2 * chol.shape[0] * eps * (1.0 + jnp.diagonal(gram)))


# --------------------------------------------------------------------------- a belief's state, registered

#: The reader of each belief's state type, ``reader(state, mean) -> (belief, state)`` (:func:`register_state`):
#: :func:`jaxrvga.beliefs.of_state` asks it.
READERS: dict = {}


def register_state(state_type, reader, check, former: tuple = ()):
    """Makes a belief's state type known to the package, from the belief's own module.

    Args:
      state_type: the NamedTuple of the belief's states.
      reader: ``reader(state, mean) -> (belief, state)``, the belief that reads such a state and the
        state with its mean and belief arrays only (checked where concrete), for
        :func:`jaxrvga.beliefs.of_state` (the predictions, :func:`jaxrvga.sample`); ``mean`` is the
        state's mean, already checked.
      check: the check of such a state loaded from a file (:func:`jaxrvga.io.register`), e.g. with
        :func:`check_state_fields` for the fields every state has.
      former: modules that held ``state_type`` in files written earlier.

    Returns:
      ``state_type``.
    """
    READERS[state_type] = reader
    return io.register(state_type, check, former=former)


def check_state_fields(state, batch):
    """The check of a loaded state's ``step``, ``info``, ``key`` and ``noise`` (mean of batch shape
    ``batch``): as the beliefs' ``init`` makes them (:func:`jaxrvga.core.solver_info`), so that a filter
    can go on from it. Raises ``ValueError``.

    Args:
      state: a loaded state of a belief.
      batch: the batch shape of its mean (``()`` for one filter, ``(n,)`` for a stacked fleet).

    Returns:
      None.
    """
    fc.need(isinstance(state.info, SolverInfo), "info must be a SolverInfo")
    real, i32, info = fc.dtype_of(state.mean), np.dtype(np.int32), state.info
    fields = {"step": (state.step, i32), "info.converged": (info.converged, np.dtype(np.bool_)),
              "info.residual": (info.residual, real), "info.iterations": (info.iterations, i32),
              "info.dropped": (info.dropped, real), "info.em_loops": (info.em_loops, i32)}
    for f, (x, dtype) in fields.items():
        fc.need(fc.is_array(x) and fc.dtype_of(x) == dtype,
              f"{f} must be an array of dtype {dtype}, got {type(x).__name__} {getattr(x, 'dtype', '')}")
        fc.need(fc.shape_of(x) == batch, f"{f} has shape {fc.shape_of(x)}, expected {batch}")
    _check_key(state.key, batch)
    _check_noise(getattr(state, "noise", None), real, batch)


def _check_key(key, batch):
    """``key`` None, typed PRNG keys of shape ``batch`` or raw ``uint32`` key data of ``batch`` plus the
    default implementation's shape (what :func:`jaxrvga.validation.check_key` takes, per state)."""
    if key is None:
        return
    fc.need(fc.is_array(key), f"key must be a PRNG key or None, got {type(key).__name__}")
    dtype, shape = key.dtype, fc.shape_of(key)
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
        fc.need(shape == batch, f"key has shape {shape}, expected {batch}")
        return
    want = batch + tuple(raw_key_shape())
    fc.need(dtype == np.uint32 and shape == want,
          f"key must be a PRNG key or None; raw key data must be uint32 of shape {want}, got {dtype} of shape {shape}")


def _check_noise(noise, dtype, batch):
    """A learned noise variance's ``NoiseStats``: ``shape`` and ``rate`` arrays of the state's dtype
    and batch shape, positive and finite (:mod:`jaxrvga.noise`); ``None`` for a known variance."""
    if noise is None:
        return
    fc.need(isinstance(noise, NoiseStats), f"noise must be a NoiseStats, got {type(noise).__name__}")
    for f in ("shape", "rate"):
        x = getattr(noise, f)
        fc.need(fc.is_array(x) and fc.dtype_of(x) == dtype and fc.shape_of(x) == batch,
              f"noise.{f} must be an array of dtype {dtype} and shape {batch}")
        fc.positive(f"noise.{f}", x)


__all__ = ['Belief', 'symmetrize', 'check_mean', 'pivots_resolved', 'antithetic_normals', 'no_projection', 'add_then_solve', 'finish_or_keep', 'psi_min', 'READERS',
           'register_state', 'check_state_fields']
