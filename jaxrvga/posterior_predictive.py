"""Predictive means and variances of any Gaussian belief under any observation model.

A belief ``q(theta) = N(mean, P)`` is a dense state or :class:`jaxrvga.LaplaceResult` (fields
``mean``, ``cov``), a low-rank state (``mean``, ``W``, ``psi``; precision ``W W^T + diag(psi)``,
handled through :func:`jaxrvga.kernels.lowrank.factorize` in O(d p^2): no d x d array is formed) or a
diagonal state (``mean``, ``psi``; precision ``diag(psi)``).

For an input ``x`` the predictor ``eta = h(theta, x)`` is Gaussian under ``q``: exactly for a GLM
(``eta = x^T theta ~ N(x^T mean, x^T P x)``) and to first order otherwise
(``eta ~ N(h(mean, x), J P J^T)``, ``J = dh/dtheta`` by autodiff). The expectations of the output
over that Gaussian are then taken in closed form where one exists (logistic [RVGA] eqs. 62-63,
Poisson, Gaussian, categorical by the pairwise inverse probit of :func:`jaxrvga.kernels.special.softmax_probit`)
and by Gauss-Hermite quadrature for other families. Given a PRNG ``key`` every expectation is
instead a Monte Carlo average over exact samples of ``q`` (low-rank beliefs sample by
Proposition 1, corrected, :func:`jaxrvga.kernels.lowrank.sample`), exact as ``num_samples`` grows.

A state whose model learns its noise variance (``noise`` statistics, :mod:`jaxrvga.noise`) is the
belief ``theta | s2 ~ N(mean, s2 P)``, ``s2 ~ InvGamma(a, b)``: its variances are those of ``P``
times ``E[s2] = b / (a - 1)`` and its log predictive is the Student-t of
:func:`jaxrvga.noise.log_student_t` (exact for a linear predictor); Monte Carlo draws ``s2`` too.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import beliefs, models, noise
from .kernels import special
from .validation import check_float_array, check_key, is_concrete, is_plug_in, positive_int


class Predictive(NamedTuple):
    """Predictive moments at each input; unpacks as ``mean, var = predictive(...)``.

    ``mean = E_q[E[y | theta, x]]``, the predictive mean of ``y`` (for the logistic model the
    probability of ``y = 1``; for a categorical model the K class probabilities).
    ``var = Var_q[E[y | theta, x]]``, the posterior (epistemic) variance of the mean function
    (for the logistic model the variance of ``sig(x^T theta)``, [RVGA] eq. 63, not ``p (1 - p)``);
    with ``observation_noise=True`` it is the full predictive variance ``Var(y | x)``, which adds
    ``E_q[Var(y | theta, x)]`` (law of total variance; ``p (1 - p)`` for a binary or one-hot output).
    """

    mean: jax.Array
    var: jax.Array


def _component_variance(family, eta):
    """``Var(y_i | eta)`` per component (the diagonal of a categorical covariance)."""
    v = family.variance(eta)
    return jnp.diagonal(v, axis1=-2, axis2=-1) if v.ndim == jnp.ndim(eta) + 1 else v


def _gaussian_moments(family, m, v, noise: bool):
    """Predictive moments of ``y`` for ``eta ~ N(m, v)`` (``v`` (..., K, K) for a vector output): the
    family's closed form (``Family.predictive``), else Gauss-Hermite quadrature."""
    if family.predictive is not None:
        mean, var, total = family.predictive(family, m, v)
        return Predictive(mean, total if noise else var)
    e1 = special.gaussian_expectation_1d(family.mean, m, v)
    var = jnp.maximum(special.gaussian_expectation_1d(lambda a: family.mean(a) ** 2, m, v) - e1**2, 0.0)
    if noise:
        var = var + special.gaussian_expectation_1d(lambda a: _component_variance(family, a), m, v)
    return Predictive(e1, var)


def _linearised(model, belief, st, X, full=None, scale=1.0):
    """``(m, v)`` of ``eta = h(theta, x) ~ N(h(mean, x), scale J P J^T)`` for each leading-axis entry of
    ``X``; ``v`` the diagonal, or the whole matrix where ``full`` (default: for a vector output)."""
    full = model.family.vector_output if full is None else full

    def one(x):
        m, J = models.linearize(model, st.mean, x, jacobian=not is_plug_in(scale))
        if J is None:  # the plug-in N(h(mean, x), 0): a forward pass, no Jacobian
            return m, jnp.zeros(m.shape * (2 if full else 1), m.dtype)
        return m, scale * (belief.sandwich(st, J) if full else belief.marginal(st, J)[1])

    return jax.vmap(one)(X)


def _monte_carlo(model, belief, st, stats, X, key, num, noise: bool, scale):
    thetas, s2 = beliefs.draws(belief, st, stats, key, num, scale)
    if model.is_glm:
        eta = thetas @ X.T
    else:
        eta = jax.vmap(lambda th: jax.vmap(lambda x: model.predict(th, x))(X))(thetas)
    f = model.family.mean(eta)
    mean = jnp.mean(f, axis=0)
    var = jnp.mean((f - mean) ** 2, axis=0)
    if noise:
        v = _component_variance(model.family, eta)
        var = var + jnp.mean(v if s2 is None else s2.reshape((-1,) + (1,) * (v.ndim - 1)) * v, axis=0)
    return Predictive(mean, var)


def _scaled(out: Predictive, stats) -> Predictive:
    """The moments of a belief in units of ``s2`` scaled by ``E[s2]`` (module docstring)."""
    return out if stats is None else Predictive(out.mean, noise.scale_variance(stats, out.var))


def predictive(state, X, model: models.Model | None = None, *, key=None, num_samples: int = 4096,
               observation_noise: bool = False, scale=1.0) -> Predictive:
    """Predictive mean and variance of ``y`` at inputs ``X`` under the belief ``state``.

    Args:
      state: a dense state or :class:`jaxrvga.LaplaceResult` (``mean``, ``cov``) or a low-rank state
        (``mean``, ``W``, ``psi``), or a :func:`~jaxrvga.model_average` state (the mixture of its
        members' predictives: :func:`jaxrvga.average.mixture_moments`).
      X: for a GLM (logistic, linear-Gaussian, Poisson, ``glm``) one input (d,) or a batch (n, d),
        or a :class:`~jaxrvga.models.SparseRow` of shape (nnz,) or (n, nnz) (scattered into (n, d));
        for a nonlinear model a batch: a pytree whose leaves share a leading axis n.
      model: the observation model; ``None`` is the logistic model. A
        :func:`~jaxrvga.models.minibatch` model predicts as the model of one input it maps.
      key: ``None`` for the closed forms (exact for the Gaussian and Poisson GLMs; [RVGA] eqs. 62-63
        for a binary output; pairwise inverse probit for a categorical one; Gauss-Hermite for
        other families; a nonlinear predictor, scalar or vector valued, is linearised at the mean).
        A PRNG key selects Monte Carlo over ``num_samples`` exact samples of the belief instead
        (the same samples for every input; ``var`` is the 1/S sample variance).
      observation_noise: add ``E_q[Var(y | theta, x)]`` to ``var`` (see :class:`Predictive`).
      scale: the predictive of the belief with its covariance times ``scale >= 0`` (``N(mean, scale
        P)``; 0 is the plug-in ``p(y | theta = mean)``): the forecasters that
        :func:`jaxrvga.model_average` weighs by their prequential scores.

    Returns:
      :class:`Predictive` ``(mean, var)`` of shape (n,) (or () for one GLM input), or
      (n, k) for a nonlinear predictor with k outputs (the K class probabilities for a
      categorical model). With ``model=None`` and no key it is ``(sig(k m), sig(k m)(1 - sig(k m))(1 - k))``,
      ``m = x^T mean``, ``k = k(x^T P x)``, [RVGA] eqs. 62-63.
    """
    hint = "" if model is not None else ("; no model= was given, so the logistic model eta = x^T theta was "
                                         "assumed: pass model=, the model the filter was built with")
    model = models.logistic() if model is None else model
    if not isinstance(model, models.Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    return predictive_of(state, X, model, key=key, num_samples=num_samples, observation_noise=observation_noise,
                         scale=_check_scale(scale), hint=hint)


@functools.singledispatch
def predictive_of(state, X, model: models.Model, *, key, num_samples: int, observation_noise: bool, scale,
                  hint: str = "") -> Predictive:
    """:func:`predictive` of ``state`` once ``model`` and ``scale`` are checked, dispatched on the type of
    ``state``: this one reads a belief (:func:`jaxrvga.beliefs.of_state`). A state of another kind
    registers its own (``predictive_of.register(StateType)``: the mixture of :mod:`jaxrvga.average`),
    so that this module knows no such kind. ``hint`` ends the message of a refused ``X``.

    Args:
      state: a filter's state (a belief's state here; other kinds by their registered function).
      X: the inputs, as :func:`predictive`'s.
      model: the checked observation model.
      key, num_samples, observation_noise: as :func:`predictive`'s.
      scale: the checked covariance scale of the belief.
      hint: text appended to the message of a refused ``X``.

    Returns:
      :class:`Predictive`, as :func:`predictive`.
    """
    model, belief, st, stats, X = _read_inputs(state, X, model, hint)
    if key is not None:
        return _monte_carlo(model, belief, st, stats, X, check_key(key), positive_int("num_samples", num_samples),
                            observation_noise, scale)
    m, v = _predictor_moments(model, belief, st, X, scale)
    return _output_moments(model, st, X, m, v, stats, observation_noise)


def _read_inputs(state, X, model, hint: str = ""):
    """``(model, belief, st, stats, X)``: a minibatch model read as the model of one input, the belief and
    the noise statistics of ``state``, and a GLM's ``X`` checked (sparse rows made dense)."""
    if model.per_input is not None:  # X is a batch of inputs already
        model = model._replace(predict=model.per_input, per_input=None)
    belief, st = beliefs.of_state(state)  # the predictions ask the belief
    stats = noise.stats_of(state, model.family.learned_noise)
    d = st.mean.shape[0]
    if model.is_glm and isinstance(X, models.SparseRow):
        X = _sparse_inputs(X, d, st.mean.dtype)
    elif model.is_glm:
        X = check_float_array("X", X)
        if X.ndim not in (1, 2) or X.shape[-1] != d:
            raise ValueError(f"X must have shape ({d},) or (n, {d}) to match the state, got {X.shape}{hint}")
    return model, belief, st, stats, X


def _predictor_moments(model, belief, st, X, scale):
    """``(m, v)`` of ``eta`` at each input under ``N(mean, scale P)``: a GLM's exact marginal, a nonlinear
    predictor's linearisation (:func:`_linearised`; ``v`` (n, k, k) for a vector output)."""
    if model.is_glm:
        m, v = belief.marginal(st, X)
        return m, scale * v
    return _linearised(model, belief, st, X, scale=scale)


def _output_moments(model, st, X, m, v, stats, observation_noise: bool) -> Predictive:
    """:func:`predictive`'s closed form from the predictor's moments ``(m, v)`` (a scalar nonlinear
    predictor's (n, 1) read as (n,))."""
    out = _scaled(_gaussian_moments(model.family, m, v, observation_noise), stats)
    if model.is_glm:
        return out
    x0 = jax.tree_util.tree_map(lambda a: a[0], X)
    if jax.eval_shape(model.predict, st.mean, x0).shape == ():  # scalar predictor: (n,)
        return Predictive(out.mean[:, 0], out.var[:, 0])
    return out


def _sparse_inputs(X, d: int, dtype):
    """The dense rows (d,) or (n, d) of sparse GLM inputs ``X`` (a :class:`~jaxrvga.models.SparseRow`)."""
    X = X.checked("X", d, dtype)
    if X.ndim > 2:
        raise ValueError(f"X: a SparseRow must have shape (nnz,) or (n, nnz), got {X.shape}")
    return X.todense(d, dtype)


def _quadrature_log_density(family, y, m, v, num_points: int):
    """``log E_{eta ~ N(m, v)}[p(y | eta)]`` elementwise, by Gauss-Hermite quadrature in log space."""
    z, w = special.gauss_hermite(num_points)
    z, log_w = jnp.asarray(z, m.dtype), jnp.log(jnp.asarray(w, m.dtype))
    eta = m[..., None] + special.sqrt0(v)[..., None] * z
    return jax.scipy.special.logsumexp(family.log_prob(y[..., None], eta) + log_w, axis=-1)


def _log_density_given_eta(family, y, m, V, num_points: int):
    """``log E[p(y | eta)]`` summed over the inputs, for ``eta ~ N(m, V)`` per input (``m`` (n, k), ``V``
    (n, k, k)): the family's closed form (``Family.log_predictive``), else each component by quadrature."""
    if family.log_predictive is not None:
        y = y if family.vector_output else jnp.reshape(y, m.shape)
        return jnp.sum(jax.vmap(lambda *a: family.log_predictive(family, *a))(y, m, V))
    v = jnp.diagonal(V, axis1=-2, axis2=-1)
    return jnp.sum(_quadrature_log_density(family, jnp.reshape(y, m.shape), m, v, num_points))


def _log_density_monte_carlo(model, belief, st, stats, x, y, key, num, scale):
    """``log mean_s p(y | theta_s, x)`` over ``num`` exact samples of the belief (and of ``s2``, the
    Gaussian's variance, where it is learned)."""
    thetas, s2 = beliefs.draws(belief, st, stats, key, num, scale)
    if s2 is None:
        log_lik = jax.vmap(lambda theta: model.log_lik(theta, x, y))(thetas)
    else:
        log_lik = jax.vmap(lambda theta, v: jnp.sum(models.gaussian(v).log_prob(y, model.predict(theta, x))))(thetas, s2)
    return jax.scipy.special.logsumexp(log_lik) - jnp.log(jnp.asarray(num, log_lik.dtype))


def log_predictive(state, x, y, model: models.Model | None = None, *, key=None, num_samples: int = 1024,
                   num_points: int = 32, scale=1.0):
    """``log p(y | x) = log E_q[p(y | theta, x)]``: the log density of an observation under the belief.

    Evaluated on a filter's predicted belief before it absorbs ``(x, y)``, this is the
    one-step-ahead (prequential) log predictive ``log p(y_t | y_{1:t-1})``, whose sum over a data
    set is the log evidence (:func:`jaxrvga.log_evidence`).

    Args:
      state: a dense or low-rank state, or a model average's (the log of the weighted mixture of its
        members' predictive densities), as :func:`predictive`.
      x, y: one observation as the filters take it: a GLM row (d,) with a scalar ``y`` or a
        minibatch (m, d) with ``y`` (m,); a nonlinear model's input with ``y`` of its output's
        shape; a :func:`~jaxrvga.models.minibatch` model's batch.
      model: the observation model (``None``: logistic).
      key: ``None`` for the deterministic forms: the linear-Gaussian model is exact (the joint
        ``N(y | X mu, X P X^T + s2 I)`` of a minibatch; with a learned noise variance the
        Student-t of :func:`jaxrvga.noise.log_student_t`, a nonlinear predictor's linearised); other GLMs integrate ``p(y | eta)`` over
        ``eta = x^T theta ~ N(x^T mu, x^T P x)`` by Gauss-Hermite quadrature with ``num_points``
        nodes (exact as it grows, for one observation; a minibatch's rows are taken as
        independent given the belief); a nonlinear predictor is linearised at the mean
        (``eta ~ N(h(mu, x), J P J^T)``), then the Gaussian family is closed form, the categorical
        by the pairwise probit of :func:`~jaxrvga.kernels.special.softmax_probit`, others by quadrature.
        A PRNG key selects Monte Carlo instead: ``log mean_s p(y | theta_s, x)`` over
        ``num_samples`` exact samples of the belief, exact as ``num_samples`` grows (a biased,
        consistent estimate of the log).
      scale: the log density under ``N(mean, scale P)`` (as :func:`predictive`; 0: the plug-in).

    Returns:
      A scalar, summed over a minibatch's observations.
    """
    model = models.logistic() if model is None else model
    if not isinstance(model, models.Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    return log_predictive_of(state, x, y, model, key=key, num_samples=num_samples, num_points=num_points,
                             scale=_check_scale(scale))


@functools.singledispatch
def log_predictive_of(state, x, y, model: models.Model, *, key, num_samples: int, num_points: int, scale):
    """:func:`log_predictive` of ``state`` once ``model`` and ``scale`` are checked, dispatched on the type
    of ``state`` as :func:`predictive_of` (this one reads a belief; a mixture registers its own).

    Args:
      state: a filter's state (a belief's state here; other kinds by their registered function).
      x, y: one observation or a minibatch, as :func:`log_predictive`'s.
      model: the checked observation model.
      key, num_samples, num_points: as :func:`log_predictive`'s.
      scale: the checked covariance scale of the belief.

    Returns:
      A scalar, as :func:`log_predictive`.
    """
    belief, st = beliefs.of_state(state)
    stats = noise.stats_of(state, model.family.learned_noise)
    x, y = models.check_observation(st, x, y, model)  # the filters' own check of an observation
    if key is not None:
        return _log_density_monte_carlo(model, belief, st, stats, x, y, check_key(key),
                                        positive_int("num_samples", num_samples), scale)
    num_points = special.check_num_points(num_points)
    if stats is None and model.per_input is not None:  # a minibatch model: each input its own predictor
        model = model._replace(predict=model.per_input, per_input=None)
        m, V = _linearised(model, belief, st, x, full=True, scale=scale)
        return _log_density_given_eta(model.family, y, m, V, num_points)
    eta, J = models.linearize(model, st.mean, x, jacobian=not is_plug_in(scale))
    if J is None:
        V = jnp.zeros(eta.shape * 2, eta.dtype)
    elif stats is None and model.is_glm and model.family.log_predictive is None:  # the marginals suffice
        V = scale * belief.marginal(st, J)[1]
    else:
        V = scale * belief.sandwich(st, J)
    return joint_log_density(model, stats, y, eta, V, num_points)


def joint_log_density(model: models.Model, stats, y, eta, V, num_points: int = 32):
    """``log E[p(y | eta)]`` of one observation whose k predictor components are ``eta ~ N(eta, V)``
    jointly (:func:`jaxrvga.models.linearize`: a GLM's minibatch rows, or a nonlinear model's output):
    with a learned noise variance the Student-t of :func:`jaxrvga.noise.log_student_t` (``V`` in units
    of ``s2``), else the family's closed form (``Family.log_predictive``) or Gauss-Hermite quadrature of
    each component. :func:`log_predictive`'s deterministic forms are this of the belief's moments.

    Args:
      model: the observation model.
      stats: the noise statistics, or None for a known noise variance.
      y: the observation's output.
      eta: the predictor's mean, (k,).
      V: its covariance, (k, k) (or its diagonal (k,) where only the marginals are needed).
      num_points: the quadrature's nodes.

    Returns:
      The scalar log density.
    """
    family = model.family
    if stats is None and model.is_glm and family.log_predictive is None:  # each component by quadrature
        return jnp.sum(_quadrature_log_density(family, y, eta, V if V.ndim == 1 else jnp.diagonal(V), num_points))
    V = jnp.diag(V) if V.ndim == 1 else V
    if stats is not None:
        return noise.log_student_t(stats, jnp.ravel(y) - eta, V + jnp.eye(eta.shape[0], dtype=eta.dtype))
    if not model.is_glm:
        return _log_density_given_eta(family, jnp.asarray(y)[None], eta[None], V[None], num_points)
    return family.log_predictive(family, y, eta, V)  # jointly over the minibatch: one observation of k components


class Scores(NamedTuple):
    """A test set's predictive under one approximation: ``mean`` and ``var`` as :class:`Predictive` with
    the observation noise (``var = Var(y | x)``), ``log_density`` (n,), ``log p(y_i | x_i)``, and the
    two parts of ``var`` by the law of total variance, named so that neither is read for the other:
    ``param_var = Var_q[E[y | theta, x]]`` (the parameters' uncertainty, what ``jr.predictive`` returns
    by default) and ``noise_var = E_q[Var(y | theta, x)]`` (the observation noise; ``p (1 - p)``
    averaged over ``q`` for a binary output)."""

    mean: jax.Array
    var: jax.Array
    log_density: jax.Array
    param_var: jax.Array
    noise_var: jax.Array

    @classmethod
    def of_parts(cls, mean, var, log_density, param_var) -> "Scores":
        """The scores whose ``noise_var`` is ``var - param_var``, and ``inf`` where ``var`` is (a learned
        noise variance of infinite mean, ``InvGamma`` shape <= 1: not ``inf - inf = NaN``)."""
        return cls(mean, var, log_density, param_var, jnp.where(jnp.isposinf(var), var, var - param_var))


def predictive_scores(state, X, y, model: models.Model | None = None, *, scale=1.0,
                      chunk_size: int | None = 1024) -> Scores:
    """The predictive moments and the log predictive density of each test point in one call.

    Args:
      state, X, model, scale: as :func:`predictive` (closed forms; a GLM input batch (n, d) or a
        nonlinear model's batch of n inputs).
      y: the n outputs, as :func:`log_predictive` takes one each (labels or one-hot rows for a
        categorical model).
      chunk_size: test points per chunk (the last one padded), so that memory stays that of
        ``chunk_size`` points: one compiled call a chunk, or inside ``jit`` one loop over them
        (``jax.lax.map``); ``None``: all at once.

    Returns:
      :class:`Scores`. For a binary or categorical output the density is the predictive
      probability of the observed class, ``log mean[y]``: the same approximation as the
      probabilities (the probit forms of :func:`predictive`), so the NLPD and the calibration of a
      classifier read one predictive. Other families take :func:`log_predictive` of each point
      (exact for the Gaussian, Student-t for a learned noise variance, quadrature otherwise).
    """
    model = models.logistic() if model is None else model
    if not isinstance(model, models.Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    scale = _check_scale(scale)
    first = jax.tree_util.tree_leaves(X)[0]
    n = jnp.shape(first)[0] if jnp.ndim(first) else 0
    if jnp.ndim(first) < (2 if model.is_glm else 1) or jnp.shape(y)[:1] != (n,):
        raise ValueError(f"X must be a batch of n test inputs and y their n outputs, got X of leading size "
                         f"{n} and y of shape {jnp.shape(y)}")
    if chunk_size is not None:
        chunk_size = positive_int("chunk_size", chunk_size)
    size = max(n if chunk_size is None else min(chunk_size, n), 1)
    count = -(-n // size)

    def chunked(a):  # (count, size, ...): the last row repeated to fill the last chunk
        a = jnp.asarray(a)
        a = jnp.concatenate([a, jnp.repeat(a[-1:], count * size - n, axis=0)]) if count * size > n else a
        return a.reshape((count, size) + a.shape[1:])

    program, chunks = _chunk_program(model, scale), jax.tree_util.tree_map(chunked, (X, y))
    if is_concrete((state, chunks)):  # one call a chunk: compiled once for every n
        parts = [program(state, *jax.tree_util.tree_map(lambda a, i=i: a[i:i + 1], chunks)) for i in range(count)]
        out = [jnp.concatenate(field) for field in zip(*parts)] if parts else program(state, *chunks)
    else:  # inside a trace: the loop in the program, so that memory stays one chunk's
        out = program(state, *chunks)
    return Scores(*(a.reshape((count * size,) + a.shape[2:])[:n] for a in out))


def _chunk_program(model, scale):
    """The compiled loop of :func:`scores_of` of ``model`` and ``scale`` over a stack of chunks (one
    chunk at a time, ``jax.lax.map``): made once per hashable model and concrete scale, so that a second
    call of :func:`predictive_scores` (another state, other test points of the same shapes) compiles
    nothing; made anew otherwise (a traced scale, a model holding an array)."""
    if is_concrete(scale):
        try:
            return _cached_chunk_program(model, float(scale))
        except TypeError:  # unhashable model
            pass
    return _new_chunk_program(model, scale)


def _new_chunk_program(model, scale):
    return jax.jit(lambda st, xs, ts: jax.lax.map(lambda c: scores_of(st, *c, model, scale), (xs, ts)))


_cached_chunk_program = functools.lru_cache(maxsize=64)(_new_chunk_program)


@functools.singledispatch
def scores_of(state, X, y, model: models.Model, scale) -> Scores:
    """:func:`predictive_scores` of one chunk, dispatched on the type of ``state`` as :func:`predictive_of`
    (this one reads a belief; a mixture registers its own). The moments and a class's log probability
    come from one predictor moment ``(m, v)`` per input: a binary output's ``log sig(+-k(v) m)`` and a
    categorical one's ``log_softmax`` of :func:`~jaxrvga.kernels.special.softmax_probit_logits`, in log
    space (a probability that rounds to 0 or 1 gives a finite log density, not ``log 0``).

    Args:
      state: a filter's state (a belief's state here; other kinds by their registered function).
      X, y: a chunk's inputs and outputs, as :func:`predictive_scores`'.
      model: the checked observation model.
      scale: the checked covariance scale of the belief.

    Returns:
      :class:`Scores` of the chunk.
    """
    checked_model, belief, st, stats, inputs = _read_inputs(state, X, model)
    m, v = _predictor_moments(checked_model, belief, st, inputs, scale)
    mean, var = _output_moments(checked_model, st, inputs, m, v, stats, True)
    param_var = _output_moments(checked_model, st, inputs, m, v, stats, False).var
    family = model.family
    if family.name == "bernoulli":  # log sig(k m) or log sig(-k m): the probit predictive of the label
        log_density = family.log_prob(jnp.reshape(y, (-1,)), jnp.reshape(special.probit_k(v) * m, (-1,)))
    elif family.name == "categorical":
        log_density = jax.vmap(family.log_prob)(y, special.softmax_probit_logits(m, v))
    elif family.name == "gaussian" and (m.ndim == 1 or m.shape[-1] == 1):  # a scalar output: the same moments
        one = (lambda t: t[None]) if model.is_glm else (lambda t: t)  # a GLM's y as one row of its minibatch
        log_density = jax.vmap(lambda t, a, b: joint_log_density(model, stats, one(t), a[None], b[None, None]))(
            jnp.reshape(y, (-1,)), jnp.reshape(m, (-1,)), jnp.reshape(v, (-1,)))
    else:
        log_density = jax.vmap(lambda x, t: log_predictive(state, x, t, model, scale=scale))(X, y)
    return Scores.of_parts(mean, var, jnp.reshape(log_density, (-1,)), param_var)


def _check_scale(scale):
    """``scale >= 0`` and finite (checked where concrete; a traced one is taken as given)."""
    if isinstance(scale, bool) or jnp.shape(scale) != ():
        raise ValueError(f"scale must be a real scalar >= 0, got {scale!r}")
    if is_concrete(scale) and not (np.isfinite(float(scale)) and float(scale) >= 0):
        raise ValueError(f"scale must be finite and >= 0, got {scale!r}")
    return scale


__all__ = ["Predictive", "predictive", "log_predictive", "predictive_of", "log_predictive_of", "Scores",
           "predictive_scores", "scores_of", "joint_log_density"]
