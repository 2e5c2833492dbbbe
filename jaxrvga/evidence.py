"""One-step-ahead log predictive densities and the log evidence of a run of a filter.

Before observation ``t`` a filter holds the predicted belief ``q_t(theta)`` (its prior for that
observation, :meth:`~jaxrvga.Filter.predict`); ``log p(y_t | y_{1:t-1}) = log E_{q_t}[p(y_t | theta,
x_t)]`` (:func:`jaxrvga.predictive.log_predictive`) is the prequential score of online learning,
and their sum is the log evidence ``log p(y_{1:T})`` (the prediction error decomposition of the
Kalman filter). For the linear-Gaussian model every term is exact, so the sum is the exact log
marginal likelihood, ``log N(y | X mu_0, X P_0 X^T + s2 I)`` for a static parameter; for other
models it is the evidence of the filter's Gaussian approximations (the terms as
:func:`~jaxrvga.predictive.log_predictive` states them).
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from . import models
from ._values import Bound, by_value
from .core import Filter, Prequential, scan
from .predictive import log_predictive
from .validation import is_concrete


def trace_log_predictive(model: models.Model, *, key=None, num_samples: int = 1024,
                         num_points: int = 32) -> Prequential:
    """A trace of :func:`jaxrvga.run` giving ``log p(y_t | y_{1:t-1})`` per step (a :class:`~jaxrvga.core.Prequential`).

    Each step's value is :func:`~jaxrvga.predictive.log_predictive` of ``(x_t, y_t)`` under the
    predicted belief, with the same options; with a ``key``, step ``t`` uses
    ``fold_in(key, t)`` (the state's step counter), so the draws differ from step to step and a
    run is reproducible. Usage: ``_, lp = jr.run(flt, state, xs, ys, jr.trace_log_predictive(model))``.
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
    eigenvalues repeat: start it from generic factors (:func:`jaxrvga.kernels.woodbury.init_factors`), not
    ``W = 0`` (NaN gradients).

    Args:
      flt, state: a filter with an observation model (``flt.model``, e.g. :func:`jaxrvga.rvga`,
        :func:`jaxrvga.lrvga`) and its initial state.
      xs, ys: the data, time along the leading axis.
      model: the model to score with (default ``flt.model``).
      key, num_samples, num_points: as :func:`trace_log_predictive`.
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


__all__ = ["trace_log_predictive", "log_evidence"]
