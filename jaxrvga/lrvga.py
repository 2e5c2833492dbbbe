"""Limited-memory R-VGA (L-RVGA, [LRVGA] §3-4): a Gaussian belief ``N(mean, (W W^T + diag(psi))^{-1})``.

Each step is the two-stage scheme of [LRVGA] eqs. (7)-(8): an R-VGA update of the
precision, ``Lam_{t-1} + X_t X_t^T``, then its factor-analysis projection back onto
``W_t W_t^T + Psi_t`` by Algorithm 1 (:func:`jaxrvga.factor_analysis.recursive_em_step`),
and a mean update whose ``P x`` products use Woodbury (:mod:`jaxrvga.lowrank`). Time is
O(n_in d p^2 + p^3) per step (plus O(K d p) for sampled schemes) and memory O(d p); no
d x d array is ever formed.

Schemes, by ``model.kind`` ([reproduction] D1-D4):

* ``"exact"`` (linear-Gaussian, D1, eqs. 23-27): ``X_t = x / sigma``, then
  ``mu_t = mu_{t-1} + P_t x (y - x^T mu_{t-1}) / sigma^2`` with the new factors.
* ``"implicit"`` (logistic, D2, eqs. 50-54): the exact rank-one implicit R-VGA stage solved
  by the 2-D root of [RVGA] eqs. 69-77 (:func:`jaxrvga.implicit.solve_logistic`);
  ``mu_t = mu_{t-1} + (y - sig(k alpha)) P_{t-1} x`` and ``X_t = x sqrt(k sig'(k alpha))``.
* ``"explicit"`` / ``"extragrad"`` (GLMs, D3): Gaussian moments at ``(mu_{t-1}, P_{t-1})``
  give ``(What, psihat)`` and ``muhat = mu_{t-1} + Phat E[grad]``; ``"extragrad"`` re-evaluates
  the moments at ``(muhat, Phat)`` and sets ``mu_t = mu_{t-1} + Phat E_hat[grad]``
  ([LRVGA] eqs. 143-145, the extra covariance update skipped unless ``update_cov_twice``).
* ``"sampled"`` (any model, D4, eqs. 41-47 and 143-145): ``K`` ensemble samples from the
  corrected Proposition 1, GGN curvature ``X_t = K^{-1/2} [J_i^T Cov_i^{1/2}]`` with
  Jacobians by autodiff, and the same extragradient.
* ``"ekf"`` (any model, D5; [RVGA] eqs. 54-55 with the FA stage): everything linearised at
  ``mu_{t-1}``: ``X_t = J^T Cov^{1/2}`` and ``mu_t = mu_{t-1} + P_t J^T d log p / d eta``
  (for logistic regression ``X_t = x sqrt(sig'(x^T mu))``, the authors' ``LargeScaleEKFLogReg``,
  here with Woodbury instead of their dense ``P_t x``).

Process noise ([LRVGA] Remark 1): ``P_{t|t-1} = P_{t-1} + Q_t`` with ``Q_t = eta P_{t-1}``
(a fading-memory filter) scales the prior precision by ``a = 1/(1 + eta)``. It is applied as
a prediction step ``(W, psi) <- (sqrt(a) W, a psi)`` before the update, which is Algorithm 1
with ``alpha_t = a`` warm-started from the predicted factors.
"""
from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import lowrank
from .core import Filter, LowRankState, solver_info
from .factor_analysis import PSI_FLOOR, positive_int, recursive_em_step
from .implicit import solve_logistic
from .models import Model
from .rvga import check_process_noise
from .special import probit_k, sig1, sigmoid
from .validation import check_choice, check_positive, is_concrete

_SCHEMES = {
    "linear_gaussian": ("exact", "explicit", "extragrad", "sampled", "ekf"),
    "logistic": ("implicit", "explicit", "extragrad", "sampled", "ekf"),
    "glm": ("explicit", "extragrad", "sampled", "ekf"),
    "nonlinear": ("sampled", "ekf"),
}
_DEFAULT_SCHEME = {"linear_gaussian": "exact", "logistic": "implicit", "glm": "extragrad",
                   "nonlinear": "sampled"}


def _check_config(model, rank, inner_loops, scheme, num_samples, process_noise, frozen_noise,
                  update_cov_twice, unravel):
    if not isinstance(model, Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    check_choice("model.kind", model.kind, tuple(_SCHEMES))
    rank = positive_int("rank", rank)
    inner_loops = positive_int("inner_loops", inner_loops)
    scheme = _DEFAULT_SCHEME[model.kind] if scheme is None else scheme
    check_choice("scheme", scheme, _SCHEMES[model.kind])
    if scheme == "sampled":
        num_samples = positive_int("num_samples", 10 if num_samples is None else num_samples)
    else:
        if num_samples is not None:
            raise ValueError(f"num_samples is only used by scheme='sampled', not {scheme!r}")
        if frozen_noise is not False:
            raise ValueError(f"frozen_noise is only used by scheme='sampled', not {scheme!r}")
    if update_cov_twice and scheme not in ("extragrad", "sampled"):
        raise ValueError(f"update_cov_twice needs scheme 'extragrad' or 'sampled', not {scheme!r}")
    if unravel is not None and model.kind != "nonlinear":
        raise ValueError("unravel is only used with a nonlinear model (eta = h(theta, x))")
    check_process_noise(process_noise)
    return rank, inner_loops, scheme, num_samples


def lrvga(model, rank: int, inner_loops: int = 1, scheme: Optional[str] = None,
          num_samples: Optional[int] = None, process_noise=None, frozen_noise=False, *,
          update_cov_twice: bool = False, unravel: Optional[Callable] = None,
          fa_step: Optional[Callable] = None, max_iter: Optional[int] = None,
          psi_floor: float = PSI_FLOOR) -> Filter:
    """The limited-memory R-VGA filter of [LRVGA] with a rank-``p`` precision ``W W^T + diag(psi)``.

    Args:
      model: a :class:`jaxrvga.models.Model`. GLM kinds (``linear_gaussian``, ``logistic``,
        ``glm``) take ``x`` of shape (d,); a ``nonlinear`` model ``eta = h(theta, x)`` takes
        any ``x`` (a pytree is fine) and any exponential-family output.
      rank: ``p``, the number of columns of ``W`` (1 <= p <= d).
      inner_loops: EM iterations of Algorithm 1 per step (``n_in``).
      scheme: ``"exact"`` (linear-Gaussian, the default there), ``"implicit"`` (logistic
        default), ``"explicit"``, ``"extragrad"`` (GLM default), ``"ekf"`` (any model) or
        ``"sampled"`` (any model; the nonlinear default). See the module docstring.
      num_samples: ``K`` ensemble samples of ``"sampled"`` (default 10).
      process_noise: ``eta >= 0`` of Remark 1 (``Q_t = eta P_{t-1}``); ``None`` or 0 disables it.
        May be a traced scalar.
      frozen_noise: ``"sampled"`` only. ``False`` (default): fresh noise every step and
        for each of the two extragradient evaluations, from the key carried in the state.
        ``True``: the authors' code, the same base noise at every step and for both
        evaluations (the state's key is never split). A pair ``(z, e)`` of arrays (K, d)
        and (K, p): use exactly that base noise (to reproduce given draws).
      update_cov_twice: ``"extragrad"``/``"sampled"`` only: redo the covariance update at
        ``(muhat, Phat)`` (the full mirror prox, eqs. 139-142) instead of skipping it (143-145).
      unravel: for a nonlinear model whose ``h`` takes a parameter pytree: the function
        returned by ``jax.flatten_util.ravel_pytree``; the filter then works on the flat
        vector and calls ``h(unravel(theta_flat), x)``. A flax or equinox model wraps the
        same way: ``h = lambda params, x: net.apply(params, x)``.
      fa_step: replaces Algorithm 1: ``fa_step(W, psi, X) -> (W, psi)`` approximating
        ``W W^T + diag(psi) + X X^T`` (e.g. an exact update, for oracle tests).
      max_iter: Newton iterations of the implicit 2-D root solver.
      psi_floor: relative floor of ``psi`` in Algorithm 1.

    Returns:
      A :class:`~jaxrvga.core.Filter`. ``init(mean, W, psi, key=None)`` builds a
      :class:`~jaxrvga.core.LowRankState` (``key`` is required by ``"sampled"`` unless the
      noise is given); ``update(state, x, y)`` absorbs one observation; ``state.info``
      reports the implicit root solve (trivially converged for the other schemes).
    """
    rank, inner_loops, scheme, K = _check_config(model, rank, inner_loops, scheme, num_samples,
                                                 process_noise, frozen_noise, update_cov_twice,
                                                 unravel)
    glm = model.kind != "nonlinear"
    given_noise = None if isinstance(frozen_noise, bool) else tuple(map(jnp.asarray, frozen_noise))
    if given_noise is not None:
        z, e = given_noise
        if z.ndim != 2 or e.shape != (z.shape[0], rank):
            raise ValueError(f"frozen_noise must be a pair (z, e) of shapes (K, d) and (K, {rank}), "
                             f"got {z.shape} and {e.shape}")
        K = z.shape[0]

    if fa_step is None:
        def fa_step(W, psi, X):
            return recursive_em_step(W, psi, X, 1.0, 1.0, inner_loops, psi_floor=psi_floor)

    def predict(W, psi):
        """Remark 1: ``(W W^T + Psi) / (1 + eta)`` as ``(sqrt(a) W, a psi)``."""
        if process_noise is None or (isinstance(process_noise, (int, float)) and process_noise == 0):
            return W, psi
        a = 1.0 / (1.0 + jnp.asarray(process_noise, dtype=W.dtype))
        return jnp.sqrt(a) * W, a * psi

    def init(mean, W, psi, key=None):
        mean = jnp.asarray(mean)
        if mean.ndim != 1 or not jnp.issubdtype(mean.dtype, jnp.floating):
            raise ValueError(f"mean must be a float vector (d,), got shape {mean.shape} and "
                             f"dtype {mean.dtype}")
        d = mean.shape[0]
        W = jnp.asarray(W, dtype=mean.dtype)
        psi = jnp.asarray(psi, dtype=mean.dtype)
        if rank > d:
            raise ValueError(f"rank must satisfy rank <= d = {d}, got rank={rank}")
        if W.shape != (d, rank):
            raise ValueError(f"W must have shape (d, rank) = {(d, rank)}, got {W.shape}")
        if is_concrete(W) and not np.all(np.isfinite(np.asarray(W))):
            raise ValueError("W must be finite")
        if psi.shape != (d,):
            raise ValueError(f"psi must have shape (d,) = {(d,)}, got {psi.shape}")
        check_positive("psi", psi)
        if scheme == "sampled":
            if given_noise is not None:
                if given_noise[0].shape[1] != d:
                    raise ValueError(f"frozen_noise z must have {d} columns, got {given_noise[0].shape}")
            elif key is None:
                raise ValueError("key is required by scheme='sampled' (init(mean, W, psi, key))")
        return LowRankState(mean, W, psi, jnp.asarray(0, jnp.int32), solver_info(mean.dtype),
                            key if scheme == "sampled" else None)

    def check_xy(state, x, y):
        """Trace-time checks of one observation; casts ``x`` (GLMs) and ``y`` to the state dtype."""
        dtype = state.mean.dtype
        if glm:
            d = state.mean.shape[0]
            x = jnp.asarray(x, dtype=dtype)
            if x.ndim == 1 and x.shape != (d,):
                raise ValueError(f"x must have length d = {d} to match the state, got shape {x.shape}")
            if x.ndim != 1:
                raise ValueError(f"x must be a vector of length d = {d}, got shape {x.shape}")
            if jnp.ndim(y) != 0:
                raise ValueError(f"y must be a scalar for a GLM, got shape {jnp.shape(y)}")
        model.family.check_y("y", y)
        return x, jnp.asarray(y, dtype=dtype)

    def check(state, xs, ys):
        """Whole data set, before :func:`jaxrvga.run` scans it (never under jit)."""
        if glm:
            d = state.mean.shape[0]
            shape = jnp.shape(xs)
            if len(shape) != 2 or shape[1] != d:
                raise ValueError(f"xs must have length d = {d} along its last axis, i.e. shape (T, {d}), "
                                 f"got {shape}")
        model.family.check_y("ys", ys)

    def finish(state, mean, W, psi, info=None, key=None):
        info = solver_info(state.mean.dtype) if info is None else info
        return LowRankState(mean, W, psi, state.step + 1, info, key)

    # ------------------------------------------------------------------ D1: linear-Gaussian
    def update_exact(state, x, y):
        x, y = check_xy(state, x, y)
        nv = jnp.asarray(model.noise_var, dtype=x.dtype)
        W, psi = fa_step(*predict(state.W, state.psi), x / jnp.sqrt(nv))  # eq. 26
        gain = lowrank.solve(W, psi, x) / nv  # P_t x / sigma^2 with the NEW factors, eq. 27
        return finish(state, state.mean + gain * (y - x @ state.mean), W, psi)

    # ------------------------------------------------------------------ D2: implicit logistic
    def update_implicit(state, x, y):
        x, y = check_xy(state, x, y)
        W, psi = predict(state.W, state.psi)
        Px = lowrank.solve(W, psi, x)  # P_{t-1} x with the OLD factors
        alpha, nu, info = solve_logistic(x @ state.mean, x @ Px, y, max_iter)
        k = probit_k(nu)
        mean = state.mean + (y - sigmoid(k * alpha)) * Px  # [RVGA] eq. 76 / [LRVGA] eq. 53
        W, psi = fa_step(W, psi, x * jnp.sqrt(k * sig1(k * alpha)))  # eq. 30 with beta = gamma_t
        return finish(state, mean, W, psi, info)

    # ------------------------------------------------------------------ D3: explicit / extragradient
    def curvature_column(x, hess):
        return x * jnp.sqrt(jnp.maximum(-hess, 0.0))

    def update_glm(state, x, y):
        x, y = check_xy(state, x, y)
        W0, psi0 = predict(state.W, state.psi)
        Px = lowrank.solve(W0, psi0, x)
        g, h = model.glm_moments(x @ state.mean, x @ Px, y)
        W, psi = fa_step(W0, psi0, curvature_column(x, h))
        Phx = lowrank.solve(W, psi, x)
        mean = state.mean + g * Phx  # explicit: muhat = mu + Phat E[grad]
        if scheme == "extragrad":
            g, h = model.glm_moments(x @ mean, x @ Phx, y)  # moments at (muhat, Phat)
            if update_cov_twice:
                W, psi = fa_step(W0, psi0, curvature_column(x, h))
                Phx = lowrank.solve(W, psi, x)
            mean = state.mean + g * Phx  # eq. 145
        return finish(state, mean, W, psi)

    # ------------------------------------------------------------------ D4: sampled GGN
    h_fn = model.predict
    if unravel is not None:
        h_fn = lambda theta, x: model.predict(unravel(theta), x)  # noqa: E731

    def linearise(theta, x, y):
        """``(C, grad)``: ``C = Cov^{1/2} J_h`` (n_eta, d) (GGN, eq. 41) and ``grad log p`` (d,)."""
        def eta_of(th):
            return jnp.ravel(h_fn(th, x))

        n_eta = jax.eval_shape(eta_of, theta).shape[0]
        eta = eta_of(theta)
        yv = jnp.broadcast_to(jnp.ravel(jnp.asarray(y, dtype=theta.dtype)), eta.shape)
        dlogp = jax.grad(lambda e: jnp.sum(model.family.log_prob(yv, e)))(eta)
        root_f = jnp.sqrt(jnp.maximum(model.family.fisher(eta), 0.0))
        if n_eta <= theta.shape[0]:  # reverse mode: one pullback per output
            _, pullback = jax.vjp(eta_of, theta)
            C = jax.vmap(lambda u: pullback(u)[0])(jnp.diag(root_f))
            grad = pullback(dlogp)[0]
        else:  # more outputs than parameters: forward mode
            J = jax.jacfwd(eta_of)(theta)
            C, grad = root_f[:, None] * J, dlogp @ J
        return C, grad

    def draw(key, mean, W, psi):
        if given_noise is not None:
            return lowrank.sample_from_noise(mean, W, psi, *given_noise)
        return lowrank.sample(key, mean, W, psi, K)

    def update_sampled(state, x, y):
        x, y = check_xy(state, x, y)
        if frozen_noise is True or given_noise is not None:
            key, k1, k2 = state.key, state.key, state.key
        else:
            key, k1, k2 = jax.random.split(state.key, 3)
        W0, psi0 = predict(state.W, state.psi)

        def ggn_and_grad(k, mean, W, psi):
            thetas = draw(k, mean, W, psi)  # (K, d), corrected Proposition 1
            C, grads = jax.vmap(linearise, in_axes=(0, None, None))(thetas, x, y)
            X = C.reshape(-1, C.shape[-1]).T / jnp.sqrt(K)  # eq. 46: d x (K n_eta)
            return X, jnp.mean(grads, axis=0)

        X, grad = ggn_and_grad(k1, state.mean, W0, psi0)
        W, psi = fa_step(W0, psi0, X)  # eq. 47
        muhat = state.mean + lowrank.solve(W, psi, grad)  # eq. 144
        X2, grad2 = ggn_and_grad(k2, muhat, W, psi)  # samples of N(muhat, Phat)
        if update_cov_twice:
            W, psi = fa_step(W0, psi0, X2)
        mean = state.mean + lowrank.solve(W, psi, grad2)  # eq. 145
        return finish(state, mean, W, psi, key=key)

    # ------------------------------------------------------------------ D5: linearised (EKF)
    def update_ekf(state, x, y):
        x, y = check_xy(state, x, y)
        W, psi = predict(state.W, state.psi)
        C, grad = linearise(state.mean, x, y)
        W, psi = fa_step(W, psi, C.T)
        return finish(state, state.mean + lowrank.solve(W, psi, grad), W, psi)

    update = {"exact": update_exact, "implicit": update_implicit, "explicit": update_glm,
              "extragrad": update_glm, "sampled": update_sampled, "ekf": update_ekf}[scheme]
    return Filter(init, update, check)


__all__ = ["lrvga"]
