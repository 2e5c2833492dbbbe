r"""Recursive / online EM on a worked exponential-family latent model ([SLIDES] Hua, recursive EM & VB).

The model is a 1-D Gaussian mixture with K components,
``p(x | theta) = sum_k w_k N(x | mu_k, sigma_k^2)``, whose complete data ``(x, z)`` form an
exponential family with sufficient statistic ``t(x, z) = (1{z=k}, 1{z=k} x, 1{z=k} x^2)_k``.
Everything is written with the expected statistics ([SLIDES], Cappe-Moulines Assumption 1):
the E-step ``sbar``, the M-step ``thetabar`` and the online-EM update of the statistics,

.. math::

    &\text{E-step:}\quad \bar s(x; \theta) = \mathbb{E}_\theta[t(X, Z) \mid X = x]
    = (r_k,\ r_k x,\ r_k x^2)_k, \qquad r_k = p(z = k \mid x, \theta),

    &\text{M-step:}\quad \bar\theta(s):\ w_k = \frac{s_{0k}}{\sum_j s_{0j}}, \quad
    \mu_k = \frac{s_{1k}}{s_{0k}}, \quad \sigma_k^2 = \frac{s_{2k}}{s_{0k}} - \mu_k^2,

    &\text{online EM:}\quad s_n = s_{n-1} + \gamma_n \big(\bar s(x_n; \theta_{n-1}) - s_{n-1}\big),
    \qquad \theta_n = \bar\theta(s_n).

(``thetabar(c s) = thetabar(s)`` for any ``c > 0``.) The algorithms:

* :func:`batch_mixture_em`: ``theta_{t+1} = thetabar(n^{-1} sum_i sbar(x_i; theta_t))``.
* :func:`titterington`: recursion (8), a stochastic-approximation step preconditioned by the
  complete-data Fisher information, ``theta_{k+1} = theta_k + {(k + n0) I_c(theta_k)}^{-1}
  S(x_{k+1}, theta_k)`` in the coordinates ``(w_1..w_{K-1}, mu, sigma^2)``. (Printed with ``k``
  in place of ``k + n0``, which divides by 0 at ``k = 0``; Thm 2 has ``k + 1``.) By Thm 3, in the
  mean-value coordinates (``theta = E[t]``) it is exactly the statistic recursion with step
  ``1/k``, i.e. :func:`cappe_moulines` with ``kappa = 1``.
* :func:`cappe_moulines`: ``s_n = s_{n-1} + gamma_n (sbar(x_n; theta_{n-1}) - s_{n-1})``,
  ``theta_n = thetabar(s_n)``, ``gamma_n = n^{-kappa}``, ``kappa in (1/2, 1]``, optional
  Polyak-Ruppert averaging of ``theta``.
* :func:`sato`: the discounted online EM, ``Delta phi(tau) = eta(tau) (E[r(x, z) | theta(tau-1)] -
  phi(tau-1))`` with ``1/eta(tau) = 1 + lambda(tau) / eta(tau-1)``, ``eta(1) = 1`` (eq. 10 of the
  Sato slide); ``lambda = 1`` gives ``eta(tau) = 1/tau``.
* :func:`incremental_em`: Neal-Hinton incremental EM (9), ``s = s - s_i^old + s_i^new`` with the
  per-sample statistics stored, and :func:`incremental_em_decay`, the decay variant (10),
  ``s = g s + s_i``.

The online algorithms are :class:`jaxrvga.core.Filter` s, ``update(state, x, y=None)`` with a scalar
``x`` (for :func:`incremental_em`, ``x = (i, x_i)``, the index of the data item and its value), so
``jr.run(flt, state, xs, None)`` streams a data set. During the first ``burn_in`` observations the
statistics are accumulated but the M-step is not applied (a one-sample M-step gives a zero variance;
Cappe & Moulines 2009 use the same device).

Skip and flag. An observation that is not finite, or whose update leaves the parameter space
(non-finite statistics, weights or variances not > 0), is skipped: the filter keeps its previous
state (``step`` included) and sets ``state.info.converged = False`` (a
:class:`jaxrvga.core.SolverInfo`; ``iterations`` is 1 for an absorbed observation, 0 for a skipped
one), so ``jr.run(..., trace_fn=jr.trace_info)`` lists the skipped steps. Inputs of the wrong shape
(a (T, 2) stream where scalars are expected, an index out of range) raise ``ValueError``.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from ..core import Filter, SolverInfo, solver_info, tree_where
from ..validation import all_finite, check_finite, check_float_array, check_vector, is_concrete
from .. import io


class GMMParams(NamedTuple):
    """Mixture parameters: ``weights`` (K,), ``means`` (K,), ``variances`` (K,)."""

    weights: jax.Array
    means: jax.Array
    variances: jax.Array


class GMMStats(NamedTuple):
    """Expected complete-data sufficient statistics ``(E[1{z=k}], E[1{z=k} x], E[1{z=k} x^2])``."""

    s0: jax.Array
    s1: jax.Array
    s2: jax.Array


def _tree_lerp(a, b, t):
    """``(1 - t) a + t b`` leaf by leaf."""
    return jax.tree_util.tree_map(lambda u, v: u + t * (v - u), a, b)


def _component_logpdf(params: GMMParams, x):
    x = jnp.asarray(x)[..., None]
    return (jnp.log(params.weights) - 0.5 * jnp.log(2.0 * jnp.pi * params.variances)
            - 0.5 * (x - params.means) ** 2 / params.variances)


def log_likelihood(params: GMMParams, x):
    """Total log-likelihood ``sum_i log p(x_i | theta)`` (``x`` scalar or (n,)).

    Args:
      params: the :class:`GMMParams` of K components.
      x: a scalar or (n,) observations.

    Returns:
      The scalar log-likelihood.
    """
    return jnp.sum(logsumexp(_component_logpdf(params, x), axis=-1))


def responsibilities(params: GMMParams, x):
    """``r_k = p(z = k | x, theta)``, shape ``x.shape + (K,)``.

    Args:
      params: the :class:`GMMParams` of K components.
      x: a scalar or (n,) observations.

    Returns:
      The responsibilities, ``x.shape + (K,)``.
    """
    return jax.nn.softmax(_component_logpdf(params, x), axis=-1)


def expected_stats(params: GMMParams, x) -> GMMStats:
    """E-step: ``sbar(x; theta)``, averaged over ``x`` when ``x`` is a vector.

    Args:
      params: the :class:`GMMParams` of K components.
      x: a scalar or (n,) observations.

    Returns:
      A :class:`GMMStats` of (K,) arrays.
    """
    x = jnp.asarray(x)
    r = responsibilities(params, x).reshape(-1, params.means.shape[0])
    xf = x.reshape(-1, 1)
    return GMMStats(jnp.mean(r, 0), jnp.mean(r * xf, 0), jnp.mean(r * xf**2, 0))


def m_step(stats: GMMStats) -> GMMParams:
    """M-step ``thetabar(s)``: the maximiser of ``<s, phi(theta)> - psi(theta)`` (scale invariant in ``s``).

    Args:
      stats: a :class:`GMMStats`.

    Returns:
      The :class:`GMMParams`.
    """
    means = stats.s1 / stats.s0
    return GMMParams(stats.s0 / jnp.sum(stats.s0), means, stats.s2 / stats.s0 - means**2)


def stats_of(params: GMMParams) -> GMMStats:
    """Statistics whose M-step returns ``params``: ``E_theta[t(X, Z)]``.

    Args:
      params: the :class:`GMMParams` of K components.

    Returns:
      A :class:`GMMStats`.
    """
    w, m, v = params
    return GMMStats(w, w * m, w * (v + m**2))


def em_step(params: GMMParams, x) -> GMMParams:
    """One batch EM iteration ``theta <- thetabar(mean_i sbar(x_i; theta))``.

    Args:
      params: the :class:`GMMParams` of K components.
      x: the (n,) observations.

    Returns:
      The next :class:`GMMParams`.
    """
    return m_step(expected_stats(params, x))


def batch_mixture_em(x, params: GMMParams, num_iters: int = 200):
    """Batch EM (the slides' 'Standard EM algorithm').

    Returns ``(params, loglik)`` with ``loglik[t]`` the log-likelihood of the t-th iterate,
    ``t = 0..num_iters`` (non-decreasing: EM's monotonicity).

    Args:
      x: the (n,) observations.
      params: the initial :class:`GMMParams`.
      num_iters: the number of EM iterations.

    Returns:
      ``(params, loglik)``: the last iterate and the (num_iters + 1,) log-likelihoods.
    """
    x = check_finite("x", check_vector("x", x))
    params = check_params(params)
    if isinstance(num_iters, bool) or not isinstance(num_iters, (int, np.integer)) or num_iters < 0:
        raise ValueError(f"num_iters must be a non-negative integer, got {num_iters!r}")

    def body(p, _):
        return em_step(p, x), log_likelihood(p, x)

    params, trace = jax.lax.scan(body, params, None, length=num_iters)
    return params, jnp.append(trace, log_likelihood(params, x))


def check_params(params) -> GMMParams:
    """Validate a :class:`GMMParams` (equal lengths; weights on the simplex and variances > 0 where concrete).

    Args:
      params: a :class:`GMMParams` (or a triple of arrays).

    Returns:
      The :class:`GMMParams` in one floating dtype; raises ``ValueError`` otherwise.
    """
    w, m, v = (check_float_array(n, a) for n, a in zip(GMMParams._fields, params))
    if w.ndim != 1 or w.shape != m.shape or w.shape != v.shape:
        raise ValueError(f"weights, means and variances must be vectors of one length K, got "
                         f"shapes {w.shape}, {m.shape}, {v.shape}")
    if is_concrete((w, m, v)):  # in NumPy: jnp on concrete arrays inside a jit trace gives tracers
        for n, a in zip(GMMParams._fields, (w, m, v)):
            check_finite(n, a)
        wn, vn = np.asarray(w, np.float64), np.asarray(v, np.float64)
        if np.any(wn <= 0) or abs(float(np.sum(wn)) - 1.0) > 1e-8:
            raise ValueError("weights must be positive and sum to one")
        if np.any(vn <= 0):
            raise ValueError("variances must be positive")
    dtype = jnp.result_type(w, m, v)
    return GMMParams(w.astype(dtype), m.astype(dtype), v.astype(dtype))


def _scalar_x(x):
    """The observation of a mixture filter must be a scalar (checked at trace time)."""
    x = check_float_array("x", x)
    if x.ndim != 0:
        raise ValueError(f"x must be a scalar observation, got shape {x.shape}")
    return x


def _check_stream(state, xs, ys):
    """:func:`jaxrvga.run` check: ``xs`` must be a (T,) vector of scalar observations."""
    del state, ys
    check_vector("xs", xs)


def _valid(params: GMMParams, *trees):
    """Finite leaves, positive weights and variances: an update that may be kept."""
    leaves = jax.tree_util.tree_leaves((params, trees))
    finite = all_finite(*leaves)
    return finite & jnp.all(params.weights > 0) & jnp.all(params.variances > 0)


def _accept(ok, new, old):
    """``new`` with ``info.converged = ok`` where ``ok``, else ``old`` with ``info.converged = False``."""
    dtype = old.info.residual.dtype
    kept = tree_where(ok, new._replace(info=old.info), old)
    return kept._replace(info=solver_info(dtype, ok, 0.0, ok.astype(jnp.int32)))


# ---------------------------------------------------------------------------------------------
# Statistic recursions: Cappe-Moulines, Sato


class MixtureStatsState(NamedTuple):
    """State of the statistic recursions.

    ``stats`` is ``s_n``; ``params`` is ``theta_n``; ``average`` is the Polyak-Ruppert average of
    ``theta`` (equal to ``params`` when no averaging was requested); ``step`` is ``n``;
    ``eta`` is the last step size; ``info.converged`` is False when the last observation was
    skipped (see the module docstring).
    """

    stats: GMMStats
    params: GMMParams
    average: GMMParams
    step: jax.Array
    eta: jax.Array
    info: SolverInfo


def _init_online(params) -> MixtureStatsState:
    params = check_params(params)
    zero = jnp.zeros((), params.weights.dtype)
    return MixtureStatsState(stats_of(params), params, params, jnp.asarray(0, jnp.int32), zero,
                             solver_info(zero.dtype))


def _stat_step(state: MixtureStatsState, x, combine, eta, burn_in, average_from) -> MixtureStatsState:
    """``s_n = combine(s_{n-1}, sbar(x; theta_{n-1}))``, ``theta_n = thetabar(s_n)`` after burn-in."""
    x = _scalar_x(x)
    n = state.step + 1
    stats = jax.tree_util.tree_map(combine, state.stats, expected_stats(state.params, x))
    params = jax.tree_util.tree_map(lambda a, b: jnp.where(n > burn_in, a, b), m_step(stats),
                                    state.params)
    if average_from is None:
        average = params
    else:
        c = jnp.maximum(n - average_from, 1).astype(eta.dtype)
        average = _tree_lerp(state.average, params, jnp.where(n > average_from, 1.0 / c, 1.0))
    new = MixtureStatsState(stats, params, average, n, eta, state.info)
    return _accept(_valid(params, stats, average, eta, x), new, state)


def cappe_moulines(kappa=0.6, burn_in: int = 20, average_from: Optional[int] = None) -> Filter:
    """Online EM of Cappe & Moulines (2009): ``s_n = s_{n-1} + n^{-kappa} (sbar(x_n; theta_{n-1}) - s_{n-1})``.

    ``kappa in (1/2, 1]`` (Robbins-Monro conditions). ``average_from``: when given, ``state.average``
    is the running mean of ``theta_k`` over ``average_from < k <= n`` (Polyak-Ruppert averaging,
    not fed back into the recursion); with ``kappa < 1`` this makes the estimate asymptotically
    efficient. ``init(params)`` sets ``s_0 = E_theta0[t]`` (which ``gamma_1 = 1`` overwrites).

    Args:
      kappa: the step exponent, in (1/2, 1].
      burn_in: the observations before the first M-step.
      average_from: the step after which the iterates are averaged (None: no averaging).

    Returns:
      A :class:`~jaxrvga.Filter`.
    """
    if is_concrete(kappa) and not 0.5 < float(kappa) <= 1.0:
        raise ValueError(f"kappa must lie in (0.5, 1], got {kappa}")

    def update(state, x, y=None):
        del y
        gamma = (state.step + 1).astype(state.eta.dtype) ** (-kappa)
        return _stat_step(state, x, lambda s, t: s + gamma * (t - s), gamma, burn_in, average_from)

    return Filter(_init_online, update, _check_stream)


def sato(discount: Union[float, Callable] = 1.0, burn_in: int = 20) -> Filter:
    """Sato's online EM with a discount factor (Sato 2000; [SLIDES] eq. 10).

    ``phi(tau) = phi(tau-1) + eta(tau) (sbar(x_tau; theta(tau-1)) - phi(tau-1))`` with
    ``eta(tau) = 1 / (1 + lambda(tau) / eta(tau-1))``, ``eta(1) = 1``, i.e. ``eta(tau)^{-1} =
    sum_{t <= tau} prod_{s=t+1}^{tau} lambda(s)``, the normaliser of the discounted free energy (6).
    ``discount`` is a constant ``lambda`` in (0, 1] or a callable ``tau -> lambda(tau)``;
    ``lambda = 1`` is the cumulative average (step ``1/tau``); a constant ``lambda < 1`` forgets the
    past with step -> ``1 - lambda``.

    Args:
      discount: ``lambda`` in (0, 1], or ``tau -> lambda(tau)``.
      burn_in: the observations before the first M-step.

    Returns:
      A :class:`~jaxrvga.Filter`.
    """
    lam_fn = discount if callable(discount) else (lambda tau: discount)
    if not callable(discount) and is_concrete(discount) and not 0.0 < float(discount) <= 1.0:
        raise ValueError(f"discount must lie in (0, 1], got {discount}")

    def update(state, x, y=None):
        del y
        tau = state.step + 1
        lam = lam_fn(tau.astype(state.eta.dtype))
        eta = jnp.where(tau == 1, 1.0, 1.0 / (1.0 + lam / jnp.where(tau == 1, 1.0, state.eta)))
        eta = eta.astype(state.eta.dtype)
        return _stat_step(state, x, lambda s, t: s + eta * (t - s), eta, burn_in, None)

    return Filter(_init_online, update, _check_stream)


# ---------------------------------------------------------------------------------------------
# Titterington's recursion (8)


class TitteringtonState(NamedTuple):
    """``params`` = ``theta_k``; ``step`` = ``k``; ``info`` flags a skipped observation."""

    params: GMMParams
    step: jax.Array
    info: SolverInfo


def _to_free(p: GMMParams):
    return jnp.concatenate([p.weights[:-1], p.means, p.variances])


def _from_free(u, K):
    w = u[:K - 1]
    return GMMParams(jnp.append(w, 1.0 - jnp.sum(w)), u[K - 1:2 * K - 1], u[2 * K - 1:])


def complete_data_fisher(params: GMMParams):
    """Complete-data Fisher information ``I_c(theta)`` of one observation in ``(w_1..w_{K-1}, mu, sigma^2)``.

    Block diagonal: multinomial ``diag(1/w_{1:K-1}) + 1 1^T / w_K``; ``w_k / sigma_k^2`` for
    ``mu_k``; ``w_k / (2 sigma_k^4)`` for ``sigma_k^2``.

    Args:
      params: the :class:`GMMParams` of K components.

    Returns:
      The (3K - 1, 3K - 1) matrix.
    """
    w, _, v = params
    K = w.shape[0]
    Iw = jnp.diag(1.0 / w[:-1]) + 1.0 / w[-1]
    diag = jnp.concatenate([w / v, w / (2.0 * v**2)])
    I = jnp.zeros((3 * K - 1, 3 * K - 1), w.dtype)
    I = I.at[:K - 1, :K - 1].set(Iw)
    return I.at[K - 1:, K - 1:].set(jnp.diag(diag))


def titterington(n0: float = 20.0) -> Filter:
    """Titterington's (1984) recursion (8) with the complete-data information ([SLIDES]).

    ``theta_{k+1} = theta_k + {(k + n0) I_c(theta_k)}^{-1} S(x_{k+1}, theta_k)`` with the score
    ``S = grad_theta log p(x | theta)`` by autodiff, in the coordinates ``(w_1..w_{K-1}, mu,
    sigma^2)``. ``n0 >= 1`` counts the initial guess as ``n0 - 1`` observations; a larger ``n0``
    keeps the first steps from leaving the parameter space. Asymptotically normal with covariance
    ``I_c^{-2} I / (2 I I_c^{-1} - 1)`` when ``2 I I_c^{-1} > 1`` (Thm 1).

    Args:
      n0: the weight of the initial guess, >= 1.

    Returns:
      A :class:`~jaxrvga.Filter`.
    """
    if is_concrete(n0) and not float(n0) >= 1.0:
        raise ValueError(f"n0 must be >= 1 (n0 = 0 divides by zero at the first step), got {n0!r}")

    def init(params):
        params = check_params(params)
        return TitteringtonState(params, jnp.asarray(0, jnp.int32), solver_info(params.weights.dtype))

    def update(state, x, y=None):
        del y
        x = _scalar_x(x)
        K = state.params.weights.shape[0]
        u = _to_free(state.params)
        score = jax.grad(lambda v: log_likelihood(_from_free(v, K), x))(u)
        step = jnp.linalg.solve(complete_data_fisher(state.params), score)
        u = u + step / (state.step.astype(u.dtype) + n0)
        params = _from_free(u, K)
        return _accept(_valid(params, x), TitteringtonState(params, state.step + 1, state.info), state)

    return Filter(init, update, _check_stream)


# ---------------------------------------------------------------------------------------------
# Neal-Hinton incremental EM, (9) and (10)


class IncrementalEMState(NamedTuple):
    """``total`` = ``sum_i s_i`` (eq. 9); ``per_sample`` = the stored ``s_i`` (each a (n, K) array);
    ``info`` flags a skipped observation."""

    params: GMMParams
    total: GMMStats
    per_sample: GMMStats
    step: jax.Array
    info: SolverInfo


def incremental_em() -> Filter:
    """Neal & Hinton's incremental EM (9): visit item ``i``, replace its statistics, M-step.

    ``init(params, data)`` performs one full E-step at ``params`` (storing ``s_i = sbar(x_i;
    theta_0)``) and the M-step. ``update(state, (i, x_i))`` sets ``s = s - s_i^old + s_i^new`` with
    ``s_i^new = sbar(x_i; theta)`` and ``theta = thetabar(s)``. Every sweep increases the free
    energy, and the fixed points are those of batch EM. Memory O(n K). ``i`` must lie in
    ``[0, n)`` (checked where concrete, and over the whole stream by :func:`jaxrvga.run`).

    Returns:
      A :class:`~jaxrvga.Filter`.
    """

    def init(params, data):
        params = check_params(params)
        data = check_finite("data", check_vector("data", data))
        if data.shape[0] == 0:
            raise ValueError("data must hold at least one item")
        r = responsibilities(params, data)
        per = GMMStats(r, r * data[:, None], r * data[:, None] ** 2)
        total = GMMStats(*(jnp.sum(a, 0) for a in per))
        return IncrementalEMState(m_step(total), total, per, jnp.asarray(0, jnp.int32),
                                  solver_info(params.weights.dtype))

    def check_index(name, i, n):
        i = jnp.asarray(i)
        if not jnp.issubdtype(i.dtype, jnp.integer):
            raise ValueError(f"{name} must hold integer item indices, got dtype {i.dtype}")
        if is_concrete(i) and i.size and (int(np.min(i)) < 0 or int(np.max(i)) >= n):
            raise ValueError(f"{name} must lie in [0, {n}), got values in [{int(np.min(i))}, {int(np.max(i))}]")
        return i

    def check(state, xs, ys):
        del ys
        if not (isinstance(xs, (tuple, list)) and len(xs) == 2):
            raise ValueError("xs must be a pair (indices (T,), values (T,))")
        idx = check_index("xs[0]", xs[0], state.per_sample.s0.shape[0])
        vals = check_vector("xs[1]", xs[1])
        if idx.shape != vals.shape:
            raise ValueError(f"xs[0] and xs[1] must both be (T,), got {idx.shape} and {vals.shape}")

    def update(state, x, y=None):
        del y
        i, xi = x
        if jnp.ndim(i) != 0:
            raise ValueError(f"the index i of x = (i, x_i) must be a scalar, got shape {jnp.shape(i)}")
        i = check_index("i", i, state.per_sample.s0.shape[0])
        xi = _scalar_x(xi)
        new = expected_stats(state.params, xi)
        total = jax.tree_util.tree_map(lambda t, old, nw: t - old[i] + nw, state.total,
                                       state.per_sample, new)
        per = jax.tree_util.tree_map(lambda old, nw: old.at[i].set(nw), state.per_sample, new)
        params = m_step(total)
        out = IncrementalEMState(params, total, per, state.step + 1, state.info)
        return _accept(_valid(params, total, xi), out, state)

    return Filter(init, update, check)


def incremental_em_decay(decay, burn_in: int = 20) -> Filter:
    """Neal & Hinton's decay variant (10): ``s = g s + s_i(x; theta)``, ``theta = thetabar(s)``, ``0 < g < 1``.

    Starts from ``s = 0``; the M-step is applied after ``burn_in`` items. As ``thetabar`` is scale
    invariant this is Sato's online EM with the constant discount ``lambda = g``.

    Args:
      decay: ``g`` in (0, 1).
      burn_in: the items before the first M-step.

    Returns:
      A :class:`~jaxrvga.Filter`.
    """
    if is_concrete(decay) and not 0.0 < float(decay) < 1.0:
        raise ValueError(f"decay must lie in (0, 1), got {decay}")

    def init(params):
        params = check_params(params)
        zero = GMMStats(*(jnp.zeros_like(params.weights) for _ in range(3)))
        dtype = params.weights.dtype
        return MixtureStatsState(zero, params, params, jnp.asarray(0, jnp.int32), jnp.zeros((), dtype),
                                 solver_info(dtype))

    def update(state, x, y=None):
        del y
        return _stat_step(state, x, lambda s, t: decay * s + t, state.eta, burn_in, None)

    return Filter(init, update, _check_stream)


io.register(GMMParams, io.vectors_check("weights", "means", "variances"), former=("jaxrvga.online_em",))
io.register(GMMStats, io.vectors_check("s0", "s1", "s2"), former=("jaxrvga.online_em",))
for _state in (MixtureStatsState, TitteringtonState, IncrementalEMState):
    io.register(_state, io.one_float_dtype, former=("jaxrvga.online_em",))

__all__ = ["GMMParams", "GMMStats", "IncrementalEMState", "MixtureStatsState", "TitteringtonState",
           "batch_mixture_em", "cappe_moulines", "check_params", "complete_data_fisher", "em_step",
           "expected_stats", "incremental_em", "incremental_em_decay", "log_likelihood", "m_step",
           "responsibilities", "sato", "stats_of", "titterington"]
