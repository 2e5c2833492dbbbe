"""Reading a state as a belief (of_state, by the type of the state) and exact draws of it (sample, draws)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .. import noise as noise_belief
from ..validation import check_finite, check_float_array, check_key, positive_int
from .base import READERS
from .dense import read_dense


def of_state(state):
    """Returns ``(belief, state)``: the belief that reads ``state``, and ``state`` as that belief's
    state type (mean and belief arrays only: ``step``, ``info``, ``key`` and ``noise`` are ``None``).

    The library's states are read by their type (:class:`GaussianState` by :class:`Dense`,
    :class:`LowRankState` by :class:`LowRank`, :class:`DiagonalState` by :class:`Diagonal`); any
    other object must have fields ``(mean, cov)`` and neither ``W`` nor ``psi`` (a batch result such
    as :class:`jaxrvga.baselines.laplace.LaplaceResult`) and is read by :class:`Dense`. Checked where
    concrete: a finite mean and ``W``, ``psi > 0``, ``cov`` symmetric positive semidefinite, shapes
    (``ValueError`` naming the field). Predictions (:mod:`jaxrvga.posterior_predictive`) ask this belief.

    Args:
      state: a filter's state, or an object with fields ``(mean, cov)``.

    Returns:
      ``(belief, state)``, as above.
    """
    if not hasattr(state, "mean"):
        raise ValueError(f"state must be a Gaussian belief with a mean, got {type(state).__name__}")
    mean = check_finite("state.mean", check_float_array("state.mean", state.mean))
    if mean.ndim != 1:
        raise ValueError(f"state.mean must be a vector, got shape {mean.shape}")
    reader = next((read for cls, read in READERS.items() if isinstance(state, cls)), None)
    if reader is None:
        if not hasattr(state, "cov") or hasattr(state, "W") or hasattr(state, "psi"):
            raise ValueError("state must be a GaussianState, LowRankState or DiagonalState, or an object with "
                             f"fields (mean, cov) and no W or psi (a batch result), got {type(state).__name__} "
                             f"with fields {getattr(state, '_fields', None)}")
        reader = read_dense
    return reader(state, mean)


def draws(belief, state, stats, key, num: int, scale=1.0):
    """``(thetas (num, d), s2 (num,) or None)``: exact draws of ``N(mean, scale P)`` of ``belief`` (its
    :meth:`Belief.sample`) from ``state``; where the state has the statistics ``stats`` of a learned
    noise variance (:class:`~jaxrvga.core.NoiseStats`), ``s2 ~ InvGamma(shape, rate)`` and then
    ``theta = mean + sqrt(scale s2) z``, ``z`` a draw of ``N(0, P)``, i.e. ``theta | s2 ~ N(mean, s2
    scale P)`` (:mod:`jaxrvga.noise`).

    Args:
      belief: the :class:`Belief` that reads ``state``.
      state: its state (as :func:`of_state` returns it).
      stats: the :class:`~jaxrvga.core.NoiseStats` of a learned noise variance, or None.
      key: a PRNG key.
      num: the number of draws.
      scale: the covariance scale ``c`` (a scalar; 1 draws the belief itself).

    Returns:
      ``(thetas, s2)``: the (num, d) draws and the (num,) noise variances drawn (None without ``stats``).
    """
    if stats is None and isinstance(scale, (int, float)) and scale == 1.0:
        return belief.sample(state, key, num), None
    if stats is None:
        k_theta, s2 = key, None
        spread = jnp.sqrt(jnp.full((num, 1), scale, state.mean.dtype))
    else:
        k_theta, k_s2 = jax.random.split(key)
        s2 = noise_belief.sample_variance(stats, k_s2, num)
        spread = jnp.sqrt(scale * s2)[:, None]
    return state.mean + spread * (belief.sample(state, k_theta, num) - state.mean), s2


def sample(state, key, num: int):
    """``num`` independent exact draws of ``theta`` from the belief ``state``, shape (num, d).

    ``state``: any belief :func:`of_state` reads: a dense state or any object with ``(mean, cov)``
    (:class:`jaxrvga.LaplaceResult`), a low-rank state (drawn by the corrected Proposition 1 of
    [LRVGA], ``x + L (e - W^T x)``, in O(num d p + d p^2): no d x d array) or a diagonal state. A state
    whose model learns its noise variance (a ``noise`` field that is not ``None``, :mod:`jaxrvga.noise`)
    is the belief ``theta | s2 ~ N(mean, s2 P)``, ``s2 ~ InvGamma(shape, rate)``: each draw takes its
    own ``s2``. ``key``: a PRNG key (:func:`jax.random.key` or :func:`jax.random.PRNGKey`); ``num`` a
    positive int. Jits and vmaps over states and keys (a fleet: ``jax.vmap(jr.sample, (0, 0, None))``;
    a dense belief is drawn through its Cholesky factor, and its eigen-decomposition only where that
    factor is not finite, chosen by a ``lax.cond`` that ``vmap`` turns into computing both).

    A :func:`jaxrvga.model_average` state is the mixture of its forecasters: each draw picks the
    forecaster ``(k, s)`` with probability ``w_ks`` (:func:`jaxrvga.average.weights`), then draws
    ``theta ~ N(mean_k, c_s P_k)``, member ``k``'s belief with its covariance times the forecaster's
    scale ``c_s`` (``c = 0``: the member's mean itself, the plug-in; ``c = 1``: its own belief). For
    a GLM the predictor ``x^T theta`` of these draws has exactly the average's predictive mixture of
    :func:`jaxrvga.predictive` (the scales are predictive widths learned from the forecasters'
    scores, so a draw is as wide as the forecaster that scored well, not as the member's belief).

    Args:
      state: a belief's state, an object with ``(mean, cov)``, or a :func:`jaxrvga.model_average` state.
      key: a PRNG key.
      num: the number of draws, a positive int.

    Returns:
      The draws, a (num, d) array of the mean's dtype.
    """
    key = check_key(key, required=True, needed_by="sample", pass_as="its key argument, jax.random.key(seed)")
    return sample_of(state, key, positive_int("num", num))


@functools.singledispatch
def sample_of(state, key, num: int):
    """:func:`sample` of ``state`` once ``key`` and ``num`` are checked, dispatched on the type of
    ``state``: this one reads a belief (:func:`of_state`); a state of another kind registers its own
    (``sample_of.register(StateType)``: the mixture of :mod:`jaxrvga.average`).

    Args:
      state: a state, as :func:`sample`'s.
      key: a checked PRNG key.
      num: the checked number of draws.

    Returns:
      The draws, (num, d).
    """
    belief, st = of_state(state)
    return draws(belief, st, noise_belief.stats_of(state), key, num)[0]


__all__ = ['of_state', 'draws', 'sample', 'sample_of']
