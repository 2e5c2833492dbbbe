"""The checks of a state read from a file: NumPy on concrete arrays, each a ``ValueError`` naming the field.

A state type's own check, written with these, lives with the type and is passed to
:func:`jaxrvga.io.register` there (:mod:`jaxrvga.io` is the codec)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def is_array(x):
    """Whether ``x`` is a JAX or NumPy array (or a NumPy scalar).

    Args:
      x: any object.

    Returns:
      A bool.
    """
    return isinstance(x, (jax.Array, np.ndarray, np.generic))


def shape_of(x):
    """The shape of ``x`` as a tuple.

    Args:
      x: an array or an array-like.

    Returns:
      A tuple of ints.
    """
    return tuple(np.shape(x))


def dtype_of(x):
    """The NumPy dtype of ``x``, or None for an object without one.

    Args:
      x: any object.

    Returns:
      A ``numpy.dtype``, or None.
    """
    return np.dtype(x.dtype) if hasattr(x, "dtype") else None


def need(cond, msg):
    """``ValueError(msg)`` unless ``cond``.

    Args:
      cond: the condition that must hold.
      msg: the message of the error.

    Returns:
      None.
    """
    if not cond:
        raise ValueError(msg)


def floating(name, x):
    """``ValueError`` naming ``name`` unless ``x`` is a floating array.

    Args:
      name: the name in the message.
      x: the value checked.

    Returns:
      None.
    """
    need(is_array(x) and jnp.issubdtype(dtype_of(x), jnp.floating),
          f"{name} must be a floating array, got {type(x).__name__} {getattr(x, 'dtype', '')}")


def values(x):
    """``x`` in NumPy float64 (value checks of a load; bfloat16 and other ml_dtypes included).

    Args:
      x: an array.

    Returns:
      A float64 NumPy array of ``x``'s shape.
    """
    return np.asarray(x).astype(np.float64)


def finite(name, x):
    """``ValueError`` naming ``name`` unless every entry of ``x`` is finite.

    Args:
      name: the name in the message.
      x: an array.

    Returns:
      None.
    """
    need(np.all(np.isfinite(values(x))), f"{name} must be finite (it holds NaN or inf)")


def positive(name, x):
    """``ValueError`` naming ``name`` unless every entry of ``x`` is positive and finite.

    Args:
      name: the name in the message.
      x: an array.

    Returns:
      None.
    """
    v = values(x)
    need(np.all(np.isfinite(v)) and np.all(v > 0), f"{name} must be positive and finite, got min {np.min(v)!r}")


def symmetric_pd(name, cov):
    """``cov`` (..., d, d): finite, symmetric to ``sqrt(eps)`` of its dtype relative to its largest
    entry, and positive definite (a float64 Cholesky factorisation of each matrix succeeds): what
    the skip-and-flag guard of every filter keeps (:mod:`jaxrvga.guard`).

    Args:
      name: the name in the message.
      cov: the matrices, (..., d, d).

    Returns:
      None; raises ``ValueError`` naming ``name``.
    """
    c = values(cov)
    finite(name, c)
    tol = np.sqrt(np.finfo(dtype_of(cov)).eps) * max(float(np.max(np.abs(c), initial=0.0)), 1e-300)
    asym = float(np.max(np.abs(c - np.swapaxes(c, -1, -2)), initial=0.0))
    need(asym <= tol, f"{name} must be symmetric, max |{name} - {name}^T| = {asym:.3g}")
    try:
        np.linalg.cholesky(0.5 * (c + np.swapaxes(c, -1, -2)))
    except np.linalg.LinAlgError:
        raise ValueError(f"{name} must be positive definite") from None


def check_moments(st, vectors=(), cov="cov", scalars=()):
    """``mean`` (..., D) and ``cov`` (..., D, D) of one floating dtype, the listed per-datum
    vectors (``alpha``, ``gamma``: (..., N)) of one shape and the same batch shape, and the listed
    scalars (``converged``, ``iterations``, ...) of the batch shape (the batch results: Laplace,
    dual, KL-prox).

    Args:
      st: the loaded result (fields ``mean``, ``cov`` and those named below).
      vectors: the names of the per-datum vectors.
      cov: the name of the covariance field.
      scalars: the names of the per-batch scalars (a field may be None).

    Returns:
      None; raises ``ValueError``.
    """
    for f in scalars:
        x = getattr(st, f)
        need(x is None or (is_array(x) and shape_of(x) == shape_of(st.mean)[:-1]),
              f"{f} must be an array of shape {shape_of(st.mean)[:-1]}, got {shape_of(x) if is_array(x) else type(x).__name__}")
    floating("mean", st.mean)
    floating(cov, getattr(st, cov))
    m, c = shape_of(st.mean), shape_of(getattr(st, cov))
    need(len(m) >= 1 and c == m + m[-1:], f"{cov} has shape {c}, expected {m + m[-1:]} for a mean of shape {m}")
    need(dtype_of(getattr(st, cov)) == dtype_of(st.mean), f"mean and {cov} must share one dtype")
    shapes = {shape_of(getattr(st, f)) for f in vectors if getattr(st, f) is not None}
    for f in vectors:
        if getattr(st, f) is not None:
            floating(f, getattr(st, f))
    need(len(shapes) <= 1, f"{', '.join(vectors)} must share one shape, got {sorted(shapes)}")
    need(all(len(s) >= 1 and s[:-1] == m[:-1] for s in shapes),
          f"{', '.join(vectors)} must have the batch shape {m[:-1]} of the mean plus one axis, got {sorted(shapes)}")


def factors_check(st):
    """The check of a state with factors ``W`` (..., d, p) and ``psi`` (..., d): floating, finite
    ``W``, positive ``psi`` (the factor-analysis filters' states).

    Args:
      st: the loaded state (fields ``W`` and ``psi``).

    Returns:
      None; raises ``ValueError``.
    """
    floating("W", st.W)
    floating("psi", st.psi)
    W = shape_of(st.W)
    need(len(W) >= 2 and shape_of(st.psi) == W[:-1], f"W {W} and psi {shape_of(st.psi)} must be (d, p) and (d,)")
    finite("W", st.W)
    positive("psi", st.psi)


def vectors_check(*fields):
    """A check that the named fields are floating arrays of one shape (at least one axis) and one dtype.

    Args:
      fields: the names of the fields.

    Returns:
      The check ``check(st)``, which returns None or raises ``ValueError``.
    """
    def check(st):
        shapes = {shape_of(getattr(st, f)) for f in fields}
        for f in fields:
            floating(f, getattr(st, f))
        need(len(shapes) == 1 and len(next(iter(shapes))) >= 1,
              f"{', '.join(fields)} must be arrays of one shape, got {sorted(shapes)}")
        one_float_dtype(st)
    return check


def one_float_dtype(st):
    """The check of a state whose floating arrays, nested ones included, share one dtype (a scan carry
    of mixed float32 and float64 leaves fails in :func:`jaxrvga.run`).

    Args:
      st: the loaded state (a pytree).

    Returns:
      None; raises ``ValueError``.
    """
    dtypes = {str(dtype_of(a)) for a in jax.tree_util.tree_leaves(st)
              if is_array(a) and np.issubdtype(dtype_of(a), np.floating)}
    need(len(dtypes) <= 1, f"{type(st).__name__}: its floating arrays must share one dtype, got {sorted(dtypes)}")


def moments_check(vectors=(), cov="cov", scalars=(), like_mean=()):
    """A check of a batch result with a ``mean`` (..., D) and a ``cov`` (..., D, D) (see
    :func:`check_moments`); the fields ``like_mean`` must have the mean's shape.

    Args:
      vectors, cov, scalars: as :func:`check_moments`'s.
      like_mean: the names of the fields of the mean's shape.

    Returns:
      The check ``check(st)``, which returns None or raises ``ValueError``.
    """
    def check(st):
        check_moments(st, vectors, cov, scalars)
        for f in like_mean:
            need(shape_of(getattr(st, f)) == shape_of(st.mean),
                  f"{f} has shape {shape_of(getattr(st, f))}, expected {shape_of(st.mean)}")
    return check


__all__ = ["is_array", "shape_of", "dtype_of", "need", "floating", "values", "finite", "positive", "symmetric_pd", "check_moments", "factors_check", "vectors_check", "one_float_dtype", "moments_check"]
