r"""KL proximal-gradient variational inference ([KLPROX] Khan, Baque, Fleuret & Fua).

Model (eq. 9): ``p(y, z) = prod_n p(y_n | x_n^T z) N(z | mu, Sigma)`` with a Gaussian
posterior ``q = N(m, V)``. With ``f_n(mt, vt) = E_{N(eta | mt, vt)}[log p(y_n | eta)]``,
``mt_n = x_n^T m`` and ``vt_n = x_n^T V x_n``, one proximal-gradient step (7) with the KL
proximal term and the split (10) has the closed form [KLPROX] eqs. (16)-(17), with
``r = 1 / (1 + beta)`` and the site gradients of eq. (12):

.. math::

    \alpha_n &= -\frac{\partial f_n}{\partial \tilde m}, \qquad
    \gamma_n = -2\, \frac{\partial f_n}{\partial \tilde v}  \qquad \text{(12)}

    V_{k+1}^{-1} &= r\, V_k^{-1} + (1 - r)\, \big[\Sigma^{-1} + X^\top \operatorname{diag}(\gamma_k)\, X\big]
    \qquad \text{(16)}

    m_{k+1} &= m_k + (1 - r)\, G_k^{-1} \big[\Sigma^{-1}(\mu - m_k) - X^\top \alpha_k\big]
    \qquad \text{(17)}

    G_k &= (1 - r)\, \Sigma^{-1} + r\, V_k^{-1}

and its kernel ("efficient") form (18)-(20) works with ``mt``, ``vt`` and the site
precisions ``gt`` only, so that it applies to Gaussian processes. Any fixed point satisfies
``m = mu - Sigma X^T alpha`` and ``V^{-1} = Sigma^{-1} + X^T diag(gamma) X``: it is the
variational-Gaussian optimum, and the exact posterior for a Gaussian likelihood.

Corrections to the printed paper (see also experiments/REPORT.md):

* ``alpha`` and ``gamma`` follow the definitions (12); Algorithm 1 prints them without the
  minus sign and without the factor -2.
* Eq. (15) prints ``E_q[N / N]`` without the log.
* Eq. (18) holds with ``gt_0 = 0`` (``V_0 = Sigma``), while the text says ``gt_0 = gamma_0`` and
  Algorithm 1 ``gt_0 = delta_1 1``: here ``gt0`` is a parameter (default 0; the kernel form is
  written with ``I + S K S``, ``S = diag(sqrt(gt))``, so ``gt = 0`` is well conditioned).
* Eq. (19) builds ``vt_{k+1}`` from ``A_k`` (i.e. from ``gt_k``), one iteration behind (18);
  ``exact=True`` uses ``gt_{k+1}``. The fixed point is the same.
* Algorithm 1's stopping rule is reversed (``> eps``) and its trace term contains a "-1" that does
  not vanish at the fixed point. We stop when
  ``||mu~ - mt - Sigma~ alpha|| / (1 + ||mu~||) + ||gt - gamma|| / (1 + ||gamma||) < tol``
  (kernel form) or the equivalent weight-space residual (GLM form, see :func:`fit`).
* Eq. (20) prints ``mu~`` for the prior mean at the test point, ``mu~(x*)``.

Step control (default ``adaptive=True`` in :func:`fit` and :func:`fit_kernel`): (16)-(19) is the
proximal-gradient method (7) with ``beta_k = 1/r_k - 1``, which converges when ``beta_k`` is below
``alpha / L`` (8), ``L`` the Lipschitz constant of the gradient of the linearised part. With large
prior variances (separable data, long GP length-scales with large signal variances) the paper's
``r = 0.8`` violates (8): the iteration diverges (site precisions collapse, NaN) or cycles. Each
step is therefore accepted only if the exact objective (10) (the ELBO with the fit's own
expectations, :func:`elbo`) does not decrease and stays finite; otherwise ``1 - r_k`` is halved and
the step retried, and after a run of accepted steps ``1 - r_k`` doubles again, up to ``1 - r``.
While the fixed step increases the ELBO, the iterates are the paper's. The results report
``converged``, ``residual``, ``iterations``, ``rejected``, the final ``r`` and the ``elbo``.

Gaussian expectations ``f_n``: the model's ``expected_log_lik`` (closed form for the Gaussian,
Poisson and :func:`laplace_likelihood` models), Gauss-Hermite quadrature otherwise; derivatives by autodiff.
Likelihoods with unbounded curvature ``gamma`` (Poisson: ``exp(mt + vt/2)``; Laplace:
``2 phi(u) / (b sqrt(vt))``) violate the Lipschitz condition behind (8): use ``r`` near 1 there
(or rely on the step control).
"""
from __future__ import annotations

import functools
import types
from typing import NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve, solve_triangular
from jax.scipy.stats import norm

from . import metrics
from ..kernels import special
from ..models import Family, Model, linear_predict
from ..validation import (check_batch_problem, check_cov, check_finite, check_float_array, check_positive,
                         check_tolerance, check_vector, is_concrete, positive_int)
from .. import io

# ---------------------------------------------------------------------------------------------
# Likelihoods and their Gaussian expectations


def laplace_likelihood_family(scale=1.0) -> Family:
    """Laplace output ``p(y | eta) = exp(-|y - eta| / scale) / (2 scale)`` (GP regression in [KLPROX] §6).

    ``variance = 2 scale^2``; ``fisher = 1 / scale^2`` (Fisher information of the location).

    Args:
      scale: ``b > 0``.

    Returns:
      A :class:`~jaxrvga.models.Family`.
    """
    check_positive("scale", scale)
    b = scale
    return Family(
        name="laplace",
        log_prob=lambda y, eta: -jnp.abs(y - eta) / b - jnp.log(2.0 * b),
        mean=lambda eta: eta,
        variance=lambda eta: jnp.full_like(jnp.asarray(eta, dtype=float), 2.0 * b**2),
        fisher=lambda eta: jnp.ones_like(jnp.asarray(eta, dtype=float)) / b**2,
        check_y=lambda name, y: y,
    )


def laplace_likelihood(scale=1.0) -> Model:
    """Linear model with a Laplace likelihood and a closed-form Gaussian expectation.

    For ``eta ~ N(m, v)``, ``s = sqrt(v)``, ``u = (y - m) / s``:
    ``E[log p(y | eta)] = -E|y - eta| / b - log(2b)`` with ``E|y - eta| = 2 s phi(u) + (y - m)(2 Phi(u) - 1)``.
    The moments follow by Bonnet's and Price's theorems: ``E[d log p / d eta] = (2 Phi(u) - 1) / b`` and,
    in the distributional sense, ``E[d^2 log p / d eta^2] = -2 phi(u) / (s b)``.

    Args:
      scale: ``b > 0``.

    Returns:
      A GLM :class:`~jaxrvga.models.Model`.
    """
    fam = laplace_likelihood_family(scale)

    def expected(m, v, y):
        s = jnp.sqrt(v)
        d = y - m
        e_abs = 2.0 * s * norm.pdf(d / s) + d * (2.0 * norm.cdf(d / s) - 1.0)
        return -e_abs / scale - jnp.log(2.0 * scale)

    def moments(m, v, y):
        s = jnp.sqrt(v)
        u = (y - m) / s
        return (2.0 * norm.cdf(u) - 1.0) / scale, -2.0 * norm.pdf(u) / (s * scale)

    return Model("glm", fam, linear_predict, moments, None, expected)


def expectation(likelihood: Union[Model, Family], num_points: Optional[int] = None):
    """``(m, v, y) -> f(m, v) = E_{eta ~ N(m, v)}[log p(y | eta)]``, elementwise ([KLPROX] f_n of eq. 11).

    A Model's own ``expected_log_lik`` (closed form for the Gaussian, Poisson and :func:`laplace_likelihood`
    models, Gauss-Hermite with 32 nodes for ``jr.models.logistic()``) is used unless ``num_points``
    is given or the model has none; otherwise Gauss-Hermite quadrature with ``num_points`` nodes
    (default 64) on ``family.log_prob``. (Model expectations are written for scalars, so they are
    vectorised here.)

    Args:
      likelihood: a :class:`~jaxrvga.models.Model` or :class:`~jaxrvga.models.Family`.
      num_points: Gauss-Hermite nodes (None: the model's own expectation, else 64).

    Returns:
      The function ``f(m, v, y)``, elementwise.
    """
    family = _as_family(likelihood)
    if isinstance(likelihood, Model) and likelihood.expected_log_lik is not None and num_points is None:
        return jnp.vectorize(likelihood.expected_log_lik)
    n = 64 if num_points is None else num_points
    return lambda m, v, y: special.gaussian_expectation_1d(
        lambda a: family.log_prob(jnp.asarray(y)[..., None], a), m, v, n)


def site_gradients(expected, y, mt, vt):
    """``(alpha, gamma) = (-df_n/dmt, -2 df_n/dvt)`` at ``(mt, vt)``, by autodiff ([KLPROX] eq. 12).

    ``expected`` is a function from :func:`expectation`.

    Args:
      expected: ``f(m, v, y)`` from :func:`expectation`.
      y: the observations, (N,).
      mt, vt: the marginal means and variances of ``eta``, (N,).

    Returns:
      ``(alpha, gamma)``, (N,) each.
    """
    _, a, g = _sites(expected, y, mt, vt)
    return a, g


def _sites(expected, y, mt, vt):
    """``(sum_n f_n, alpha, gamma)`` at ``(mt, vt)``: the data term of (10) and the gradients (12)."""
    total = lambda a, b: jnp.sum(expected(a, b, y))
    f, (dm, dv) = jax.value_and_grad(total, argnums=(0, 1))(mt, vt)
    return f, -dm, -2.0 * dv


def _as_family(likelihood) -> Family:
    if isinstance(likelihood, Model):
        if not likelihood.is_glm:
            raise ValueError("KL-prox needs a linear predictor eta = x^T z; got a "
                             f"{likelihood.kind!r} model")
        return likelihood.family
    if isinstance(likelihood, Family):
        return likelihood
    raise ValueError(f"expected a jaxrvga Model or Family, got {type(likelihood).__name__}")


def _check_r(r):
    if is_concrete(r):
        rv = float(r)
        if not 0.0 <= rv < 1.0:
            raise ValueError(f"r = 1/(1 + beta) must lie in [0, 1), got {rv}")
    return r


def _rel(a, b):
    return jnp.linalg.norm(a) / (1.0 + jnp.linalg.norm(b))


# ---------------------------------------------------------------------------------------------
# One compiled program per configuration
#
# The fits run their loops inside a module-level ``jax.jit`` whose static argument is the
# expectation ``f_n`` (a callable). Models are rebuilt freely (``jr.models.logistic()`` makes new
# closures each time), so the callable is compared by structure, not identity: two functions are
# the same configuration when they have the same code and equal closed-over values (Python
# scalars and strings by value, functions, tuples and jaxrvga objects recursively, anything else,
# arrays included, by identity). Equal configurations compute the same thing, so they share the
# compiled program; a new shape or dtype compiles a new one, as with any ``jax.jit``.

_MAX_DEPTH = 12


class _Same:
    """Identity as a key: equal only to itself (it keeps ``obj`` alive, so its id stays unique)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)


def _structure(obj, depth=0):
    """A hashable key of ``obj``, equal for callables of the same code and equal closed-over values."""
    if depth > _MAX_DEPTH:
        return _Same(obj)
    t = type(obj)
    if obj is None or t in (bool, int, str, bytes):
        return (t, obj)
    if t in (float, complex):
        return (t, repr(obj))  # -0.0 and 0.0 apart; nan equal to nan
    nxt = depth + 1
    if t is types.FunctionType:
        try:
            cells = tuple(_structure(c.cell_contents, nxt) for c in obj.__closure__ or ())
        except ValueError:  # an empty cell
            return _Same(obj)
        kwdefaults = tuple(sorted((k, _structure(v, nxt)) for k, v in (obj.__kwdefaults__ or {}).items()))
        return ("function", obj.__code__, id(obj.__globals__), _structure(obj.__defaults__, nxt),
                kwdefaults, cells)
    if t is types.MethodType:
        return ("method", _structure(obj.__func__, nxt), _structure(obj.__self__, nxt))
    if t is functools.partial:
        return ("partial", _structure(obj.func, nxt), _structure(obj.args, nxt),
                tuple(sorted((k, _structure(v, nxt)) for k, v in obj.keywords.items())))
    if t is frozenset:
        return (t, frozenset(_structure(v, nxt) for v in obj))
    if isinstance(obj, tuple) and (t is tuple or t.__module__.startswith("jaxrvga")):
        return (t, tuple(_structure(v, nxt) for v in obj))
    if t.__module__.startswith("jaxrvga") and hasattr(obj, "__dict__") and not hasattr(obj, "__slots__"):
        return (t, tuple(sorted((k, _structure(v, nxt)) for k, v in vars(obj).items())))
    return _Same(obj)


class _Static:
    """A callable as a static argument of ``jax.jit``, hashed and compared by :func:`_structure`."""

    __slots__ = ("fn", "_key")

    def __init__(self, fn):
        self.fn = fn
        self._key = _structure(fn)

    def __eq__(self, other):
        return isinstance(other, _Static) and other._key == self._key

    def __hash__(self):
        return hash(self._key)


def _loop_limit(n):
    """An iteration limit (a Python int) as an int32 argument of the compiled loop, whose counter
    is int32."""
    return jnp.asarray(min(n, 2**31 - 1), jnp.int32)


# ---------------------------------------------------------------------------------------------
# Step control ([KLPROX] eqs. 7-8 with a varying beta_k)

#: The step ``1 - r_k`` is multiplied by ``_SHRINK`` after a rejected proposal and divided by it
#: after ``patience`` accepted proposals in a row (never beyond the user's ``1 - r``); ``patience``
#: starts at 1 and doubles whenever a step reached by growing is rejected.
_SHRINK = 0.5
#: Round-off slack of the ascent test, relative to ``1 + |ELBO_k|``.
_ELBO_SLACK = 1e-9


def _step_controlled(propose, init, r, max_iter, tol, adaptive):
    """Run ``propose`` under a ``lax.while_loop`` with the step control of :func:`fit`.

    ``init = (state, elbo, residual)`` and ``propose(state, r_k) -> (state, elbo, residual)`` is
    one proximal-gradient step (7) with ``beta_k = 1/r_k - 1`` from ``state``.

    With ``adaptive`` a proposal is accepted only if its ELBO (10) and residual are finite and
    the ELBO did not decrease (up to round-off); otherwise the state is kept and the step
    ``1 - r_k`` is halved. (For ``beta_k`` below ``alpha / L``, eq. 8, each step increases the
    ELBO, so a decrease or a non-finite value, e.g. a precision that is no longer positive
    definite, signals a step that is too long.) After ``patience`` accepted proposals in a row
    the step doubles, up to ``1 - r``; ``patience`` starts at 1 and doubles each time a grown step
    is rejected. So a rejection in the first iterations (from ``V_0 = Sigma`` the first step
    often overshoots) costs a few iterations, while a step that is too long for the fixed point
    (the iteration cycles there) is retried ever more rarely. While every proposal is accepted
    the iterates are those of the fixed-``r`` iteration. Without ``adaptive`` every proposal is
    accepted (the paper's fixed step) and a non-finite residual stops the loop.

    Returns ``(state, elbo, residual, iterations, r_k, rejected)``; ``iterations`` counts the
    proposals (each costs one iteration), ``rejected`` those that were rejected. ``max_iter`` and
    ``tol`` are checked by the caller (:func:`_loop_args`).
    """
    r = jnp.asarray(r, dtype=init[1].dtype)

    def body(c):
        k, state, F, res, rk, nrej, streak, patience, grown = c
        new, F1, res1 = propose(state, rk)
        if adaptive:
            ok = (jnp.isfinite(F1) & jnp.isfinite(res1)
                  & (F1 >= F - _ELBO_SLACK * (1.0 + jnp.abs(F))))
            patience = jnp.where(~ok & grown, jnp.minimum(2 * patience, 2**30), patience)
            streak = jnp.where(ok, streak + 1, 0)
            grow = ok & (streak >= patience) & (rk > r)
            streak = jnp.where(grow, 0, streak)
            grown = ok & (grown | grow)
            rk = jnp.where(ok, jnp.where(grow, jnp.maximum(1.0 - (1.0 - rk) / _SHRINK, r), rk),
                           1.0 - _SHRINK * (1.0 - rk))
        else:
            ok = jnp.asarray(True)
        keep = lambda a, b: jnp.where(ok, a, b)  # noqa: E731
        state = jax.tree_util.tree_map(keep, new, state)
        return (k + 1, state, keep(F1, F), keep(res1, res), rk, nrej + jnp.where(ok, 0, 1),
                streak, patience, grown)

    def cond(c):
        return (c[0] < max_iter) & (c[3] > tol)

    state, F, res = init
    zero = jnp.asarray(0, jnp.int32)
    init = (zero, state, F, res, r, zero, zero, jnp.asarray(1, jnp.int32), jnp.asarray(False))
    k, state, F, res, rk, nrej = jax.lax.while_loop(cond, body, init)[:6]
    return state, F, res, k, rk, nrej


# ---------------------------------------------------------------------------------------------
# GLM (weight-space) form, eqs. (16)-(17)


class KLProxResult(NamedTuple):
    """Result of :func:`fit`: ``q = N(mean, cov)``.

    ``alpha``, ``gamma`` are the site gradients (12) at the returned ``(mean, cov)``;
    ``residual`` is the stopping criterion of :func:`fit` there and ``converged`` says whether it
    fell below ``tol`` (a run that stops at ``max_iter`` reports ``converged = False``).
    ``iterations`` counts the proximal-gradient proposals, ``rejected`` those that the step
    control rejected, ``r`` is the step parameter ``r_k = 1/(1 + beta_k)`` in use at the end
    (the user's ``r`` unless the step had to shrink), and ``elbo`` is the objective (10) at the
    returned ``q`` (with the expectations used by the fit).
    """

    mean: jax.Array
    cov: jax.Array
    alpha: jax.Array
    gamma: jax.Array
    iterations: jax.Array
    converged: jax.Array
    residual: jax.Array
    elbo: Optional[jax.Array] = None
    r: Optional[jax.Array] = None
    rejected: Optional[jax.Array] = None


def _inv_spd(P):
    """``P^{-1}`` of a symmetric positive-definite ``P``, by its Cholesky factor."""
    L = jnp.linalg.cholesky(P)
    return cho_solve((L, True), jnp.eye(P.shape[0], dtype=P.dtype))


def _loop_args(max_iter, tol):
    """``(max_iter, tol)`` checked, the limit as the loop's int32 argument (0: the start itself)."""
    max_iter = positive_int("max_iter", max_iter, minimum=0)
    check_tolerance("tol", tol)
    return _loop_limit(max_iter), tol


def _glm_iterate(expected, X, y, mu, Sigma, r, max_iter, tol, m0, P0, weight=1.0, adaptive=True):
    """Iterate (16)-(17) from ``(m0, P0 = V0^{-1})``; ``weight`` tempers the likelihood.

    The objective is ``weight * sum_n f_n - KL(q || N(mu, Sigma))`` ((10) for ``weight = 1``).
    ``expected``: a function from :func:`expectation`. Runs one compiled program per
    ``expected`` (by structure), ``adaptive``, shapes and dtypes.
    """
    max_iter, tol = _loop_args(max_iter, tol)
    return _glm_jit(_Static(expected), adaptive, X, y, mu, Sigma, r, max_iter, tol, m0, P0, weight)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _glm_jit(expected, adaptive, X, y, mu, Sigma, r, max_iter, tol, m0, P0, weight):
    """:func:`_glm_iterate` compiled; ``expected`` a :class:`_Static`."""
    expected = expected.fn
    D = mu.shape[0]
    eye = jnp.eye(D, dtype=mu.dtype)
    Ls = jnp.linalg.cholesky(Sigma)
    Sigma_inv = cho_solve((Ls, True), eye)
    logdet_Sigma = 2.0 * jnp.sum(jnp.log(jnp.diag(Ls)))

    def evaluate(m, P):
        """State ``(m, P, V, alpha, gamma)``, objective and residual of ``q = N(m, P^{-1})``."""
        Lp = jnp.linalg.cholesky(P)
        V = cho_solve((Lp, True), eye)
        f, a, g = _sites(expected, y, X @ m, jnp.einsum("nd,de,ne->n", X, V, X))
        a, g = weight * a, weight * g
        d = m - mu
        kl = 0.5 * (jnp.sum(Sigma_inv * V) - D + d @ (Sigma_inv @ d) + logdet_Sigma
                    + 2.0 * jnp.sum(jnp.log(jnp.diag(Lp))))
        # stationarity of the objective: m = mu - Sigma X^T alpha, V^{-1} = Sigma^{-1} + X^T diag(gamma) X
        res = (_rel(d + Sigma @ (X.T @ a), m)
               + jnp.linalg.norm(P - Sigma_inv - (X.T * g) @ X) / jnp.linalg.norm(P))
        return (m, P, V, a, g), weight * f - kl, res

    def propose(state, rk):
        m, P, _, a, g = state
        G = (1.0 - rk) * Sigma_inv + rk * P
        m = m + (1.0 - rk) * cho_solve((jnp.linalg.cholesky(G), True),
                                       Sigma_inv @ (mu - m) - X.T @ a)              # (17)
        P = rk * P + (1.0 - rk) * (Sigma_inv + (X.T * g) @ X)                       # (16)
        return evaluate(m, 0.5 * (P + P.T))

    (m, _, V, a, g), F, res, k, rk, nrej = _step_controlled(
        propose, evaluate(m0, P0), r, max_iter, tol, adaptive)
    return KLProxResult(m, 0.5 * (V + V.T), a, g, k, res <= tol, res, F, rk, nrej)


def fit(model: Union[Model, Family], X, y, prior_mean, prior_cov, r=0.8, max_iter: int = 1000,
        tol=1e-10, *, num_points: Optional[int] = None, gt0=None, init_mean=None,
        adaptive: bool = True) -> KLProxResult:
    """KL proximal-gradient VI for a GLM, weight-space form ([KLPROX] eqs. 16-17).

    Args:
      model: a GLM (``jr.models.logistic()``, ``jr.models.poisson()``,
        ``jr.models.linear_gaussian(s2)``, :func:`laplace_likelihood`, ``jr.models.glm(family)``) or a Family.
      X: (N, D) inputs (rows ``x_n^T``); y: (N,) observations.
      prior_mean, prior_cov: ``mu`` (D,), ``Sigma`` (D, D).
      r: ``1 / (1 + beta)`` in [0, 1); the paper uses ``beta = 0.25`` (``r = 0.8``) for logistic
        and ``beta = 1`` (``r = 0.5``) for Laplace likelihoods.
      max_iter, tol: stop when ``||m - mu + Sigma X^T alpha|| / (1 + ||m||)
        + ||V^{-1} - Sigma^{-1} - X^T diag(gamma) X||_F / ||V^{-1}||_F < tol`` (the optimality
        conditions of the ELBO, at the current iterate) or after ``max_iter`` iterations.
      num_points: force Gauss-Hermite quadrature with this many nodes (default: the model's own
        expectation, see :func:`expectation`).
      gt0: optional (N,) or scalar: start from ``V_0 = [Sigma^{-1} + X^T diag(gt0) X]^{-1}``
        (default ``V_0 = Sigma``, i.e. ``gt0 = 0``; see (18)).
      init_mean: ``m_0`` (default ``mu``).
      adaptive: step control (default). Each step (16)-(17) is a proximal-gradient step (7) with
        ``beta_k = 1/r_k - 1``; it is accepted if the ELBO (10) (computed with the fit's own
        expectations) does not decrease and stays finite, otherwise ``1 - r_k`` is halved and the
        step retried; after a run of accepted steps ``1 - r_k`` doubles again, up to ``1 - r``
        (details in :func:`_step_controlled`). While the fixed step increases the ELBO this is
        the paper's iteration with ``r``; when ``r`` is too small for the curvature of the
        likelihood (condition (8) fails: large prior variances, separable data) the fixed step
        diverges or cycles, and the controlled step converges. ``adaptive=False``: the paper's
        fixed ``r``.

    Returns a :class:`KLProxResult`. Cost O(N D^2 + D^3) per iteration. Jittable (the loop is a
    ``lax.while_loop``; ``r`` and ``tol`` may be traced).

    Returns:
      A :class:`KLProxResult`.
    """
    family = _as_family(model)
    X, y, mu, Sigma = check_batch_problem(family, X, y, prior_mean, prior_cov)
    _check_r(r)
    N, D = X.shape
    m0 = mu if init_mean is None else check_vector("init_mean", init_mean, D).astype(mu.dtype)
    P0 = _inv_spd(Sigma)
    if gt0 is not None:
        g0 = jnp.broadcast_to(jnp.asarray(gt0, mu.dtype), (N,))
        P0 = P0 + (X.T * g0) @ X
    return _glm_iterate(expectation(model, num_points), X, y, mu, Sigma, r, max_iter, tol, m0, P0,
                        adaptive=adaptive)


def proximal_point_step(model: Union[Model, Family], X, y, prior_mean, prior_cov, mean, cov,
                        r=0.5, *, inner_r=0.5, max_iter: int = 5000, tol=1e-14,
                        num_points: Optional[int] = None, adaptive: bool = True) -> KLProxResult:
    """One KL proximal-POINT step (2): ``argmax_q ELBO(q) - (1/beta) KL(q || q_k)``, ``r = 1/(1+beta)``.

    Since ``KL(q||p) + KL(q||q_k)/beta = KL(q||p~)/(1-r) + const`` with the Gaussian
    ``p~ ∝ p^{1-r} q_k^r`` (natural parameters ``(1-r) eta_prior + r eta_k``), the step is the
    variational-Gaussian optimum for the prior ``p~`` and the likelihood raised to the power
    ``1 - r``; it is computed by iterating (16)-(17) with step ``inner_r`` (and the step control
    of :func:`fit` unless ``adaptive=False``) to convergence.
    For a conjugate (Gaussian) likelihood this equals the natural-gradient step
    ``eta_{k+1} = r eta_k + (1 - r) eta_post`` ([KLPROX] Thm 1).

    Args:
      model: a GLM or a :class:`~jaxrvga.models.Family`, as :func:`fit`'s.
      X: the inputs, (N, D).
      y: the observations, (N,).
      prior_mean, prior_cov: ``mu`` (D,), ``Sigma`` (D, D).
      mean, cov: ``q_k``, (D,) and (D, D).
      r: ``1 / (1 + beta)`` of the proximal step.
      inner_r, max_iter, tol, num_points, adaptive: the inner iteration's, as :func:`fit`'s ``r``,
        ``max_iter``, ``tol``, ``num_points`` and ``adaptive``.

    Returns:
      A :class:`KLProxResult`, ``q_{k+1}``.
    """
    family = _as_family(model)
    X, y, mu, Sigma = check_batch_problem(family, X, y, prior_mean, prior_cov)
    _check_r(r)
    D = mu.shape[0]
    m_k = check_vector("mean", mean, D).astype(mu.dtype)
    V_k = check_cov("cov", cov, D).astype(mu.dtype)
    P_prior, P_k = _inv_spd(Sigma), _inv_spd(V_k)
    P_t = (1.0 - r) * P_prior + r * P_k
    Sigma_t = _inv_spd(P_t)
    mu_t = Sigma_t @ ((1.0 - r) * P_prior @ mu + r * P_k @ m_k)
    return _glm_iterate(expectation(model, num_points), X, y, mu_t, 0.5 * (Sigma_t + Sigma_t.T),
                        inner_r, max_iter, tol, m_k, P_k, weight=1.0 - r, adaptive=adaptive)


def elbo(model: Union[Model, Family], X, y, prior_mean, prior_cov, mean, cov,
         num_points: Optional[int] = None):
    """Evidence lower bound (10): ``sum_n f_n(x_n^T m, x_n^T V x_n) - KL(N(m, V) || N(mu, Sigma))``.

    Args:
      model: a GLM or a :class:`~jaxrvga.models.Family`, as :func:`fit`'s.
      X: the inputs, (N, D).
      y: the observations, (N,).
      prior_mean, prior_cov: ``mu`` (D,), ``Sigma`` (D, D).
      mean, cov: the Gaussian ``q = N(m, V)``, (D,) and (D, D).
      num_points: as :func:`expectation`'s.

    Returns:
      The scalar ELBO.
    """
    family = _as_family(model)
    X, y, mu, Sigma = check_batch_problem(family, X, y, prior_mean, prior_cov)
    D = mu.shape[0]
    m = check_finite("mean", check_vector("mean", mean, D)).astype(mu.dtype)
    V = check_cov("cov", cov, D).astype(mu.dtype)
    f = jnp.sum(expectation(model, num_points)(X @ m, jnp.einsum("nd,de,ne->n", X, V, X), y))
    return f - metrics.gaussian_kl(m, V, mu, Sigma)


# ---------------------------------------------------------------------------------------------
# Kernel form, eqs. (18)-(20) and Algorithm 1


class KernelResult(NamedTuple):
    """Result of :func:`fit_kernel`: latent marginals ``N(mean_n, var_n)`` at the training points.

    ``gt`` are the site precisions (18) of the last iterate; ``chol`` is the Cholesky factor of
    ``I + S K S`` with ``S = diag(sqrt(gt))``, kept for :func:`predict`. ``iterations``,
    ``converged``, ``residual``, ``elbo``, ``r`` and ``rejected`` as in :class:`KLProxResult`
    (``elbo`` is the ELBO of the latent Gaussian ``N(mean, (K^{-1} + diag(gt))^{-1})`` under the
    prior ``N(mu~, K)``, computed without inverting ``K``).
    """

    mean: jax.Array
    var: jax.Array
    alpha: jax.Array
    gamma: jax.Array
    gt: jax.Array
    chol: jax.Array
    iterations: jax.Array
    converged: jax.Array
    residual: jax.Array
    elbo: Optional[jax.Array] = None
    r: Optional[jax.Array] = None
    rejected: Optional[jax.Array] = None


def _factor(K, gt):
    """Cholesky of ``C = I + S K S``, ``S = diag(sqrt(gt))``: ``A^{-1} = (K + diag(gt)^{-1})^{-1} = S C^{-1} S``.

    Negative site precisions are clamped to 0: for the log-concave likelihoods of [KLPROX]
    (logistic, Poisson, Laplace, Gaussian) ``gamma >= 0`` and ``gt`` can only go below 0 by
    round-off, which would otherwise turn ``sqrt(gt)`` into NaN.
    """
    s = jnp.sqrt(jnp.maximum(gt, 0.0))
    C = jnp.eye(K.shape[0], dtype=K.dtype) + s[:, None] * K * s[None, :]
    return s, jnp.linalg.cholesky(C)


def fit_kernel(likelihood: Union[Model, Family], K, y, prior_mean=None, r=0.8,
               max_iter: int = 1000, tol=1e-10, *, num_points: Optional[int] = None, gt0=0.0,
               exact: Optional[bool] = None, adaptive: bool = True) -> KernelResult:
    """KL proximal-gradient VI in kernel form ([KLPROX] eqs. 18-19, Algorithm 1).

    Latent Gaussian model ``eta ~ N(mu~, K)`` (``K = Sigma~ = X Sigma X^T`` for a GLM, the kernel
    matrix for a GP), ``y_n ~ p(y_n | eta_n)``. Iterates::

        mt_{k+1} = mt_k + (1 - r) (I - K B_k^{-1}) (mu~ - mt_k - K alpha_k),
                   B_k = K + diag(r gt_k)^{-1}
        gt_{k+1} = r gt_k + (1 - r) gamma_k
        vt_{k+1} = Diag(K) - Diag(K A^{-1} K),  A = K + diag(gt)^{-1},
                   gt = gt_k (printed) or gt_{k+1} (exact)

    from ``mt_0 = mu~``, ``gt_0 = gt0`` and ``vt_0`` consistent with ``gt_0`` (``Diag(K)`` for the
    default ``gt0 = 0``, as in Algorithm 1). Inverses use ``I + S K S`` (``S = diag(sqrt(gt))``),
    so ``gt`` must stay >= 0, which holds for log-concave likelihoods (logistic, Poisson,
    Laplace, Gaussian); round-off below 0 is clamped (:func:`_factor`). The mean is carried as
    ``mt = mu~ - K w`` (``w = alpha`` at the fixed point), so that the ELBO
    ``sum_n f_n(mt_n, vt_n) - 1/2 [w^T K w - sum_n gt_n vt_n + log|I + S K S|]`` needs no ``K^{-1}``.

    Args:
      likelihood: a Model or Family (:func:`laplace_likelihood_family`, ``jr.models.bernoulli()``, ...).
      K: (N, N) prior covariance of the latent values; y: (N,); prior_mean: (N,) or None (zero).
      r, max_iter, tol, num_points, adaptive: as in :func:`fit` (the same iterates as :func:`fit`
        with ``exact=True``, also under the step control); the stopping rule is
        ``||mu~ - mt - K alpha|| / (1 + ||mu~||) + ||gt - gamma|| / (1 + ||gamma||) < tol``.
      gt0: initial site precisions (scalar or (N,)), >= 0.
      exact: use ``gt_{k+1}`` in ``A`` (consistent with (18)), or ``gt_k`` as in the printed (19)
        (``exact=False``, a one-iteration lag with the same fixed point). Default: ``exact`` when
        ``adaptive``, the printed lag otherwise. The step control needs ``exact`` (with the lag,
        ``(mt, vt)`` are not the marginals of the Gaussian defined by ``gt``, so the ELBO cannot
        vet the site update); ``exact=False`` with ``adaptive=True`` raises ValueError.

    Cost O(N^3) per iteration, O(N^2) memory.

    Returns:
      A :class:`KernelResult`.
    """
    family = _as_family(likelihood)
    K = check_float_array("K", K)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"K must be a square (N, N) matrix, got shape {K.shape}")
    N = K.shape[0]
    y = check_vector("y", y, N)
    family.check_y("y", y)
    mu = jnp.zeros(N) if prior_mean is None else check_vector("prior_mean", prior_mean, N)
    K = check_cov("K", K, N, semidefinite=True)
    _check_r(r)
    if exact is None:
        exact = adaptive
    elif adaptive and not exact:
        raise ValueError("exact=False (the printed lag of (19)) needs adaptive=False")
    dtype = jnp.result_type(K, y, mu)
    K, y, mu = K.astype(dtype), y.astype(dtype), mu.astype(dtype)
    gt0 = jnp.broadcast_to(jnp.asarray(gt0, dtype), (N,))
    if is_concrete(gt0) and np.any(np.asarray(gt0) < 0):
        raise ValueError("gt0 must be >= 0")
    max_iter, tol = _loop_args(max_iter, tol)
    return _kernel_jit(_Static(expectation(likelihood, num_points)), bool(exact), adaptive,
                       K, y, mu, gt0, r, max_iter, tol)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _kernel_jit(expected, exact, adaptive, K, y, mu, gt0, r, max_iter, tol):
    """The iteration of :func:`fit_kernel`, compiled once per ``expected`` (a :class:`_Static`),
    ``exact``, ``adaptive``, shapes and dtypes."""
    expected = expected.fn
    N = K.shape[0]
    dtype = K.dtype
    diag_K = jnp.diag(K)

    def evaluate(w, gt, gt_A):
        """State, ELBO and residual for ``mt = mu~ - K w`` and the covariance given by ``gt_A``."""
        s, L = _factor(K, gt_A)
        Z = solve_triangular(L, s[:, None] * K, lower=True)
        vt = diag_K - jnp.sum(Z**2, axis=0)                                         # (19), A
        Kw = K @ w
        mt = mu - Kw
        f, a, g = _sites(expected, y, mt, vt)
        kl = 0.5 * (w @ Kw - jnp.sum(s**2 * vt) + 2.0 * jnp.sum(jnp.log(jnp.diag(L))))
        res = _rel(Kw - K @ a, mu) + _rel(gt - g, g)
        return (w, mt, vt, gt, a, g), f - kl, res

    def propose(state, rk):
        w, _, _, gt, a, g = state
        s, L = _factor(K, rk * gt)
        d = w - a    # mu~ - mt - K alpha = K d
        w = w - (1.0 - rk) * (d - s * cho_solve((L, True), s * (K @ d)))           # (19), B_k
        gt_new = rk * gt + (1.0 - rk) * g                                           # (18)
        return evaluate(w, gt_new, gt_new if exact else gt)

    (_, mt, vt, gt, a, g), F, res, k, rk, nrej = _step_controlled(
        propose, evaluate(jnp.zeros(N, dtype), gt0, gt0), r, max_iter, tol, adaptive)
    _, L = _factor(K, gt)
    return KernelResult(mt, vt, a, g, gt, L, k, res <= tol, res, F, rk, nrej)


def predict(result: KernelResult, K_star, k_starstar, mean_star=0.0):
    """Latent predictive mean and variance at test points ([KLPROX] eq. 20).

    ``mt(x*) = mu~(x*) - kappa_*^T alpha*`` and
    ``vt(x*) = kappa_** - kappa_*^T [K + diag(gt*)^{-1}]^{-1} kappa_*``.

    Args:
      result: a :class:`KernelResult`.
      K_star: (M, N) cross-covariances ``kappa(x*_i, x_n)`` between test and training points.
      k_starstar: (M,) prior variances ``kappa(x*_i, x*_i)``.
      mean_star: prior mean ``mu~(x*)`` at the test points (scalar or (M,)).

    Returns:
      ``(mean, var)``, (M,) each.
    """
    N = result.alpha.shape[0]
    K_star = check_float_array("K_star", K_star)
    if K_star.ndim != 2 or K_star.shape[1] != N:
        raise ValueError(f"K_star must have shape (M, {N}), got {K_star.shape}")
    k_ss = check_vector("k_starstar", k_starstar, K_star.shape[0])
    s = jnp.sqrt(jnp.maximum(result.gt, 0.0))
    Z = solve_triangular(result.chol, s[:, None] * K_star.T, lower=True)
    return mean_star - K_star @ result.alpha, k_ss - jnp.sum(Z**2, axis=0)


def se_kernel(X1, X2=None, lengthscale=1.0, variance=1.0):
    """Squared-exponential kernel ``variance * exp(-||x - x'||^2 / (2 lengthscale^2))`` (GPML covSEiso).

    ``X1`` (n1, d), ``X2`` (n2, d) (default ``X1``) -> (n1, n2).

    Args:
      X1: (n1, d) inputs.
      X2: (n2, d) inputs (None: ``X1``).
      lengthscale: > 0.
      variance: the kernel's variance, > 0.

    Returns:
      The (n1, n2) kernel matrix.
    """
    X1 = jnp.atleast_2d(check_float_array("X1", X1))
    X2 = X1 if X2 is None else jnp.atleast_2d(check_float_array("X2", X2))
    if X1.shape[1] != X2.shape[1]:
        raise ValueError(f"X1 and X2 must have the same number of columns, got {X1.shape} and {X2.shape}")
    A, B = X1 / lengthscale, X2 / lengthscale
    d2 = jnp.sum(A**2, 1)[:, None] + jnp.sum(B**2, 1)[None, :] - 2.0 * A @ B.T
    return variance * jnp.exp(-0.5 * jnp.maximum(d2, 0.0))


_RESULT_SCALARS = ("iterations", "converged", "residual", "elbo", "r", "rejected")
io.register(KLProxResult, io.moments_check(("alpha", "gamma"), scalars=_RESULT_SCALARS),
            former=("jaxrvga.klprox",))
io.register(KernelResult, io.moments_check(("var", "alpha", "gamma", "gt"), cov="chol", scalars=_RESULT_SCALARS,
                                           like_mean=("var",)), former=("jaxrvga.klprox",))

__all__ = ["KLProxResult", "KernelResult", "elbo", "expectation", "fit", "fit_kernel",
           "laplace_likelihood", "laplace_likelihood_family", "predict", "proximal_point_step",
           "se_kernel", "site_gradients"]
