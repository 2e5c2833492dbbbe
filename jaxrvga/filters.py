"""The R-VGA filters: a belief (dense, low-rank or diagonal) times an update scheme.

A filter is :func:`~jaxrvga.guard.build` ``(belief, scheme, model, dynamics)`` of four values: a belief of
:mod:`jaxrvga.beliefs`, a scheme made by a factory of :mod:`jaxrvga.schemes` (``schemes.ekf()``,
``schemes.sampled(num_samples=20)``, or one of your own), an observation model and the dynamics.
``rvga(model, scheme=...)`` is the dense belief ([RVGA] Alg. 1), ``lrvga(model, rank=p, ...)``
the low-rank one ([LRVGA]) and ``diag_rvga(model, ...)`` the diagonal (mean-field) one, with the
scheme named by a string (:func:`scheme_named`); all take the same schemes, options, defaults and
checks:

==============  =======================================  ==========================================
scheme          models                                   options
==============  =======================================  ==========================================
``exact``       linear-Gaussian (the default there)      none
``implicit``    GLMs (the default); nonlinear: Monte     ``max_iter`` (root solver); nonlinear:
                Carlo implicit iteration                 as ``sampled`` with ``num_iters=3``
``explicit``    GLMs; nonlinear: one Monte-Carlo pass    none
``extragrad``   GLMs                                     ``correction``, ``update_cov_twice``
``ekf``         any (the textbook EKF)                   ``curvature`` (``"empirical"``)
``moment_ekf``  any (the nonlinear default): the EKF of  ``jitter``, ``curvature``
                a Gaussian likelihood with the output's  (``"empirical"``)
                mean and variance + ``jitter`` (the EKF
                on a Gaussian of known variance)
``qkf``         logistic                                 none
``sampled``     any                                      ``num_samples``, ``num_iters``, ``tol``,
                                                         ``curvature`` (dense only: ``"hessian"``)
==============  =======================================  ==========================================

Every scheme but the published L-RVGA's takes ``max_move``: a step whose mean moves by more than
that Mahalanobis length under the previous belief is shortened to it and flagged
(:func:`~jaxrvga.schemes.limit_move`). The default is :data:`~jaxrvga.schemes.MAX_MOVE` for the schemes that
linearise or sample, none for ``exact`` and ``implicit``, whose steps are the exact and the proximal
ones (a long step of theirs is what the model says).

Every update of every belief and scheme passes the same guard (:mod:`jaxrvga.guard`): a step whose result is not finite or not
positive definite is **skipped and flagged** (the predicted belief is kept, the step counter
advances, ``info.converged`` is False). ``info.dropped`` reports, for low-rank beliefs, the
fraction of the step's whitened curvature that rank p could not keep.

``x`` is (d,) with a scalar ``y``, or a minibatch (m, d) with ``y`` (m,) (GLMs; the implicit
scheme takes one observation), either of them sparse (:class:`~jaxrvga.models.SparseRow`: its
nnz non-zeros, scattered into the dense row inside the step); nonlinear models take any ``x``
pytree their ``h`` accepts, and a minibatch through :func:`jaxrvga.models.minibatch`.
"""
from __future__ import annotations

import inspect
from typing import Optional

import numpy as np

from . import schemes
from .beliefs import Dense, Diagonal, LowRank
from .beliefs.lowrank import low_rank_belief
from .core import Filter
from .dynamics import dynamics
from .guard import Spec, build
from .kernels.factor_analysis import PSI_FLOOR
from .models import Model
from .schemes import MAX_MOVE, MOMENT_JITTER  # noqa: F401  (jaxrvga.filters.MAX_MOVE: a published name)
from .validation import check_choice, positive_int

#: The scheme names of :func:`rvga`, :func:`lrvga` and :func:`diag_rvga` (module table; their factories:
#: :data:`jaxrvga.schemes.FACTORIES`).
SCHEMES = tuple(schemes.FACTORIES)
#: The options of the schemes that the factories take by name (:func:`scheme_named`).
SCHEME_OPTIONS = ("num_iters", "num_samples", "curvature", "max_iter", "correction", "update_cov_twice", "tol",
                  "jitter", "max_move", "frozen_draws", "fisher_rank")
#: The options of the prediction step (:func:`jaxrvga.dynamics.dynamics`).
DYNAMICS_OPTIONS = tuple(inspect.signature(dynamics).parameters)


def _default_scheme(model: Model) -> str:
    if model.has_exact_update:
        return "exact"
    return "implicit" if model.is_glm else "moment_ekf"


def scheme_named(model: Model, name: Optional[str] = None, *, published: bool = False, num_samples_default=None,
                 **options) -> schemes.Scheme:
    """The scheme value that the string ``name`` of :func:`rvga` means for ``model`` (module table),
    with ``options`` (None: the factory's default; an option the scheme does not take is refused).

    The default name is ``"exact"`` (linear-Gaussian), ``"implicit"`` (other GLMs) or
    ``"moment_ekf"`` (nonlinear). For a nonlinear model ``"implicit"`` and ``"explicit"`` are the
    Monte-Carlo implicit iteration (``sampled`` with 3 passes, or 1). ``published``: the published
    L-RVGA's forms (no ``max_move``; ``extragrad`` without correction, on the first pass's curvature;
    :func:`~jaxrvga.schemes.published_sampled`). ``num_samples_default``: ``sampled``'s default draws.

    Args:
      model: the observation model of the filter.
      name: a scheme name of the module table (None: the model's default).
      published: the published L-RVGA's form of the scheme.
      num_samples_default: the number of draws of ``sampled`` when ``options`` gives none.
      options: the scheme's options, by name (:data:`SCHEME_OPTIONS`).

    Returns:
      A :class:`~jaxrvga.schemes.Scheme`. Raises ``ValueError`` for an unknown name or an option the
      scheme does not take.
    """
    if not isinstance(model, Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    name = _default_scheme(model) if name is None else name
    check_choice("scheme", name, SCHEMES)
    given = {k: v for k, v in options.items() if v is not None and not (k == "frozen_draws" and v is False)}
    curvature = given.pop("curvature", "ggn")
    if not model.is_glm and name in ("implicit", "explicit"):  # the Monte-Carlo implicit iteration
        if name == "explicit":
            if given.get("num_iters", 1) != 1:
                raise ValueError("num_iters: the explicit scheme is one pass; use scheme='sampled'")
            given["num_iters"] = 1
        name = "sampled"
    if "frozen_draws" in given and not (published and name == "sampled"):
        raise ValueError("frozen_draws is only used by scheme='sampled' with published=True")
    factory = schemes.FACTORIES[name]
    if published:
        factory, given = _published_form(name, factory, given)
    if factory is schemes.sampled and num_samples_default is not None:
        given.setdefault("num_samples", num_samples_default)
    takes = inspect.signature(factory).parameters
    if "curvature" in takes:
        given["curvature"] = curvature
    elif curvature != "ggn":
        check_choice("curvature", curvature, schemes.CURVATURES)
        form = "the published sampled scheme" if factory is schemes.published_sampled else f"scheme {name!r}"
        raise ValueError(f"curvature={curvature!r} is not used by {form} (only by 'ekf', 'moment_ekf' and "
                         f"'sampled')")
    for option in given:
        if option not in takes:
            raise ValueError(f"{option} is not used by scheme {name!r}")
    return factory(**given)


def _published_form(name, factory, given):
    """The published L-RVGA's form of scheme ``name``: ``(factory, options)``."""
    if "max_move" in given:
        raise ValueError("max_move: the published L-RVGA takes every step as published")
    if name == "sampled":
        if "num_iters" in given:
            raise ValueError("num_iters: the published sampled scheme makes two passes")
        return schemes.published_sampled, given
    if name == "extragrad":
        given = {"correction": False, "update_cov_twice": False, **given}
    return factory, {**given, "max_move": np.inf}


# --------------------------------------------------------------------------- public factories

def rvga(model: Model, scheme=None, **options) -> Filter:
    """R-VGA with a full covariance ([RVGA] Alg. 1): the dense belief times ``scheme`` (module docstring).

    Args:
      model: an observation model of :mod:`jaxrvga.models`.
      scheme: a name of the module table (default ``"exact"`` for linear-Gaussian, ``"implicit"``
        for other GLMs, ``"moment_ekf"`` for nonlinear models; :func:`scheme_named`), or a scheme
        value made by its factory, ``jr.schemes.ekf(curvature="empirical")``.
      options: with a name, the scheme's options, as its factory in :mod:`jaxrvga.schemes` takes
        them (``num_iters``, ``num_samples``, ``curvature``, ``max_iter``, ``correction``,
        ``update_cov_twice``, ``tol``, ``jitter``, ``max_move``); an option the scheme does not
        use is refused. With any scheme, the prediction step before each observation:
        ``decay``, ``additive_noise``, ``process_noise``, ``decay_to``, ``noise_discount``
        (:func:`jaxrvga.dynamics.dynamics`; ``flt.predict(state)`` is that step alone).

    Returns:
      A :class:`~jaxrvga.Filter`; ``init(mean, cov, key=None)`` (``key`` is required by ``sampled``).

    Example:
      >>> X = jax.random.normal(jax.random.key(0), (200, 3))
      >>> y = (X @ jnp.array([1.0, -2.0, 0.5]) > 0).astype(jnp.float32)
      >>> flt = jr.rvga(jr.models.logistic(), scheme="implicit")
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(3), 10.0 * jnp.eye(3)), X, y)
      >>> bool(state.mean[0] > 0 > state.mean[1])
      True
    """
    value, dyn = _scheme_and_dynamics(model, scheme, options)
    return build(Dense(), value, model, dyn)


def _scheme_and_dynamics(model: Model, scheme, options: dict, **named):
    """``(scheme value, dynamics)`` from a factory's ``scheme`` (a name or a value) and its keyword
    ``options`` (``named``: the factory's own arguments of :func:`scheme_named`)."""
    unknown = sorted(set(options) - set(SCHEME_OPTIONS) - set(DYNAMICS_OPTIONS))
    if unknown:
        raise TypeError(f"unexpected option {unknown[0]!r}: a filter takes the scheme options {SCHEME_OPTIONS} "
                        f"and the dynamics {DYNAMICS_OPTIONS}")
    dyn = dynamics(**{k: options.pop(k) for k in DYNAMICS_OPTIONS if k in options})
    if not isinstance(scheme, schemes.Scheme):
        return scheme_named(model, scheme, **named, **options), dyn
    given = [k for k, v in options.items() if v is not None]  # False too: an option beside a value is given twice
    if given:
        raise ValueError(f"{given[0]}: a scheme value carries its own options; give them to its factory "
                         f"(jr.schemes.{scheme.name}(...))")
    return scheme, dyn


def lrvga(model: Model, rank: int, inner_loops: Optional[int] = None, scheme=None, *,
          published: bool = False, psi_floor: float = PSI_FLOOR, block_rows: Optional[int] = None,
          buffer: int = 0, em_tol: Optional[float] = None, **options) -> Filter:
    """L-RVGA ([LRVGA]): the low-rank belief ``(W W^T + diag(psi))^{-1}`` times ``scheme``.

    Same schemes and options as :func:`rvga`, the dynamics included (``max_move`` is refused with
    ``published``, which takes every step as published; ``curvature="hessian"`` is refused: the
    low-rank precision needs a PSD curvature factor; ``num_samples`` defaults to 10, since every
    draw adds a column to the step's factor; ``frozen_draws`` below), plus:

    Args:
      rank: ``p``, the columns of ``W`` (1 <= p <= d).
      inner_loops: EM iterations of each factor-analysis projection after the spectral warm
        start (default 0: the start itself, measured as close to the posterior as 1-3 loops,
        experiments/REPORT.md), or Algorithm 1's ``n_in`` with ``published`` (default 1). The
        number run is ``info.em_loops``.
      em_tol: ``inner_loops`` becomes a maximum: a projection's EM stops after the first loop that
        moves ``W`` by at most ``em_tol`` relative to it (Frobenius norms). The iterate is then
        stored between loops (one more d x p array during the projection). Not with ``published``.
        The loops are a ``lax.scan`` of ``inner_loops`` masked passes (a pass after the stop is a
        ``cond`` that does nothing), so a run with ``em_tol`` is differentiable in forward and
        reverse mode.
      published: the published L-RVGA (:class:`~jaxrvga.beliefs.PublishedLowRank`: EM from
        ``W_{t-1}``, mean step with the projected precision; the schemes in their published forms,
        :func:`scheme_named`): reproduces the paper and the authors' code. The default projects the exact precision step from a spectral warm
        start and takes the mean step before projecting, which is exact at full rank
        (experiments/REPORT.md).
      frozen_draws: ``sampled`` with ``published``: ``True`` reuses the state's key at every
        step (the authors' code); a pair ``(z, e)`` (K, d), (K, p) gives the base noise itself.
      psi_floor: relative floor of ``psi`` (:mod:`jaxrvga.kernels.factor_analysis`).
      block_rows: row blocks of the projection (:func:`jaxrvga.kernels.row_blocks.num_blocks`; 0: one block).
      buffer: hold up to this many curvature columns unprojected (default 0; it counts columns: a
        step brings one per output of each observation, K for a K-class output, times the draws of
        ``sampled``, and a buffer smaller than one step's columns is refused): the new columns of
        a step go into a buffer of ``buffer`` extra columns of ``W`` (the belief stays exact) and
        the buffer is projected with the step that would overflow it, so a projection happens once
        per ``buffer + 1`` observations of one column (GLMs, scalar-output networks with
        ``scheme="ekf"``). The mean steps stay exact (Woodbury at rank ``p + buffer + m``). Fewer,
        larger projections: faster per observation for neural networks (BENCHMARKS.md, "Neural
        network online"). ``state.W`` has ``rank + buffer`` columns. Not with ``published``.

    Returns:
      A :class:`~jaxrvga.Filter`; ``init(mean, W, psi, key=None)`` (``key`` is required by ``sampled``,
      unless ``frozen_draws`` gives the draws).

    Example:
      >>> X = jax.random.normal(jax.random.key(0), (200, 10))
      >>> y = (X[:, 0] > 0).astype(jnp.float32)
      >>> flt = jr.lrvga(jr.models.logistic(), rank=2)
      >>> key = jax.random.key(1)
      >>> W0, psi0 = jr.lowrank.init_factors(key, 10, 2, prior_var=10.0)
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(10), W0, psi0), X, y)
      >>> state.W.shape
      (10, 2)
    """
    belief = low_rank_belief(rank, inner_loops, published=published, psi_floor=psi_floor, block_rows=block_rows,
                             buffer=buffer, em_tol=em_tol)
    value, dyn = _scheme_and_dynamics(model, scheme, options, published=published, num_samples_default=10)
    return build(belief, value, model, dyn)


def diag_rvga(model: Model, scheme=None, **options) -> Filter:
    """Mean-field R-VGA: the diagonal belief ``N(mean, diag(psi)^{-1})`` times ``scheme``, O(d) per column.

    Same schemes, options and defaults as :func:`rvga` (module table), the dynamics included;
    each step keeps the diagonal of the new precision (:class:`~jaxrvga.beliefs.Diagonal`), so a
    network of millions of weights costs a few passes over them per output. ``num_samples``
    defaults to 10 and ``curvature="hessian"`` is refused (it would form the d x d Hessian).

    Args:
      model: an observation model of :mod:`jaxrvga.models`.
      scheme: a name of the module table or a scheme value, as :func:`rvga`.
      options: the scheme's options and the dynamics, as :func:`rvga`.

    Returns:
      A :class:`~jaxrvga.Filter`; ``init(mean, var, key=None)``: ``var`` the (d,) prior variances (a
      scalar broadcasts); ``key`` is required by ``sampled``.

    Example:
      >>> def h(theta, x):  # a unit with a tanh output
      ...     return jnp.tanh(x @ theta)
      >>> X = jax.random.normal(jax.random.key(0), (100, 4))
      >>> y = jnp.tanh(X @ jnp.array([0.5, -0.5, 0.0, 1.0]))
      >>> flt = jr.diag_rvga(jr.models.nonlinear(h), scheme="ekf")
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(4), 1.0), X, y)
      >>> state.psi.shape
      (4,)
    """
    value, dyn = _scheme_and_dynamics(model, scheme, options, num_samples_default=10)
    return build(Diagonal(), value, model, dyn)


def with_block_rows(flt: Filter, block_rows: Optional[int]) -> Filter:
    """The L-RVGA filter ``flt`` (from :func:`lrvga`) with its projection's row blocks set explicitly.

    Args:
      flt: a filter of :func:`lrvga`.
      block_rows: as :func:`lrvga`'s; ``0`` traces one block (what :mod:`jaxrvga.sharding` needs:
        row blocks of an axis sharded across devices would gather rows between them).

    Returns:
      The same filter with that belief. Raises ``ValueError`` for other filters.
    """
    spec = flt.spec
    if spec is None or not isinstance(spec.belief, LowRank):
        raise ValueError("flt must be a filter of a low-rank belief (jaxrvga.lrvga)")
    if block_rows is not None and block_rows != 0:
        block_rows = positive_int("block_rows", block_rows)
    return build(spec.belief._replace(block_rows=block_rows), spec.scheme, spec.model, spec.dynamics)


def kalman(noise_var=1.0, process_noise=None, **dynamics_options) -> Filter:
    """The Kalman filter: ``rvga(linear_gaussian(noise_var))`` ([RVGA] Thm 2), for a static parameter
    or, with ``decay`` and ``additive_noise``, the transition ``F = decay I``, ``Q = additive_noise``
    (``dynamics_options``: :func:`jaxrvga.dynamics.dynamics`). ``noise_var=None``: unknown and learned, the exact
    normal-inverse-gamma filter (:mod:`jaxrvga.noise`; ``init(mean, cov, noise=(shape, rate))``).

    ``x`` is a row (d,) with scalar ``y`` or a matrix ``H`` (m, d) with ``y`` (m,).

    Args:
      noise_var: the observation noise variance (``None``: learned).
      process_noise: the process noise of the prediction step (:func:`jaxrvga.dynamics.dynamics`).
      dynamics_options: the other options of the prediction step.

    Returns:
      A :class:`~jaxrvga.Filter`; ``init(mean, cov)``.

    Example:
      >>> H = jax.random.normal(jax.random.key(0), (100, 2))
      >>> y = H @ jnp.array([1.0, -1.0])
      >>> flt = jr.kalman(noise_var=0.1)
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(2), jnp.eye(2)), H, y)
      >>> state.mean.round().tolist()
      [1.0, -1.0]
    """
    from .models import linear_gaussian
    return rvga(linear_gaussian(noise_var), "exact", process_noise=process_noise,
                **_only_dynamics(dynamics_options))


def ekf(model: Model, process_noise=None, **dynamics_options) -> Filter:
    """Extended Kalman filter = online natural gradient: ``rvga(model, "ekf")`` ([RVGA] Thm 3, eqs. 54-55, 81).

    Args:
      model: an observation model of :mod:`jaxrvga.models`.
      process_noise, dynamics_options: the prediction step (:func:`jaxrvga.dynamics.dynamics`).

    Returns:
      A :class:`~jaxrvga.Filter`; ``init(mean, cov)``.

    Example:
      >>> X = jax.random.normal(jax.random.key(0), (200, 2))
      >>> rate = jnp.exp(X @ jnp.array([0.5, -0.5]))
      >>> counts = jax.random.poisson(jax.random.key(1), rate)
      >>> flt = jr.ekf(jr.models.poisson())
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(2), jnp.eye(2)), X, counts)
      >>> state.cov.shape
      (2, 2)
    """
    return rvga(model, "ekf", process_noise=process_noise, **_only_dynamics(dynamics_options))


def qkf(process_noise=None, **dynamics_options) -> Filter:
    """Quadratic (Jaakkola-Jordan) Kalman filter: ``rvga(logistic(), "qkf")`` ([RVGA] eqs. 82-90).

    Args:
      process_noise, dynamics_options: the prediction step (:func:`jaxrvga.dynamics.dynamics`).

    Returns:
      A :class:`~jaxrvga.Filter` of the logistic model; ``init(mean, cov)``.

    Example:
      >>> X = jax.random.normal(jax.random.key(0), (200, 2))
      >>> labels = (X[:, 0] > 0).astype(jnp.float32)
      >>> flt = jr.qkf()
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(2), jnp.eye(2)), X, labels)
      >>> bool(state.mean[0] > 0)
      True
    """
    from .models import logistic
    return rvga(logistic(), "qkf", process_noise=process_noise, **_only_dynamics(dynamics_options))


def mirror_prox(model: Model, *, correction: bool = False, update_cov_twice: bool = True,
                **dynamics_options) -> Filter:
    """Mirror prox with a full covariance: ``rvga(model, "extragrad")`` with the paper's defaults.

    ``correction=False, update_cov_twice=True`` is [LRVGA] eqs. (139)-(142) and the authors' code;
    ``rvga(model, "extragrad")`` defaults to the corrected form, exact on linear-Gaussian models.

    Args:
      model: a GLM of :mod:`jaxrvga.models`.
      correction, update_cov_twice: as the ``extragrad`` scheme (:func:`jaxrvga.schemes.extragrad`).
      dynamics_options: the prediction step (:func:`jaxrvga.dynamics.dynamics`).

    Returns:
      A :class:`~jaxrvga.Filter`; ``init(mean, cov)``.

    Example:
      >>> X = jax.random.normal(jax.random.key(0), (200, 2))
      >>> labels = (X[:, 0] > 0).astype(jnp.float32)
      >>> flt = jr.mirror_prox(jr.models.logistic())
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(2), jnp.eye(2)), X, labels)
      >>> bool(state.mean[0] > 0)
      True
    """
    if not isinstance(model, Model) or not model.is_glm:
        raise ValueError("model must be a GLM from jaxrvga.models (linear_gaussian, logistic, poisson, glm)")
    return rvga(model, "extragrad", correction=correction, update_cov_twice=update_cov_twice,
                **_only_dynamics(dynamics_options))


def _only_dynamics(options: dict) -> dict:
    """``options``, refused unless each is one of the dynamics' (:data:`DYNAMICS_OPTIONS`)."""
    unknown = sorted(set(options) - set(DYNAMICS_OPTIONS))
    if unknown:
        raise TypeError(f"unexpected option {unknown[0]!r}: this filter takes only the dynamics {DYNAMICS_OPTIONS}")
    return options


__all__ = ["build", "scheme_named", "low_rank_belief", "rvga", "lrvga", "diag_rvga", "kalman", "ekf", "qkf",
           "mirror_prox", "with_block_rows", "SCHEMES", "SCHEME_OPTIONS", "DYNAMICS_OPTIONS", "Spec"]
