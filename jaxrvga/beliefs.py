"""Gaussian beliefs ``N(mean, P)``: what every update scheme needs (dense, low-rank, diagonal).

A belief is a small configuration object whose methods act on a state (a NamedTuple pytree):

* :class:`Dense` - full covariance, :class:`~jaxrvga.core.GaussianState` ``(mean, cov)``, O(d^2);
* :class:`LowRank` - precision ``W W^T + diag(psi)``, :class:`~jaxrvga.core.LowRankState`, O(d p);
* :class:`Diagonal` - precision ``diag(psi)`` (mean field), :class:`~jaxrvga.core.DiagonalState`, O(d).

All offer the same operations (the contract :class:`Belief`; :func:`of_state` gives the belief that
reads a state, which is how :mod:`jaxrvga.predictive` asks it):

* ``predict(state, dynamics)``: the prediction step under :class:`~jaxrvga.dynamics.Dynamics`,
  ``N(gamma mu + (1 - gamma) m, gamma^2 (1 + eta) P + Q)`` (exact for every belief);
* ``marginal(state, X)``: means and variances of ``x_i^T theta`` for the rows of ``X`` (m, d);
* ``sandwich(state, J)``: ``J P J^T``; ``solve(state, g)``: ``P g``;
* ``noise(key, num, d, dtype)`` and ``draw(state, noise)``: draws of ``theta`` from base noise in
  antithetic pairs (the sampled schemes: common random numbers across passes);
  ``sample(state, key, num)``: independent exact draws (Monte-Carlo predictions);
* ``add(state, X, c)``: the precision step ``P^{-1} + X diag(c) X^T`` ([RVGA] eq. 29, [LRVGA] eq. 7),
  the mean unchanged; ``absorb(state, X, c, g, prior_gain)``: ``add`` and the mean step
  ``mu + P g`` (with the new ``P``, or the previous one with ``prior_gain``, [RVGA] eq. 76);
  ``finish(state)``: the belief's own projection of the result; ``settle(prior, new, ok)``: ``finish(new)``
  where ``ok``, else ``prior`` (the skip-and-flag guard of every filter); ``checked_fields(state)``:
  the arrays whose finiteness the guard checks (those ``add`` does not certify itself).

For the low-rank belief, ``add`` keeps the sum exactly, as the factors ``[W, X diag(sqrt c)]`` of a
higher rank, so that the mean step that follows uses the unprojected precision (by Woodbury, still
no d x d array); ``finish`` projects back to rank p by factor analysis ([LRVGA] eq. 8, Algorithm 1,
from the spectral warm start of :func:`jaxrvga.factor_analysis.spectral_em_step`).
:class:`Diagonal` keeps only the diagonal of the sum but likewise takes the mean step with the sum
itself (Woodbury through an m x m matrix).
:class:`PublishedLowRank` is the published scheme instead: ``add`` projects at once (Algorithm 1
from ``W_{t-1}``), so the mean step uses the projected precision, and ``finish`` does nothing.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from . import lowrank
from . import noise as noise_belief
from .core import DiagonalState, GaussianState, LowRankState, solver_info
from .dynamics import Dynamics
from .factor_analysis import PSI_FLOOR, recursive_em_step, spectral_em_step
from .validation import (all_finite, check_cov, check_finite, check_float_array, check_invertible, check_key,
                         check_positive, check_vector, is_concrete, positive_int)


@runtime_checkable
class Belief(Protocol):
    """The contract every belief satisfies (:class:`Dense`, :class:`LowRank`, :class:`Diagonal`); the
    schemes and the guard of :mod:`jaxrvga.filters` use nothing else. ``state_type`` is the
    NamedTuple of its states (fields ``mean``, ``step``, ``info``, ``key`` and the belief's own)."""

    state_type: type

    def init(self, mean, *factors, key=None):
        """The initial state from the mean and the belief's own factors (checked where concrete)."""

    def predict(self, state, dynamics):
        """The prediction step under :class:`~jaxrvga.dynamics.Dynamics`, exact."""

    def marginal(self, state, X):
        """``(X mean, diag(X P X^T))`` for inputs ``X`` ((m, d), or one input (d,))."""

    def sandwich(self, state, J):
        """``J P J^T`` (k, k) for ``J`` (k, d), symmetrised."""

    def solve(self, state, g):
        """``P g``."""

    def noise(self, key, num: int, dim: int, dtype):
        """Base noise of :meth:`draw`."""

    def draw(self, state, noise):
        """Draws of ``theta`` (num, d) from base noise: common random numbers across passes."""

    def sample(self, state, key, num: int):
        """``num`` independent exact draws of ``theta``, (num, d) (for Monte-Carlo estimates)."""

    def add(self, state, X, c):
        """The precision step ``P^{-1} + X diag(c) X^T`` (as the belief keeps it): ``(state, ok)``."""

    def absorb(self, prior, X, c, g, prior_gain: bool = False):
        """:meth:`add` and the mean step ``mu + P g``: ``(state, ok)``."""

    def finish(self, state):
        """The belief's projection of a step's result: ``(state, (dropped, em_loops, projected))``;
        ``projected`` is False where the projection could not be computed (a gain not finite) and
        the unprojected factors were kept, so that the guard keeps the prior (:func:`no_projection`)."""

    def settle(self, prior, new, ok):
        """:meth:`finish` of ``new`` where ``ok``, else ``prior``: ``(state, (dropped, em_loops, projected))``."""

    def checked_fields(self, state):
        """The arrays whose finiteness the guard checks, the mean first."""

    def positive(self, state):
        """Whether the belief's variances are positive (a traced bool, O(d)): checked by the guard on
        every state it keeps and every prediction."""


def _symmetric(S):
    """``(S + S^T) / 2``."""
    return 0.5 * (S + S.T)


def of_state(state):
    """Returns ``(belief, state)``: the belief that reads ``state``, and ``state`` as that belief's
    state type (mean and belief arrays only: ``step``, ``info``, ``key`` and ``noise`` are ``None``).

    Any object with fields ``(mean, cov)`` (a dense state, :class:`jaxrvga.LaplaceResult`, ...) is
    read by :class:`Dense`, ``(mean, W, psi)`` (with a cached ``gram`` where it has one) by
    :class:`LowRank`, ``(mean, psi)`` by :class:`Diagonal`. Checked where concrete: a finite mean
    and ``W``, ``psi > 0``, ``cov`` symmetric positive semidefinite, shapes (``ValueError`` naming
    the field). Predictions (:mod:`jaxrvga.predictive`) ask this belief.
    """
    if not hasattr(state, "mean"):
        raise ValueError(f"state must be a Gaussian belief with a mean, got {type(state).__name__}")
    mean = check_finite("state.mean", check_float_array("state.mean", state.mean))
    if mean.ndim != 1:
        raise ValueError(f"state.mean must be a vector, got shape {mean.shape}")
    d = mean.shape[0]
    if hasattr(state, "W") and hasattr(state, "psi"):
        W = check_finite("state.W", check_float_array("state.W", state.W))
        psi = check_positive("state.psi", check_float_array("state.psi", state.psi))
        out = LowRankState(mean, W, psi, None, None, None, getattr(state, "gram", None))
        return LowRank(W.shape[-1]), out
    if hasattr(state, "psi"):
        psi = check_positive("state.psi", check_float_array("state.psi", state.psi))
        if psi.shape != mean.shape:
            raise ValueError(f"state.psi must have shape {mean.shape} to match the mean, got {psi.shape}")
        return Diagonal(), DiagonalState(mean, psi, None, None)
    if hasattr(state, "cov"):
        cov = check_float_array("state.cov", state.cov)
        if cov.shape != (d, d):
            raise ValueError(f"state.cov must have shape {(d, d)} to match the mean, got {cov.shape}")
        return Dense(), GaussianState(mean, check_cov("state.cov", cov, d, semidefinite=True), None, None)
    raise ValueError("state must have fields (mean, cov) (dense state, LaplaceResult), (mean, W, psi) "
                     f"(low-rank state) or (mean, psi) (diagonal state), got {type(state).__name__}")


def draws(belief, state, stats, key, num: int, scale=1.0):
    """``(thetas (num, d), s2 (num,) or None)``: exact draws of ``N(mean, scale P)`` of ``belief`` (its
    :meth:`Belief.sample`) from ``state``; where the state has the statistics ``stats`` of a learned
    noise variance (:class:`~jaxrvga.core.NoiseStats`), ``s2 ~ InvGamma(shape, rate)`` and then
    ``theta = mean + sqrt(scale s2) z``, ``z`` a draw of ``N(0, P)``, i.e. ``theta | s2 ~ N(mean, s2
    scale P)`` (:mod:`jaxrvga.noise`)."""
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
    positive int. Jits and vmaps over states and keys (a fleet: ``jax.vmap(jr.sample, (0, 0, None))``).
    """
    belief, st = of_state(state)
    key = check_key(key, required=True, needed_by="sample")
    num = positive_int("num", num)
    return draws(belief, st, noise_belief.stats_of(state), key, num)[0]


def antithetic_normals(key, num: int, dim: int, dtype):
    """``num`` standard normal rows of length ``dim`` in antithetic pairs ``(z, -z)``."""
    half = jax.random.normal(key, ((num + 1) // 2, dim), dtype)
    return jnp.concatenate([half, -half])[:num]


def no_projection(dtype):
    """The report ``(dropped, em_loops, projected) = (0, 0, True)`` of a step whose belief projected
    nothing (``projected``: False only where a projection failed and kept its input)."""
    return jnp.zeros((), dtype), jnp.zeros((), jnp.int32), jnp.asarray(True)


def add_then_solve(belief, prior, X, c, g, prior_gain: bool = False):
    """``belief.add`` then the mean step ``mu + P g`` (``P`` the new covariance, or the prior's with
    ``prior_gain``). Returns ``(state, ok)``."""
    pre, ok = belief.add(prior, X, c)
    return pre._replace(mean=prior.mean + belief.solve(prior if prior_gain else pre, g)), ok


def finish_or_keep(belief, prior, new, ok):
    """``belief.finish(new)`` where ``ok``, else ``prior`` (its key advanced to ``new``'s); returns
    ``(state, (dropped, em_loops, projected))``.

    One conditional, so that a low-rank projection can rewrite the prior's ``W`` and ``psi`` in
    place (no second d x p buffer): when ``new`` holds them in its pending factor, they enter the
    branch once, through ``new`` (passed twice, XLA copies them, and the projection's row-block loop
    then copied ``psi`` in every block).
    """
    shared = isinstance(getattr(new, "W", None), tuple) and new.W[0] is prior.W and new.psi is prior.psi
    rest = prior._replace(W=None, psi=None) if shared else prior

    def keep(new, rest):
        back = rest._replace(W=new.W[0], psi=new.psi) if shared else rest
        return back._replace(key=new.key), no_projection(prior.mean.dtype)

    return jax.lax.cond(ok, lambda new, rest: belief.finish(new), keep, new, rest)


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


def _check_mean(mean):
    """A finite real vector with at least one entry."""
    mean = check_finite("mean", check_vector("mean", mean))
    if mean.shape[0] == 0:
        raise ValueError("mean must have at least one entry (d >= 1)")
    return mean


#: Dtypes of the low-rank belief: its projection and Woodbury solves factorise p x p matrices
#: (Cholesky, eigh), which JAX's LAPACK kernels offer in float32 and float64 only.
LOWRANK_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _check_lowrank_dtype(dtype):
    """The low-rank belief runs in float32 or float64 (:data:`LOWRANK_DTYPES`): bfloat16 and
    float16 would fail at the first step with JAX's NotImplementedError."""
    if np.dtype(dtype) not in LOWRANK_DTYPES:
        raise ValueError(f"mean has dtype {np.dtype(dtype).name}; the low-rank belief supports float32 and "
                         f"float64 (its p x p factorisations have no {np.dtype(dtype).name} kernel): cast "
                         f"mean, W and psi")


def psi_min(dtype):
    """The absolute floor of ``psi`` after a prediction step: ``sqrt(tiny)`` of ``dtype`` (1e-19 in
    float32), so that ``1 / psi`` and the whitened Gram of a unit-scale ``W`` stay finite."""
    return jnp.sqrt(jnp.finfo(dtype).tiny).astype(dtype)


class Dense(NamedTuple):
    """Full-covariance belief ``N(mean, cov)`` ([RVGA] Alg. 1); state :class:`~jaxrvga.core.GaussianState`."""

    state_type = GaussianState

    def init(self, mean, cov, key=None) -> GaussianState:
        """Initial state ``N(mean, cov)``; ``cov`` must be symmetric positive definite (checked where concrete)."""
        mean = _check_mean(mean)
        if jnp.ndim(cov) < 2:
            raise ValueError(f"cov must be a (d, d) covariance matrix, got shape {jnp.shape(cov)}: for a belief "
                             f"given by its variances use jr.diag_rvga(model).init(mean, var) (diagonal, O(d)), "
                             f"or pass jnp.diag(var) for a dense one")
        cov = check_cov("cov", cov, mean.shape[0]).astype(mean.dtype)
        return GaussianState(mean, cov, jnp.zeros((), jnp.int32), solver_info(mean.dtype), key)

    def predict(self, state, dynamics: Dynamics):
        """``N(gamma mu + (1 - gamma) m, s P + Q)``, ``s = gamma^2 (1 + eta)``: the Kalman prediction with
        ``F = gamma I`` after the inflation of [LRVGA] Remark 1 (:mod:`jaxrvga.dynamics`)."""
        s, q = dynamics.cov_scale(state.cov.dtype), dynamics.noise(state.cov.dtype)
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
        return _symmetric(J @ (state.cov @ J.T))

    def solve(self, state, g):
        """``P g``."""
        return state.cov @ g

    def noise(self, key, num: int, dim: int, dtype):
        """Base noise of :meth:`draw`: ``num`` antithetic standard normal rows of length ``dim``."""
        return antithetic_normals(key, num, dim, dtype)

    def draw(self, state, z):
        """Draws ``mean + L z`` (``P = L L^T``) from base noise ``z`` (:meth:`noise`), shape (num, d)."""
        return state.mean + z @ jnp.linalg.cholesky(state.cov).T

    def sample(self, state, key, num: int):
        """``num`` independent draws ``mean + U diag(sqrt(w)) z`` (``P = U diag(w) U^T``, so a singular
        ``P``, even 0, is fine), shape (num, d)."""
        w, U = lowrank.symmetric_eigh(state.cov)
        z = jax.random.normal(key, (num, state.mean.shape[0]), dtype=state.mean.dtype)
        return state.mean + (z * jnp.sqrt(jnp.maximum(w, 0.0))) @ U.T

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
            K = _symmetric(K)
            cov = _symmetric(state.cov - V @ K @ V.T)
            nu = jnp.diagonal(A) - jnp.sum(A * (A @ K), axis=0)  # diag(X^T P_new X)
            ok = jnp.all(jnp.isfinite(cov)) & jnp.all(jnp.diagonal(cov) > 0) & self._resolvable(state.cov, X, nu)
            ok = ok & _stored_pd(cov)  # the columns' own variances miss a collinear pair's difference
            return state._replace(cov=cov), ok, K
        # more columns than parameters (many samples): information form, d x d solves
        eye = jnp.eye(X.shape[0], dtype=X.dtype)
        prec = jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(state.cov), True), eye) + (X * c) @ X.T
        cov = _symmetric(jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(_symmetric(prec)), True), eye))
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


class LowRank(NamedTuple):
    """Limited-memory belief ``N(mean, (W W^T + diag(psi))^{-1})`` of [LRVGA]; state :class:`~jaxrvga.core.LowRankState`.

    ``rank``: p. ``inner_loops``: EM iterations of each projection (after the spectral start).
    ``fa_step(W, psi, X) -> (W, psi)``: replaces the projection (a hook for oracle tests).
    ``psi_floor``: relative floor of ``psi``. ``block_rows``: row blocks of Algorithm 1
    (:func:`jaxrvga.blocks.num_blocks`; 0 or None as there). ``buffer``: curvature columns held
    unprojected between projections (:meth:`finish`); the state's ``W`` then has ``rank + buffer``
    columns, the last ``buffer`` of them zero right after a projection. ``em_tol``: ``inner_loops``
    is a maximum and the EM stops at this relative change of ``W``
    (:func:`jaxrvga.factor_analysis.spectral_em_step`).

    The default scheme keeps the whitened Gram ``W^T Psi^{-1} W`` in the state (``state.gram``), so
    that a step's mean solve and projection share one Gram of ``[W, X]``, bordered in one pass
    over the rows for the new columns.
    """

    state_type = LowRankState

    rank: int
    inner_loops: int = 1
    fa_step: Optional[Callable] = None
    psi_floor: float = PSI_FLOOR
    block_rows: Optional[int] = None
    buffer: int = 0
    em_tol: Optional[float] = None

    @property
    def keeps_gram(self) -> bool:
        """Whether the state carries the whitened Gram (the default projection)."""
        return self.fa_step is None

    def init(self, mean, W, psi, key=None) -> LowRankState:
        """Initial state ``N(mean, (W W^T + diag(psi))^{-1})`` (shapes and values checked where concrete)."""
        mean = _check_mean(mean)
        _check_lowrank_dtype(mean.dtype)
        d = mean.shape[0]
        W = jnp.asarray(W)
        if jnp.iscomplexobj(W):
            raise ValueError("W must be real")
        W, psi = W.astype(mean.dtype), jnp.asarray(psi, dtype=mean.dtype)
        if self.rank > d:
            raise ValueError(f"rank must satisfy rank <= d = {d}, got rank={self.rank}; for a full covariance "
                             f"use jr.rvga")
        if self.rank + self.buffer > d:
            raise ValueError(f"rank + buffer must be <= d = {d}, got rank={self.rank}, buffer={self.buffer}")
        if W.shape != (d, self.rank):
            raise ValueError(f"W must have shape (d, rank) = {(d, self.rank)}, got {W.shape}")
        if is_concrete(W) and not np.all(np.isfinite(np.asarray(W))):
            raise ValueError("W must be finite")
        if psi.shape != (d,):
            raise ValueError(f"psi must have shape (d,) = {(d,)}, got {psi.shape}")
        check_invertible("psi", psi)
        gram = None
        if self.keeps_gram:
            W = jnp.pad(W, ((0, 0), (0, self.buffer))) if self.buffer else W
            gram = lowrank.whitened_gram(W, psi, self.block_rows)
        if gram is not None and is_concrete(gram) and not np.all(np.isfinite(np.asarray(gram))):
            raise ValueError(f"W and psi: the whitened Gram W^T diag(psi)^-1 W overflows in {mean.dtype} "
                             f"(W too large or psi too small); rescale them")
        return LowRankState(mean, W, psi, jnp.zeros((), jnp.int32), solver_info(mean.dtype), key, gram)

    def predict(self, state, dynamics: Dynamics):
        """The prediction of :mod:`jaxrvga.dynamics`, exact in precision form, O(d p^2).

        With ``Lam = W W^T + diag(psi)`` and ``s = gamma^2 (1 + eta)`` the predicted precision
        ``(s Lam^{-1} + Q)^{-1}`` is again diagonal plus rank p (Woodbury twice):
        ``psi' = psi / (s + q psi)`` and ``W' = diag(sqrt(s) / (s + q psi)) W L^{-T}`` with
        ``L L^T = M = I + W^T diag(q / (s + q psi)) W`` (p x p). Without ``Q`` it is the common
        scale ``(W / sqrt(s), psi / s)``, which leaves the whitened Gram as it is; with ``Q`` the
        Gram is recomputed from the new factors (one more pass over the rows).

        ``psi`` stays at or above :func:`psi_min` (``sqrt(tiny)`` of its dtype): repeated prediction
        of directions that no data reach would otherwise take it to 0 (float32: after about 126
        steps of ``eta = 1``), where no later step can be resolved (the Gram is recomputed where a
        row was floored). A state without its Gram (built by hand) gets it here.
        """
        if self.keeps_gram and state.gram is None:
            state = state._replace(gram=lowrank.whitened_gram(state.W, state.psi, self.block_rows))
        state = state._replace(mean=dynamics.predict_mean(state.mean))
        s, q = dynamics.cov_scale(state.W.dtype), dynamics.noise(state.W.dtype)
        if s is None and q is None:
            return state
        if q is None:
            W, psi, gram = state.W / jnp.sqrt(s), state.psi / s, state.gram
        else:
            W, psi = _add_noise(state.W, state.psi, 1.0 if s is None else s, q)
            gram = None if state.gram is None else lowrank.whitened_gram(W, psi, self.block_rows)
        low = psi < psi_min(psi.dtype)
        psi = jnp.where(low, psi_min(psi.dtype), psi)
        if gram is not None:  # the floored rows did not scale with W: their Gram is recomputed
            gram = jax.lax.cond(jnp.any(low), lambda: lowrank.whitened_gram(W, psi, self.block_rows), lambda: gram)
        return state._replace(W=W, psi=psi, gram=gram)

    def marginal(self, state, X):
        """``(X mean, diag(X P X^T))`` for inputs ``X`` (m, d), by Woodbury ([LRVGA] eq. 27)."""
        return X @ state.mean, lowrank.factorize(state.W, state.psi, state.gram).quad_form(X.T)

    def sandwich(self, state, J):
        """``J P J^T`` (k, k) for ``J`` (k, d) by Woodbury, symmetrised."""
        return _symmetric(J @ self.solve(state, J.T))

    def solve(self, state, g):
        """``P g`` by Woodbury ([LRVGA] eq. 27), O(d p^2) (O(d p) with a cached Gram)."""
        return lowrank.factorize(state.W, state.psi, state.gram).solve(g)

    def noise(self, key, num: int, dim: int, dtype):
        """Base noise of :meth:`draw`: ``(z, key_e)``, ``z`` (num, d) antithetic standard normals and
        the key of the noise ``e`` (one column per column of ``W``, drawn by :meth:`draw`)."""
        kz, ke = jax.random.split(key)
        return antithetic_normals(kz, num, dim, dtype), ke

    def draw(self, state, noise):
        """Draws by the corrected Proposition 1 of [LRVGA] from base noise (:meth:`noise`), shape (num, d).

        Column j of ``e`` comes from ``fold_in(key_e, j)``, so the same noise gives the same ``e``
        for the shared columns of beliefs of different ranks (the unprojected beliefs of an
        iterated scheme): common random numbers across its passes. The draws depend on the basis
        of ``W`` (``W Q``, ``Q`` orthogonal, is the same belief but maps ``e`` to other draws), so a
        rounding that rotates ``W`` at a projection changes them; for that reason the cached Gram
        is not reused here (BENCHMARKS.md, "A fourth session").
        """
        z, ke = noise
        column = jax.vmap(lambda j: antithetic_normals(jax.random.fold_in(ke, j), z.shape[0], 1, z.dtype)[:, 0])
        e = column(jnp.arange(lowrank.width(state.W))).T
        return lowrank.sample_from_noise(state.mean, state.W, state.psi, z, e)

    def sample(self, state, key, num: int):
        """``num`` independent draws by the corrected Proposition 1 of [LRVGA], shape (num, d)
        (:func:`jaxrvga.lowrank.sample`)."""
        return lowrank.sample(key, state.mean, state.W, state.psi, num)

    def _pending_root(self, state, X, c):
        """``X sqrt(c)`` (``c`` clipped at 0: a factor needs a PSD increment); checks that the state is
        one of this filter: ``W`` of width ``rank + buffer``, and a whitened Gram only where the
        filter keeps one (a :class:`PublishedLowRank` or ``fa_step`` filter would leave it stale, or fail in a
        ``cond`` with a TypeError)."""
        width = self.rank + (self.buffer if self.keeps_gram else 0)
        if self.keeps_gram and 0 < self.buffer < X.shape[1]:
            raise ValueError(f"buffer={self.buffer} curvature columns cannot hold the {X.shape[1]} columns of one step "
                             f"(one per output of each observation, times the draws of the sampled scheme): "
                             f"use buffer >= {X.shape[1]} (a multiple of it holds that many steps) or buffer=0")
        if state.W.shape[-1] != width:
            raise ValueError(f"state: W has {state.W.shape[-1]} columns, this filter keeps rank + buffer = {width}")
        if state.gram is not None and not self.keeps_gram:
            raise ValueError("state carries a whitened Gram (a state of the default L-RVGA); this filter "
                             "(published or fa_step) keeps none: pass state._replace(gram=None)")
        return X if c is None else X * jnp.sqrt(jnp.maximum(c, 0.0))

    def add(self, state, X, c):
        """The precision step with ``X diag(c) X^T`` (``c`` clipped at 0).

        Default: the exact sum as the factor ``[W, X sqrt(c)]`` of rank ``p + m``, held as the pair of
        its column blocks (never joined into a new d x (p + m) array), with its whitened Gram.
        Returns ``(state, ok)``.
        """
        root = self._pending_root(state, X, c)
        gram = None if state.gram is None else lowrank.bordered_gram(state.gram, state.W, state.psi, root,
                                                                           block_rows=self.block_rows)
        return state._replace(W=(state.W, root), gram=gram), jnp.asarray(True)

    def absorb(self, prior, X, c, g, prior_gain: bool = False):
        """:meth:`add` and the mean step ``mu + P g`` by Woodbury, with the pending factor ``L = [W, X sqrt(c)]``.

        With the cached Gram, ``W^T Psi^{-1} [X sqrt(c), g]`` is one pass over ``W`` that gives
        both the border of the Gram and the projection of ``g``
        (:func:`jaxrvga.lowrank.bordered_gram`); the mean step is a second pass (``W`` times a
        vector). Returns ``(state, ok)``.
        """
        if prior.gram is None:
            return add_then_solve(self, prior, X, c, g, prior_gain)
        root = self._pending_root(prior, X, c)
        gram, Lg = lowrank.bordered_gram(prior.gram, prior.W, prior.psi, root, g, self.block_rows)
        pre = prior._replace(W=(prior.W, root), gram=gram)
        source, projection = (prior, Lg[:prior.gram.shape[0]]) if prior_gain else (pre, Lg)
        fac = lowrank.factorize(source.W, source.psi, source.gram)
        step = fac.solve_given(g, projection)
        return pre._replace(mean=prior.mean + step), _resolved(fac.chol, source.gram)

    def finish(self, state):
        """Projection of the factor ``[W, X]`` of :meth:`add` back to rank p; returns
        ``(state, (dropped, em_loops, projected))`` (``projected``: :meth:`Belief.finish`).

        With a ``buffer``, the new columns are stored in the first free columns of ``W`` instead
        while they fit (nothing is projected, nothing dropped), and the projection takes the
        buffer and the new columns together when they do not. ``dropped`` is the fraction of the
        projected curvature's whitened trace that rank p could not keep
        (:func:`jaxrvga.factor_analysis.spectral_em_step`); 0 with ``fa_step``.
        ``em_loops``: the EM loops run after the spectral start (``inner_loops``, or fewer with
        ``em_tol``).
        """
        if not isinstance(state.W, tuple):  # nothing pending (a step that added no curvature)
            return state, no_projection(state.psi.dtype)
        if self.fa_step is not None:
            return self._fa_step(state)
        m = state.W[1].shape[1]
        if self.buffer < m:
            return self._project(state)
        (W, psi, gram), report = self._store_or_project(state, jnp.asarray(True))
        return state._replace(W=W, psi=psi, gram=gram), report

    def _fa_step(self, state):
        """The projection by ``fa_step``; where its result is not finite with ``psi > 0``, the
        unprojected ``W`` and ``psi`` stay and the report says so (:meth:`finish`)."""
        W, psi = self.fa_step(state.W[0], state.psi, state.W[1])
        ok = all_finite(W, psi) & jnp.all(psi > 0)
        W, psi = jnp.where(ok, W, state.W[0]), jnp.where(ok, psi, state.psi)
        return state._replace(W=W, psi=psi), no_projection(state.psi.dtype)[:2] + (ok,)

    def settle(self, prior, new, ok):
        """:meth:`finish` of ``new`` where ``ok``, else ``prior`` kept; returns ``(state, report)`` (:meth:`finish`).

        With a ``buffer`` that can hold the new columns, the mean is chosen by ``where`` and the
        columns are stored or projected by ``_store_or_project``, which passes ``W`` and ``psi``
        through unchanged where nothing is projected, so that XLA copies neither (through the
        guard's conditional around the buffer's, it copied ``W``, ``psi`` and the mean on every
        step; BENCHMARKS.md, "Neural network online").
        """
        if not (self.buffer and isinstance(new.W, tuple) and new.gram is not None and new.W[0] is prior.W
                and new.psi is prior.psi and new.W[1].shape[1] <= self.buffer):
            return finish_or_keep(self, prior, new, ok)
        (W, psi, gram), report = self._store_or_project(new, ok, prior.gram)
        return new._replace(mean=jnp.where(ok, new.mean, prior.mean), W=W, psi=psi, gram=gram), report

    def checked_fields(self, state):
        """The arrays whose finiteness decides a step, the mean first. A factor with a cached whitened
        Gram is checked by that Gram, which is finite exactly when ``W / sqrt(psi)`` is (up to
        overflow): a p x p check instead of a pass over the d x p rows (for a pending factor
        ``(W, X)``, the bordered Gram covers the new columns ``X``; without a Gram, ``X`` is checked,
        ``W`` being the prior's)."""
        fields = [state.mean, state.psi]
        if state.gram is not None:
            return tuple(fields + [state.gram])
        return tuple(fields + (list(state.W[1:]) if isinstance(state.W, tuple) else [state.W]))

    def positive(self, state):
        """``psi > 0`` (``W W^T`` is PSD by construction)."""
        return jnp.all(state.psi > 0)

    def _store_or_project(self, state, ok, kept_gram=None):
        """``((W, psi, gram), report)`` of the pending ``state`` of a buffer: its new columns
        stored in the buffer where ``ok`` and they fit, projected with it where ``ok`` and they do
        not; where not ``ok``, ``W`` and ``psi`` unchanged and the Gram ``kept_gram``.

        The columns are written outside the one conditional (which projects or passes ``W`` and
        ``psi`` through), so that XLA updates ``W`` without copying it.
        """
        W, X = state.W
        fill = _buffer_fill(state.gram, self.rank, W.shape[1])
        fits = fill + X.shape[1] <= self.buffer
        W, gram = self._store(state, fill, ok & fits)
        if kept_gram is not None:
            gram = jnp.where(ok & fits, gram, kept_gram)

        def project(W, psi, bordered, gram):
            out, report = self._project(state._replace(W=(W, X), psi=psi, gram=bordered))
            return (out.W, out.psi, out.gram), report

        def keep(W, psi, bordered, gram):
            return (W, psi, gram), no_projection(psi.dtype)

        return jax.lax.cond(ok & ~fits, project, keep, W, state.psi, state.gram, gram)

    def _project(self, state):
        """The spectral projection of the pending factor (the buffer's columns and the new ones) to rank p."""
        (W, X), p = state.W, self.rank
        lead, pending = (W, X) if not self.buffer else (W[:, :p], jnp.concatenate([W[:, p:], X], axis=1))
        W, psi, dropped, gram, loops, ok = spectral_em_step(lead, state.psi, pending, 1.0, 1.0, self.inner_loops,
                                                            psi_floor=self.psi_floor, block_rows=self.block_rows,
                                                            gram=state.gram, tol=self.em_tol, details=True)
        q = state.W[0].shape[1]  # where not ok, the unprojected W and its Gram stay (the buffer's columns too)
        if self.buffer:
            W, gram = jax.lax.cond(ok, lambda: (jnp.pad(W, ((0, 0), (0, self.buffer))),
                                                jnp.pad(gram, ((0, self.buffer), (0, self.buffer)))),
                                   lambda: (state.W[0], state.gram[:q, :q]))
        else:
            gram = jnp.where(ok, gram, state.gram[:q, :q])
        return state._replace(W=W, psi=psi, gram=gram), (dropped, loops, ok)

    def _store(self, state, fill, write):
        """``(W, gram)`` of the pending ``state`` with its new columns written into the buffer's free
        columns from ``fill`` on, their Gram moved with them; ``W`` is unchanged where not ``write``."""
        W, X = state.W
        q, m = W.shape[1], X.shape[1]
        start = (jnp.zeros((), fill.dtype), self.rank + fill)
        W = jax.lax.dynamic_update_slice(W, jnp.where(write, X, jax.lax.dynamic_slice(W, start, X.shape)), start)
        offset = jnp.arange(q) - start[1]
        order = jnp.where((offset >= 0) & (offset < m), q + offset, jnp.arange(q))
        return W, state.gram[order][:, order]


class PublishedLowRank(LowRank):
    """The published L-RVGA belief ([LRVGA] Algorithm 1 in the two-stage scheme of eqs. 7-8): each
    precision step is projected at once by ``inner_loops`` (``n_in``) EM iterations from
    ``W_{t-1}``, so the mean step uses the projected precision. Same fields as :class:`LowRank`
    (``buffer`` and ``em_tol`` unused: 0 and None); no cached Gram. Reproduces the paper and the
    authors' code; :class:`LowRank` is the default, exact at full rank (experiments/REPORT.md)."""

    __slots__ = ()

    @property
    def keeps_gram(self) -> bool:
        """False: the published projection keeps no whitened Gram."""
        return False

    def add(self, state, X, c):
        """The precision step ``X diag(c) X^T`` (``c`` clipped at 0) projected at once by Algorithm 1
        from ``W`` (``fa_step`` where given). Returns ``(state, ok)``."""
        root = self._pending_root(state, X, c)
        if self.fa_step is not None:
            W, psi = self.fa_step(state.W, state.psi, root)
        else:
            W, psi = recursive_em_step(state.W, state.psi, root, 1.0, 1.0, self.inner_loops,
                                       psi_floor=self.psi_floor, block_rows=self.block_rows)
        return state._replace(W=W, psi=psi), jnp.asarray(True)

    def finish(self, state):
        """Nothing left to project (:meth:`add` did): ``(state, (0, inner_loops))``."""
        dropped, _, projected = no_projection(state.psi.dtype)
        return state, (dropped, jnp.asarray(self.inner_loops, jnp.int32), projected)


def _add_noise(W, psi, s, q):
    """``(W', psi')`` of ``(s (W W^T + diag psi)^{-1} + diag(q))^{-1}`` (:meth:`LowRank.predict`)."""
    denom = s + q * psi
    M = W.T @ (W * (q / denom)[:, None])
    eye = jnp.eye(M.shape[0], dtype=M.dtype)
    L_inv = jax.scipy.linalg.solve_triangular(jnp.linalg.cholesky(M + eye), eye, lower=True)
    # W L^{-T} as a product with the p x p inverse: XLA's triangular solve with a d-wide right-hand
    # side took 4.3 ms at d = 337, p = 10 on the CPU, the product 0.02 ms
    return (W * (jnp.sqrt(s) / denom)[:, None]) @ L_inv.T, psi / denom


class Diagonal(NamedTuple):
    """Mean-field belief ``N(mean, diag(psi)^{-1})``; state :class:`~jaxrvga.core.DiagonalState`, O(d).

    Each step keeps the diagonal of the new precision, ``psi + diag(X diag(c) X^T)`` (the
    KL-optimal diagonal Gaussian given that precision: mean-field R-VGA, the variational diagonal
    EKF for the ``ekf`` scheme), and takes the mean step with the unprojected new precision
    ``diag(psi) + X diag(c) X^T`` by Woodbury (:meth:`absorb`), as :class:`LowRank` does: with the
    diagonal alone the step ignores the correlations it adds and overshoots by up to a factor d on
    correlated inputs. Where every increment is diagonal (inputs along the axes, ``c >= 0``) it is
    the dense belief exactly.
    """

    state_type = DiagonalState

    def init(self, mean, var, key=None) -> DiagonalState:
        """Initial state ``N(mean, diag(var))``: ``var`` the (d,) prior variances (a scalar broadcasts), > 0."""
        mean = _check_mean(mean)
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
        s, q = dynamics.cov_scale(state.psi.dtype), dynamics.noise(state.psi.dtype)
        if s is None and q is None:
            return state
        psi = state.psi / ((1.0 if s is None else s) + (0.0 if q is None else q) * state.psi)
        return state._replace(psi=jnp.maximum(psi, psi_min(psi.dtype)))

    def marginal(self, state, X):
        """``(X mean, diag(X P X^T))`` for inputs ``X`` (m, d): ``(X * X) / psi`` summed."""
        return X @ state.mean, (X * X) @ (1.0 / state.psi)

    def sandwich(self, state, J):
        """``J P J^T = J diag(1 / psi) J^T`` (k, k) for ``J`` (k, d), symmetrised."""
        return _symmetric((J * (1.0 / state.psi)) @ J.T)

    def solve(self, state, g):
        """``P g = g / psi``."""
        return g / state.psi

    def noise(self, key, num: int, dim: int, dtype):
        """Base noise of :meth:`draw`: ``num`` antithetic standard normal rows of length ``dim``."""
        return antithetic_normals(key, num, dim, dtype)

    def draw(self, state, z):
        """Draws ``mean + z / sqrt(psi)`` from base noise ``z`` (num, d)."""
        return state.mean + z / jnp.sqrt(state.psi)

    def sample(self, state, key, num: int):
        """``num`` independent draws ``mean + z / sqrt(psi)``, shape (num, d)."""
        z = jax.random.normal(key, (num, state.mean.shape[0]), dtype=state.mean.dtype)
        return state.mean + z * jnp.sqrt(1.0 / state.psi)

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
        ``(state, ok)``, ``ok`` also False where the solve is not resolved in the dtype (:func:`_resolved`).
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
    """``(diag(psi) + R R^T)^{-1} g`` for ``R`` (d, m) and whether it is resolved (:func:`_resolved`), O(d m^2).

    Whitened, ``B = diag(psi)^{-1/2} R`` and ``h = g / sqrt(psi)``: ``diag(psi)^{-1/2} (I + B B^T)^{-1} h``,
    by Woodbury ([LRVGA] eq. 27) through the Cholesky factor of the m x m ``I + B^T B``, or of the
    d x d ``I + B B^T`` where m > d (both >= I, so well conditioned whatever the scale of ``R``).
    """
    scale = jnp.sqrt(psi)
    B, h = R / scale[:, None], g / scale
    wide = B.shape[1] > B.shape[0]
    gram = B @ B.T if wide else B.T @ B
    chol = jnp.linalg.cholesky(gram + jnp.eye(gram.shape[0], dtype=gram.dtype))
    if wide:
        z = jax.scipy.linalg.cho_solve((chol, True), h)
    else:
        z = h - B @ jax.scipy.linalg.cho_solve((chol, True), B.T @ h)
    return z / scale, _resolved(chol, gram)


def _resolved(chol, gram):
    """Every pivot of the Cholesky factor of ``M = I + gram`` exceeds the rounding of its diagonal.

    The exact pivots of ``M >= I`` are >= 1; one below ``2 q eps M_jj`` is rounding noise (a new
    column in the span of the others at a scale the dtype cannot resolve, e.g. ``psi = 1e-30``), so
    the Woodbury solve is meaningless there and the step is refused (and flagged). NaN fails too.
    """
    eps = jnp.finfo(chol.dtype).eps
    return jnp.all(jnp.diagonal(chol) ** 2 >= 2 * chol.shape[0] * eps * (1.0 + jnp.diagonal(gram)))


def _buffer_fill(gram, rank: int, width: int):
    """Columns of the buffer in use: one past the last column of ``W[:, rank:width]`` with a nonzero Gram diagonal."""
    used = jnp.diagonal(gram)[rank:width] > 0
    return jnp.max(jnp.where(used, jnp.arange(1, width - rank + 1), 0), initial=0)


__all__ = ["Belief", "Dense", "LowRank", "PublishedLowRank", "Diagonal", "of_state", "sample", "draws"]
