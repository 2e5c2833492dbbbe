"""The law of ``y`` given the natural parameter ``eta``, and the families of the papers.

A :class:`Family` is a value (its log likelihood, mean, variance, Fisher information and optional
closed forms): :func:`gaussian`, :func:`bernoulli`, :func:`poisson_family`, :func:`categorical` (K
logits, softmax link, full Fisher ``diag(p) - p p^T`` with a square-root factor).
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..kernels import special
from .._values import Bound, same, value_key
from ..validation import check_counts, check_labels01, check_positive, is_concrete, positive_int


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
      component by quadrature. :mod:`jaxrvga.posterior_predictive` uses both.
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
    """``log N(y | m, V)`` for ``y``, ``m`` (k,) and ``V`` (k, k), by a Cholesky factor of ``V``.

    Args:
      y, m: the point and the mean, (k,).
      V: the covariance, (k, k), positive definite.

    Returns:
      The scalar log density.
    """
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


def _categorical_log_predictive(family, y, m, V):  # in log space: a probability that underflows is not log(0)
    return family.log_prob(y, special.softmax_probit_logits(m, V))


def _any_y(name, y):
    return y


def gaussian(noise_var=1.0) -> Family:
    """Gaussian output ``y ~ N(eta, noise_var)`` (identity link).

    ``noise_var=None``: the variance ``s2`` is unknown and learned as the data arrive, with the
    conjugate normal-inverse-gamma belief of :mod:`jaxrvga.noise` (the filter's ``init`` takes
    ``noise=(shape, rate)``); the family's callables are then those of ``s2 = 1``.

    Args:
      noise_var: the variance of ``y`` given ``eta``, > 0 (``None``: learned).

    Returns:
      A :class:`Family` for :func:`glm` or :func:`nonlinear`.

    Example:
      >>> model = jr.models.glm(jr.models.gaussian(noise_var=0.5))
      >>> flt = jr.rvga(model, scheme="ekf")
      >>> state = flt.init(jnp.zeros(2), jnp.eye(2))
      >>> state = flt.update(state, jnp.array([1.0, 0.0]), 2.0)
      >>> round(float(state.mean[0]), 3)  # the posterior mean 2 / (1 + 0.5)
      1.333
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
    """Bernoulli output with logit link: ``p(y=1 | eta) = sig(eta)``, ``y in {0, 1}``.

    Returns:
      A :class:`Family` for :func:`glm` or :func:`nonlinear`.

    Example:
      >>> def h(theta, x):  # a linear predictor, as a nonlinear model
      ...     return x @ theta
      >>> model = jr.models.nonlinear(h, jr.models.bernoulli())
      >>> flt = jr.rvga(model)
      >>> state = flt.init(jnp.zeros(2), jnp.eye(2))
      >>> state = flt.update(state, jnp.array([1.0, 0.0]), 1.0)
      >>> bool(state.mean[0] > 0)
      True
    """
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
    """Poisson output with log link: ``y ~ Poisson(exp(eta))``.

    Returns:
      A :class:`Family` for :func:`glm` or :func:`nonlinear`.

    Example:
      >>> model = jr.models.glm(jr.models.poisson_family())
      >>> flt = jr.rvga(model, scheme="ekf")
      >>> state = flt.init(jnp.zeros(2), jnp.eye(2))
      >>> state = flt.update(state, jnp.array([1.0, 0.0]), 3.0)
      >>> bool(state.mean[0] > 0)
      True
    """
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


def _categorical_log_prob(y, eta):  # a class of label weight 0 adds nothing, even a probability 0 (log 0)
    w = _one_hot(y, eta)
    return jnp.sum(jnp.where(w == 0, 0.0, w * special.log_softmax(eta)), axis=-1)


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

    Args:
      num_classes: ``K >= 2``.

    Returns:
      A :class:`Family` for :func:`nonlinear` (its predictor returns the K logits).

    Example:
      >>> def logits(theta, x):  # 2 inputs, 3 classes
      ...     return x @ theta.reshape(2, 3)
      >>> model = jr.models.nonlinear(logits, jr.models.categorical(3))
      >>> flt = jr.rvga(model, scheme="ekf")
      >>> state = flt.init(jnp.zeros(6), jnp.eye(6))
      >>> state = flt.update(state, jnp.array([1.0, 0.0]), 2)
      >>> int(jnp.argmax(logits(state.mean, jnp.array([1.0, 0.0]))))
      2
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


__all__ = ["Family", "gaussian", "bernoulli", "poisson_family", "categorical", "gaussian_log_density"]
