"""Networks from any prior: why the natural-parameter EKF blows up, the move limit that flags it, and
the moment-matched EKF (``scheme="moment_ekf"``, the default for nonlinear models) that does not.

The reproducer: a ReLU MLP 64-16-1 (d = 1057) on the sklearn digits labelled even/odd, prior
variance 3, float64 (experiments/networks_any_prior.py runs the full-size study).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga import schemes
from conftest import outer, rel

STEPS = 200


@pytest.fixture(scope="module")
def digits_stream():
    """``(theta0, model, X, y)``: the first 200 training digits of the study and a ReLU MLP 64-16-1."""
    from experiments.networks_any_prior import load, mlp, model_of

    Xtr, ytr, _, _ = load("binary", jnp.float64)
    theta0, h = mlp((64, 16, 1), jnp.float64)
    return theta0, model_of("binary", h), Xtr[:STEPS], ytr[:STEPS]


def _trace(flt, model, state, X, y):
    """Per step: the logit at the previous mean, its predictive variance ``J P J^T``, the move of the
    linearised logit ``J (mu_new - mu)``, ``info.converged`` and ``max |mean|``."""
    def step(state, xy):
        x, yt = xy
        eta, J = jax.value_and_grad(model.predict)(state.mean, x)
        new = flt.update(state, x, yt)
        return new, (eta, J @ state.cov @ J, J @ (new.mean - state.mean), new.info.converged,
                     jnp.max(jnp.abs(new.mean)))

    return [np.asarray(a) for a in jax.lax.scan(step, state, (X, y))[1]]


@pytest.fixture(scope="module")
def raw_ekf_trace(digits_stream):
    """:func:`_trace` of the EKF without the move limit (``max_move=inf``): run once, read by two tests."""
    theta0, model, X, y = digits_stream
    raw = jr.rvga(model, "ekf", max_move=np.inf)
    return _trace(raw, model, raw.init(theta0, 3.0 * jnp.eye(theta0.size)), X, y)


def test_the_ekf_step_on_a_saturated_wrong_output_is_the_whole_predictive_variance(digits_stream, raw_ekf_trace):
    """The cause: when the logit saturates on the wrong side, the curvature ``p (1 - p)`` vanishes and
    the gradient ``y - p`` does not, so the EKF moves the logit by ``v (y - p) / (1 + p (1 - p) v)``
    = about ``v``, the predictive variance; in a ReLU network ``v`` grows with the weights, and the
    mean explodes. Without the move limit every step still reports converged."""
    theta0, model, X, y = digits_stream
    eta, v, move, converged, size = raw_ekf_trace
    first = int(np.argmax(size > 10.0))
    assert size[-1] > 1e3 and first > 0 and bool(np.all(converged))  # it explodes, flagged nowhere
    p = 1.0 / (1.0 + np.exp(-eta[first]))
    g, fisher = y[first] - p, p * (1.0 - p)
    assert abs(g) > 0.99 and fisher < 1e-6  # saturated on the wrong side
    expected = v[first] * g / (1.0 + fisher * v[first])
    assert abs(move[first] - expected) <= 1e-6 * abs(expected)  # the natural-parameter step
    assert abs(expected) > 0.9 * v[first] > 100.0  # = the predictive variance, far beyond any fit


def test_the_move_limit_flags_and_shortens_the_blow_up(digits_stream, raw_ekf_trace):
    """Default ``max_move``: the same EKF stays finite, and the steps it shortened are flagged."""
    theta0, model, X, y = digits_stream
    flt = jr.ekf(model)
    eta, v, move, converged, size = _trace(flt, model, flt.init(theta0, 3.0 * jnp.eye(theta0.size)), X, y)
    assert np.all(np.isfinite(size)) and size.max() < 20.0
    first = int(np.argmax(raw_ekf_trace[4] > 10.0))
    assert not bool(np.all(converged[:first + 1]))  # flagged at or before the step that blew up


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_moment_ekf_stays_finite_from_a_broad_prior(digits_stream, dtype):
    """The moment-matched EKF (the nonlinear default) from prior variance 3: finite, never flagged,
    the mean of the order of its start, and it learns (prequential log-loss below chance)."""
    theta0, model, X, y = (a.astype(dtype) if hasattr(a, "astype") else a for a in digits_stream)
    flt = jr.rvga(model)
    assert jr.filters._default_scheme(model) == "moment_ekf"
    eta, v, move, converged, size = _trace(flt, model, flt.init(theta0, 3.0 * jnp.eye(theta0.size, dtype=dtype)),
                                              X, y)
    assert bool(np.all(converged)) and np.all(np.isfinite(size)) and size.max() < 3.0
    p = 1.0 / (1.0 + np.exp(-eta.astype(np.float64)))
    prequential = -np.mean(np.where(np.asarray(y) > 0.5, np.log(p), np.log1p(-p)))
    assert prequential < 0.5 * np.log(2.0)


def _linear_stream(d=5, n=25, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return jnp.asarray(X), jnp.asarray(X @ rng.normal(size=d) + 0.7 * rng.normal(size=n))


def test_moment_ekf_of_a_linear_gaussian_model_is_the_kalman_filter():
    """A Gaussian of known variance keeps it (issue 37): its variance does not collapse, so the
    jitter does not apply and ``moment_ekf`` is the Kalman filter with noise variance ``s2`` (it
    was ``s2 + jitter``), dense and low-rank at full rank, and the same program as ``ekf``."""
    d, s2, jitter = 5, 0.49, 0.21
    X, y = _linear_stream(d)
    model = jr.models.nonlinear(lambda th, x: x @ th, jr.models.gaussian(s2))
    ekf = jr.rvga(model, "ekf")
    ekf_state, _ = jr.run(ekf, ekf.init(jnp.zeros(d), 2.0 * jnp.eye(d)), X, y)
    ref = jr.kalman(s2)
    want, _ = jr.run(ref, ref.init(jnp.zeros(d), 2.0 * jnp.eye(d)), X, y)
    dense = jr.rvga(model, "moment_ekf", jitter=jitter)
    got, info = jr.run(dense, dense.init(jnp.zeros(d), 2.0 * jnp.eye(d)), X, y, trace_fn=jr.trace_info)
    assert bool(info.converged.all())
    np.testing.assert_allclose(got.mean, want.mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.cov, want.cov, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got.mean, ekf_state.mean, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(got.cov, ekf_state.cov, rtol=1e-14, atol=1e-14)
    low = jr.lrvga(model, rank=d, scheme="moment_ekf", jitter=jitter)
    W0, psi0 = jnp.sqrt(0.5 - 1e-3) * jnp.eye(d), jnp.full(d, 1e-3)  # precision I / 2
    lr, _ = jr.run(low, low.init(jnp.zeros(d), W0, psi0), X, y)
    np.testing.assert_allclose(lr.mean, want.mean, rtol=1e-10, atol=1e-12)
    prec = outer(lr.W) + np.diag(np.asarray(lr.psi))
    assert rel(prec, np.linalg.inv(want.cov)) <= 1e-10


@pytest.mark.parametrize("family", ["bernoulli", "categorical"])
@pytest.mark.parametrize("curvature", ["ggn", "empirical"])
def test_moment_ekf_step_equals_its_dense_formula(family, curvature):
    """One step written densely: ``S = V (V + jitter I)^{-1}``, precision ``+ J^T V S J`` (GGN, V the
    Fisher of the canonical link) or ``+ g g^T`` per observation (empirical, ``g = J^T S score``),
    mean ``+ P_new sum g``; a minibatch of 3 inputs, dense belief and low-rank at full rank."""
    d_in, K, m, jitter = 3, 3, 3, 0.05
    rng = np.random.default_rng(1)
    k_out = 1 if family == "bernoulli" else K
    d = d_in * k_out
    fam = jr.models.bernoulli() if family == "bernoulli" else jr.models.categorical(K)

    def h(th, x):
        out = jnp.tanh(x @ jnp.reshape(th, (d_in, k_out)))
        return out[0] if k_out == 1 else out

    model = jr.models.minibatch(jr.models.nonlinear(h, fam))
    X = jnp.asarray(rng.normal(size=(m, d_in)))
    y = jnp.asarray(rng.integers(0, 2 if family == "bernoulli" else K, size=m), jnp.float64 if k_out == 1 else jnp.int32)
    mu, P0 = jnp.asarray(0.5 * rng.normal(size=d)), jnp.eye(d) * 0.8
    prec, g_total = np.linalg.inv(P0), np.zeros(d)
    # h and its Jacobian at the m inputs, one compiled program (not one per operation, eagerly)
    etas, Js = jax.jit(jax.vmap(lambda x: (h(mu, x), jax.jacfwd(h)(mu, x))))(X)
    for i in range(m):
        eta = np.atleast_1d(np.asarray(etas[i]))
        J = np.atleast_2d(np.asarray(Js[i]))
        if k_out == 1:
            p = 1 / (1 + np.exp(-eta))
            V, score = np.diag(p * (1 - p)), np.atleast_1d(float(y[i]) - p)
        else:
            p = np.exp(eta - eta.max())
            p /= p.sum()
            V, score = np.diag(p) - np.outer(p, p), np.eye(K)[int(y[i])] - p
        S = V @ np.linalg.inv(V + jitter * np.eye(k_out))
        g = J.T @ (S @ score)
        prec += np.outer(g, g) if curvature == "empirical" else J.T @ V @ S @ J
        g_total += g
    cov = np.linalg.inv(prec)
    dense = jr.rvga(model, "moment_ekf", jitter=jitter, curvature=curvature)
    low = jr.lrvga(model, rank=d, scheme="moment_ekf", jitter=jitter, curvature=curvature)
    W0, psi0 = jnp.sqrt(1.25 - 1e-3) * jnp.eye(d), jnp.full(d, 1e-3)
    # both steps in one compiled program (eagerly, each operation compiled on its own: 180 programs)
    a, b = jax.jit(lambda sa, sb: (dense.update(sa, X, y), low.update(sb, X, y)))(
        dense.init(mu, P0), low.init(mu, W0, psi0))
    np.testing.assert_allclose(a.cov, cov, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.mean, mu + cov @ g_total, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.mean, mu + cov @ g_total, rtol=0, atol=1e-10)
    np.testing.assert_allclose(outer(b.W) + np.diag(np.asarray(b.psi)), prec, rtol=0, atol=1e-10)


def test_limit_move_measures_the_mahalanobis_length_under_the_previous_belief():
    """``limit_move``'s length from the increment equals ``Delta^T P^{-1} Delta`` formed densely, for
    both mean steps (new precision, and previous with ``prior_gain``); a longer step is shortened to
    exactly ``max_move`` and reported."""
    d = 6
    rng = np.random.default_rng(3)
    A = rng.normal(size=(d, d))
    P = jnp.asarray(A @ A.T + np.eye(d))
    belief = jr.beliefs.Dense()
    prior = belief.init(jnp.asarray(rng.normal(size=d)), P)
    for prior_gain in (False, True):
        inc = schemes.Increment(jnp.asarray(rng.normal(size=(d, 2))), jnp.asarray([0.7, 1.3]),
                                jnp.asarray([4.0, -3.0]), prior_gain=prior_gain)
        new, ok = schemes.absorb(belief, prior, inc)
        delta = np.asarray(new.mean - prior.mean)
        length = float(np.sqrt(delta @ np.linalg.solve(P, delta)))
        same, calm = schemes.limit_move(prior, new, inc, 1.001 * length)
        assert bool(calm) and rel(same.mean, new.mean) == 0.0
        short, calm = schemes.limit_move(prior, new, inc, 0.5 * length)
        step = np.asarray(short.mean - prior.mean)
        assert not bool(calm)
        np.testing.assert_allclose(np.sqrt(step @ np.linalg.solve(P, step)), 0.5 * length, rtol=1e-12)
        np.testing.assert_allclose(step, 0.5 * delta, rtol=1e-12)


def test_gradient_through_a_shortened_step_is_finite():
    """The shortening is written so that neither branch puts a NaN into the gradient."""
    X, y = _linear_stream(3, 6)

    def final_mean(scale):
        flt = jr.rvga(jr.models.linear_gaussian(0.1), max_move=0.5)
        return jr.run(flt, flt.init(jnp.zeros(3), scale * jnp.eye(3)), X, 100.0 * y)[0].mean.sum()

    both = jax.jit(jax.value_and_grad(final_mean))  # one program: the value (for the differences) and the gradient
    value, grad = both(4.0)
    eps = 1e-6
    fd = (both(4.0 + eps)[0] - both(4.0 - eps)[0]) / (2 * eps)
    assert np.isfinite(grad) and abs(float(grad) - float(fd)) <= 1e-5 * (1.0 + abs(float(fd)))


def test_scheme_options_are_validated():
    model = jr.models.nonlinear(lambda th, x: x @ th, jr.models.bernoulli())
    with pytest.raises(ValueError, match="^jitter is not used by scheme 'ekf'"):
        jr.rvga(model, "ekf", jitter=0.1)
    with pytest.raises(ValueError, match="^jitter must be a number > 0"):
        jr.rvga(model, "moment_ekf", jitter=0.0)
    with pytest.raises(ValueError, match="^curvature='empirical' is only used by"):
        jr.rvga(model, "sampled", curvature="empirical")
    with pytest.raises(ValueError, match="^max_move must be a number > 0"):
        jr.rvga(model, max_move=-1.0)
    with pytest.raises(ValueError, match="^max_move: the published L-RVGA"):
        jr.lrvga(model, rank=1, published=True, scheme="sampled", max_move=3.0)
    assert jr.rvga(model).update is not None
