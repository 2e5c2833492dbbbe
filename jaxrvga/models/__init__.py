"""Observation models: an exponential-family output on a predictor ``eta = h(theta, x)``.

One idea a module: :mod:`~jaxrvga.models.families` (the law of ``y`` given ``eta``),
:mod:`~jaxrvga.models.predictors` (the models), :mod:`~jaxrvga.models.sparse_rows` (sparse inputs),
:mod:`~jaxrvga.models.observations` (the checks of an observation); every name is here too.

A :class:`Model` couples a :class:`Family` (the law of ``y`` given ``eta``) with a
predictor. For generalised linear models (``eta = x^T theta``) every Gaussian
expectation the filters need reduces to a 1-D expectation over
``eta ~ N(x^T mu, x^T P x)`` ([RVGA] §4, [LRVGA] §4.1): :meth:`Model.glm_moments`
returns ``(E[d log p / d eta], E[d^2 log p / d eta^2])``, in closed form for the
Gaussian and Poisson families, by the inverse-probit approximation ([RVGA] eq. 58)
for the logistic model, and by Gauss-Hermite quadrature otherwise.

Inputs of the linear predictors may be sparse: :class:`SparseRow` (indices and values of the
non-zeros), for every GLM here and :func:`softmax_regression`.

Multi-class outputs use :func:`categorical` (K logits, softmax link, full Fisher
``diag(p) - p p^T`` with a square-root factor), e.g. :func:`softmax_regression`.
"""
from . import families, observations, predictors, sparse_rows
from .families import Family, bernoulli, categorical, gaussian, gaussian_log_density, poisson_family
from .observations import check_data, check_observation, check_y_shape, glm_inputs, linearize
from .predictors import (Model, glm, linear_gaussian, linear_predict, logistic, minibatch, nonlinear, poisson,
                         softmax_regression, tempered)
from .sparse_rows import SparseRow

__all__ = ["Family", "Model", "gaussian", "bernoulli", "poisson_family", "categorical", "linear_gaussian",
           "logistic", "poisson", "glm", "nonlinear", "minibatch", "tempered", "softmax_regression", "linear_predict",
           "check_observation", "glm_inputs", "linearize", "check_y_shape", "check_data",
           "gaussian_log_density", "SparseRow", "families", "observations", "predictors", "sparse_rows"]
