"""The checks of an observation ``(x, y)`` of a model against a belief, and of a data set before a run.

Every filter's update asks them, :func:`jaxrvga.run` before it scans and :func:`jaxrvga.log_predictive`."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..validation import is_concrete
from .predictors import Model
from .sparse_rows import SparseRow


def check_observation(state, x, y, model: Model):
    """One observation ``(x, y)`` of ``model`` checked against the belief ``state`` (shapes, dtypes and,
    where concrete, the family's values of ``y``): ``(x, y)`` as the update takes them.

    Args:
      state: the belief's state (its mean fixes ``d`` and the dtype).
      x, y: one observation or a minibatch.
      model: the observation model.

    Returns:
      ``(x, y)``: for a GLM as :func:`glm_inputs` returns them; otherwise ``x`` unchanged and ``y`` in the
      state's dtype. Raises ``ValueError`` for a mismatch.
    """
    if model.is_glm:
        return glm_inputs(state, x, y, model)
    if jnp.iscomplexobj(jnp.asarray(y)):
        raise ValueError("y must be real")
    model.family.check_y("y", y)
    check_y_shape(model, "y", y, jax.eval_shape(model.predict, state.mean, x).shape)
    return x, jnp.asarray(y, state.mean.dtype)


def glm_inputs(state, x, y, model):
    """``x`` (d,) with scalar ``y``, or (m, d) with ``y`` (m,), or a :class:`~jaxrvga.models.SparseRow`
    of shape (nnz,) or (m, nnz); returns ``(X (m, d), y (m,))`` in the state's dtype (a sparse ``x``
    scattered into its dense rows).

    Args:
      state: the belief's state (its mean fixes ``d`` and the dtype).
      x, y: the input(s) and output(s), as above.
      model: a GLM.

    Returns:
      ``(X, y)``, (m, d) and (m,) (m = 1 for one observation).
    """
    d, dtype = state.mean.shape[0], state.mean.dtype
    sparse = isinstance(x, SparseRow)
    x = x.checked("x", d, dtype) if sparse else jnp.asarray(x)
    if jnp.iscomplexobj(x.values if sparse else x) or jnp.iscomplexobj(jnp.asarray(y)):
        raise ValueError("x and y must be real")
    if sparse and x.ndim > 2:
        raise ValueError(f"x: a SparseRow must have shape (nnz,) or (m, nnz), got {x.shape}")
    if not sparse and (x.ndim not in (1, 2) or x.shape[-1] != d):
        raise ValueError(f"x must have shape ({d},) or (m, {d}) to match the state, got {x.shape}")
    want = () if x.ndim == 1 else x.shape[:1]
    if jnp.shape(y) != want:
        raise ValueError(f"y must have shape {want} to match x of shape {x.shape} for the {model.kind} "
                         f"model, got {jnp.shape(y)}")
    model.family.check_y("y", y)
    X = x.todense(d, dtype) if sparse else x.astype(dtype)
    return jnp.atleast_2d(X), jnp.reshape(jnp.asarray(y, dtype), (-1,))


def linearize(model: Model, theta, x, jacobian: bool = True):
    """``(eta, J)``: the predictor of one checked observation (:func:`check_observation`) at ``theta``,
    flattened to its k components, and its Jacobian ``d eta / d theta`` (k, d): a GLM's rows ``x``
    themselves, a nonlinear model's by autodiff (reverse mode where k <= d). ``jacobian=False``: ``J``
    is None (the plug-in needs none).

    Args:
      model: the observation model.
      theta: the parameters, (d,).
      x: one checked observation's input (a GLM's (m, d); a minibatch model's batch, whose m
        predictions are the k components).
      jacobian: whether to compute ``J``.

    Returns:
      ``(eta, J)``, (k,) and (k, d) or None.
    """
    if model.is_glm:
        return x @ theta, x

    def eta_fn(t):
        return jnp.ravel(model.predict(t, x))

    eta = eta_fn(theta)
    if not jacobian:
        return eta, None
    return eta, (jax.jacrev if eta.shape[0] <= theta.shape[0] else jax.jacfwd)(eta_fn)(theta)


def check_y_shape(model: Model, name: str, y, eta_shape, time_axis: bool = False):
    """``y`` of a nonlinear model has the shape of the predictor's output ``eta`` (one per output; a
    single output may be a scalar): no silent broadcasting. A categorical family takes labels
    (``eta``'s shape without its last axis, the K logits) or one-hot rows of ``eta``'s shape, each
    with exactly one 1 and zeros elsewhere (checked where concrete). ``time_axis``: ``y`` and
    ``eta_shape`` lead with the time axis T of a data set.

    Args:
      model: a nonlinear model.
      name: the name in the message.
      y: the outputs.
      eta_shape: the shape of the predictor's output.
      time_axis: ``y`` and ``eta_shape`` lead with a time axis.

    Returns:
      None; raises ``ValueError`` for a mismatch.
    """
    shape = tuple(jnp.shape(y))
    eta_shape = tuple(eta_shape)
    one = (shape[:1] if time_axis else ()) + (1,)
    if model.family.vector_output:
        if shape == eta_shape[:-1]:
            return
        if shape == eta_shape:
            a = np.asarray(y) if is_concrete(y) else None
            if a is not None and not (np.all((a == 0) | (a == 1)) and np.all(np.sum(a, axis=-1) == 1)):
                raise ValueError(f"{name}: one-hot rows of the categorical model must hold exactly one 1 "
                                 f"and zeros elsewhere")
            return
        raise ValueError(f"{name} must hold labels of shape {eta_shape[:-1]} or one-hot rows of shape "
                         f"{eta_shape} for the model's logits, got shape {shape}")
    if shape != eta_shape and not (eta_shape in (one, one[:-1]) and shape in (one, one[:-1])):
        raise ValueError(f"{name} must have the shape {eta_shape} of the model's output, got {shape}")


def check_data(model: Model, state, xs, ys):
    """The data set ``(xs, ys)`` of a run checked against ``model`` and the belief ``state`` (the
    shapes of a stream of GLM rows or of a nonlinear model's inputs and outputs, the family's values of
    ``ys``); run by :func:`jaxrvga.run` before it scans (never under jit). Raises ``ValueError``.

    Args:
      model: the observation model.
      state: the initial state of the belief.
      xs, ys: the data, time along the leading axis.

    Returns:
      None.
    """
    if model.is_glm:
        d = state.mean.shape[0]
        if isinstance(xs, SparseRow):
            shape = xs.checked("xs", d).shape
            if len(shape) not in (2, 3):
                raise ValueError(f"xs: a SparseRow stream must have shape (T, nnz) or (T, m, nnz), got {shape}")
        else:
            shape = jnp.shape(xs)
            if len(shape) not in (2, 3) or shape[-1] != d:
                raise ValueError(f"xs must have shape (T, {d}) or (T, m, {d}) to match the state, got {shape}")
        if jnp.shape(ys) != shape[:-1]:
            raise ValueError(f"ys must have shape {shape[:-1]} to match xs, got {jnp.shape(ys)}")
    model.family.check_y("ys", ys)
    if not model.is_glm:
        x0 = jax.tree_util.tree_map(lambda a: a[0], xs)
        eta = jax.eval_shape(model.predict, state.mean, x0).shape
        check_y_shape(model, "ys", ys, tuple(jnp.shape(ys)[:1]) + eta, time_axis=True)


__all__ = ["check_observation", "glm_inputs", "linearize", "check_y_shape", "check_data"]
