"""Scalar special functions shared by every filter.

The logistic function and its derivatives, the inverse-probit approximation of
Gaussian expectations of the logistic function ([RVGA] eq. 58, [LRVGA] eqs. 50-52)
and Gauss-Hermite quadrature for 1-D Gaussian expectations.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..validation import positive_int

#: beta = sqrt(8 / pi): sig(a) ~= Phi(a / beta) ([RVGA] eq. 57).
PROBIT_BETA = math.sqrt(8.0 / math.pi)


def sigmoid(z):
    """Logistic function ``1 / (1 + exp(-z))``, stable for all z.

    Args:
      z: an array.

    Returns:
      ``sig(z)``, of ``z``'s shape.
    """
    return jax.nn.sigmoid(z)


def sig1(z):
    """First derivative of the logistic function, ``sig(z) (1 - sig(z))``.

    Computed as ``sig(z) sig(-z)``, which keeps full relative precision in the tails
    (``1 - sig(z)`` cancels catastrophically for large z, notably in float32).

    Args:
      z: an array.

    Returns:
      ``sig'(z)``, of ``z``'s shape.
    """
    return jax.nn.sigmoid(z) * jax.nn.sigmoid(-z)


def sig2(z):
    """Second derivative of the logistic function, ``sig1(z) (1 - 2 sig(z))``.

    Args:
      z: an array.

    Returns:
      ``sig''(z)``, of ``z``'s shape.
    """
    return sig1(z) * (jax.nn.sigmoid(-z) - jax.nn.sigmoid(z))


def jj_lambda(xi):
    """Jaakkola-Jordan curvature ``lambda(xi) = tanh(xi/2) / (4 xi) = (sig(xi) - 1/2) / (2 xi)``.

    Convention of [RVGA] eq. 83: ``lambda(xi) = -eta`` there, so the bound (82) reads
    ``log sig(t) >= log sig(xi) + (t - xi)/2 - lambda(xi) (t^2 - xi^2)``; the QKF's
    ``R^{-1} = -2 eta = 2 lambda(xi)`` ([RVGA] eq. 90). Even in ``xi``, in (0, 1/8], with the
    limit 1/8 at ``xi = 0`` (series ``1/8 - xi^2/96`` below ``|xi| < 1e-4``).

    Args:
      xi: an array.

    Returns:
      ``lambda(xi)``, of ``xi``'s shape.
    """
    xi = jnp.abs(xi)
    small = xi < 1e-4
    xs = jnp.where(small, 1.0, xi)
    return jnp.where(small, 0.125 - xi**2 / 96.0, jnp.tanh(0.5 * xs) / (4.0 * xs))


def probit_k(v):
    """Inverse-probit shrinkage ``k(v) = beta / sqrt(v + beta^2)`` in (0, 1] ([RVGA] eq. 58).

    Args:
      v: a variance (array), >= 0.

    Returns:
      ``k(v)``, of ``v``'s shape.
    """
    return PROBIT_BETA / jnp.sqrt(v + PROBIT_BETA**2)


def probit_moments(m, v):
    """Closed-form Gaussian expectations of the logistic function ([RVGA] eq. 58).

    For ``a ~ N(m, v)`` returns ``(E[sig(a)], E[sig'(a)])`` approximated by
    ``(sig(k m), k sig1(k m))`` with ``k = k(v)``. The approximation error is below
    0.014 and 0.010 respectively for all ``m`` and ``v``.

    Args:
      m, v: the mean and variance of ``a`` (arrays of one shape).

    Returns:
      ``(E[sig(a)], E[sig'(a)])``, each of ``m``'s shape.
    """
    k = probit_k(v)
    return sigmoid(k * m), k * sig1(k * m)


def logistic_predictive(mean, cov, x):
    """Predictive mean and variance of a logistic model ([RVGA] eqs. 62-63).

    ``yhat = sig(k x^T mu)`` with ``k = k(x^T P x)`` and
    ``Var = yhat (1 - yhat) (1 - k)``. ``x`` may be (d,) or a batch (n, d).

    Args:
      mean: the belief's mean, (d,).
      cov: its covariance, (d, d).
      x: an input (d,) or a batch (n, d).

    Returns:
      ``(yhat, var)``: scalars, or (n,) for a batch.
    """
    x = jnp.asarray(x)
    m = x @ mean
    v = jnp.einsum("...i,ij,...j->...", x, cov, x)
    k = probit_k(v)
    p = sigmoid(k * m)
    return p, p * (1.0 - p) * (1.0 - k)


#: The most Gauss-Hermite nodes accepted: NumPy's ``hermegauss`` weights overflow to NaN from
#: 372 nodes; below that the rule is exact to rounding for polynomials of degree ``2 n - 1``.
MAX_GAUSS_HERMITE = 256


def check_num_points(num_points) -> int:
    """``num_points`` as an int in ``[1, MAX_GAUSS_HERMITE]``; raises ``ValueError`` naming it.

    Args:
      num_points: the value given.

    Returns:
      An int.
    """
    n = positive_int("num_points", num_points)
    if n > MAX_GAUSS_HERMITE:
        raise ValueError(f"num_points must be at most {MAX_GAUSS_HERMITE} (the largest Gauss-Hermite rule "
                         f"supported), got {n}")
    return n


def gauss_hermite(num_points: int = 32):
    """Nodes and weights of probabilists' Gauss-Hermite quadrature.

    ``E_{z ~ N(0,1)}[f(z)] ~= sum_i w_i f(z_i)``; the weights sum to one.
    Returned as float64 NumPy arrays; cast them to the working dtype at use.
    ``num_points`` is at most :data:`MAX_GAUSS_HERMITE`.

    Args:
      num_points: the number of nodes.

    Returns:
      ``(z, w)``: nodes and weights, (num_points,) each.
    """
    z, w = np.polynomial.hermite_e.hermegauss(check_num_points(num_points))
    return z, w / w.sum()


def sqrt0(v):
    """``sqrt(max(v, 0))`` with derivative 0 where ``v <= 0`` (a double ``where``: sqrt's infinite slope
    at 0 would make a gradient through a zero variance NaN).

    Args:
      v: an array.

    Returns:
      An array of ``v``'s shape.
    """
    pos = v > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, v, 1.0)), 0.0)


def gaussian_expectation_1d(f, m, v, num_points: int = 32):
    """``E_{a ~ N(m, v)}[f(a)]`` by Gauss-Hermite quadrature; ``f`` maps arrays elementwise.

    Args:
      f: an elementwise function.
      m, v: the mean and variance of ``a`` (arrays of one shape).
      num_points: the number of quadrature nodes.

    Returns:
      The expectations, of ``m``'s shape.
    """
    m = jnp.asarray(m)
    z, w = gauss_hermite(num_points)
    z = jnp.asarray(z, dtype=m.dtype)
    w = jnp.asarray(w, dtype=m.dtype)
    a = m[..., None] + sqrt0(v)[..., None] * z
    return jnp.sum(w * f(a), axis=-1)


def probit_predictive(m, v):
    """Mean and variance of ``sig(a)`` for ``a ~ N(m, v)`` by the inverse probit ([RVGA] eqs. 62-63).

    ``E[sig(a)] ~= p = sig(k m)`` and ``Var[sig(a)] ~= p (1 - p) (1 - k)`` with ``k = k(v)``; the
    variance is that of the probability ``sig(a)``, not the Bernoulli variance ``p (1 - p)``.

    Args:
      m, v: the mean and variance of ``a`` (arrays of one shape).

    Returns:
      ``(p, var)``, each of ``m``'s shape.
    """
    k = probit_k(v)
    p = sigmoid(k * m)
    return p, p * (1.0 - p) * (1.0 - k)


@jax.jit
def softmax_probit(m, V):
    """Mean and variance of ``softmax(a)`` for logits ``a ~ N(m, V)`` (m (..., K), V (..., K, K)).

    Mean, by the pairwise inverse probit: class k beats class j with probability
    ``sig(a_k - a_j)``; writing ``softmax(a)_k = 1 / sum_j exp(-(a_k - a_j))`` and applying eq. 58
    of [RVGA] to each difference ``a_k - a_j ~ N(m_k - m_j, V_kk + V_jj - 2 V_kj)`` gives
    ``p_k ~= 1 / sum_j exp(-k_kj (m_k - m_j))``, ``k_kj = k(V_kk + V_jj - 2 V_kj)``, renormalised
    to sum to one. Exact for ``V = 0`` (softmax(m)); invariant to a common shift of the logits.

    Variance, as [RVGA] eq. 63 is derived: ``s_k^2 = s_k - ds_k/da_k`` and, by Bonnet's theorem,
    ``E[ds_k/da_k] = dE[s_k]/dm_k ~= dp_k/dm_k``, so ``Var[s_k] ~= p_k - p_k^2 - dp_k/dm_k``
    (clipped at 0). For K = 2 both equal :func:`probit_predictive` of the logit difference.
    For K >= 3 the pairwise comparisons are treated as if independent: against Monte Carlo the
    probabilities are off by up to about 0.01 / 0.05 / 0.15 at logit standard deviations
    0.3 / 1 / 3 (K = 3 to 10); where the logits are that uncertain, prefer Monte Carlo.

    Args:
      m: the logits' means, (..., K).
      V: their covariances, (..., K, K).

    Returns:
      ``(p, var)``, each (..., K).
    """
    def mean(m, V):
        return jax.nn.softmax(_probit_logits(m, V))

    def moments(m, V):
        p = mean(m, V)
        slope = jnp.diagonal(jax.jacfwd(mean)(m, V))  # dp_k / dm_k
        return p, jnp.maximum(p - p**2 - slope, 0.0)

    return jnp.vectorize(moments, signature="(k),(k,k)->(k),(k)")(m, V)


def _probit_logits(m, V):
    """One input's logits whose softmax is :func:`softmax_probit`'s mean: ``-log sum_j exp(-k_kj (m_k -
    m_j))``, finite for finite ``m`` (no probability formed)."""
    d = m[:, None] - m[None, :]
    s = jnp.diagonal(V)[:, None] + jnp.diagonal(V)[None, :] - 2.0 * V
    return -jax.scipy.special.logsumexp(-probit_k(jnp.maximum(s, 0.0)) * d, axis=-1)


def softmax_probit_logits(m, V):
    """Logits of :func:`softmax_probit`'s mean probabilities (its softmax), computed without forming a
    probability: ``log p`` of a class whose probability underflows stays finite (``log_softmax(m)`` for
    ``V = 0``, where the probabilities of logits 88 apart underflow in float32).

    Args:
      m: the logits' means, (..., K).
      V: their covariances, (..., K, K).

    Returns:
      The (..., K) logits; ``log_softmax`` of them is the log of :func:`softmax_probit`'s ``p``.
    """
    return jnp.vectorize(_probit_logits, signature="(k),(k,k)->(k)")(m, V)


def log_softmax(eta):
    """``log softmax(eta)`` over the last axis, to full relative precision for every class.

    ``logsumexp(eta) = eta_a + log1p(sum_{j != a} exp(eta_j - eta_a))`` holds for any index a (so
    its gradient is exact); taking ``a = argmax`` avoids overflow and, through ``log1p``, keeps
    ``log p_a = -log1p(...)`` exact where ``1 - p_a`` is below the machine epsilon.

    Args:
      eta: the logits, (..., K).

    Returns:
      The log probabilities, (..., K).
    """
    eta = jnp.asarray(eta)
    a = jnp.argmax(eta, axis=-1)[..., None]
    top = jnp.take_along_axis(eta, a, axis=-1)
    others = jnp.arange(eta.shape[-1]) != a
    rest = jnp.sum(jnp.where(others, jnp.exp(eta - top), 0.0), axis=-1, keepdims=True)
    return eta - top - jnp.log1p(rest)


#: The most proposals of :func:`gamma_draws` per draw: each is accepted with probability above 0.95
#: for a shape >= 1, so none is accepted with probability below 0.05^16 = 2e-21.
GAMMA_PROPOSALS = 16


def gamma_draws(key, a, dtype):
    """Draws of ``Gamma(a, 1)`` (``a`` > 0, any shape) by Marsaglia & Tsang (2000), proposing again
    for the draws not yet accepted until all are, or :data:`GAMMA_PROPOSALS` rounds (none accepted:
    the proposal's mode ``d``), and ``Gamma(a) = Gamma(a + 1) U^(1 / a)`` for ``a < 1`` (their boost).

    Not ``jax.random.gamma``: its rejection loop does not end for some keys and float32 shapes
    (JAX 0.10.2 on CPU, shapes (539.5, 429, 3, 2.5, 14)), which hangs a bandit run or a draw of a
    learned noise variance. This loop is bounded, and stops as soon as every draw is accepted (about
    5 rounds for 2,560 draws, where proposing all 16 at once cost 3 times as much).

    Args:
      key: a PRNG key.
      a: the shapes, > 0 (any shape).
      dtype: the floating dtype.

    Returns:
      The draws, of ``a``'s shape.
    """
    a = jnp.asarray(a, dtype)
    boosted = jnp.where(a < 1, a + 1, a)
    d = boosted - 1.0 / 3.0
    c = 1.0 / jnp.sqrt(9.0 * d)
    k_proposals, k_boost = jax.random.split(key)

    def propose(carry):
        i, g, done = carry
        k_z, k_u = jax.random.split(jax.random.fold_in(k_proposals, i))
        z = jax.random.normal(k_z, a.shape, dtype)
        u = jax.random.uniform(k_u, a.shape, dtype, minval=jnp.finfo(dtype).tiny)
        v = (1.0 + c * z) ** 3
        safe_v = jnp.where(v > 0, v, 1.0)
        accept = ~done & (v > 0) & (jnp.log(u) < 0.5 * z * z + d - d * safe_v + d * jnp.log(safe_v))
        return i + 1, jnp.where(accept, d * safe_v, g), done | accept

    def pending(carry):
        i, _, done = carry
        return (i < GAMMA_PROPOSALS) & ~jnp.all(done)

    _, g, _ = jax.lax.while_loop(pending, propose, (jnp.zeros((), jnp.int32), d, jnp.zeros(a.shape, bool)))
    boost = jax.random.uniform(k_boost, a.shape, dtype, minval=jnp.finfo(dtype).tiny) ** (1.0 / jnp.maximum(a, jnp.finfo(dtype).tiny))
    return jnp.where(a < 1, g * boost, g)


__all__ = ["PROBIT_BETA", "MAX_GAUSS_HERMITE", "sigmoid", "sig1", "sig2", "jj_lambda", "probit_k", "probit_moments",
           "logistic_predictive", "check_num_points", "gauss_hermite", "sqrt0", "gaussian_expectation_1d",
           "probit_predictive", "softmax_probit", "softmax_probit_logits", "log_softmax", "GAMMA_PROPOSALS",
           "gamma_draws"]
