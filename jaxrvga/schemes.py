"""Update schemes of the R-VGA, each written once for every belief (dense, low-rank, diagonal).

A scheme is a value (:class:`Scheme`) made by its factory (:func:`exact`, :func:`implicit`,
:func:`explicit`, :func:`extragrad`, :func:`ekf`, :func:`moment_ekf`, :func:`qkf`, :func:`sampled`,
:func:`published_sampled`), which validates its options; :func:`jaxrvga.build` joins it with a
belief, a model and the dynamics. A scheme of your own is one more value.

An R-VGA step ([RVGA] eqs. 28-29, [LRVGA] eqs. 7-8) moves the belief to

    P_t^{-1} = P_{t-1}^{-1} + X diag(c) X^T,        mu_t = mu_{t-1} + P_t g

A scheme computes the curvature factor ``X`` (d x m, with weights ``c``) and the gradient ``g``
from the observation, as an :class:`Increment`; the belief does the algebra (:func:`absorb`).

* ``exact``: the Kalman filter of a linear-Gaussian model ([RVGA] Thm 2, eqs. 40-42).
* ``implicit``: expectations under the new belief, exact for GLMs: the 2-D root of the logistic
  model ([RVGA] eqs. 69-77) or the convex 1-D solve of any log-concave GLM; the mean step then
  uses ``P_{t-1}`` ([RVGA] eq. 76).
* ``explicit``: expectations under the previous belief ([RVGA] eqs. 30-31, 78-80).
* ``extragrad``: mirror prox ([LRVGA] eqs. 139-145): a second evaluation under the explicit
  step's belief. ``correction=True`` adds the natural-parameter term ``c x x^T (muhat - mu)``
  that makes it exact on linear-Gaussian models (the paper's eq. 142 omits it).
* ``ekf``: linearised at the previous mean, curvature ``J^T F J`` ([RVGA] Thm 3, eqs. 54-55, 81).
* ``qkf``: the Jaakkola-Jordan quadratic bound ([RVGA] eqs. 82-90), logistic model.
* ``sampled``: Monte-Carlo expectations for any model ``eta = h(theta, x)``: GGN curvature
  ``E[J^T F J]`` ([LRVGA] eq. 41) or the Hessian, ``num_iters`` passes of the implicit
  iteration, each restarting from the previous belief so the observation is counted once.

Every pass of :func:`iterate` restarts from ``q_{t-1}``: pass i evaluates the site under the
belief of pass i - 1, so one pass is the explicit scheme, two the extragradient, and the fixed
point the implicit one.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .kernels import root_solvers
from .kernels import woodbury
from .kernels import special
from .beliefs import Dense, PublishedLowRank
from .core import SolverInfo, solver_info
from .validation import check_choice, positive_int


class Increment(NamedTuple):
    """A site's contribution: precision ``+ X diag(c) X^T``, gradient ``X coef + g``.

    ``X`` (d, m); ``c`` (m,) or None (ones); ``coef`` (m,) or None; ``g`` (d,) or None.
    ``prior_gain``: the mean step uses the previous precision (the implicit schemes, [RVGA] eq. 76).
    """

    X: jax.Array
    c: Optional[jax.Array] = None
    coef: Optional[jax.Array] = None
    g: Optional[jax.Array] = None
    prior_gain: bool = False

    def gradient(self):
        """``X coef + g``."""
        parts = ([] if self.coef is None else [self.X @ self.coef]) + ([] if self.g is None else [self.g])
        return sum(parts[1:], parts[0])

    def curvature_times(self, v):
        """``X diag(c) X^T v``."""
        u = v @ self.X
        return self.X @ (u if self.c is None else self.c * u)


class Limited(NamedTuple):
    """Options of a one-evaluation scheme (``exact``, ``qkf``): the guard's ``max_move`` (None: no limit)."""

    max_move: Optional[float] = None


class Implicit(NamedTuple):
    """Options of ``implicit``: the root solve's iteration cap (None: the solver's) and ``max_move``."""

    max_iter: Optional[int] = None
    max_move: Optional[float] = None


class Linearised(NamedTuple):
    """Options of ``ekf`` and ``moment_ekf``: the curvature, the moment likelihood's ``jitter``
    (0: the EKF), ``max_move`` and ``fisher_rank`` (None: every direction of a vector output's
    Fisher, :func:`linearise`)."""

    curvature: str = "ggn"
    jitter: float = 0.0
    max_move: Optional[float] = None
    fisher_rank: Optional[int] = None


class Iterated(NamedTuple):
    """Options of the iterated schemes (:func:`iterate`: ``explicit``, ``extragrad``, ``sampled``,
    ``published_sampled``): passes, their correction and curvature updates, ``max_move``; the
    sampled ones' draws, curvature, tolerance and frozen noise."""

    num_iters: int = 1
    correction: bool = True
    update_cov_twice: bool = True
    max_move: Optional[float] = None
    num_samples: int = 100
    curvature: str = "ggn"
    tol: float = 1e-2
    frozen_noise: object = False


def absorb(belief, prior, inc: Increment):
    """``belief`` after the precision step of ``inc`` and the mean step ``mu + P g`` (unprojected).

    Returns ``(state, ok)``; ``ok`` is False where the step is not positive definite.
    """
    return belief.absorb(prior, inc.X, inc.c, inc.gradient(), inc.prior_gain)


def limit_move(prior, new, inc: Increment, max_move: Optional[float]):
    """The mean step of ``inc`` shortened to Mahalanobis length ``max_move`` under the previous belief.

    With ``Delta = mu_new - mu``, ``P_new^{-1} Delta = g`` (or ``P^{-1} Delta = g`` with
    ``prior_gain``), so ``Delta^T P^{-1} Delta = g^T Delta - (X^T Delta)^T diag(c) (X^T Delta)``:
    O(d m), no solve. ``P_new^{-1}`` is the unprojected ``P^{-1} + X diag(c) X^T`` with which the
    dense, low-rank and diagonal beliefs take their mean steps (the diagonal one stores only the
    diagonal of ``diag(psi) + X diag(c) X^T``), so the identity holds for each. Where ``c < 0``, the
    low-rank and diagonal beliefs step with ``c`` clipped at 0 and the length is overestimated by
    ``sum_{c_i < 0} |c_i| (x_i^T Delta)^2``: the limit is then conservative. A single observation
    moves an exact posterior mean by a few predictive standard deviations at most; a longer step is
    the signature of a linearisation that overshoots (a saturated output on the wrong side,
    experiments/REPORT.md "Networks from any prior"). Returns
    ``(state, calm)``, ``calm`` False where the step was shortened. ``None``: no limit.
    """
    if max_move is None:
        return new, jnp.asarray(True)
    delta = new.mean - prior.mean
    sq = inc.gradient() @ delta
    if not inc.prior_gain:
        u = delta @ inc.X
        sq = sq - u @ (u if inc.c is None else inc.c * u)
    limit = jnp.asarray(max_move, delta.dtype)
    calm = ~(sq > limit**2)  # NaN counts as calm here: the guard skips a non-finite step
    scale = jnp.where(calm, 1.0, limit / jnp.sqrt(jnp.where(calm, 1.0, sq)))  # no NaN in the gradient
    return new._replace(mean=prior.mean + scale * delta), calm


def iterate(belief, prior, evaluate: Callable, cfg: Iterated):
    """``cfg.num_iters`` passes of the implicit iteration from ``q_0 = q_{t-1}`` (module docstring).

    ``evaluate(q, i) -> Increment`` gives the site under the belief ``q`` of pass ``i - 1``. With
    ``correction``, the gradient of pass i > 0 gains ``X diag(c) X^T (mu_q - mu_{t-1})`` (the mirror
    step in natural parameters); without ``update_cov_twice`` the curvature of the first pass is
    kept. Each pass's mean step is limited by :func:`limit_move`. Returns ``(state, ok, change,
    calm)``, ``change`` the relative move of the mean in the last pass, ``calm`` False where a pass was
    shortened.
    """
    q, first, ok, calm = prior, None, jnp.asarray(True), jnp.asarray(True)
    change = jnp.zeros((), prior.mean.dtype)
    for i in range(cfg.num_iters):
        inc = evaluate(q, i)
        if cfg.correction and i > 0:
            extra = inc.curvature_times(q.mean - prior.mean)
            inc = inc._replace(g=extra if inc.g is None else inc.g + extra)
        if i == 0:
            first = inc
        elif not cfg.update_cov_twice:
            inc = first._replace(coef=inc.coef, g=inc.g)
        new, ok = absorb(belief, prior, inc)
        new, pass_calm = limit_move(prior, new, inc, cfg.max_move)
        calm = calm & pass_calm
        change = jnp.linalg.norm(new.mean - q.mean) / (1.0 + jnp.linalg.norm(prior.mean))
        q = new
    return q, ok, change, calm


# --------------------------------------------------------------------------- GLM sites

def exact_site(model, q, X, y):
    """Linear-Gaussian site: ``X^T X / sigma^2`` and ``X^T (y - X mu) / sigma^2`` ([RVGA] eqs. 40-42)."""
    nv = jnp.asarray(model.noise_var, X.dtype)
    return Increment(X.T, jnp.full(X.shape[:1], 1.0, X.dtype) / nv, (y - X @ q.mean) / nv)


def moment_site(model, belief, q, X, y):
    """GLM site with Gaussian expectations under ``q`` on ``eta_i = x_i^T theta`` ([RVGA] eqs. 30-31)."""
    alpha, nu = belief.marginal(q, X)
    g, h = model.glm_moments(alpha, nu, y)
    return Increment(X.T, -h, g)


def ekf_glm_site(model, q, X, y, jitter=0.0, empirical=False):
    """GLM linearised at the mean: Fisher ``F(eta)`` and score ``d log p / d eta`` ([RVGA] eq. 81),
    both scaled by ``s = V / (V + jitter)`` (:func:`moment_weights`; not for a family of fixed
    variance, :class:`~jaxrvga.models.Family`); ``empirical``: curvature
    ``score^2`` (the empirical Fisher) in place of ``F``."""
    eta = X @ q.mean
    score = jax.vmap(jax.grad(lambda e, t: model.family.log_prob(t, e)))(eta, y)
    fisher = model.family.fisher(eta)
    if jitter and not model.family.fixed_variance:
        s = moment_weights(model.family, eta, jitter)
        fisher, score = fisher * s, score * s
    return Increment(X.T, score**2 if empirical else fisher, score)


def moment_weights(family, eta, jitter):
    """``s = V / (V + jitter)`` of an elementwise family, ``V = Var(y | eta)`` (the shape of ``eta``).

    A Gaussian likelihood with the output's conditional mean and variance ``V + jitter``,
    linearised at the mean, is the EKF with Fisher ``s F`` and score ``s d log p / d eta``
    (exactly, for the canonical links here and the Gaussian family): the jitter damps the step of
    an output whose variance vanishes (a saturated one), where the natural-parameter EKF's step
    becomes the whole predictive variance (experiments/REPORT.md, "Networks from any prior").
    """
    V = family.variance(eta)
    return V / (V + jnp.asarray(jitter, V.dtype))


def qkf_site(belief, q, X, y):
    """Jaakkola-Jordan bound: curvature ``2 lambda(xi)``, ``xi^2 = x^T (P + mu mu^T) x`` ([RVGA] eqs. 82-90)."""
    alpha, nu = belief.marginal(q, X)
    lam = 2.0 * special.jj_lambda(jnp.sqrt(nu + alpha**2))  # R^{-1} of eq. (90)
    return Increment(X.T, lam, (y - 0.5) - lam * alpha)


def implicit_site(model, belief, q, X, y, max_iter):
    """Exact implicit site of a GLM from the marginal ``(alpha, nu)`` of ``q_t`` along ``x`` (m = 1).

    Logistic: the 2-D root of [RVGA] eqs. (69)-(70), curvature ``k sig'(k alpha)`` and gradient
    ``y - sig(k alpha)`` (eqs. 76-77). Other GLMs: :func:`jaxrvga.kernels.root_solvers.solve_glm`, curvature
    ``1/nu - 1/nu0`` and gradient ``(alpha - alpha0) / nu0``. Both with the previous precision.
    """
    alpha0, nu0 = belief.marginal(q, X)
    if model.has_logistic_root:
        alpha, nu, info = root_solvers.solve_logistic(alpha0[0], nu0[0], y[0], max_iter)
        k = special.probit_k(nu)
        c, coef = k * special.sig1(k * alpha), y[0] - special.sigmoid(k * alpha)
    else:
        alpha, nu, info = root_solvers.solve_glm(alpha0[0], nu0[0], y[0], model.expected_log_lik,
                                             50 if max_iter is None else max_iter)
        pos = nu0[0] > 0
        safe = jnp.where(pos, nu0[0], 1.0)
        c = jnp.where(pos, (safe - nu) / (safe * jnp.where(pos, nu, 1.0)), 0.0)
        coef = jnp.where(pos, (alpha - alpha0[0]) / safe, 0.0)
    return Increment(X.T, c[None], coef[None], prior_gain=True), info


# --------------------------------------------------------------------------- nonlinear sites

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
    factor ``X = C^T``: XLA then transposes them once (as rows (m K, d) they were transposed
    into X for each of its consumers, and the step took twice as long: BENCHMARKS.md)."""
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
    lam, Q = woodbury.symmetric_eigh(family.variance(eta) if jitter else family.fisher(eta))  # ascending
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
    ``jitter``, ``empirical``, ``fisher_rank``: :func:`linearise`."""
    C, grad = linearise(model, q.mean, x, y, jitter, empirical, fisher_rank)
    return Increment(C.T, g=grad)


def mean_rows(A):
    """The mean of the rows of ``A`` (K, d), as the product ``(1/K) 1^T A`` (on the CPU, XLA's reduction
    over the leading axis of a (10, 16 641) array is about 6x slower: BENCHMARKS.md)."""
    return jnp.full(A.shape[:1], 1.0 / A.shape[0], A.dtype) @ A


def sampled_site(model, thetas, x, y, curvature: str):
    """Monte-Carlo site from draws ``thetas`` (K, d) of a belief ([LRVGA] eqs. 41-46).

    GGN: ``X = K^{-1/2} [J_k^T R_k^T]`` and ``g = mean_k grad log p``. Hessian (dense beliefs):
    ``-E[hess]`` by its eigen-decomposition ``Q diag(lam) Q^T`` (``lam`` may be negative).
    """
    K = thetas.shape[0]
    if curvature == "hessian":
        log_lik = model.log_lik
        grads = jax.vmap(jax.grad(log_lik), in_axes=(0, None, None))(thetas, x, y)
        hess = jnp.mean(jax.vmap(jax.hessian(log_lik), in_axes=(0, None, None))(thetas, x, y), axis=0)
        lam, Q = woodbury.symmetric_eigh(-hess)
        return Increment(Q, lam, g=mean_rows(grads))
    # C comes out as (r, d, K), so X = [J_k^T R_k^T] (d, K r) is laid out as W is and its products
    # with W and with the draws are not transposed ones (a faster step, BENCHMARKS.md)
    C, grads = jax.vmap(linearise, in_axes=(None, 0, None, None), out_axes=(2, 0))(model, thetas, x, y)
    X = jnp.transpose(C, (1, 2, 0)).reshape(C.shape[1], -1) / jnp.sqrt(jnp.asarray(K, thetas.dtype))
    return Increment(X, g=mean_rows(grads))


def published_draws(prior, key, i, cfg: Iterated, q):
    """Draws of the published low-rank sampled scheme: fresh (non-antithetic) or frozen noise ([LRVGA] §4.2.2)."""
    if not isinstance(cfg.frozen_noise, bool):
        return woodbury.sample_from_noise(q.mean, q.W, q.psi, *cfg.frozen_noise)
    return woodbury.sample(key[i], q.mean, q.W, q.psi, cfg.num_samples)


def info_from(change, cfg: Iterated, iterations) -> SolverInfo:
    """Diagnostics of an iterated scheme: converged when the last pass moved the mean by <= ``tol``."""
    return solver_info(change.dtype, converged=jnp.isfinite(change) & (change <= cfg.tol),
                       residual=change, iterations=iterations)


# --------------------------------------------------------------------------- schemes as values

#: Default ``jitter`` of :func:`moment_ekf` (experiments/REPORT.md, "Networks from any prior").
MOMENT_JITTER = 0.1
#: Default ``max_move`` of the schemes that linearise or sample (same section of the report).
MAX_MOVE = 10.0


class Scheme(NamedTuple):
    """An update scheme as a value, made by its factory (:func:`exact`, ..., :func:`sampled`),
    which validated the options ``cfg``: a NamedTuple of this scheme's own options (:class:`Limited`,
    :class:`Implicit`, :class:`Linearised`, :class:`Iterated`, or a user's).

    ``step(cfg, model, belief, prior, x, y) -> (state, ok, info)`` is the unguarded step from the
    predicted belief ``prior`` (:func:`jaxrvga.filters.build` adds the prediction and the guard).
    ``requires``: the :class:`~jaxrvga.models.Model` property the scheme needs (None: any model).
    ``beliefs``: the belief types it applies to (None: any). ``needs_key``: it draws from the
    state's PRNG key.
    """

    name: str
    step: Callable
    cfg: tuple = Limited()
    requires: Optional[str] = None
    beliefs: Optional[tuple] = None
    needs_key: bool = False

    @property
    def certified(self) -> bool:
        """Whether ``step`` is one of the library's, whose ``ok`` certifies the arrays its belief's
        ``add`` wrote (the guard then checks only the others); a step of the user's is checked whole."""
        return self.step in _LIBRARY_STEPS

    def check(self, model, belief):
        """Raise ``ValueError`` where this scheme does not apply to ``model`` or ``belief``."""
        if self.requires is not None and not getattr(model, self.requires):
            raise ValueError(f"scheme {self.name!r} does not apply to the {model.kind} model")
        if self.beliefs is not None and not isinstance(belief, self.beliefs):
            names = " or ".join(t.__name__ for t in self.beliefs)
            curvature = getattr(self.cfg, "curvature", "ggn")
            what = f" with curvature={curvature!r}" if curvature != "ggn" else ""
            raise ValueError(f"scheme {self.name!r}{what} needs a {names} belief, got {type(belief).__name__}")
        noise = getattr(self.cfg, "frozen_noise", False)
        if not isinstance(noise, bool) and noise[1].shape[1] != belief.rank:
            raise ValueError(f"frozen_noise must be a pair (z, e) of shapes (K, d) and (K, {belief.rank}), "
                             f"got {noise[0].shape} and {noise[1].shape}")


def _max_move(max_move) -> Optional[float]:
    """The guard's Mahalanobis limit: a number > 0, ``inf`` (stored as None) for no limit."""
    if isinstance(max_move, bool) or not isinstance(max_move, (int, float)) or not max_move > 0:
        raise ValueError(f"max_move must be a number > 0 (inf: no limit), got {max_move!r}")
    return None if max_move == np.inf else float(max_move)


#: The curvatures of the schemes: the GGN ``J^T F J``, the Hessian, the empirical Fisher.
CURVATURES = ("ggn", "hessian", "empirical")


def _curvature(curvature, allowed):
    check_choice("curvature", curvature, CURVATURES)
    if curvature not in allowed:
        users = {"hessian": "scheme 'sampled'", "empirical": "schemes 'ekf' and 'moment_ekf'"}[curvature]
        raise ValueError(f"curvature={curvature!r} is only used by {users}")
    return curvature


def _positive_count(name, value, minimum=1):
    value = positive_int(name, value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _absorb(cfg, belief, prior, inc, info):
    """The step of ``inc`` (:func:`absorb`), its mean step limited to ``cfg.max_move``
    (:func:`limit_move`, flagged in ``info`` where shortened): ``(state, ok, info)``."""
    new, ok = absorb(belief, prior, inc)
    new, calm = limit_move(prior, new, inc, cfg.max_move)
    return new, ok, info._replace(converged=info.converged & calm)


def _step_exact(cfg, model, belief, prior, X, y):
    return _absorb(cfg, belief, prior, exact_site(model, prior, X, y), solver_info(prior.mean.dtype))


def _step_implicit(cfg, model, belief, prior, X, y):
    if X.shape[0] != 1:
        raise ValueError(f"x: the implicit scheme takes one observation per update (x of shape (d,)), "
                         f"got a minibatch of {X.shape[0]}; use scheme='explicit', 'extragrad' or 'ekf'")
    inc, info = implicit_site(model, belief, prior, X, y, cfg.max_iter)
    info = solver_info(info.residual.dtype, info.converged, info.residual, info.iterations)
    return _absorb(cfg, belief, prior, inc, info)


def _step_moments(cfg, model, belief, prior, X, y):
    new, ok, _, calm = iterate(belief, prior, lambda q, i: moment_site(model, belief, q, X, y), cfg)
    return new, ok, solver_info(prior.mean.dtype, converged=calm, iterations=cfg.num_iters)


def _step_qkf(cfg, model, belief, prior, X, y):
    return _absorb(cfg, belief, prior, qkf_site(belief, prior, X, y), solver_info(prior.mean.dtype))


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
    return _absorb(cfg, belief, prior, inc, solver_info(prior.mean.dtype))


def _step_sampled(cfg, model, belief, prior, x, y):
    key, sub = jax.random.split(prior.key)
    noise = belief.noise(sub, cfg.num_samples, prior.mean.shape[0], prior.mean.dtype)  # once: common to the passes

    def evaluate(q, i):
        return sampled_site(model, belief.draw(q, noise), x, y, cfg.curvature)

    new, ok, change, calm = iterate(belief, prior, evaluate, cfg)
    info = info_from(change, cfg, cfg.num_iters)
    return new._replace(key=key), ok, info._replace(converged=info.converged & calm)


def _step_published_sampled(cfg, model, belief, prior, x, y):
    """[LRVGA] eqs. 41-47 and 143-145 as published: samples of the projected ``q_hat``, no correction."""
    if cfg.frozen_noise is False:
        key, *keys = jax.random.split(prior.key, 3)
    else:
        key, keys = prior.key, (prior.key, prior.key)
    if not isinstance(cfg.frozen_noise, bool) and cfg.frozen_noise[0].shape[1] != prior.mean.shape[0]:
        z, e = cfg.frozen_noise  # the width of e was checked against the rank by Scheme.check
        raise ValueError(f"frozen_noise must have shapes (K, {prior.mean.shape[0]}) and (K, {e.shape[1]}) for "
                         f"this state, got {z.shape} and {e.shape}")

    def evaluate(q, i):
        return sampled_site(model, published_draws(prior, keys, i, cfg, q), x, y, "ggn")

    new, ok, _, _ = iterate(belief, prior, evaluate, cfg)  # published: no max_move
    return new._replace(key=key), ok, solver_info(prior.mean.dtype)


#: The library's step functions (:attr:`Scheme.certified`).
_LIBRARY_STEPS = (_step_exact, _step_implicit, _step_moments, _step_qkf, _step_ekf, _step_sampled,
                  _step_published_sampled)


def exact(*, max_move=np.inf) -> Scheme:
    """The Kalman step of a linear-Gaussian model ([RVGA] Thm 2, eqs. 40-42); exact, so no ``max_move``
    by default."""
    return Scheme("exact", _step_exact, Limited(_max_move(max_move)), "has_exact_update")


def implicit(*, max_iter: Optional[int] = None, max_move=np.inf) -> Scheme:
    """The implicit (proximal) step of a GLM, one observation at a time ([RVGA] eqs. 69-77):
    expectations under the new belief by a root solve of at most ``max_iter`` iterations (default:
    the solver's)."""
    max_iter = None if max_iter is None else positive_int("max_iter", max_iter)
    return Scheme("implicit", _step_implicit, Implicit(max_iter, _max_move(max_move)), "is_glm")


def explicit(*, max_move=MAX_MOVE) -> Scheme:
    """A GLM's expectations under the previous belief ([RVGA] eqs. 30-31, 78-80)."""
    return Scheme("explicit", _step_moments, Iterated(max_move=_max_move(max_move)), "is_glm")


def extragrad(*, correction: bool = True, update_cov_twice: bool = True, max_move=MAX_MOVE) -> Scheme:
    """Mirror prox for GLMs ([LRVGA] eqs. 139-145): a second evaluation under the explicit step's belief.

    ``correction`` adds the natural-parameter term that makes it exact on linear-Gaussian models
    (the paper's eq. 142 omits it); ``update_cov_twice=False`` keeps the first pass's curvature.
    ``correction=False, update_cov_twice=True`` is the paper's form.
    """
    cfg = Iterated(2, bool(correction), bool(update_cov_twice), _max_move(max_move))
    return Scheme("extragrad", _step_moments, cfg, "is_glm")


def ekf(*, curvature: str = "ggn", max_move=MAX_MOVE, fisher_rank: Optional[int] = None) -> Scheme:
    """The extended Kalman step, linearised at the mean ([RVGA] Thm 3, eqs. 54-55, 81): curvature
    ``J^T F J`` (``"ggn"``) or one gradient column per observation (``"empirical"``);
    ``fisher_rank``: the leading directions of a vector output's Fisher alone (:func:`linearise`)."""
    cfg = Linearised(_curvature(curvature, ("ggn", "empirical")), 0.0, _max_move(max_move),
                     _fisher_rank(fisher_rank, curvature))
    return Scheme("ekf", _step_ekf, cfg)


def moment_ekf(*, jitter: float = MOMENT_JITTER, curvature: str = "ggn", max_move=MAX_MOVE,
               fisher_rank: Optional[int] = None) -> Scheme:
    """The EKF of a Gaussian likelihood with the output's mean and variance ``+ jitter``
    (:func:`moment_weights`), linearised at the mean: the default for nonlinear models;
    ``fisher_rank``: as :func:`ekf`."""
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 < jitter < np.inf:
        raise ValueError(f"jitter must be a number > 0, got {jitter!r}")
    cfg = Linearised(_curvature(curvature, ("ggn", "empirical")), float(jitter), _max_move(max_move),
                     _fisher_rank(fisher_rank, curvature))
    return Scheme("moment_ekf", _step_ekf, cfg)


def _fisher_rank(rank, curvature):
    """``rank``: None or an integer >= 1, with the GGN curvature (the empirical one has no root to cut)."""
    if rank is None:
        return None
    rank = positive_int("fisher_rank", rank)
    if curvature != "ggn":
        raise ValueError(f"fisher_rank truncates the GGN's Fisher; curvature={curvature!r} has none")
    return rank


def qkf(*, max_move=MAX_MOVE) -> Scheme:
    """The Jaakkola-Jordan quadratic bound of the logistic model ([RVGA] eqs. 82-90)."""
    return Scheme("qkf", _step_qkf, Limited(_max_move(max_move)), "has_logistic_root")


def sampled(*, num_samples: int = 100, num_iters: int = 3, tol: float = 1e-2, curvature: str = "ggn",
            max_move=MAX_MOVE) -> Scheme:
    """Monte-Carlo expectations for any model ([LRVGA] eqs. 41-46): ``num_iters`` passes of the
    implicit iteration (1: explicit), ``num_samples`` antithetic draws each (common to the passes).

    ``curvature``: ``"ggn"`` (``E[J^T F J]``) or ``"hessian"`` (``-E[hess]``, dense beliefs only).
    ``info.converged`` is False when the last pass moved the mean by more than ``tol (1 + |mu|)``.
    """
    num_samples = _positive_count("num_samples", num_samples, 2)
    tol = float(tol)
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    cfg = Iterated(_positive_count("num_iters", num_iters), True, True, _max_move(max_move), num_samples,
                   _curvature(curvature, ("ggn", "hessian")), tol)
    return Scheme("sampled", _step_sampled, cfg, beliefs=(Dense,) if curvature == "hessian" else None,
                  needs_key=True)


def published_sampled(*, num_samples: int = 10, update_cov_twice: bool = False, frozen_noise=False) -> Scheme:
    """The sampled scheme of the published L-RVGA ([LRVGA] §4.2.2, eqs. 143-145): two passes without
    correction, the first pass's curvature kept (``update_cov_twice=False``, the authors' code), fresh draws of the projected belief (or ``frozen_noise``: ``True`` reuses the
    state's key at every step, as the authors' code; a pair ``(z, e)`` (K, d), (K, p) gives the base
    noise itself). Low-rank beliefs; no ``max_move`` (every step as published)."""
    cfg = Iterated(2, False, bool(update_cov_twice), None, _positive_count("num_samples", num_samples),
                   tol=0.0, frozen_noise=_frozen(frozen_noise))
    return Scheme("sampled", _step_published_sampled, cfg, beliefs=(PublishedLowRank,),
                  needs_key=isinstance(cfg.frozen_noise, bool))


def _frozen(frozen_noise):
    if isinstance(frozen_noise, bool):
        return frozen_noise
    z, e = map(jnp.asarray, frozen_noise)
    if z.ndim != 2 or e.ndim != 2 or e.shape[0] != z.shape[0]:
        raise ValueError(f"frozen_noise must be a pair (z, e) of shapes (K, d) and (K, p), got {z.shape} and {e.shape}")
    if z.shape[0] < 1:
        raise ValueError(f"frozen_noise must hold K >= 1 samples, got shapes {z.shape} and {e.shape}")
    return (z, e)


__all__ = ["Scheme", "CURVATURES", "exact", "implicit", "explicit", "extragrad", "ekf", "moment_ekf", "qkf", "sampled",
           "published_sampled", "MOMENT_JITTER", "MAX_MOVE", "Increment", "Limited", "Implicit", "Linearised", "Iterated", "absorb", "limit_move",
           "iterate", "moment_weights", "exact_site", "moment_site", "ekf_glm_site", "qkf_site", "implicit_site",
           "linearise", "ekf_site", "sampled_site", "info_from"]
