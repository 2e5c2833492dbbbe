"""The R-VGA filters: a belief (dense, low-rank or diagonal) times an update scheme.

``rvga(model, scheme=...)`` is the dense belief ([RVGA] Alg. 1), ``lrvga(model, rank=p, ...)``
the low-rank one ([LRVGA]) and ``diag_rvga(model, ...)`` the diagonal (mean-field) one; all take
the same schemes, options, defaults and checks:

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
                mean and variance + ``jitter``
``qkf``         logistic                                 none
``sampled``     any                                      ``num_samples``, ``num_iters``, ``tol``,
                                                         ``curvature`` (dense only: ``"hessian"``)
==============  =======================================  ==========================================

Every scheme but the published L-RVGA's takes ``max_move``: a step whose mean moves by more than
that Mahalanobis length under the previous belief is shortened to it and flagged
(:func:`~jaxrvga.schemes.limit_move`). The default is :data:`MAX_MOVE` for the schemes that
linearise or sample, none for ``exact`` and ``implicit``, whose steps are the exact and the proximal
ones (a long step of theirs is what the model says).

Every update is guarded in one place (:func:`_guarded`): a step whose result is not finite or not
positive definite is **skipped and flagged** (the predicted belief is kept, the step counter
advances, ``info.converged`` is False). ``info.dropped`` reports, for low-rank beliefs, the
fraction of the step's whitened curvature that rank p could not keep.

``x`` is (d,) with a scalar ``y``, or a minibatch (m, d) with ``y`` (m,) (GLMs; the implicit
scheme takes one observation); nonlinear models take any ``x`` pytree their ``h`` accepts, and a
minibatch through :func:`jaxrvga.models.minibatch`.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import schemes
from ._values import Bound
from .beliefs import Dense, Diagonal, LowRank
from .core import Filter, solver_info
from .dynamics import Dynamics, dynamics
from .factor_analysis import PSI_FLOOR
from .models import Model
from .schemes import Config
from .validation import all_finite, check_choice, check_key, is_concrete, positive_int

SCHEMES = ("exact", "implicit", "explicit", "extragrad", "ekf", "moment_ekf", "qkf", "sampled")
CURVATURES = ("ggn", "hessian", "empirical")
#: Default ``jitter`` of ``moment_ekf`` and default ``max_move`` (experiments/REPORT.md, "Networks from any prior").
MOMENT_JITTER = 0.1
MAX_MOVE = 10.0
#: Schemes whose step is the exact (Kalman) or proximal (implicit) one: no default ``max_move``.
EXACT_STEPS = ("exact", "implicit")


class Spec(NamedTuple):
    """What an update needs: the model, the belief, the scheme's name and options, the dynamics."""

    model: Model
    belief: object
    scheme: str
    cfg: Config
    dynamics: Dynamics = Dynamics()


# --------------------------------------------------------------------------- steps

def _absorb(spec, prior, inc, info):
    """The step of ``inc`` (:func:`~jaxrvga.schemes.absorb`), its mean step limited to ``max_move``
    (:func:`~jaxrvga.schemes.limit_move`, flagged in ``info`` where shortened): ``(state, ok, info)``."""
    new, ok = schemes.absorb(spec.belief, prior, inc)
    new, calm = schemes.limit_move(prior, new, inc, spec.cfg.max_move)
    return new, ok, info._replace(converged=info.converged & calm)


def _step_exact(spec, prior, X, y):
    return _absorb(spec, prior, schemes.exact_site(spec.model, prior, X, y), solver_info(prior.mean.dtype))


def _step_implicit(spec, prior, X, y):
    if X.shape[0] != 1:
        raise ValueError(f"x: the implicit scheme takes one observation per update (x of shape (d,)), "
                         f"got a minibatch of {X.shape[0]}; use scheme='explicit', 'extragrad' or 'ekf'")
    inc, info = schemes.implicit_site(spec.model, spec.belief, prior, X, y, spec.cfg.max_iter)
    return _absorb(spec, prior, inc, _full_info(info))


def _full_info(info):
    """A full :class:`~jaxrvga.core.SolverInfo` from a solver's ``(converged, residual, iterations)``."""
    return solver_info(info.residual.dtype, info.converged, info.residual, info.iterations)


def _step_moments(spec, prior, X, y):
    def evaluate(q, i):
        return schemes.moment_site(spec.model, spec.belief, q, X, y)

    new, ok, _, calm = schemes.iterate(spec.belief, prior, evaluate, spec.cfg)
    return new, ok, solver_info(prior.mean.dtype, converged=calm, iterations=spec.cfg.num_iters)


def _step_qkf(spec, prior, X, y):
    return _absorb(spec, prior, schemes.qkf_site(spec.belief, prior, X, y), solver_info(prior.mean.dtype))


def _step_ekf(spec, prior, x, y):
    """``ekf`` (``jitter = 0``) and ``moment_ekf``: linearised at the mean."""
    site = schemes.ekf_glm_site if spec.model.is_glm else schemes.ekf_site
    inc = site(spec.model, prior, x, y, spec.cfg.jitter, spec.cfg.curvature == "empirical")
    return _absorb(spec, prior, inc, solver_info(prior.mean.dtype))


def _step_sampled(spec, prior, x, y):
    cfg, belief = spec.cfg, spec.belief
    if getattr(belief, "published", False):
        return _step_sampled_published(spec, prior, x, y)
    key, sub = jax.random.split(prior.key)
    noise = belief.noise(sub, cfg.num_samples, prior.mean.shape[0], prior.mean.dtype)  # once: common to the passes

    def evaluate(q, i):
        return schemes.sampled_site(spec.model, belief.draw(q, noise), x, y, cfg.curvature)

    new, ok, change, calm = schemes.iterate(belief, prior, evaluate, cfg)
    info = schemes.info_from(change, cfg, cfg.num_iters)
    return new._replace(key=key), ok, info._replace(converged=info.converged & calm)


def _step_sampled_published(spec, prior, x, y):
    """[LRVGA] eqs. 41-47 and 143-145 as published: samples of the projected ``q_hat``, no correction."""
    cfg = spec.cfg
    if cfg.frozen_noise is False:
        key, *keys = jax.random.split(prior.key, 3)
    else:
        key, keys = prior.key, (prior.key, prior.key)

    def evaluate(q, i):
        thetas = schemes.published_draws(prior, keys, i, cfg, q)
        return schemes.sampled_site(spec.model, thetas, x, y, "ggn")

    new, ok, _, _ = schemes.iterate(spec.belief, prior, evaluate, cfg)  # published: no max_move
    return new._replace(key=key), ok, solver_info(prior.mean.dtype)


_STEPS = {"exact": _step_exact, "implicit": _step_implicit, "explicit": _step_moments,
          "extragrad": _step_moments, "ekf": _step_ekf, "moment_ekf": _step_ekf, "qkf": _step_qkf,
          "sampled": _step_sampled}


# --------------------------------------------------------------------------- the update

def _belief_fields(state):
    """Every floating array of a state but its diagnostics: what the prediction step may change."""
    return tuple(getattr(state, f) for f in ("mean", "cov", "psi", "W", "gram")
                 if getattr(state, f, None) is not None and not isinstance(getattr(state, f), tuple))


def _changed(fields, kept):
    """The arrays of ``fields`` that are not arrays of ``kept`` (those a step passed on are the prior's)."""
    return tuple(a for a in fields if not any(a is b for b in kept))


def _guarded(belief, prior, new, ok, info):
    """Skip and flag: ``new`` finished (projected) only if it is finite and valid, else ``prior`` kept
    (:meth:`~jaxrvga.beliefs.LowRank.settle`). A projection that still yields a non-finite result
    (it does not for finite input, up to overflow) is flagged; a projection leaves the mean as it is,
    so the mean is not checked again. The step counter advances either way.
    """
    ok = ok & all_finite(*_changed(belief.checked_fields(new), belief.checked_fields(prior)))
    out, (dropped, loops) = belief.settle(prior, new, ok)
    ok = ok & all_finite(*belief.checked_fields(out)[1:])
    info = info._replace(converged=info.converged & ok, dropped=dropped, em_loops=loops)
    return out._replace(step=prior.step + 1, info=info)


def _clean_data(x, y):
    """The guard's double ``where`` on the data: ``(x, y, finite)``, ``x`` and ``y`` replaced by zeros
    (a step that changes nothing) where any entry is NaN or inf. The step is then skipped by
    :func:`_guarded` as before, and its discarded branch, computed from finite data, has finite
    derivatives: ``jax.grad`` through a run with such a step is the derivative of keeping the
    belief (a NaN in a discarded branch would otherwise reach the gradient as ``0 * inf``)."""
    finite = all_finite(*jax.tree_util.tree_leaves((x, y)))

    def zero(a):
        return jnp.where(finite, a, jnp.zeros_like(a))

    return jax.tree_util.tree_map(zero, x), zero(y), finite


def _predict(spec, state):
    """The prediction step (:mod:`jaxrvga.dynamics`) under the guard: ``(prior, ok)``.

    ``ok`` is False where the dynamics are invalid (not finite, ``q < 0`` or ``eta < 0``; they may
    be traced, e.g. vmapped) or the predicted belief is not finite (``eta = 1e308``); the prior is
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
    prior = spec.belief.predict(kept, dyn.where_valid(valid, dtype))
    ok = valid & all_finite(*_changed(_belief_fields(prior), _belief_fields(kept)))
    pick = lambda a, b: a if a is b else jnp.where(ok, a, b)  # noqa: E731
    return jax.tree_util.tree_map(pick, prior, kept), ok


def _check_state(spec, state):
    want = spec.belief.state_type
    if not isinstance(state, want):
        raise ValueError(f"state must be a {want.__name__} (from this filter's init), got {type(state).__name__}")


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
    filters built twice share their compiled programs. ``spec`` holds the configuration."""

    __slots__ = ()

    @property
    def spec(self) -> Spec:
        return self.args[0]


def _update(spec: Spec, state, x, y):
    """One R-VGA step of ``spec`` (module docstring): the prediction, then the observation."""
    _check_state(spec, state)
    if spec.model.is_glm:
        x, y = _glm_inputs(state, x, y, spec.model)
    else:
        if jnp.iscomplexobj(jnp.asarray(y)):
            raise ValueError("y must be real")
        spec.model.family.check_y("y", y)
        _check_y_shape(spec.model, "y", y, jax.eval_shape(spec.model.predict, state.mean, x).shape)
        y = jnp.asarray(y, state.mean.dtype)
    if spec.scheme == "sampled" and state.key is None and spec.cfg.frozen_noise in (False, True):
        raise ValueError("key: the sampled scheme needs a PRNG key; call init(..., key=...)")
    x, y, finite = _clean_data(x, y)
    prior, predicted = _predict(spec, state)
    new, ok, info = _STEPS[spec.scheme](spec, prior, x, y)
    out = _guarded(spec.belief, prior, new, ok & finite & predicted, info)
    return _without_new_cache(out, state)


def _glm_inputs(state, x, y, model):
    """``x`` (d,) with scalar ``y``, or (m, d) with ``y`` (m,); returns ``(X (m, d), y (m,))`` in the state's dtype."""
    d = state.mean.shape[0]
    x = jnp.asarray(x)
    if jnp.iscomplexobj(x) or jnp.iscomplexobj(jnp.asarray(y)):
        raise ValueError("x and y must be real")
    if x.ndim not in (1, 2) or x.shape[-1] != d:
        raise ValueError(f"x must have shape ({d},) or (m, {d}) to match the state, got {x.shape}")
    want = () if x.ndim == 1 else x.shape[:1]
    if jnp.shape(y) != want:
        raise ValueError(f"y must have shape {want} to match x of shape {x.shape} for the {model.kind} "
                         f"model, got {jnp.shape(y)}")
    model.family.check_y("y", y)
    dtype = state.mean.dtype
    return jnp.atleast_2d(x.astype(dtype)), jnp.reshape(jnp.asarray(y, dtype), (-1,))


def _check_y_shape(model: Model, name: str, y, eta_shape, time_axis: bool = False):
    """``y`` of a nonlinear model has the shape of the predictor's output ``eta`` (one per output; a
    single output may be a scalar): no silent broadcasting. A categorical family takes labels
    (``eta``'s shape without its last axis, the K logits) or one-hot rows of ``eta``'s shape, each
    with exactly one 1 and zeros elsewhere (checked where concrete). ``time_axis``: ``y`` and
    ``eta_shape`` lead with the time axis T of a data set."""
    shape = tuple(jnp.shape(y))
    eta_shape = tuple(eta_shape)
    one = (shape[:1] if time_axis else ()) + (1,)
    if model.family.name == "categorical":
        if shape == eta_shape[:-1]:
            return
        if shape == eta_shape:
            a = np.asarray(y) if is_concrete(y) else None
            if a is not None and not (np.all((a == 0) | (a == 1)) and np.all(np.sum(a, axis=-1) == 1)):
                raise ValueError(f"{name}: one-hot rows of the categorical model must hold exactly one 1 "
                                 f"and zeros elsewhere")
            return
        raise ValueError(f"{name} must hold labels of shape {eta_shape[:-1]} or one-hot rows of shape "
                         f"{eta_shape} for the model's logits, got shape {shape}")
    if shape != eta_shape and not (eta_shape in (one, one[:-1]) and shape in (one, one[:-1])):
        raise ValueError(f"{name} must have the shape {eta_shape} of the model's output, got {shape}")


def _make_check(model: Model):
    """Data-set check run by :func:`jaxrvga.run` before it scans (never under jit)."""

    def check(state, xs, ys):
        if model.is_glm:
            d = state.mean.shape[0]
            shape = jnp.shape(xs)
            if len(shape) not in (2, 3) or shape[-1] != d:
                raise ValueError(f"xs must have shape (T, {d}) or (T, m, {d}) to match the state, got {shape}")
            if jnp.shape(ys) != shape[:-1]:
                raise ValueError(f"ys must have shape {shape[:-1]} to match xs, got {jnp.shape(ys)}")
        model.family.check_y("ys", ys)
        if not model.is_glm:
            x0 = jax.tree_util.tree_map(lambda a: a[0], xs)
            eta = jax.eval_shape(model.predict, state.mean, x0).shape
            _check_y_shape(model, "ys", ys, tuple(jnp.shape(ys)[:1]) + eta, time_axis=True)

    return check


# --------------------------------------------------------------------------- configuration

def _default_scheme(model: Model) -> str:
    if model.has_exact_update:
        return "exact"
    return "implicit" if model.is_glm else "moment_ekf"


def _check_model_scheme(model, scheme):
    if not isinstance(model, Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    check_choice("scheme", scheme, SCHEMES)
    needs = {"exact": model.has_exact_update, "extragrad": model.is_glm, "qkf": model.has_logistic_root}
    if not needs.get(scheme, True):
        raise ValueError(f"scheme {scheme!r} does not apply to the {model.kind} model")


def _unused(scheme, **given):
    """Raise for options given that ``scheme`` does not use."""
    for name, value in given.items():
        if value is not None:
            raise ValueError(f"{name} is not used by scheme {scheme!r}")


def _configure(model, scheme, dense, published, *, jitter=None, max_move=None, **options):
    """Validate the options once for both beliefs; returns ``(scheme, Config)`` with the scheme's
    ``jitter`` (``moment_ekf`` only) and the guard's ``max_move`` (none with ``published``)."""
    scheme, cfg = _configure_scheme(model, scheme, dense, published, **options)
    if scheme == "moment_ekf":
        jitter = MOMENT_JITTER if jitter is None else jitter
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 < jitter < np.inf:
            raise ValueError(f"jitter must be a number > 0, got {jitter!r}")
        cfg = cfg._replace(jitter=float(jitter))
    elif jitter is not None:
        raise ValueError(f"jitter is only used by scheme 'moment_ekf', not {scheme!r}")
    if published:
        if max_move is not None:
            raise ValueError("max_move: the published L-RVGA takes every step as published")
        return scheme, cfg
    if max_move is None and scheme in EXACT_STEPS:
        return scheme, cfg
    max_move = MAX_MOVE if max_move is None else max_move
    if isinstance(max_move, bool) or not isinstance(max_move, (int, float)) or not max_move > 0:
        raise ValueError(f"max_move must be a number > 0 (inf: no limit), got {max_move!r}")
    return scheme, cfg._replace(max_move=None if max_move == np.inf else float(max_move))


def _configure_scheme(model, scheme, dense, published, *, num_iters, num_samples, curvature, max_iter,
                      correction, update_cov_twice, tol, frozen_noise):
    """The scheme's name and :class:`~jaxrvga.schemes.Config` (all but ``jitter`` and ``max_move``)."""
    if not isinstance(model, Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    scheme = _default_scheme(model) if scheme is None else scheme
    _check_model_scheme(model, scheme)
    check_choice("curvature", curvature, CURVATURES)
    if not model.is_glm and scheme in ("implicit", "explicit"):  # the Monte-Carlo implicit iteration
        if scheme == "explicit" and num_iters not in (None, 1):
            raise ValueError("num_iters: the explicit scheme is one pass; use scheme='sampled'")
        num_iters, scheme = (1 if scheme == "explicit" else num_iters), "sampled"
    if scheme != "sampled":
        _unused(scheme, num_iters=num_iters, num_samples=num_samples, tol=tol)
    if curvature == "hessian" and scheme != "sampled":
        raise ValueError(f"curvature='hessian' is only used by scheme 'sampled', not {scheme!r}")
    if curvature == "empirical" and scheme not in ("ekf", "moment_ekf"):
        raise ValueError(f"curvature='empirical' is only used by schemes 'ekf' and 'moment_ekf', not {scheme!r}")
    if scheme != "implicit":
        _unused(scheme, max_iter=max_iter)
    if scheme not in ("extragrad", "sampled") or (scheme == "sampled" and not published):
        _unused(scheme, correction=correction, update_cov_twice=update_cov_twice)
    if frozen_noise is not False and not (scheme == "sampled" and published):
        raise ValueError("frozen_noise is only used by scheme='sampled' with published=True")
    if curvature == "hessian" and not dense:
        raise ValueError("curvature='hessian' needs the dense belief (jr.rvga): the low-rank belief needs a PSD "
                         "curvature factor and the diagonal one would form the d x d Hessian")
    max_iter = None if max_iter is None else positive_int("max_iter", max_iter)
    if scheme == "sampled":
        if published:
            cfg = Config(2, positive_int("num_samples", 10 if num_samples is None else num_samples), "ggn",
                         None, False, bool(update_cov_twice), 0.0, _frozen(frozen_noise))
            if num_iters is not None:
                raise ValueError("num_iters: the published sampled scheme makes two passes")
            return scheme, cfg
        num_samples = positive_int("num_samples", (100 if dense else 10) if num_samples is None else num_samples)
        if num_samples < 2:
            raise ValueError(f"num_samples must be >= 2, got {num_samples}")
        tol = 1e-2 if tol is None else float(tol)
        if not tol >= 0:
            raise ValueError(f"tol must be >= 0, got {tol!r}")
        iters = positive_int("num_iters", 3 if num_iters is None else num_iters)
        return scheme, Config(iters, num_samples, curvature, None, True, True, tol)
    if scheme == "extragrad":
        default = not published
        return scheme, Config(2, correction=default if correction is None else bool(correction),
                              update_cov_twice=default if update_cov_twice is None else bool(update_cov_twice))
    return scheme, Config(1, max_iter=max_iter, curvature=curvature)


def _frozen(frozen_noise):
    if isinstance(frozen_noise, bool):
        return frozen_noise
    z, e = map(jnp.asarray, frozen_noise)
    if z.ndim != 2 or e.ndim != 2 or e.shape[0] != z.shape[0]:
        raise ValueError(f"frozen_noise must be a pair (z, e) of shapes (K, d) and (K, p), got {z.shape} and {e.shape}")
    return (z, e)


def _filter(belief, model, scheme, cfg, dyn, init) -> Filter:
    spec = Spec(model, belief, scheme, cfg, dyn)
    return Filter(init, _OfSpec(_update, spec), _make_check(model), _OfSpec(_predict_alone, spec), model)


# --------------------------------------------------------------------------- public factories

def rvga(model: Model, scheme: Optional[str] = None, *, num_iters: Optional[int] = None,
         num_samples: Optional[int] = None, curvature: str = "ggn", process_noise=None,
         max_iter: Optional[int] = None, correction: Optional[bool] = None,
         update_cov_twice: Optional[bool] = None, tol: Optional[float] = None, jitter: Optional[float] = None,
         max_move: Optional[float] = None, decay=None, additive_noise=None, decay_to=None) -> Filter:
    """R-VGA with a full covariance ([RVGA] Alg. 1): the dense belief times ``scheme`` (module docstring).

    Args:
      model: an observation model of :mod:`jaxrvga.models`.
      scheme: see the module table; default ``"exact"`` (linear-Gaussian), ``"implicit"`` (other
        GLMs), ``"moment_ekf"`` (nonlinear).
      num_iters: passes of the Monte-Carlo implicit iteration (``sampled``; default 3; 1 = explicit).
      num_samples: Monte-Carlo draws per pass (``sampled``; antithetic pairs; default 100).
      curvature: ``"ggn"`` (``E[J^T F J]``, [LRVGA] eq. 41), ``"hessian"`` (``sampled`` only) or
        ``"empirical"`` (``ekf``, ``moment_ekf``: one gradient column ``g_i g_i^T`` per observation).
      process_noise, decay, additive_noise, decay_to: the prediction step before each observation,
        ``theta_t = gamma (theta_{t-1} - m) + m + N(0, Q)`` after ``P <- (1 + eta) P``
        ([LRVGA] Remark 1), with ``eta = process_noise >= 0``, ``gamma = decay``,
        ``Q = additive_noise`` (scalar ``q I`` or (d,) ``diag(q)``) and ``m = decay_to`` (default
        0): :mod:`jaxrvga.dynamics`. All may be traced. ``flt.predict(state)`` is that step alone.
      max_iter: iteration cap of the implicit root solve (default: the solver's).
      correction, update_cov_twice: ``extragrad`` only (default True, True).
      tol: ``sampled``: ``info.converged`` is False when the last pass moved the mean by more
        than ``tol (1 + |mu_{t-1}|)`` (default 1e-2).
      jitter: ``moment_ekf``: the variance added to ``Var(y | eta)`` of the moment-matched Gaussian
        likelihood (default :data:`MOMENT_JITTER`).
      max_move: a step whose mean moves by more than this Mahalanobis length under the previous
        belief is shortened to it and flagged (``info.converged`` False;
        :func:`~jaxrvga.schemes.limit_move`); default :data:`MAX_MOVE` (none for ``exact`` and
        ``implicit``, exact and proximal steps), ``inf`` for no limit.

    ``init(mean, cov, key=None)``; ``key`` is required by ``sampled``.
    """
    dyn = dynamics(decay, additive_noise, process_noise, decay_to)
    scheme, cfg = _configure(model, scheme, True, False, num_iters=num_iters, num_samples=num_samples,
                             curvature=curvature, max_iter=max_iter, correction=correction,
                             update_cov_twice=update_cov_twice, tol=tol, frozen_noise=False,
                             jitter=jitter, max_move=max_move)
    belief = Dense()

    def init(mean, cov, key=None):
        key = check_key(key, scheme == "sampled", "scheme='sampled'")
        return belief.init(mean, cov, key if scheme == "sampled" else None)

    return _filter(belief, model, scheme, cfg, dyn, init)


def lrvga(model: Model, rank: int, inner_loops: Optional[int] = None, scheme: Optional[str] = None,
          num_samples: Optional[int] = None, process_noise=None, frozen_noise=False, *,
          published: bool = False, num_iters: Optional[int] = None, max_iter: Optional[int] = None,
          correction: Optional[bool] = None, update_cov_twice: Optional[bool] = None,
          tol: Optional[float] = None, curvature: str = "ggn", fa_step: Optional[Callable] = None,
          psi_floor: float = PSI_FLOOR, block_rows: Optional[int] = None, buffer: int = 0,
          em_tol: Optional[float] = None, jitter: Optional[float] = None,
          max_move: Optional[float] = None, decay=None, additive_noise=None, decay_to=None) -> Filter:
    """L-RVGA ([LRVGA]): the low-rank belief ``(W W^T + diag(psi))^{-1}`` times ``scheme``.

    Same schemes and options as :func:`rvga`, the dynamics, ``jitter`` and ``max_move`` included (``max_move`` is
    refused with ``published``, which takes every step as published; ``curvature="hessian"`` is refused: the low-rank
    precision needs a PSD curvature factor; ``num_samples`` defaults to 10, since every draw adds
    a column to the step's factor), plus:

    Args:
      rank: ``p``, the columns of ``W`` (1 <= p <= d).
      inner_loops: EM iterations of each factor-analysis projection after the spectral warm
        start (default 0: the start itself, measured as close to the posterior as 1-3 loops,
        experiments/REPORT.md), or Algorithm 1's ``n_in`` with ``published`` (default 1). The
        number run is ``info.em_loops``.
      em_tol: ``inner_loops`` becomes a maximum: a projection's EM stops after the first loop that
        moves ``W`` by at most ``em_tol`` relative to it (Frobenius norms). The iterate is then
        stored between loops (one more d x p array during the projection). Not with ``published``.
        The loop is a ``lax.while_loop``: a run with ``em_tol`` is differentiable in forward mode
        (``jax.jvp``, ``jax.jacfwd``) only; ``jax.grad`` raises JAX's while-loop error (use a fixed
        ``inner_loops`` without ``em_tol`` for gradients).
      published: the published L-RVGA (EM from ``W_{t-1}``, mean step with the projected
        precision, the sampled scheme's two passes without correction): reproduces the paper and
        the authors' code. The default projects the exact precision step from a spectral warm
        start and takes the mean step before projecting, which is exact at full rank
        (experiments/REPORT.md).
      frozen_noise: ``sampled`` with ``published``: ``True`` reuses the state's key at every
        step (the authors' code); a pair ``(z, e)`` (K, d), (K, p) gives the base noise itself.
      fa_step: ``fa_step(W, psi, X) -> (W, psi)`` replaces the projection (oracle tests).
      psi_floor: relative floor of ``psi`` (:mod:`jaxrvga.factor_analysis`).
      block_rows: row blocks of the projection (:func:`jaxrvga.blocks.num_blocks`; 0: one block).
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
    rank = positive_int("rank", rank)
    dyn = dynamics(decay, additive_noise, process_noise, decay_to)
    if published:
        inner_loops = positive_int("inner_loops", 1 if inner_loops is None else inner_loops)
    else:
        inner_loops = 0 if inner_loops is None else inner_loops
        if isinstance(inner_loops, bool) or not isinstance(inner_loops, (int, np.integer)) or inner_loops < 0:
            raise ValueError(f"inner_loops must be an integer >= 0, got {inner_loops!r}")
        inner_loops = int(inner_loops)
    if not (isinstance(psi_floor, (int, float)) and 0.0 <= psi_floor < 1.0):
        raise ValueError(f"psi_floor must be a number in [0, 1), got {psi_floor!r}")
    if block_rows is not None and block_rows != 0:
        block_rows = positive_int("block_rows", block_rows)
    if fa_step is not None and not callable(fa_step):
        raise ValueError("fa_step must be callable: fa_step(W, psi, X) -> (W, psi)")
    if isinstance(buffer, bool) or not isinstance(buffer, (int, np.integer)) or buffer < 0:
        raise ValueError(f"buffer must be an integer >= 0, got {buffer!r}")
    if buffer and (published or fa_step is not None):
        raise ValueError("buffer: the published projection and fa_step project every step (buffer=0)")
    if em_tol is not None:
        if published or fa_step is not None:
            raise ValueError("em_tol: the published projection runs a fixed number of loops (inner_loops)")
        if isinstance(em_tol, bool) or not isinstance(em_tol, (int, float)) or not em_tol >= 0:
            raise ValueError(f"em_tol must be a number >= 0, got {em_tol!r}")
        if inner_loops == 0:
            raise ValueError("em_tol needs inner_loops >= 1, the maximum number of EM loops")
        em_tol = float(em_tol)
    scheme, cfg = _configure(model, scheme, False, published, num_iters=num_iters, num_samples=num_samples,
                             curvature=curvature, max_iter=max_iter, correction=correction,
                             update_cov_twice=update_cov_twice, tol=tol, frozen_noise=frozen_noise,
                             jitter=jitter, max_move=max_move)
    belief = LowRank(rank, inner_loops, bool(published), fa_step, float(psi_floor), block_rows, int(buffer), em_tol)
    given_noise = not isinstance(cfg.frozen_noise, bool)
    if given_noise and cfg.frozen_noise[1].shape[1] != rank:
        raise ValueError(f"frozen_noise must be a pair (z, e) of shapes (K, d) and (K, {rank}), "
                         f"got {cfg.frozen_noise[0].shape} and {cfg.frozen_noise[1].shape}")

    def init(mean, W, psi, key=None):
        key = check_key(key, scheme == "sampled" and not given_noise, "scheme='sampled'")
        state = belief.init(mean, W, psi, key if scheme == "sampled" else None)
        if given_noise:
            z, e = cfg.frozen_noise
            if z.shape[0] < 1 or z.shape[1] != state.mean.shape[0] or e.shape[1] != rank:
                raise ValueError(f"frozen_noise must have shapes (K, {state.mean.shape[0]}) and (K, {rank}) "
                                 f"with K >= 1 samples, got {z.shape} and {e.shape}")
        return state

    return _filter(belief, model, scheme, cfg, dyn, init)


def diag_rvga(model: Model, scheme: Optional[str] = None, *, num_iters: Optional[int] = None,
              num_samples: Optional[int] = None, curvature: str = "ggn", process_noise=None,
              max_iter: Optional[int] = None, correction: Optional[bool] = None,
              update_cov_twice: Optional[bool] = None, tol: Optional[float] = None,
              jitter: Optional[float] = None, max_move: Optional[float] = None, decay=None,
              additive_noise=None, decay_to=None) -> Filter:
    """Mean-field R-VGA: the diagonal belief ``N(mean, diag(psi)^{-1})`` times ``scheme``, O(d) per column.

    Same schemes, options and defaults as :func:`rvga` (module table), the dynamics included;
    each step keeps the diagonal of the new precision (:class:`~jaxrvga.beliefs.Diagonal`), so a
    network of millions of weights costs a few passes over them per output. ``num_samples``
    defaults to 10 and ``curvature="hessian"`` is refused (it would form the d x d Hessian).

    ``init(mean, var, key=None)``: ``var`` the (d,) prior variances (a scalar broadcasts); ``key``
    is required by ``sampled``.
    """
    dyn = dynamics(decay, additive_noise, process_noise, decay_to)
    scheme, cfg = _configure(model, scheme, False, False, num_iters=num_iters, num_samples=num_samples,
                             curvature=curvature, max_iter=max_iter, correction=correction,
                             update_cov_twice=update_cov_twice, tol=tol, frozen_noise=False,
                             jitter=jitter, max_move=max_move)
    belief = Diagonal()

    def init(mean, var, key=None):
        key = check_key(key, scheme == "sampled", "scheme='sampled'")
        return belief.init(mean, var, key if scheme == "sampled" else None)

    return _filter(belief, model, scheme, cfg, dyn, init)


def with_block_rows(flt: Filter, block_rows: Optional[int]) -> Filter:
    """The L-RVGA filter ``flt`` (from :func:`lrvga`) with its projection's row blocks set explicitly.

    ``block_rows=0`` traces one block (what :mod:`jaxrvga.sharding` needs: row blocks of an axis
    sharded across devices would gather rows between them). Raises ``ValueError`` for other filters.
    """
    spec = getattr(flt.update, "spec", None)
    if not isinstance(spec, Spec) or not isinstance(spec.belief, LowRank):
        raise ValueError("flt must be a filter built by jaxrvga.lrvga")
    if block_rows is not None and block_rows != 0:
        block_rows = positive_int("block_rows", block_rows)
    spec = spec._replace(belief=spec.belief._replace(block_rows=block_rows))
    return flt._replace(update=_OfSpec(_update, spec), predict=_OfSpec(_predict_alone, spec))


def kalman(noise_var=1.0, process_noise=None, *, decay=None, additive_noise=None, decay_to=None) -> Filter:
    """The Kalman filter: ``rvga(linear_gaussian(noise_var))`` ([RVGA] Thm 2), for a static parameter
    or, with ``decay`` and ``additive_noise``, the transition ``F = decay I``, ``Q = additive_noise``
    (:mod:`jaxrvga.dynamics`).

    ``x`` is a row (d,) with scalar ``y`` or a matrix ``H`` (m, d) with ``y`` (m,).
    """
    from .models import linear_gaussian
    return rvga(linear_gaussian(noise_var), "exact", process_noise=process_noise, decay=decay,
                additive_noise=additive_noise, decay_to=decay_to)


def ekf(model: Model, process_noise=None, *, decay=None, additive_noise=None, decay_to=None) -> Filter:
    """Extended Kalman filter = online natural gradient: ``rvga(model, "ekf")`` ([RVGA] Thm 3, eqs. 54-55, 81)."""
    return rvga(model, "ekf", process_noise=process_noise, decay=decay, additive_noise=additive_noise,
                decay_to=decay_to)


def qkf(process_noise=None, *, decay=None, additive_noise=None, decay_to=None) -> Filter:
    """Quadratic (Jaakkola-Jordan) Kalman filter: ``rvga(logistic(), "qkf")`` ([RVGA] eqs. 82-90)."""
    from .models import logistic
    return rvga(logistic(), "qkf", process_noise=process_noise, decay=decay, additive_noise=additive_noise,
                decay_to=decay_to)


def mirror_prox(model: Model, *, correction: bool = False, update_cov_twice: bool = True,
                process_noise=None, decay=None, additive_noise=None, decay_to=None) -> Filter:
    """Mirror prox with a full covariance: ``rvga(model, "extragrad")`` with the paper's defaults.

    ``correction=False, update_cov_twice=True`` is [LRVGA] eqs. (139)-(142) and the authors' code;
    ``rvga(model, "extragrad")`` defaults to the corrected form, exact on linear-Gaussian models.
    """
    if not isinstance(model, Model) or not model.is_glm:
        raise ValueError("model must be a GLM from jaxrvga.models (linear_gaussian, logistic, poisson, glm)")
    return rvga(model, "extragrad", correction=correction, update_cov_twice=update_cov_twice,
                process_noise=process_noise, decay=decay, additive_noise=additive_noise, decay_to=decay_to)


__all__ = ["rvga", "lrvga", "diag_rvga", "kalman", "ekf", "qkf", "mirror_prox", "with_block_rows", "SCHEMES", "Spec"]
