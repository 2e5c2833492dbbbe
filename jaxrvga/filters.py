"""The R-VGA filters: a belief (dense, low-rank or diagonal) times an update scheme.

A filter is :func:`build` ``(belief, scheme, model, dynamics)`` of four values: a belief of
:mod:`jaxrvga.beliefs`, a scheme made by a factory of :mod:`jaxrvga.schemes` (``schemes.ekf()``,
``schemes.sampled(num_samples=20)``, or one of your own), an observation model and the dynamics.
``rvga(model, scheme=...)`` is the dense belief ([RVGA] Alg. 1), ``lrvga(model, rank=p, ...)``
the low-rank one ([LRVGA]) and ``diag_rvga(model, ...)`` the diagonal (mean-field) one, with the
scheme named by a string (:func:`scheme_named`); all take the same schemes, options, defaults and
checks:

==============  =======================================  ==========================================
scheme          models                                   options
==============  =======================================  ==========================================
``exact``       linear-Gaussian (the default there)      none
``implicit``    GLMs (the default); nonlinear: Monte     ``max_iter`` (root solver); nonlinear:
                Carlo implicit iteration                 as ``sampled`` with ``num_iters=3``
``explicit``    GLMs; nonlinear: one Monte-Carlo pass    none
``extragrad``   GLMs                                     ``correction``, ``update_cov_twice``
``ekf``         any (the textbook EKF)                   ``curvature`` (``"empirical"``)
``moment_ekf``  any (the nonlinear default): the EKF of  ``jitter``, ``curvature``
                a Gaussian likelihood with the output's  (``"empirical"``)
                mean and variance + ``jitter`` (the EKF
                on a Gaussian of known variance)
``qkf``         logistic                                 none
``sampled``     any                                      ``num_samples``, ``num_iters``, ``tol``,
                                                         ``curvature`` (dense only: ``"hessian"``)
==============  =======================================  ==========================================

Every scheme but the published L-RVGA's takes ``max_move``: a step whose mean moves by more than
that Mahalanobis length under the previous belief is shortened to it and flagged
(:func:`~jaxrvga.schemes.limit_move`). The default is :data:`~jaxrvga.schemes.MAX_MOVE` for the schemes that
linearise or sample, none for ``exact`` and ``implicit``, whose steps are the exact and the proximal
ones (a long step of theirs is what the model says).

Every update of every belief and scheme passes the same guard: a step whose result is not finite or not
positive definite is **skipped and flagged** (the predicted belief is kept, the step counter
advances, ``info.converged`` is False). ``info.dropped`` reports, for low-rank beliefs, the
fraction of the step's whitened curvature that rank p could not keep.

``x`` is (d,) with a scalar ``y``, or a minibatch (m, d) with ``y`` (m,) (GLMs; the implicit
scheme takes one observation), either of them sparse (:class:`~jaxrvga.models.SparseRow`: its
nnz non-zeros, scattered into the dense row inside the step); nonlinear models take any ``x``
pytree their ``h`` accepts, and a minibatch through :func:`jaxrvga.models.minibatch`.
"""
from __future__ import annotations

import inspect
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import noise as noise_belief
from . import schemes
from ._values import Bound
from .beliefs import Belief, Dense, Diagonal, LowRank
from .beliefs.lowrank import low_rank_belief
from .core import Filter
from .dynamics import Dynamics, dynamics
from .kernels.factor_analysis import PSI_FLOOR
from .models import Model, check_data, check_observation
from .schemes import MAX_MOVE, MOMENT_JITTER  # noqa: F401  (their former home: jaxrvga.filters.MAX_MOVE)
from .validation import all_finite, check_choice, check_key, positive_int

#: The factory of each scheme name of :func:`rvga`, :func:`lrvga` and :func:`diag_rvga` (module table).
_FACTORIES = {"exact": schemes.exact, "implicit": schemes.implicit, "explicit": schemes.explicit,
              "extragrad": schemes.extragrad, "ekf": schemes.ekf, "moment_ekf": schemes.moment_ekf,
              "qkf": schemes.qkf, "sampled": schemes.sampled}
#: The scheme names of :func:`rvga`, :func:`lrvga` and :func:`diag_rvga` (module table).
SCHEMES = tuple(_FACTORIES)
#: The options of the schemes that the factories take by name (:func:`scheme_named`).
SCHEME_OPTIONS = ("num_iters", "num_samples", "curvature", "max_iter", "correction", "update_cov_twice", "tol",
                  "jitter", "max_move", "frozen_noise", "fisher_rank")
#: The options of the prediction step (:func:`jaxrvga.dynamics.dynamics`).
DYNAMICS_OPTIONS = tuple(inspect.signature(dynamics).parameters)


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
        noise = noise_belief.absorb(prior.noise, *noise_belief.residual(spec.model, spec.belief, prior, x, y))
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
    their compiled programs. :func:`rvga`, :func:`lrvga` and :func:`diag_rvga` are this with a
    scheme named by a string.
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


def _default_scheme(model: Model) -> str:
    if model.has_exact_update:
        return "exact"
    return "implicit" if model.is_glm else "moment_ekf"


def scheme_named(model: Model, name: Optional[str] = None, *, published: bool = False, num_samples_default=None,
                 **options) -> schemes.Scheme:
    """The scheme value that the string ``name`` of :func:`rvga` means for ``model`` (module table),
    with ``options`` (None: the factory's default; an option the scheme does not take is refused).

    The default name is ``"exact"`` (linear-Gaussian), ``"implicit"`` (other GLMs) or
    ``"moment_ekf"`` (nonlinear). For a nonlinear model ``"implicit"`` and ``"explicit"`` are the
    Monte-Carlo implicit iteration (``sampled`` with 3 passes, or 1). ``published``: the published
    L-RVGA's forms (no ``max_move``; ``extragrad`` without correction, on the first pass's curvature;
    :func:`~jaxrvga.schemes.published_sampled`). ``num_samples_default``: ``sampled``'s default draws.
    """
    if not isinstance(model, Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    name = _default_scheme(model) if name is None else name
    check_choice("scheme", name, SCHEMES)
    given = {k: v for k, v in options.items() if v is not None and not (k == "frozen_noise" and v is False)}
    curvature = given.pop("curvature", "ggn")
    if not model.is_glm and name in ("implicit", "explicit"):  # the Monte-Carlo implicit iteration
        if name == "explicit":
            if given.get("num_iters", 1) != 1:
                raise ValueError("num_iters: the explicit scheme is one pass; use scheme='sampled'")
            given["num_iters"] = 1
        name = "sampled"
    if "frozen_noise" in given and not (published and name == "sampled"):
        raise ValueError("frozen_noise is only used by scheme='sampled' with published=True")
    factory = _FACTORIES[name]
    if published:
        factory, given = _published_form(name, factory, given)
    if factory is schemes.sampled and num_samples_default is not None:
        given.setdefault("num_samples", num_samples_default)
    takes = inspect.signature(factory).parameters
    if "curvature" in takes:
        given["curvature"] = curvature
    elif curvature != "ggn":
        check_choice("curvature", curvature, schemes.CURVATURES)
        form = "the published sampled scheme" if factory is schemes.published_sampled else f"scheme {name!r}"
        raise ValueError(f"curvature={curvature!r} is not used by {form} (only by 'ekf', 'moment_ekf' and "
                         f"'sampled')")
    for option in given:
        if option not in takes:
            raise ValueError(f"{option} is not used by scheme {name!r}")
    return factory(**given)


def _published_form(name, factory, given):
    """The published L-RVGA's form of scheme ``name``: ``(factory, options)``."""
    if "max_move" in given:
        raise ValueError("max_move: the published L-RVGA takes every step as published")
    if name == "sampled":
        if "num_iters" in given:
            raise ValueError("num_iters: the published sampled scheme makes two passes")
        return schemes.published_sampled, given
    if name == "extragrad":
        given = {"correction": False, "update_cov_twice": False, **given}
    return factory, {**given, "max_move": np.inf}


# --------------------------------------------------------------------------- public factories

def rvga(model: Model, scheme=None, **options) -> Filter:
    """R-VGA with a full covariance ([RVGA] Alg. 1): the dense belief times ``scheme`` (module docstring).

    Args:
      model: an observation model of :mod:`jaxrvga.models`.
      scheme: a name of the module table (default ``"exact"`` for linear-Gaussian, ``"implicit"``
        for other GLMs, ``"moment_ekf"`` for nonlinear models; :func:`scheme_named`), or a scheme
        value made by its factory, ``jr.schemes.ekf(curvature="empirical")``.
      options: with a name, the scheme's options, as its factory in :mod:`jaxrvga.schemes` takes
        them (``num_iters``, ``num_samples``, ``curvature``, ``max_iter``, ``correction``,
        ``update_cov_twice``, ``tol``, ``jitter``, ``max_move``); an option the scheme does not
        use is refused. With any scheme, the prediction step before each observation:
        ``decay``, ``additive_noise``, ``process_noise``, ``decay_to``, ``noise_discount``
        (:func:`jaxrvga.dynamics.dynamics`; ``flt.predict(state)`` is that step alone).

    ``init(mean, cov, key=None)``; ``key`` is required by ``sampled``.
    """
    value, dyn = _scheme_and_dynamics(model, scheme, options)
    return build(Dense(), value, model, dyn)


def _scheme_and_dynamics(model: Model, scheme, options: dict, **named):
    """``(scheme value, dynamics)`` from a factory's ``scheme`` (a name or a value) and its keyword
    ``options`` (``named``: the factory's own arguments of :func:`scheme_named`)."""
    unknown = sorted(set(options) - set(SCHEME_OPTIONS) - set(DYNAMICS_OPTIONS))
    if unknown:
        raise TypeError(f"unexpected option {unknown[0]!r}: a filter takes the scheme options {SCHEME_OPTIONS} "
                        f"and the dynamics {DYNAMICS_OPTIONS}")
    dyn = dynamics(**{k: options.pop(k) for k in DYNAMICS_OPTIONS if k in options})
    if not isinstance(scheme, schemes.Scheme):
        return scheme_named(model, scheme, **named, **options), dyn
    given = [k for k, v in options.items() if v is not None]  # False too: an option beside a value is given twice
    if given:
        raise ValueError(f"{given[0]}: a scheme value carries its own options; give them to its factory "
                         f"(jr.schemes.{scheme.name}(...))")
    return scheme, dyn


def lrvga(model: Model, rank: int, inner_loops: Optional[int] = None, scheme=None, *,
          published: bool = False, psi_floor: float = PSI_FLOOR, block_rows: Optional[int] = None,
          buffer: int = 0, em_tol: Optional[float] = None, **options) -> Filter:
    """L-RVGA ([LRVGA]): the low-rank belief ``(W W^T + diag(psi))^{-1}`` times ``scheme``.

    Same schemes and options as :func:`rvga`, the dynamics included (``max_move`` is refused with
    ``published``, which takes every step as published; ``curvature="hessian"`` is refused: the
    low-rank precision needs a PSD curvature factor; ``num_samples`` defaults to 10, since every
    draw adds a column to the step's factor; ``frozen_noise`` below), plus:

    Args:
      rank: ``p``, the columns of ``W`` (1 <= p <= d).
      inner_loops: EM iterations of each factor-analysis projection after the spectral warm
        start (default 0: the start itself, measured as close to the posterior as 1-3 loops,
        experiments/REPORT.md), or Algorithm 1's ``n_in`` with ``published`` (default 1). The
        number run is ``info.em_loops``.
      em_tol: ``inner_loops`` becomes a maximum: a projection's EM stops after the first loop that
        moves ``W`` by at most ``em_tol`` relative to it (Frobenius norms). The iterate is then
        stored between loops (one more d x p array during the projection). Not with ``published``.
        The loops are a ``lax.scan`` of ``inner_loops`` masked passes (a pass after the stop is a
        ``cond`` that does nothing), so a run with ``em_tol`` is differentiable in forward and
        reverse mode.
      published: the published L-RVGA (:class:`~jaxrvga.beliefs.PublishedLowRank`: EM from
        ``W_{t-1}``, mean step with the projected precision; the schemes in their published forms,
        :func:`scheme_named`): reproduces the paper and the authors' code. The default projects the exact precision step from a spectral warm
        start and takes the mean step before projecting, which is exact at full rank
        (experiments/REPORT.md).
      frozen_noise: ``sampled`` with ``published``: ``True`` reuses the state's key at every
        step (the authors' code); a pair ``(z, e)`` (K, d), (K, p) gives the base noise itself.
      psi_floor: relative floor of ``psi`` (:mod:`jaxrvga.kernels.factor_analysis`).
      block_rows: row blocks of the projection (:func:`jaxrvga.kernels.row_blocks.num_blocks`; 0: one block).
      buffer: hold up to this many curvature columns unprojected (default 0; it counts columns: a
        step brings one per output of each observation, K for a K-class output, times the draws of
        ``sampled``, and a buffer smaller than one step's columns is refused): the new columns of
        a step go into a buffer of ``buffer`` extra columns of ``W`` (the belief stays exact) and
        the buffer is projected with the step that would overflow it, so a projection happens once
        per ``buffer + 1`` observations of one column (GLMs, scalar-output networks with
        ``scheme="ekf"``). The mean steps stay exact (Woodbury at rank ``p + buffer + m``). Fewer,
        larger projections: faster per observation for neural networks (BENCHMARKS.md, "Neural
        network online"). ``state.W`` has ``rank + buffer`` columns. Not with ``published``.

    ``init(mean, W, psi, key=None)``; ``key`` is required by ``sampled`` (unless the noise is given).
    """
    belief = low_rank_belief(rank, inner_loops, published=published, psi_floor=psi_floor, block_rows=block_rows,
                             buffer=buffer, em_tol=em_tol)
    value, dyn = _scheme_and_dynamics(model, scheme, options, published=published, num_samples_default=10)
    return build(belief, value, model, dyn)


def diag_rvga(model: Model, scheme=None, **options) -> Filter:
    """Mean-field R-VGA: the diagonal belief ``N(mean, diag(psi)^{-1})`` times ``scheme``, O(d) per column.

    Same schemes, options and defaults as :func:`rvga` (module table), the dynamics included;
    each step keeps the diagonal of the new precision (:class:`~jaxrvga.beliefs.Diagonal`), so a
    network of millions of weights costs a few passes over them per output. ``num_samples``
    defaults to 10 and ``curvature="hessian"`` is refused (it would form the d x d Hessian).

    ``init(mean, var, key=None)``: ``var`` the (d,) prior variances (a scalar broadcasts); ``key``
    is required by ``sampled``.
    """
    value, dyn = _scheme_and_dynamics(model, scheme, options, num_samples_default=10)
    return build(Diagonal(), value, model, dyn)


def with_block_rows(flt: Filter, block_rows: Optional[int]) -> Filter:
    """The L-RVGA filter ``flt`` (from :func:`lrvga`) with its projection's row blocks set explicitly.

    ``block_rows=0`` traces one block (what :mod:`jaxrvga.sharding` needs: row blocks of an axis
    sharded across devices would gather rows between them). Raises ``ValueError`` for other filters.
    """
    spec = flt.spec
    if spec is None or not isinstance(spec.belief, LowRank):
        raise ValueError("flt must be a filter of a low-rank belief (jaxrvga.lrvga)")
    if block_rows is not None and block_rows != 0:
        block_rows = positive_int("block_rows", block_rows)
    return build(spec.belief._replace(block_rows=block_rows), spec.scheme, spec.model, spec.dynamics)


def kalman(noise_var=1.0, process_noise=None, **dynamics_options) -> Filter:
    """The Kalman filter: ``rvga(linear_gaussian(noise_var))`` ([RVGA] Thm 2), for a static parameter
    or, with ``decay`` and ``additive_noise``, the transition ``F = decay I``, ``Q = additive_noise``
    (``dynamics_options``: :func:`jaxrvga.dynamics.dynamics`). ``noise_var=None``: unknown and learned, the exact
    normal-inverse-gamma filter (:mod:`jaxrvga.noise`; ``init(mean, cov, noise=(shape, rate))``).

    ``x`` is a row (d,) with scalar ``y`` or a matrix ``H`` (m, d) with ``y`` (m,).
    """
    from .models import linear_gaussian
    return rvga(linear_gaussian(noise_var), "exact", process_noise=process_noise,
                **_only_dynamics(dynamics_options))


def ekf(model: Model, process_noise=None, **dynamics_options) -> Filter:
    """Extended Kalman filter = online natural gradient: ``rvga(model, "ekf")`` ([RVGA] Thm 3, eqs. 54-55, 81);
    ``dynamics_options``: :func:`jaxrvga.dynamics.dynamics`."""
    return rvga(model, "ekf", process_noise=process_noise, **_only_dynamics(dynamics_options))


def qkf(process_noise=None, **dynamics_options) -> Filter:
    """Quadratic (Jaakkola-Jordan) Kalman filter: ``rvga(logistic(), "qkf")`` ([RVGA] eqs. 82-90);
    ``dynamics_options``: :func:`jaxrvga.dynamics.dynamics`."""
    from .models import logistic
    return rvga(logistic(), "qkf", process_noise=process_noise, **_only_dynamics(dynamics_options))


def mirror_prox(model: Model, *, correction: bool = False, update_cov_twice: bool = True,
                **dynamics_options) -> Filter:
    """Mirror prox with a full covariance: ``rvga(model, "extragrad")`` with the paper's defaults.

    ``correction=False, update_cov_twice=True`` is [LRVGA] eqs. (139)-(142) and the authors' code;
    ``rvga(model, "extragrad")`` defaults to the corrected form, exact on linear-Gaussian models.
    ``dynamics_options``: :func:`jaxrvga.dynamics.dynamics`.
    """
    if not isinstance(model, Model) or not model.is_glm:
        raise ValueError("model must be a GLM from jaxrvga.models (linear_gaussian, logistic, poisson, glm)")
    return rvga(model, "extragrad", correction=correction, update_cov_twice=update_cov_twice,
                **_only_dynamics(dynamics_options))


def _only_dynamics(options: dict) -> dict:
    """``options``, refused unless each is one of the dynamics' (:data:`DYNAMICS_OPTIONS`)."""
    unknown = sorted(set(options) - set(DYNAMICS_OPTIONS))
    if unknown:
        raise TypeError(f"unexpected option {unknown[0]!r}: this filter takes only the dynamics {DYNAMICS_OPTIONS}")
    return options


__all__ = ["build", "scheme_named", "low_rank_belief", "rvga", "lrvga", "diag_rvga", "kalman", "ekf", "qkf",
           "mirror_prox", "with_block_rows", "SCHEMES", "SCHEME_OPTIONS", "DYNAMICS_OPTIONS", "Spec"]
