"""Dual variational inference for latent Gaussian models ([DUAL] Khan, Aravkin, Friedlander & Seeger).

Latent Gaussian model (1)-(2): ``z ~ N(mu, Sigma)`` (L-dim), ``eta = W z`` (``W`` is N x L),
``y_n ~ p(y_n | eta_n)``. The variational-Gaussian problem (11) with a convex local variational
bound ``f_n(h, rho) >= E_{N(eta | h, rho)}[-log p(y_n | eta)]`` has the dual (16)-(20)::

    f_n*(alpha, lam) = sup_{h, rho >= 0} alpha h + lam rho / 2 - f_n(h, rho)                    (19)
    D(alpha, lam) = 1/2 alpha^T Sigma~ alpha - mu~^T alpha - 1/2 log|A_lam| + sum_n f_n*(alpha_n, lam_n)   (20)
    m* = mu - Sigma W^T alpha*,    V* = A_lam*^{-1} = (Sigma^{-1} + W^T diag(lam*) W)^{-1}          (17)-(18)

with ``mu~ = W mu`` and ``Sigma~ = W Sigma W^T``. (The text of [DUAL] stops at (20); the
conjugates below are derived here, [reproduction] §1 F.)

The conjugates implemented here all have the form ``f_n*(alpha, lam) = phi_n(alpha)`` on the
domain ``lam <= lam_max_n(alpha)`` (and ``+inf`` above it), because each ``f_n`` is affine in
``rho`` along some direction. As ``-1/2 log|A_lam|`` strictly decreases in every ``lam_n``
(its derivative is ``-1/2 w_n^T A_lam^{-1} w_n < 0``), the minimiser over ``lam`` sits on that
boundary, ``lam_n = lam_max_n(alpha_n)``, and (20) reduces to the strictly convex problem
``min_alpha D(alpha, lam_max(alpha))`` in N variables, solved here by Newton's method with
backtracking (infeasible trial points have ``D = +inf``, so the iterates stay in the domain).

* Gaussian, ``p = N(y | eta, s^2)``: ``f(h, rho) = ((y - h)^2 + rho) / (2 s^2) + log(2 pi s^2)/2``
  (exact). Sup over h at ``h = y + s^2 alpha``; the rho-term ``rho (lam - 1/s^2)/2`` is bounded
  on ``rho >= 0`` iff ``lam <= 1/s^2``. So ``f*(alpha, lam) = alpha y + s^2 alpha^2 / 2
  - log(2 pi s^2)/2`` for ``lam <= 1/s^2`` and the optimum has ``lam = 1/s^2``.
* Bernoulli-logit with the Jaakkola-Jordan bound (see :func:`jj_conjugate`).
* Poisson, ``p(y | eta) = exp(y eta - e^eta) / y!``: ``f(h, rho) = exp(h + rho/2) - y h + log y!``
  (exact). With ``u = h + rho/2``: ``sup_u (alpha + y) u - e^u + sup_rho rho (lam - alpha - y)/2``,
  so ``f*(alpha, lam) = (alpha + y) log(alpha + y) - (alpha + y) - log y!`` on ``alpha >= -y``,
  ``lam <= alpha + y``; at the optimum ``lam = alpha + y = E_q[e^eta]``.

Log-determinants use ``log|Sigma A_lam| = log|I_N + S Sigma~ S|`` with ``S = diag(sqrt(lam))``
(lam >= 0), so nothing of size L x L is inverted; cost O(N^3 + N^2 L) per Newton step.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular
from jax.scipy.special import gammaln, xlogy

from . import metrics
from .models import Model
from .validation import check_batch_problem, check_vector


class Conjugate(NamedTuple):
    """A local variational bound ``f_n(h, rho)`` and its Fenchel conjugate (19) in reduced form.

    ``f*(alpha, lam) = phi(alpha, y)`` when ``feasible(alpha, y)`` and ``lam <= lam_max(alpha, y)``,
    ``+inf`` otherwise. All callables act elementwise.
    """

    name: str
    f: Callable        # (h, rho, y) -> f_n(h, rho)
    phi: Callable      # (alpha, y) -> f_n*(alpha, lam) on the domain
    lam_max: Callable  # (alpha, y) -> largest lam in the domain
    feasible: Callable  # (alpha, y) -> bool


def gaussian_conjugate(noise_var) -> Conjugate:
    """Exact Gaussian likelihood ``N(y | eta, noise_var)``: ``f* = alpha y + s^2 alpha^2/2 - log(2 pi s^2)/2``, ``lam <= 1/s^2``."""
    s2 = noise_var
    c = 0.5 * jnp.log(2.0 * jnp.pi * s2)
    return Conjugate(
        name="gaussian",
        f=lambda h, rho, y: ((y - h) ** 2 + rho) / (2.0 * s2) + c,
        phi=lambda a, y: a * y + 0.5 * s2 * a**2 - c,
        lam_max=lambda a, y: jnp.ones_like(a) / s2,
        feasible=lambda a, y: jnp.ones_like(a, dtype=bool),
    )


def jj_curvature(xi):
    """Jaakkola-Jordan curvature ``c(xi) = tanh(xi/2) / (4 xi)`` (limit 1/8 at xi = 0)."""
    xi = jnp.abs(xi)
    small = xi < 1e-4
    xs = jnp.where(small, 1.0, xi)
    return jnp.where(small, 0.125 - xi**2 / 96.0, jnp.tanh(0.5 * xs) / (4.0 * xs))


def _log2cosh_half(xi):
    """``log(2 cosh(xi / 2)) = logaddexp(xi/2, -xi/2)``."""
    return jnp.logaddexp(0.5 * xi, -0.5 * xi)


def jj_conjugate(xi) -> Conjugate:
    """Bernoulli-logit likelihood with the Jaakkola-Jordan local bound at fixed ``xi`` (elementwise).

    Derivation. With ``y in {0, 1}``, ``-log p(y | eta) = log(1 + e^eta) - y eta
    = (1/2 - y) eta + log(2 cosh(eta/2))``. The function ``t -> log(2 cosh(sqrt(t)/2))`` is
    concave, so its tangent at ``t = xi^2`` bounds it from above:
    ``log(2 cosh(eta/2)) <= log(2 cosh(xi/2)) + c (eta^2 - xi^2)``, ``c = tanh(xi/2) / (4 xi)``.
    Taking ``E_{N(eta | h, rho)}`` (``E eta^2 = h^2 + rho``) gives the convex LVB::

        f(h, rho) = (1/2 - y) h + c (h^2 + rho) + log(2 cosh(xi/2)) - c xi^2   >= E[-log p]

    (tight when ``xi^2 = h^2 + rho``). Its conjugate (19)::

        sup_h (alpha + y - 1/2) h - c h^2  =  (alpha + y - 1/2)^2 / (4 c)       at h* = (alpha + y - 1/2)/(2c)
        sup_{rho >= 0} rho (lam/2 - c)     =  0 if lam <= 2c, +inf otherwise
        f*(alpha, lam) = (alpha + y - 1/2)^2 / (4 c) - log(2 cosh(xi/2)) + c xi^2,   lam <= 2c.

    So for fixed ``xi`` the dual is that of a Gaussian pseudo-likelihood with precision ``2c`` and
    pseudo-observation ``(y - 1/2) / (2c)``; :func:`fit` alternates the dual solve with the
    tight-bound update ``xi_n^2 = h_n^2 + rho_n`` (``h = W m*``, ``rho = Diag(W V* W^T)``).
    """
    xi = jnp.asarray(xi)
    c = jj_curvature(xi)
    k = _log2cosh_half(xi) - c * xi**2
    return Conjugate(
        name="logistic_jj",
        f=lambda h, rho, y: (0.5 - y) * h + c * (h**2 + rho) + k,
        phi=lambda a, y: (a + y - 0.5) ** 2 / (4.0 * c) - k,
        lam_max=lambda a, y: 2.0 * c * jnp.ones_like(a),
        feasible=lambda a, y: jnp.ones_like(a, dtype=bool),
    )


def poisson_conjugate() -> Conjugate:
    """Exact Poisson likelihood (log link): ``f* = (a + y) log(a + y) - (a + y) - log y!`` on ``a >= -y``, ``lam <= a + y``."""
    return Conjugate(
        name="poisson",
        f=lambda h, rho, y: jnp.exp(h + 0.5 * rho) - y * h + gammaln(y + 1.0),
        phi=lambda a, y: xlogy(a + y, a + y) - (a + y) - gammaln(y + 1.0),
        lam_max=lambda a, y: a + y,
        feasible=lambda a, y: a + y > 0.0,
    )


def dual_objective(conj: Conjugate, alpha, lam, y, mu_t, Sigma_t):
    """The dual (20) plus the constant ``-1/2 log|Sigma|``, so that its minimum equals the maximal ELBO.

    ``1/2 a^T Sigma~ a - mu~^T a - 1/2 log|I + S Sigma~ S| + sum_n f_n*(a_n, lam_n)``,
    ``S = diag(sqrt(lam))`` (needs lam >= 0); ``+inf`` outside the domain of ``f*``.
    """
    ok = jnp.all(conj.feasible(alpha, y) & (lam <= conj.lam_max(alpha, y)) & (lam >= 0.0))
    a = jnp.where(conj.feasible(alpha, y), alpha, 1.0)
    L = _chol_C(Sigma_t, jnp.where(ok, lam, 1.0))
    val = (0.5 * a @ (Sigma_t @ a) - mu_t @ a - jnp.sum(jnp.log(jnp.diag(L)))
           + jnp.sum(conj.phi(a, y)))
    return jnp.where(ok, val, jnp.inf)


def _chol_C(Sigma_t, lam):
    s = jnp.sqrt(lam)
    return jnp.linalg.cholesky(jnp.eye(lam.shape[0], dtype=lam.dtype) + s[:, None] * Sigma_t * s[None, :])


def _reduced(conj, y, mu_t, Sigma_t):
    """``alpha -> D(alpha, lam_max(alpha))``."""
    return lambda a: dual_objective(conj, a, conj.lam_max(a, y), y, mu_t, Sigma_t)


def _newton(fun, a0, max_iter, tol):
    """Damped Newton with Armijo backtracking for a smooth strictly convex ``fun`` (``+inf`` outside its domain)."""
    grad = jax.grad(fun)
    hess = jax.hessian(fun)

    def cond(c):
        k, a, g = c
        return (k < max_iter) & (jnp.max(jnp.abs(g)) > tol)

    def body(c):
        k, a, g = c
        H = hess(a)
        step = -cho_solve((jnp.linalg.cholesky(0.5 * (H + H.T)), True), g)
        f0, slope = fun(a), g @ step

        def ls_cond(t):
            return (fun(a + t * step) > f0 + 1e-4 * t * slope) & (t > 1e-12)

        t = jax.lax.while_loop(ls_cond, lambda t: 0.5 * t, jnp.asarray(1.0, a.dtype))
        a = a + t * step
        return k + 1, a, grad(a)

    k, a, g = jax.lax.while_loop(cond, body, (jnp.asarray(0, jnp.int32), a0, grad(a0)))
    return a, k, jnp.max(jnp.abs(g))


class DualResult(NamedTuple):
    """Result of :func:`fit`: ``q = N(mean, cov)`` and the dual variables ``(alpha, lam)``.

    ``value`` is the dual objective (:func:`dual_objective`) at the solution, equal to the
    maximal ELBO with the LVB (strong duality). ``xi`` holds the Jaakkola-Jordan parameters
    (logistic model only, else ``None``); ``iterations`` counts Newton steps (summed over the
    ``xi`` updates); ``residual`` is the final max-abs gradient (or the ``xi`` change).
    """

    mean: jax.Array
    cov: jax.Array
    alpha: jax.Array
    lam: jax.Array
    value: jax.Array
    iterations: jax.Array
    converged: jax.Array
    residual: jax.Array
    xi: Optional[jax.Array] = None


def _conjugate_for(model):
    if isinstance(model, Conjugate):
        return model
    if not isinstance(model, Model):
        raise ValueError(f"expected a jaxrvga Model or a dual.Conjugate, got {type(model).__name__}")
    if model.kind == "linear_gaussian":
        return gaussian_conjugate(model.noise_var)
    if model.kind == "logistic":
        return None  # Jaakkola-Jordan, xi updated in fit
    if model.family.name == "poisson":
        return poisson_conjugate()
    raise ValueError(f"no Fenchel conjugate is implemented for the {model.kind!r} model with a "
                     f"{model.family.name!r} likelihood; pass a dual.Conjugate")


def _posterior(W, mu, Sigma, alpha, lam):
    """(17)-(18): ``m = mu - Sigma W^T alpha``, ``V = Sigma - Sigma W^T S C^{-1} S W Sigma``."""
    SW = Sigma @ W.T
    L = _chol_C(W @ SW, lam)
    Z = solve_triangular(L, jnp.sqrt(lam)[:, None] * SW.T, lower=True)
    V = Sigma - Z.T @ Z
    return mu - SW @ alpha, 0.5 * (V + V.T)


def _marginals(Sigma_t, mu_t, alpha, lam):
    """``h = W m* = mu~ - Sigma~ alpha`` and ``rho = Diag(W V* W^T)`` without forming V*."""
    L = _chol_C(Sigma_t, lam)
    Z = solve_triangular(L, jnp.sqrt(lam)[:, None] * Sigma_t, lower=True)
    return mu_t - Sigma_t @ alpha, jnp.diag(Sigma_t) - jnp.sum(Z**2, axis=0)


def fit(model: Union[Model, Conjugate], W, y, prior_mean, prior_cov, *, max_iter: int = 100,
        tol=1e-10, xi_max_iter: int = 1000, xi_tol=1e-12, alpha0=None) -> DualResult:
    """Variational-Gaussian posterior of a latent Gaussian model by minimising the dual (20).

    Args:
      model: ``jr.models.linear_gaussian(s2)`` (exact), ``jr.models.logistic()`` (Jaakkola-Jordan
        bound, with ``xi`` updated to the tight value after each dual solve), ``jr.models.poisson()``
        (exact), or any :class:`Conjugate` (fixed bound).
      W: (N, L) design (``eta = W z``); y: (N,); prior_mean (L,), prior_cov (L, L).
      max_iter, tol: Newton iterations and tolerance on ``max |grad_alpha D|``.
      xi_max_iter, xi_tol: outer Jaakkola-Jordan updates (logistic only), stop at ``max |dxi| < xi_tol``.
      alpha0: starting point (default: 0, or 1 for Poisson so that ``alpha + y > 0``).

    Returns a :class:`DualResult` with ``mean = mu - Sigma W^T alpha`` and
    ``cov = (Sigma^{-1} + W^T diag(lam) W)^{-1}`` (17)-(18).
    """
    conj = _conjugate_for(model)
    W, y, mu, Sigma = check_batch_problem(model.family if isinstance(model, Model) else None,
                                          W, y, prior_mean, prior_cov, x_name="W")
    N, Ld = W.shape
    dtype = W.dtype
    mu_t, Sigma_t = W @ mu, W @ Sigma @ W.T
    if alpha0 is None:
        fill = 1.0 if (conj is not None and conj.name == "poisson") else 0.0
        alpha0 = jnp.full((N,), fill, dtype)
    else:
        alpha0 = check_vector("alpha0", alpha0, N).astype(dtype)

    if conj is not None:
        alpha, its, res = _newton(_reduced(conj, y, mu_t, Sigma_t), alpha0, max_iter, tol)
        xi = None
        converged = res <= tol
    else:
        def solve(xi, a):
            return _newton(_reduced(jj_conjugate(xi), y, mu_t, Sigma_t), a, max_iter, tol)

        def body(c):
            k, xi, a, its, _ = c
            a, n, _ = solve(xi, a)
            h, rho = _marginals(Sigma_t, mu_t, a, jj_conjugate(xi).lam_max(a, y))
            xi_new = jnp.sqrt(h**2 + rho)
            return k + 1, xi_new, a, its + n, jnp.max(jnp.abs(xi_new - xi))

        def cond(c):
            return (c[0] < xi_max_iter) & (c[4] > xi_tol)

        xi0 = jnp.sqrt(mu_t**2 + jnp.diag(Sigma_t))
        init = (jnp.asarray(0, jnp.int32), xi0, alpha0, jnp.asarray(0, jnp.int32),
                jnp.asarray(jnp.inf, dtype))
        _, xi, alpha, its, dxi = jax.lax.while_loop(cond, body, init)
        conj = jj_conjugate(xi)  # re-solve for the final xi (warm start: one or two Newton steps)
        alpha, n, res = _newton(_reduced(conj, y, mu_t, Sigma_t), alpha, max_iter, tol)
        its = its + n
        converged = (res <= tol) & (dxi <= xi_tol)
        res = jnp.maximum(res, dxi)
    lam = conj.lam_max(alpha, y)
    mean, cov = _posterior(W, mu, Sigma, alpha, lam)
    value = dual_objective(conj, alpha, lam, y, mu_t, Sigma_t)
    return DualResult(mean, cov, alpha, lam, value, its, converged, res, xi)


def fenchel_young_gap(conj: Conjugate, alpha, lam, h, rho, y):
    """``f(h, rho) + f*(alpha, lam) - alpha h - lam rho / 2 >= 0`` elementwise; zero iff ``(h, rho)``
    attains the sup in (19), i.e. the dual optimality condition ([reproduction] check 24)."""
    return conj.f(h, rho, y) + conj.phi(alpha, y) - alpha * h - 0.5 * lam * rho


def lvb_elbo(conj: Conjugate, W, y, prior_mean, prior_cov, mean, cov):
    """Primal objective (11): ``-KL(N(m, V) || N(mu, Sigma)) - sum_n f_n(W m, Diag(W V W^T))``."""
    h = W @ mean
    rho = jnp.einsum("nl,lk,nk->n", W, cov, W)
    return -metrics.gaussian_kl(mean, cov, prior_mean, prior_cov) - jnp.sum(conj.f(h, rho, y))


__all__ = ["Conjugate", "DualResult", "dual_objective", "fenchel_young_gap", "fit",
           "gaussian_conjugate", "jj_conjugate", "jj_curvature", "lvb_elbo", "poisson_conjugate"]
