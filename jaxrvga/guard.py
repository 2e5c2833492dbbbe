"""A filter from four values, and the one guard every update of every filter passes.

:func:`build` joins a belief of :mod:`jaxrvga.beliefs`, a scheme of :mod:`jaxrvga.schemes` (its
step), an observation model and the dynamics (the prediction step) into a :class:`~jaxrvga.Filter`;
the named factories of :mod:`jaxrvga.filters` (``jr.rvga``, ``jr.lrvga``, ``jr.diag_rvga``, ...)
are this with a scheme named by a string.

Every update of every belief and scheme passes the same guard: a step whose result is not finite or not
positive definite is **skipped and flagged** (the predicted belief is kept, the step counter
advances, ``info.converged`` is False). ``info.dropped`` reports, for low-rank beliefs, the
fraction of the step's whitened curvature that rank p could not keep.
"""
from __future__ import annotations

import inspect
from typing import NamedTuple

import jax
import jax.numpy as jnp

from . import noise as noise_belief
from . import schemes
from ._values import Bound
from .beliefs import Belief
from .core import Filter
from .dynamics import Dynamics
from .models import Model, check_data, check_observation
from .validation import all_finite, check_key


class Spec(NamedTuple):
    """What a filter is: the model, the belief, the scheme (:class:`~jaxrvga.schemes.Scheme`), the dynamics."""

    model: Model
    belief: Belief
    scheme: schemes.Scheme
    dynamics: Dynamics = Dynamics()


# --------------------------------------------------------------------------- the update

def _changed(fields, kept):
    """The arrays of ``fields`` that are not arrays of ``kept`` (those a step passed on are the prior's)."""
    return tuple(a for a in fields if not any(a is b for b in kept))


def _belief_fields(state):
    """Every floating array of a state but its diagnostics (a pending low-rank factor's blocks too):
    what a step or the prediction may change."""
    leaves = jax.tree_util.tree_leaves(state._replace(info=None, key=None, step=None))
    return tuple(a for a in leaves if jnp.issubdtype(jnp.result_type(a), jnp.inexact))


def _guarded(belief, prior, new, ok, info, certified: bool = False, noise=None):
    """Skip and flag: ``new`` finished (projected) only if it is finite and valid, else ``prior`` kept
    (:meth:`~jaxrvga.beliefs.LowRank.settle`). A projection that cannot be computed (a gain not
    finite) keeps the prior's factors and reports it, and the prior's mean is kept with them; one
    that still yields a non-finite result (only by overflow, for finite input) is flagged. A
    projection leaves the mean as it is, so the mean is not checked again. The step counter
    advances either way. Every kept belief has positive variances (``belief.positive``, O(d)); a
    step of the library's schemes (``certified``) certifies the arrays its ``add`` wrote (a dense
    covariance is not read again), any other step has every array checked. A step whose
    residual is not finite (it overflowed) is flagged and reports the prior's residual. ``noise``:
    the step's statistics of a learned noise variance (:mod:`jaxrvga.noise`), kept with the step.
    """
    ok = ok & all_finite(*_changed(belief.checked_fields(new), belief.checked_fields(prior))) & belief.positive(new)
    if not certified:  # a step of the user's: every array read, not only those the library's steps leave unchecked
        ok = ok & all_finite(*_belief_fields(new))
    if noise is not None:  # the statistics decide the step with the rest: a step they reject keeps the prior
        ok = ok & noise_belief.valid(noise) & noise_belief.valid(prior.noise)
    out, (dropped, loops, projected) = belief.settle(prior, new, ok)
    out = out._replace(mean=jnp.where(projected, out.mean, prior.mean))  # a failed projection kept the prior's factors
    ok = ok & projected & all_finite(*belief.checked_fields(out)[1:])
    if noise is not None:  # the learned noise variance's statistics move with the step they belong to
        out = out._replace(noise=noise_belief.NoiseStats(*(jnp.where(ok, a, b) for a, b in zip(noise, prior.noise))))
    finite = jnp.isfinite(info.residual)  # a diagnostic of a step that overflowed: the prior's instead
    residual = jnp.where(finite, info.residual, prior.info.residual)
    info = info._replace(converged=info.converged & ok & finite, residual=residual, dropped=dropped,
                         em_loops=loops)
    return out._replace(step=prior.step + 1, info=info)


#: Inputs of at least this many elements are cleaned by a conditional instead of a ``where``
#: (:func:`_clean_data`).
CLEAN_BY_COND_MIN_ELEMENTS = 1 << 16


def _clean_data(x, y):
    """The guard's double ``where`` on the data: ``(x, y, finite)``, ``x`` and ``y`` replaced by zeros
    (a step that changes nothing) where any entry is NaN or inf. The step is then skipped by
    :func:`_guarded` as before, and its discarded branch, computed from finite data, has finite
    derivatives: ``jax.grad`` through a run with such a step is the derivative of keeping the
    belief (a NaN in a discarded branch would otherwise reach the gradient as ``0 * inf``).

    A large ``x`` (:data:`CLEAN_BY_COND_MIN_ELEMENTS`) is chosen by a conditional (:func:`_zero_unless`)."""
    finite = all_finite(*jax.tree_util.tree_leaves((x, y)))

    def zero(a):
        return jnp.where(finite, a, jnp.zeros_like(a))

    large = sum(jnp.size(a) for a in jax.tree_util.tree_leaves(x)) >= CLEAN_BY_COND_MIN_ELEMENTS
    return (_zero_unless(finite, x) if large else jax.tree_util.tree_map(zero, x)), zero(y), finite


def _zero_unless(finite, x):
    """``x`` where ``finite``, else zeros of its shapes, by ``lax.cond`` (the same values and
    derivatives as the ``where`` of :func:`_clean_data`; under ``vmap`` it is that ``where``).

    XLA fuses a ``where`` into each of its consumers, and a low-rank step reads ``x`` in two shapes
    (a ``(d, 1)`` column and a ``(1, d)`` row): two materialised d-vectors besides ``x``, held through
    the projection (BENCHMARKS.md, "Memory of the guarded step back to its floor"). The conditional's
    result is one buffer that both read. Small inputs keep the ``where``: the conditional costs about
    50 ns a step (2.5 % of a d = 10 step)."""
    return jax.lax.cond(finite, lambda x: x, lambda x: jax.tree_util.tree_map(jnp.zeros_like, x), x)


def _predict(spec, state):
    """The prediction step (:mod:`jaxrvga.dynamics`) under the guard: ``(prior, ok)``.

    ``ok`` is False where the dynamics are invalid (not finite, ``q < 0`` or ``eta < 0``, an
    inflation ``gamma^2 (1 + eta)`` that overflows; they may be traced, e.g. vmapped) or the
    predicted belief is not finite or not positive (a dense covariance ``0`` from ``decay = 0``
    without noise); the prior is
    then the state itself (the invalid values never reach the arithmetic: a double ``where``), and
    :func:`_guarded` skips and flags the step.
    """
    kept = spec.belief.predict(state, Dynamics())  # the state with its caches (a low-rank Gram)
    dyn = spec.dynamics
    if dyn.is_identity:
        return kept, jnp.asarray(True)
    dyn.check_dimension(state.mean.shape[0])
    dtype = state.mean.dtype
    valid = dyn.valid(dtype)
    dyn = dyn.where_valid(valid, dtype)
    prior = spec.belief.predict(kept, dyn)
    if dyn.noise_discount is not None and prior.noise is not None:
        prior = prior._replace(noise=noise_belief.discount(prior.noise, dyn.noise_discount))
    ok = valid & all_finite(*_changed(_belief_fields(prior), _belief_fields(kept))) & spec.belief.positive(prior)
    if prior.noise is not None:  # discounted statistics that underflow (a tiny delta) keep the state's
        ok = ok & noise_belief.valid(prior.noise)
    pick = lambda a, b: a if a is b else jnp.where(ok, a, b)  # noqa: E731
    return jax.tree_util.tree_map(pick, prior, kept), ok


def _check_state(spec, state):
    want = spec.belief.state_type
    if not isinstance(state, want):
        raise ValueError(f"state must be a {want.__name__} (from this filter's init), got {type(state).__name__}")
    noise_belief.stats_of(state, spec.model.family.learned_noise)


def _without_new_cache(out, state):
    """``out`` with the structure of ``state`` (a scan carry): a state without a Gram gets none back."""
    if getattr(state, "gram", 0) is None and getattr(out, "gram", None) is not None:
        return out._replace(gram=None)
    return out


def _predict_alone(spec: Spec, state):
    """The public prediction step: the prior of the next update (:func:`_predict`); a prediction that
    could not be applied keeps the state and sets ``info.converged`` to False."""
    _check_state(spec, state)
    prior, ok = _predict(spec, state)
    info = prior.info._replace(converged=prior.info.converged & ok)
    return _without_new_cache(prior._replace(info=info), state)


class _OfSpec(Bound):
    """A function of a filter's :class:`Spec` (its first argument), equal for equal specs: identical
    filters built twice share their compiled programs."""

    __slots__ = ()


def _update(spec: Spec, state, x, y):
    """One R-VGA step of ``spec`` (module docstring): the prediction, then the observation."""
    _check_state(spec, state)
    x, y = check_observation(state, x, y, spec.model)
    scheme = spec.scheme
    if scheme.needs_key and state.key is None:
        raise ValueError(f"key: the {scheme.name} scheme needs a PRNG key; call init(..., key=...)")
    x, y, finite = _clean_data(x, y)
    prior, predicted = _predict(spec, state)
    new, ok, info = scheme.step(scheme.cfg, spec.model, spec.belief, prior, x, y)
    info = _conform_info(scheme, info, prior.info)
    noise = None
    if prior.noise is not None:  # the conjugate step of a learned noise variance, on the predicted belief
        power = spec.model.power
        noise = noise_belief.absorb(prior.noise, *noise_belief.residual(spec.model, spec.belief, prior, x, y, power),
                                    power)
    out = _guarded(spec.belief, prior, new, ok & finite & predicted, info, scheme.certified, noise)
    return _without_new_cache(out, state)


def _conform_info(scheme, info, like):
    """A step's ``info`` in the state's dtypes (a user step may report float32 in a float64 run; a
    field it leaves ``None`` is the state's); ``ValueError`` where it is not a
    :class:`~jaxrvga.core.SolverInfo` of scalars."""
    if not isinstance(info, type(like)) or any(a is not None and jnp.shape(a) != () for a in info):
        raise ValueError(f"scheme {scheme.name!r}: its step must return info as a jaxrvga.core.SolverInfo of "
                         f"scalars (jaxrvga.core.solver_info(dtype)), got {info!r}")
    return type(like)(*(b if a is None else jnp.asarray(a, b.dtype) for a, b in zip(info, like)))


# --------------------------------------------------------------------------- building a filter

def build(belief: Belief, scheme: schemes.Scheme, model: Model, dynamics: Dynamics = Dynamics()) -> Filter:
    """The filter of ``belief`` (:mod:`jaxrvga.beliefs`) times ``scheme`` (a value of
    :mod:`jaxrvga.schemes`) for ``model``, with the prediction step of ``dynamics``
    (:func:`jaxrvga.dynamics.dynamics`) before each observation.

    ``init`` is the belief's (``init(mean, cov)``, ``init(mean, W, psi)`` or ``init(mean, var)``)
    with ``key=`` for a scheme that samples. Filters built from equal values are equal and share
    their compiled programs. :func:`jaxrvga.rvga`, :func:`jaxrvga.lrvga` and :func:`jaxrvga.diag_rvga` are
    this with a scheme named by a string.

    Args:
      belief: a belief value (:class:`~jaxrvga.beliefs.Dense`, ...; a class of one's own satisfying
        :class:`~jaxrvga.beliefs.Belief`); its ``check_options()``, where it has one, is called.
      scheme: a :class:`~jaxrvga.schemes.Scheme`.
      model: a :class:`~jaxrvga.models.Model`.
      dynamics: the prediction step before each observation.

    Returns:
      A :class:`~jaxrvga.Filter`.

    Example:
      >>> scheme = jr.schemes.ekf(curvature="empirical")
      >>> flt = jr.build(jr.beliefs.Diagonal(), scheme, jr.models.logistic())
      >>> state = flt.init(jnp.zeros(3), 1.0)
      >>> state = flt.update(state, jnp.array([1.0, 0.0, -1.0]), 1.0)
      >>> int(state.step)
      1
    """
    if not isinstance(model, Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    if not isinstance(scheme, schemes.Scheme):
        raise ValueError(f"scheme must be a jaxrvga.schemes.Scheme (e.g. jaxrvga.schemes.ekf()), got {scheme!r}")
    if isinstance(belief, type):
        raise ValueError(f"belief must be a belief value such as {belief.__name__}(...), got the class itself")
    if not isinstance(belief, Belief):
        raise ValueError(f"belief must satisfy jaxrvga.beliefs.Belief, got {type(belief).__name__}")
    if hasattr(belief, "check_options"):  # a belief with options checks them itself
        belief.check_options()
    if not callable(scheme.step) or not isinstance(scheme.cfg, tuple):
        raise ValueError(f"scheme {scheme.name!r}: step must be callable and cfg a NamedTuple of its options, "
                         f"got {scheme.step!r} and {scheme.cfg!r}")
    if not isinstance(dynamics, Dynamics):
        raise ValueError(f"dynamics must be a jaxrvga.dynamics.Dynamics (from jaxrvga.dynamics.dynamics), "
                         f"got {type(dynamics).__name__}")
    scheme.check(model, belief)
    if dynamics.noise_discount is not None and not model.family.learned_noise:
        raise ValueError("noise_discount discounts the statistics of a learned noise variance; this model's "
                         "variance is known (build it with noise_var=None, e.g. jr.kalman(None), or drop "
                         "noise_discount)")
    spec = Spec(model, belief, scheme, dynamics)
    return Filter(_OfSpec(_init, spec), _OfSpec(_update, spec), Bound(check_data, model), _OfSpec(_predict_alone, spec),
                  model, spec)


def _init(spec: Spec, *args, noise=None, **keywords):
    """The belief's initial state (its ``init``'s arguments), with the PRNG key ``key`` where the
    scheme samples (checked; dropped where it does not) and, for a model that learns its noise
    variance, ``noise=(shape, rate)`` of its inverse-gamma prior (default
    :data:`~jaxrvga.noise.DEFAULT_NOISE`; refused for a model of known variance)."""
    given = inspect.signature(spec.belief.init).bind(*args, **keywords).arguments
    needs = spec.scheme.needs_key
    key = check_key(given.get("key"), needs, f"scheme={spec.scheme.name!r}")
    given["key"] = key if needs else None
    state = spec.belief.init(**given)
    if not spec.model.family.learned_noise:
        if noise is not None:
            raise ValueError("noise: the model's noise variance is known; noise=(shape, rate) is the prior of a "
                             "learned one (build the model with noise_var=None)")
        return state
    noise = noise_belief.DEFAULT_NOISE if noise is None else noise
    return state._replace(noise=noise_belief.check_noise(noise, state.mean.dtype))


__all__ = ["build", "Spec", "CLEAN_BY_COND_MIN_ELEMENTS"]
