r"""Algebra of a factor-analysis precision ``Lam = W W^T + diag(psi)`` ([LRVGA] §3, eq. 27, §4.2.2).

``W`` is (d, p) with p << d and ``psi`` (d,) is positive. Everything here costs
O(d p^2 + p^3) time and O(d p) memory: the only matrices ever formed are d x p or
p x p. The p x p work goes through one Cholesky factor of ``M`` and never through an
explicit inverse: with ``P = Lam^{-1}`` (the covariance) and ``Psi = diag(psi)``, by Woodbury
([LRVGA] eq. (27)),

.. math::

    P = \Psi^{-1} - \Psi^{-1} W M^{-1} W^\top \Psi^{-1},
    \qquad M = I_p + W^\top \Psi^{-1} W.

In the code:

* Woodbury:            ``P v = v / psi - (W/psi) M^{-1} (W/psi)^T v``                (27)
* determinant lemma:   ``logdet Lam = sum(log psi) + logdet M``
* diagonal of P:       ``Diag(P) = 1/psi - rowdot((W/psi) L^{-T}, (W/psi) L^{-T})``, ``M = L L^T``
* Proposition 1 (corrected, see :func:`sample_from_draws`): exact samples of ``N(mean, P)``.

:func:`to_dense_precision` and :func:`to_dense_covariance` build d x d matrices; they
are for tests and evaluation only.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve, solve_triangular

from . import row_blocks
from ..validation import check_float_array, check_positive, check_vector, positive_int


#: The posterior standard deviations by which :meth:`Woodbury.solve_accurate` lets the rounding of
#: the Woodbury form move a mean step before it corrects it.
CANCELLATION_TOL = 1e-2


def _tmatmul(v, W):
    """``W^T v`` for ``v`` (d,) or (d, k), written as ``v^T W`` so XLA does not transpose ``W``.

    ``W`` may be a tuple of column blocks ``(W_1, W_2)`` of one factor ``[W_1, W_2]`` that is never
    joined into one array (the unprojected precision of an L-RVGA step: ``W`` and the new columns).
    """
    if isinstance(W, tuple):
        return jnp.concatenate([_tmatmul(v, w) for w in W], axis=0)
    return v @ W if v.ndim == 1 else (v.T @ W).T


def _matmul(W, c):
    """``W c`` for a factor ``W`` or a tuple of its column blocks (:func:`_tmatmul`)."""
    if not isinstance(W, tuple):
        return W @ c
    cuts = np.cumsum([w.shape[1] for w in W])[:-1]
    return sum(w @ part for w, part in zip(W, jnp.split(c, cuts, axis=0)))


def width(W) -> int:
    """Number of columns of a factor ``W`` or of a tuple of its column blocks."""
    return sum(w.shape[1] for w in W) if isinstance(W, tuple) else W.shape[1]


class Woodbury(NamedTuple):
    """Cached factorisation of ``Lam = W W^T + diag(psi)`` for repeated O(d p^2) operations.

    Build it with :func:`factorize`; ``chol`` is the lower Cholesky factor of
    ``M = I_p + W^T Psi^{-1} W``. Only ``W``, ``psi`` and p x p matrices are held, and
    every method works with d-vectors and products ``W c``, so applying it needs no d x p
    temporary.
    """

    W: jax.Array
    psi: jax.Array
    chol: jax.Array

    @property
    def Wp(self):
        """``Psi^{-1} W`` (d x p), formed on demand."""
        return self.W / self.psi[:, None]

    def _scale(self, v):
        return v / (self.psi if v.ndim == 1 else self.psi[:, None])

    def solve(self, v):
        """``P v = Psi^{-1} v - Psi^{-1} W M^{-1} W^T Psi^{-1} v`` ([LRVGA] eq. 27); ``v`` (d,) or (d, k)."""
        u = self._scale(jnp.asarray(v))
        return self.solve_given(v, _tmatmul(u, self.W))

    def solve_given(self, v, projection):
        """:meth:`solve` when ``W^T Psi^{-1} v`` (``projection``) is already known: one pass over ``W``."""
        return self._scale(jnp.asarray(v)) - self._scale(_matmul(self.W, cho_solve((self.chol, True), projection)))

    def solve_corrected(self, v, projection):
        """:meth:`solve_given` made accurate along the large directions of ``Lam``: three passes over ``W``.

        The Woodbury form subtracts two terms of the size of ``Psi^{-1} v``; where the whitened
        curvature ``|B|^2`` (``B = Psi^{-1/2} W``) is large, their difference ``s0`` carries a rounding
        error of ``eps |Psi^{-1/2} v|`` along ``B``, where the posterior's standard deviation is only
        ``1 / |B|``: in float32 with inputs of size 1e3 the plain mean step is off by hundreds of posterior
        standard deviations (README, "Reliability"). The exact ``s = P v`` satisfies
        ``W^T s = y``, ``y = M^{-1} W^T Psi^{-1} v`` (Woodbury pushed through ``W``), so one correction
        ``s0 + Psi^{-1} W M^{-1} (y - W^T s0)``, itself free of cancellation, divides that error by
        ``1 + sigma^2`` along each singular direction ``sigma`` of ``B``; what remains is the rounding
        of ``M`` itself (a Gram of ``B``), small until ``sigma^2`` nears ``1 / eps``."""
        y = cho_solve((self.chol, True), projection)
        s0 = self._scale(jnp.asarray(v)) - self._scale(_matmul(self.W, y))
        return s0 + self._scale(_matmul(self.W, cho_solve((self.chol, True), y - _tmatmul(s0, self.W))))

    def solve_accurate(self, v, projection, gram, tol=None):
        """:meth:`solve_given`, or :meth:`solve_corrected` where the rounding of the former may move
        the result by more than ``tol`` standard deviations of ``N(., P)``: its bound is ``2 eps
        |Psi^{-1/2} v| sqrt(1 + trace(gram))`` (the error ``2 eps |Psi^{-1/2} v|`` of the subtraction,
        whitened, times the largest singular value of ``B``), ``gram = B^T B`` the whitened Gram of
        ``W``. One conditional: well-scaled steps skip the two extra passes over ``W`` (float64
        nearly always; BENCHMARKS.md, "The corrected mean step"). ``tol=None``: :data:`CANCELLATION_TOL`
        as it is when the step is traced."""
        v = jnp.asarray(v)
        cancels = cancellation_bound(jnp.sum(v * self._scale(v)), gram) > (CANCELLATION_TOL if tol is None else tol)
        return jax.lax.cond(cancels, self.solve_corrected, self.solve_given, v, projection)

    def quad_form(self, x):
        """``x^T P x`` for a vector ``x`` (or the diagonal of ``X^T P X`` for (d, k), a column at a time:
        vmapped, 3-5x faster on CPU than as one (d, k) block; BENCHMARKS.md, "Low-rank quadratic forms a
        column at a time")."""
        x = jnp.asarray(x)
        if x.ndim == 2:
            return jax.vmap(self.quad_form, in_axes=1)(x)
        u = self._scale(x)
        b = solve_triangular(self.chol, _tmatmul(u, self.W), lower=True)
        return jnp.sum(x * u, axis=0) - jnp.sum(b * b, axis=0)

    def logdet(self):
        """``logdet(W W^T + diag(psi)) = sum(log psi) + logdet M`` (matrix determinant lemma)."""
        return jnp.sum(jnp.log(self.psi)) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(self.chol)))

    def inverse_diag(self):
        """``Diag(P) = 1/psi - rowdot(W L^{-T}, W L^{-T}) / psi^2``, the marginal variances."""
        G = solve_triangular(self.chol, self.W.T, lower=True)  # (p, d) = L^{-1} W^T
        return 1.0 / self.psi - jnp.sum(G * G, axis=0) / self.psi**2

    def gain(self):
        """``L = Psi^{-1} W M^{-1}`` (d x p), the gain of Proposition 1 and of the E-step."""
        eye = jnp.eye(width(self.W), dtype=self.psi.dtype)
        return self._scale(_matmul(self.W, cho_solve((self.chol, True), eye)))

    def matvec(self, v):
        """``Lam v = W (W^T v) + psi v``; ``v`` is (d,) or (d, k)."""
        return matvec(self.W, self.psi, v)


def cancellation_bound(h_squared, gram):
    """``2 eps |h| sqrt(1 + trace(gram))``: a bound, in standard deviations of the result, of the rounding
    of the Woodbury form ``h - B (I + B^T B)^{-1} B^T h`` (``|h|^2 = h_squared``, ``gram = B^T B``): the
    subtraction's error ``2 eps |h|`` times the largest singular value of ``B`` (at most
    ``sqrt(trace(gram))``), the most the metric ``I + B B^T`` stretches it (:meth:`Woodbury.solve_accurate`).

    Args:
      h_squared: ``|h|^2``, a scalar.
      gram: ``B^T B``, (q, q).

    Returns:
      The scalar bound.
    """
    eps = jnp.finfo(jnp.result_type(gram)).eps
    return 2 * eps * jnp.sqrt(h_squared * (1 + jnp.trace(gram)))


def symmetrize(S):
    """``(S + S^T) / 2``.

    Args:
      S: a square matrix.

    Returns:
      The symmetric matrix of ``S``'s shape.
    """
    return 0.5 * (S + S.T)


def symmetric_eigh(A):
    """``(lam, V)`` of a symmetric ``A`` (..., q, q), ascending, as ``jnp.linalg.eigh``, on any IEEE machine.

    LAPACK's ``syevd`` (XLA's CPU eigh) gives up (``info != 0``, so NaN) on some finite matrices
    whose entries are so small that their squares underflow in the Householder reduction, which
    happens with XLA's flush-to-zero: a whitened Gram with columns of ``W`` at 0 and rounding
    noise of 1e-28 beside entries of 1e3 in float32 (tests/integration/test_reliability.py). So ``A`` is
    scaled by a power of two (exactly) to a largest entry in [0.5, 1) and the entries below
    ``tiny^(1/4)`` of that set to 0 (3e-10 in float32, 1e-77 in float64: far below eigh's own
    backward error ``eps |A|``): a product of two remaining entries, and its square, is then
    above the underflow threshold ``tiny``, and a matrix without such entries is decomposed as
    by ``eigh``, bit for bit.

    Args:
      A: symmetric matrices, (..., q, q).

    Returns:
      ``(lam, V)``: eigenvalues (..., q), ascending, and eigenvectors as columns (..., q, q).
    """
    A = 0.5 * (A + jnp.swapaxes(A, -1, -2))
    largest = jnp.max(jnp.abs(A), axis=(-2, -1), keepdims=True)
    usable = (largest > 0) & jnp.isfinite(largest)
    scale = jnp.ldexp(jnp.ones_like(largest), jnp.frexp(jnp.where(usable, largest, 1.0))[1])
    unit = A / scale
    unit = jnp.where(jnp.abs(unit) < jnp.finfo(A.dtype).tiny ** 0.25, 0.0, unit)
    lam, V = jnp.linalg.eigh(unit, symmetrize_input=False)
    return lam * scale[..., 0], V


def whitened_gram(W, psi, block_rows=None, nb=None):
    """``W^T Psi^{-1} W`` as the exactly symmetric Gram ``B^T B``, ``B = W / sqrt(psi)``.

    ``W`` may be a tuple of column blocks (:func:`_tmatmul`). Large ``W`` are streamed over row
    blocks (:func:`jaxrvga.kernels.row_blocks.num_blocks`, or ``nb`` of them), so ``B`` never exists as a
    whole ``d x p`` array.

    Args:
      W: the factor (d, p), or a tuple of column blocks.
      psi: the diagonal, (d,), > 0.
      block_rows: rows per block (None: :func:`jaxrvga.kernels.row_blocks.num_blocks` decides; 0: one block).
      nb: the number of row blocks, overriding ``block_rows``.

    Returns:
      The (p, p) Gram.
    """
    parts = W if isinstance(W, tuple) else (W,)

    def gram(psi_b, *parts_b):
        B = jnp.concatenate(parts_b, axis=1) / jnp.sqrt(psi_b)[:, None]  # a block of rows only
        return B.T @ B

    if nb is None:
        nb = row_blocks.num_blocks(psi.shape[0], width(W), block_rows)
    return row_blocks.block_sum(gram, (psi, *parts), nb)


def bordered_gram(gram, W, psi, X, rhs=None, block_rows=None):
    """The whitened Gram of ``L = [W, X]`` from that of ``W`` (``gram``): only ``X``'s border is summed.

    ``[[gram, W^T Psi^{-1} X], [X^T Psi^{-1} W, X^T Psi^{-1} X]]``, exactly symmetric; one pass
    over the rows of ``W`` for an ``X`` (d, m) of a few columns instead of a whole Gram. With a
    vector ``rhs``, the same pass also gives ``L^T Psi^{-1} rhs``: returns ``(gram, that)``.
    Large ``W`` are streamed over row blocks (``block_rows`` as in :func:`whitened_gram`): a
    product with the whole ``W`` may make the CPU backend pack a copy of it (float32).

    Args:
      gram: the whitened Gram of ``W``, (p, p).
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.
      X: the new columns, (d, m).
      rhs: an optional vector (d,).
      block_rows: as :func:`whitened_gram`'s.

    Returns:
      The (p + m, p + m) Gram, or ``(gram, L^T Psi^{-1} rhs)`` with ``rhs``.
    """
    m = X.shape[1]

    def border(psi_b, W_b, X_b, *rhs_b):
        # V^T = [X, rhs]^T Psi^{-1} built as rows: V^T W, not W^T V, is XLA's fast form, and no transposed copy
        Vt = jnp.concatenate([X_b.T] + [r[None, :] for r in rhs_b], axis=0) / psi_b
        return Vt @ W_b, Vt @ X_b  # (m [+ 1], q), (m [+ 1], m)

    nb = row_blocks.num_blocks(psi.shape[0], W.shape[1] + m, block_rows)
    VW, VX = row_blocks.block_sum(border, (psi, W, X) + (() if rhs is None else (rhs,)), nb)
    XX = 0.5 * (VX[:m] + VX[:m].T)
    bordered = jnp.block([[gram, VW[:m].T], [VW[:m], XX]])
    return bordered if rhs is None else (bordered, jnp.concatenate([VW[m], VX[m]]))


def gram_m(W, psi, block_rows=None):
    """``M = I_p + W^T Psi^{-1} W`` (:func:`whitened_gram`), exactly symmetric.

    Args:
      W: the factor (d, p), or a tuple of column blocks.
      psi: the diagonal, (d,), > 0.
      block_rows: as :func:`whitened_gram`'s.

    Returns:
      The (p, p) matrix ``M``.
    """
    return jnp.eye(width(W), dtype=psi.dtype) + whitened_gram(W, psi, block_rows)


def check_factors(W, psi):
    """Trace-time shape check of a pair ``W`` (d, p), ``psi`` (d,); returns them as arrays.

    ``W`` may be a tuple of column blocks (:func:`_tmatmul`), each checked.

    Args:
      W: the factor (d, p), or a tuple of column blocks.
      psi: the diagonal, (d,).

    Returns:
      ``(W, psi)`` as arrays; raises ``ValueError`` for a shape mismatch.
    """
    if isinstance(W, tuple):
        checked = [check_factors(w, psi) for w in W]
        return tuple(w for w, _ in checked), checked[0][1]
    W = check_float_array("W", W)
    psi = check_float_array("psi", psi)
    if W.ndim != 2 or psi.shape != W.shape[:1]:
        raise ValueError(f"W must be (d, p) and psi (d,), got W {W.shape} and psi {psi.shape}")
    if W.shape[0] == 0 or W.shape[1] == 0:
        raise ValueError(f"W must be (d, p) with d >= 1 and p >= 1, got W {W.shape}")
    return W, psi


def _check_rhs(name, v, d):
    """``v`` (d,) or (d, k) for a d x d operator."""
    v = check_float_array(name, v)
    if v.ndim not in (1, 2) or v.shape[0] != d:
        raise ValueError(f"{name} must have shape ({d},) or ({d}, k), got {v.shape}")
    return v


def factorize(W, psi, gram=None) -> Woodbury:
    """Cholesky-factorise ``M = I_p + W^T Psi^{-1} W`` ([LRVGA] eq. 27) once; O(d p^2 + p^3).

    ``M`` is symmetric to the last bit (:func:`gram_m`) and positive definite whenever
    ``psi > 0``; its Gram is streamed over row blocks at large ``d p``. ``gram``: the whitened
    Gram ``W^T Psi^{-1} W`` when the caller has it (O(p^3), no pass over ``W``).

    Args:
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.
      gram: the whitened Gram ``W^T Psi^{-1} W``, (p, p), if known.

    Returns:
      A :class:`Woodbury` (its solves, quadratic forms and log-determinant reuse the factor).
    """
    W, psi = check_factors(W, psi)
    M = gram_m(W, psi) if gram is None else jnp.eye(width(W), dtype=psi.dtype) + gram
    return Woodbury(W, psi, jnp.linalg.cholesky(M))


def solve(W, psi, v):
    """``(W W^T + diag(psi))^{-1} v`` by Woodbury ([LRVGA] eq. 27), O(d p^2); ``v`` (d,) or (d, k).

    Args:
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.
      v: the right-hand side, (d,) or (d, k).

    Returns:
      An array of ``v``'s shape.
    """
    fac = factorize(W, psi)
    return fac.solve(_check_rhs("v", v, fac.psi.shape[0]))


def quad_form(W, psi, x):
    """``x^T (W W^T + diag(psi))^{-1} x`` in O(d p^2).

    Args:
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.
      x: a vector, (d,).

    Returns:
      The scalar quadratic form.
    """
    fac = factorize(W, psi)
    return fac.quad_form(_check_rhs("x", x, fac.psi.shape[0]))


def logdet(W, psi):
    """``logdet(W W^T + diag(psi))`` by the matrix determinant lemma, O(d p^2).

    Args:
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.

    Returns:
      The scalar log-determinant.
    """
    return factorize(W, psi).logdet()


def inverse_diag(W, psi):
    """Diagonal of ``(W W^T + diag(psi))^{-1}`` (marginal variances), O(d p^2).

    Args:
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.

    Returns:
      The (d,) diagonal.
    """
    return factorize(W, psi).inverse_diag()


def matvec(W, psi, v):
    """``(W W^T + diag(psi)) v`` in O(d p); no factorisation needed.

    Args:
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.
      v: a vector (d,) or matrix (d, k).

    Returns:
      An array of ``v``'s shape.
    """
    W, psi = check_factors(W, psi)
    v = _check_rhs("v", v, W.shape[0])
    return W @ _tmatmul(v, W) + (psi if v.ndim == 1 else psi[:, None]) * v


def ensemble_gain(W, psi):
    """``L = Psi^{-1} W M^{-1}`` (d x p) of Proposition 1 ([LRVGA] §4.2.2).

    Args:
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.

    Returns:
      ``L``, (d, p).
    """
    return factorize(W, psi).gain()


def sample_from_draws(mean, W, psi, z, e):
    """Samples of ``N(mean, (W W^T + diag(psi))^{-1})`` from given base draws (Proposition 1, corrected).

    With ``x = z / sqrt(psi) ~ N(0, Psi^{-1})`` and ``e ~ N(0, I_p)`` independent,
    ``x+ = x + L (e - W^T x) = (I_d - L W^T) x + L e`` with ``L = Psi^{-1} W M^{-1}`` has
    covariance ``(I - L W^T) Psi^{-1} (I - L W^T)^T + L L^T = (W W^T + Psi)^{-1}``
    ([LRVGA] eqs. 38-40). The paper's first form ``x + L(e - L W^T x)`` is a typo.

    Args:
      mean: (d,).
      W, psi: (d, p) and (d,); ``W`` may be a tuple of column blocks (:func:`_tmatmul`).
      z: (num, d) standard normal; e: (num, p) standard normal. Passing fixed draws
        reproduces common-random-number ("frozen draws") schemes.

    Returns:
      (num, d) samples, in O(num d p + d p^2) time and O(num d) extra memory.
    """
    fac = factorize(W, psi)
    d, p = fac.psi.shape[0], width(fac.W)
    mean = check_vector("mean", mean, d)
    z, e = check_float_array("z", z), check_float_array("e", e)
    if z.ndim != 2 or z.shape[1] != d or e.shape != (z.shape[0], p):
        raise ValueError(f"z must be (num, {d}) and e (num, {p}), got z {z.shape} and e {e.shape}")
    x = z / jnp.sqrt(fac.psi)  # rows ~ N(0, Psi^{-1})
    r = e - _tmatmul(x.T, fac.W).T  # (num, p) = e - W^T x
    corr = cho_solve((fac.chol, True), r.T)  # (p, num) = M^{-1}(e - W^T x)
    return mean + x + (_matmul(fac.W, corr) / fac.psi[:, None]).T


def sample(key, mean, W, psi, num: int):
    """``num`` exact samples of ``N(mean, (W W^T + diag(psi))^{-1})``, shape (num, d).

    Fresh base draws from ``key`` fed to :func:`sample_from_draws` (Proposition 1, corrected:
    ``x + L(eps - W^T x)``). Cost O(num d p + d p^2); no d x d matrix.

    Args:
      key: a PRNG key.
      mean: the mean, (d,).
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.
      num: the number of samples.

    Returns:
      The (num, d) samples.
    """
    W, psi = check_factors(W, psi)
    d, p = W.shape
    mean = check_vector("mean", mean, d)
    num = positive_int("num", num)
    kz, ke = jax.random.split(key)
    z = jax.random.normal(kz, (num, d), dtype=mean.dtype)
    e = jax.random.normal(ke, (num, p), dtype=mean.dtype)
    return sample_from_draws(mean, W, psi, z, e)


def _check_init_args(dim, rank, prior_var):
    dim = positive_int("dim", dim)
    try:
        rank = positive_int("rank", rank)
    except ValueError:
        rank = None
    if rank is None or rank > dim:
        raise ValueError(f"rank must satisfy 1 <= rank <= dim={dim}, got rank={rank}")
    prior_var = check_float_array("prior_var", prior_var)
    if prior_var.shape not in ((), (dim,)):
        raise ValueError(f"prior_var must be a scalar or have shape ({dim},), got {prior_var.shape}")
    check_positive("prior_var", prior_var)
    return dim, rank


def init_factors(key, dim: int, rank: int, prior_var, eps: float = 1e-8, dtype=None):
    """Trace-matched initialisation ``W0 W0^T + Psi0 ~ P0^{-1}`` of [LRVGA] Appendix D.

    For ``P0 = sigma0^2 I_d`` (``prior_var = sigma0^2``):
    ``psi0 = (1 - eps) / sigma0^2`` and the columns of ``W0`` are independent Gaussian
    directions rescaled to norm ``w0 = sqrt(eps d / p) / sigma0``, so that
    ``tr(W0 W0^T + Psi0) = p w0^2 + d psi0 = d / sigma0^2 = tr(P0^{-1})``.
    ``W0 = 0`` would be a fixed point of EM, hence the small ``eps > 0``.

    A vector ``prior_var`` (d,) gives the per-coordinate version of Remark 2:
    ``psi0_i = (1 - eps) / sigma_i^2`` and row i of ``W0`` is divided by ``sigma_i``
    (trace-matched in expectation).

    Args:
      key: a PRNG key for the directions of ``W0``.
      dim: ``d``.
      rank: ``p``.
      prior_var: ``sigma0^2``, a scalar or a (d,) vector, > 0.
      eps: the share of the prior precision's trace given to ``W0``, in (0, 1).
      dtype: the floating dtype (default JAX's default float).

    Returns:
      ``(W0, psi0)`` of shapes (d, p) and (d,).
    """
    dim, rank = _check_init_args(dim, rank, prior_var)
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps must lie in (0, 1), got {eps}")
    dtype = jnp.result_type(float) if dtype is None else dtype
    inv_sigma = 1.0 / jnp.sqrt(jnp.broadcast_to(jnp.asarray(prior_var, dtype=dtype), (dim,)))
    U = jax.random.normal(key, (dim, rank), dtype=dtype)
    U = U / jnp.linalg.norm(U, axis=0) * jnp.sqrt(eps * dim / rank)
    return U * inv_sigma[:, None], (1.0 - eps) * inv_sigma**2


def init_factors_plain(key, dim: int, rank: int, prior_var, scale: float = 1e-2, dtype=None):
    """The initialisation of the authors' logistic experiments ([LRVGA] §6 experiments, see experiments/REPORT.md).

    ``psi0 = 1 / prior_var`` and ``W0 = scale * N(0, 1)`` entrywise (``scale`` is 1e-3
    in [LRVGA] Fig. 3 and 1e-2 in Fig. 4). Not trace-matched: the initial precision
    exceeds ``P0^{-1}`` by ``W0 W0^T``.

    Args:
      key: a PRNG key for ``W0``.
      dim: ``d``.
      rank: ``p``.
      prior_var: the prior variance, a scalar or a (d,) vector, > 0.
      scale: the standard deviation of ``W0``'s entries.
      dtype: the floating dtype (default JAX's default float).

    Returns:
      ``(W0, psi0)`` of shapes (d, p) and (d,).
    """
    dim, rank = _check_init_args(dim, rank, prior_var)
    dtype = jnp.result_type(float) if dtype is None else dtype
    psi0 = jnp.broadcast_to(1.0 / jnp.asarray(prior_var, dtype=dtype), (dim,))
    return scale * jax.random.normal(key, (dim, rank), dtype=dtype), psi0


def to_dense_precision(W, psi):
    """Dense ``W W^T + diag(psi)``. O(d^2 p) time, O(d^2) memory: tests and evaluation only.

    Args:
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.

    Returns:
      The (d, d) precision.
    """
    return W @ W.T + jnp.diag(psi)


def to_dense_covariance(W, psi):
    """Dense ``(W W^T + diag(psi))^{-1}`` by Woodbury. O(d^2 p): tests and evaluation only.

    Args:
      W: the factor, (d, p).
      psi: the diagonal, (d,), > 0.

    Returns:
      The (d, d) covariance.
    """
    return factorize(W, psi).solve(jnp.eye(W.shape[0], dtype=W.dtype))


__all__ = ["symmetrize", "Woodbury", "CANCELLATION_TOL", "cancellation_bound", "check_factors", "factorize", "gram_m",
           "whitened_gram", "bordered_gram", "symmetric_eigh", "solve",
           "quad_form", "logdet", "inverse_diag", "matvec",
           "ensemble_gain", "sample", "sample_from_draws", "init_factors", "init_factors_plain",
           "to_dense_precision", "to_dense_covariance"]
