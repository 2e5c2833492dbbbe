"""Observation models: a family of the output on a predictor ``eta = h(theta, x)``.

For generalised linear models (``eta = x^T theta``) every Gaussian expectation the filters need
reduces to a 1-D expectation over ``eta ~ N(x^T mu, x^T P x)`` ([RVGA] §4, [LRVGA] §4.1):
:meth:`Model.glm_moments` returns ``(E[d log p / d eta], E[d^2 log p / d eta^2])``, in closed form
for the Gaussian and Poisson families, by the inverse-probit approximation ([RVGA] eq. 58) for the
logistic model, and by Gauss-Hermite quadrature otherwise. :func:`nonlinear` takes any predictor
``h`` (a Jacobian by autodiff); :func:`minibatch` maps one over a batch of inputs; :func:`tempered`
raises the likelihood of an update to a power (several passes over a data set).
"""
from __future__ import annotations

import numbers
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from ..kernels import special
from .._values import Bound
from ..validation import positive_int
from .families import Family, bernoulli, categorical, gaussian, poisson_family
from .sparse_rows import SparseRow


class Model(NamedTuple):
    """An observation model ``p(y | theta, x) = family(y | eta = predict(theta, x))``.

    ``kind`` (``"linear_gaussian"``, ``"logistic"``, ``"glm"`` or ``"nonlinear"``) names it; the
    filters ask its capabilities instead: :attr:`is_glm`, :attr:`has_exact_update`,
    :attr:`has_logistic_root`. ``moments`` (GLMs only) maps ``(m, v, y)`` to the pair
    ``(E[d log p/d eta], E[d^2 log p/d eta^2])`` for ``eta ~ N(m, v)``. ``per_input`` (models
    from :func:`minibatch`): the predictor of one input, which ``predict`` maps over the minibatch.
    ``power`` (:func:`tempered`): the power of the likelihood an update absorbs, in (0, 1]; the
    predictive and the scores read the untempered density.
    """

    kind: str
    family: Family
    predict: Callable  # (theta, x) -> eta, scalar for GLMs, scalar or vector otherwise
    moments: Optional[Callable]  # (m, v, y) -> (E[l'], E[l''])  (GLMs only)
    noise_var: Optional[object] = None  # linear-Gaussian only (1, the unit of s2, where it is learned)
    expected_log_lik: Optional[Callable] = None  # (m, v, y) -> E_{eta ~ N(m, v)}[log p(y | eta)]  (GLMs)
    per_input: Optional[Callable] = None  # (theta, x_i) -> eta_i, the predictor of one input (minibatch)
    power: float = 1.0  # the likelihood's power in an update (tempered)

    @property
    def is_glm(self) -> bool:
        """True when ``eta = x^T theta`` (the 1-D projection applies)."""
        return self.kind in ("linear_gaussian", "logistic", "glm")

    @property
    def has_exact_update(self) -> bool:
        """True for the linear-Gaussian model: the R-VGA step is the Kalman update ([RVGA] Thm 2)."""
        return self.kind == "linear_gaussian"

    @property
    def has_logistic_root(self) -> bool:
        """True for logistic regression: the implicit step is the 2-D root of [RVGA] eqs. (69)-(70)."""
        return self.kind == "logistic"

    def log_lik(self, theta, x, y):
        """``log p(y | theta, x)`` summed over the components of ``y``."""
        return jnp.sum(self.family.log_prob(y, self.predict(theta, x)))

    def glm_moments(self, m, v, y):
        """``(E[d log p / d eta], E[d^2 log p / d eta^2])`` for ``eta ~ N(m, v)`` (GLMs)."""
        if self.moments is None:
            raise ValueError(f"the {self.kind} model has no 1-D projected moments")
        return self.moments(m, v, y)


def linear_predict(theta, x):
    """The GLM predictor ``eta = x^T theta`` (``x`` a row, a minibatch (m, d) or a
    :class:`SparseRow`): the ``predict`` of every GLM of this module.

    Args:
      theta: the parameters, (d,).
      x: a row (d,), a minibatch (m, d) or a :class:`SparseRow`.

    Returns:
      ``eta``: a scalar, or (m,) for a minibatch.
    """
    return x.dot(theta) if isinstance(x, SparseRow) else jnp.dot(x, theta)


def _gauss_hermite_expected_log_lik(family: Family, num_points: int, m, v, y):
    """``E_{eta ~ N(m, v)}[log p(y | eta)]`` by Gauss-Hermite quadrature."""
    y = jnp.asarray(y)[..., None]  # broadcast against the quadrature axis
    return special.gaussian_expectation_1d(lambda a: family.log_prob(y, a), m, v, num_points)


def _moments_from_expectation(expected, m, v, y):
    """GLM moments from ``E[log p]`` by Bonnet's and Price's theorems:
    ``E[l'] = d/dm E[l]`` and ``E[l''] = 2 d/dv E[l]``."""
    dm = jnp.vectorize(jax.grad(expected, argnums=0))
    dv = jnp.vectorize(jax.grad(expected, argnums=1))
    return dm(m, v, y), 2.0 * dv(m, v, y)


def _linear_gaussian_moments(noise_var, m, v, y):
    del v
    return (y - m) / noise_var, -jnp.ones_like(m) / noise_var


def _linear_gaussian_expected(noise_var, m, v, y):
    return -0.5 * (((y - m) ** 2 + v) / noise_var + jnp.log(2 * jnp.pi * noise_var))


def linear_gaussian(noise_var=1.0) -> Model:
    """``y = x^T theta + eps``, ``eps ~ N(0, noise_var)``; R-VGA is then the Kalman filter ([RVGA] Thm 2).

    ``noise_var`` may be a traced array, so it can be vmapped over. ``None``: unknown and learned
    (:func:`gaussian`; the filter is then the exact normal-inverse-gamma one of :mod:`jaxrvga.noise`).

    Args:
      noise_var: the observation noise variance, > 0 (``None``: learned).

    Returns:
      A :class:`Model` (a GLM: ``x`` (d,) or (m, d)).

    Example:
      >>> H = jax.random.normal(jax.random.key(0), (50, 2))
      >>> y = H @ jnp.array([1.0, -1.0])
      >>> flt = jr.rvga(jr.models.linear_gaussian(noise_var=0.01))
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(2), jnp.eye(2)), H, y)
      >>> state.mean.round(2).tolist()
      [1.0, -1.0]
    """
    family = gaussian(noise_var)
    nv = 1.0 if noise_var is None else noise_var
    return Model("linear_gaussian", family, linear_predict, Bound(_linear_gaussian_moments, nv),
                 nv, Bound(_linear_gaussian_expected, nv))


def _logistic_moments(m, v, y):
    mean, slope = special.probit_moments(m, v)
    return y - mean, -slope


def logistic() -> Model:
    """Bayesian logistic regression, ``y in {0, 1}``, ``p(y=1) = sig(x^T theta)``.

    Gaussian expectations use the inverse-probit closed form ([RVGA] eq. 58):
    ``E[sig(a)] ~= sig(k m)``, ``E[sig'(a)] ~= k sig'(k m)``, ``k = k(v)``.

    Returns:
      A :class:`Model` (a GLM: ``x`` (d,) or (m, d), ``y`` in {0, 1}).

    Example:
      >>> X = jax.random.normal(jax.random.key(0), (200, 2))
      >>> y = (X[:, 0] > 0).astype(jnp.float32)
      >>> flt = jr.rvga(jr.models.logistic())
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(2), 10.0 * jnp.eye(2)), X, y)
      >>> p, _ = jr.predictive(state, jnp.array([[2.0, 0.0]]), jr.models.logistic())
      >>> bool(p[0] > 0.9)
      True
    """
    fam = bernoulli()
    return Model("logistic", fam, linear_predict, _logistic_moments, None,
                 Bound(_gauss_hermite_expected_log_lik, fam, 32))


def _poisson_moments(m, v, y):
    rate = jnp.exp(m + 0.5 * v)
    return y - rate, -rate


def _poisson_expected(m, v, y):
    return y * m - jnp.exp(m + 0.5 * v) - jax.scipy.special.gammaln(y + 1.0)


def poisson() -> Model:
    """Poisson regression with log link; Gaussian moments are exact: ``E[e^a] = exp(m + v/2)``.

    Returns:
      A :class:`Model` (a GLM: ``x`` (d,) or (m, d), ``y`` counts).

    Example:
      >>> X = jax.random.normal(jax.random.key(0), (500, 2))
      >>> rate = jnp.exp(X @ jnp.array([0.5, -0.5]))
      >>> counts = jax.random.poisson(jax.random.key(1), rate)
      >>> flt = jr.rvga(jr.models.poisson())
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(2), jnp.eye(2)), X, counts)
      >>> bool(jnp.allclose(state.mean, jnp.array([0.5, -0.5]), atol=0.2))
      True
    """
    return Model("glm", poisson_family(), linear_predict, _poisson_moments, None, _poisson_expected)


def glm(family: Family, num_points: int = 32) -> Model:
    """A generalised linear model ``eta = x^T theta`` with any family; expectations by Gauss-Hermite.

    Args:
      family: a scalar-output :class:`Family` (:func:`gaussian`, :func:`bernoulli`, :func:`poisson_family`, ...).
      num_points: Gauss-Hermite nodes of the expectations.

    Returns:
      A :class:`Model` (a GLM: ``x`` (d,) or (m, d)).

    Example:
      >>> model = jr.models.glm(jr.models.bernoulli(), num_points=16)
      >>> flt = jr.rvga(model)
      >>> state = flt.init(jnp.zeros(2), jnp.eye(2))
      >>> state = flt.update(state, jnp.array([1.0, 0.0]), 1.0)
      >>> bool(state.mean[0] > 0)
      True
    """
    if family.vector_output:
        raise ValueError("family: a categorical output needs K logits, not one linear predictor; "
                         "use softmax_regression(dim, num_classes) or nonlinear(h, categorical(K))")
    expected = Bound(_gauss_hermite_expected_log_lik, family, num_points)
    return Model("glm", family, linear_predict, Bound(_moments_from_expectation, expected), None, expected)


def _unravelled(h, unravel, theta, x):
    return h(unravel(theta), x)


def nonlinear(h: Callable, family: Family | None = None, unravel: Callable | None = None) -> Model:
    """A nonlinear model ``eta = h(theta, x)`` with an exponential-family output (default Gaussian, unit noise).

    ``h`` may return a scalar or a vector; components of ``y`` are independent given ``eta``.
    Filters take Jacobians of ``h`` by autodiff ([LRVGA] §4.2, GGN eq. 41).
    Filters work on a flat parameter vector. For a pytree of parameters (a flax or
    equinox model), pass ``unravel`` from ``jax.flatten_util.ravel_pytree``: ``h`` is then
    called as ``h(unravel(theta), x)``.

    Args:
      h: the predictor ``h(theta, x) -> eta``, a scalar or a vector (K logits for :func:`categorical`).
      family: the output's :class:`Family` (default ``gaussian(1.0)``).
      unravel: the function of ``ravel_pytree`` that rebuilds the parameters from the flat ``theta``.

    Returns:
      A :class:`Model`; its filters take any ``x`` that ``h`` accepts.

    Example:
      >>> def h(theta, x):  # one tanh unit
      ...     return jnp.tanh(x @ theta)
      >>> X = jax.random.normal(jax.random.key(0), (200, 2))
      >>> y = h(jnp.array([1.0, -1.0]), X)
      >>> model = jr.models.nonlinear(h, jr.models.gaussian(0.01))
      >>> flt = jr.rvga(model, scheme="ekf")
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(2), jnp.eye(2)), X, y)
      >>> state.mean.round(1).tolist()
      [1.0, -1.0]
    """
    family = gaussian(1.0) if family is None else family
    predict = h if unravel is None else Bound(_unravelled, h, unravel)
    return Model("nonlinear", family, predict, None)


def _each_input(predict, theta, x):
    """``predict`` mapped over the leading axis of the inputs ``x`` (a minibatch)."""
    return jax.vmap(predict, in_axes=(None, 0))(theta, x)


def minibatch(model: Model) -> Model:
    """``model`` for minibatches: ``x`` with a leading axis of m inputs (any pytree whose leaves have
    it), ``y`` of m observations, and ``eta`` one prediction per input (``predict`` vmapped over
    the inputs), so that an update absorbs the m observations at once. With the EKF scheme that
    is one linearisation at the mean for the m ([RVGA] eq. 81 with the m rows of ``J``), cheaper
    per observation for networks than m steps (BENCHMARKS.md, "Minibatches"). Every observation
    is counted once. :func:`jaxrvga.posterior_predictive.predictive` takes the returned model too (it
    predicts as the model of one input). GLMs take minibatches ``x`` (m, d) as they are, so only
    nonlinear models (:func:`nonlinear`, :func:`softmax_regression`) are accepted.

    Args:
      model: a nonlinear model (:func:`nonlinear`, :func:`softmax_regression`).

    Returns:
      The :class:`Model` of a minibatch of its inputs.

    Example:
      >>> def h(theta, x):  # one input x (2,)
      ...     return jnp.tanh(x @ theta)
      >>> model = jr.models.nonlinear(h, jr.models.gaussian(0.01))
      >>> model = jr.models.minibatch(model)  # x: a batch of inputs (10, 2)
      >>> X = jax.random.normal(jax.random.key(0), (50, 10, 2))  # 50 batches of 10
      >>> y = h(jnp.ones(2), X)  # (50, 10)
      >>> flt = jr.rvga(model, scheme="ekf")
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(2), jnp.eye(2)), X, y)
      >>> state.mean.round().tolist()
      [1.0, 1.0]
    """
    if not isinstance(model, Model) or model.kind != "nonlinear":
        kind = model.kind if isinstance(model, Model) else type(model).__name__
        raise ValueError(f"model must be a nonlinear model (jr.models.nonlinear); got {kind!r}"
                         + (": GLMs take x of shape (m, d) as they are" if isinstance(model, Model) else ""))
    return model._replace(predict=Bound(_each_input, model.predict), per_input=model.predict)


def tempered(model: Model, power: float) -> Model:
    """``model`` whose updates absorb ``p(y | theta, x)^power``: a step's curvature and gradient times
    ``power`` (and, for a learned noise variance, its shape and rate increments, the linearised
    residual's covariance ``I + power J P J^T``). ``E`` passes over a data set with ``power = 1/E``
    (:func:`jaxrvga.passes`) count each observation once in all and relinearise it at later, better means: for a
    linear-Gaussian model they end at the batch posterior exactly, for a network at a better one than
    one pass on the classifiers measured (experiments/REPORT.md, "Tempered passes over a data set in
    hand"). The predictive and the log predictive read the untempered density; a model average scores
    each step at ``power`` (:func:`jaxrvga.model_average`). The one-evaluation schemes ``exact``,
    ``ekf``, ``moment_ekf`` and ``qkf`` take a tempered model; the others refuse it. Passes are for a
    static parameter: a filter with dynamics applies its transition at every step of every pass.

    Args:
      model: an observation model.
      power: in (0, 1]; 1 is ``model`` itself.

    Returns:
      The :class:`Model` with ``power``.

    Example:
      >>> model = jr.models.tempered(jr.models.linear_gaussian(0.25), 0.5)  # two passes
      >>> flt = jr.rvga(model)
      >>> X = jax.random.normal(jax.random.key(0), (40, 2))
      >>> y = X @ jnp.array([1.0, -1.0])
      >>> state = jr.passes(flt, flt.init(jnp.zeros(2), jnp.eye(2)), X, y)  # 1 / power = 2 passes
      >>> precision = jnp.eye(2) + X.T @ X / 0.25  # the batch posterior's
      >>> bool(jnp.allclose(state.mean, jnp.linalg.solve(precision, X.T @ y / 0.25), atol=1e-4))
      True
    """
    if not isinstance(model, Model):
        raise ValueError(f"model must be a jaxrvga.models.Model, got {type(model).__name__}")
    if isinstance(power, bool) or not isinstance(power, numbers.Real) or not 0.0 < power <= 1.0:
        raise ValueError(f"power must be a number in (0, 1] (1/E for E passes; above 1 an observation would "
                         f"count more than once), got {power!r}")
    return model._replace(power=float(power))


def softmax_regression(dim: int, num_classes: int) -> Model:
    """Multi-class linear model: logits ``eta = Theta^T x`` (K,), ``y ~ categorical(softmax(eta))``.

    ``theta`` is the (dim * K,) vector ``Theta.ravel()`` of a (dim, K) weight matrix ``Theta``
    (row-major: ``theta[i * K + k] = Theta[i, k]``); ``x`` is (dim,); ``y`` a label in {0..K-1}
    or a one-hot (K,). Built with :func:`nonlinear`, so filters linearise it by autodiff (exactly:
    the predictor is linear). A common shift of the K columns leaves the likelihood unchanged;
    the prior identifies it.

    Args:
      dim: the input dimension.
      num_classes: ``K >= 2``.

    Returns:
      A nonlinear :class:`Model` of ``dim * K`` parameters.

    Example:
      >>> X = jax.random.normal(jax.random.key(0), (300, 2))
      >>> Theta = jnp.array([[1.0, -1.0, 0.0], [0.0, 1.0, -1.0]])
      >>> labels = jnp.argmax(X @ Theta, axis=1)
      >>> model = jr.models.softmax_regression(dim=2, num_classes=3)
      >>> flt = jr.rvga(model, scheme="ekf")
      >>> state, _ = jr.run(flt, flt.init(jnp.zeros(6), 10.0 * jnp.eye(6)), X, labels)
      >>> probs, _ = jr.predictive(state, X[:5], model)
      >>> bool(jnp.all(jnp.argmax(probs, axis=1) == labels[:5]))
      True
    """
    dim = positive_int("dim", dim)
    family = categorical(num_classes)
    return nonlinear(Bound(_linear_logits, dim, int(num_classes)), family)


def _linear_logits(dim, K, theta, x):
    if isinstance(x, SparseRow):
        return x.dot(jnp.reshape(theta, (dim, K)))
    return jnp.asarray(x) @ jnp.reshape(theta, (dim, K))


# --------------------------------------------------------------------------- observation checks


__all__ = ["Model", "linear_gaussian", "logistic", "poisson", "glm", "nonlinear", "minibatch", "tempered",
           "softmax_regression", "linear_predict"]
