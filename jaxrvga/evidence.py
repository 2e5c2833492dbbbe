"""One-step-ahead log predictive densities and the log evidence of a run of a filter.

Before observation ``t`` a filter holds the predicted belief ``q_t(theta)`` (its prior for that
observation, :meth:`~jaxrvga.Filter.predict`); ``log p(y_t | y_{1:t-1}) = log E_{q_t}[p(y_t | theta,
x_t)]`` (:func:`jaxrvga.posterior_predictive.log_predictive`) is the prequential score of online learning,
and their sum is the log evidence ``log p(y_{1:T})`` (the prediction error decomposition of the
Kalman filter). For the linear-Gaussian model every term is exact, so the sum is the exact log
marginal likelihood, ``log N(y | X mu_0, X P_0 X^T + s2 I)`` for a static parameter; for other
models it is the evidence of the filter's Gaussian approximations (the terms as
:func:`~jaxrvga.posterior_predictive.log_predictive` states them).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

import numpy as np

from . import beliefs, models
from .core import NoiseStats
from ._values import Bound, by_value
from .core import Filter, Prequential, scan
from .posterior_predictive import log_predictive
from .validation import check_positive, is_concrete


def trace_log_predictive(model: models.Model, *, key=None, num_samples: int = 1024,
                         num_points: int = 32) -> Prequential:
    """A trace of :func:`jaxrvga.run` giving ``log p(y_t | y_{1:t-1})`` per step (a :class:`~jaxrvga.core.Prequential`).

    Each step's value is :func:`~jaxrvga.posterior_predictive.log_predictive` of ``(x_t, y_t)`` under the
    predicted belief, with the same options; with a ``key``, step ``t`` uses
    ``fold_in(key, t)`` (the state's step counter), so the draws differ from step to step and a
    run is reproducible. Usage: ``_, lp = jr.run(flt, state, xs, ys, jr.trace_log_predictive(model))``.

    Args:
      model: the observation model of the filter (:mod:`jaxrvga.models`).
      key: a PRNG key for the Monte-Carlo estimates (None: the deterministic ones, where the model has them).
      num_samples, num_points: as :func:`~jaxrvga.posterior_predictive.log_predictive`'s.

    Returns:
      A :class:`~jaxrvga.core.Prequential` trace function; the run's trace is the (T,) log predictive
      densities.
    """
    if not isinstance(model, models.Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    return Prequential(Bound(_score, model, key, num_samples, num_points))


def _score(model, key, num_samples, num_points, state, x, y):
    """One step of :func:`trace_log_predictive` (a function of the options: equal traces share a program)."""
    step_key = None if key is None else jax.random.fold_in(key, state.step)
    return log_predictive(state, x, y, model, key=step_key, num_samples=num_samples, num_points=num_points)


def log_evidence(flt: Filter, state, xs, ys, *, model: Optional[models.Model] = None, key=None,
                 num_samples: int = 1024, num_points: int = 32):
    """``log p(y_{1:T}) = sum_t log p(y_t | y_{1:t-1})`` of running ``flt`` from ``state`` (module docstring).

    A scalar, differentiable with respect to everything the filter and the state are built from
    (the prior's mean and scale, the model's noise variance, the dynamics' ``decay``,
    ``additive_noise`` and ``process_noise``): it is one :func:`jaxrvga.scan`, so that it can be
    called inside ``jax.jit``, ``jax.grad`` or ``jax.vmap`` with the filter built there (empirical
    Bayes: maximise it over the hyper-parameters, e.g. with optax). Called on concrete data with a
    filter and model built from plain Python values, that scan is compiled once per configuration
    and shapes and reused by the next call. The low-rank
    belief's projection differentiates an eigendecomposition, whose derivative is undefined where
    eigenvalues repeat: start it from generic factors (:func:`jaxrvga.kernels.lowrank.init_factors`), not
    ``W = 0`` (NaN gradients).

    Args:
      flt, state: a filter with an observation model (``flt.model``, e.g. :func:`jaxrvga.rvga`,
        :func:`jaxrvga.lrvga`) and its initial state.
      xs, ys: the data, time along the leading axis.
      model: the model to score with (default ``flt.model``).
      key, num_samples, num_points: as :func:`trace_log_predictive`.

    Returns:
      The scalar ``log p(y_{1:T})`` (a 0-d float array of the state's dtype).
    """
    model = flt.model if model is None else model
    if model is None:
        raise ValueError("log_evidence needs an observation model: this filter has none (flt.model is None); "
                         "pass model=")
    concrete = is_concrete((state, xs, ys, key))
    if flt.check is not None and concrete:
        flt.check(state, xs, ys)
    trace_log_predictive(model, key=key, num_samples=num_samples, num_points=num_points)  # its checks
    program = flt.program()
    if concrete and by_value((program, model, num_samples, num_points)):  # compiled once per configuration
        return _compiled_evidence(program, model, num_samples, num_points, state, xs, ys, key)
    return _evidence(program, model, num_samples, num_points, state, xs, ys, key)


def _evidence(program, model, num_samples, num_points, state, xs, ys, key):
    """The sum of the prequential log predictives of one :func:`jaxrvga.scan` (:func:`log_evidence`)."""
    trace = trace_log_predictive(model, key=key, num_samples=num_samples, num_points=num_points)
    _, terms = scan(program, state, xs, ys, trace)
    return jnp.sum(terms)


#: :func:`_evidence` jitted, for a filter and model that compare by value and concrete data: a
#: repeated call of :func:`log_evidence` with the same configuration and shapes is not traced again.
_compiled_evidence = jax.jit(_evidence, static_argnums=(0, 1, 2, 3))


class PriorFit(NamedTuple):
    """The result of :func:`fit_prior_precision`: the belief under the fitted prior, the fitted
    precision of each group (G,), whether the fixed point was reached, and the iterations taken."""

    state: object
    precision: jax.Array
    converged: jax.Array
    iterations: jax.Array


def fit_prior_precision(state, prior_precision, prior_mean=0.0, groups=None, max_iter: int = 100,
                        tol: float = 1e-6) -> PriorFit:
    """The prior precision chosen by the evidence after one pass, without a grid or a validation split.

    A run from the prior ``N(m0, diag(a0)^{-1})`` with no dynamics ends with the precision
    ``diag(a0) + D`` and the mean ``m``, ``D`` the data's curvature (exact for a linear-Gaussian model,
    its Gauss-Newton form otherwise). Moving the prior to ``diag(a)`` is exact in that form: with
    ``delta = a - a0``, the precision is ``diag(a0 + delta) + D`` and the mean
    ``m(a) = m + P(a) (delta * (m0 - m))``. The precision of each group ``g`` of parameters is then
    set to MacKay's fixed point of the (Laplace) evidence, ``a_g = gamma_g / |m_g(a) - m0_g|^2``,
    ``gamma_g = d_g - a_g tr_g P(a)`` (the number of well-determined parameters), iterated to
    ``tol`` in ``log a``. For the linear-Gaussian model that is the exact maximum of the marginal
    likelihood; with a learned noise variance (``state.noise``, ``s2 ~ InvGamma(shape, rate)``, the
    precision that of ``theta`` given ``s2 = 1``) the squared norm is weighted by ``E[1 / s2] =
    shape / rate(a)``, ``rate(a) = rate + sum(delta (m(a) - m0)(m - m0)) / 2``, and the result is again
    exact for the normal-inverse-gamma model. Cost: a few Woodbury solves (O(d p^2) a low-rank
    iteration, O(d) diagonal, O(d^3) dense). For a network after one pass it over-regularises (its
    mean is not the MAP; experiments/REPORT.md, "The prior precision by the evidence after one pass"):
    use it for linear and generalised linear models.

    Args:
      state: a filter's state after a run with no dynamics (``GaussianState``, ``LowRankState`` or
        ``DiagonalState``).
      prior_precision: the precision ``a0`` the run started from: a scalar or (d,).
      prior_mean: the prior mean ``m0`` of that run: a scalar or (d,) (default 0).
      groups: ``None`` (one precision for all parameters) or integers (d,) in ``[0, G)`` naming each
        parameter's group (e.g. one per layer of a network), every group non-empty.
      max_iter, tol: at most ``max_iter`` iterations, stopped where ``|log a_new - log a| <= tol``.

    Returns:
      :class:`PriorFit`. A fixed point that runs off to 0 or infinity (a stream that says nothing
      about the prior, e.g. ``m = m0``), a precision that would not be positive definite, or a
      non-finite value stops the iteration with ``converged`` False and keeps the last usable prior.
    """
    belief, _ = beliefs.of_state(state)
    mean = state.mean
    d, dtype = mean.shape[0], mean.dtype
    a0 = check_positive("prior_precision", _per_parameter("prior_precision", prior_precision, d, dtype))
    m0 = _per_parameter("prior_mean", prior_mean, d, dtype)
    groups, G = _groups(groups, d)
    count = jax.ops.segment_sum(jnp.ones(d, dtype), groups, G)
    start = jax.ops.segment_sum(jnp.log(a0), groups, G) / count

    def retarget(log_a):
        return shift_prior(state, jnp.exp(log_a)[groups] - a0, m0)

    def fixed_point(log_a):
        new, ok = retarget(log_a)
        a = jnp.exp(log_a)[groups]
        gamma = jax.ops.segment_sum(1.0 - a * belief.variances(new), groups, G)
        u = new.mean - m0
        weight = 1.0 if state.noise is None else new.noise.shape / new.noise.rate
        step = jnp.log(gamma) - jnp.log(weight * jax.ops.segment_sum(u * u, groups, G))
        return step, ok & jnp.all(jnp.isfinite(step))

    def cond(carry):
        it, _, done, usable = carry
        return (it < max_iter) & ~done & usable

    def body(carry):
        it, log_a, _, _ = carry
        new, usable = fixed_point(log_a)
        done = usable & jnp.all(jnp.abs(new - log_a) <= tol)
        return it + 1, jnp.where(usable, new, log_a), done, usable

    it, log_a, done, _ = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), start, False, True))
    new, ok = retarget(log_a)
    return PriorFit(new, jnp.exp(log_a), done & ok, it)


def shift_prior(state, delta, prior_mean):
    """The belief of a run from the prior ``N(m0, diag(a0)^{-1})`` moved to the prior precision ``a0 + delta``.

    In the belief's own form (:func:`fit_prior_precision`): the precision plus ``diag(delta)`` and the
    mean ``m + P_new (delta * (m0 - m))``, the mode of the moved posterior for a model linear in ``theta``;
    with a learned noise variance the inverse-gamma rate plus ``sum(delta (m_new - m0) (m - m0)) / 2``.
    Exact for the linear-Gaussian and normal-inverse-gamma models (the run from the moved prior), the
    Gauss-Newton form of that move otherwise. O(d p^2) for a low-rank belief.

    Args:
      state: a filter's state (``GaussianState``, ``LowRankState`` or ``DiagonalState``).
      delta: the shift of the prior precision, (d,), of either sign.
      prior_mean: the prior mean ``m0``, (d,).

    Returns:
      ``(state, ok)``: the moved state and a 0-d bool, False where the precision is not positive
      definite or the rate not positive.
    """
    belief, _ = beliefs.of_state(state)
    mean = state.mean
    new, ok = belief.shift_precision(state, delta)
    new = new._replace(mean=mean + belief.solve(new, delta * (prior_mean - mean)))
    if state.noise is not None:
        rate = state.noise.rate + 0.5 * jnp.sum(delta * (new.mean - prior_mean) * (mean - prior_mean))
        new, ok = new._replace(noise=NoiseStats(state.noise.shape, rate)), ok & (rate > 0)
    return new, ok


def shift_prior_tangent(state, direction, prior_mean):
    """``d/dt shift_prior(state, t direction, prior_mean)`` at ``t = 0``, without the moved state.

    From :func:`shift_prior`'s formulas at ``delta = 0``: the precision's tangent ``diag(direction)`` in
    the belief's own form (the forward-mode derivative of ``shift_precision``), the mean's
    ``P (direction * (m0 - m))`` by one solve with the state's own factors, and with a learned noise
    variance the rate's ``sum(direction (m - m0)^2) / 2``. The moved belief is not formed (its primal is
    the state itself), so the derivative of a function of the moved belief costs one solve and the
    tangent of the precision's form, not a refactorisation and its derivative.

    Args:
      state: a filter's state, as :func:`shift_prior`'s.
      direction: the direction of the shift of the prior precision, (d,).
      prior_mean: the prior mean ``m0``, (d,).

    Returns:
      A tangent of ``state`` (the same structure; ``float0`` for its integer fields), for ``jax.jvp``.
    """
    belief, _ = beliefs.of_state(state)
    mean = state.mean
    _, tangent = jax.jvp(lambda delta: belief.shift_precision(state, delta)[0], (jnp.zeros_like(direction),),
                         (direction,))
    tangent = tangent._replace(mean=belief.solve(state, direction * (prior_mean - mean)))
    if state.noise is not None:
        u = mean - prior_mean
        rate = 0.5 * jnp.sum(direction * u * u)
        tangent = tangent._replace(noise=tangent.noise._replace(rate=rate.astype(state.noise.rate.dtype)))
    return tangent


def _per_parameter(name, value, d, dtype):
    """``value`` as a (d,) vector of ``dtype`` (a scalar broadcast); ``ValueError`` naming it otherwise."""
    value = jnp.asarray(value, dtype)
    if value.shape not in ((), (d,)):
        raise ValueError(f"{name} must be a scalar or have shape ({d},), got {value.shape}")
    return jnp.broadcast_to(value, (d,))


def _groups(groups, d):
    """``(groups (d,) int32, G)``: one group where ``groups`` is None; checked: concrete integers in
    ``[0, G)``, every group used."""
    if groups is None:
        return jnp.zeros(d, jnp.int32), 1
    g = np.asarray(groups)
    if g.shape != (d,) or not np.issubdtype(g.dtype, np.integer):
        raise ValueError(f"groups must be integers of shape ({d},), got {g.dtype} {g.shape}")
    G = int(g.max()) + 1 if d else 0
    if g.min() < 0 or len(np.unique(g)) != G:
        raise ValueError(f"groups must take every value 0 .. G - 1 (one per group), got {sorted(np.unique(g))}")
    return jnp.asarray(g, jnp.int32), G


__all__ = ["trace_log_predictive", "log_evidence", "fit_prior_precision", "PriorFit", "shift_prior",
           "shift_prior_tangent"]
