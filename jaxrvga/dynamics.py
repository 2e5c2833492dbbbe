r"""How the parameter moves between two observations: the prediction step of every filter.

A filter's prediction step maps the belief after observation ``t - 1`` to the prior of observation
``t`` under the linear-Gaussian dynamics

.. math::

    \theta_t = \gamma\,(\theta_{t-1} - m) + m + w_t,
    \qquad w_t \sim N(0, Q), \quad Q = \operatorname{diag}(q),

applied after the fading-memory inflation ``P <- (1 + eta) P`` of [LRVGA] Remark 1. With
``s = gamma^2 (1 + eta)`` the predicted belief is ``N(mu_{t|t-1}, P_{t|t-1})`` with

.. math::

    \mu_{t|t-1} = \gamma\,\mu_{t-1} + (1 - \gamma)\, m,
    \qquad P_{t|t-1} = s\, P_{t-1} + Q,

the Kalman prediction with ``F = gamma I`` ([RVGA] Thm 2 with a moving state). ``gamma`` is the
``decay`` (1: none), ``m`` the mean it decays towards (``decay_to``, default 0; pass the prior mean
to decay towards the prior), ``q`` the ``additive_noise`` (a scalar or one variance per parameter)
and ``eta`` the ``process_noise``. ``noise_discount`` ``delta`` in (0, 1] discounts the statistics of
a learned noise variance, ``(shape, rate) <- delta (shape, rate)`` (:mod:`jaxrvga.noise`): its
mean stays, its weight decays, so a drifting noise level is tracked. Each belief implements the step exactly: the dense one as
written, the low-rank one in its precision form (:meth:`jaxrvga.beliefs.LowRank.predict`).

The values may be traced (vmapped, differentiated); the filters check them at each step and skip
and flag a step whose dynamics are invalid (not finite, ``q < 0`` or ``eta < 0``).
"""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .validation import is_concrete


class Dynamics(NamedTuple):
    """``theta_t = decay (theta_{t-1} - decay_to) + decay_to + N(0, diag(additive_noise))`` after the
    inflation ``P <- (1 + process_noise) P``, and a learned noise variance's statistics times
    ``noise_discount`` (module docstring). ``None`` fields are the identity."""

    decay: object = None
    additive_noise: object = None
    process_noise: object = None
    decay_to: object = None
    noise_discount: object = None

    @property
    def is_identity(self) -> bool:
        """True when the prediction step changes nothing (every field ``None``)."""
        return all(v is None for v in self)

    def cov_scale(self, dtype):
        """``s = gamma^2 (1 + eta)``, the factor of the covariance, or ``None`` (1)."""
        if self.decay is None and self.process_noise is None:
            return None
        gamma = 1.0 if self.decay is None else jnp.asarray(self.decay, dtype)
        eta = 0.0 if self.process_noise is None else jnp.asarray(self.process_noise, dtype)
        return jnp.asarray(gamma**2 * (1.0 + eta), dtype)

    def additive_variance(self, dtype):
        """``q`` (scalar or (d,)), the variances added to the covariance, or ``None``."""
        return None if self.additive_noise is None else jnp.asarray(self.additive_noise, dtype)

    def predict_mean(self, mean):
        """``gamma mu + (1 - gamma) m``."""
        if self.decay is None:
            return mean
        gamma = jnp.asarray(self.decay, mean.dtype)
        target = 0.0 if self.decay_to is None else jnp.asarray(self.decay_to, mean.dtype)
        return gamma * mean + (1.0 - gamma) * target

    def valid(self, dtype):
        """Traced check: every value finite, ``q >= 0``, ``eta >= 0`` and the inflation
        ``gamma^2 (1 + eta)`` finite in ``dtype`` (a scalar bool)."""
        scale = self.cov_scale(dtype)
        ok = jnp.asarray(True) if scale is None else jnp.isfinite(scale)
        for name, value in self._asdict().items():
            if value is not None:
                value = jnp.asarray(value, dtype)
                ok = ok & jnp.all(jnp.isfinite(value))
                if name in ("additive_noise", "process_noise"):
                    ok = ok & jnp.all(value >= 0)
                if name == "noise_discount":  # a subnormal delta flushes the statistics to 0
                    ok = ok & (value >= jnp.finfo(dtype).tiny) & (value <= 1)
        return ok

    def where_valid(self, ok, dtype):
        """These dynamics where ``ok``, else the identity's values (``gamma = 1``, ``q = eta = 0``, ``m``
        = 0): the double ``where`` that keeps invalid values out of the arithmetic (and its gradient)."""
        identity = {"decay": 1.0, "additive_noise": 0.0, "process_noise": 0.0, "decay_to": 0.0, "noise_discount": 1.0}
        fields = {}
        for name, value in self._asdict().items():
            if value is not None:
                value = jnp.asarray(value, dtype)
                fields[name] = jnp.where(ok, value, jnp.full_like(value, identity[name]))
        return self._replace(**fields)

    def check_dimension(self, d: int):
        """``additive_noise`` and ``decay_to`` are scalars or (d,) vectors (``ValueError`` otherwise)."""
        for name in ("additive_noise", "decay_to"):
            value = getattr(self, name)
            if value is not None and jnp.shape(value) not in ((), (d,)):
                raise ValueError(f"{name} must be a scalar or have shape ({d},) to match the state, "
                                 f"got shape {jnp.shape(value)}")


def _real(name, value, shapes):
    """``value`` as given (it may be traced), after checking that it is real with an allowed rank."""
    if isinstance(value, (str, bytes, bool)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    try:
        shape, dtype = np.shape(value), jnp.result_type(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number or array, got {value!r}") from None
    if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
        raise ValueError(f"{name} must be real, got dtype {dtype}")
    if len(shape) not in shapes:
        raise ValueError(f"{name} must be a {' or '.join(('scalar', 'vector')[r] for r in shapes)}, "
                         f"got shape {shape}")
    return value


def _literal(value, identity) -> bool:
    """True for a Python number equal to the identity value (no step is compiled for it)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == identity


def dynamics(decay=None, additive_noise=None, process_noise=None, decay_to=None, noise_discount=None) -> Dynamics:
    """Validated :class:`Dynamics` (module docstring); concrete values are checked here, traced ones
    at each step by the filter.

    Args:
      decay: ``gamma``, a real scalar (1 or ``None``: no decay).
      additive_noise: ``q >= 0``, a scalar (``Q = q I``) or a (d,) vector (``Q = diag(q)``).
      process_noise: ``eta >= 0``, a scalar: ``P <- (1 + eta) P`` first ([LRVGA] Remark 1).
      decay_to: ``m``, the mean the decay pulls towards: a scalar or a (d,) vector (default 0);
        needs ``decay``.
      noise_discount: ``delta`` in (0, 1], a scalar: the learned noise variance's statistics are
        multiplied by it before each observation (1 or ``None``: none; :mod:`jaxrvga.noise`).

    Returns:
      A :class:`Dynamics`; a field whose value does nothing (``decay=1``, ``additive_noise=0``, ...) is left out.
    """
    values = {"decay": (decay, (0,), 1.0), "additive_noise": (additive_noise, (0, 1), 0.0),
              "process_noise": (process_noise, (0,), 0.0), "decay_to": (decay_to, (0, 1), None),
              "noise_discount": (noise_discount, (0,), 1.0)}
    fields = {}
    for name, (value, shapes, identity) in values.items():
        if value is None or (identity is not None and _literal(value, identity)):
            continue
        value = _real(name, value, shapes)
        if is_concrete(value):
            a = np.asarray(value, dtype=float)
            nonnegative = name in ("additive_noise", "process_noise")
            if not np.all(np.isfinite(a)) or (nonnegative and np.any(a < 0)):
                raise ValueError(f"{name} must be {'>= 0 and ' if nonnegative else ''}finite, got {value!r}")
            if name == "noise_discount" and not (np.finfo(np.float64).tiny <= a <= 1):
                raise ValueError(f"noise_discount must be in (0, 1] and a normal float (not subnormal: the "
                                 f"statistics would flush to 0), got {value!r}")
        fields[name] = value
    if decay_to is not None and decay is None:
        raise ValueError("decay_to is the mean that decay pulls towards: give decay too")
    if "decay" not in fields:
        fields.pop("decay_to", None)  # decay = 1 pulls towards nothing
    return Dynamics(**fields)


__all__ = ["Dynamics", "dynamics"]
