"""The limited-memory belief ``N(mean, (W W^T + diag(psi))^{-1})`` of [LRVGA]: its state and its algebra, O(d p)."""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..core import NoiseStats, SolverInfo, solver_info
from ..dynamics import Dynamics
from ..kernels import lowrank
from ..kernels.factor_analysis import PSI_FLOOR, recursive_em_step, spectral_em_step
from .. import file_checks as fc
from ..validation import (all_finite, check_finite, check_float_array, check_invertible, check_positive, is_concrete,
                          positive_int)
from .base import (add_then_solve, antithetic_normals, check_mean, check_state_fields, finish_or_keep, no_projection,
                   pivots_resolved, psi_min, register_state, symmetrize)


class LowRankState(NamedTuple):
    """State of a limited-memory filter: ``N(mean, (W W^T + diag(psi))^{-1})``.

    ``W`` is (d, p) and ``psi`` (d,); nothing of size d x d is ever stored. ``gram`` is a cache
    of the whitened Gram ``W^T diag(psi)^{-1} W`` (p x p) that the default L-RVGA update keeps
    (it saves that update a pass over ``W``); ``None`` where it is not kept. Set it to ``None``
    when you change ``W`` or ``psi`` by hand. ``noise`` as in :class:`GaussianState` (the precision
    is then that of ``theta`` given ``s2 = 1``).
    """

    mean: jax.Array
    W: jax.Array
    psi: jax.Array
    step: jax.Array
    info: SolverInfo
    key: Optional[jax.Array] = None
    gram: Optional[jax.Array] = None
    noise: Optional[NoiseStats] = None


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


class LowRank(NamedTuple):
    """Limited-memory belief ``N(mean, (W W^T + diag(psi))^{-1})`` of [LRVGA]; state :class:`~jaxrvga.beliefs.LowRankState`.

    ``rank``: p. ``inner_loops``: EM iterations of each projection (after the spectral start).
    ``fa_step(W, psi, X) -> (W, psi)``: replaces the projection (a hook for oracle tests).
    ``psi_floor``: relative floor of ``psi``. ``block_rows``: row blocks of Algorithm 1
    (:func:`jaxrvga.kernels.row_blocks.num_blocks`; 0 or None as there). ``buffer``: curvature columns held
    unprojected between projections (:meth:`finish`); the state's ``W`` then has ``rank + buffer``
    columns, the last ``buffer`` of them zero right after a projection. ``em_tol``: ``inner_loops``
    is a maximum and the EM stops at this relative change of ``W``
    (:func:`jaxrvga.kernels.factor_analysis.spectral_em_step`).

    The default scheme keeps the whitened Gram ``W^T Psi^{-1} W`` in the state (``state.gram``), so
    that a step's mean solve and projection share one Gram of ``[W, X]``, bordered in one pass
    over the rows for the new columns.
    """

    state_type = LowRankState

    @classmethod
    def example(cls, dim: int, rng):
        """A belief of this class and its ``init`` factors for ``dim`` dimensions, drawn from the NumPy
        generator ``rng``: rank 2 (or ``dim``), standard normal ``W`` and ``psi`` uniform in [0.5, 2]
        (what the conformance tests run; the published belief with Algorithm 1's two inner loops).

        Returns:
          ``(belief, factors)``, so that ``belief.init(mean, *factors)`` is a valid state.
        """
        rank = min(2, dim)
        W, psi = rng.normal(size=(dim, rank)), rng.uniform(0.5, 2.0, dim)
        return cls(rank, 2 if cls is PublishedLowRank else 0), (W, psi)

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
        mean = check_mean(mean)
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
        s, q = dynamics.cov_scale(state.W.dtype), dynamics.additive_variance(state.W.dtype)
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
        """``(X mean, diag(X P X^T))`` for inputs ``X`` (m, d), by Woodbury ([LRVGA] eq. 27), or, where
        ``W`` has at least d columns, through the d x d whitened precision (:func:`_wide_factor`)."""
        if _is_wide(state.W, state.psi):
            chol, _ = _wide_factor(state.psi, state.W)
            b = jax.scipy.linalg.solve_triangular(chol, (X / jnp.sqrt(state.psi)).T, lower=True)
            return X @ state.mean, jnp.sum(b * b, axis=0)
        return X @ state.mean, lowrank.factorize(state.W, state.psi, state.gram).quad_form(X.T)

    def sandwich(self, state, J):
        """``J P J^T`` (k, k) for ``J`` (k, d) by Woodbury, symmetrised; ``P J^T`` a row of ``J`` at a time
        (vmapped): with the k rows as one (d, k) right-hand side, the 10-class digits network's log
        predictive cost 1.7x on CPU (experiments/REPORT.md, "The learned prior's slopes from the moments")."""
        return symmetrize(J @ jax.vmap(lambda row: self.solve(state, row))(J).T)

    def solve(self, state, g):
        """``P g`` by Woodbury ([LRVGA] eq. 27), O(d p^2) (O(d p) with a cached Gram); where ``W`` has at
        least d columns (full rank, or a pending factor ``[W, X]`` wider than d), through the d x d
        whitened precision instead (:func:`_wide_factor`), which does not cancel."""
        if _is_wide(state.W, state.psi):
            return _wide_solve(state.psi, state.W, g)[0]
        return lowrank.factorize(state.W, state.psi, state.gram).solve(g)

    def base_draws(self, key, num: int, dim: int, dtype):
        """Base draws of :meth:`draw`: ``(z, key_e)``, ``z`` (num, d) antithetic standard normals and
        the key of the base draws ``e`` (one column per column of ``W``, drawn by :meth:`draw`)."""
        kz, ke = jax.random.split(key)
        return antithetic_normals(kz, num, dim, dtype), ke

    def draw(self, state, draws):
        """Draws by the corrected Proposition 1 of [LRVGA] from base draws (:meth:`base_draws`), shape (num, d).

        Column j of ``e`` comes from ``fold_in(key_e, j)``, so the same base draws give the same ``e``
        for the shared columns of beliefs of different ranks (the unprojected beliefs of an
        iterated scheme): common random numbers across its passes. The draws depend on the basis
        of ``W`` (``W Q``, ``Q`` orthogonal, is the same belief but maps ``e`` to other draws), so a
        rounding that rotates ``W`` at a projection changes them; for that reason the cached Gram
        is not reused here (BENCHMARKS.md, the profile of the sampled scheme).
        """
        z, ke = draws
        column = jax.vmap(lambda j: antithetic_normals(jax.random.fold_in(ke, j), z.shape[0], 1, z.dtype)[:, 0])
        e = column(jnp.arange(lowrank.width(state.W))).T
        return lowrank.sample_from_draws(state.mean, state.W, state.psi, z, e)

    def sample(self, state, key, num: int):
        """``num`` independent draws by the corrected Proposition 1 of [LRVGA], shape (num, d)
        (:func:`jaxrvga.kernels.lowrank.sample`)."""
        return lowrank.sample(key, state.mean, state.W, state.psi, num)

    def variances(self, state):
        """``diag(P)`` by Woodbury, ``1/psi - rowdot(W L^{-T}) / psi^2`` ([LRVGA] eq. 27), O(d p^2)."""
        return lowrank.factorize(state.W, state.psi, state.gram).inverse_diag()

    def shift_precision(self, state, delta):
        """The precision ``W W^T + diag(psi + delta)``, the mean and ``W`` unchanged (the cached whitened
        Gram recomputed, O(d p^2)). Returns ``(state, ok)``, ``ok`` False where ``psi + delta`` falls
        below the floor :func:`~jaxrvga.beliefs.psi_min` or is not finite."""
        psi = state.psi + delta
        gram = None if state.gram is None else lowrank.whitened_gram(state.W, psi, self.block_rows)
        return state._replace(psi=psi, gram=gram), jnp.all(jnp.isfinite(psi) & (psi >= psi_min(psi.dtype)))

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
        (:func:`jaxrvga.kernels.lowrank.bordered_gram`); the mean step is a second pass (``W`` times a
        vector). Where the factor has at least d columns (``rank = d``, or ``d`` below ``p + m``), the
        step is solved with the d x d whitened precision instead (:func:`_wide_factor`): the Woodbury
        form cancels there. Returns ``(state, ok)``.
        """
        if prior.gram is None:
            return add_then_solve(self, prior, X, c, g, prior_gain)
        root = self._pending_root(prior, X, c)
        if _is_wide(prior.W if prior_gain else (prior.W, root), prior.psi):
            gram = lowrank.bordered_gram(prior.gram, prior.W, prior.psi, root, block_rows=self.block_rows)
            pre = prior._replace(W=(prior.W, root), gram=gram)
            step, resolved = _wide_solve(prior.psi, prior.W if prior_gain else pre.W, g)
            return pre._replace(mean=prior.mean + step), resolved
        gram, Lg = lowrank.bordered_gram(prior.gram, prior.W, prior.psi, root, g, self.block_rows)
        pre = prior._replace(W=(prior.W, root), gram=gram)
        source, projection = (prior, Lg[:prior.gram.shape[0]]) if prior_gain else (pre, Lg)
        fac = lowrank.factorize(source.W, source.psi, source.gram)
        step = fac.solve_accurate(g, projection, source.gram)
        return pre._replace(mean=prior.mean + step), pivots_resolved(fac.chol, source.gram)

    def finish(self, state):
        """Projection of the factor ``[W, X]`` of :meth:`add` back to rank p; returns
        ``(state, (dropped, em_loops, projected))`` (``projected``: :meth:`Belief.finish`).

        With a ``buffer``, the new columns are stored in the first free columns of ``W`` instead
        while they fit (nothing is projected, nothing dropped), and the projection takes the
        buffer and the new columns together when they do not. ``dropped`` is the fraction of the
        projected curvature's whitened trace that rank p could not keep
        (:func:`jaxrvga.kernels.factor_analysis.spectral_em_step`); 0 with ``fa_step``.
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

    def check_options(self):
        """``ValueError`` unless this belief's options are valid, in the words of :func:`low_rank_belief`
        (which :func:`jaxrvga.lrvga` calls; :func:`jaxrvga.build` calls this for a belief given as a value)."""
        low_rank_belief(self.rank, self.inner_loops, published=isinstance(self, PublishedLowRank),
                        psi_floor=self.psi_floor, block_rows=self.block_rows, buffer=self.buffer, em_tol=self.em_tol)

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


def _buffer_fill(gram, rank: int, width: int):
    """Columns of the buffer in use: one past the last column of ``W[:, rank:width]`` with a nonzero Gram diagonal."""
    used = jnp.diagonal(gram)[rank:width] > 0
    return jnp.max(jnp.where(used, jnp.arange(1, width - rank + 1), 0), initial=0)



def _is_wide(W, psi) -> bool:
    """Whether the factor ``W`` (or the tuple of its column blocks) has at least as many columns as
    ``psi`` has rows (a trace-time decision on shapes: full rank, or a pending factor wider than d)."""
    return lowrank.width(W) >= psi.shape[0]


def _wide_factor(psi, W):
    """``(chol, gram)``: the Cholesky factor of the d x d whitened precision ``I + B B^T`` and
    ``gram = B B^T``, ``B = diag(psi)^{-1/2} [W]`` (``W`` a factor or a tuple of its column blocks),
    O(d^2 q) for q >= d columns: for a factor at least as wide as d.

    The Woodbury form ``P v = Psi^{-1} v - Psi^{-1} L M^{-1} L^T Psi^{-1} v`` subtracts two terms
    of the prior's scale: where the whitened curvature ``x^T P_0 x / s^2`` along ``v`` exceeds
    ``1 / eps``, they agree to every digit and the step is rounding noise. With q >= d the columns
    of ``L`` are dependent, so ``M = I + L^T Psi^{-1} L`` (q x q) is ``I`` plus a singular Gram and no
    solve in its coordinates recovers the step; the d x d ``I + B B^T`` is the whitened precision
    itself, and its Cholesky solve is backward stable (exact at d = 1), at O(d^2 q) <= O(d q^2).
    """
    R = jnp.concatenate(W, axis=1) if isinstance(W, tuple) else W
    B = R / jnp.sqrt(psi)[:, None]
    gram = B @ B.T
    return jnp.linalg.cholesky(gram + jnp.eye(gram.shape[0], dtype=gram.dtype)), gram


def _wide_solve(psi, W, g):
    """``((W W^T + diag(psi))^{-1} g, resolved)`` through :func:`_wide_factor` (``g`` (d,) or (d, k));
    ``resolved`` as :func:`~jaxrvga.beliefs.base.pivots_resolved`."""
    chol, gram = _wide_factor(psi, W)
    scale = jnp.sqrt(psi) if g.ndim == 1 else jnp.sqrt(psi)[:, None]
    return jax.scipy.linalg.cho_solve((chol, True), g / scale) / scale, pivots_resolved(chol, gram)


def low_rank_belief(rank: int, inner_loops: Optional[int] = None, *, published: bool = False,
                    psi_floor: float = PSI_FLOOR, block_rows: Optional[int] = None, buffer: int = 0,
                    em_tol: Optional[float] = None) -> LowRank:
    """The low-rank belief of :func:`jaxrvga.lrvga` from its options (validated; the defaults of :func:`jaxrvga.lrvga`):
    a :class:`~jaxrvga.beliefs.LowRank`, or a :class:`~jaxrvga.beliefs.PublishedLowRank` with ``published``.

    Args:
      rank, inner_loops, published, psi_floor, block_rows, buffer, em_tol: as :func:`jaxrvga.lrvga`'s.

    Returns:
      The belief value; raises ``ValueError`` for an invalid option or combination.
    """
    if isinstance(rank, (int, np.integer)) and not isinstance(rank, bool) and rank == 0:
        raise ValueError("rank must be a positive integer, got 0; the belief without factors (precision "
                         "diag(psi)) is jr.diag_rvga(model)")
    rank = positive_int("rank", rank)
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
    if isinstance(buffer, bool) or not isinstance(buffer, (int, np.integer)) or buffer < 0:
        raise ValueError(f"buffer must be an integer >= 0, got {buffer!r}")
    if buffer and published:
        raise ValueError("buffer: the published projection projects every step (buffer=0)")
    if em_tol is not None:
        if published:
            raise ValueError("em_tol: the published projection runs a fixed number of loops (inner_loops)")
        if isinstance(em_tol, bool) or not isinstance(em_tol, (int, float)) or not em_tol >= 0:
            raise ValueError(f"em_tol must be a number >= 0, got {em_tol!r}")
        if inner_loops == 0:
            raise ValueError("em_tol needs inner_loops >= 1, the maximum number of EM loops")
        em_tol = float(em_tol)
    if published:
        return PublishedLowRank(rank, inner_loops, None, float(psi_floor), block_rows)
    return LowRank(rank, inner_loops, None, float(psi_floor), block_rows, int(buffer), em_tol)


# --------------------------------------------------------------------------- read and saved

def _read_lowrank(state, mean):
    """The belief that reads a :class:`LowRankState` and the state with its belief arrays only (checked
    where concrete; :func:`~jaxrvga.beliefs.of_state`)."""
    W = check_finite("state.W", check_float_array("state.W", state.W))
    psi = check_positive("state.psi", check_float_array("state.psi", state.psi))
    return LowRank(W.shape[-1]), LowRankState(mean, W, psi, None, None, None, state.gram)


def _check_lowrank(st):
    """Shapes and dtypes of ``LowRankState``; finite ``mean`` and ``W``, ``psi > 0``, and a cached
    ``gram`` equal to ``W^T diag(psi)^-1 W`` recomputed from them (:func:`_check_gram`)."""
    for f in ("mean", "W", "psi"):
        fc.floating(f, getattr(st, f))
    m, W = fc.shape_of(st.mean), fc.shape_of(st.W)
    fc.need(len(m) >= 1 and len(W) == len(m) + 1 and W[:-1] == m and 1 <= W[-1] <= m[-1],
          f"W has shape {W}, expected {m} + (p,) with 1 <= p <= d for a mean of shape {m}")
    fc.need(fc.shape_of(st.psi) == m, f"psi has shape {fc.shape_of(st.psi)}, expected {m}")
    fc.need(fc.dtype_of(st.W) == fc.dtype_of(st.mean) == fc.dtype_of(st.psi), "mean, W and psi must share one dtype")
    if st.gram is not None:
        fc.floating("gram", st.gram)
        fc.need(fc.shape_of(st.gram) == W[:-2] + (W[-1], W[-1]),
              f"gram has shape {fc.shape_of(st.gram)}, expected {W[:-2] + (W[-1], W[-1])} for W of shape {W}")
        fc.need(fc.dtype_of(st.gram) == fc.dtype_of(st.W), "gram must have the dtype of W")
    check_state_fields(st, m[:-1])
    fc.finite("mean", st.mean)
    fc.finite("W", st.W)
    fc.positive("psi", st.psi)
    if st.gram is not None:
        _check_gram(st.gram, st.W, st.psi)


def _check_gram(gram, W, psi):
    """The cached whitened Gram is verified, not trusted (nor silently replaced, which would change
    a round trip's bits): ``G = B^T B``, ``B = W / sqrt(psi)``, recomputed in float64, must match
    the stored one entry by entry to ``sqrt(eps)`` of the dtype in the metric of ``I + G``,
    ``|G_ij - stored_ij| <= sqrt(eps) sqrt((1 + G_ii)(1 + G_jj))`` (a filter's own Gram is within
    a few eps: it is recomputed at every projection). A Gram edited by hand gave wrong steps with
    every step converged."""
    B = fc.values(W) / np.sqrt(fc.values(psi))[..., None]
    G = np.einsum("...ip,...iq->...pq", B, B)
    d = 1.0 + np.diagonal(G, axis1=-2, axis2=-1)
    scale = np.sqrt(d[..., :, None] * d[..., None, :])
    err = np.abs(fc.values(gram) - G) / scale
    worst = float(np.max(np.where(np.isnan(err), np.inf, err), initial=0.0))
    tol = float(np.sqrt(np.finfo(fc.dtype_of(W)).eps))
    fc.need(worst <= tol, f"gram does not match W and psi (relative deviation {worst:.3g} > {tol:.1g}); "
                        f"save the state with gram=None to have it recomputed")


register_state(LowRankState, _read_lowrank, _check_lowrank, former=("jaxrvga.core",))


__all__ = ['low_rank_belief', 'LowRankState', 'LowRank', 'PublishedLowRank', 'LOWRANK_DTYPES']
