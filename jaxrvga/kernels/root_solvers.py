r"""The 2-D root of the implicit logistic R-VGA update ([RVGA] eqs. 69-77, App. 9.5).

With ``alpha0 = x^T mu_{t-1}`` and ``nu0 = x^T P_{t-1} x``, the implicit update reduces to
finding ``(alpha, nu) = (x^T mu_t, x^T P_t x)`` such that ([RVGA] eqs. (69)-(70))

.. math::

    f(\alpha, \nu) &= \alpha + \nu_0\, \sigma\big(k(\nu)\, \alpha\big) - \alpha_0 - \nu_0\, y = 0,

    g(\alpha, \nu) &= \nu - \frac{\nu_0}{1 + \nu_0\, k(\nu)\, \sigma'\big(k(\nu)\, \alpha\big)} = 0,

with ``sig`` (:math:`\sigma`) the logistic function and :math:`k(\nu) = (1 + \pi \nu / 8)^{-1/2}`
([RVGA] eq. (58)).

The root lies in the box (71)-(72), which the refinement (129)-(136) shrinks.

The solver, :func:`solve_logistic`, is jittable and vmappable:

1. damped Newton in ``(alpha, log nu)`` from the explicit update (eqs. 78-80, within
   ``O(nu0^2)`` of the root), each iterate projected on the coarse box (71)-(72);
2. only for the solves that Newton left unconverged (under ``vmap``, only when some element of
   the batch needs it): the box is refined by a fixed number of sweeps of (129)-(136) and
   damped Newton restarts from its centre, projected on it;
3. if Newton has not met the tolerance, a bracketed fallback that cannot fail: for fixed
   ``nu``, ``f`` is strictly increasing in ``alpha`` and changes sign on the box, and
   ``G(nu) = g(alpha(nu), nu)`` changes sign between ``nu_min`` and ``nu_max``; both 1-D
   problems are solved by safeguarded Newton (bisection whenever Newton leaves the bracket).

It returns the residual and a convergence flag instead of failing silently.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core import SolverInfo
from .special import PROBIT_BETA, probit_k, sig1, sigmoid
from ..validation import check_float_array, is_concrete

_REFINE_SWEEPS = 8
_NEWTON_ITERS = 30
_BRACKET_ITERS = 100


def _tolerance(dtype):
    return jnp.maximum(jnp.asarray(1e-12, dtype), 64 * jnp.finfo(dtype).eps)


def _logistic_terms(alpha, nu):
    """``(k, u, sig(u), sig'(u), sig(|u|), sig(-|u|))`` with ``k = k(nu)``, ``u = k alpha``: one
    exp, one sqrt. Shared by :func:`residuals` and :func:`residuals_and_jacobian`, so that the
    solver's stopping test and the reported residual are the same numbers."""
    k = PROBIT_BETA / jnp.sqrt(nu + PROBIT_BETA**2)
    u = k * alpha
    e = jnp.exp(-jnp.abs(u))
    s_pos, s_neg = 1.0 / (1.0 + e), e / (1.0 + e)  # sig(|u|), sig(-|u|)
    return k, u, jnp.where(u >= 0, s_pos, s_neg), s_pos * s_neg, s_pos, s_neg


def _sig_minus_y(u, y, s, s_pos, s_neg):
    """``sig(u) - y`` without cancellation: ``(1 - y) - sig(-u)`` for ``y >= 1/2`` (exactly
    ``-sig(-u)`` for the label 1). Written as ``sig(u) - 1`` it rounds to 0 in float32 as soon as
    ``u > 17``, and the root of ``f`` is lost at large ``nu0``."""
    return jnp.where(y >= 0.5, (1.0 - y) - jnp.where(u >= 0, s_neg, s_pos), s - y)


def _f_and_scale(alpha, alpha0, nu0, d):
    """``f = alpha - alpha0 + nu0 (sig(u) - y)`` from ``d = sig(u) - y``, and its scale
    ``1 + |alpha0| + |alpha| + nu0 |d|`` (the sum of the magnitudes of its terms)."""
    t = nu0 * d
    return alpha - alpha0 + t, 1.0 + jnp.abs(alpha0) + jnp.abs(alpha) + jnp.abs(t)


def residuals(alpha, nu, alpha0, nu0, y):
    """``(f, g)`` of [RVGA] eqs. (69)-(70).

    Args:
      alpha, nu: the candidate marginal mean and variance.
      alpha0, nu0: the prior's marginal mean and variance along ``x``.
      y: the label in {0, 1}.

    Returns:
      ``(f, g)``, scalars.
    """
    k, u, s, s1, s_pos, s_neg = _logistic_terms(alpha, nu)
    f, _ = _f_and_scale(alpha, alpha0, nu0, _sig_minus_y(u, y, s, s_pos, s_neg))
    return f, nu - nu0 / (1.0 + nu0 * k * s1)


def scaled_residual(alpha, nu, alpha0, nu0, y):
    """Dimensionless residual ``max(|f| / (1 + |alpha0| + |alpha| + nu0 |sig(u) - y|), |g| / nu)``
    (0 when ``nu0 = 0``): each equation relative to the size of its terms, so that a small value
    means an accurate root at any ``nu0`` (relative to ``nu0`` alone, a float32 solve at
    ``nu0 = 1e16`` would look converged with ``alpha`` off by a factor 2).

    Args:
      alpha, nu: the candidate marginal mean and variance.
      alpha0, nu0: the prior's marginal mean and variance along ``x``.
      y: the label in {0, 1}.

    Returns:
      The scalar residual.
    """
    k, u, s, s1, s_pos, s_neg = _logistic_terms(alpha, nu)
    f, scale = _f_and_scale(alpha, alpha0, nu0, _sig_minus_y(u, y, s, s_pos, s_neg))
    g = nu - nu0 / (1.0 + nu0 * k * s1)
    safe = jnp.where(nu > 0, nu, 1.0)
    res = jnp.maximum(jnp.abs(f) / scale, jnp.where(nu > 0, jnp.abs(g) / safe, jnp.inf))
    return jnp.where(nu0 > 0, res, 0.0)


def coarse_box(alpha0, nu0, y):
    """Coarse bounds (71)-(72) = (127)-(128): ``(alpha_min, alpha_max, nu_min, nu_max)``.

    Args:
      alpha0, nu0: the prior's marginal mean and variance along ``x``.
      y: the label in {0, 1}.

    Returns:
      ``(alpha_min, alpha_max, nu_min, nu_max)``.
    """
    return alpha0 + nu0 * (y - 1.0), alpha0 + nu0 * y, 4.0 * nu0 / (4.0 + nu0), nu0


def refine_box(box, alpha0, nu0, y, sweeps: int = _REFINE_SWEEPS):
    """Iterate the refinement (129)-(136), intersecting with the current box each sweep.

    Args:
      box: ``(alpha_min, alpha_max, nu_min, nu_max)``.
      alpha0, nu0: the prior's marginal mean and variance along ``x``.
      y: the label in {0, 1}.
      sweeps: the number of refinement sweeps.

    Returns:
      The refined box.
    """

    def sweep(_, b):
        a_lo, a_hi, n_lo, n_hi = b
        k_hi, k_lo = probit_k(n_lo), probit_k(n_hi)  # k is decreasing in nu
        a1 = a_lo * jnp.where(a_lo >= 0, k_lo, k_hi)
        a2 = a_hi * jnp.where(a_hi >= 0, k_hi, k_lo)
        new_a_lo = alpha0 - nu0 * _sig_minus_y(a2, y, sigmoid(a2), sigmoid(jnp.abs(a2)), sigmoid(-jnp.abs(a2)))
        new_a_hi = alpha0 - nu0 * _sig_minus_y(a1, y, sigmoid(a1), sigmoid(jnp.abs(a1)), sigmoid(-jnp.abs(a1)))
        s1, s2 = sig1(a1), sig1(a2)
        b1 = jnp.minimum(s1, s2)
        b2 = jnp.where(a1 * a2 > 0, jnp.maximum(s1, s2), 0.25)
        new_n_lo = nu0 / (1.0 + nu0 * k_hi * b2)
        new_n_hi = nu0 / (1.0 + nu0 * k_lo * b1)
        a_lo2, a_hi2 = jnp.maximum(a_lo, new_a_lo), jnp.minimum(a_hi, new_a_hi)
        n_lo2, n_hi2 = jnp.maximum(n_lo, new_n_lo), jnp.minimum(n_hi, new_n_hi)
        # Rounding can cross the bounds of a collapsed box; keep it ordered.
        a_mid, n_mid = 0.5 * (a_lo2 + a_hi2), 0.5 * (n_lo2 + n_hi2)
        a_lo2, a_hi2 = jnp.minimum(a_lo2, a_mid), jnp.maximum(a_hi2, a_mid)
        n_lo2, n_hi2 = jnp.minimum(n_lo2, n_mid), jnp.maximum(n_hi2, n_mid)
        return a_lo2, a_hi2, n_lo2, n_hi2

    return lax.fori_loop(0, sweeps, sweep, box)


def _safeguarded_newton(fun, lo, hi, max_iter, active=True):
    """Root of an increasing scalar function on ``[lo, hi]`` with ``fun(lo) <= 0 <= fun(hi)``.

    ``fun(z) -> (value, derivative, aux)``; returns ``(z, aux)``, ``aux`` that of the last
    evaluation, at ``z``. A Newton step is taken only when it stays inside the current bracket
    and is less than half the step before last (the rule of Numerical Recipes' ``rtsafe``);
    otherwise the bracket is bisected, so the bracket shrinks geometrically and always contains
    a root. The loop's first trip evaluates the midpoint, so that ``fun`` is traced once (half
    the program of an evaluation before the loop). With ``active`` False the loop makes that
    trip only (under ``vmap`` a loop runs only while some element is active).
    """
    z0 = 0.5 * (lo + hi)
    xtol = 4 * jnp.finfo(z0.dtype).eps  # run to machine precision: the bracket is cheap

    def cond(c):
        it, lo, hi, z, v = c[:5]
        return (it == 0) | (active & (it <= max_iter) & (v != 0) & (hi - lo > xtol * (1.0 + jnp.abs(z))))

    def body(c):
        it, lo, hi, z, v, dv, dx_old, _ = c
        first = it == 0  # z is the midpoint, not yet evaluated
        lo = jnp.where(~first & (v < 0), z, lo)
        hi = jnp.where(~first & (v > 0), z, hi)
        newton = z - v / jnp.where(dv > 0, dv, 1.0)
        ok = (dv > 0) & (newton > lo) & (newton < hi) & (2.0 * jnp.abs(newton - z) < jnp.abs(dx_old))
        z_new = jnp.where(first, z, jnp.where(ok, newton, 0.5 * (lo + hi)))
        v, dv, aux = fun(z_new)
        dx = jnp.where(first, dx_old, jnp.abs(z_new - z) * jnp.where(ok, 1.0, 2.0))
        return it + 1, lo, hi, z_new, v, dv, dx, aux

    v0, d0, aux0 = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fun, z0))
    out = lax.while_loop(cond, body, (0, lo, hi, z0, v0, d0, hi - lo, aux0))
    return out[3], out[7]


def _bracketed_solve(alpha0, nu0, y, active=True):
    """Fallback: nested safeguarded Newton on ``alpha(nu)`` then ``G(nu)``; always converges.

    It brackets on the coarse box (71)-(72), where the sign changes hold for every ``nu``
    (resp. every ``alpha``): ``f(alpha_min) = nu0 (sig - 1) <= 0 <= nu0 sig = f(alpha_max)`` and,
    since ``k sig' <= 1/4``, ``g(., nu_min) <= 0 <= g(., nu_max)``. The refined box holds only
    at the root, so it cannot bracket the inner problem.
    """
    a_lo, a_hi, n_lo, n_hi = coarse_box(alpha0, nu0, y)

    def alpha_of(nu):
        def fa(a):
            k = probit_k(nu)
            u = k * a
            val = a - alpha0 + nu0 * _sig_minus_y(u, y, sigmoid(u), sigmoid(jnp.abs(u)), sigmoid(-jnp.abs(u)))
            return val, 1.0 + nu0 * k * sig1(u), ()

        return _safeguarded_newton(fa, a_lo, a_hi, _BRACKET_ITERS, active)[0]

    def G(log_nu):
        nu = jnp.exp(log_nu)
        a = alpha_of(nu)
        _, g = residuals(a, nu, alpha0, nu0, y)
        # dG/dlog nu by the implicit function theorem (alpha solves f = 0 for each nu).
        (fa, fn), (ga, gn) = jax.jacfwd(lambda z: jnp.stack(residuals(z[0], z[1], alpha0, nu0, y)))(
            jnp.stack([a, nu]))
        dG = (gn - ga * fn / fa) * nu
        return g, jnp.maximum(dG, 0.0), a  # alpha(nu) rides along: no third inner solve

    log_nu, alpha = _safeguarded_newton(G, jnp.log(n_lo), jnp.log(n_hi), _BRACKET_ITERS, active)
    return alpha, jnp.exp(log_nu)


def residuals_and_jacobian(alpha, log_nu, alpha0, nu0, y):
    """``(f, g)`` of eqs. (69)-(70) and their analytic Jacobian in ``(alpha, log nu)``.

    With ``u = k alpha``, ``k' = dk/dlog nu = -k nu / (2 (nu + beta^2))`` and
    ``D = (1 + nu0 k sig'(u))^2`` (derivatives of [RVGA] eqs. 69-70)::

        df/dalpha  = 1 + nu0 k sig'(u)
        df/dlog nu = nu0 alpha k' sig'(u)
        dg/dalpha  = nu0^2 k^2 sig''(u) / D
        dg/dlog nu = nu + nu0^2 k' (sig'(u) + u sig''(u)) / D

    Three transcendental evaluations in all (exp, sqrt and one exp for the sigmoid),
    which is what a batch of solves under ``vmap`` pays for.

    Args:
      alpha, log_nu: the candidate marginal mean and log variance.
      alpha0, nu0: the prior's marginal mean and variance along ``x``.
      y: the label in {0, 1}.

    Returns:
      ``(F, J)``: the residuals (2,) and their Jacobian (2, 2).
    """
    nu = jnp.exp(log_nu)
    k, u, s, s1, s_pos, s_neg = _logistic_terms(alpha, nu)
    dk = -0.5 * k * nu / (nu + PROBIT_BETA**2)
    s2 = s1 * jnp.where(u >= 0, s_neg - s_pos, s_pos - s_neg)
    den = 1.0 + nu0 * k * s1
    f, _ = _f_and_scale(alpha, alpha0, nu0, _sig_minus_y(u, y, s, s_pos, s_neg))
    g = nu - nu0 / den
    J = jnp.array([[den, nu0 * alpha * dk * s1],
                   [nu0**2 * k**2 * s2 / den**2, nu + nu0**2 * dk * (s1 + u * s2) / den**2]])
    return jnp.stack([f, g]), J


def _explicit_start(alpha0, nu0, y):
    """The explicit update (eqs. 78-80) as ``(alpha, log nu)``: within ``O(nu0^2)`` of the root."""
    k0 = probit_k(nu0)
    u0 = k0 * alpha0
    c0 = k0 * sig1(u0)
    d0 = _sig_minus_y(u0, y, sigmoid(u0), sigmoid(jnp.abs(u0)), sigmoid(-jnp.abs(u0)))
    return jnp.stack([alpha0 - nu0 * d0 / (1.0 + nu0 * c0),
                      jnp.log(nu0 / (1.0 + nu0 * c0))])


def _projector(box):
    """Projection of ``(alpha, log nu)`` onto ``box = (alpha_min, alpha_max, nu_min, nu_max)``."""
    a_lo, a_hi, n_lo, n_hi = box
    log_lo, log_hi = jnp.log(n_lo), jnp.log(n_hi)
    return lambda z: jnp.stack([jnp.clip(z[0], a_lo, a_hi), jnp.clip(z[1], log_lo, log_hi)])


def _newton_step(F, J):
    """Newton step ``J^{-1} F`` of the 2 x 2 system (0 where ``J`` is singular)."""
    det = J[0, 0] * J[1, 1] - J[0, 1] * J[1, 0]
    safe_det = jnp.where(det != 0, det, 1.0)
    step = jnp.stack([J[1, 1] * F[0] - J[0, 1] * F[1], -J[1, 0] * F[0] + J[0, 0] * F[1]]) / safe_det
    return jnp.where(det != 0, step, 0.0)


def _scale(alpha0, nu0):
    """Fixed scales of ``(f, g)`` in the line-search merit: ``(1 + |alpha0| + nu0, nu0)``."""
    return jnp.stack([1.0 + jnp.abs(alpha0) + nu0, nu0])


def _done(F, z, alpha0, tol):
    """Both residuals within tolerance relative to their terms (as :func:`scaled_residual`):
    ``|f| <= tol (1 + |alpha0| + |alpha| + nu0 |sig(u) - y|)`` and ``|g| <= tol nu``."""
    a = z[0]
    scale_f = 1.0 + jnp.abs(alpha0) + jnp.abs(a) + jnp.abs(F[0] - a + alpha0)
    return (jnp.abs(F[0]) <= tol * scale_f) & (jnp.abs(F[1]) <= tol * jnp.exp(z[1]))


def _newton(alpha0, nu0, y, box, tol, max_iter, start):
    """Damped Newton in ``(alpha, log nu)`` from ``start``, each iterate projected onto the box.

    The step length ``t`` is carried from one iteration to the next: a step that does not
    lower the scaled residual norm is rejected and ``t`` halved; an accepted one doubles it
    (up to the full step 1). That stops the oscillations of plain Newton on surprising labels
    (a confident mean contradicted by ``y``) within a single loop, with no nested line search:
    under ``vmap`` every iteration is one elementwise pass over the batch, and the loop runs
    until the slowest element is done. It stops at the tolerance, after ``max_iter``
    iterations, or when ``t`` falls below ``2^-20`` (stalled). Returns
    ``(alpha, nu, accepted steps, converged)``.
    """
    scale = _scale(alpha0, nu0)
    project = _projector(box)

    def merit(F):
        return jnp.sum((F / scale) ** 2)

    def cond(c):
        it, _, t, z, F, _ = c
        return (it < max_iter) & (t >= 2.0**-20) & ~_done(F, z, alpha0, tol)

    def body(c):
        it, accepted, t, z, F, J = c
        z1 = project(z - t * _newton_step(F, J))
        F1, J1 = residuals_and_jacobian(z1[0], z1[1], alpha0, nu0, y)
        take = merit(F1) < merit(F)
        z, F, J = (jnp.where(take, new, old) for new, old in ((z1, z), (F1, F), (J1, J)))
        t = jnp.where(take, jnp.minimum(2.0 * t, 1.0), 0.5 * t)
        return it + 1, accepted + take.astype(jnp.int32), t, z, F, J

    z0 = project(start)
    init = (0, jnp.zeros((), jnp.int32), jnp.ones((), z0.dtype), z0,
            *residuals_and_jacobian(z0[0], z0[1], alpha0, nu0, y))
    _, accepted, _, z, F, _ = lax.while_loop(cond, body, init)
    return z[0], jnp.exp(z[1]), accepted, _done(F, z, alpha0, tol)


def _run_if(pred, fn, args, operands):
    """``fn(*args, *operands)`` where ``pred``, else ``operands`` (same structure as ``fn``'s output).

    Unbatched it is a ``lax.cond``. Under ``vmap`` (a batched ``pred``), ``lax.cond`` would turn
    into a select that runs ``fn`` for every element of every batch; here ``fn`` runs, batched and
    masked, only when some element of the batch has ``pred``, and not at all otherwise. (A
    one-trip ``while_loop`` has the same semantics, but XLA hoists the loop-invariant part of
    ``fn`` out of it, so that part would run every time.)

    Under ``jax.disable_jit()`` a concrete ``pred`` branches in Python, as ``lax.cond`` itself does
    there: ``custom_vmap`` traces its function even then, so the ``lax.cond`` inside it would be
    compiled on every eager call (10 s each for the logistic root's fallback).
    """
    if jax.config.jax_disable_jit and is_concrete(pred):
        return fn(*args, *operands) if bool(pred) else tuple(operands)

    @jax.custom_batching.custom_vmap
    def run(pred, args, operands):
        return lax.cond(pred, lambda: fn(*args, *operands), lambda: operands)

    @run.def_vmap
    def run_batched(axis_size, in_batched, pred, args, operands):
        pred_b, args_b, ops_b = in_batched

        def batched(tree, flags):
            return jax.tree_util.tree_map(
                lambda a, b: a if b else jnp.broadcast_to(a, (axis_size,) + jnp.shape(a)), tree, flags)

        mask, old = batched(pred, pred_b), batched(operands, ops_b)

        def compute():
            new = jax.vmap(lambda a, o: fn(*a, *o), axis_size=axis_size)(batched(args, args_b), old)
            return jax.tree_util.tree_map(
                lambda n, o: jnp.where(mask.reshape(mask.shape + (1,) * (n.ndim - 1)), n, o), new, old)

        out = lax.cond(jnp.any(mask), compute, lambda: old)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return run(pred, tuple(args), tuple(operands))


def _robust_solve(alpha0, nu0, y, alpha, nu, iters, max_iter):
    """Steps 2-3 of the module docstring, after ``iters`` Newton steps reached ``(alpha, nu)``.

    Returns ``(alpha, nu, iterations)``: ``iters`` plus the Newton steps here, plus one if the
    bracketed fallback ran.
    """
    tol = _tolerance(alpha0.dtype)
    box = refine_box(coarse_box(alpha0, nu0, y), alpha0, nu0, y)
    centre = jnp.stack([0.5 * (box[0] + box[1]), jnp.log(0.5 * (box[2] + box[3]))])
    alpha_c, nu_c, iters_c, ok = _newton(alpha0, nu0, y, box, tol, max_iter, centre)
    alpha, nu = jnp.where(ok, alpha_c, alpha), jnp.where(ok, nu_c, nu)
    # Not lax.cond: under vmap it would run the fallback for every element. Masked loops
    # run no iteration unless some element of the batch needs the fallback.
    used_fallback = ~ok
    alpha_b, nu_b = _bracketed_solve(alpha0, nu0, y, active=used_fallback)
    alpha, nu = jnp.where(ok, alpha, alpha_b), jnp.where(ok, nu, nu_b)
    return alpha, nu, (iters + iters_c + used_fallback).astype(jnp.int32)


def _check_inputs(alpha0, nu0, y):
    """Real scalars ``alpha0, nu0, y`` in one floating dtype (that of ``alpha0, nu0``);
    ``ValueError`` naming the argument otherwise."""
    arrays = [check_float_array(n, v) for n, v in (("alpha0", alpha0), ("nu0", nu0), ("y", y))]
    try:
        alpha0, nu0, y = jnp.broadcast_arrays(*arrays)
    except ValueError as err:
        raise ValueError(f"alpha0, nu0 and y must broadcast to one shape, got shapes "
                         f"{[a.shape for a in arrays]} ({err})") from None
    if alpha0.ndim:
        raise ValueError(f"alpha0, nu0 and y must be scalars (vmap the solver for a batch), got "
                         f"shapes {[a.shape for a in arrays]}")
    dtype = jnp.result_type(alpha0.dtype, nu0.dtype, float)
    return alpha0.astype(dtype), nu0.astype(dtype), y.astype(dtype), dtype


def solve_logistic(alpha0, nu0, y, max_iter: int | None = None):
    """Solve the implicit logistic R-VGA equations (69)-(70) for ``(alpha, nu)``.

    Args:
      alpha0: ``x^T mu_{t-1}``.
      nu0: ``x^T P_{t-1} x`` (>= 0).
      y: the label in {0, 1}.
      max_iter: cap on the iterations of each Newton pass before the bracketed fallback (default 30).

    Returns:
      ``(alpha, nu, info)`` with ``alpha = x^T mu_t``, ``nu = x^T P_t x`` and a
      :class:`~jaxrvga.core.SolverInfo` holding the dimensionless residual
      (:func:`scaled_residual`), the number of Newton iterations (plus one if the
      fallback ran) and whether the tolerance ``max(1e-12, 64 eps)`` was met (never for
      non-finite inputs or results).

    ``(alpha, nu)`` are differentiable in ``(alpha0, nu0, y)``, forward and reverse mode, by the
    implicit function theorem at the root (the solver's iterations are not differentiated).
    """
    alpha0, nu0, y, dtype = _check_inputs(alpha0, nu0, y)
    max_iter = _NEWTON_ITERS if max_iter is None else int(max_iter)
    alpha, nu, iters = _logistic_root_jit(alpha0, nu0, y, max_iter)
    res = scaled_residual(alpha, nu, alpha0, jnp.where(nu0 > 0, nu0, 0.0), y)
    info = SolverInfo((res <= _tolerance(dtype)) & _finite(alpha0, nu0, y, alpha, nu), res, iters)
    return alpha, nu, info


def _finite(*xs):
    """All finite: a solve from (or to) a NaN or inf is never reported converged."""
    return jnp.all(jnp.stack([jnp.isfinite(x) for x in xs]))


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _logistic_root(alpha0, nu0, y, max_iter):
    """``(alpha, nu, iterations)`` of :func:`solve_logistic` (steps 1-3 of the module docstring)."""
    tol = _tolerance(alpha0.dtype)
    degenerate = ~(nu0 > 0)  # x in the null space of P: nothing to update
    nu0_safe = jnp.where(degenerate, 1.0, nu0)
    start = _explicit_start(alpha0, nu0_safe, y)
    alpha, nu, iters, ok = _newton(alpha0, nu0_safe, y, coarse_box(alpha0, nu0_safe, y), tol, max_iter, start)
    alpha, nu, iters = _run_if(~ok, lambda a0, n0, yv, a, n, i: _robust_solve(a0, n0, yv, a, n, i, max_iter),
                               (alpha0, nu0_safe, y), (alpha, nu, iters))
    alpha = jnp.where(degenerate, alpha0, alpha)
    nu = jnp.where(degenerate, jnp.zeros_like(nu0), nu)
    return alpha, nu, iters.astype(jnp.int32)


@_logistic_root.defjvp
def _logistic_root_jvp(max_iter, primals, tangents):
    """Implicit function theorem at the root ``F(z; alpha0, nu0, y) = 0``, ``z = (alpha, log nu)``:
    ``dz = -(dF/dz)^{-1} (dF/d(alpha0, nu0, y) . tangents)``. Where ``nu0 <= 0`` the update is
    the identity ``(alpha0, 0)``, and so is its tangent."""
    alpha0, nu0, y = primals
    alpha, nu, iters = _logistic_root(alpha0, nu0, y, max_iter)
    degenerate = ~(nu0 > 0)
    nu_safe = jnp.where(degenerate, 1.0, nu)
    _, J = residuals_and_jacobian(alpha, jnp.log(nu_safe), alpha0, nu0, y)
    _, dF = jax.jvp(lambda a0, n0, yv: jnp.stack(residuals(alpha, nu_safe, a0, n0, yv)), primals, tangents)
    dz = -_newton_step(dF, J)
    dalpha = jnp.where(degenerate, tangents[0], dz[0])
    dnu = jnp.where(degenerate, 0.0, nu * dz[1])
    return (alpha, nu, iters), (dalpha, dnu, np.zeros(np.shape(iters), jax.dtypes.float0))


#: :func:`_logistic_root` compiled once per ``max_iter``, shape and dtype: called outside ``jit``
#: (a filter's update run step by step), its loops would otherwise be traced and compiled afresh
#: at every call. Inside ``jit``, ``vmap`` and ``grad`` it is the same computation.
_logistic_root_jit = jax.jit(_logistic_root, static_argnums=3)


def solve_glm(alpha0, nu0, y, expected_log_lik, max_iter: int = 50):
    """Implicit R-VGA along ``x`` for any log-concave GLM: the 1-D marginal ``(alpha, nu)`` of ``q_t``.

    The likelihood depends on ``theta`` only through ``eta = x^T theta``, so the R-VGA
    update ([RVGA] eq. 2) is fixed by the marginal ``eta ~ N(alpha, nu)`` that minimises::

        J(alpha, L) = -E_{N(alpha, L^2)}[log p(y | eta)] + KL(N(alpha, L^2) || N(alpha0, nu0))

    whose stationarity conditions are the implicit equations ``alpha = alpha0 + nu0 E[l']``
    and ``1/nu = 1/nu0 - E[l'']`` ([RVGA] eqs. 28-29 projected on x). ``J`` is strictly
    convex in ``(alpha, L)`` for log-concave likelihoods, so damped Newton converges from the
    prior's marginal ``(alpha0, sqrt(nu0))`` (``L`` shrunk where the curvature overflows): Armijo
    backtracking on ``J`` (``J = +inf`` for ``L <= 0``), and a full step that beats its
    quadratic model is doubled while ``J`` falls (where ``exp(eta)`` dominates, plain Newton
    advances about one unit of ``eta`` per iteration).

    Returns ``(alpha, nu, info)`` like :func:`solve_logistic`; ``info.residual`` is the
    dimensionless residual of the two implicit equations. ``(alpha, nu)`` are differentiable in
    ``(alpha0, nu0, y)`` and in the values ``expected_log_lik`` closes over, by the implicit
    function theorem at the minimiser.

    Args:
      alpha0, nu0: the prior's marginal mean and variance along ``x``.
      y: the observation.
      expected_log_lik: ``(m, v, y) -> E_{eta ~ N(m, v)}[log p(y | eta)]``.
      max_iter: the most Newton iterations.

    Returns:
      ``(alpha, nu, info)``: the marginal of ``q_t`` and a :class:`~jaxrvga.core.SolverInfo`.
    """
    alpha0, nu0, y, dtype = _check_inputs(alpha0, nu0, y)
    degenerate = ~(nu0 > 0)
    nu0s = jnp.where(degenerate, 1.0, nu0)
    # Closed-over tracers (e.g. a dispersion being differentiated) become explicit arguments.
    ell, consts = jax.closure_convert(expected_log_lik, alpha0, nu0s, y)
    z, it = _glm_minimiser(ell, max_iter, alpha0, nu0s, y, tuple(consts))
    res = _glm_residual(jax.grad(_glm_objective(ell, alpha0, nu0s, y, consts))(z), z, alpha0, nu0s)
    alpha = jnp.where(degenerate, alpha0, z[0])
    nu = jnp.where(degenerate, jnp.zeros_like(nu0), z[1] ** 2)
    res = jnp.where(degenerate, 0.0, res)
    return alpha, nu, SolverInfo((res <= _tolerance(dtype)) & _finite(alpha0, nu0, y, alpha, nu), res, it)


def _glm_objective(ell, alpha0, nu0, y, consts):
    """``J(z)``, ``z = (alpha, L)``, of :func:`solve_glm` (``+inf`` where ``L <= 0``)."""

    def J(z):
        a, L = z[0], z[1]
        kl = 0.5 * ((a - alpha0) ** 2 + L**2) / nu0 - jnp.log(L)
        return jnp.where(L > 0, -ell(a, L**2, y, *consts) + kl, jnp.inf)

    return J


def _glm_residual(g, z, alpha0, nu0):
    """Dimensionless residual of the implicit equations of :func:`solve_glm` at ``z = (alpha, L)``,
    from the gradient ``g`` of ``J`` there."""
    L = z[1]
    # nu0 dJ/dalpha = alpha - alpha0 - nu0 E[l'];  L nu0 dJ/dL = nu (1 + nu0 c) - nu0.
    r_a = jnp.abs(nu0 * g[0]) / (1.0 + jnp.abs(alpha0) + nu0)
    # |nu - nu0 / (1 + nu0 c)| / nu0 with 1 + nu0 c = nu0 (dJ/dL + 1/L) / L.
    r_v = (L**2 / nu0) * (jnp.abs(g[1]) / jnp.abs(g[1] + 1.0 / L))  # in this order: no overflow
    return jnp.maximum(r_a, r_v)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _glm_minimiser(ell, max_iter, alpha0, nu0, y, consts):
    """``(z, iterations)``: the damped Newton of :func:`solve_glm` on ``J``, ``z = (alpha, L)``."""
    dtype = alpha0.dtype
    tol = _tolerance(dtype)
    J = _glm_objective(ell, alpha0, nu0, y, consts)
    grad, hess = jax.grad(J), jax.hessian(J)

    def cond(c):
        it, _, _, _, res = c
        return (it < max_iter) & ~(res <= tol)

    def body(c):
        it, z, f0, g, _ = c  # f0 = J(z), g = grad J(z), carried from the step that reached z
        H = hess(z)
        # Scaled by the largest entry, so that det does not overflow where exp(eta) is huge.
        H_max = jnp.max(jnp.abs(H))
        Hs = H / H_max
        det = Hs[0, 0] * Hs[1, 1] - Hs[0, 1] * Hs[1, 0]
        newton = -_newton_step(g, Hs) / H_max
        newton_ok = (det > 0) & (H[0, 0] > 0) & jnp.all(jnp.isfinite(newton))
        direction = jnp.where(newton_ok, newton, -g / jnp.linalg.norm(g))
        slope = g @ direction

        def shrink(ct):
            t, _ = ct
            return 0.5 * t, J(z + 0.5 * t * direction)

        # Armijo, with slack for rounding: near the optimum J changes by less than its ulp. Where
        # the Newton decrement -slope = d^T H d is at rounding level, comparing values of J (a sum
        # of terms that cancel) says nothing: the full Newton step is taken.
        eps = jnp.finfo(dtype).eps
        slack = 16 * eps * jnp.abs(f0)
        rounding_level = newton_ok & (-slope <= 64 * eps * (1.0 + jnp.abs(f0)))

        def too_long(ct):
            t, f = ct
            return ~rounding_level & ~(f <= f0 + 1e-4 * t * slope + slack) & (t > 1e-12)

        t, f = lax.while_loop(too_long, shrink, (jnp.asarray(1.0, dtype), J(z + direction)))
        # A full step that beat its quadratic model (f < f0 + slope / 2: the curvature falls along
        # the direction, as where exp(eta) dominates) stops short of the line's minimum: double
        # t while J keeps falling. Newton alone would advance about one unit of eta per iteration.
        expand = ~rounding_level & (t == 1.0) & (f < f0 + 0.5 * slope - slack)

        def keeps_falling(ct):
            t, _, falling = ct
            return expand & falling & (t < 2.0**20)

        def double(ct):
            t, f, _ = ct
            f2 = J(z + 2.0 * t * direction)
            return jnp.where(f2 < f, 2.0 * t, t), jnp.minimum(f, f2), f2 < f

        # Both loops leave f = J(z + t direction), the objective at the new iterate.
        t, f, _ = lax.while_loop(keeps_falling, double, (t, f, jnp.asarray(True)))
        z = z + t * direction
        g = grad(z)
        return it + 1, z, f, g, _glm_residual(g, z, alpha0, nu0)

    # Start from the prior's marginal; where J's curvature overflows or comes near it there (a
    # broad prior under exp(eta + nu / 2)), shrink L: J is convex for any L > 0.
    def overflows(L):
        z = jnp.stack([alpha0, L])
        big = jnp.sqrt(jnp.finfo(dtype).max)
        return ~(jnp.isfinite(J(z)) & jnp.all(jnp.abs(hess(z)) <= big)) & (L > 1e-8 * jnp.sqrt(nu0))

    z0 = jnp.stack([alpha0, lax.while_loop(overflows, lambda L: 0.25 * L, jnp.sqrt(nu0))])
    g0 = grad(z0)
    it, z, *_ = lax.while_loop(cond, body, (jnp.int32(0), z0, J(z0), g0, _glm_residual(g0, z0, alpha0, nu0)))
    return z, it


@_glm_minimiser.defjvp
def _glm_minimiser_jvp(ell, max_iter, primals, tangents):
    """Implicit function theorem at ``grad_z J(z; alpha0, nu0, y, consts) = 0``:
    ``dz = -H^{-1} (d grad_z J / d(alpha0, nu0, y, consts) . tangents)``."""
    z, it = _glm_minimiser(ell, max_iter, *primals)
    H = jax.hessian(_glm_objective(ell, *primals))(z)
    _, dg = jax.jvp(lambda *p: jax.grad(_glm_objective(ell, *p))(z), primals, tangents)
    return (z, it), (-_newton_step(dg, H), np.zeros(np.shape(it), jax.dtypes.float0))


__all__ = ["residuals", "scaled_residual", "coarse_box", "refine_box", "residuals_and_jacobian",
           "solve_logistic", "solve_glm"]
