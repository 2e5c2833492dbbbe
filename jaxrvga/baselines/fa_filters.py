"""The factor-analysis filters of the EM comparison of [LRVGA] (Fig. 1, App. C and E), over a stream.

* :func:`recursive_em` - Algorithm 1 (:func:`~jaxrvga.kernels.factor_analysis.recursive_em_step`)
  as a :class:`~jaxrvga.core.Filter`, accumulating a precision (``alpha = beta = 1``) or a
  moving-average covariance (``alpha = (t-1)/t``, ``beta = 1/t``, App. C eq. 101).
* :func:`online_fa_em` - the online EM of Cappé & Moulines for FA (App. E, eqs. 110-116).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from ..core import Filter
from ..kernels import lowrank
from ..kernels.factor_analysis import PSI_FLOOR, chol_inverse, psi_floor_value, recursive_em_step, rowdot
from ..validation import check_choice, check_nonnegative, positive_int
from .batch_fa import check_factors
from .. import io


class FAState(NamedTuple):
    """State of a recursive FA filter: ``W`` (d, p), ``psi`` (d,), ``step`` = samples seen."""

    W: jax.Array
    psi: jax.Array
    step: jax.Array


def recursive_em(inner_loops: int = 1, mode: str = "covariance", process_noise=None, *,
                 psi_floor: float = PSI_FLOOR) -> Filter:
    """Algorithm 1 of [LRVGA] run over a data stream ``x_1, x_2, ...`` as a :class:`Filter`.

    ``mode="covariance"`` ([LRVGA] §5.1, App. C eq. 101): a moving-average second moment,
    ``W_t W_t^T + Psi_t ~FA~ (t-1)/t (W_{t-1} W_{t-1}^T + Psi_{t-1}) + (1/t) x_t x_t^T``.
    Because ``alpha_1 = 0`` the initial pair is only the EM starting point.

    ``mode="precision"`` (eq. 26): accumulated information,
    ``W_t W_t^T + Psi_t ~FA~ W_{t-1} W_{t-1}^T + Psi_{t-1} + x_t x_t^T`` (``alpha = beta = 1``).
    ``process_noise = eta > 0`` makes it a fading-memory filter ([LRVGA] Remark 1):
    ``P_{t|t-1} = P_{t-1} + eta P_{t-1}`` scales the previous precision by
    ``alpha_t = 1 / (1 + eta)``.

    ``init(W0, psi0) -> FAState``; ``update(state, x, y=None)`` with ``x`` (d,) or (d, m)
    (``y`` is ignored; :func:`jaxrvga.run` needs some ``ys`` of matching length).

    Args:
      inner_loops: EM iterations per observation, >= 1.
      mode: ``"covariance"`` or ``"precision"``.
      process_noise: ``eta >= 0`` of the ``"precision"`` mode (None: none).
      psi_floor: the relative floor of ``psi``.

    Returns:
      A :class:`~jaxrvga.Filter` of :class:`FAState`.
    """
    check_choice("mode", mode, ("covariance", "precision"))
    inner_loops = positive_int("inner_loops", inner_loops)
    if mode == "covariance" and process_noise is not None:
        raise ValueError("process_noise applies to mode='precision' only")
    check_nonnegative("process_noise", process_noise)
    eta = 0.0 if process_noise is None else process_noise

    def init(W, psi):
        W, psi = check_factors(W, psi)
        return FAState(W, psi, jnp.asarray(0, jnp.int32))

    def update(state, x, y=None):
        del y
        t = (state.step + 1).astype(state.W.dtype)
        alpha, beta = ((t - 1) / t, 1 / t) if mode == "covariance" else (1 / (1 + eta), 1.0)
        W, psi = recursive_em_step(state.W, state.psi, x, alpha, beta, inner_loops,
                                   psi_floor=psi_floor)
        return FAState(W, psi, state.step + 1)

    return Filter(init, update)


class OnlineFAState(NamedTuple):
    """State of :func:`online_fa_em`.

    ``W, psi``: the parameters used by the next E-step. ``S2`` (d, p), ``S3`` (p, p),
    ``s1`` (d,): running sufficient statistics (eq. 110-111; ``S2`` is stored transposed).
    ``W_avg, psi_avg``: the estimate to report (the Polyak-Ruppert average once averaging
    has started, the current iterate before).
    """

    W: jax.Array
    psi: jax.Array
    S2: jax.Array
    S3: jax.Array
    s1: jax.Array
    W_avg: jax.Array
    psi_avg: jax.Array
    step: jax.Array


def online_fa_em(num_steps: Optional[int] = None, averaging: Optional[str] = "paper",
                 average_start: Optional[int] = None, step_exponent: float = 0.6, *,
                 psi_floor: float = PSI_FLOOR) -> Filter:
    """Online EM of Cappé & Moulines (2009) for FA, as in [LRVGA] App. E (eqs. 102-116).

    For the t-th sample ``v`` (0-based ``t = state.step``), with step
    ``gamma_t = 1`` if ``t == 0`` else ``t^{-step_exponent}`` (eqs. 113-114, 0.6 in the paper):

        M  = I_p + W^T Psi^{-1} W;   Ez = M^{-1} W^T Psi^{-1} v
        S2 = (1 - gamma) S2 + gamma v Ez^T           (eq. 110; the paper's "mu_{t-1}" is S2)
        S3 = (1 - gamma) S3 + gamma (M^{-1} + Ez Ez^T)
        s1 = (1 - gamma) s1 + gamma v * v            (eq. 111)
        W_new = S2 S3^{-1};   psi_new = s1 - rowdot(W_new, S2)

    Averaging (eqs. 115-116, with the running average on the right-hand side):

    * ``"paper"``: Polyak-Ruppert averaging of the iterates for ``t > average_start``
      (default ``num_steps // 2``, i.e. t > N/2), kept in ``W_avg, psi_avg`` "in
      post-processing": the E-step keeps using the un-averaged iterate.
    * ``"code"``: the authors' code: averaging for ``t > average_start`` (default 500,
      hard-coded there) and the *averaged* parameters are fed back into the next E-step.
    * ``None``: no averaging.

    One E/M iteration per sample, O(d p^2 + p^3) time, memory ~ 2 d p (``S2`` and ``W``).
    ``init(W0, psi0)``; ``update(state, v, y=None)`` with ``v`` of shape (d,).

    Args:
      num_steps: the length of the stream (sets the default ``average_start`` of ``"paper"``).
      averaging: ``"paper"``, ``"code"`` or None.
      average_start: the step after which the iterates are averaged.
      step_exponent: the exponent of the step size ``t^{-step_exponent}``.
      psi_floor: the relative floor of ``psi``.

    Returns:
      A :class:`~jaxrvga.Filter` of :class:`OnlineFAState`.
    """
    check_choice("averaging", averaging, ("paper", "code", None))
    if not 0.5 < step_exponent <= 1.0:
        raise ValueError(f"step_exponent must lie in (0.5, 1] (Robbins-Monro), got {step_exponent}")
    if averaging == "paper":
        if average_start is None:
            if num_steps is None:
                raise ValueError("online_fa_em(averaging='paper') needs num_steps (averaging starts "
                                 "after num_steps // 2) or average_start")
            average_start = int(num_steps) // 2
    elif averaging == "code" and average_start is None:
        average_start = 500

    def init(W, psi):
        W, psi = check_factors(W, psi)
        d, p = W.shape
        zeros = jnp.zeros
        # The averages start at (W, psi) but own their buffers: leaves that alias one another
        # cannot be donated to jaxrvga.run(..., donate=True).
        return OnlineFAState(W, psi, zeros((d, p), W.dtype), zeros((p, p), W.dtype),
                             zeros((d,), W.dtype), jnp.array(W, copy=True), jnp.array(psi, copy=True),
                             jnp.asarray(0, jnp.int32))

    def update(state, v, y=None):
        del y
        v = jnp.asarray(v, dtype=state.W.dtype)
        if v.shape != state.psi.shape:
            raise ValueError(f"online_fa_em: x must have shape {state.psi.shape}, got {v.shape}")
        t = state.step
        tf = t.astype(v.dtype)
        gamma = jnp.where(t == 0, 1.0, jnp.maximum(tf, 1.0) ** (-step_exponent))
        fac = lowrank.factorize(state.W, state.psi)
        Minv = chol_inverse(fac.chol)
        Ez = Minv @ ((v / state.psi) @ state.W)
        S2 = (1 - gamma) * state.S2 + gamma * jnp.outer(v, Ez)
        S3 = (1 - gamma) * state.S3 + gamma * (Minv + jnp.outer(Ez, Ez))
        s1 = (1 - gamma) * state.s1 + gamma * v * v
        W_new = S2 @ chol_inverse(jnp.linalg.cholesky(S3))
        psi_new = jnp.maximum(s1 - rowdot(W_new, S2), psi_floor_value(s1, psi_floor))

        if averaging is None:
            W_avg, psi_avg = W_new, psi_new
        else:
            t_tilde = jnp.maximum(tf - average_start, 1.0)
            on = t > average_start
            w = jnp.where(on, (t_tilde - 1) / t_tilde, 0.0)
            W_avg = w * state.W_avg + (1 - w) * W_new
            psi_avg = w * state.psi_avg + (1 - w) * psi_new
        W_next, psi_next = (W_avg, psi_avg) if averaging == "code" else (W_new, psi_new)
        return OnlineFAState(W_next, psi_next, S2, S3, s1, W_avg, psi_avg, t + 1)

    return Filter(init, update)


io.register(FAState, io.factors_check, former=("jaxrvga.factor_analysis",))
io.register(OnlineFAState, former=("jaxrvga.factor_analysis",))

__all__ = ["FAState", "recursive_em", "OnlineFAState", "online_fa_em"]
