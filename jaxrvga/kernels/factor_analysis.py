r"""Factor analysis (FA) of a symmetric matrix: ``S ~ W W^T + diag(psi)`` ([LRVGA] §3, App. A-E).

* :func:`recursive_em_step` - Algorithm 1 of [LRVGA]: FA of
  ``alpha (W_prev W_prev^T + diag(psi_prev)) + beta X X^T`` in O(d p (m + p)) without
  any d x d matrix. It is the covariance stage of every L-RVGA filter (over a data stream:
  :func:`jaxrvga.baselines.fa_filters.recursive_em`).
* :func:`e_step`, :func:`m_step` - the E- and M-steps of every EM map (below; the batch EM of
  :mod:`jaxrvga.baselines.batch_fa` too).

Algorithm 1 fits, at each step, the FA model to the target of [LRVGA] eq. (28) by the EM
iteration of eqs. (20)-(21), with ``M = I_p + W^T Psi^{-1} W``:

.. math::

    W_t W_t^\top + \Psi_t &\approx S = \alpha\, (W_{t-1} W_{t-1}^\top + \Psi_{t-1}) + \beta\, X X^\top
    \qquad \text{(28)}

    W_{\mathrm{new}} &= V \big(I_p + M^{-1} W^\top \Psi^{-1} V\big)^{-1}, \qquad V = S\, \Psi^{-1} W
    \qquad \text{(21)}

    \psi_{\mathrm{new}} &= \operatorname{Diag}\big(S - W_{\mathrm{new}} M^{-1} V^\top\big)

All EM maps share one M-step written with Cholesky solves only, in the well-scaled form of
Ghahramani & Hinton. With ``M = I_p + W^T Psi^{-1} W`` and the E-step gain
``Bt = beta^T = (W W^T + Psi)^{-1} W = Psi^{-1} W M^{-1}`` (d x p; ``E[z|v] = Bt^T v``),

    Q   = S Bt                     (= V M^{-1}, V = S Psi^{-1} W of eq. 21)
    C   = M^{-1} + Bt^T S Bt       (= E[z z^T] averaged over S; = M^{-1} (M + G) M^{-1})
    W_new   = Q C^{-1}             (= V (I_p + M^{-1} W^T Psi^{-1} V)^{-1}, eq. 21)
    psi_new = Diag(S) - rowdot(W_new, Q)   (= Diag(S) - rowdot(W_new M^{-1}, V))

``C`` stays well conditioned when ``psi`` becomes tiny, unlike ``M + G`` whose condition number grows like
``1/psi^2``.

``psi`` is kept positive by a tiny floor relative to the mean diagonal of the target: ``psi_new_i >=
max(psi_floor, eps) * mean(Diag(S))`` with ``eps`` the machine epsilon of the dtype (``psi_floor = PSI_FLOOR =
1e-12`` by default, so the float64 floor is 1e-12 and the float32 floor the rounding level 1.2e-7).
Mathematically ``0 <= psi_new_i <= S_ii`` (a Schur complement), so the floor only binds when the target is
(nearly) representable with ``psi_i = 0`` and rounding would make ``psi`` vanish or turn negative, which the
authors' code for [LRVGA] Alg. 1 does not guard against. It keeps ``1 / psi`` finite.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve

from . import row_blocks
from . import lowrank
from ..validation import all_finite, check_nonnegative, check_positive, positive_int

#: Relative floor of ``psi`` in every EM map (module docstring).
PSI_FLOOR = 1e-12


def rowdot(A, B):
    """``Diag(A B^T) = sum_j A[:, j] * B[:, j]`` (the paper's ``A * B`` operator, Alg. 1).

    Args:
      A, B: arrays of one shape (..., d, p).

    Returns:
      The row sums of ``A * B``, (..., d).
    """
    return jnp.sum(A * B, axis=-1)


def e_step(W, psi):
    """``(Bt, M^{-1})`` with ``Bt = Psi^{-1} W M^{-1}`` (d x p), one Cholesky of ``M`` (p x p).

    Args:
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.

    Returns:
      ``(Bt, M^{-1})``, (d, p) and (p, p).
    """
    fac = lowrank.factorize(W, psi)
    return fac.gain(), chol_inverse(fac.chol)


def chol_inverse(chol):
    """``A^{-1}`` (p x p, symmetrised) from the lower Cholesky factor of ``A``.

    Args:
      chol: the lower Cholesky factor, (p, p).

    Returns:
      The (p, p) inverse.
    """
    return lowrank.symmetrize(cho_solve((chol, True), jnp.eye(chol.shape[0], dtype=chol.dtype)))


def m_step(Q, C, diagS, psi_floor):
    """Shared EM M-step: ``W = Q C^{-1}``, ``psi = Diag(S) - rowdot(W, Q)`` (module docstring).

    Args:
      Q: ``S Bt``, (d, p).
      C: the (p, p) matrix of the M-step's solve.
      diagS: the diagonal of the target ``S``, (d,).
      psi_floor: the relative floor of ``psi``.

    Returns:
      ``(W, psi)``, (d, p) and (d,).
    """
    W_new = Q @ chol_inverse(jnp.linalg.cholesky(C))
    psi_new = diagS - rowdot(W_new, Q)
    return W_new, jnp.maximum(psi_new, psi_floor_value(diagS, psi_floor))


def psi_floor_value(diagS, psi_floor):
    """The floor of ``psi`` (module docstring): ``max(psi_floor, eps) * mean(Diag(S))``.

    Args:
      diagS: the diagonal of the target, (d,).
      psi_floor: the relative floor.

    Returns:
      The scalar floor.
    """
    return _floor_at(jnp.mean(diagS), psi_floor)


def _floor_at(mean_diag, psi_floor):
    """:func:`psi_floor_value` from ``mean(Diag(S))``."""
    finfo = jnp.finfo(mean_diag.dtype)
    return jnp.maximum(psi_floor, finfo.eps) * mean_diag + finfo.tiny


def _mean_diag(W_prev, psi_prev, X, alpha, beta):
    """``mean(Diag(S))`` of the target ``alpha (W W^T + Psi) + beta X X^T`` from whole-array sums
    of squares (a row-wise ``Diag(S)`` is a slow minor-axis reduction on CPU; a product of the
    flattened arrays made XLA copy an ``X`` laid out as its transpose, 16 x 10 columns: 8 ms)."""
    def sq(A):
        return jnp.sum(A * A)
    return (alpha * (sq(W_prev) + jnp.sum(psi_prev)) + beta * sq(X)) / psi_prev.shape[0]


def _block_grams(Wp_b, pp_b, X_b, W_b, psi_b, first: bool):
    """The small Grams of one row block that an inner loop needs (summed over the blocks).

    ``G = W^T Psi^{-1} W`` (exactly symmetric, as ``B^T B`` with ``B = Psi^{-1/2} W``) and ``X^T Psi^{-1} W``;
    after the first loop also ``W_prev^T Psi^{-1} W`` and ``W^T Psi^{-1} Psi_prev Psi^{-1} W``."""
    root = jnp.sqrt(psi_b)[:, None]
    B = W_b / root
    Ws = B / root  # Psi^{-1} W
    out = {"G": B.T @ B, "XWs": X_b.T @ Ws}
    if not first:
        Wq = Ws * jnp.sqrt(pp_b)[:, None]
        out.update(WpWs=Wp_b.T @ Ws, WqWq=Wq.T @ Wq)
    return out


def _em_gains(grams, alpha, beta, first: bool):
    """The p x p algebra of an inner loop: ``C`` and ``W_new = X KX + W_prev KP + Psi_prev Psi^{-1} W KW``.

    With ``Minv = M^{-1}``, ``A = X^T Bt`` and ``B = W_prev^T Bt`` (module docstring),
    ``C = Minv + beta A^T A + alpha (B^T B + Bt^T Psi_prev Bt)`` and ``KX = beta A C^{-1}``,
    ``KP = alpha B C^{-1}``, ``KW = alpha Minv C^{-1}``. In the first loop ``W = W_prev`` gives
    ``B = I - Minv``: ``C = alpha I + (1 - alpha) Minv + beta A^T A``, ``KP = alpha C^{-1}``, no ``KW``.
    """
    p = grams["G"].shape[0]
    eye = jnp.eye(p, dtype=grams["G"].dtype)
    Minv = chol_inverse(jnp.linalg.cholesky(eye + grams["G"]))
    A = grams["XWs"] @ Minv
    if first:
        C = alpha * eye + (1 - alpha) * Minv + beta * (A.T @ A)
    else:
        B = grams["WpWs"] @ Minv
        C = Minv + lowrank.symmetrize(beta * (A.T @ A) + alpha * (B.T @ B + Minv @ lowrank.symmetrize(grams["WqWq"]) @ Minv))
    Cinv = chol_inverse(jnp.linalg.cholesky(C))
    if first:
        return C, beta * A @ Cinv, alpha * Cinv, None
    return C, beta * A @ Cinv, alpha * B @ Cinv, alpha * (Minv @ Cinv)


def _iterate_terms(gains):
    """The iterate ``W_k`` of Algorithm 1 as ``sum_l c_l (W_prev M_l + X N_l)``, ``l = 1..k``.

    Unrolling ``W_1 = X KX_1 + W_prev KP_1`` and
    ``W_j = X KX_j + W_prev KP_j + Psi_prev Psi_{j-1}^{-1} W_{j-1} KW_j`` (:func:`_em_gains`)
    gives ``M_l = KP_l KW_{l+1} .. KW_k``, ``N_l = KX_l KW_{l+1} .. KW_k`` and the row weights
    ``c_l = prod_{i=l}^{k-1} psi_prev / psi_i`` (:func:`_iterate_rows`). ``gains`` is
    ``((KX_1, KP_1, None), ..., (KX_k, KP_k, KW_k))``; returns ``M = [M_1 .. M_k]`` (p, k p) and
    ``N = [N_1 .. N_k]`` (m, k p), so that a pass needs one product with each.
    """
    Ms, Ns = [], []
    for KX, KP, KW in gains:
        if KW is not None:
            Ms, Ns = [M @ KW for M in Ms], [N @ KW for N in Ns]
        Ms.append(KP)
        Ns.append(KX)
    return jnp.concatenate(Ms, axis=1), jnp.concatenate(Ns, axis=1)


def _iterate_rows(Wp_b, pp_b, X_b, psi_bs, terms):
    """Rows of ``W_k`` from the rows of ``W_prev``, ``psi_prev``, ``X`` and ``psi_1 .. psi_{k-1}``
    (``psi_bs``), with ``terms`` from :func:`_iterate_terms`.

    With ``P_l = W_prev M_l + X N_l`` (one product for all l) and ``r_i = psi_prev / psi_i``, Horner's
    rule ``W_k = P_k + r_{k-1} (P_{k-1} + r_{k-2} (... + r_1 P_1))`` multiplies by one ``r`` at a
    time, as the recursion does (and, as there, multiplies by ``psi_prev`` before dividing by
    ``psi``: ``KW = 0`` when ``alpha = 0``, and ``psi`` may be tiny).
    """
    M, N = terms
    p = M.shape[0]
    P = Wp_b @ M + X_b @ N
    W = P[:, :p]
    for l, psi_b in enumerate(psi_bs, start=1):
        W = P[:, l * p:(l + 1) * p] + pp_b[:, None] * W / psi_b[:, None]
    return W


def _stored_rows(W_b, psi_b, Wp_b, pp_b, X_b, KX, KP, KW):
    """Rows of ``W_k = X KX + W_prev KP + Psi_prev Psi_{k-1}^{-1} W_{k-1} KW`` (:func:`_em_gains`)
    from the stored ``W_{k-1}``."""
    # Psi_prev Psi^{-1} W KW, divided last: KW = 0 when alpha = 0, and psi may be tiny
    return X_b @ KX + Wp_b @ KP + pp_b[:, None] * (W_b @ KW) / psi_b[:, None]


def _psi_rows(W_b, dS_b, C, floor):
    """``psi_k = Diag(S) - rowdot(W_k, W_k C_k)`` of the rows (the M-step, module docstring), floored."""
    return jnp.maximum(dS_b - rowdot(W_b, W_b @ C), floor)


def _spectral_gains(W_prev, psi_prev, X, alpha, beta, nb: int, gram=None):
    """The spectral warm start of the projection ([LRVGA] Algorithm 1 started from the target's own factor).

    The target is ``S = D + L L^T`` with ``D = alpha Psi_prev`` and ``L = [sqrt(alpha) W_prev, sqrt(beta) X]``
    (d x q, q = p + m). With the eigen-decomposition ``L^T D^{-1} L = V diag(lam) V^T`` (a q x q Gram,
    summed over row blocks), the best rank-p part of ``D^{-1/2} S D^{-1/2} - I`` is spanned by the p
    leading eigenvectors ``V_p``: the start is ``W_0 = L V_p`` and ``psi_0 = Diag(D + L V_r V_r^T L^T)``
    (``V_r`` the other eigenvectors), so that ``W_0 W_0^T + Psi_0`` has the diagonal of ``S`` and equals
    ``S`` exactly when ``rank(L) <= p``. Returns ``(start, rest, dropped, V_p)``: ``W_0 = W_prev KP + X KX``
    as ``start = (KX, KP, None)`` (the form of :func:`_iterate_terms`), ``rest = (Mr, Nr)`` with
    ``L V_r = W_prev Mr + X Nr``, and ``dropped``, the fraction of the whitened trace
    ``tr(beta X^T D^{-1} X)`` of the increment that the rank-p start leaves to the diagonal, and ``V_p``.
    ``gram``: ``[W_prev, X]^T Psi_prev^{-1} [W_prev, X]`` when the caller has it (no pass over the rows).
    """
    p = W_prev.shape[1]
    if gram is None:
        G = lowrank.whitened_gram((W_prev, jnp.sqrt(beta / alpha) * X), psi_prev, nb=nb)
    else:
        scale = jnp.concatenate([jnp.ones(p, gram.dtype), jnp.full(X.shape[1], jnp.sqrt(beta / alpha), gram.dtype)])
        G = scale[:, None] * gram * scale
    lam, V = lowrank.symmetric_eigh(G)  # ascending
    q = G.shape[0]
    Vp, Vr = V[:, q - p:], V[:, :q - p]
    top, bottom = jnp.sqrt(alpha), jnp.sqrt(beta)
    start = (bottom * Vp[p:], top * Vp[:p], None)
    rest = (top * Vr[:p], bottom * Vr[p:])
    increment = jnp.trace(G[p:, p:])
    dropped = jnp.sum(jnp.maximum(lam[:q - p], 0.0)) / jnp.where(increment > 0, increment, 1.0)
    return start, rest, jnp.minimum(dropped, 1.0), Vp


def _last_sums(W_b, psi_b, out_gram: bool):
    """What the last pass sums: the whitened Gram ``W^T Psi^{-1} W`` of the result if asked for."""
    return {"out": lowrank.whitened_gram(W_b, psi_b, nb=1)} if out_gram else {}


def _spectral_pass(W_prev, psi_prev, X, alpha, beta, floor, nb: int, gram, last: bool, store: bool, out_gram: bool):
    """The pass that writes the spectral start ``(W_0, psi_0)`` (:func:`_spectral_gains`).

    ``last``: no EM loop follows (``W_0`` overwrites ``W_prev``, unless the start is not finite:
    :func:`_last_pass`, and the sums are :func:`_last_sums`); else the sums are the Grams of the
    first loop and ``W_0`` is written to a fresh array if ``store``, or not at all (``W = None``).
    Returns ``(start, W, psi, dropped, grams, usable)``, ``usable`` whether the start is finite.
    """
    start, (Mr, Nr), dropped, Vp = _spectral_gains(W_prev, psi_prev, X, alpha, beta, nb, gram)
    terms = _iterate_terms([start])
    usable = all_finite(*terms, Mr, Nr)
    p, m = W_prev.shape[1], X.shape[1]
    if m > p:  # many new columns: the residual's diagonal from p-wide products (_thin_residual)
        thin = (terms[0], terms[1], Vp, jnp.sqrt(alpha), jnp.sqrt(beta))

    def warm(rows):
        Wp_b, pp_b, X_b = rows
        if m > p:
            W_b, R_b = _thin_residual(Wp_b, X_b, *thin)
        else:
            # [W_0, L V_r] as one product, so that the rows of L are read once
            both = Wp_b @ jnp.concatenate([terms[0], Mr], 1) + X_b @ jnp.concatenate([terms[1], Nr], 1)
            W_b, R_b = both[:, :p], both[:, p:]
            R_b = jnp.sum(R_b * R_b, axis=1)
        psi_b = jnp.maximum(alpha * pp_b + R_b, floor)
        new = (W_b, psi_b) if last or store else (psi_b,)
        return new, (_last_sums(W_b, psi_b, out_gram) if last else _block_grams(Wp_b, pp_b, X_b, W_b, psi_b, False))

    if last:
        new, grams = _last_pass(usable, lambda W_prev, psi_prev: row_blocks.block_map(warm, (W_prev, psi_prev, X), nb,
                                                                                  in_place=1),
                                W_prev, psi_prev, nb, out_gram)
    else:
        new, grams = row_blocks.block_map(warm, (W_prev, psi_prev, X), nb)
    W, psi = new if len(new) == 2 else (None, new[0])
    return start, W, psi, dropped, grams, usable


def _thin_residual(Wp_b, X_b, KP, KX, Vp, top, bottom):
    """Rows of the spectral start ``W_0 = W_prev KP + X KX = L V_p`` and of the diagonal of the
    residual ``L V_r V_r^T L^T`` (:func:`_spectral_gains`) without the d x m product ``L V_r``.

    ``V`` is orthogonal, so ``V_r V_r^T = I - V_p V_p^T`` and row i of the residual's diagonal is
    ``|L_i V_r|^2 = |L_i - W_0,i V_p^T|^2``: the part of the row of ``L = [top W_prev, bottom X]``
    that the start does not keep, formed by subtracting the kept part and summed in squares, as
    the full product's columns were (``KP = top V_p[:p]``, ``KX = bottom V_p[p:]``). Products of
    ``W_prev``, ``X`` and ``W_0`` with p-wide matrices: O(d p (p + m)) instead of O(d (p + m) m)
    (:func:`_spectral_pass` takes this form for m > p). The rounding is that of the full product:
    an error of order ``eps |L_i|`` in each entry of the row before it is squared.
    """
    p = KP.shape[0]
    W_b = Wp_b @ KP + X_b @ KX
    EW = top * Wp_b - W_b @ Vp[:p].T
    EX = bottom * X_b - W_b @ Vp[p:].T
    return W_b, rowdot(EW, EW) + rowdot(EX, EX)


def _last_pass(usable, run, W, psi, nb: int, out_gram: bool):
    """``run(W, psi)``, the last pass of a projection (it writes the result over ``W``), where
    ``usable``; else ``((W, psi), sums)`` unchanged, their Gram summed if ``out_gram``.

    The gains of every pass are p x p arrays known before the last one: where one of them is not
    finite (a failed Cholesky or eigen-decomposition), the projection keeps its input rather than
    overwrite it with NaN, and reports it (:class:`Projection` ``ok``). One conditional, so that
    the last pass still writes in place."""
    def keep(W, psi):
        return (W, psi), ({"out": lowrank.whitened_gram(W, psi, nb=nb)} if out_gram else {})

    return jax.lax.cond(usable, lambda W, psi: tuple(run(W, psi)), keep, W, psi)


def _em_loops(W_prev, psi_prev, X, diagS, alpha, beta, floor, inner_loops: int, nb: int,
              store_iterate: bool, spectral: bool = False, gram=None, out_gram: bool = False, tol=None):
    """The inner loops of Algorithm 1 as passes over the row blocks.

    Pass 0 sums the Grams of ``W_prev``. Pass k computes the rows of the iterate ``W_k``, writes
    ``psi_k = Diag(S) - rowdot(W_k, W_k C_k)`` and, unless it is the last, sums the Grams of
    ``W_k`` for the next loop in the same pass; the last pass writes ``W_K`` and ``psi_K`` in
    place (:func:`jaxrvga.kernels.row_blocks.block_map`). So the rows are read once per loop. The rows of
    ``W_k`` come either

    * from the stored ``W_{k-1}``, rewritten in place (``store_iterate``: one more d x p array
      when ``inner_loops > 1``, the fastest for problems that fit in memory many times), or
    * recomputed from the rows of ``W_prev``, ``X``, ``psi_prev`` and the earlier ``psi``
      (:func:`_iterate_rows`), the last pass writing over ``W_prev``: any number of loops then
      needs ``W_prev`` plus ``inner_loops`` d-vectors and blocks, and pass k multiplies the rows
      by a (p, k p) matrix, not (p, p). With 3 loops this costs no more time than storing
      (the rows are read as often), but the work of K loops grows like K^2.

    With a stored iterate the loops between the first and the last are one ``lax.scan``
    (:func:`_stored_loops`), so the program compiles once whatever ``inner_loops`` is; the
    recomputed rows are unrolled (the gains of pass k are (p, k p): a shape per loop).

    ``spectral``: the EM starts from :func:`_spectral_gains` instead of ``W_prev`` (one more pass,
    which writes ``W_0`` and ``psi_0``), and ``inner_loops`` EM loops follow (0 allowed); ``gram``
    is the start's Gram if known (:func:`_spectral_gains`). With ``out_gram`` the last pass also sums
    the whitened Gram of the result. Returns ``(W, psi, dropped, gram_out)`` (``dropped = 0`` without
    the spectral start, ``gram_out = None`` without ``out_gram``). With ``tol`` (spectral start
    only) the loops stop early (:func:`_em_until`) and a fifth output is the number of loops run.
    """
    if tol is not None:
        return _em_to_tolerance(W_prev, psi_prev, X, diagS, alpha, beta, floor, inner_loops, nb, gram, tol)
    dropped = jnp.zeros((), W_prev.dtype)
    gains, psis = [], []
    W, psi, usable = W_prev, psi_prev, jnp.asarray(True)
    if spectral:
        start, W, psi, dropped, grams, usable = _spectral_pass(W_prev, psi_prev, X, alpha, beta, floor, nb, gram,
                                                               inner_loops == 0, store_iterate, out_gram)
        gains.append(start)
        psis.append(psi)
    else:
        grams = row_blocks.block_sum(lambda W_b, psi_b, X_b: _block_grams(W_b, psi_b, X_b, W_b, psi_b, True),
                                 (W_prev, psi_prev, X), nb)
    offset = len(gains)
    end = offset + inner_loops
    # with a stored iterate, the loops between the first and the last are one scan (compiled once)
    middle = range(max(offset, 1), end - 1) if store_iterate else range(0)
    for k in range(offset, end):
        if k in middle:
            if k == middle.start:
                W, psi, grams, usable = _stored_loops(W, psi, grams, usable, (W_prev, psi_prev, X, diagS), alpha,
                                                      beta, floor, len(middle), nb)
            continue
        last = k == end - 1
        C, KX, KP, KW = _em_gains(grams, alpha, beta, k == 0)
        gains.append((KX, KP, KW))
        usable = usable & all_finite(C, KX, KP, *([] if KW is None else [KW]))

        def finish(W_b, Wp_b, pp_b, X_b, dS_b, C=C, last=last):
            """``psi_k`` of the rows, the outputs of the pass and the Grams of the next loop."""
            psi_b = _psi_rows(W_b, dS_b, C, floor)
            new = (W_b, psi_b) if last or store_iterate else (psi_b,)
            return new, (_last_sums(W_b, psi_b, out_gram) if last else _block_grams(Wp_b, pp_b, X_b, W_b, psi_b, False))

        if store_iterate and k > 0:
            def rewrite(rows, KX=KX, KP=KP, KW=KW, finish=finish):
                W_b, psi_b, Wp_b, pp_b, X_b, dS_b = rows
                return finish(_stored_rows(W_b, psi_b, Wp_b, pp_b, X_b, KX, KP, KW), Wp_b, pp_b, X_b, dS_b)

            def stored(W, psi, rewrite=rewrite):
                return row_blocks.block_map(rewrite, (W, psi, W_prev, psi_prev, X, diagS), nb, in_place=1)

            if last:  # the stored iterate is overwritten; where not usable, W_prev is the result
                (W, psi), grams = _last_pass(usable, lambda *_: stored(W, psi), W_prev, psi_prev, nb, out_gram)
            else:
                (W, psi), grams = stored(W, psi)
        else:
            def rewrite(rows, terms=_iterate_terms(gains), finish=finish):
                Wp_b, pp_b, X_b, dS_b, *psi_bs = rows
                return finish(_iterate_rows(Wp_b, pp_b, X_b, psi_bs, terms), Wp_b, pp_b, X_b, dS_b)

            def iterate(W_prev, psi_prev, rewrite=rewrite, last=last):
                return row_blocks.block_map(rewrite, (W_prev, psi_prev, X, diagS, *psis), nb, in_place=1 if last else 0)

            if last:
                new, grams = _last_pass(usable, iterate, W_prev, psi_prev, nb, out_gram)
            else:
                new, grams = iterate(W_prev, psi_prev)
            W, psi = new if len(new) == 2 else (None, new[0])
            psis.append(psi)
    return W, psi, jnp.where(usable, dropped, 0.0), grams.get("out"), usable


def _stored_loops(W, psi, grams, usable, target, alpha, beta, floor, count: int, nb: int):
    """``count`` EM loops on the stored iterate, none of them the first or the last (:func:`_em_loops`).

    One ``lax.scan`` of the pass that rewrites ``W`` in place and sums the next loop's Grams, so that
    the program compiles once whatever ``count`` is, and stays differentiable in both modes.
    ``target = (W_prev, psi_prev, X, Diag(S))``. Returns ``(W, psi, grams, usable)``.
    """
    def loop(carry, _):
        W, psi, grams, usable = carry
        C, KX, KP, KW = _em_gains(grams, alpha, beta, False)

        def rewrite(rows):
            W_b, psi_b, Wp_b, pp_b, X_b, dS_b = rows
            new_b = _stored_rows(W_b, psi_b, Wp_b, pp_b, X_b, KX, KP, KW)
            new_psi = _psi_rows(new_b, dS_b, C, floor)
            return (new_b, new_psi), _block_grams(Wp_b, pp_b, X_b, new_b, new_psi, False)

        (W, psi), grams = row_blocks.block_map(rewrite, (W, psi) + tuple(target), nb, in_place=1)
        return (W, psi, grams, usable & all_finite(C, KX, KP, KW)), None

    return jax.lax.scan(loop, (W, psi, grams, usable), None, length=count)[0]


def _em_to_tolerance(W_prev, psi_prev, X, diagS, alpha, beta, floor, max_loops: int, nb: int, gram, tol):
    """The spectral start (stored) and then :func:`_em_until`; returns ``(W, psi, dropped, gram_out, loops, ok)``
    (``W_prev`` and ``psi_prev`` themselves where the result is not finite: ``ok`` False)."""
    if max_loops == 0:
        W, psi, dropped, gram_out, ok = _em_loops(W_prev, psi_prev, X, diagS, alpha, beta, floor, 0, nb, False, True,
                                                  gram, True)
        return W, psi, dropped, gram_out, jnp.zeros((), jnp.int32), ok
    _, W, psi, dropped, grams, usable = _spectral_pass(W_prev, psi_prev, X, alpha, beta, floor, nb, gram, False, True,
                                                       False)
    W, psi, gram_out, loops = _em_until(W, psi, grams, (W_prev, psi_prev, X, diagS), alpha, beta, floor,
                                        max_loops, nb, tol)
    ok = usable & all_finite(gram_out)  # the stored iterate never overwrote W_prev
    (W, psi), sums = _last_pass(ok, lambda *_: ((W, psi), {"out": gram_out}), W_prev, psi_prev, nb, True)
    return W, psi, jnp.where(ok, dropped, 0.0), sums["out"], loops, ok


def _em_until(W, psi, grams, target, alpha, beta, floor, max_loops: int, nb: int, tol):
    """EM loops from ``(W, psi)`` (with its ``grams``) until ``|W_k - W_{k-1}|_F <= tol |W_k|_F``,
    at most ``max_loops``.

    ``target = (W_prev, psi_prev, X, Diag(S))``. The iterate is stored and rewritten in place in each
    pass (one ``d x p`` array besides ``W_prev``), so the number of loops can be decided at run time:
    a ``lax.scan`` of ``max_loops`` passes, each a ``lax.cond`` that runs the loop only while the last
    change exceeds ``tol`` (the remaining passes cost nothing on one filter), so that the result is
    differentiable in both modes (a ``while_loop`` is not in reverse mode). Returns
    ``(W, psi, gram, loops)``, ``gram`` the whitened Gram of the result.
    """
    def loop(carry):
        W, psi, grams, k, _ = carry
        C, KX, KP, KW = _em_gains(grams, alpha, beta, False)

        def rewrite(rows):
            W_b, psi_b, Wp_b, pp_b, X_b, dS_b = rows
            new_b = _stored_rows(W_b, psi_b, Wp_b, pp_b, X_b, KX, KP, KW)
            new_psi = _psi_rows(new_b, dS_b, C, floor)
            sums = _block_grams(Wp_b, pp_b, X_b, new_b, new_psi, False)
            sums.update(moved=jnp.sum((new_b - W_b) ** 2), size=jnp.sum(new_b ** 2))
            return (new_b, new_psi), sums

        (W, psi), sums = row_blocks.block_map(rewrite, (W, psi) + tuple(target), nb, in_place=1)
        change = jnp.sqrt(sums.pop("moved") / jnp.maximum(sums.pop("size"), jnp.finfo(W.dtype).tiny))
        return W, psi, sums, k + 1, change

    def masked(carry, _):
        going = ~(carry[4] <= tol)  # a NaN change runs every loop
        return jax.lax.cond(going, loop, lambda c: c, carry), None

    start = (W, psi, grams, jnp.zeros((), jnp.int32), jnp.asarray(jnp.inf, W.dtype))
    (W, psi, grams, loops, _), _ = jax.lax.scan(masked, start, None, length=max_loops)
    return W, psi, grams["G"], loops


def recursive_em_step(W_prev, psi_prev, X, alpha, beta, inner_loops: int = 1, *,
                      psi_floor: float = PSI_FLOOR, block_rows=None, store_iterate=None):
    """Algorithm 1 of [LRVGA]: ``W W^T + Psi  ~FA~  alpha (W_prev W_prev^T + Psi_prev) + beta X X^T``.

    The target ``S = alpha (W_prev W_prev^T + Psi_prev) + beta X X^T`` (eq. 28) is never
    formed. Starting from ``(W, psi) = (W_prev, psi_prev)``, each inner loop is one batch-EM
    iteration (eqs. 20-21) on ``S``::

        M       = I_p + W^T Psi^{-1} W
        V       = beta X (X^T Psi^{-1} W)
                  + alpha (W_prev (W_prev^T Psi^{-1} W) + Psi_prev Psi^{-1} W)
                                                                 (= S Psi^{-1} W)
        W_new   = V (I_p + M^{-1} W^T Psi^{-1} V)^{-1}
        psi_new = beta rowdot(X, X) + alpha (rowdot(W_prev, W_prev) + psi_prev)
                  - rowdot(W_new M^{-1}, V)

    It is computed in the equivalent well-scaled form of the module docstring: with the E-step gain ``Bt =
    Psi^{-1} W M^{-1}``, ``Q = S Bt = V M^{-1}`` and the p x p matrix ``Bt^T S Bt`` are assembled from the Grams
    ``A = X^T Bt``, ``B = W_prev^T Bt`` and ``Bt^T Psi_prev Bt``, then ``W_new = Q C^{-1}`` with ``C = M^{-1} +
    Bt^T S Bt`` (p x p Cholesky factorisations only). In the first inner loop ``(W, psi) = (W_prev, psi_prev)``
    gives ``B = I - M^{-1}``, hence ``Q = alpha W + beta X A`` and ``C = alpha I + (1 - alpha) M^{-1} + beta A^T
    A``: two Grams instead of four. The iterates are recomputed row by row from ``W_prev`` rather than stored
    (:func:`_em_loops`), and every pass streams over row blocks (:mod:`jaxrvga.kernels.row_blocks`). No 1/m
    normalisation is applied to a (d, m) ``X``: scale it by ``1/sqrt(m)`` (as eq. 46 does) or through ``beta``.

    Args:
      W_prev: (d, p).
      psi_prev: (d,) positive.
      X: (d,) or (d, m).
      alpha, beta: non-negative scalars (may be traced).
      inner_loops: number of EM iterations (a Python int; 1 to 3 suffice per the paper).
      psi_floor: relative floor keeping ``psi > 0`` (module docstring).
      block_rows: the inner loops stream over row blocks of about this many rows (a Gram
        pass, then one pass per loop that computes the iterate's rows, writes its ``psi`` and
        sums the next loop's Grams; same formulas), so that besides ``W_prev`` (rewritten in
        place into the result) only d-vectors and block-sized temporaries exist. ``None``
        (default): blocks of :data:`jaxrvga.kernels.row_blocks.BLOCK_ROWS` rows when
        ``d p >= BLOCK_MIN_ELEMENTS``, no blocking below (:func:`jaxrvga.kernels.row_blocks.num_blocks`).
        ``0``: one block (the filters run by :mod:`jaxrvga.sharding` are rebuilt with it).
      store_iterate: with ``inner_loops > 1``, keep the iterate ``W_k`` between loops (one more
        d x p array) rather than recompute its rows from ``W_prev`` in each pass (O(inner_loops^2)
        row work instead of O(inner_loops), no memory). ``None`` (default): store it only when
        ``d p < BLOCK_MIN_ELEMENTS``, i.e. for problems small enough that memory does not matter.

    Returns:
      ``(W, psi)``. Cost O(inner_loops d p (m + p) + inner_loops p^3), or O(inner_loops^2 ...)
      for the d p terms when the iterate is recomputed; memory: the ``d x p`` input,
      ``inner_loops`` d-vectors and O(d m) plus blocks (one more ``d x p`` with ``store_iterate``).
    """
    inner_loops = positive_int("inner_loops", inner_loops)
    W_prev, psi_prev, X = _check_em_inputs(W_prev, psi_prev, X)
    check_nonnegative("alpha", alpha)
    check_nonnegative("beta", beta)
    diagS = beta * rowdot(X, X) + alpha * (rowdot(W_prev, W_prev) + psi_prev)
    floor = psi_floor_value(diagS, psi_floor)
    nb = row_blocks.num_blocks(*W_prev.shape, block_rows)
    if store_iterate is None:
        store_iterate = W_prev.size < row_blocks.BLOCK_MIN_ELEMENTS
    return _em_loops(W_prev, psi_prev, X, diagS, alpha, beta, floor, inner_loops, nb, bool(store_iterate))[:2]


class Projection(NamedTuple):
    """All that :func:`spectral_em_step` computes: the factors, ``dropped``, the whitened Gram ``W^T Psi^{-1} W``
    of the result (summed in its last pass), the number of EM loops run and ``ok``: False where a gain of the
    projection was not finite (an eigen-decomposition or a Cholesky factor that failed), in which case ``W``,
    ``psi`` and the Gram are the input's and ``dropped`` is 0."""

    W: jax.Array
    psi: jax.Array
    dropped: jax.Array
    gram: jax.Array
    loops: jax.Array
    ok: jax.Array


def spectral_em_step(W_prev, psi_prev, X, alpha=1.0, beta=1.0, inner_loops: int = 1, *,
                     psi_floor: float = PSI_FLOOR, block_rows=None, store_iterate=None, gram=None,
                     tol: Optional[float] = None, details: bool = False):
    """Algorithm 1 started from the spectral warm start: FA of ``alpha (W_prev W_prev^T + Psi_prev) + beta X X^T``.

    Same target and EM loops as :func:`recursive_em_step`, but the EM starts from the rank-p truncation of the
    target in the metric whitened by ``alpha Psi_prev`` (:func:`_spectral_gains`) instead of from ``W_prev``,
    which holds almost nothing of the new directions ``X``. When ``[W_prev, X]`` has rank <= p the start equals
    the target and EM stays there, so the projection is exact at full rank (experiments/REPORT.md, "L-RVGA
    accurate by default"). ``inner_loops`` EM loops follow the start (0 allowed). ``alpha`` must be > 0.

    Returns ``(W, psi, dropped)``: ``dropped`` is the fraction of the increment's whitened
    trace ``tr(beta X^T (alpha Psi_prev)^{-1} X)`` that the rank-p start left to the diagonal
    (0 when nothing is lost; near 1 when p is far too small).

    ``gram``: the whitened Gram ``[W_prev, X]^T Psi_prev^{-1} [W_prev, X]`` if the caller has it
    (it then skips the first pass over the rows). ``tol``: ``inner_loops`` is a maximum, and the
    loops stop once a loop moves ``W`` by at most ``tol`` relative to it (Frobenius norms; the
    iterate is then stored, one more ``d x p`` array). ``details``: return a :class:`Projection`.

    Args:
      W_prev, psi_prev: the previous factors, (d, p) and (d,).
      X: the increment's columns, (d, m).
      alpha, beta: the weights of the previous precision and of the increment.
      inner_loops: EM loops after the start, >= 0.
      psi_floor: the relative floor of ``psi``.
      block_rows: rows per block (:func:`jaxrvga.kernels.row_blocks.num_blocks`).
      store_iterate: keep the iterate between loops (None: only with ``tol``).
      gram: the whitened Gram of ``[W_prev, X]``, if known.
      tol: the stopping tolerance of the loops (None: all ``inner_loops`` run).
      details: return a :class:`Projection`.

    Returns:
      ``(W, psi, dropped)``, or a :class:`Projection` with ``details``.
    """
    if not isinstance(inner_loops, int) or isinstance(inner_loops, bool) or inner_loops < 0:
        raise ValueError(f"inner_loops must be an integer >= 0, got {inner_loops!r}")
    if tol is not None and not (isinstance(tol, (int, float)) and tol >= 0):
        raise ValueError(f"tol must be a number >= 0 or None, got {tol!r}")
    W_prev, psi_prev, X = _check_em_inputs(W_prev, psi_prev, X)
    check_positive("alpha", alpha)
    check_nonnegative("beta", beta)
    if inner_loops:
        diagS = beta * rowdot(X, X) + alpha * (rowdot(W_prev, W_prev) + psi_prev)
        floor = psi_floor_value(diagS, psi_floor)
    else:  # the start alone needs only the mean of Diag(S), for the floor of psi
        diagS, floor = None, _floor_at(_mean_diag(W_prev, psi_prev, X, alpha, beta), psi_floor)
    nb = row_blocks.num_blocks(*W_prev.shape, block_rows)
    if store_iterate is None:
        store_iterate = W_prev.size < row_blocks.BLOCK_MIN_ELEMENTS
    if gram is not None and jnp.shape(gram) != (W_prev.shape[1] + X.shape[1],) * 2:
        raise ValueError(f"gram must be the (p + m) x (p + m) Gram of [W_prev, X], got shape {jnp.shape(gram)}")
    out = _em_loops(W_prev, psi_prev, X, diagS, alpha, beta, floor, inner_loops, nb,
                    bool(store_iterate), spectral=True, gram=gram, out_gram=details, tol=tol)
    if tol is None:
        out = out[:4] + (jnp.asarray(inner_loops, jnp.int32),) + out[4:]
    return Projection(*out) if details else tuple(out[:3])


def _check_em_inputs(W_prev, psi_prev, X):
    """Shapes of Algorithm 1's inputs; ``X`` (d,) becomes (d, 1). Returns the arrays."""
    W_prev = jnp.asarray(W_prev)
    psi_prev = jnp.asarray(psi_prev)
    X = jnp.asarray(X, dtype=W_prev.dtype)
    if X.ndim == 1:
        X = X[:, None]
    if W_prev.ndim != 2 or psi_prev.shape != W_prev.shape[:1] or X.ndim != 2 \
            or X.shape[0] != W_prev.shape[0]:
        raise ValueError(f"recursive_em_step: W_prev (d, p), psi_prev (d,) and X (d,) or (d, m) "
                         f"must agree, got {W_prev.shape}, {psi_prev.shape}, {X.shape}")
    if not 1 <= W_prev.shape[1] <= W_prev.shape[0]:
        raise ValueError(f"the rank p = W_prev.shape[1] must satisfy 1 <= p <= d, got {W_prev.shape}")
    check_positive("psi_prev", psi_prev)
    return W_prev, psi_prev, X


__all__ = ["PSI_FLOOR", "recursive_em_step", "spectral_em_step", "Projection", "rowdot",
           "chol_inverse", "e_step", "m_step", "psi_floor_value"]
