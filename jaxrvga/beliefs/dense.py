"""The dense belief ``N(mean, cov)``: its state and its algebra, O(d^2) ([RVGA])."""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..core import NoiseStats, SolverInfo, solver_info
from ..dynamics import Dynamics
from .. import file_checks as fc
from ..validation import check_cov, check_float_array
from .base import antithetic_normals, check_mean, check_state_fields, no_projection, register_state, symmetrize


class GaussianState(NamedTuple):
    """State of a full-covariance filter: belief ``N(mean, cov)`` after ``step`` observations.

    ``info`` reports the last inner solve (always converged for closed-form updates);
    ``key`` is the PRNG key of Monte-Carlo filters (``None`` otherwise). ``noise``: the
    :class:`NoiseStats` of a model whose noise variance is learned, the belief then being
    ``theta | s2 ~ N(mean, s2 cov)`` (:mod:`jaxrvga.noise`); ``None`` otherwise.
    """

    mean: jax.Array
    cov: jax.Array
    step: jax.Array
    info: SolverInfo
    key: Optional[jax.Array] = None
    noise: Optional[NoiseStats] = None


def _stored_pd(cov):
    """``cov`` (d, d) as stored is positive definite to the resolution of its dtype.

    Its Cholesky factor is finite and every pivot ``L_jj^2`` is at least ``2 d eps cov_jj``: a
    Cholesky factorisation in floating point also succeeds for matrices with eigenvalues slightly
    below 0 (about ``-1e-9 max diag`` in float32), and a pivot that small relative to its diagonal
    is rounding noise. Scale-free (a diagonal rescaling of ``cov`` scales the pivots with the
    diagonal). The certificate of the multi-column steps of :meth:`Dense.add`, one d x d
    factorisation.
    """
    L = jnp.linalg.cholesky(cov)
    eps = jnp.finfo(cov.dtype).eps
    pivots = jnp.diagonal(L) ** 2
    return jnp.all(jnp.isfinite(L)) & jnp.all(pivots >= 2 * cov.shape[0] * eps * jnp.diagonal(cov))


def _eigen_root(cov):
    """``U diag(sqrt(max(w, 0)))`` (``cov = U diag(w) U^T``), batched over leading axes: a root of a
    semidefinite ``cov``, its negative rounding clipped to 0."""
    w, U = jnp.linalg.eigh(0.5 * (cov + jnp.swapaxes(cov, -1, -2)))
    return U * jnp.sqrt(jnp.maximum(w, 0.0))[..., None, :]


def sqrt_factor(cov):
    """A square root ``R`` of ``cov`` (..., d, d), ``R R^T = cov``: the lower Cholesky factor, O(d^3 / 3),
    or, where the factor of any matrix of the batch is not finite (a singular or semidefinite ``cov``:
    a zero pivot), the eigen-root ``U diag(sqrt(max(w, 0)))`` of every one, about ten times the cost.

    One ``lax.cond`` on a scalar chooses the route for the whole batch, so it is a real branch also for
    a batch of covariances (a fleet of beliefs); under ``jax.vmap`` of this function the cond becomes
    a select that computes both routes: pass the batch instead (as :mod:`jaxrvga.bandits` does).

    Args:
      cov: covariances, (..., d, d), symmetric positive semidefinite.

    Returns:
      ``R``, (..., d, d).
    """
    L = jnp.linalg.cholesky(cov)
    return jax.lax.cond(jnp.all(jnp.isfinite(L)), _cholesky_root, _eigen_root_of, cov, L)


def _cholesky_root(cov, L):
    """:func:`sqrt_factor`'s route where the Cholesky factor ``L`` is finite (a module-level function, so
    that an eager call traces its ``lax.cond`` once, not on every call)."""
    return L


def _eigen_root_of(cov, L):
    """:func:`sqrt_factor`'s route where ``L`` is not finite: :func:`_eigen_root` of ``cov``."""
    return _eigen_root(cov)


class Dense(NamedTuple):
    """Full-covariance belief ``N(mean, cov)`` ([RVGA] Alg. 1); state :class:`~jaxrvga.beliefs.GaussianState`."""

    state_type = GaussianState

    @classmethod
    def example(cls, dim: int, rng):
        """A belief of this class and its ``init`` factors for ``dim`` dimensions, drawn from the NumPy
        generator ``rng``: a covariance ``A A^T / dim + I / 2`` (what the conformance tests run).

        Returns:
          ``(belief, factors)``, so that ``belief.init(mean, *factors)`` is a valid state.
        """
        A = rng.normal(size=(dim, dim))
        return cls(), (A @ A.T / dim + 0.5 * np.eye(dim),)

    def init(self, mean, cov, key=None) -> GaussianState:
        """Initial state ``N(mean, cov)``; ``cov`` must be symmetric positive definite (checked where concrete)."""
        mean = check_mean(mean)
        if jnp.ndim(cov) < 2:
            raise ValueError(f"cov must be a (d, d) covariance matrix, got shape {jnp.shape(cov)}: for a belief "
                             f"given by its variances use jr.diag_rvga(model).init(mean, var) (diagonal, O(d)), "
                             f"or pass jnp.diag(var) for a dense one")
        cov = check_cov("cov", cov, mean.shape[0]).astype(mean.dtype)
        return GaussianState(mean, cov, jnp.zeros((), jnp.int32), solver_info(mean.dtype), key)

    def predict(self, state, dynamics: Dynamics):
        """``N(gamma mu + (1 - gamma) m, s P + Q)``, ``s = gamma^2 (1 + eta)``: the Kalman prediction with
        ``F = gamma I`` after the inflation of [LRVGA] Remark 1 (:mod:`jaxrvga.dynamics`)."""
        s, q = dynamics.cov_scale(state.cov.dtype), dynamics.additive_variance(state.cov.dtype)
        cov = state.cov if s is None else s * state.cov
        if q is not None:
            d = cov.shape[0]
            cov = cov.at[jnp.diag_indices(d)].add(jnp.broadcast_to(q, (d,)))
        return state._replace(mean=dynamics.predict_mean(state.mean), cov=cov)

    def marginal(self, state, X):
        """``(X mean, diag(X P X^T))`` for inputs ``X`` ((m, d), or one input (d,))."""
        return X @ state.mean, jnp.sum(X * (X @ state.cov), axis=-1)

    def sandwich(self, state, J):
        """``J P J^T`` (k, k) for ``J`` (k, d), symmetrised."""
        return symmetrize(J @ (state.cov @ J.T))

    def solve(self, state, g):
        """``P g``."""
        return state.cov @ g

    def base_draws(self, key, num: int, dim: int, dtype):
        """Base draws of :meth:`draw`: ``num`` antithetic standard normal rows of length ``dim``."""
        return antithetic_normals(key, num, dim, dtype)

    def draw(self, state, z):
        """Draws ``mean + L z`` (``P = L L^T``) from base draws ``z`` (:meth:`base_draws`), shape (num, d)."""
        return state.mean + z @ jnp.linalg.cholesky(state.cov).T

    def sample(self, state, key, num: int):
        """``num`` independent draws ``mean + R z``, ``z ~ N(0, I)``, ``R R^T = P`` (:func:`sqrt_factor`: a
        Cholesky factor, the eigen-decomposition only where it is not finite, so that a singular ``P``,
        even 0, is fine), shape (num, d)."""
        z = jax.random.normal(key, (num, state.mean.shape[0]), dtype=state.mean.dtype)
        return state.mean + z @ sqrt_factor(state.cov).T

    def variances(self, state):
        """``diag(P)``, the marginal variances (d,)."""
        return jnp.diagonal(state.cov)

    def shift_precision(self, state, delta):
        """The precision ``P^{-1} + diag(delta)`` (``delta`` (d,), of either sign), the mean unchanged:
        ``P_new = (I + P diag(delta))^{-1} P``, no inverse of ``P`` formed. Returns ``(state, ok)``, ``ok``
        False where ``P_new`` is not finite and positive definite."""
        A = jnp.eye(state.cov.shape[0], dtype=state.cov.dtype) + state.cov * delta[None, :]
        cov = symmetrize(jnp.linalg.solve(A, state.cov))
        ok = jnp.all(jnp.isfinite(jnp.linalg.cholesky(cov)))
        return state._replace(cov=cov), ok

    def add(self, state, X, c):
        """``P_new^{-1} = P^{-1} + X diag(c) X^T`` by Woodbury; ``c`` may be negative (a non-log-concave site).

        Returns ``(state, ok)``; ``ok`` is False where the result would not be positive definite
        (rank one: ``1 + c x^T P x <= 0`` up to rounding) or not finite: it certifies the new
        covariance, which the guard then does not read again (:meth:`checked_fields`).
        """
        new, ok, _ = self._add(state, X, c, state.cov @ X)
        return new, ok

    def _add(self, state, X, c, V):
        """:meth:`add` given ``V = P X`` (d, m); also returns ``K`` (m, m) with ``P_new = P - V K V^T``
        (``None`` for the information form, m > d)."""
        c = jnp.ones(X.shape[1], X.dtype) if c is None else c
        if X.shape[1] == 1:  # every GLM site: the rank-one form of [RVGA] eqs. (64)-(65)
            nu0 = X[:, 0] @ V[:, 0]
            s = c[0] / (1.0 + c[0] * nu0)
            nu = nu0 * (1.0 - s * nu0)  # x^T P_new x
            ok = jnp.isfinite(s) & jnp.isfinite(nu0) & (s * nu0 <= 1.0)  # == 1 only by rounding
            ok = ok & self._resolvable(state.cov, X, nu[None]) & _no_overflow(state.cov, s, V[:, 0])
            s, v = jax.lax.cond(ok, lambda s, v: (s, v), lambda s, v: (0.0 * s, 0.0 * v), s, V[:, 0])
            return state._replace(cov=state.cov - s * jnp.outer(v, v)), ok, s[None, None]
        if X.shape[1] <= X.shape[0]:  # Woodbury in the m-dimensional space of the columns
            A = X.T @ V
            K = jnp.linalg.solve(jnp.eye(X.shape[1], dtype=A.dtype) + c[:, None] * A, jnp.diag(c))
            K = symmetrize(K)
            cov = symmetrize(state.cov - V @ K @ V.T)
            nu = jnp.diagonal(A) - jnp.sum(A * (A @ K), axis=0)  # diag(X^T P_new X)
            ok = jnp.all(jnp.isfinite(cov)) & jnp.all(jnp.diagonal(cov) > 0) & self._resolvable(state.cov, X, nu)
            ok = ok & _stored_pd(cov)  # the columns' own variances miss a collinear pair's difference
            return state._replace(cov=cov), ok, K
        # more columns than parameters (many samples): information form, d x d solves
        eye = jnp.eye(X.shape[0], dtype=X.dtype)
        prec = jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(state.cov), True), eye) + (X * c) @ X.T
        cov = symmetrize(jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(symmetrize(prec)), True), eye))
        return state._replace(cov=cov), jnp.all(jnp.isfinite(cov)) & _stored_pd(cov), None

    @staticmethod
    def _resolvable(cov, X, nu):
        """The new variances along the columns of ``X``, ``nu_i / |x_i|^2``, exceed the rounding of ``cov``.

        A covariance stored with entries up to ``max diag(P)`` carries rounding errors of about
        ``2 d eps max diag(P)`` in its eigenvalues; a step that creates a smaller variance cannot be
        stored positive definite in this dtype (e.g. float32 with prior variance 1e4 and inputs of
        size 1e3), so it is refused (and flagged) rather than applied.
        """
        eps = jnp.finfo(cov.dtype).eps
        floor = 2.0 * cov.shape[0] * eps * jnp.max(jnp.diagonal(cov))
        return jnp.all(nu >= floor * jnp.sum(X * X, axis=0))

    def absorb(self, prior, X, c, g, prior_gain: bool = False):
        """:meth:`add` and the mean step ``mu + P g``, in one pass over ``P``: ``P [X, g]`` gives
        ``V = P X`` and ``P g``, and ``P_new g = P g - V K (V^T g)`` (O(d m)); returns ``(state, ok)``."""
        PXg = prior.cov @ jnp.concatenate([X, g[:, None]], axis=1)
        V, Pg = PXg[:, :-1], PXg[:, -1]
        new, ok, K = self._add(prior, X, c, V)
        if prior_gain:
            step = Pg
        elif K is None:
            step = new.cov @ g
        else:
            step = Pg - V @ (K @ (V.T @ g))
        return new._replace(mean=prior.mean + step), ok

    def finish(self, state):
        """Nothing to project: returns ``(state, no_projection(...))``."""
        return state, no_projection(state.mean.dtype)

    def settle(self, prior, new, ok):
        """``new`` where ``ok``, else ``prior`` (its key advanced to ``new``'s), leaf by leaf: a ``where``
        that XLA fuses with the rank-one update that produced ``new.cov`` (one pass over ``P``)."""
        kept = prior._replace(key=new.key)
        pick = lambda a, b: a if a is b else jnp.where(ok, a, b)  # noqa: E731
        return jax.tree_util.tree_map(pick, new, kept), no_projection(prior.mean.dtype)

    def checked_fields(self, state):
        """The fields whose finiteness the guard checks: the mean (the covariance is certified by the
        ``ok`` of :meth:`add` and left as it was by :meth:`finish`)."""
        return (state.mean,)

    def positive(self, state):
        """``diag(P) > 0`` (a necessary condition of positive definiteness, O(d))."""
        return jnp.all(jnp.diagonal(state.cov) > 0)


def _no_overflow(cov, s, v):
    """``cov - s v v^T`` cannot overflow: ``|s| max v_i^2`` and ``max diag(cov)`` (which bounds every
    entry of a positive definite ``cov``) are each at most a quarter of the dtype's largest value."""
    big = jnp.finfo(cov.dtype).max / 4
    return (jnp.abs(s) * jnp.max(v * v) <= big) & (jnp.max(jnp.diagonal(cov)) <= big) & jnp.all(jnp.isfinite(v))


# --------------------------------------------------------------------------- read and saved

def read_dense(state, mean):
    """The belief that reads a :class:`GaussianState` and the state with its belief arrays only (checked
    where concrete; :func:`~jaxrvga.beliefs.of_state`)."""
    d = mean.shape[0]
    cov = check_float_array("state.cov", state.cov)
    if cov.shape != (d, d):
        raise ValueError(f"state.cov must have shape {(d, d)} to match the mean, got {cov.shape}")
    return Dense(), GaussianState(mean, check_cov("state.cov", cov, d, semidefinite=True), None, None)


def _check_gaussian(st):
    """Shapes and dtypes of ``GaussianState``; finite mean and a finite, symmetric, positive
    definite covariance (every filter state is, by its guard)."""
    fc.check_moments(st)
    m = fc.shape_of(st.mean)
    fc.finite("mean", st.mean)
    fc.symmetric_pd("cov", st.cov)
    check_state_fields(st, m[:-1])


register_state(GaussianState, read_dense, _check_gaussian, former=("jaxrvga.core",))


__all__ = ['GaussianState', 'Dense', 'sqrt_factor']
