"""Full-covariance R-VGA ([RVGA] Alg. 1, Thm 1): O(d^2) per observation.

Each update is the Gaussian ``q_t = N(mu_t, P_t)`` minimising
``KL(q || c p(y_t | theta) q_{t-1})``; its stationarity conditions ([RVGA] eqs. 28-29) are::

    mu_t     = mu_{t-1} + P_{t-1} E_{q_t}[grad log p(y_t | theta)]
    P_t^{-1} = P_{t-1}^{-1} - E_{q_t}[hess log p(y_t | theta)]

:func:`rvga` dispatches on the model:

* linear-Gaussian: the Kalman filter, which solves the implicit scheme exactly ([RVGA] Thm 2);
* logistic, ``scheme="implicit"``: the exact implicit update through the 2-D root of
  eqs. (69)-(70) (:mod:`jaxrvga.implicit`); ``scheme="explicit"``: eqs. (78)-(80);
* other GLMs: expectations on the 1-D projection ``eta = x^T theta`` (closed form or
  Gauss-Hermite, :meth:`~jaxrvga.models.Model.glm_moments`);
* nonlinear models ``eta = h(theta, x)``: Monte-Carlo expectations with antithetic samples
  drawn from an explicit key, curvature by generalised Gauss-Newton (or the Hessian).

For GLMs the implicit update is fixed by the marginal of ``x^T theta`` under ``q_t``, the
minimiser of a strictly convex 2-D problem (:func:`jaxrvga.implicit.solve_glm`). For
nonlinear models it is solved by the iteration::

    P_{i+1}^{-1} = P_{t-1}^{-1} - E_{q_i}[hess]
    mu_{i+1}     = mu_{t-1} + P_{i+1} ( E_{q_i}[grad] - E_{q_i}[hess] (mu_i - mu_{t-1}) )

started at ``q_0 = q_{t-1}``. Its fixed point is the implicit update; one iteration is the
explicit scheme (eqs. 30-31); every iterate restarts from ``q_{t-1}``, so the observation is
counted once, and on a linear-Gaussian model every iterate is the Kalman update exactly.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from . import implicit, special
from .core import Filter, GaussianState, solver_info, SolverInfo
from .models import Model
from .predictive import predictive  # noqa: F401  (re-exported: jr.predictive)
from .validation import check_choice, check_cov, check_positive, check_vector, is_concrete

SCHEMES = ("implicit", "explicit")
CURVATURES = ("ggn", "hessian")


# --------------------------------------------------------------------------- shared pieces

def init_gaussian(mean, cov, key=None) -> GaussianState:
    """Initial full-covariance state ``N(mean, cov)`` (validated: ``cov`` square and symmetric)."""
    mean = check_vector("mean", mean)
    cov = check_cov("cov", cov, mean.shape[0]).astype(mean.dtype)
    return GaussianState(mean, cov, jnp.zeros((), jnp.int32), solver_info(mean.dtype), key)


def inflate(cov, process_noise):
    """Fading memory ([LRVGA] Remark 1): ``P_{t|t-1} = (1 + eta) P_{t-1}``, i.e. ``Q_t = eta P_{t-1}``."""
    return cov if process_noise is None else cov * (1.0 + process_noise)


def check_process_noise(process_noise):
    """``process_noise`` must be ``None`` or >= 0 (checked where concrete)."""
    if process_noise is not None and is_concrete(process_noise) and not float(process_noise) >= 0:
        raise ValueError(f"process_noise must be >= 0, got {process_noise!r}")


def check_glm_input(state, x, y, model: Model):
    """Trace-time checks of one GLM observation: ``x`` of shape (d,), ``y`` a valid label.

    Returns ``(x, y)`` cast to the state's dtype, so float64 data never promote a float32 state.
    """
    d = state.mean.shape[0]
    if jnp.shape(x) != (d,):
        raise ValueError(f"x must have shape ({d},) to match the state, got {jnp.shape(x)}")
    if jnp.ndim(y) != 0:
        raise ValueError(f"y must be a scalar observation for the {model.kind} model, got shape {jnp.shape(y)}")
    model.family.check_y("y", y)
    dtype = state.mean.dtype
    return jnp.asarray(x, dtype), jnp.asarray(y, dtype)


def make_check(model: Model, x_ndim: int = 1):
    """Data-set check run by :func:`jaxrvga.run`: xs of shape (T, d), labels valid."""

    def check(state, xs, ys):
        d = state.mean.shape[0]
        if model.kind != "nonlinear":
            shape = jnp.shape(xs)
            if len(shape) != 1 + x_ndim or shape[-1] != d:
                raise ValueError(f"xs must have shape (T, {d}) to match the state, got {shape}")
        model.family.check_y("ys", ys)

    return check


def rank_one_update(state: GaussianState, cov, v, nu0, r, s, info: SolverInfo) -> GaussianState:
    """``mu + r v`` and ``P - s v v^T`` with ``v = P x``, ``nu0 = x^T P x``: every GLM update.

    ``v v^T`` is exactly symmetric in floating point, so a symmetric ``P`` stays symmetric.
    The new covariance is positive definite iff ``s nu0 < 1`` (its value along ``x`` is
    ``nu0 (1 - s nu0)``; ``s nu0`` may round to 1 for a very informative observation). An update that would break this, or that is not finite (a
    non-log-concave likelihood, overflow), is **skipped and flagged**: the belief is kept,
    the step counter advances and ``info.converged`` is False.
    """
    ok = jnp.isfinite(r) & jnp.isfinite(s) & jnp.isfinite(nu0) & (s * nu0 <= 1.0)  # == 1 only by rounding
    # The masking goes through lax.cond, whose results are materialised: otherwise XLA may fuse
    # the scalar tests (and the read of y behind r) into the d x d loop below and redo them per
    # entry, which ran 10x slower. (v = P x overflows with nu0, and 0 * inf is NaN: mask v too.)
    def skip(r, s, v):
        return jnp.zeros_like(r), jnp.zeros_like(s), jnp.zeros_like(v)

    r, s, v = lax.cond(ok, lambda r, s, v: (r, s, v), skip, r, s, v)
    mean = state.mean + r * v
    cov = cov - s * jnp.outer(v, v)
    info = info._replace(converged=info.converged & ok)
    return state._replace(mean=mean, cov=cov, step=state.step + 1, info=info)


def marginal_update(state: GaussianState, cov, v, alpha0, nu0, alpha, nu, info) -> GaussianState:
    """The GLM update fixed by the new marginal ``x^T theta ~ N(alpha, nu)`` of ``q_t``.

    ``mu_t = mu + (alpha - alpha0)/nu0 P x`` and ``P_t = P - (nu0 - nu)/nu0^2 (P x)(P x)^T``:
    the rank-one change of ``q_{t-1}`` along ``x`` with the required marginal.
    """
    safe = jnp.where(nu0 > 0, nu0, 1.0)
    r = jnp.where(nu0 > 0, (alpha - alpha0) / safe, 0.0)
    s = jnp.where(nu0 > 0, (nu0 - nu) / safe**2, 0.0)
    return rank_one_update(state, cov, v, nu0, r, s, info)


# --------------------------------------------------------------------------- filters

def kalman(noise_var=1.0, process_noise=None) -> Filter:
    """The Kalman filter for a static parameter: R-VGA on ``y = H theta + eps`` ([RVGA] Thm 2, eqs. 40-42).

    ``x`` is a row ``(d,)`` with scalar ``y`` or a matrix ``H`` of shape (m, d) with ``y`` of
    shape (m,); ``eps ~ N(0, noise_var I)``. The covariance update ``P - V S^{-1} V^T``
    (``V = P H^T``, ``S = noise_var I + H V``) is solved by Cholesky and symmetrised.
    """
    check_positive("noise_var", noise_var)
    check_process_noise(process_noise)

    def update(state, x, y):
        d = state.mean.shape[0]
        if jnp.shape(x)[-1:] != (d,) or jnp.ndim(x) > 2:
            raise ValueError(f"x must have shape ({d},) or (m, {d}), got {jnp.shape(x)}")
        H = jnp.atleast_2d(jnp.asarray(x, state.mean.dtype))
        y = jnp.reshape(jnp.asarray(y, state.mean.dtype), (-1,))
        if y.shape[0] != H.shape[0]:
            raise ValueError(f"y must have {H.shape[0]} entries to match x, got shape {jnp.shape(y)}")
        cov = inflate(state.cov, process_noise)
        V = cov @ H.T
        S = noise_var * jnp.eye(H.shape[0], dtype=cov.dtype) + H @ V
        chol = jnp.linalg.cholesky(S)
        Kt = jax.scipy.linalg.cho_solve((chol, True), V.T)  # K^T = S^{-1} V^T, (m, d)
        mean = state.mean + Kt.T @ (y - H @ state.mean)
        new_cov = cov - V @ Kt
        new_cov = 0.5 * (new_cov + new_cov.T)
        # Skip and flag an update that is not finite (overflow of S = noise_var I + H P H^T), as
        # rank_one_update does: keep the (predicted) belief, advance the step, converged = False.
        ok = jnp.all(jnp.isfinite(S)) & jnp.all(jnp.isfinite(mean)) & jnp.all(jnp.isfinite(new_cov))
        mean, new_cov = jnp.where(ok, mean, state.mean), jnp.where(ok, new_cov, cov)
        return state._replace(mean=mean, cov=new_cov, step=state.step + 1,
                              info=solver_info(cov.dtype, converged=ok))

    def check(state, xs, ys):
        d = state.mean.shape[0]
        if jnp.shape(xs)[-1] != d:
            raise ValueError(f"xs must have last dimension {d} to match the state, got {jnp.shape(xs)}")

    return Filter(init_gaussian, update, check)


def _logistic_implicit(process_noise, model):
    def update(state, x, y):
        x, y = check_glm_input(state, x, y, model)
        cov = inflate(state.cov, process_noise)
        v = cov @ x
        alpha0, nu0 = x @ state.mean, x @ v
        alpha, nu, info = implicit.solve_logistic(alpha0, nu0, y)
        k = special.probit_k(nu)
        c = k * special.sig1(k * alpha)  # eq. (77): 1 / (1/(k sig'(k alpha)) + nu0) = c / (1 + c nu0)
        r = y - special.sigmoid(k * alpha)  # eq. (76)
        return rank_one_update(state, cov, v, nu0, r, c / (1.0 + c * nu0), info)

    return update


def _glm_explicit(model, process_noise):
    """Explicit R-VGA (eqs. 30-31): expectations under ``q_{t-1}``; for logistic, eqs. (78)-(80)."""

    def update(state, x, y):
        x, y = check_glm_input(state, x, y, model)
        cov = inflate(state.cov, process_noise)
        v = cov @ x
        nu0 = x @ v
        g, h = model.glm_moments(x @ state.mean, nu0, y)
        den = 1.0 - h * nu0  # P_t x = P x / (1 + c nu0) with c = -E[l'']
        return rank_one_update(state, cov, v, nu0, g / den, -h / den, solver_info(cov.dtype))

    return update


def _glm_implicit(model, max_iter, process_noise):
    """Implicit R-VGA for a log-concave GLM by the convex 1-D solve :func:`jaxrvga.implicit.solve_glm`."""

    def update(state, x, y):
        x, y = check_glm_input(state, x, y, model)
        cov = inflate(state.cov, process_noise)
        v = cov @ x
        alpha0, nu0 = x @ state.mean, x @ v
        alpha, nu, info = implicit.solve_glm(alpha0, nu0, y, model.expected_log_lik, max_iter)
        return marginal_update(state, cov, v, alpha0, nu0, alpha, nu, info)

    return update


def _antithetic_normals(key, num_samples, dim, dtype):
    half = jax.random.normal(key, ((num_samples + 1) // 2, dim), dtype)
    return jnp.concatenate([half, -half])[:num_samples]


def _nonlinear_mc(model, num_iters, num_samples, curvature, process_noise):
    """Generic R-VGA by Monte Carlo (Thm 1) for ``eta = h(theta, x)``."""

    def moments(theta_samples, x, y):
        grads = jax.vmap(jax.grad(model.log_lik), in_axes=(0, None, None))(theta_samples, x, y)
        gbar = jnp.mean(grads, axis=0)
        if curvature == "hessian":
            hess = jax.vmap(jax.hessian(model.log_lik), in_axes=(0, None, None))(theta_samples, x, y)
            return gbar, jnp.mean(hess, axis=0)
        # GGN (LRVGA eq. 41): -E[hess] ~= E[J^T F J] = G^T G with G rows sqrt(F/K) J.
        def rows(theta):
            jac = jnp.atleast_2d(jax.jacfwd(model.predict)(theta, x))
            fisher = jnp.atleast_1d(model.family.fisher(jnp.atleast_1d(model.predict(theta, x))))
            return jnp.sqrt(fisher)[:, None] * jac

        G = jax.vmap(rows)(theta_samples)
        G = G.reshape(-1, G.shape[-1]) / jnp.sqrt(theta_samples.shape[0])
        return gbar, G

    def update(state, x, y):
        if state.key is None:
            raise ValueError("key: the Monte-Carlo R-VGA needs a PRNG key; call init(mean, cov, key=...)")
        model.family.check_y("y", y)
        key, sub = jax.random.split(state.key)
        d = state.mean.shape[0]
        z = _antithetic_normals(sub, num_samples, d, state.mean.dtype)
        mu0, P0 = state.mean, inflate(state.cov, process_noise)
        eye = jnp.eye(d, dtype=P0.dtype)
        if curvature == "ggn" and num_samples * jax.eval_shape(model.predict, mu0, x).size >= d:
            prec0 = jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(P0), True), eye)

        def body(_, carry):
            mu, P, _ = carry
            L = jnp.linalg.cholesky(P)
            theta = mu + z @ L.T
            gbar, curv = moments(theta, x, y)
            if curvature == "hessian":
                P_new = jnp.linalg.solve(eye - P0 @ curv, P0)
                step = gbar - curv @ (mu - mu0)
            else:
                G = curv
                if G.shape[0] < d:  # Woodbury in the (K m)-dimensional sample space
                    PG = P0 @ G.T
                    S = jnp.eye(G.shape[0], dtype=P0.dtype) + G @ PG
                    P_new = P0 - PG @ jax.scipy.linalg.solve(S, PG.T, assume_a="pos")
                else:  # information form: (P0^{-1} + G^T G)^{-1}
                    P_new = jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(prec0 + G.T @ G), True), eye)
                step = gbar + G.T @ (G @ (mu - mu0))
            P_new = 0.5 * (P_new + P_new.T)
            mu_new = mu0 + P_new @ step
            change = jnp.linalg.norm(mu_new - mu) / (1.0 + jnp.linalg.norm(mu0))
            return mu_new, P_new, change

        mu, P, change = lax.fori_loop(0, num_iters, body, (mu0, P0, jnp.zeros((), mu0.dtype)))
        info = SolverInfo(jnp.isfinite(change), change, jnp.int32(num_iters))
        return GaussianState(mu, P, state.step + 1, info, key)

    return update


def rvga(model: Model, scheme: str = "implicit", *, num_iters: int | None = None,
         num_samples: int = 100, curvature: str = "ggn", process_noise=None) -> Filter:
    """The R-VGA filter for ``model`` ([RVGA] Alg. 1). State: :class:`~jaxrvga.core.GaussianState`.

    Args:
      model: an observation model from :mod:`jaxrvga.models`.
      scheme: ``"implicit"`` (expectations under the new belief, eqs. 28-29) or
        ``"explicit"`` (under the previous one, eqs. 30-31).
      num_iters: for GLMs other than logistic, the Newton iteration cap of the convex 1-D
        implicit solve (default 50); for nonlinear models, the number of passes of the
        implicit iteration (default 3; 1 is the explicit scheme). Ignored by the Kalman
        filter and the exact logistic solve.
      num_samples: Monte-Carlo samples per iteration for nonlinear models (antithetic pairs).
      curvature: nonlinear models only: ``"ggn"`` (Fisher/Gauss-Newton, PSD, eq. 41 of [LRVGA])
        or ``"hessian"`` (autodiff Hessian, O(d^3) per iteration).
      process_noise: ``eta`` of a fading-memory filter, ``P_{t|t-1} = (1 + eta) P_{t-1}``.

    ``init(mean, cov, key=None)``: ``key`` is required for nonlinear models only.
    """
    check_choice("scheme", scheme, SCHEMES)
    check_choice("curvature", curvature, CURVATURES)
    if not isinstance(model, Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    check_process_noise(process_noise)
    if num_iters is not None and int(num_iters) < 1:
        raise ValueError(f"num_iters must be >= 1, got {num_iters}")
    if int(num_samples) < 2:
        raise ValueError(f"num_samples must be >= 2, got {num_samples}")

    if model.kind == "linear_gaussian":
        return kalman(model.noise_var, process_noise)
    if model.is_glm and scheme == "explicit":
        return Filter(init_gaussian, _glm_explicit(model, process_noise), make_check(model))
    if model.kind == "logistic":
        return Filter(init_gaussian, _logistic_implicit(process_noise, model), make_check(model))
    if model.is_glm:
        iters = 50 if num_iters is None else int(num_iters)
        return Filter(init_gaussian, _glm_implicit(model, iters, process_noise), make_check(model))
    iters = 1 if scheme == "explicit" else (3 if num_iters is None else int(num_iters))
    return Filter(init_gaussian, _nonlinear_mc(model, iters, int(num_samples), curvature, process_noise),
                  make_check(model))
