"""Observation models: an exponential-family output on a predictor ``eta = h(theta, x)``.

A :class:`Model` couples a :class:`Family` (the law of ``y`` given ``eta``) with a
predictor. For generalised linear models (``eta = x^T theta``) every Gaussian
expectation the filters need reduces to a 1-D expectation over
``eta ~ N(x^T mu, x^T P x)`` ([RVGA] §4, [LRVGA] §4.1): :meth:`Model.glm_moments`
returns ``(E[d log p / d eta], E[d^2 log p / d eta^2])``, in closed form for the
Gaussian and Poisson families, by the inverse-probit approximation ([RVGA] eq. 58)
for the logistic model, and by Gauss-Hermite quadrature otherwise.

Inputs of the linear predictors may be sparse: :class:`SparseRow` (indices and values of the
non-zeros), for every GLM here and :func:`softmax_regression`.

Multi-class outputs use :func:`categorical` (K logits, softmax link, full Fisher
``diag(p) - p p^T`` with a square-root factor), e.g. :func:`softmax_regression`.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import math

import jax
import jax.numpy as jnp
import numpy as np

from .kernels import special
from ._values import Bound, same, value_key
from .validation import (check_counts, check_float_array, check_labels01, check_positive, is_concrete,
                         positive_int)


class _FamilyFields(NamedTuple):
    name: str
    log_prob: Callable
    mean: Callable
    variance: Callable
    fisher: Callable
    check_y: Callable
    fisher_root: Optional[Callable] = None
    fixed_variance: bool = False
    learned_noise: bool = False
    predictive: Optional[Callable] = None
    log_predictive: Optional[Callable] = None
    vector_output: bool = False
    null_directions: int = 0


class Family(_FamilyFields):
    """Law of an observation given its natural parameter / linear predictor ``eta``.

    The callables see traced values (they run inside ``jit``, ``grad`` and ``vmap``):

    * ``log_prob(y, eta) -> log p(y | eta)``, one value per component of ``y`` (per observation,
      i.e. per row of K logits, for :func:`categorical`, which reads a ``y`` of the shape of ``eta``
      as one-hot rows: pass its labels as given, never broadcast to the shape of ``eta``).
    * ``mean(eta) -> E[y | eta]``; ``variance(eta) -> Var(y | eta)``.
    * ``fisher(eta) = -E_y[d^2 log p(y|eta) / d eta^2]``, the curvature of the EKF and of the
      generalised Gauss-Newton (GGN) approximation ([LRVGA] eq. 41); it equals ``variance``
      for canonical links.
    * ``fisher_root(eta) -> R``: for ``eta`` of shape (n,) (a scalar counts as (1,)), a matrix
      ``R`` of shape (r, n) with ``R^T R = Fisher(eta)``, the full (n, n) Fisher matrix. The GGN
      curvature of a predictor with Jacobian ``J`` (n, d) is then ``J^T R^T R J`` (a rank-r
      increment with factor ``X = J^T R^T``, (d, r)). Left out (``None``), it is built from
      ``fisher``: ``diag(sqrt(max(fisher(eta), 0)))``, r = n.
    * ``fixed_variance``: ``Var(y | eta)`` does not depend on ``eta`` (a Gaussian of known
      variance). The ``moment_ekf`` scheme's jitter, which guards outputs whose variance collapses
      as they saturate, then does not apply: the scheme is the EKF on such a family.
    * ``learned_noise``: a Gaussian whose variance ``s2`` is unknown and learned by the filter
      (:mod:`jaxrvga.noise`, :func:`gaussian` with ``None``): the callables are those of ``s2 = 1``,
      the unit in which the state's covariance is kept.
    * ``check_y(name, y) -> y`` raises ``ValueError`` naming ``name`` on impossible values. It sees
      concrete or traced ``y`` and checks values only where they are concrete.
    * ``predictive(family, m, v) -> (mean, var, total)``: the predictive of ``y`` for
      ``eta ~ N(m, v)`` in closed form: ``E[E[y | eta]]``, ``Var[E[y | eta]]`` and ``Var(y)``
      (``v`` (..., K, K) for a vector output). ``None``: by Gauss-Hermite quadrature.
    * ``log_predictive(family, y, m, V) -> log E[p(y | eta)]`` for the components ``eta ~ N(m, V)``
      of one observation (``m`` (k,), ``V`` (k, k)) jointly, in closed form; ``None``: each
      component by quadrature. :mod:`jaxrvga.predictive` uses both.
    * ``vector_output``: ``eta`` holds the K logits of one observation (:func:`categorical`): its
      predictive covariance is kept whole and its ``y`` is a label or a one-hot row.
    * ``null_directions``: of a vector output, how many directions of ``eta`` carry no curvature in
      any observation's Fisher (:func:`categorical`: 1, the common shift of the logits). The
      linearised schemes (``ekf``, ``moment_ekf``) keep the ``K - null_directions`` leading rows of
      each observation's eigen-decomposed Fisher (:func:`jaxrvga.schemes.linearise`), the same
      curvature in fewer columns.

    Elementwise families (every family here except :func:`categorical`) treat the components of
    ``eta`` and ``y`` independently: ``mean``, ``variance`` and ``fisher`` return arrays of the shape
    of ``eta``. :func:`categorical` couples the components of ``eta`` (the logits); its ``variance``
    and ``fisher`` return full (..., K, K) matrices and ``fisher_root`` its rank-(K-1) factor.
    """

    __slots__ = ()

    def __new__(cls, name, log_prob, mean, variance, fisher, check_y, fisher_root=None, fixed_variance=False,
                learned_noise=False, predictive=None, log_predictive=None, vector_output=False, null_directions=0):
        if fisher_root is None:
            fisher_root = _DiagonalRoot(fisher)
        null_directions = positive_int("null_directions", null_directions, minimum=0)
        if null_directions and not vector_output:
            raise ValueError(f"null_directions must be 0 for an elementwise family, got {null_directions!r}")
        return super().__new__(cls, name, log_prob, mean, variance, fisher, check_y, fisher_root, bool(fixed_variance),
                               bool(learned_noise), predictive, log_predictive, bool(vector_output),
                               null_directions)

    @property
    def root_diagonal(self) -> Optional[Callable]:
        """``eta -> sqrt(max(fisher(eta), 0))`` (the shape of ``eta``) where ``fisher_root`` is the
        default diagonal one (``fisher_root`` left out), else None."""
        return self.fisher_root.diagonal if isinstance(self.fisher_root, _DiagonalRoot) else None


class _DiagonalRoot:
    """``eta (n,) -> diag(sqrt(max(fisher(eta), 0)))`` (n, n): the root of an elementwise Fisher.

    :meth:`diagonal` gives its diagonal alone, of the shape of ``eta``.
    """

    def __init__(self, fisher: Callable):
        self.fisher = fisher

    def __eq__(self, other):
        return type(other) is _DiagonalRoot and same(self.fisher, other.fisher)

    def __hash__(self):
        return hash(value_key(self.fisher))

    def diagonal(self, eta):
        return jnp.sqrt(jnp.maximum(self.fisher(eta), 0.0))

    def __call__(self, eta):
        return jnp.diag(jnp.atleast_1d(self.diagonal(eta)))


def _gaussian_log_prob(nv, y, eta):
    return -0.5 * ((y - eta) ** 2 / nv + jnp.log(2 * jnp.pi * nv))


def _gaussian_variance(nv, eta):
    return jnp.full_like(eta, nv)


def _gaussian_fisher(nv, eta):
    return jnp.ones_like(eta) / nv


def _identity(eta):
    return eta


def gaussian_log_density(y, m, V):
    """``log N(y | m, V)`` for ``y``, ``m`` (k,) and ``V`` (k, k), by a Cholesky factor of ``V``."""
    L = jnp.linalg.cholesky(V)
    z = jax.scipy.linalg.solve_triangular(L, y - m, lower=True)
    return -0.5 * (z @ z) - jnp.sum(jnp.log(jnp.diagonal(L))) - 0.5 * y.shape[0] * jnp.log(2.0 * jnp.pi)


def _gaussian_predictive(family, m, v):
    return m, v, v + family.variance(m)


def _gaussian_log_predictive(family, y, m, V):
    return gaussian_log_density(y, m, V + jnp.diag(family.variance(m)))


def _bernoulli_predictive(family, m, v):  # [RVGA] eqs. 62-63
    p, var = special.probit_predictive(m, v)
    return p, var, p * (1.0 - p)


def _poisson_predictive(family, m, v):  # E[e^a] = exp(m + v/2), Var[e^a] = (e^v - 1) exp(2m + v)
    rate = jnp.exp(m + 0.5 * v)
    var = jnp.expm1(v) * rate**2
    return rate, var, var + rate


def _categorical_predictive(family, m, V):  # the pairwise inverse probit
    p, var = special.softmax_probit(m, V)
    return p, var, p * (1.0 - p)


def _categorical_log_predictive(family, y, m, V):
    p, _ = special.softmax_probit(m, V)
    return family.log_prob(y, jnp.log(p))


def _any_y(name, y):
    return y


def gaussian(noise_var=1.0) -> Family:
    """Gaussian output ``y ~ N(eta, noise_var)`` (identity link).

    ``noise_var=None``: the variance ``s2`` is unknown and learned as the data arrive, with the
    conjugate normal-inverse-gamma belief of :mod:`jaxrvga.noise` (the filter's ``init`` takes
    ``noise=(shape, rate)``); the family's callables are then those of ``s2 = 1``.
    """
    learned = noise_var is None
    nv = 1.0 if learned else noise_var
    check_positive("noise_var", nv)
    return Family(
        name="gaussian",
        log_prob=Bound(_gaussian_log_prob, nv),
        mean=_identity,
        variance=Bound(_gaussian_variance, nv),
        fisher=Bound(_gaussian_fisher, nv),
        check_y=_any_y,
        fixed_variance=True,
        learned_noise=learned,
        predictive=_gaussian_predictive,
        log_predictive=_gaussian_log_predictive,
    )


def _bernoulli_log_prob(y, eta):
    return y * eta - jnp.logaddexp(0.0, eta)


def bernoulli() -> Family:
    """Bernoulli output with logit link: ``p(y=1 | eta) = sig(eta)``, ``y in {0, 1}``."""
    return Family(
        name="bernoulli",
        log_prob=_bernoulli_log_prob,
        mean=special.sigmoid,
        variance=special.sig1,
        fisher=special.sig1,
        check_y=check_labels01,
        predictive=_bernoulli_predictive,
    )


def _poisson_log_prob(y, eta):
    return y * eta - jnp.exp(eta) - jax.scipy.special.gammaln(y + 1.0)


def poisson_family() -> Family:
    """Poisson output with log link: ``y ~ Poisson(exp(eta))``."""
    return Family(
        name="poisson",
        log_prob=_poisson_log_prob,
        mean=jnp.exp,
        variance=jnp.exp,
        fisher=jnp.exp,
        check_y=check_counts,
        predictive=_poisson_predictive,
    )


def _one_hot(y, eta):
    """``y`` as one-hot rows matching ``eta`` (..., K): labels when ``y.ndim == eta.ndim - 1``,
    already one-hot when ``y.ndim == eta.ndim``."""
    y = jnp.asarray(y)
    eta = jnp.asarray(eta)
    if y.ndim == eta.ndim:
        return y.astype(eta.dtype)
    if y.ndim == eta.ndim - 1:
        return (y[..., None] == jnp.arange(eta.shape[-1])).astype(eta.dtype)
    raise ValueError(f"y must be labels of shape {eta.shape[:-1]} or one-hot of shape {eta.shape}, "
                     f"got shape {y.shape}")


def _check_class_labels(num_classes: int, name, y):
    """Integer labels in {0..K-1} (checked where concrete); one-hot rows pass as labels 0 and 1.

    Labels and one-hot rows are told apart by ``log_prob`` from the shape of the logits, which a
    check of ``y`` alone cannot see (a data set of labels of shape (T, m) may have m = K).
    """
    if not is_concrete(y):
        return y
    a = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(a) & (np.floor(a) == a) & (a >= 0) & (a <= num_classes - 1)
    if not np.all(ok):
        raise ValueError(f"{name} must contain integer labels in {{0..{num_classes - 1}}} for the "
                         f"categorical model, got values such as {a[~ok].ravel()[:3].tolist()}")
    return y


def _categorical_log_prob(y, eta):
    return jnp.sum(_one_hot(y, eta) * special.log_softmax(eta), axis=-1)


def _categorical_parts(eta):
    """``p``, ``q = 1 - p`` summed over the other classes (no cancellation), ``sqrt(p)``, off-diagonal mask."""
    log_p = special.log_softmax(eta)
    p = jnp.exp(log_p)
    off = ~jnp.eye(eta.shape[-1], dtype=bool)
    q = jnp.sum(jnp.where(off, p[..., None, :], 0.0), axis=-1)
    return p, q, jnp.exp(0.5 * log_p), off  # sqrt(p) without sqrt's infinite slope at 0


def _categorical_fisher(eta):  # diag(p q) - p p^T off the diagonal
    p, q, _, off = _categorical_parts(eta)
    return jnp.where(off, -p[..., :, None] * p[..., None, :], (p * q)[..., None, :])


def _categorical_fisher_root(eta):  # R_ik = sqrt(p_i) (delta_ik - p_k)
    p, q, r, off = _categorical_parts(eta)
    return jnp.where(off, -r[..., :, None] * p[..., None, :], (r * q)[..., None, :])


def _softmax(eta):
    return jax.nn.softmax(eta, axis=-1)


def categorical(num_classes: int) -> Family:
    """Categorical output over ``K = num_classes`` classes with softmax link: ``p(y = k | eta) = softmax(eta)_k``.

    ``eta`` holds the K logits on its last axis. ``y`` is an integer label in {0..K-1} (a scalar
    for ``eta`` (K,)) or a one-hot row of the shape of ``eta``. ``log_prob`` is the log-softmax,
    stable for any logits. ``mean`` is ``p = softmax(eta)``; ``variance`` and ``fisher`` are the full
    (..., K, K) matrix ``diag(p) - p p^T`` (the Fisher of the logits; the link is canonical) and
    ``fisher_root`` is ``R = diag(sqrt p) - sqrt(p) p^T`` (K, K), of rank K - 1, with
    ``R^T R = diag(p) - 2 p p^T + p (sum p) p^T = diag(p) - p p^T``. Diagonal entries use
    ``1 - p_k = sum_{j != k} p_j`` (as :func:`jaxrvga.kernels.special.sig1` does), so they keep full
    relative precision when one class is nearly certain. The logits are identified
    only up to a common shift (``F 1 = 0``).
    """
    K = positive_int("num_classes", num_classes)
    if K < 2:
        raise ValueError(f"num_classes must be at least 2, got {num_classes!r}")
    return Family(
        name="categorical",
        log_prob=_categorical_log_prob,
        mean=_softmax,
        variance=_categorical_fisher,
        fisher=_categorical_fisher,
        check_y=Bound(_check_class_labels, K),
        fisher_root=_categorical_fisher_root,
        predictive=_categorical_predictive,
        log_predictive=_categorical_log_predictive,
        vector_output=True,
        null_directions=1,
    )


@jax.tree_util.register_pytree_node_class
class SparseRow:
    """Sparse input rows of a linear predictor: ``x[indices[..., k]] += values[..., k]`` for each k.

    ``indices`` (integers) and ``values`` share one shape ``(..., nnz)``: one row (nnz,), a
    minibatch (m, nnz), a stream (T, nnz) or (T, m, nnz). Every row holds the same number ``nnz``
    of entries, so that a stream is two arrays whose leading axis is time, which
    :func:`jaxrvga.run`, ``jax.lax.scan`` and ``jax.vmap`` slice as they slice a dense ``xs``.
    A row with fewer non-zeros is padded with entries of value 0 (index 0, say: they add
    nothing); repeated indices add up, as in a COO matrix. Indices outside ``[0, d)`` are refused
    with a ``ValueError`` where concrete; traced ones add nothing.

    It is a registered pytree of its own, not a NamedTuple (``jnp.asarray`` of a tuple would
    stack the two arrays silently), nor ``jax.experimental.sparse.BCOO``, whose static shape
    keeps the stream's (T, d) when ``lax.scan`` slices its arrays. The filters scatter each row
    into a dense (d,) vector inside their step (``todense``): a step's work is O(d) or more
    whatever the row (the mean alone is (d,)), so the results are those of the dense row, bit
    for bit, and the stream costs O(T nnz) memory instead of O(T d).
    """

    __slots__ = ("indices", "values")

    def __init__(self, indices, values):
        self.indices = indices
        self.values = values

    def tree_flatten(self):
        """The pytree children ``(indices, values)``."""
        return (self.indices, self.values), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        """The row of the pytree children ``(indices, values)``."""
        del aux
        return cls(*children)

    def __repr__(self):
        return f"SparseRow(indices={self.indices!r}, values={self.values!r})"

    @property
    def shape(self) -> tuple:
        """``(..., nnz)``: the shape of ``indices`` and ``values``."""
        return tuple(jnp.shape(self.indices))

    @property
    def ndim(self) -> int:
        """The number of axes of ``indices``, the last one the ``nnz`` entries."""
        return len(self.shape)

    def _kept(self, dim: int):
        """``(indices, values)`` with the entries outside ``[0, dim)`` set to index 0 and value 0."""
        idx = jnp.asarray(self.indices)
        ok = (idx >= 0) & (idx < dim)
        return jnp.where(ok, idx, 0), jnp.where(ok, jnp.asarray(self.values), 0)

    def todense(self, dim: int, dtype=None):
        """The dense rows ``(..., dim)``: zeros, plus ``values`` added at ``indices`` (a scatter-add)."""
        idx, val = self._kept(dim)
        if dtype is None:
            dtype = val.dtype if jnp.issubdtype(val.dtype, jnp.floating) else jnp.result_type(float)
        lead, nnz = idx.shape[:-1], idx.shape[-1]
        n = math.prod(lead)
        rows = jnp.arange(n)[:, None]
        out = jnp.zeros((n, dim), dtype).at[rows, idx.reshape(n, nnz)].add(val.reshape(n, nnz).astype(dtype))
        return out.reshape(lead + (dim,))

    def dot(self, theta):
        """``x @ theta`` for each row, in O(nnz): ``sum_k values[k] theta[indices[k]]``.

        ``theta`` is (d,) (a scalar per row) or (d, K) (K values per row)."""
        theta = jnp.asarray(theta)
        idx, val = self._kept(theta.shape[0])
        val = val.reshape(val.shape + (1,) * (theta.ndim - 1))
        return jnp.sum(val * theta[idx], axis=idx.ndim - 1)

    def checked(self, name: str, dim: int, dtype=None) -> "SparseRow":
        """The row checked against a state of dimension ``dim``: integer indices in ``[0, dim)``
        (where concrete), real values of the same shape (cast to ``dtype``); ``ValueError`` naming
        ``name`` otherwise."""
        idx = self.indices if isinstance(self.indices, (np.ndarray, jax.Array)) else np.asarray(self.indices)
        if not jnp.issubdtype(idx.dtype, jnp.integer):
            raise ValueError(f"{name}: the indices of a SparseRow must be integers, got dtype {idx.dtype}")
        val = check_float_array(f"{name} (the values of a SparseRow)", self.values)
        if idx.ndim == 0 or val.shape != idx.shape:
            raise ValueError(f"{name}: the indices and values of a SparseRow must share one shape (..., nnz), "
                             f"got {idx.shape} and {val.shape}")
        if is_concrete(idx) and idx.size:
            a = np.asarray(idx)
            bad = a[(a < 0) | (a >= dim)]
            if bad.size:
                raise ValueError(f"{name}: the indices of a SparseRow must lie in [0, {dim}) to match the "
                                 f"state, got {bad.ravel()[:3].tolist()}")
        return SparseRow(jnp.asarray(idx), val if dtype is None else val.astype(dtype))

    @classmethod
    def from_dense(cls, X, nnz: Optional[int] = None) -> "SparseRow":
        """The non-zeros of the dense rows ``X`` (..., d), in index order, each row padded with
        entries (0, 0.0) to ``nnz`` (default: the most non-zeros of a row, at least 1)."""
        X = np.asarray(X)
        if X.ndim == 0:
            raise ValueError(f"X must have at least one axis, got shape {X.shape}")
        count = int(np.max(np.sum(X != 0, axis=-1), initial=0))
        nnz = max(count, 1) if nnz is None else _row_width(nnz, count)
        order = np.argsort(X == 0, axis=-1, kind="stable")[..., :nnz]  # the non-zeros first
        values = np.take_along_axis(X, order, axis=-1)
        return cls(np.where(values != 0, order, 0), values)

    @classmethod
    def from_csr(cls, matrix, nnz: Optional[int] = None) -> "SparseRow":
        """The rows of a CSR matrix (``indptr``, ``indices``, ``data``, as ``scipy.sparse.csr_array``
        holds them), each padded with entries (0, 0.0) to ``nnz`` (default: the longest row)."""
        indptr, cols, data = (np.asarray(getattr(matrix, a)) for a in ("indptr", "indices", "data"))
        counts = np.diff(indptr)
        count = int(np.max(counts, initial=0))
        nnz = max(count, 1) if nnz is None else _row_width(nnz, count)
        row = np.repeat(np.arange(counts.size), counts)
        slot = np.arange(data.size) - indptr[row]
        idx = np.zeros((counts.size, nnz), cols.dtype)
        val = np.zeros((counts.size, nnz), data.dtype)
        idx[row, slot], val[row, slot] = cols, data
        return cls(idx, val)


def _row_width(nnz, count: int) -> int:
    """``nnz`` checked: a positive int, at least ``count`` (the most non-zeros of a row)."""
    nnz = positive_int("nnz", nnz)
    if nnz < count:
        raise ValueError(f"nnz must be at least {count}, the most non-zeros of a row, got {nnz}")
    return nnz


class Model(NamedTuple):
    """An observation model ``p(y | theta, x) = family(y | eta = predict(theta, x))``.

    ``kind`` (``"linear_gaussian"``, ``"logistic"``, ``"glm"`` or ``"nonlinear"``) names it; the
    filters ask its capabilities instead: :attr:`is_glm`, :attr:`has_exact_update`,
    :attr:`has_logistic_root`. ``moments`` (GLMs only) maps ``(m, v, y)`` to the pair
    ``(E[d log p/d eta], E[d^2 log p/d eta^2])`` for ``eta ~ N(m, v)``. ``per_input`` (models
    from :func:`minibatch`): the predictor of one input, which ``predict`` maps over the minibatch.
    """

    kind: str
    family: Family
    predict: Callable  # (theta, x) -> eta, scalar for GLMs, scalar or vector otherwise
    moments: Optional[Callable]  # (m, v, y) -> (E[l'], E[l''])  (GLMs only)
    noise_var: Optional[object] = None  # linear-Gaussian only (1, the unit of s2, where it is learned)
    expected_log_lik: Optional[Callable] = None  # (m, v, y) -> E_{eta ~ N(m, v)}[log p(y | eta)]  (GLMs)
    per_input: Optional[Callable] = None  # (theta, x_i) -> eta_i, the predictor of one input (minibatch)

    @property
    def is_glm(self) -> bool:
        """True when ``eta = x^T theta`` (the 1-D projection applies)."""
        return self.kind in ("linear_gaussian", "logistic", "glm")

    @property
    def has_exact_update(self) -> bool:
        """True for the linear-Gaussian model: the R-VGA step is the Kalman update ([RVGA] Thm 2)."""
        return self.kind == "linear_gaussian"

    @property
    def has_logistic_root(self) -> bool:
        """True for logistic regression: the implicit step is the 2-D root of [RVGA] eqs. (69)-(70)."""
        return self.kind == "logistic"

    def log_lik(self, theta, x, y):
        """``log p(y | theta, x)`` summed over the components of ``y``."""
        return jnp.sum(self.family.log_prob(y, self.predict(theta, x)))

    def glm_moments(self, m, v, y):
        """``(E[d log p / d eta], E[d^2 log p / d eta^2])`` for ``eta ~ N(m, v)`` (GLMs)."""
        if self.moments is None:
            raise ValueError(f"the {self.kind} model has no 1-D projected moments")
        return self.moments(m, v, y)


def _linear_predict(theta, x):
    return x.dot(theta) if isinstance(x, SparseRow) else jnp.dot(x, theta)


def _gauss_hermite_expected_log_lik(family: Family, num_points: int, m, v, y):
    """``E_{eta ~ N(m, v)}[log p(y | eta)]`` by Gauss-Hermite quadrature."""
    y = jnp.asarray(y)[..., None]  # broadcast against the quadrature axis
    return special.gaussian_expectation_1d(lambda a: family.log_prob(y, a), m, v, num_points)


def _moments_from_expectation(expected, m, v, y):
    """GLM moments from ``E[log p]`` by Bonnet's and Price's theorems:
    ``E[l'] = d/dm E[l]`` and ``E[l''] = 2 d/dv E[l]``."""
    dm = jnp.vectorize(jax.grad(expected, argnums=0))
    dv = jnp.vectorize(jax.grad(expected, argnums=1))
    return dm(m, v, y), 2.0 * dv(m, v, y)


def _linear_gaussian_moments(noise_var, m, v, y):
    del v
    return (y - m) / noise_var, -jnp.ones_like(m) / noise_var


def _linear_gaussian_expected(noise_var, m, v, y):
    return -0.5 * (((y - m) ** 2 + v) / noise_var + jnp.log(2 * jnp.pi * noise_var))


def linear_gaussian(noise_var=1.0) -> Model:
    """``y = x^T theta + eps``, ``eps ~ N(0, noise_var)``; R-VGA is then the Kalman filter ([RVGA] Thm 2).

    ``noise_var`` may be a traced array, so it can be vmapped over. ``None``: unknown and learned
    (:func:`gaussian`; the filter is then the exact normal-inverse-gamma one of :mod:`jaxrvga.noise`).
    """
    family = gaussian(noise_var)
    nv = 1.0 if noise_var is None else noise_var
    return Model("linear_gaussian", family, _linear_predict, Bound(_linear_gaussian_moments, nv),
                 nv, Bound(_linear_gaussian_expected, nv))


def _logistic_moments(m, v, y):
    mean, slope = special.probit_moments(m, v)
    return y - mean, -slope


def logistic() -> Model:
    """Bayesian logistic regression, ``y in {0, 1}``, ``p(y=1) = sig(x^T theta)``.

    Gaussian expectations use the inverse-probit closed form ([RVGA] eq. 58):
    ``E[sig(a)] ~= sig(k m)``, ``E[sig'(a)] ~= k sig'(k m)``, ``k = k(v)``.
    """
    fam = bernoulli()
    return Model("logistic", fam, _linear_predict, _logistic_moments, None,
                 Bound(_gauss_hermite_expected_log_lik, fam, 32))


def _poisson_moments(m, v, y):
    rate = jnp.exp(m + 0.5 * v)
    return y - rate, -rate


def _poisson_expected(m, v, y):
    return y * m - jnp.exp(m + 0.5 * v) - jax.scipy.special.gammaln(y + 1.0)


def poisson() -> Model:
    """Poisson regression with log link; Gaussian moments are exact: ``E[e^a] = exp(m + v/2)``."""
    return Model("glm", poisson_family(), _linear_predict, _poisson_moments, None, _poisson_expected)


def glm(family: Family, num_points: int = 32) -> Model:
    """A generalised linear model ``eta = x^T theta`` with any family; expectations by Gauss-Hermite."""
    if family.vector_output:
        raise ValueError("family: a categorical output needs K logits, not one linear predictor; "
                         "use softmax_regression(dim, num_classes) or nonlinear(h, categorical(K))")
    expected = Bound(_gauss_hermite_expected_log_lik, family, num_points)
    return Model("glm", family, _linear_predict, Bound(_moments_from_expectation, expected), None, expected)


def _unravelled(h, unravel, theta, x):
    return h(unravel(theta), x)


def nonlinear(h: Callable, family: Family | None = None, unravel: Callable | None = None) -> Model:
    """A nonlinear model ``eta = h(theta, x)`` with an exponential-family output (default Gaussian, unit noise).

    ``h`` may return a scalar or a vector; components of ``y`` are independent given ``eta``.
    Filters take Jacobians of ``h`` by autodiff ([LRVGA] §4.2, GGN eq. 41).
    Filters work on a flat parameter vector. For a pytree of parameters (a flax or
    equinox model), pass ``unravel`` from ``jax.flatten_util.ravel_pytree``: ``h`` is then
    called as ``h(unravel(theta), x)``.
    """
    family = gaussian(1.0) if family is None else family
    predict = h if unravel is None else Bound(_unravelled, h, unravel)
    return Model("nonlinear", family, predict, None)


def _each_input(predict, theta, x):
    """``predict`` mapped over the leading axis of the inputs ``x`` (a minibatch)."""
    return jax.vmap(predict, in_axes=(None, 0))(theta, x)


def minibatch(model: Model) -> Model:
    """``model`` for minibatches: ``x`` with a leading axis of m inputs (any pytree whose leaves have
    it), ``y`` of m observations, and ``eta`` one prediction per input (``predict`` vmapped over
    the inputs), so that an update absorbs the m observations at once. With the EKF scheme that
    is one linearisation at the mean for the m ([RVGA] eq. 81 with the m rows of ``J``), cheaper
    per observation for networks than m steps (BENCHMARKS.md, "Minibatches"). Every observation
    is counted once. :func:`jaxrvga.predictive.predictive` takes the returned model too (it
    predicts as the model of one input). GLMs take minibatches ``x`` (m, d) as they are, so only
    nonlinear models (:func:`nonlinear`, :func:`softmax_regression`) are accepted.
    """
    if not isinstance(model, Model) or model.kind != "nonlinear":
        kind = model.kind if isinstance(model, Model) else type(model).__name__
        raise ValueError(f"model must be a nonlinear model (jr.models.nonlinear); got {kind!r}"
                         + (": GLMs take x of shape (m, d) as they are" if isinstance(model, Model) else ""))
    return model._replace(predict=Bound(_each_input, model.predict), per_input=model.predict)


def softmax_regression(dim: int, num_classes: int) -> Model:
    """Multi-class linear model: logits ``eta = Theta^T x`` (K,), ``y ~ categorical(softmax(eta))``.

    ``theta`` is the (dim * K,) vector ``Theta.ravel()`` of a (dim, K) weight matrix ``Theta``
    (row-major: ``theta[i * K + k] = Theta[i, k]``); ``x`` is (dim,); ``y`` a label in {0..K-1}
    or a one-hot (K,). Built with :func:`nonlinear`, so filters linearise it by autodiff (exactly:
    the predictor is linear). A common shift of the K columns leaves the likelihood unchanged;
    the prior identifies it.
    """
    dim = positive_int("dim", dim)
    family = categorical(num_classes)
    return nonlinear(Bound(_linear_logits, dim, int(num_classes)), family)


def _linear_logits(dim, K, theta, x):
    if isinstance(x, SparseRow):
        return x.dot(jnp.reshape(theta, (dim, K)))
    return jnp.asarray(x) @ jnp.reshape(theta, (dim, K))


# --------------------------------------------------------------------------- observation checks

def check_observation(state, x, y, model: Model):
    """One observation ``(x, y)`` of ``model`` checked against the belief ``state`` (shapes, dtypes and,
    where concrete, the family's values of ``y``): ``(x, y)`` as the update takes them."""
    if model.is_glm:
        return glm_inputs(state, x, y, model)
    if jnp.iscomplexobj(jnp.asarray(y)):
        raise ValueError("y must be real")
    model.family.check_y("y", y)
    check_y_shape(model, "y", y, jax.eval_shape(model.predict, state.mean, x).shape)
    return x, jnp.asarray(y, state.mean.dtype)


def glm_inputs(state, x, y, model):
    """``x`` (d,) with scalar ``y``, or (m, d) with ``y`` (m,), or a :class:`~jaxrvga.models.SparseRow`
    of shape (nnz,) or (m, nnz); returns ``(X (m, d), y (m,))`` in the state's dtype (a sparse ``x``
    scattered into its dense rows)."""
    d, dtype = state.mean.shape[0], state.mean.dtype
    sparse = isinstance(x, SparseRow)
    x = x.checked("x", d, dtype) if sparse else jnp.asarray(x)
    if jnp.iscomplexobj(x.values if sparse else x) or jnp.iscomplexobj(jnp.asarray(y)):
        raise ValueError("x and y must be real")
    if sparse and x.ndim > 2:
        raise ValueError(f"x: a SparseRow must have shape (nnz,) or (m, nnz), got {x.shape}")
    if not sparse and (x.ndim not in (1, 2) or x.shape[-1] != d):
        raise ValueError(f"x must have shape ({d},) or (m, {d}) to match the state, got {x.shape}")
    want = () if x.ndim == 1 else x.shape[:1]
    if jnp.shape(y) != want:
        raise ValueError(f"y must have shape {want} to match x of shape {x.shape} for the {model.kind} "
                         f"model, got {jnp.shape(y)}")
    model.family.check_y("y", y)
    X = x.todense(d, dtype) if sparse else x.astype(dtype)
    return jnp.atleast_2d(X), jnp.reshape(jnp.asarray(y, dtype), (-1,))


def check_y_shape(model: Model, name: str, y, eta_shape, time_axis: bool = False):
    """``y`` of a nonlinear model has the shape of the predictor's output ``eta`` (one per output; a
    single output may be a scalar): no silent broadcasting. A categorical family takes labels
    (``eta``'s shape without its last axis, the K logits) or one-hot rows of ``eta``'s shape, each
    with exactly one 1 and zeros elsewhere (checked where concrete). ``time_axis``: ``y`` and
    ``eta_shape`` lead with the time axis T of a data set."""
    shape = tuple(jnp.shape(y))
    eta_shape = tuple(eta_shape)
    one = (shape[:1] if time_axis else ()) + (1,)
    if model.family.vector_output:
        if shape == eta_shape[:-1]:
            return
        if shape == eta_shape:
            a = np.asarray(y) if is_concrete(y) else None
            if a is not None and not (np.all((a == 0) | (a == 1)) and np.all(np.sum(a, axis=-1) == 1)):
                raise ValueError(f"{name}: one-hot rows of the categorical model must hold exactly one 1 "
                                 f"and zeros elsewhere")
            return
        raise ValueError(f"{name} must hold labels of shape {eta_shape[:-1]} or one-hot rows of shape "
                         f"{eta_shape} for the model's logits, got shape {shape}")
    if shape != eta_shape and not (eta_shape in (one, one[:-1]) and shape in (one, one[:-1])):
        raise ValueError(f"{name} must have the shape {eta_shape} of the model's output, got {shape}")


def check_data(model: Model, state, xs, ys):
    """The data set ``(xs, ys)`` of a run checked against ``model`` and the belief ``state`` (the
    shapes of a stream of GLM rows or of a nonlinear model's inputs and outputs, the family's values of
    ``ys``); run by :func:`jaxrvga.run` before it scans (never under jit). Raises ``ValueError``."""
    if model.is_glm:
        d = state.mean.shape[0]
        if isinstance(xs, SparseRow):
            shape = xs.checked("xs", d).shape
            if len(shape) not in (2, 3):
                raise ValueError(f"xs: a SparseRow stream must have shape (T, nnz) or (T, m, nnz), got {shape}")
        else:
            shape = jnp.shape(xs)
            if len(shape) not in (2, 3) or shape[-1] != d:
                raise ValueError(f"xs must have shape (T, {d}) or (T, m, {d}) to match the state, got {shape}")
        if jnp.shape(ys) != shape[:-1]:
            raise ValueError(f"ys must have shape {shape[:-1]} to match xs, got {jnp.shape(ys)}")
    model.family.check_y("ys", ys)
    if not model.is_glm:
        x0 = jax.tree_util.tree_map(lambda a: a[0], xs)
        eta = jax.eval_shape(model.predict, state.mean, x0).shape
        check_y_shape(model, "ys", ys, tuple(jnp.shape(ys)[:1]) + eta, time_axis=True)


__all__ = ["Family", "Model", "gaussian", "bernoulli", "poisson_family", "categorical", "linear_gaussian",
           "logistic", "poisson", "glm", "nonlinear", "minibatch", "softmax_regression",
           "check_observation", "glm_inputs", "check_y_shape", "check_data"]
