"""What every update scheme shares: the increment of a step, the options, the limit on a move.

An R-VGA step ([RVGA] eqs. 28-29, [LRVGA] eqs. 7-8) moves the belief to

    P_t^{-1} = P_{t-1}^{-1} + X diag(c) X^T,        mu_t = mu_{t-1} + P_t g

A scheme computes the curvature factor ``X`` (d x m, with weights ``c``) and the gradient ``g``
from the observation, as an :class:`Increment`; the belief does the algebra (:func:`absorb`).
Every pass of :func:`iterate` restarts from ``q_{t-1}``: pass i evaluates the site under the
belief of pass i - 1, so one pass is the explicit scheme, two the extragradient, and the fixed
point the implicit one. A scheme is a value, :class:`Scheme`, made by its factory.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..core import SolverInfo, solver_info
from ..validation import check_choice, positive_int


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
    frozen_draws: object = False


def absorb(belief, prior, inc: Increment):
    """``belief`` after the precision step of ``inc`` and the mean step ``mu + P g`` (unprojected).

    Returns ``(state, ok)``; ``ok`` is False where the step is not positive definite.

    Args:
      belief: a :class:`~jaxrvga.beliefs.Belief`.
      prior: its state before the step.
      inc: the site's :class:`Increment`.

    Returns:
      ``(state, ok)``: the unprojected state and a 0-d bool.
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

    Args:
      prior: the state before the step.
      new: the state after :func:`absorb`.
      inc: the step's :class:`Increment`.
      max_move: the limit, > 0, or None.

    Returns:
      ``(state, calm)``: ``new`` with its mean step shortened where needed, and a 0-d bool.
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

    ``evaluate(q, i) -> Increment`` gives the site under the belief ``q`` of pass ``i - 1`` (``i`` is
    traced beyond two passes: the passes after the first are one ``lax.fori_loop`` body, compiled
    once whatever ``num_iters`` is). With
    ``correction``, the gradient of pass i > 0 gains ``X diag(c) X^T (mu_q - mu_{t-1})`` (the mirror
    step in natural parameters); without ``update_cov_twice`` the curvature of the first pass is
    kept. Each pass's mean step is limited by :func:`limit_move`. Returns ``(state, ok, change,
    calm)``, ``change`` the relative move of the mean in the last pass, ``calm`` False where a pass was
    shortened.

    Args:
      belief: a :class:`~jaxrvga.beliefs.Belief`.
      prior: its state before the step, ``q_{t-1}``.
      evaluate: ``evaluate(q, i) -> Increment``.
      cfg: the :class:`Iterated` options (``num_iters``, ``correction``, ``update_cov_twice``, ``max_move``).

    Returns:
      ``(state, ok, change, calm)``: the unprojected state, 0-d bools ``ok`` and ``calm`` and the 0-d
      float ``change``.
    """
    q, first, ok, calm, change = _one_pass(belief, prior, evaluate, cfg, prior, 0, None)

    def later_pass(i, carry):
        q, _, calm, _ = carry
        new, _, ok, pass_calm, change = _one_pass(belief, prior, evaluate, cfg, q, i, first)
        return new, ok, calm & pass_calm, change

    carry = (q, ok, calm, change)
    if cfg.num_iters > 2:  # one compiled body for the passes after the first (the same program)
        carry = jax.lax.fori_loop(1, cfg.num_iters, later_pass, carry)
    elif cfg.num_iters == 2:
        carry = later_pass(1, carry)
    q, ok, calm, change = carry
    return q, ok, change, calm


def _one_pass(belief, prior, evaluate, cfg: Iterated, q, i, first):
    """Pass ``i`` of :func:`iterate` from ``q``: ``(state, increment, ok, calm, change)``; ``first`` is
    the first pass's increment (None in the first pass), whose curvature the later passes keep
    without ``update_cov_twice``."""
    inc = evaluate(q, i)
    if first is not None:
        if cfg.correction:
            extra = inc.curvature_times(q.mean - prior.mean)
            inc = inc._replace(g=extra if inc.g is None else inc.g + extra)
        if not cfg.update_cov_twice:
            inc = first._replace(coef=inc.coef, g=inc.g)
    new, ok = absorb(belief, prior, inc)
    new, calm = limit_move(prior, new, inc, cfg.max_move)
    change = jnp.linalg.norm(new.mean - q.mean) / (1.0 + jnp.linalg.norm(prior.mean))
    return new, inc, ok, calm, change


def info_from(change, cfg: Iterated, iterations) -> SolverInfo:
    """Diagnostics of an iterated scheme: converged when the last pass moved the mean by <= ``tol``.

    Args:
      change: the relative move of the mean in the last pass, a 0-d float.
      cfg: the :class:`Iterated` options (its ``tol``).
      iterations: the number of passes.

    Returns:
      A :class:`~jaxrvga.core.SolverInfo` of scalars.
    """
    return solver_info(change.dtype, converged=jnp.isfinite(change) & (change <= cfg.tol),
                       residual=change, iterations=iterations)


#: Default ``max_move`` of the schemes that linearise or sample (same section of the report).
MAX_MOVE = 10.0


class Scheme(NamedTuple):
    """An update scheme as a value, made by its factory (:func:`~jaxrvga.schemes.exact`, ...,
    :func:`~jaxrvga.schemes.sampled`),
    which validated the options ``cfg``: a NamedTuple of this scheme's own options (:class:`Limited`,
    :class:`Implicit`, :class:`Linearised`, :class:`Iterated`, or a user's).

    ``step(cfg, model, belief, prior, x, y) -> (state, ok, info)`` is the unguarded step from the
    predicted belief ``prior`` (:func:`jaxrvga.build` adds the prediction and the guard).
    ``requires``: the :class:`~jaxrvga.models.Model` property the scheme needs (None: any model).
    ``beliefs``: the belief types it applies to (None: any). ``needs_key``: it draws from the
    state's PRNG key. ``certified``: its ``ok`` certifies the arrays its belief's ``add`` wrote, so
    that the guard checks only the others (the library's factories set it; a step of the user's,
    or a library scheme whose step was replaced, leaves it False and has every array checked).
    ``tempers``: its step absorbs a tempered model's likelihood to the model's ``power``
    (:func:`absorb_limited`); a scheme without it refuses a model of ``power < 1``.
    """

    name: str
    step: Callable
    cfg: tuple = Limited()
    requires: Optional[str] = None
    beliefs: Optional[tuple] = None
    needs_key: bool = False
    certified: bool = False
    tempers: bool = False

    def check(self, model, belief):
        """Raise ``ValueError`` where this scheme does not apply to ``model`` or ``belief``.

        Args:
          model: the filter's observation model.
          belief: the filter's belief.

        Returns:
          None.
        """
        if self.requires is not None and not getattr(model, self.requires):
            raise ValueError(f"scheme {self.name!r} does not apply to the {model.kind} model")
        if getattr(model, "power", 1.0) != 1.0 and not self.tempers:
            raise ValueError(f"scheme {self.name!r} does not take a tempered model (jr.models.tempered, power "
                             f"{model.power}); the schemes 'exact', 'ekf', 'moment_ekf' and 'qkf' do")
        if self.beliefs is not None and not isinstance(belief, self.beliefs):
            names = " or ".join(t.__name__ for t in self.beliefs)
            curvature = getattr(self.cfg, "curvature", "ggn")
            what = f" with curvature={curvature!r}" if curvature != "ggn" else ""
            raise ValueError(f"scheme {self.name!r}{what} needs a {names} belief, got {type(belief).__name__}")
        noise = getattr(self.cfg, "frozen_draws", False)
        if not isinstance(noise, bool) and noise[1].shape[1] != belief.rank:
            raise ValueError(f"frozen_draws must be a pair (z, e) of shapes (K, d) and (K, {belief.rank}), "
                             f"got {noise[0].shape} and {noise[1].shape}")


def check_max_move(max_move) -> Optional[float]:
    """The guard's Mahalanobis limit: a number > 0, ``inf`` (stored as None) for no limit.

    Args:
      max_move: the value given.

    Returns:
      A float, or None for ``inf``; raises ``ValueError`` otherwise.
    """
    if isinstance(max_move, bool) or not isinstance(max_move, (int, float)) or not max_move > 0:
        raise ValueError(f"max_move must be a number > 0 (inf: no limit), got {max_move!r}")
    return None if max_move == np.inf else float(max_move)


#: The curvatures of the schemes: the GGN ``J^T F J``, the Hessian, the empirical Fisher.
CURVATURES = ("ggn", "hessian", "empirical")


def check_curvature(curvature, allowed):
    """``curvature`` checked: one of :data:`CURVATURES` and one that the scheme takes.

    Args:
      curvature: the name given.
      allowed: the names the scheme takes.

    Returns:
      ``curvature``; raises ``ValueError`` naming the schemes that take it otherwise.
    """
    check_choice("curvature", curvature, CURVATURES)
    if curvature not in allowed:
        users = {"hessian": "scheme 'sampled'", "empirical": "schemes 'ekf' and 'moment_ekf'"}[curvature]
        raise ValueError(f"curvature={curvature!r} is only used by {users}")
    return curvature


def count_at_least(name, value, minimum=1):
    """``value`` checked: an integer >= ``minimum``.

    Args:
      name: the name in the message.
      value: the value given.
      minimum: the least value allowed.

    Returns:
      ``value`` as an int; raises ``ValueError`` otherwise.
    """
    value = positive_int(name, value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def temper(inc: Increment, power: float) -> Increment:
    """The increment of the likelihood raised to ``power`` (:func:`~jaxrvga.models.tempered`): its
    curvature weights and its gradient times ``power``.

    Args:
      inc: a site's :class:`Increment`.
      power: a Python float in (0, 1]; 1 returns ``inc`` itself.

    Returns:
      The tempered :class:`Increment`.
    """
    if power == 1.0:
        return inc
    dtype = inc.X.dtype
    c = jnp.full(inc.X.shape[1:], power, dtype) if inc.c is None else power * inc.c
    scaled = [None if v is None else power * v for v in (inc.coef, inc.g)]
    return inc._replace(c=c, coef=scaled[0], g=scaled[1])


def absorb_limited(cfg, belief, prior, inc, info, power: float = 1.0):
    """The step of ``inc`` tempered to ``power`` (:func:`temper`, :func:`absorb`), its mean step limited
    to ``cfg.max_move`` (:func:`limit_move`, flagged in ``info`` where shortened): ``(state, ok, info)``.

    Args:
      cfg: the scheme's options (its ``max_move``).
      belief: a :class:`~jaxrvga.beliefs.Belief`.
      prior: its state before the step.
      inc: the site's :class:`Increment`.
      info: the step's :class:`~jaxrvga.core.SolverInfo`.
      power: the model's ``power`` (:func:`~jaxrvga.models.tempered`).

    Returns:
      ``(state, ok, info)``.
    """
    inc = temper(inc, power)
    new, ok = absorb(belief, prior, inc)
    new, calm = limit_move(prior, new, inc, cfg.max_move)
    return new, ok, info._replace(converged=info.converged & calm)


__all__ = ["Scheme", "Increment", "Limited", "Implicit", "Linearised", "Iterated", "absorb", "limit_move", "iterate", "temper", "absorb_limited", "info_from", "check_max_move", "check_curvature", "count_at_least", "CURVATURES", "MAX_MOVE"]
