r"""The prior learned on the stream: each member of a model average learns its prior precision in the
same pass, without a grid (``jr.model_average(flt, learn_prior=v)``).

Each member's prior precision ``a`` (of
``N(m0, I / a)``, ``m0`` its initial mean) is learned in the same pass, without a grid. With
``lam = log a``, the member's belief under another prior is the belief moved in its own form
(:func:`jaxrvga.evidence.shift_prior`: exact for the linear-Gaussian and normal-inverse-gamma models,
the Gauss-Newton form otherwise), so each step's prequential score has a derivative
``g = d/dlam log sum_s w_s p_s(y_t | x_t)`` (the member's forecasters, their weights held), one
forward-mode derivative of the log predictives. ``lam`` then has the Gaussian belief of a
Gauss-Newton filter, from the hyper-prior ``N(log a0, learn_prior)``: ``I <- I + g^2``,
``lam <- lam + g / I``, and the member is moved to the new prior before it absorbs the observation.
The sum of the squared gradients stands for the evidence's curvature, so a prior far too tight for
the data (whose gradients are large) moves slowly: from 1000 times too tight it moves a factor 2.5 in
60 observations of a d = 20 regression, from 1000 times too broad to within a factor 4 of the
evidence's maximum (tests/test_learned_prior.py).

**One precision per layer** (``prior_groups``): the flat parameters split into G contiguous blocks
(:func:`block_sizes`: a network's layers), block ``g`` of prior precision ``a_g``. ``lam = log a`` (G,) then
has a Gaussian belief with the information ``I <- I + g g^T`` (G x G) and ``lam <- lam + I^{-1} g``, from a
hierarchical hyper-prior: the blocks' mean log precision ``N(log a0, learn_prior)``, each block's
deviation from it of variance ``spread`` (:data:`GROUP_SPREAD`), so that a block the stream says little
about stays near the others (experiments/REPORT.md, "One prior precision per layer"). One block is the
scalar case above.

**The member moved when its prior is off by the tolerance** (``prior_tolerance``): ``lam`` moves every
step, but the member is moved to it (a refactorisation, O(d p^2) for a low-rank belief) only once
``lam`` is more than :data:`PRIOR_TOLERANCE` from the log precisions the member is under
(``LearnedPrior.member_log_precision``), and the slopes are taken there. For a linear-Gaussian model
the member is then exactly the posterior under its own prior, as with 0, which moves it every step
(tests/test_learned_prior.py).

The forecasters, their scales and their weights are :mod:`jaxrvga.average`'s; this module holds the
learned prior's state, its hyper-prior, the slopes of the forecasters' scores and the move.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import beliefs, io, noise
from . import file_checks as fc
from .core import Filter
from .evidence import shift_prior, shift_prior_tangent
from .kernels.lowrank import symmetrize
from .models import check_observation, linearize
from .validation import check_positive, check_tolerance, is_concrete


#: The recommended variance of the hyper-prior of a learned log prior precision
#: (``model_average(flt, learn_prior=LEARN_PRIOR)``): a factor ``e^0.71 = 2`` either side at one standard
#: deviation. Chosen over 0.25, 1 and 4 on the digits and diabetes networks (experiments/REPORT.md, "Ten
#: seeds, and the hyper-prior of the learned prior"): over ten seeds its mean test NLPD was at or below
#: 4's on all three, with a smaller spread.
LEARN_PRIOR = 0.5

#: The recommended variance of each block's log prior precision about the blocks' mean, where the
#: prior is learned per block (``model_average(flt, learn_prior=LEARN_PRIOR, prior_groups=sizes)``): a
#: factor ``e^0.45 = 1.56`` at one standard deviation before any data. Chosen over 0.05 on seeds 5-9 of the
#: digits and diabetes networks (experiments/REPORT.md, "One prior precision per layer").
GROUP_SPREAD = 0.2

#: The recommended tolerance of a member's prior: the member is moved to the learned log prior
#: precisions only once they are this far (in any block) from those it was last moved to, a factor
#: ``e^0.02`` (2 %); the learned precisions themselves move every step. Each move refactorises the
#: member (O(d p^2) for a low-rank one); the steps of ``log a`` are mostly far smaller (median 0.001 on
#: the binary digits network), so a network's member is moved on one step in four to six
#: (experiments/REPORT.md, "The per-layer prior as the default"). 0 moves it every step.
PRIOR_TOLERANCE = 0.02


class HyperPrior(NamedTuple):
    """The hyper-prior of the learned log prior precisions (static): ``variance`` that of the blocks'
    mean log precision, ``sizes`` the lengths of the G contiguous blocks of the flat parameters with a
    precision each (None: one), ``spread`` the variance of each block's deviation from the mean,
    ``tolerance`` how far (in log precision) a member's prior may lag the learned one."""

    variance: float
    sizes: Optional[tuple]
    spread: float
    tolerance: float

    @property
    def num_groups(self) -> int:
        """G, the number of blocks."""
        return 1 if self.sizes is None else len(self.sizes)

    def information(self, dtype):
        """The hyper-prior's information (G, G): ``Sigma0 = variance 1 1^T + spread (I - 1 1^T / G)``
        inverted in closed form (the mean's variance is ``variance`` whatever G)."""
        G = self.num_groups
        J = jnp.full((G, G), 1.0 / G, dtype)
        return J / (G * self.variance) + (jnp.eye(G, dtype=dtype) - J) / self.spread

    def index(self, d: int):
        """The block of each of the ``d`` parameters, (d,) int32."""
        if self.sizes is None:
            return np.zeros(d, np.int32)
        if sum(self.sizes) != d:
            raise ValueError(f"prior_groups: the block sizes sum to {sum(self.sizes)}, but the members have "
                             f"d = {d} parameters")
        return np.repeat(np.arange(len(self.sizes), dtype=np.int32), self.sizes)


class LearnedPrior(NamedTuple):
    """The members' priors learned on the stream (:func:`jaxrvga.model_average` with ``learn_prior``): each
    member's log prior precision of each block ``log_precision`` (K, G), its information ``information``
    (K, G, G) (the hyper-prior's plus ``g g^T`` of the evidence gradients so far), its prior mean
    ``mean`` (K, d) (the member's initial mean), and ``member_log_precision`` (K, G), the log prior
    precisions the member's belief is under (within the filter's ``prior_tolerance`` of
    ``log_precision``). G = 1 without ``prior_groups``."""

    log_precision: jax.Array
    information: jax.Array
    mean: jax.Array
    member_log_precision: Optional[jax.Array] = None  # absent from files written before it: log_precision


def block_sizes(tree) -> tuple:
    """The number of parameters of each top-level entry of ``tree``, in the order
    :func:`jax.flatten_util.ravel_pytree` lays them out: ``prior_groups`` of one prior precision per
    layer for a network whose parameters are a dict or list of layers (a flax model: its
    ``variables["params"]``).

    A tree of one entry, or one with an entry holding no parameter, is refused: it is not a list of
    layers (a flax model's whole ``variables``, an equinox MLP's parameters rather than their
    ``.layers``), and one precision for all is ``prior_groups=None``.

    Args:
      tree: a pytree of arrays whose top-level entries are the blocks (e.g. the layers).

    Returns:
      A tuple of positive ints, one per top-level entry, at least two.
    """
    entries = jax.tree_util.tree_leaves(tree, is_leaf=lambda node: node is not tree)
    sizes = tuple(sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(e)) for e in entries)
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"tree must have two or more top-level entries (the layers), each with parameters, got "
                         f"sizes {sizes}: pass the layers themselves (a flax model's variables['params'], an "
                         f"equinox MLP's params.layers); one prior precision for all is prior_groups=None")
    return sizes


def initial_prior(hyper: HyperPrior, members, prior_precision, K) -> LearnedPrior:
    """The members' :class:`LearnedPrior` at the start: ``log(prior_precision)`` (a scalar, (K,) or
    (K, G)), the hyper-prior's information, the members' means as the prior means."""
    G = hyper.num_groups
    if prior_precision is None:
        raise ValueError("prior_precision is needed where the prior is learned (model_average(..., learn_prior=v)): "
                         f"the prior precision each member's initial state was built with, a scalar, ({K},) or "
                         f"({K}, {G})")
    mean = getattr(members, "mean", None)
    if mean is None or jnp.ndim(mean) != 2:
        raise ValueError("learn_prior needs members with a (K, d) mean (a dense, low-rank or diagonal belief)")
    hyper.index(mean.shape[1])  # the blocks cover the parameters
    a0 = jnp.asarray(prior_precision, mean.dtype)
    if a0.shape not in ((), (K,), (K, G)):
        raise ValueError(f"prior_precision must be a scalar, ({K},) one per member or ({K}, {G}) one per member "
                         f"and block, got {a0.shape}")
    if is_concrete(a0):
        check_positive("prior_precision", a0)
    log_a = jnp.broadcast_to(jnp.log(a0).reshape(a0.shape + (1,) * (2 - a0.ndim)), (K, G))
    return LearnedPrior(log_a, jnp.broadcast_to(hyper.information(mean.dtype), (K, G, G)), mean, log_a)


def _positive_variance(name, value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a variance > 0, got {value!r}") from None
    if isinstance(value, bool) or not (np.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite variance > 0, got {value!r}")
    return v


def check_learn_prior(learn_prior, flt: Filter, prior_groups=None, group_spread=GROUP_SPREAD,
                      prior_tolerance=PRIOR_TOLERANCE) -> HyperPrior:
    """The :class:`HyperPrior` of ``learn_prior`` (a finite variance ``> 0``), ``prior_groups`` (None or
    positive block sizes), ``group_spread`` (a finite variance ``> 0``) and ``prior_tolerance`` (finite,
    ``>= 0``), for a filter without dynamics."""
    v = _positive_variance("learn_prior", learn_prior)
    spread = _positive_variance("group_spread", group_spread)
    tolerance = float(check_tolerance("prior_tolerance", prior_tolerance))
    spec = getattr(flt, "spec", None)
    if flt.predict is not None and not (spec is not None and spec.dynamics.is_identity):
        raise ValueError("learn_prior needs a filter without dynamics: the prior it learns is that of a static "
                         "parameter")
    sizes = None
    if prior_groups is not None:
        try:
            given = tuple(prior_groups)  # once: a generator is read a single time
            sizes = tuple(int(n) for n in given)
            ok = len(sizes) > 0 and all(n == m and n > 0 for n, m in zip(sizes, given))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"prior_groups must be None or a sequence of positive block sizes summing to d, "
                             f"got {prior_groups!r}")
    return HyperPrior(v, sizes, spread, tolerance)


def _mixture_weights(log_weight, lp):
    """The forecasters' posterior weights after ``lp`` (a NaN score: weight 0)."""
    return jax.nn.softmax(log_weight + jnp.where(jnp.isnan(lp), -jnp.inf, lp))


def _mixed(post, lp):
    """``sum_s post_s lp_s`` over the forecasters of weight > 0 (a NaN score of weight 0 left out)."""
    return jnp.sum(jnp.where(post > 0, post * lp, 0.0), axis=-1)


def scores_and_slope(model, scores, densities, member, x, y, directions, m0, log_weight):
    """The forecasters' log predictives of ``(x, y)`` (S,), the gradient (G,) of their mixture's
    ``log sum_s w_s p_s(y | x)`` (weights ``w`` of ``log_weight``) in the member's log prior precisions
    along ``directions`` (G, d) (the move of the precision by ``t directions[g]`` at ``t = 0``,
    :func:`jaxrvga.evidence.shift_prior`; ``g_g = sum_s post_s d lp_s / dt_g``), and the predictor's
    moments ``(eta, V)`` they were taken from (None where they were not formed). ``scores(member)`` gives
    the forecasters' log predictives of a member, ``densities(y, eta, V, stats)`` the same from the
    predictor's moments and the member's noise statistics (None: a known noise).

    For one joint predictor ``eta ~ N(h(m), J P J^T)`` (:func:`jaxrvga.models.linearize`: a GLM, a
    nonlinear model, a minibatch model with a learned noise variance) from its moments: the move changes
    the mean by ``dm = -P D u`` (``D = diag(direction)``, ``u = m - m0``), ``eta`` by ``J dm``, ``J`` by its
    derivative ``dJ`` along ``dm`` (0 for a GLM), the precision by ``D`` (``dP = -P D P``), so ``dV = dJ U
    + U^T dJ^T - U^T D U`` with ``U = P J^T``, and a learned noise's rate by ``u^T D u / 2``. The gradient
    is taken in reverse: with ``(c, C, c_b)`` the mixture's gradient in ``(eta, V, rate)`` (the posterior
    weights held), ``r = J^T c + sum_i H_i q_i`` (``q = (C + C^T) U``, ``H_i`` the Hessian of output i) is
    one vector-Jacobian product through ``(eta, J)``, and then ``g = directions @ (-u * P r - diag(U^T C
    U) + c_b u^2 / 2)``: one solve and one product for all G blocks, about the cost of one forward-mode
    tangent whatever G. This is the derivative of ``scores`` through the moved belief without
    differentiating the belief's own factors. Otherwise (a minibatch model's inputs each their own
    predictor), forward mode through ``scores`` along each direction's
    :func:`jaxrvga.evidence.shift_prior_tangent`."""
    stats = noise.stats_of(member, model.family.learned_noise)
    if model.per_input is not None and stats is None:
        def along(direction):
            return jax.jvp(scores, (member,), (shift_prior_tangent(member, direction, m0),))

        lp, slopes = jax.vmap(along, out_axes=(None, 0))(directions)
        return lp, _mixed(_mixture_weights(log_weight, lp), slopes), None
    belief, st = beliefs.of_state(member)
    x, y = check_observation(st, x, y, model)
    u = st.mean - m0
    (eta, J), pullback = jax.vjp(lambda t: linearize(model, t, x), st.mean)
    U = jax.vmap(lambda row: belief.solve(st, row))(J)  # (k, d): the rows of (P J^T)^T
    V = symmetrize(J @ U.T)  # J P J^T from the same solves
    rate = None if stats is None else stats.rate

    def log_densities(eta, V, rate):
        return densities(y, eta, V, None if stats is None else stats._replace(rate=rate))

    lp, densities_pullback = jax.vjp(log_densities, eta, V, rate)
    post = _mixture_weights(log_weight, lp)
    c, C, c_b = densities_pullback(jnp.where(post > 0, post, 0.0))  # the mixture's gradient, weights held
    r = pullback((c, (C + C.T) @ U))[0]
    per_parameter = -u * belief.solve(st, r) - jnp.einsum("id,ij,jd->d", U, C, U)
    if stats is not None:
        per_parameter = per_parameter + (0.5 * c_b) * u * u
    return lp, directions @ per_parameter, (eta, V)


def move_prior(member, g, prior, index, tolerance=0.0, power: float = 1.0):
    """One member's prior moved by one Fisher-scoring step of its forecasters' prequential evidence.

    With ``lam = log a`` the blocks' log prior precisions (G,) and ``q(lam)`` the member's belief under
    the prior moved in its own form (:func:`jaxrvga.evidence.shift_prior`), ``g = d/dlam log sum_s w_s
    p_s(y | x)`` (the forecasters' mixture, :func:`scores_and_slope`, taken at the member's own prior
    ``prior.member_log_precision``); then ``I <- I + g g^T``, ``lam <- lam + I^{-1} g`` (the Gaussian
    belief over ``lam`` of a Gauss-Newton filter, started from the hyper-prior, :class:`HyperPrior`).
    A tempered model's ``power`` p (:func:`jaxrvga.models.tempered`) scores ``p log sum_s w_s p_s``:
    ``I <- I + p g g^T``, ``lam <- lam + I^{-1} p g``, so that E passes at ``p = 1/E`` count each
    observation's evidence once.
    The member is moved to ``lam`` (``index`` (d,): each parameter's block) where its own prior is more
    than ``tolerance`` from it in some block (0: every step), and keeps its prior otherwise. A step whose
    gradient is not finite, or whose move breaks the belief, keeps the prior and is flagged. Returns
    ``(member, prior, ok)``."""
    lam, m0, at = prior.log_precision, prior.mean, prior.member_log_precision
    information = prior.information + power * jnp.outer(g, g)
    target = lam + jnp.linalg.solve(information, power * g)
    finite = jnp.all(jnp.isfinite(target))
    due = finite & (jnp.max(jnp.abs(target - at)) > tolerance)

    def moved(member):
        new, ok = shift_prior(member, (jnp.exp(target) - jnp.exp(at))[index], m0)
        ok = ok & jnp.all(jnp.isfinite(new.mean))
        return jax.tree_util.tree_map(lambda n, o: jnp.where(ok, n, o), new, member), ok

    member, ok = jax.lax.cond(due, moved, lambda member: (member, finite), member)
    prior = LearnedPrior(jnp.where(ok, target, lam), jnp.where(ok, information, prior.information), m0,
                         jnp.where(ok & due, target, at))
    return member, prior, ok


def _check_learned_prior(p):
    """``LearnedPrior``: ``log_precision`` and ``member_log_precision`` (K, G) finite, ``information`` (K,
    G, G) finite, symmetric and positive definite, ``mean`` (K, d) finite, all of one floating dtype."""
    for name in LearnedPrior._fields:
        fc.floating(name, getattr(p, name))
    lam, info, mean, at = (fc.values(a) for a in p)
    KG = fc.shape_of(p.log_precision)
    fc.need(len(KG) == 2 and fc.shape_of(p.information) == KG + KG[1:] and np.all(np.isfinite(lam)),
            f"log_precision must be a finite (K, G) array and information (K, G, G), got {KG} and "
            f"{fc.shape_of(p.information)}")
    fc.need(fc.shape_of(p.member_log_precision) == KG and np.all(np.isfinite(at)),
            f"member_log_precision must be a finite {KG} array as log_precision, got "
            f"{fc.shape_of(p.member_log_precision)}")
    fc.need(np.all(np.isfinite(info)) and np.allclose(info, np.swapaxes(info, -1, -2))
            and np.all(np.linalg.eigvalsh(info) > 0), "information must be finite, symmetric and positive definite")
    fc.need(fc.shape_of(p.mean)[:1] == KG[:1] and len(fc.shape_of(p.mean)) == 2 and np.all(np.isfinite(mean)),
            "mean must be a finite (K, d) array, one row per member")
    fc.need(len({fc.dtype_of(a) for a in p}) == 1,
            "log_precision, information, mean and member_log_precision must share one dtype")


def _upgrade(p):
    """A ``LearnedPrior`` of a file written earlier: (K,) fields (before the blocks) as one block each;
    without ``member_log_precision`` (before the tolerance), the member under ``log_precision``."""
    if np.ndim(p.log_precision) == 1:
        p = p._replace(log_precision=p.log_precision[:, None], information=p.information[:, None, None])
    return p if p.member_log_precision is not None else p._replace(member_log_precision=p.log_precision)


io.register(LearnedPrior, _check_learned_prior, former=("jaxrvga.average",), upgrade=_upgrade)


__all__ = ["LearnedPrior", "HyperPrior", "LEARN_PRIOR", "GROUP_SPREAD", "PRIOR_TOLERANCE", "block_sizes"]
