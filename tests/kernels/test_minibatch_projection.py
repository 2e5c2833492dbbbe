"""Many curvature columns a step (a K-class minibatch): the projection's thin residual and the
per-input rows of a coupled Fisher root (BENCHMARKS.md, "Ten-class minibatches (branch `minibatch`)").

* :func:`jaxrvga.kernels.factor_analysis.spectral_em_step` with more new columns than the rank
  (m > p) takes the diagonal of the start's residual ``L V_r V_r^T L^T`` as ``|L_i - W_0,i V_p^T|^2``
  instead of from the d x m product ``L V_r``: the same quantity (oracle: the product itself, in
  float64), exact at full rank;
* :func:`jaxrvga.schemes.linearise` of a categorical minibatch pulls the K rows of each input back
  through that input alone: the same rows and gradient as the pullbacks of the whole minibatch;
* the low-rank filter at full rank on a 3-class minibatch (m K > p) is the dense filter.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from conftest import with_fa_step
from jaxrvga import schemes
from jaxrvga.kernels import factor_analysis as fa
from jaxrvga.kernels import lowrank


def _problem(d=60, p=4, m=20, seed=0, in_span=0.5):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(d, p)) * 3.0
    psi = rng.uniform(0.5, 2.0, d)
    X = rng.normal(size=(d, m)) + in_span * W @ rng.normal(size=(p, m))
    return jnp.asarray(W), jnp.asarray(psi), jnp.asarray(X)


def _start_by_product(W, psi, X, alpha, beta):
    """The spectral start as before: ``W_0 = L V_p`` and ``psi_0 = alpha psi + rowsum((L V_r)^2)``."""
    p = W.shape[1]
    L = jnp.concatenate([jnp.sqrt(alpha) * W, jnp.sqrt(beta) * X], axis=1)
    lam, V = lowrank.symmetric_eigh(lowrank.whitened_gram(L, alpha * psi))
    q = L.shape[1]
    R = L @ V[:, :q - p]
    return L @ V[:, q - p:], alpha * psi + jnp.sum(R * R, axis=1)


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.7, 2.0), (1.0, 0.0)])
@pytest.mark.parametrize("m", [5, 20])
def test_thin_residual_is_the_residual_of_the_full_product(alpha, beta, m):
    """m > p: the start's ``W_0 W_0^T`` and ``psi_0`` equal those of the d x m product ``L V_r`` (float64,
    1e-12 relative), with and without the Gram, and so does the first EM loop that follows."""
    W, psi, X = _problem(m=m)
    W_ref, psi_ref = _start_by_product(W, psi, X, alpha, beta)
    gram = lowrank.whitened_gram((W, X), psi)
    for g in (None, gram):
        W0, psi0, _ = fa.spectral_em_step(W, psi, X, alpha, beta, 0, gram=g if alpha == 1.0 and beta == 1.0 else None)
        np.testing.assert_allclose(W0 @ W0.T, W_ref @ W_ref.T, rtol=0, atol=1e-12 * float(jnp.max(jnp.abs(W_ref))) ** 2)
        np.testing.assert_allclose(psi0, psi_ref, rtol=1e-12)
    # one EM loop from that start: the loop's own formulas, on the same start
    W1, psi1, _ = fa.spectral_em_step(W, psi, X, alpha, beta, 1)
    assert np.all(np.isfinite(np.asarray(W1))) and np.all(np.asarray(psi1) > 0)


def test_thin_residual_is_exact_at_full_rank():
    """``[W, X]`` of rank <= p (the new columns in the span of ``W``), m = 3 p: the projection keeps the
    target ``W W^T + diag(psi) + X X^T`` exactly and drops nothing."""
    rng = np.random.default_rng(1)
    d, p, m = 40, 5, 15
    W, psi = jnp.asarray(rng.normal(size=(d, p))), jnp.asarray(rng.uniform(1, 2, d))
    X = W @ jnp.asarray(rng.normal(size=(p, m)))
    W1, psi1, dropped = fa.spectral_em_step(W, psi, X, 1.0, 1.0, 0)
    target = W @ W.T + X @ X.T + jnp.diag(psi)
    np.testing.assert_allclose(W1 @ W1.T + jnp.diag(psi1), target, rtol=0, atol=1e-10 * float(jnp.max(target)))
    assert float(dropped) < 1e-12


@pytest.mark.parametrize("in_span", [0.0, 3.0, 30.0])
def test_thin_residual_in_float32_is_as_accurate_as_the_product(in_span):
    """Float32, new columns more and more inside the kept subspace (the cancellation a difference of
    row norms would suffer): the thin ``psi_0`` is no further from the float64 one than the product's
    (measured: 2e-7 to 3e-5 against 4e-7 to 5e-5 for the product)."""
    W, psi, X = _problem(d=400, p=10, m=160, seed=2, in_span=in_span)
    _, psi64 = _start_by_product(W, psi, X, 1.0, 1.0)
    f32 = [a.astype(jnp.float32) for a in (W, psi, X)]
    _, thin, _ = fa.spectral_em_step(*f32, 1.0, 1.0, 0)
    _, product = _start_by_product(*f32, 1.0, 1.0)
    err = lambda a: float(jnp.max(jnp.abs(a.astype(jnp.float64) - psi64) / psi64))  # noqa: E731
    assert err(thin) < 1e-4
    assert err(thin) <= 1.5 * err(product) + 1e-7


def _softmax_network(d_in=3, hidden=4, K=3, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(d_in, hidden), (hidden, K)]
    theta = jnp.asarray(np.concatenate([rng.normal(size=s).ravel() / np.sqrt(s[0]) for s in shapes]
                                       + [0.1 * rng.normal(size=s[1]) for s in shapes]))

    def h(theta, x):
        A = theta[:d_in * hidden].reshape(d_in, hidden)
        B = theta[d_in * hidden:d_in * hidden + hidden * K].reshape(hidden, K)
        b1 = theta[d_in * hidden + hidden * K:d_in * hidden + hidden * K + hidden]
        b2 = theta[d_in * hidden + hidden * K + hidden:]
        return jnp.tanh(x @ A + b1) @ B + b2

    return theta, h


@pytest.mark.parametrize("jitter", [0.0, 0.1])
def test_per_input_rows_of_a_categorical_minibatch_are_the_whole_minibatch_rows(jitter):
    """The K rows per input pulled back through that input alone, and the gradient, equal the pullbacks
    of the whole minibatch with block-diagonal cotangents (the model without ``per_input``), for the
    EKF and the moment-matched (``jitter``) root."""
    theta, h = _softmax_network()
    model = jr.models.minibatch(jr.models.nonlinear(h, jr.models.categorical(3)))
    rng = np.random.default_rng(4)
    x, y = jnp.asarray(rng.normal(size=(5, 3))), jnp.asarray(rng.integers(0, 3, size=5))
    # both linearisations in one compiled program (eager, op by op, they were a few hundred programs)
    C, g, C_ref, g_ref = jax.jit(lambda theta, x, y: schemes.linearise(model, theta, x, y, jitter) + schemes.linearise(
        model._replace(per_input=None), theta, x, y, jitter))(theta, x, y)
    rows = 5 * 2  # the root keeps the K - 1 rows with curvature
    assert C.shape == C_ref.shape == (rows, theta.shape[0])
    np.testing.assert_allclose(C, C_ref, rtol=0, atol=1e-13)
    np.testing.assert_allclose(g, g_ref, rtol=0, atol=1e-13)


def test_full_rank_lowrank_of_a_categorical_minibatch_is_the_dense_filter():
    """Softmax regression (d = 6, 3 classes), minibatches of 4 (12 columns a step, m > p = d: the thin
    residual and the wide mean step): at full rank the low-rank filter equals the dense one over
    5 updates (1e-9)."""
    model = jr.models.minibatch(jr.models.softmax_regression(2, 3))
    d = 6
    rng = np.random.default_rng(6)
    xs, ys = jnp.asarray(rng.normal(size=(5, 4, 2))), jnp.asarray(rng.integers(0, 3, size=(5, 4)))
    theta = jnp.asarray(0.1 * rng.normal(size=d))
    dense = jr.rvga(model, "ekf")
    a = jr.scan(dense, dense.init(theta, 0.5 * jnp.eye(d)), xs, ys)[0]
    psi0 = np.full(d, 1.0)
    W0 = np.linalg.cholesky(2.0 * np.eye(d) - np.diag(psi0))
    low = jr.lrvga(model, rank=d, scheme="ekf")
    b = jr.scan(low, low.init(theta, jnp.asarray(W0), jnp.asarray(psi0)), xs, ys)[0]
    np.testing.assert_allclose(b.mean, a.mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(lowrank.to_dense_covariance(b.W, b.psi), a.cov, rtol=0, atol=1e-9)


def test_lowrank_categorical_minibatch_equals_the_projection_by_the_full_product():
    """A 3-class network (d = 31), minibatches of 8 (24 columns a step) at rank 5: the default filter
    (thin residual, per-input rows) equals, over 4 updates, the filter whose projection is the d x m
    product of before (``fa_step``) on the model without per-input rows (1e-9, float64)."""
    theta, h = _softmax_network()
    d = theta.shape[0]
    model = jr.models.minibatch(jr.models.nonlinear(h, jr.models.categorical(3)))
    rng = np.random.default_rng(7)
    xs, ys = jnp.asarray(rng.normal(size=(4, 8, 3))), jnp.asarray(rng.integers(0, 3, size=(4, 8)))
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(0), d, 5, 0.5)
    W0, psi0 = jnp.asarray(W0, jnp.float64), jnp.asarray(psi0, jnp.float64)
    new = jr.lrvga(model, rank=5, scheme="ekf")
    a = jr.scan(new, new.init(theta, W0, psi0), xs, ys)[0]
    old = with_fa_step(jr.lrvga(model._replace(per_input=None), rank=5, scheme="ekf"),
                       lambda W, psi, X: _start_by_product(W, psi, X, 1.0, 1.0))
    b = jr.scan(old, old.init(theta, W0, psi0), xs, ys)[0]
    np.testing.assert_allclose(a.mean, b.mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(a.W @ a.W.T, b.W @ b.W.T, rtol=0, atol=1e-9)
    np.testing.assert_allclose(a.psi, b.psi, rtol=1e-9)
