"""The mean-field belief ``N(mean, diag(psi)^{-1})``: its state and its algebra, O(d)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from ..core import NoiseStats, SolverInfo, solver_info
from ..dynamics import Dynamics
from ..kernels import lowrank
from .. import file_checks as fc
from ..validation import check_float_array, check_invertible, check_positive
from .base import (antithetic_normals, check_mean, check_state_fields, finish_or_keep, no_projection, pivots_resolved,
                   psi_min, register_state, symmetrize)


class DiagonalState(NamedTuple):
    """State of a mean-field filter: ``N(mean, diag(psi)^{-1})``, ``psi`` (d,) the precisions.

    O(d) memory; ``info``, ``key`` and ``noise`` as in :class:`GaussianState`.
    """

    mean: jax.Array
    psi: jax.Array
    step: jax.Array
    info: SolverInfo
    key: Optional[jax.Array] = None
    noise: Optional[NoiseStats] = None


class Diagonal(NamedTuple):
    """Mean-field belief ``N(mean, diag(psi)^{-1})``; state :class:`~jaxrvga.beliefs.DiagonalState`, O(d).

    Each step keeps the diagonal of the new precision, ``psi + diag(X diag(c) X^T)`` (the
    KL-optimal diagonal Gaussian given that precision: mean-field R-VGA, the variational diagonal
    EKF for the ``ekf`` scheme), and takes the mean step with the unprojected new precision
    ``diag(psi) + X diag(c) X^T`` by Woodbury (:meth:`absorb`), as :class:`LowRank` does: with the
    diagonal alone the step ignores the correlations it adds and overshoots by up to a factor d on
    correlated inputs. Where every increment is diagonal (inputs along the axes, ``c >= 0``) it is
    the dense belief exactly.
    """

    state_type = DiagonalState

    @classmethod
    def example(cls, dim: int, rng):
        """A belief of this class and its ``init`` factors for ``dim`` dimensions, drawn from the NumPy
        generator ``rng``: variances uniform in [0.3, 2] (what the conformance tests run).

        Returns:
          ``(belief, factors)``, so that ``belief.init(mean, *factors)`` is a valid state.
        """
        return cls(), (rng.uniform(0.3, 2.0, dim),)

    def init(self, mean, var, key=None) -> DiagonalState:
        """Initial state ``N(mean, diag(var))``: ``var`` the (d,) prior variances (a scalar broadcasts), > 0."""
        mean = check_mean(mean)
        var = jnp.asarray(var)
        if jnp.iscomplexobj(var):
            raise ValueError("var must be real")
        if var.ndim > 1 or (var.ndim == 1 and var.shape != mean.shape):
            raise ValueError(f"var must be a scalar or have shape {mean.shape} to match the mean, got {var.shape}")
        var = check_invertible("var", jnp.broadcast_to(var.astype(mean.dtype), mean.shape))
        return DiagonalState(mean, 1.0 / var, jnp.zeros((), jnp.int32), solver_info(mean.dtype), key)

    def predict(self, state, dynamics: Dynamics):
        """The prediction of :mod:`jaxrvga.dynamics`: variances ``s / psi + q``, i.e.
        ``psi' = psi / (s + q psi)``; ``psi`` floored at :func:`psi_min` as :meth:`LowRank.predict` does."""
        state = state._replace(mean=dynamics.predict_mean(state.mean))
        s, q = dynamics.cov_scale(state.psi.dtype), dynamics.additive_variance(state.psi.dtype)
        if s is None and q is None:
            return state
        psi = state.psi / ((1.0 if s is None else s) + (0.0 if q is None else q) * state.psi)
        return state._replace(psi=jnp.maximum(psi, psi_min(psi.dtype)))

    def marginal(self, state, X):
        """``(X mean, diag(X P X^T))`` for inputs ``X`` (m, d): ``(X * X) / psi`` summed."""
        return X @ state.mean, (X * X) @ (1.0 / state.psi)

    def sandwich(self, state, J):
        """``J P J^T = J diag(1 / psi) J^T`` (k, k) for ``J`` (k, d), symmetrised."""
        return symmetrize((J * (1.0 / state.psi)) @ J.T)

    def solve(self, state, g):
        """``P g = g / psi``."""
        return g / state.psi

    def base_draws(self, key, num: int, dim: int, dtype):
        """Base draws of :meth:`draw`: ``num`` antithetic standard normal rows of length ``dim``."""
        return antithetic_normals(key, num, dim, dtype)

    def draw(self, state, z):
        """Draws ``mean + z / sqrt(psi)`` from base draws ``z`` (num, d)."""
        return state.mean + z / jnp.sqrt(state.psi)

    def sample(self, state, key, num: int):
        """``num`` independent draws ``mean + z / sqrt(psi)``, shape (num, d)."""
        z = jax.random.normal(key, (num, state.mean.shape[0]), dtype=state.mean.dtype)
        return state.mean + z * jnp.sqrt(1.0 / state.psi)

    def variances(self, state):
        """``diag(P) = 1 / psi`` (d,)."""
        return 1.0 / state.psi

    def shift_precision(self, state, delta):
        """The precision ``diag(psi + delta)``, the mean unchanged: ``(state, ok)``, ``ok`` False where a
        precision would not be positive and finite."""
        psi = state.psi + delta
        return state._replace(psi=psi), jnp.all(jnp.isfinite(psi) & (psi > 0))

    def add(self, state, X, c):
        """``psi + diag(X diag(c) X^T)``; ``c`` may be negative. Returns ``(state, ok)``, ``ok`` False
        where a precision would not be positive and finite."""
        square = X * X
        psi = state.psi + (jnp.sum(square, axis=1) if c is None else square @ c)
        return state._replace(psi=psi), jnp.all(jnp.isfinite(psi) & (psi > 0))

    def absorb(self, prior, X, c, g, prior_gain: bool = False):
        """:meth:`add` and the mean step ``mu + Lam^{-1} g`` with the unprojected new precision
        ``Lam = diag(psi) + X diag(c_+) X^T`` (:func:`_diagonal_plus_root_solve`), or ``mu + g / psi``
        with ``prior_gain`` (``psi`` the prior's, [RVGA] eq. 76).

        ``c_+ = max(c, 0)``, as the low-rank factor's (:meth:`LowRank._pending_root`): ``Lam >= diag(psi)``
        is then positive definite for every ``c``, whereas the exact ``diag(psi) + X diag(c) X^T`` of a
        non-log-concave site need not be (the stored diagonal keeps the signed ``c``). Returns
        ``(state, ok)``, ``ok`` also False where the solve is not resolved in the dtype (:func:`pivots_resolved`).
        """
        new, ok = self.add(prior, X, c)
        if prior_gain:
            return new._replace(mean=prior.mean + g / prior.psi), ok
        root = X if c is None else X * jnp.sqrt(jnp.maximum(c, 0.0))
        step, resolved = _diagonal_plus_root_solve(prior.psi, root, g)
        return new._replace(mean=prior.mean + step), ok & resolved

    def finish(self, state):
        """Nothing to project: returns ``(state, no_projection(...))``."""
        return state, no_projection(state.mean.dtype)

    def settle(self, prior, new, ok):
        """``new`` where ``ok``, else ``prior`` (:func:`finish_or_keep`)."""
        return finish_or_keep(self, prior, new, ok)

    def checked_fields(self, state):
        """The fields whose finiteness the guard checks: the mean (``psi`` is certified by :meth:`add`)."""
        return (state.mean,)

    def positive(self, state):
        """``psi > 0``."""
        return jnp.all(state.psi > 0)


def _diagonal_plus_root_solve(psi, R, g):
    """``(diag(psi) + R R^T)^{-1} g`` for ``R`` (d, m) and whether it is resolved (:func:`pivots_resolved`), O(d m^2).

    Whitened, ``B = diag(psi)^{-1/2} R`` and ``h = g / sqrt(psi)``: ``diag(psi)^{-1/2} (I + B B^T)^{-1} h``,
    by Woodbury ([LRVGA] eq. 27) through the Cholesky factor of the m x m ``I + B^T B`` with the
    correction of :meth:`~jaxrvga.kernels.lowrank.Woodbury.solve_accurate`, or of the d x d
    ``I + B B^T`` where m >= d (exact at d = 1).
    """
    scale = jnp.sqrt(psi)
    B, h = R / scale[:, None], g / scale
    wide = B.shape[1] >= B.shape[0]
    gram = B @ B.T if wide else B.T @ B
    chol = jnp.linalg.cholesky(gram + jnp.eye(gram.shape[0], dtype=gram.dtype))
    if wide:
        z = jax.scipy.linalg.cho_solve((chol, True), h)
    else:  # Woodbury, corrected where it may cancel (Woodbury.solve_accurate)
        y = jax.scipy.linalg.cho_solve((chol, True), B.T @ h)
        z = h - B @ y

        def corrected(z):
            return z + B @ jax.scipy.linalg.cho_solve((chol, True), y - B.T @ z)

        cancels = lowrank.cancellation_bound(h @ h, gram) > lowrank.CANCELLATION_TOL
        z = jax.lax.cond(cancels, corrected, lambda z: z, z)
    return z / scale, pivots_resolved(chol, gram)


# --------------------------------------------------------------------------- read and saved

def _read_diagonal(state, mean):
    """The belief that reads a :class:`DiagonalState` and the state with its belief arrays only (checked
    where concrete; :func:`~jaxrvga.beliefs.of_state`)."""
    psi = check_positive("state.psi", check_float_array("state.psi", state.psi))
    if psi.shape != mean.shape:
        raise ValueError(f"state.psi must have shape {mean.shape} to match the mean, got {psi.shape}")
    return Diagonal(), DiagonalState(mean, psi, None, None)


def _check_diagonal(st):
    """Shapes and dtypes of ``DiagonalState``; a finite mean and precisions ``psi > 0``."""
    fc.floating("mean", st.mean)
    fc.floating("psi", st.psi)
    m = fc.shape_of(st.mean)
    fc.need(len(m) >= 1 and fc.shape_of(st.psi) == m, f"psi has shape {fc.shape_of(st.psi)}, expected {m}")
    fc.need(fc.dtype_of(st.psi) == fc.dtype_of(st.mean), "mean and psi must share one dtype")
    check_state_fields(st, m[:-1])
    fc.finite("mean", st.mean)
    fc.positive("psi", st.psi)


register_state(DiagonalState, _read_diagonal, _check_diagonal, former=("jaxrvga.core",))


__all__ = ['DiagonalState', 'Diagonal']
