r"""Dual variational inference for latent Gaussian models ([DUAL] Khan, Aravkin, Friedlander & Seeger).

Latent Gaussian model (1)-(2): ``z ~ N(mu, Sigma)`` (L-dim), ``eta = W z`` (``W`` is N x L),
``y_n ~ p(y_n | eta_n)``. The variational-Gaussian problem (11) with a convex local variational
bound ``f_n(h, rho) >= E_{N(eta | h, rho)}[-log p(y_n | eta)]`` has the dual [DUAL]
eqs. (16)-(20):

.. math::

    f_n^*(\alpha, \lambda) &= \sup_{h,\ \rho \ge 0}\ \alpha h + \tfrac12 \lambda \rho - f_n(h, \rho)
    \qquad \text{(19)}

    D(\alpha, \lambda) &= \tfrac12 \alpha^\top \tilde\Sigma \alpha - \tilde\mu^\top \alpha
    - \tfrac12 \log |A_\lambda| + \textstyle\sum_n f_n^*(\alpha_n, \lambda_n)  \qquad \text{(20)}

    m^* &= \mu - \Sigma W^\top \alpha^*, \qquad
    V^* = A_{\lambda^*}^{-1} = \big(\Sigma^{-1} + W^\top \operatorname{diag}(\lambda^*)\, W\big)^{-1}
    \qquad \text{(17)-(18)}

with ``mu~ = W mu`` and ``Sigma~ = W Sigma W^T``. (The text of [DUAL] stops at (20); the
conjugates below are derived here.)

The conjugates implemented here all have the form ``f_n*(alpha, lam) = phi_n(alpha)`` on the
domain ``lam <= lam_max_n(alpha)`` (and ``+inf`` above it), because each ``f_n`` is affine in
``rho`` along some direction. As ``-1/2 log|A_lam|`` strictly decreases in every ``lam_n``
(its derivative is ``-1/2 w_n^T A_lam^{-1} w_n < 0``), the minimiser over ``lam`` sits on that
boundary, ``lam_n = lam_max_n(alpha_n)``, and (20) reduces to the strictly convex problem
``min_alpha D(alpha, lam_max(alpha))`` in N variables, solved here by Newton's method with
backtracking (infeasible trial points have ``D = +inf``, so the iterates stay in the domain).
For the Jaakkola-Jordan bound at fixed ``xi`` the problem is quadratic and is solved in closed
form; the outer ``xi`` iteration (EM) is accelerated by SQUAREM (see :func:`fit`).

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

import operator
from typing import Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular
from jax.scipy.special import gammaln, xlogy

from . import metrics
from ..kernels.special import jj_lambda
from ..models import Model
from ..validation import check_batch_problem, check_vector, is_concrete
from .. import io


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
    """Exact Gaussian likelihood ``N(y | eta, noise_var)``: ``f* = alpha y + s^2 alpha^2/2 - log(2 pi s^2)/2``, ``lam <= 1/s^2``.

    Args:
      noise_var: ``s^2 > 0``.

    Returns:
      A :class:`Conjugate`.
    """
    s2 = noise_var
    c = 0.5 * jnp.log(2.0 * jnp.pi * s2)
    return Conjugate(
        name="gaussian",
        f=lambda h, rho, y: ((y - h) ** 2 + rho) / (2.0 * s2) + c,
        phi=lambda a, y: a * y + 0.5 * s2 * a**2 - c,
        lam_max=lambda a, y: jnp.ones_like(a) / s2,
        feasible=lambda a, y: jnp.ones_like(a, dtype=bool),
    )


def _log2cosh_half(xi):
    """``log(2 cosh(xi / 2)) = logaddexp(xi/2, -xi/2)``."""
    return jnp.logaddexp(0.5 * xi, -0.5 * xi)


def jj_conjugate(xi) -> Conjugate:
    """Bernoulli-logit likelihood with the Jaakkola-Jordan local bound at fixed ``xi`` (elementwise).

    Derivation. With ``y in {0, 1}``, ``-log p(y | eta) = log(1 + e^eta) - y eta
    = (1/2 - y) eta + log(2 cosh(eta/2))``. The function ``t -> log(2 cosh(sqrt(t)/2))`` is
    concave, so its tangent at ``t = xi^2`` bounds it from above:
    ``log(2 cosh(eta/2)) <= log(2 cosh(xi/2)) + c (eta^2 - xi^2)``, ``c = tanh(xi/2) / (4 xi)``
    (:func:`jaxrvga.kernels.special.jj_lambda`, the ``-eta`` of [RVGA] eq. 83).
    Taking ``E_{N(eta | h, rho)}`` (``E eta^2 = h^2 + rho``) gives the convex LVB::

        f(h, rho) = (1/2 - y) h + c (h^2 + rho) + log(2 cosh(xi/2)) - c xi^2   >= E[-log p]

    (tight when ``xi^2 = h^2 + rho``). Its conjugate (19)::

        sup_h (alpha + y - 1/2) h - c h^2  =  (alpha + y - 1/2)^2 / (4 c),
                                              at h* = (alpha + y - 1/2) / (2c)
        sup_{rho >= 0} rho (lam/2 - c)     =  0 if lam <= 2c, +inf otherwise
        f*(alpha, lam) = (alpha + y - 1/2)^2 / (4 c) - log(2 cosh(xi/2)) + c xi^2,   lam <= 2c.

    So for fixed ``xi`` the dual is that of a Gaussian pseudo-likelihood with precision ``2c`` and
    pseudo-observation ``(y - 1/2) / (2c)``; :func:`fit` alternates the dual solve with the
    tight-bound update ``xi_n^2 = h_n^2 + rho_n`` (``h = W m*``, ``rho = Diag(W V* W^T)``).

    Args:
      xi: the variational parameters, (N,) or a scalar.

    Returns:
      A :class:`Conjugate`.
    """
    xi = jnp.asarray(xi)
    c = jj_lambda(xi)
    k = _log2cosh_half(xi) - c * xi**2
    return Conjugate(
        name="logistic_jj",
        f=lambda h, rho, y: (0.5 - y) * h + c * (h**2 + rho) + k,
        phi=lambda a, y: (a + y - 0.5) ** 2 / (4.0 * c) - k,
        lam_max=lambda a, y: 2.0 * c * jnp.ones_like(a),
        feasible=lambda a, y: jnp.ones_like(a, dtype=bool),
    )


def poisson_conjugate() -> Conjugate:
    """Exact Poisson likelihood (log link): ``f* = (a + y) log(a + y) - (a + y) - log y!`` on ``a >= -y``, ``lam <= a + y``.

    Returns:
      A :class:`Conjugate`.
    """
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

    Args:
      conj: the :class:`Conjugate` of the likelihood.
      alpha, lam: the dual variables, (N,) each.
      y: the observations, (N,).
      mu_t, Sigma_t: the prior of ``eta = W z``: ``W mu`` (N,) and ``W Sigma W^T`` (N, N).

    Returns:
      The scalar dual objective (``+inf`` outside its domain).
    """
    ok = jnp.all(conj.feasible(alpha, y) & (lam <= conj.lam_max(alpha, y)) & (lam >= 0.0))
    a = jnp.where(conj.feasible(alpha, y), alpha, 1.0)
    L = _chol_C(Sigma_t, jnp.where(ok, lam, 1.0))
    return jnp.where(ok, _value(conj, a, L, y, mu_t, Sigma_t), jnp.inf)


def _value(conj, a, L, y, mu_t, Sigma_t):
    """(20) at a feasible ``(a, lam)`` given ``L L^T = I + S Sigma~ S``, ``S = diag(sqrt(lam))``."""
    return (0.5 * a @ (Sigma_t @ a) - mu_t @ a - jnp.sum(jnp.log(jnp.diag(L)))
            + jnp.sum(conj.phi(a, y)))


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
    (logistic model only, else ``None``); ``iterations`` counts Newton steps, or for the
    logistic model the closed-form dual solves (one Cholesky factorisation each: the EM map
    evaluations plus the final solve); ``residual`` is the final max-abs gradient (or the
    relative ``xi`` change ``max |xi' - xi| / (1 + |xi|)`` of the last EM step); ``converged`` says whether it is below the
    tolerance (a run stopped by the iteration limit reports False).
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


def _marginals(Sigma_t, mu_t, alpha, lam, L=None):
    """``h = W m* = mu~ - Sigma~ alpha`` and ``rho = Diag(W V* W^T)`` without forming V*.

    ``L``: the Cholesky factor of ``I + S Sigma~ S`` if already computed."""
    L = _chol_C(Sigma_t, lam) if L is None else L
    Z = solve_triangular(L, jnp.sqrt(lam)[:, None] * Sigma_t, lower=True)
    return mu_t - Sigma_t @ alpha, jnp.diag(Sigma_t) - jnp.sum(Z**2, axis=0)


def _jj_solve(Sigma_t, mu_t, y, xi):
    """Minimiser of (20) for the Jaakkola-Jordan bound at fixed ``xi``, in closed form.

    With ``lam = 2 c(xi)`` fixed, (20) is quadratic in ``alpha``; its gradient
    ``Sigma~ alpha - mu~ + (alpha + y - 1/2) / lam`` vanishes at
    ``alpha = (Sigma~ + diag(lam)^{-1})^{-1} (mu~ - (y - 1/2) / lam) = S C^{-1} S (mu~ - (y - 1/2) / lam)``
    with ``S = diag(sqrt(lam))``, ``C = I + S Sigma~ S = L L^T``: one Cholesky factorisation.
    Returns ``(alpha, lam, L, value)``.
    """
    conj = jj_conjugate(xi)
    lam = conj.lam_max(xi, y)
    s = jnp.sqrt(lam)
    L = _chol_C(Sigma_t, lam)
    alpha = s * cho_solve((L, True), s * mu_t - (y - 0.5) / s)
    return alpha, lam, L, _value(conj, alpha, L, y, mu_t, Sigma_t)


def _jj_em(Sigma_t, mu_t, y):
    """The Jaakkola-Jordan EM map ``xi -> (xi', F(xi))``: solve (20) at ``xi`` (:func:`_jj_solve`),
    then the tight-bound update ``xi'^2 = h^2 + rho`` from the marginals of ``q*`` (17)-(18).

    ``F(xi)`` is the dual value, i.e. the maximal JJ-bound ELBO for this ``xi``; the map increases
    it (coordinate ascent on the ELBO in ``(q, xi)``), and its fixed points are the stationary
    points of ``F``."""
    def em(xi):
        alpha, lam, L, value = _jj_solve(Sigma_t, mu_t, y, xi)
        h, rho = _marginals(Sigma_t, mu_t, alpha, lam, L)
        return jnp.sqrt(h**2 + rho), value
    return em


def _fixed_point(em, x0, max_iter, tol, accelerate):
    """Fixed point ``x = G(x)`` of an ascent map ``em: x -> (G(x), F(x))`` (``F(G(x)) >= F(x)``).

    ``accelerate=False``: the plain iteration ``x <- G(x)``. ``accelerate=True``: SQUAREM
    (Varadhan & Roland 2008, Scand. J. Stat. 35, scheme S3) with a monotone safeguard: from ``x``,
    ``x1 = G(x)``, ``x2 = G(x1)``, ``r = x1 - x``, ``v = x2 - 2 x1 + x``,
    ``a = max(1, ||r|| / ||v||)`` and the extrapolation ``x' = |x + 2 a r + a^2 v|`` (``|.|``: the
    JJ map depends on ``|xi|`` only); ``x'`` is kept when ``F(x') >= F(x1)`` and finite, else the
    iteration continues from ``x1``. So ``F`` never decreases, and any limit is a fixed point of
    ``G``; the cost is two map evaluations per iteration. Both stop when the residual
    ``max_n |G(x)_n - x_n| / (1 + |x_n|)`` is ``<= tol``.

    Returns ``(x, G(x), iterations, evaluations, residual)``.
    """
    def res(x, gx):
        return jnp.max(jnp.abs(gx - x) / (1.0 + jnp.abs(x)))

    def body_plain(c):
        k, _, gx, _, nev = c
        x = gx
        gx, fx = em(x)
        return k + 1, x, gx, fx, nev + 1

    def body_squarem(c):
        k, x, gx, fx, nev = c
        x1 = gx
        x2, f1 = em(x1)
        r = x1 - x
        v = x2 - 2.0 * x1 + x
        rr, vv = r @ r, v @ v
        a = jnp.where(vv > 0.0, jnp.sqrt(rr / jnp.where(vv > 0.0, vv, 1.0)), 1.0)
        a = jnp.maximum(a, 1.0)
        xp = jnp.abs(x + 2.0 * a * r + a**2 * v)
        gp, fp = em(xp)
        ok = jnp.isfinite(fp) & jnp.all(jnp.isfinite(gp)) & (fp >= f1)
        pick = lambda p, q: jnp.where(ok, p, q)  # noqa: E731
        return k + 1, pick(xp, x1), pick(gp, x2), pick(fp, f1), nev + 2

    def cond(c):
        return (c[0] < max_iter) & (res(c[1], c[2]) > tol)

    g0, f0 = em(x0)
    init = (jnp.asarray(0, jnp.int32), x0, g0, f0, jnp.asarray(1, jnp.int32))
    k, x, gx, _, nev = jax.lax.while_loop(cond, body_squarem if accelerate else body_plain, init)
    return x, gx, k, nev, res(x, gx)


def fit(model: Union[Model, Conjugate], W, y, prior_mean, prior_cov, *, max_iter: int = 100,
        tol=1e-10, xi_max_iter: int = 1000, xi_tol=1e-12, alpha0=None,
        accelerate: bool = True) -> DualResult:
    """Variational-Gaussian posterior of a latent Gaussian model by minimising the dual (20).

    Args:
      model: ``jr.models.linear_gaussian(s2)`` (exact), ``jr.models.logistic()`` (Jaakkola-Jordan
        bound, with ``xi`` updated to the tight value after each dual solve), ``jr.models.poisson()``
        (exact), or any :class:`Conjugate` (fixed bound).
      W: (N, L) design (``eta = W z``); y: (N,); prior_mean (L,), prior_cov (L, L).
      max_iter, tol: Newton iterations and tolerance on ``max |grad_alpha D|`` (not logistic).
      xi_max_iter, xi_tol: outer Jaakkola-Jordan iterations (logistic only), stop at
        ``max_n |xi'_n - xi_n| / (1 + |xi_n|) <= xi_tol`` with ``xi'`` the EM update of ``xi``
        (relative: the round-off floor of the EM map grows with ``|xi|``; about 1e-13 relative).
      alpha0: Newton's starting point (default: 0, or 1 for Poisson so that ``alpha + y > 0``);
        not used by the logistic model, whose dual solve is closed-form.
      accelerate: logistic only. For fixed ``xi`` the dual is quadratic in ``alpha`` and is solved
        in closed form (one Cholesky factorisation, :func:`_jj_solve`); ``xi`` then takes the
        tight value ``xi^2 = h^2 + rho`` (the JJ EM step). That EM converges linearly, and slowly
        when the prior is weak or the data nearly separable (thousands of iterations); by default
        it is accelerated by SQUAREM with a monotone safeguard (:func:`_fixed_point`), which has
        the same fixed points. ``accelerate=False``: the plain EM.

    Returns a :class:`DualResult` with ``mean = mu - Sigma W^T alpha`` and
    ``cov = (Sigma^{-1} + W^T diag(lam) W)^{-1}`` (17)-(18).

    Returns:
      A :class:`DualResult`.
    """
    conj = _conjugate_for(model)
    W, y, mu, Sigma = check_batch_problem(model.family if isinstance(model, Model) else None,
                                          W, y, prior_mean, prior_cov, x_name="W")
    N, Ld = W.shape
    if N == 0:
        raise ValueError(f"W must have at least one row (N >= 1 observations), got shape {W.shape}")
    dtype = W.dtype

    if conj is not None:
        if alpha0 is None:
            fill = 1.0 if conj.name == "poisson" else 0.0
            alpha0 = jnp.full((N,), fill, dtype)
        else:
            alpha0 = check_vector("alpha0", alpha0, N).astype(dtype)
            if is_concrete((alpha0, y)) and not bool(jnp.all(conj.feasible(alpha0, y))):
                raise ValueError(f"alpha0 must lie in the domain of the {conj.name} conjugate "
                                 "(for Poisson: alpha0 + y > 0)")
        # The built-in conjugates by name (one compiled program for every model of that kind,
        # the noise variance an argument); any other Conjugate by itself (its callables).
        if isinstance(model, Model) and conj.name == "gaussian":
            spec, param = "gaussian", model.noise_var
        elif isinstance(model, Model) and conj.name == "poisson":
            spec, param = "poisson", None
        else:
            spec, param = conj, None
        iters = (_loop_limit(max_iter), tol)
    else:
        if alpha0 is not None:
            check_vector("alpha0", alpha0, N)
        spec, param, alpha0 = ("jj", bool(accelerate)), None, None  # alpha0: not used here
        iters = (_loop_limit(xi_max_iter), xi_tol)
    try:
        hash(spec)
    except TypeError:  # a Conjugate with unhashable fields: traced afresh, as any function
        return _solve(spec, param, W, y, mu, Sigma, alpha0, *iters)
    return _solve_jit(spec, param, W, y, mu, Sigma, alpha0, *iters)


def _loop_limit(n):
    """An integer iteration limit as an int32 argument of the compiled loop (its counter is int32);
    anything else as given."""
    try:
        return jnp.asarray(min(operator.index(n), 2**31 - 1), jnp.int32)
    except TypeError:
        return n


def _solve(spec, param, W, y, mu, Sigma, alpha0, max_iter, tol):
    """The computation of :func:`fit` after validation. ``spec``: ``"gaussian"`` (``param`` is the
    noise variance), ``"poisson"``, ``("jj", accelerate)`` (logistic) or a :class:`Conjugate`."""
    mu_t, Sigma_t = W @ mu, W @ Sigma @ W.T
    if isinstance(spec, tuple) and not isinstance(spec, Conjugate):  # ("jj", accelerate)
        xi0 = jnp.sqrt(mu_t**2 + jnp.diag(Sigma_t))
        _, xi, k, its, res = _fixed_point(_jj_em(Sigma_t, mu_t, y), xi0, max_iter, tol, spec[1])
        alpha, lam, _, value = _jj_solve(Sigma_t, mu_t, y, xi)  # at the last EM update of xi
        its = its + 1
        converged = (res <= tol) & jnp.isfinite(value)
    else:
        conj = (gaussian_conjugate(param) if spec == "gaussian"
                else poisson_conjugate() if spec == "poisson" else spec)
        alpha, its, res = _newton(_reduced(conj, y, mu_t, Sigma_t), alpha0, max_iter, tol)
        lam = conj.lam_max(alpha, y)
        value = dual_objective(conj, alpha, lam, y, mu_t, Sigma_t)
        xi = None
        # Outside the domain D = +inf has a zero gradient: only a finite value counts as converged.
        converged = (res <= tol) & jnp.isfinite(value)
    mean, cov = _posterior(W, mu, Sigma, alpha, lam)
    converged = converged & jnp.all(jnp.isfinite(mean)) & jnp.all(jnp.isfinite(cov))
    return DualResult(mean, cov, alpha, lam, value, its, converged, res, xi)


#: :func:`_solve` compiled once per ``spec``, shapes and dtypes (rather than its loops compiled
#: afresh at each call of :func:`fit`, whose closures are new each time).
_solve_jit = jax.jit(_solve, static_argnums=0)


def fenchel_young_gap(conj: Conjugate, alpha, lam, h, rho, y):
    """``f(h, rho) + f*(alpha, lam) - alpha h - lam rho / 2 >= 0`` elementwise; zero iff ``(h, rho)``
    attains the sup in (19), i.e. the dual optimality condition of (19).

    Args:
      conj: the :class:`Conjugate` of the likelihood.
      alpha, lam: the dual variables, (N,).
      h, rho: the marginal means and variances of ``eta``, (N,).
      y: the observations, (N,).

    Returns:
      The (N,) gaps.
    """
    return conj.f(h, rho, y) + conj.phi(alpha, y) - alpha * h - 0.5 * lam * rho


def lvb_elbo(conj: Conjugate, W, y, prior_mean, prior_cov, mean, cov):
    """Primal objective (11): ``-KL(N(m, V) || N(mu, Sigma)) - sum_n f_n(W m, Diag(W V W^T))``.

    Args:
      conj: the :class:`Conjugate` of the likelihood.
      W: the (N, L) design.
      y: the observations, (N,).
      prior_mean, prior_cov: ``mu`` (L,), ``Sigma`` (L, L).
      mean, cov: the Gaussian ``q = N(m, V)``, (L,) and (L, L).

    Returns:
      The scalar ELBO.
    """
    h = W @ mean
    rho = jnp.einsum("nl,lk,nk->n", W, cov, W)
    return -metrics.gaussian_kl(mean, cov, prior_mean, prior_cov) - jnp.sum(conj.f(h, rho, y))


io.register(DualResult, io.moments_check(("alpha", "lam", "xi"), scalars=("value", "iterations", "converged", "residual")),
            former=("jaxrvga.dual",))

__all__ = ["Conjugate", "DualResult", "dual_objective", "fenchel_young_gap", "fit",
           "gaussian_conjugate", "jj_conjugate", "lvb_elbo", "poisson_conjugate"]
