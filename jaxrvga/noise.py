r"""An unknown observation noise variance, learned as the data arrive: the normal-inverse-gamma filter.

For a Gaussian output of unknown variance ``s2`` (:func:`jaxrvga.models.gaussian` and
:func:`jaxrvga.models.linear_gaussian` with ``noise_var=None``, :func:`jaxrvga.kalman` with
``None``) the belief is the conjugate normal-inverse-gamma one

.. math::

    \theta \mid s^2 \sim N(\mu, s^2 P), \qquad s^2 \sim \mathrm{InvGamma}(a, b),

the state holding ``P`` (its covariance, or precision factors, in units of ``s2``) and its
``noise`` field the :class:`~jaxrvga.core.NoiseStats` ``(a, b) = (shape, rate)``. An observation
``y = h(theta, x) + e``, ``e ~ N(0, s2 I_k)``, moves ``(mu, P)`` as the filter of unit noise
variance does (given ``s2`` the posterior is ``N(mu', s2 P')``, ``P'`` free of ``s2``), and

.. math::

    a' = a + k/2, \qquad b' = b + \tfrac12 r^\top S^{-1} r, \qquad
    r = y - h(\mu, x), \quad S = I_k + J P J^\top,

with ``J = dh/dtheta`` (``X`` for a GLM minibatch). The one-step-ahead predictive is the
Student-t ``y ~ t_{2a}(h(mu, x), (b / a) S)`` (:func:`log_student_t`), whose chain over a data set
is the exact log evidence of a linear-Gaussian model. For a nonlinear predictor the same
conjugate update applies to the model linearised at the mean (West & Harrison, *Bayesian
Forecasting and Dynamic Models*, 1997, ch. 4 for the linear case; their variance discount of a
drifting noise level, ``(a, b) <- delta (a, b)`` at each prediction, ch. 10, is
:attr:`jaxrvga.dynamics.Dynamics.noise_discount`).

:data:`DEFAULT_NOISE` ``(1, 1)`` is the weak default: worth two observations of unit variance, a
prior mean of ``s2`` that is infinite and a median of 1.44; standardise ``y`` or pass your own.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .core import NoiseStats
from .kernels import special
from .models import linearize
from .validation import is_concrete, is_plug_in

#: The default ``(shape, rate)`` of the inverse-gamma prior on an unknown noise variance.
DEFAULT_NOISE = (1.0, 1.0)


def check_noise(noise, dtype) -> NoiseStats:
    """``noise = (shape, rate)`` as :class:`~jaxrvga.core.NoiseStats` scalars of ``dtype``; ``ValueError``
    naming ``noise`` where it is not a pair of real scalars, or (where concrete) not finite and > 0 once
    stored in ``dtype`` (``1e39`` overflows float32, ``1e-50`` flushes to 0).

    Args:
      noise: the prior ``(shape, rate)``, a pair of real scalars.
      dtype: the floating dtype of the state.

    Returns:
      A :class:`~jaxrvga.core.NoiseStats` of 0-d arrays of ``dtype``.
    """
    if isinstance(noise, (str, bytes)) or not isinstance(noise, (tuple, list)) or len(noise) != 2:
        raise ValueError(f"noise must be a pair (shape, rate) of the inverse-gamma prior, got {noise!r}")
    out = []
    for name, v in zip(("shape", "rate"), noise):
        if isinstance(v, bool) or jnp.iscomplexobj(jnp.asarray(v)) or jnp.shape(v) != ():
            raise ValueError(f"noise: {name} must be a real scalar, got {v!r}")
        if is_concrete(v) and not (np.isfinite(float(v)) and float(v) > 0):
            raise ValueError(f"noise: {name} must be positive and finite, got {v!r}")
        with np.errstate(over="ignore", under="ignore"):  # a value the dtype cannot hold: the error below
            stored = jnp.asarray(v, dtype)
        with jax.ensure_compile_time_eval():  # a concrete value inside a trace (init under jit) stays concrete
            holds = not is_concrete(v) or bool(valid(NoiseStats(stored, stored)))
        if not holds:
            raise ValueError(f"noise: {name} = {v!r} is not positive and finite in the state's dtype "
                             f"{jnp.dtype(dtype).name} (it stores {float(stored)!r})")
        out.append(stored)
    return NoiseStats(*out)


def valid(stats: NoiseStats):
    """Whether ``stats`` is an inverse-gamma belief: shape and rate finite and > 0 (a traced bool).

    Args:
      stats: a :class:`~jaxrvga.core.NoiseStats`.

    Returns:
      A bool array of the statistics' shape.
    """
    a, b = stats
    return jnp.isfinite(a) & jnp.isfinite(b) & (a > 0) & (b > 0)


def stats_of(state, learned=None):
    """The :class:`~jaxrvga.core.NoiseStats` of ``state`` (``None`` where it has none). ``learned``: whether
    the model the state is used with learns its noise variance (``Family.learned_noise``); a state
    that disagrees is a ``ValueError`` naming ``state.noise`` (``None``: not checked).

    Args:
      state: a filter's state.
      learned: whether the model learns its noise variance (None: not checked).

    Returns:
      A :class:`~jaxrvga.core.NoiseStats`, or None.
    """
    stats = getattr(state, "noise", None)
    if learned is not None and learned != (stats is not None):
        raise ValueError("state.noise: the model learns its noise variance but the state has no statistics of it "
                         "(init it with that model's filter)" if learned else
                         "state.noise: the state has statistics of a learned noise variance but the model's "
                         "variance is known (build the model with noise_var=None)")
    return None if stats is None else NoiseStats(*stats)


def residual(model, belief, state, x, y, scale=1.0):
    """``(r, S)``: the residual ``y - h(mu, x)`` (k,) and ``S = I + scale J P J^T`` (k, k) of one checked
    observation (:func:`jaxrvga.models.check_observation`; a GLM's ``x`` is (m, d)).

    Args:
      model: the observation model.
      belief: the :class:`~jaxrvga.beliefs.Belief` that reads ``state``.
      state: its state.
      x, y: one checked observation (a GLM's minibatch: ``x`` (m, d), ``y`` (m,)).
      scale: the covariance scale (0: the plug-in, ``S = I``).

    Returns:
      ``(r, S)``, (k,) and (k, k), k the number of outputs.
    """
    plug_in = is_plug_in(scale)  # S = I: no Jacobian needed
    eta, J = linearize(model, state.mean, x, jacobian=not plug_in)
    eye = jnp.eye(eta.shape[0], dtype=eta.dtype)
    if plug_in:
        return jnp.ravel(y) - eta, eye
    return jnp.ravel(y) - eta, scale * belief.sandwich(state, J) + eye


def _whitened(r, S):
    """``(z, log det S)`` with ``z = L^{-1} r``, ``S = L L^T``: ``r^T S^{-1} r = z^T z``."""
    L = jnp.linalg.cholesky(S)
    z = jax.scipy.linalg.solve_triangular(L, r, lower=True)
    return z, 2.0 * jnp.sum(jnp.log(jnp.diagonal(L)))


def quadratic_form(r, S):
    """``r^T S^{-1} r``, through a Cholesky factor of ``S``; for one output (k = 1), ``r^2 / S``.

    Args:
      r: a residual, (k,).
      S: its covariance, (k, k), positive definite.

    Returns:
      The scalar.
    """
    if r.shape[0] == 1:  # no factorisation: batched over many S (a model average's scales) it costs 6x less
        return jnp.where(S[0, 0] > 0, r[0] * r[0] / S[0, 0], jnp.nan)  # NaN where S is not positive, as Cholesky
    z, _ = _whitened(r, S)
    return z @ z


def absorb(stats: NoiseStats, r, S, power: float = 1.0) -> NoiseStats:
    """The conjugate step ``(a + k/2, b + r^T S^{-1} r / 2)`` (module docstring); of a likelihood raised
    to ``power`` (:func:`~jaxrvga.models.tempered`), ``(a + power k/2, b + power r^T S^{-1} r / 2)`` with
    ``S = I + power J P J^T``: the observation ``sqrt(power) y`` of unit noise, whose density counts
    ``s2`` to the power ``power``.

    Args:
      stats: the :class:`~jaxrvga.core.NoiseStats` before the observation.
      r: the residual, (k,).
      S: its covariance in units of ``s2``, (k, k) (:func:`residual` with ``scale=power``).
      power: the likelihood's power, in (0, 1].

    Returns:
      The :class:`~jaxrvga.core.NoiseStats` after it.
    """
    return NoiseStats(stats.shape + 0.5 * power * r.shape[0], stats.rate + 0.5 * power * quadratic_form(r, S))


def log_student_t(stats: NoiseStats, r, S):
    """``log t_{2a}(r | 0, (b / a) S)``, the one-step-ahead log predictive of a residual ``r`` (k,):
    ``lgamma(a + k/2) - lgamma(a) - k/2 log(2 pi b) - log|S| / 2 - (a + k/2) log(1 + r^T S^{-1} r / (2 b))``.

    Args:
      stats: the :class:`~jaxrvga.core.NoiseStats` ``(a, b)``.
      r: the residual, (k,).
      S: its covariance in units of ``s2``, (k, k).

    Returns:
      The scalar log density.
    """
    a, b = stats
    k = r.shape[0]
    z, logdet = _whitened(r, S)
    return (jax.scipy.special.gammaln(a + 0.5 * k) - jax.scipy.special.gammaln(a)
            - 0.5 * k * jnp.log(2.0 * jnp.pi * b) - 0.5 * logdet - (a + 0.5 * k) * jnp.log1p(0.5 * (z @ z) / b))


def expected_variance(stats: NoiseStats):
    """``E[s2] = b / (a - 1)``, infinite for ``a <= 1``: the factor of every predictive variance.

    Args:
      stats: a :class:`~jaxrvga.core.NoiseStats` ``(a, b)``.

    Returns:
      An array of the statistics' shape.
    """
    a, b = stats
    return jnp.where(a > 1, b / jnp.where(a > 1, a - 1, 1.0), jnp.inf)


def scale_variance(stats: NoiseStats, var):
    """``E[s2] var``: a variance in units of ``s2`` as a variance of ``y``; 0 stays 0 (the plug-in's
    epistemic variance, ``scale=0``) even where ``E[s2]`` is infinite (``a <= 1``).

    Args:
      stats: a :class:`~jaxrvga.core.NoiseStats`.
      var: a variance (any shape) in units of ``s2``.

    Returns:
      An array of ``var``'s shape.
    """
    return jnp.where(var == 0, jnp.zeros_like(var), expected_variance(stats) * var)


def sample_variance(stats: NoiseStats, key, num: int):
    """``num`` draws of ``s2 ~ InvGamma(a, b)``: ``b / Gamma(a)``, the gamma draws by
    :func:`~jaxrvga.kernels.special.gamma_draws` (a bounded loop, which says why).

    Args:
      stats: a :class:`~jaxrvga.core.NoiseStats` ``(a, b)`` of scalars.
      key: a PRNG key.
      num: the number of draws.

    Returns:
      The (num,) draws.
    """
    a, b = stats
    return b / special.gamma_draws(key, jnp.broadcast_to(a, (num,)), jnp.result_type(a))


def discount(stats: NoiseStats, delta) -> NoiseStats:
    """``(delta a, delta b)``: the variance discount of a drifting noise level (module docstring).

    Args:
      stats: a :class:`~jaxrvga.core.NoiseStats`.
      delta: the discount in (0, 1].

    Returns:
      The discounted :class:`~jaxrvga.core.NoiseStats`.
    """
    return NoiseStats(delta * stats.shape, delta * stats.rate)


__all__ = ["DEFAULT_NOISE", "check_noise", "valid", "scale_variance", "stats_of", "residual", "quadratic_form",
           "absorb", "log_student_t", "expected_variance", "sample_variance", "discount"]
