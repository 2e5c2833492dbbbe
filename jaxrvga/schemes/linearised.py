"""Steps linearised at the mean: ``ekf`` and ``moment_ekf``.

``ekf`` takes the curvature ``J^T F J`` ([RVGA] Thm 3, eqs. 54-55, 81); ``moment_ekf`` is the EKF of
a Gaussian likelihood with the output's mean and variance plus a jitter.

:func:`linearise` gives the rows ``C = R J`` of the generalised Gauss-Newton curvature of any model
``eta = h(theta, x)`` by autodiff ([LRVGA] eq. 41); the sampled schemes take it at each draw.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..core import solver_info
from ..kernels import lowrank
from ..validation import positive_int
from .base import MAX_MOVE, Increment, Linearised, Scheme, absorb_limited, check_curvature, check_max_move


#: Default ``jitter`` of :func:`moment_ekf` (experiments/REPORT.md, "Networks from any prior").
MOMENT_JITTER = 0.1


def moment_weights(family, eta, jitter):
    """``s = V / (V + jitter)`` of an elementwise family, ``V = Var(y | eta)`` (the shape of ``eta``).

    A Gaussian likelihood with the output's conditional mean and variance ``V + jitter``,
    linearised at the mean, is the EKF with Fisher ``s F`` and score ``s d log p / d eta``
    (exactly, for the canonical links here and the Gaussian family): the jitter damps the step of
    an output whose variance vanishes (a saturated one), where the natural-parameter EKF's step
    becomes the whole predictive variance (experiments/REPORT.md, "Networks from any prior").

    Args:
      family: an elementwise :class:`~jaxrvga.models.Family`.
      eta: the predictor's output.
      jitter: the variance added, > 0.

    Returns:
      ``s``, of ``eta``'s shape, in [0, 1).
    """
    V = family.variance(eta)
    return V / (V + jnp.asarray(jitter, V.dtype))


def ekf_glm_site(model, q, X, y, jitter=0.0, empirical=False):
    """GLM linearised at the mean: Fisher ``F(eta)`` and score ``d log p / d eta`` ([RVGA] eq. 81),
    both scaled by ``s = V / (V + jitter)`` (:func:`moment_weights`; not for a family of fixed
    variance, :class:`~jaxrvga.models.Family`); ``empirical``: curvature
    ``score^2`` (the empirical Fisher) in place of ``F``.

    Args:
      model: the GLM.
      q: the belief's state (its mean is the linearisation point).
      X: the inputs, (m, d).
      y: the outputs, (m,).
      jitter: the moment-matching jitter (0: none).
      empirical: the empirical Fisher as the curvature.

    Returns:
      An :class:`~jaxrvga.schemes.Increment` with ``c`` and ``g``.
    """
    eta = X @ q.mean
    score = jax.vmap(jax.grad(lambda e, t: model.family.log_prob(t, e)))(eta, y)
    fisher = model.family.fisher(eta)
    if jitter and not model.family.fixed_variance:
        s = moment_weights(model.family, eta, jitter)
        fisher, score = fisher * s, score * s
    return Increment(X.T, score**2 if empirical else fisher, score)


def _root_rows(root, eta):
    """Rows of a root of the Fisher as cotangents of ``eta``: ``U`` (r, *eta.shape), ``sum_r U_r U_r^T = F``.

    Elementwise families: ``R = root(ravel(eta))``. Roots that map logits (..., K) to blocks
    (..., r, K) (the categorical family, per observation of a minibatch; ``r = K`` or the
    ``fisher_rank`` of :func:`linearise`): one block per leading index, laid out block-diagonally.
    """
    blocks = jax.eval_shape(root, eta).shape
    if eta.ndim >= 2 and len(blocks) == eta.ndim + 1 and blocks[:-2] == eta.shape[:-1]:
        R = root(eta)  # (B..., r, K)
        lead = int(np.prod(eta.shape[:-1]))
        r, K = blocks[-2:]
        R = R.reshape(lead, r, K)
        U = jnp.einsum("ab,ark->arbk", jnp.eye(lead, dtype=R.dtype), R)
        return U.reshape((lead * r,) + eta.shape)
    R = root(jnp.ravel(eta))
    return R.reshape((R.shape[0],) + eta.shape)


def _per_input_blocks(model, eta, theta) -> bool:
    """Whether :func:`linearise` takes the rows of a root of K x K blocks (a vector-output family,
    ``Family.vector_output``) per input of a :func:`~jaxrvga.models.minibatch` model
    (:func:`_per_input_root_rows`)."""
    return (model.per_input is not None and model.family.vector_output and eta.ndim == 2
            and eta.size < theta.shape[0])


def _per_input_root_rows(model, theta, x, R, dlogp):
    """``(C, grad)`` of :func:`linearise` for a minibatch of m inputs with Fisher blocks ``R`` (m, K, K):
    the K rows of ``R_i J_i`` from one pullback through input i alone (K cotangents), mapped over
    the inputs, and the gradient from one pullback of the minibatch. The same rows as the
    pullbacks of the whole minibatch with the block-diagonal cotangents of :func:`_root_rows`,
    each of which ran the backward pass of all m inputs for the one that is not zero (m times the
    work). The rows are mapped out as the columns of ``C^T`` (d, m, K), the layout of the step's
    factor ``X = C^T``: XLA then transposes them once (as rows (m K, d) they would be transposed
    into X for each of its consumers, which doubles the step's time: BENCHMARKS.md)."""
    def one(xi, Ri):
        _, pullback = jax.vjp(lambda th: model.per_input(th, xi), theta)
        return jax.vmap(lambda u: pullback(u)[0], out_axes=1)(Ri)  # (d, K)

    columns = jax.vmap(one, out_axes=1)(x, R)  # (d, m, K)
    _, pullback = jax.vjp(lambda th: model.predict(th, x), theta)
    return columns.reshape(columns.shape[0], -1).T, pullback(dlogp)[0]


def _observation_rows(score, eta, coupled: bool):
    """The score split into one cotangent of ``eta`` per observation (r, *eta.shape): per component
    (elementwise families), or per row of K logits (``coupled``, the categorical family)."""
    n = score.size // (eta.shape[-1] if coupled else 1)
    flat = score.reshape(n, -1)
    U = jnp.einsum("ab,ak->abk", jnp.eye(n, dtype=score.dtype), flat)
    return U.reshape((n,) + eta.shape)


def _coupled_moments(family, eta, dlogp, jitter, rank=None):
    """A root of ``V (V + jitter I)^{-1} V`` and the score ``V (V + jitter I)^{-1} d log p / d eta``
    for a family whose ``variance`` is a (..., K, K) matrix equal to its Fisher (the categorical
    family's canonical link), by the eigen-decomposition of ``V`` per observation; ``jitter = 0``:
    a root of the Fisher and the score unchanged. ``rank``: the root's rows of the ``rank`` largest
    eigenvalues alone (:func:`linearise`)."""
    lam, Q = lowrank.symmetric_eigh(family.variance(eta) if jitter else family.fisher(eta))  # ascending
    lam = jnp.maximum(lam, 0.0)
    shrink = lam / (lam + jnp.asarray(jitter, lam.dtype)) if jitter else jnp.ones_like(lam)
    root = (jnp.sqrt(lam * shrink)[..., :, None] * jnp.swapaxes(Q, -1, -2))
    if rank is not None:
        root = root[..., -rank:, :]
    if jitter:
        dlogp = jnp.einsum("...ij,...j->...i", Q, shrink * jnp.einsum("...ji,...j->...i", Q, dlogp))
    return (lambda e: root), dlogp


def _pullback_rows(f, theta, shape, dtype):
    """The rows of the Jacobian of ``f`` at ``theta`` (outputs of ``shape``), one pullback per output."""
    _, pullback = jax.vjp(f, theta)
    n = int(np.prod(shape))
    units = jnp.eye(n, dtype=dtype).reshape((n,) + tuple(shape))
    return jax.vmap(lambda u: pullback(u)[0])(units)


def _jacobian_rows(model, theta, x, eta):
    """``d eta / d theta`` as (eta.size, d) rows in the order of ``ravel(eta)``. A
    :func:`~jaxrvga.models.minibatch` model is differentiated per input (a pullback through one
    input, mapped over the minibatch), not through the whole minibatch once per output."""
    if model.per_input is None:
        return _pullback_rows(lambda th: model.predict(th, x), theta, eta.shape, eta.dtype)
    rows = jax.vmap(lambda xi: _pullback_rows(lambda th: model.per_input(th, xi), theta, eta.shape[1:], eta.dtype))
    return rows(x).reshape(eta.size, theta.shape[0])


def linearise(model, theta, x, y, jitter=0.0, empirical: bool = False, fisher_rank=None):
    """``(C, grad)`` at ``theta``: ``C = R J`` (r, d) with ``R^T R = F`` (GGN, [LRVGA] eq. 41), ``grad log p``.

    ``R`` is the family's ``fisher_root``; for a family with ``null_directions`` (a categorical output)
    the rows with curvature of each observation's eigen-decomposed Fisher.
    Reverse mode (one pullback per row of ``R``) when ``eta`` has fewer outputs than parameters.
    A diagonal ``R`` (elementwise families) scales the rows of ``J`` itself, and ``grad = J^T d log p
    / d eta`` combines the same rows: one pullback per output, none more for the gradient.

    ``jitter > 0``: the moment-matched Gaussian likelihood (:func:`moment_weights`): ``F`` and the
    score scaled by ``V (V + jitter)^{-1}``. ``empirical``: ``C`` holds one gradient row per
    observation (the empirical Fisher ``sum_i g_i g_i^T``) instead of ``R J``. ``fisher_rank = r``
    (a vector output's K x K Fisher, :attr:`~jaxrvga.models.Family.vector_output`): ``R`` holds the
    rows of the r largest eigenvalues of each observation's ``F`` alone, so that ``C^T C <= J^T F J``
    (a curvature that never exceeds the GGN) from r pullbacks per observation instead of K; the
    gradient is unchanged. ``r = K - 1`` is exact for the categorical family (``F 1 = 0``), and
    ``K - Family.null_directions`` rows are kept by default (the same curvature in fewer columns).

    Args:
      model: the observation model.
      theta: the linearisation point, (d,).
      x, y: one observation (or a minibatch of a :func:`~jaxrvga.models.minibatch` model).
      jitter: the moment-matching jitter (0: none).
      empirical: one gradient row per observation as the curvature factor.
      fisher_rank: the rows kept per observation of a vector output (None: the default above).

    Returns:
      ``(C, grad)``: the (r, d) curvature factor and the (d,) gradient of ``log p(y | theta, x)``.
    """
    def eta_of(th):
        return model.predict(th, x)

    eta = jnp.asarray(eta_of(theta))
    log_prob, root_diagonal = model.family.log_prob, model.family.root_diagonal
    if jax.eval_shape(log_prob, y, eta).size > eta.size:
        raise ValueError(f"y of shape {jnp.shape(y)} has more components than the model's output eta "
                         f"of shape {jnp.shape(eta)}: each observation would be counted more than once")
    dlogp = jax.grad(lambda e: jnp.sum(log_prob(y, e)))(eta)
    root, diag = model.family.fisher_root, None if root_diagonal is None else root_diagonal(eta)
    jitter = 0.0 if model.family.fixed_variance else jitter  # a known variance does not collapse
    if jitter and diag is not None:
        s = moment_weights(model.family, eta, jitter)
        dlogp, diag = dlogp * s, diag * jnp.sqrt(s)
        root = lambda e: jnp.diag(jnp.ravel(diag))  # noqa: E731
    elif diag is None and (jitter or fisher_rank is not None or model.family.null_directions):
        root, dlogp = _coupled_moments(model.family, eta, dlogp, jitter, _root_rank(model.family, eta, fisher_rank))
    if diag is not None and eta.size <= theta.shape[0]:
        J = _jacobian_rows(model, theta, x, eta)  # (n, d)
        weights = jnp.ravel(dlogp) if empirical else jnp.ravel(diag)
        return weights[:, None] * J, jnp.ravel(dlogp) @ J
    if not empirical and _per_input_blocks(model, eta, theta):
        return _per_input_root_rows(model, theta, x, root(eta), dlogp)
    U = _observation_rows(dlogp, eta, diag is None) if empirical else _root_rows(root, eta)
    if U.shape[0] <= theta.shape[0]:
        _, pullback = jax.vjp(eta_of, theta)
        return jax.vmap(lambda u: pullback(u)[0])(U), pullback(dlogp)[0]
    J = jax.jacfwd(eta_of)(theta).reshape(-1, theta.shape[0])
    return U.reshape(U.shape[0], -1) @ J, jnp.ravel(dlogp) @ J


def _root_rank(family, eta, fisher_rank):
    """The rows kept of each observation's K x K Fisher root: ``fisher_rank`` (at most K), else
    ``K - family.null_directions`` (None: all K)."""
    K = eta.shape[-1]
    if fisher_rank is None:
        return K - family.null_directions if family.null_directions else None
    if fisher_rank > K:
        raise ValueError(f"fisher_rank={fisher_rank} exceeds the {K} outputs of one observation")
    return fisher_rank


def ekf_site(model, q, x, y, jitter=0.0, empirical=False, fisher_rank=None):
    """Any model linearised at the mean: ``X = J^T R^T``, ``g = J^T d log p / d eta`` ([RVGA] eqs. 54-55);
    ``jitter``, ``empirical``, ``fisher_rank``: :func:`linearise`.

    Args:
      model: the observation model.
      q: the belief's state (its mean is the linearisation point).
      x, y: one observation.
      jitter, empirical, fisher_rank: as :func:`linearise`'s.

    Returns:
      An :class:`~jaxrvga.schemes.Increment` with ``X = C^T`` and ``g``.
    """
    C, grad = linearise(model, q.mean, x, y, jitter, empirical, fisher_rank)
    return Increment(C.T, g=grad)


def _step_ekf(cfg, model, belief, prior, x, y):
    """``ekf`` (``jitter = 0``) and ``moment_ekf``: linearised at the mean."""
    empirical = cfg.curvature == "empirical"
    if cfg.fisher_rank is not None and not model.family.vector_output:
        raise ValueError(f"fisher_rank: the {model.family.name!r} family has no K x K Fisher per observation to "
                         "truncate (each output is one curvature column already); leave fisher_rank=None")
    if model.is_glm:
        inc = ekf_glm_site(model, prior, x, y, cfg.jitter, empirical)
    else:
        inc = ekf_site(model, prior, x, y, cfg.jitter, empirical, cfg.fisher_rank)
    return absorb_limited(cfg, belief, prior, inc, solver_info(prior.mean.dtype), model.power)


def ekf(*, curvature: str = "ggn", max_move=MAX_MOVE, fisher_rank: Optional[int] = None) -> Scheme:
    """The extended Kalman step, linearised at the mean ([RVGA] Thm 3, eqs. 54-55, 81): curvature
    ``J^T F J`` (``"ggn"``) or one gradient column per observation (``"empirical"``);
    ``fisher_rank``: the leading directions of a vector output's Fisher alone (:func:`linearise`).

    Args:
      curvature: ``"ggn"`` or ``"empirical"``.
      max_move: the guard's Mahalanobis limit of the mean step, > 0 (``inf``: none; :func:`limit_move`).
      fisher_rank: the number of leading Fisher directions kept per observation (None: all with curvature).

    Returns:
      A :class:`~jaxrvga.schemes.Scheme`.

    Example:
      >>> model = jr.models.nonlinear(lambda theta, x: jnp.tanh(x @ theta), jr.models.bernoulli())
      >>> flt = jr.diag_rvga(model, scheme=jr.schemes.ekf(curvature="empirical"))
      >>> flt.spec.scheme.cfg.curvature
      'empirical'
    """
    cfg = Linearised(check_curvature(curvature, ("ggn", "empirical")), 0.0, check_max_move(max_move),
                     _fisher_rank(fisher_rank, curvature))
    return Scheme("ekf", _step_ekf, cfg, certified=True, tempers=True)


def moment_ekf(*, jitter: float = MOMENT_JITTER, curvature: str = "ggn", max_move=MAX_MOVE,
               fisher_rank: Optional[int] = None) -> Scheme:
    """The EKF of a Gaussian likelihood with the output's mean and variance ``+ jitter``
    (:func:`moment_weights`), linearised at the mean: the default for nonlinear models;
    ``fisher_rank``: as :func:`ekf`.

    Args:
      jitter: added to the output's variance, > 0 (default :data:`MOMENT_JITTER`).
      curvature: ``"ggn"`` or ``"empirical"``.
      max_move: the guard's Mahalanobis limit of the mean step, > 0 (``inf``: none; :func:`limit_move`).
      fisher_rank: as :func:`ekf`'s.

    Returns:
      A :class:`~jaxrvga.schemes.Scheme`.

    Example:
      >>> model = jr.models.nonlinear(lambda theta, x: jnp.sin(x @ theta))
      >>> flt = jr.rvga(model, scheme=jr.schemes.moment_ekf(jitter=0.05))
      >>> flt.spec.scheme.name
      'moment_ekf'
    """
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 < jitter < np.inf:
        raise ValueError(f"jitter must be a number > 0, got {jitter!r}")
    cfg = Linearised(check_curvature(curvature, ("ggn", "empirical")), float(jitter), check_max_move(max_move),
                     _fisher_rank(fisher_rank, curvature))
    return Scheme("moment_ekf", _step_ekf, cfg, certified=True, tempers=True)


def _fisher_rank(rank, curvature):
    """``rank``: None or an integer >= 1, with the GGN curvature (the empirical one has no root to cut)."""
    if rank is None:
        return None
    rank = positive_int("fisher_rank", rank)
    if curvature != "ggn":
        raise ValueError(f"fisher_rank truncates the GGN's Fisher; curvature={curvature!r} has none")
    return rank


__all__ = ["ekf", "moment_ekf", "linearise", "ekf_site", "ekf_glm_site", "moment_weights", "MOMENT_JITTER"]
