"""Input checks shared by every public entry point.

Checks run at trace time on shapes and dtypes, and on values only where the
values are concrete (outside ``jit``): inside a trace a value check is skipped,
never guessed. Every failure raises ``ValueError`` naming the argument.
"""
from __future__ import annotations

import functools
import operator
from typing import Iterable

import jax
import jax.numpy as jnp
import numpy as np


def is_concrete(x) -> bool:
    """True when ``x`` holds values we may inspect (it is not a JAX tracer).

    Args:
      x: a pytree.

    Returns:
      A bool.
    """
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x))


def is_plug_in(scale) -> bool:
    """Whether ``scale`` is a concrete 0: the plug-in ``p(y | theta = mean)``, whose predictive needs the
    model's output at the mean alone (no Jacobian, no ``J P J^T``).

    Args:
      scale: a covariance scale.

    Returns:
      A bool.
    """
    return is_concrete(scale) and float(scale) == 0.0


def check_float_array(name: str, x):
    """Return ``x`` as a floating JAX array; raise if it is not real numeric (complex refused).

    Args:
      name: the name in the message.
      x: an array-like.

    Returns:
      ``x`` as a floating JAX array (integers and bools cast to the default float).
    """
    if np.iscomplexobj(x):
        raise ValueError(f"{name} must be a real array, got a complex one (its imaginary part would be lost)")
    try:
        x = jnp.asarray(x)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a real array ({err})") from None
    if not (jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.integer)
            or x.dtype == jnp.bool_):
        raise ValueError(f"{name} must be a real array, got dtype {x.dtype}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


def check_vector(name: str, x, dim: int | None = None):
    """``x`` must be 1-D, of length ``dim`` when given.

    Args:
      name: the name in the message.
      x: an array-like.
      dim: the required length (None: any).

    Returns:
      ``x`` as a floating JAX array.
    """
    x = check_float_array(name, x)
    if x.ndim != 1:
        raise ValueError(f"{name} must be a vector of shape ({dim if dim is not None else 'd'},), "
                         f"got shape {x.shape}")
    if dim is not None and x.shape[0] != dim:
        raise ValueError(f"{name} must have length {dim} to match the state, got shape {x.shape}")
    return x


def all_finite(*arrays):
    """True (a traced boolean) when every entry of every floating array is finite.

    Args:
      arrays: arrays (non-floating ones are skipped).

    Returns:
      A 0-d bool array.
    """
    tests = [jnp.all(jnp.isfinite(a)) for a in arrays if jnp.issubdtype(jnp.result_type(a), jnp.inexact)]
    return functools.reduce(operator.and_, tests, jnp.asarray(True))


def check_finite(name: str, x):
    """Raise if concrete ``x`` holds a NaN or inf (skipped inside a trace); returns ``x``.

    Args:
      name: the name in the message.
      x: an array.

    Returns:
      ``x`` unchanged; raises ``ValueError`` otherwise.
    """
    if is_concrete(x) and not np.all(np.isfinite(np.asarray(x))):
        raise ValueError(f"{name} must be finite (it contains NaN or inf)")
    return x


def check_cov(name: str, cov, dim: int, rtol: float = 1e-6, semidefinite: bool = False):
    """``cov`` must be a square (dim, dim) matrix; where concrete, finite, symmetric and positive
    definite (a Cholesky factorisation in NumPy float64 succeeds). ``semidefinite=True`` (kernel
    matrices, often singular) accepts eigenvalues down to ``-sqrt(eps) max|eig|`` instead.

    Args:
      name: the name in the message.
      cov: the matrix.
      dim: its required size.
      rtol: the relative tolerance of the symmetry check.
      semidefinite: accept a positive semidefinite matrix.

    Returns:
      ``cov`` as a floating JAX array.
    """
    cov = check_float_array(name, cov)
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {cov.shape}")
    if cov.shape[0] != dim:
        raise ValueError(f"{name} must have shape ({dim}, {dim}) to match the mean, got {cov.shape}")
    if is_concrete(cov):
        c = np.asarray(cov, dtype=np.float64)
        if not np.all(np.isfinite(c)):
            raise ValueError(f"{name} must be finite")
        scale = max(np.max(np.abs(c)), np.finfo(np.float64).tiny)
        if np.max(np.abs(c - c.T)) > rtol * scale:
            raise ValueError(f"{name} must be symmetric; max |{name} - {name}^T| = "
                             f"{np.max(np.abs(c - c.T)):.3g}")
        if _is_positive_definite(c):
            return cov
        if not semidefinite:
            raise ValueError(f"{name} must be positive definite")
        eig = np.linalg.eigvalsh(0.5 * (c + c.T))
        if eig[0] < -np.sqrt(np.finfo(np.float64).eps) * max(np.max(np.abs(eig)), 1e-300):
            raise ValueError(f"{name} must be positive semidefinite, got an eigenvalue {eig[0]:.3g}")
    return cov


def _is_positive_definite(c) -> bool:
    """Whether the symmetric part of the float64 matrix ``c`` has a Cholesky factor (O(d^3 / 3), a sixth
    of an eigen-decomposition's cost)."""
    try:
        np.linalg.cholesky(0.5 * (c + c.T))
    except np.linalg.LinAlgError:
        return False
    return True


def check_invertible(name: str, v):
    """Every entry of ``v`` > 0 with ``1 / v`` finite in its dtype (a precision from a variance, or
    the reverse; checked where concrete). Returns ``v``.

    Args:
      name: the name in the message.
      v: an array.

    Returns:
      ``v`` unchanged; raises ``ValueError`` otherwise.
    """
    check_positive(name, v)
    if is_concrete(v) and np.min(np.asarray(v)) < 1.0 / np.finfo(np.asarray(v).dtype).max:
        raise ValueError(f"{name} must be large enough that 1 / {name} is finite in {np.asarray(v).dtype} "
                         f"(no subnormal values), got min {float(np.min(np.asarray(v)))!r}")
    return v


def check_positive(name: str, v, allow_traced: bool = True):
    """Every entry of ``v`` must be > 0 (checked where concrete).

    Args:
      name: the name in the message.
      v: an array.
      allow_traced: accept a traced ``v`` unchecked (False: refuse it).

    Returns:
      ``v`` unchanged; raises ``ValueError`` otherwise.
    """
    if is_concrete(v):
        a = np.asarray(v)
        if not np.all(np.isfinite(a)) or not np.all(a > 0):
            raise ValueError(f"{name} must be positive and finite, got min {np.min(a)!r}")
    elif not allow_traced:
        raise ValueError(f"{name} must be a concrete value")
    return v


def check_nonnegative(name: str, value):
    """``value >= 0`` (and not NaN) where concrete.

    Args:
      name: the name in the message.
      value: a scalar or array.

    Returns:
      ``value`` unchanged; raises ``ValueError`` otherwise.
    """
    if value is not None and is_concrete(value) and not np.min(np.asarray(value)) >= 0.0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


def check_labels01(name: str, y):
    """Labels of a Bernoulli model must be 0 or 1 (checked where concrete).

    Args:
      name: the name in the message.
      y: the labels.

    Returns:
      ``y`` unchanged; raises ``ValueError`` otherwise.
    """
    if is_concrete(y):
        a = np.asarray(y)
        if not np.all((a == 0) | (a == 1)):
            bad = a[(a != 0) & (a != 1)].ravel()[:3]
            raise ValueError(f"{name} must contain labels in {{0, 1}} for the logistic model, "
                             f"got values such as {bad.tolist()}")
    return y


def check_counts(name: str, y):
    """Poisson observations must be non-negative integers (checked where concrete).

    Args:
      name: the name in the message.
      y: the counts.

    Returns:
      ``y`` unchanged; raises ``ValueError`` otherwise.
    """
    if is_concrete(y):
        a = np.asarray(y)
        if not np.all((a >= 0) & (np.floor(a) == a)):
            raise ValueError(f"{name} must contain non-negative integer counts for the Poisson model")
    return y


def positive_int(name: str, value, minimum: int = 1) -> int:
    """``value`` as a Python int >= ``minimum`` (default 1; integer-likes such as ``np.int64``
    accepted; bools, floats such as 2.5 and traced values not).

    Args:
      name: the name in the message.
      value: the value given.
      minimum: the least value allowed.

    Returns:
      ``value`` as an int.
    """
    what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be {what}, got {value!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


def check_tolerance(name: str, tol):
    """A stopping tolerance: a real scalar, finite and >= 0 where concrete (it may be traced).
    NaN would never stop a loop and ``inf`` would stop it at once reporting convergence; both,
    negative values, complex numbers, strings and None raise. Returns ``tol``.

    Args:
      name: the name in the message.
      tol: the tolerance.

    Returns:
      ``tol`` unchanged; raises ``ValueError`` otherwise.
    """
    if tol is None or isinstance(tol, (str, bytes, bool)) or np.iscomplexobj(tol) or np.ndim(tol) != 0:
        raise ValueError(f"{name} must be a real scalar >= 0, got {tol!r}")
    if is_concrete(tol) and not (np.isfinite(float(tol)) and float(tol) >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {tol!r}")
    return tol


def check_choice(name: str, value, allowed: Iterable[str]):
    """``value`` must be one of ``allowed``.

    Args:
      name: the name in the message.
      value: the value given.
      allowed: the values allowed.

    Returns:
      ``value`` unchanged; raises ``ValueError`` otherwise.
    """
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; expected one of {allowed}")
    return value


def check_batch_problem(family, X, y, prior_mean, prior_cov, x_name: str = "X"):
    """Validate a batch Bayesian GLM problem and cast it to one float dtype.

    ``X`` (N, D) with D >= 1, ``y`` (N,) valid for ``family`` (where concrete; ``family`` may be
    None), ``prior_mean`` (D,), ``prior_cov`` (D, D) symmetric positive definite; all finite where
    concrete. Returns ``(X, y, prior_mean, prior_cov)``.

    Args:
      family: the observation family (None: ``y`` unchecked).
      X: the inputs, (N, D).
      y: the outputs, (N,).
      prior_mean: (D,).
      prior_cov: (D, D).
      x_name: the name of ``X`` in messages.

    Returns:
      ``(X, y, prior_mean, prior_cov)`` in one floating dtype.
    """
    X = check_float_array(x_name, X)
    if X.ndim != 2:
        raise ValueError(f"{x_name} must be a matrix of shape (N, D), got shape {X.shape}")
    N, D = X.shape
    if D == 0:
        raise ValueError(f"{x_name} must have at least one column (D >= 1), got shape {X.shape}")
    check_finite(x_name, X)
    y = check_finite("y", check_vector("y", y, N))
    mu = check_finite("prior_mean", check_vector("prior_mean", prior_mean, D))
    Sigma = check_cov("prior_cov", prior_cov, D)
    if family is not None:
        family.check_y("y", y)
    dtype = jnp.result_type(X, mu, Sigma, y)
    return X.astype(dtype), y.astype(dtype), mu.astype(dtype), Sigma.astype(dtype)


def raw_key_shape():
    """Shape of the raw key data of JAX's default PRNG implementation ((2,) for threefry2x32).

    Returns:
      A tuple.
    """
    return jax.eval_shape(lambda: jax.random.PRNGKey(0)).shape


def check_key(key, required: bool = False, needed_by: str = "this filter",
              pass_as: str = "init(..., key=jax.random.key(seed))"):
    """``key`` is None (refused if ``required``) or one PRNG key: a typed key of shape ()
    (``jax.random.key``) or raw ``uint32`` key data of the default implementation's shape
    (``jax.random.PRNGKey``, (2,)). An integer seed, floats, strings and batches of keys are refused
    (an integer would fail later inside JAX with a TypeError); checked on shapes and dtypes, so
    traced keys (vmapped fleets) are checked too. Returns ``key``.

    Args:
      key: the key given, or None.
      required: refuse None.
      needed_by: what needs the key, in the message.
      pass_as: how to give it, in the message where it is missing.

    Returns:
      ``key`` unchanged (None where not given).
    """
    if key is None:
        if required:
            raise ValueError(f"key is required by {needed_by}: pass {pass_as}")
        return None
    hint = "a PRNG key, jax.random.key(seed) or jax.random.PRNGKey(seed)"
    if isinstance(key, (bool, int, np.integer)):
        raise ValueError(f"key must be {hint}, got the integer {key!r}; pass jax.random.key({key!r})")
    dtype = getattr(key, "dtype", None)
    if dtype is None or not hasattr(key, "shape"):
        raise ValueError(f"key must be {hint}, got {type(key).__name__}")
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"key must be one typed PRNG key (shape ()), got shape {key.shape}")
        return key
    want = raw_key_shape()
    if dtype != jnp.uint32 or tuple(key.shape) != want:
        raise ValueError(f"key must be {hint}; raw key data must be uint32 of shape {want}, "
                         f"got {dtype} of shape {tuple(key.shape)}")
    return key


__all__ = ["is_concrete", "is_plug_in", "check_float_array", "check_vector", "all_finite", "check_finite", "check_cov",
           "check_invertible", "check_positive", "check_nonnegative", "check_labels01", "check_counts", "positive_int",
           "check_tolerance", "check_choice", "check_batch_problem", "check_key", "raw_key_shape"]
