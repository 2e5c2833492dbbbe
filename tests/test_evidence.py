"""One-step-ahead log predictive densities and the log evidence (jaxrvga.evidence), float64.

Oracles: the linear-Gaussian log evidence is the closed-form marginal likelihood
``log N(y | X mu0, X P0 X^T + s2 I)`` (static parameter) or the Kalman filter's prediction error
decomposition (with dynamics), for the dense belief and the low-rank one at full rank; the evidence
maximised with optax equals sklearn's BayesianRidge (which maximises the same evidence); the GLM log
predictive equals a 1e5-draw Monte Carlo; gradients equal finite differences.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import multivariate_normal, norm

import jaxrvga as jr
from jaxrvga.baselines import fa_filters

jax.config.update("jax_enable_x64", True)

D, T, S2 = 5, 40, 0.3


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, D))
    return X, X @ rng.normal(size=D) + np.sqrt(S2) * rng.normal(size=T), rng


@pytest.mark.parametrize("minibatch", [1, 4])
def test_linear_gaussian_log_evidence_is_the_marginal_likelihood(minibatch):
    X, y, rng = _data()
    mu0, P0 = 0.1 * rng.normal(size=D), np.diag(rng.uniform(0.5, 2.0, D))
    want = multivariate_normal(X @ mu0, X @ P0 @ X.T + S2 * np.eye(T)).logpdf(y)
    xs, ys = X.reshape(T // minibatch, minibatch, D), y.reshape(T // minibatch, minibatch)
    dense = jr.kalman(S2)
    assert abs(float(jr.log_evidence(dense, dense.init(mu0, P0), xs, ys)) - want) < 1e-10
    low = jr.lrvga(jr.models.linear_gaussian(S2), rank=D)
    state = low.init(mu0, np.zeros((D, D)), 1.0 / np.diag(P0))
    assert abs(float(jr.log_evidence(low, state, xs, ys)) - want) < 1e-10


def test_log_evidence_with_dynamics_is_the_prediction_error_decomposition():
    X, y, _ = _data(1)
    gamma, q = 0.9, np.linspace(0.01, 0.05, D)
    mu, P, want = np.zeros(D), np.eye(D), 0.0
    for h, yt in zip(X, y):
        mu, P = gamma * mu, gamma**2 * P + np.diag(q)
        s = h @ P @ h + S2
        want += norm(h @ mu, np.sqrt(s)).logpdf(yt)
        k = P @ h / s
        mu, P = mu + k * (yt - h @ mu), P - np.outer(k, h @ P)
    dense = jr.kalman(S2, decay=gamma, additive_noise=q)
    assert abs(float(jr.log_evidence(dense, dense.init(np.zeros(D), np.eye(D)), X, y)) - want) < 1e-10
    low = jr.lrvga(jr.models.linear_gaussian(S2), rank=D, decay=gamma, additive_noise=q)
    state = low.init(np.zeros(D), np.zeros((D, D)), np.ones(D))
    assert abs(float(jr.log_evidence(low, state, X, y)) - want) < 1e-10


def test_prequential_trace_sees_the_predicted_belief():
    """``jr.run`` with a prequential trace equals a hand-written scan of predict, score, update."""
    X, y, _ = _data(2)
    model = jr.models.logistic()
    labels = (y > 0).astype(float)
    flt = jr.rvga(model, "ekf", additive_noise=0.01)
    state = flt.init(np.zeros(D), np.eye(D))

    def body(s, xy):
        x, yt = xy
        return flt.update(s, x, yt), jr.log_predictive(flt.predict(s), x, yt, model)

    _, want = jax.lax.scan(body, state, (X, labels))
    _, got = jr.run(flt, state, X, labels, jr.trace_log_predictive(model))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    _, means = jr.run(flt, state, X, labels, jr.prequential(lambda s, x, yt: s.mean))
    np.testing.assert_allclose(means[0], 0.0)  # the prior's mean, before the first observation


@pytest.mark.parametrize("model", [jr.models.logistic(), jr.models.poisson()], ids=["logistic", "poisson"])
def test_glm_log_predictive_equals_monte_carlo(model):
    """Gauss-Hermite ``log E[p(y | eta)]`` against 1e5 exact draws of ``eta ~ N(m, v)``."""
    rng = np.random.default_rng(3)
    mean, L = 0.3 * rng.normal(size=D), 0.3 * rng.normal(size=(D, D))
    state = jr.rvga(model).init(mean, L @ L.T + 0.1 * np.eye(D))
    x = rng.normal(size=D)
    m, v = x @ mean, x @ state.cov @ x
    eta = m + np.sqrt(v) * rng.standard_normal(100_000)
    for y in (0.0, 1.0) if model.kind == "logistic" else (0.0, 2.0, 5.0):
        p = np.exp(np.asarray(model.family.log_prob(y, eta)))
        want, se = np.log(p.mean()), p.std() / p.mean() / np.sqrt(p.size)
        got = float(jr.log_predictive(state, x, y, model))
        assert abs(got - want) < 5 * se, (y, got, want, se)


def test_monte_carlo_key_and_linearisation_agree_with_the_exact_forms():
    """A linear nonlinear model linearises exactly (Gaussian family: the GLM's value); with a key the
    Monte Carlo estimate converges to it; a categorical model's probit value is near Monte Carlo."""
    rng = np.random.default_rng(4)
    mean, L = 0.3 * rng.normal(size=D), 0.2 * rng.normal(size=(D, D))
    state = jr.kalman(1.0).init(mean, L @ L.T + 0.05 * np.eye(D))
    x, y = rng.normal(size=D), 0.7
    linear = jr.models.nonlinear(lambda th, x: x @ th)
    exact, linearised, mc = jax.jit(lambda state, x: (  # one compiled program, not one per operation
        jr.log_predictive(state, x, y, jr.models.linear_gaussian(1.0)), jr.log_predictive(state, x, y, linear),
        jr.log_predictive(state, x, y, linear, key=jax.random.PRNGKey(0), num_samples=20_000)))(state, x)
    np.testing.assert_allclose(linearised, exact, rtol=1e-12)
    np.testing.assert_allclose(mc, exact, atol=0.02)
    K = 3
    softmax = jr.models.softmax_regression(2, K)
    state = jr.rvga(softmax).init(0.5 * rng.normal(size=2 * K), 0.01 * np.eye(2 * K))
    x = rng.normal(size=2)
    probit, mc = jax.jit(lambda state, x: (  # one compiled program
        jr.log_predictive(state, x, 1, softmax),
        jr.log_predictive(state, x, 1, softmax, key=jax.random.PRNGKey(1), num_samples=20_000)))(state, x)
    np.testing.assert_allclose(probit, mc, atol=0.01)  # special.softmax_probit: about 0.01 at logit sd 0.3


def test_log_evidence_gradients_match_finite_differences():
    """In the prior's scale, the noise variance, the decay, the additive noise and the process noise."""
    X, y, _ = _data(5)

    def evidence(p, rank):
        model = jr.models.linear_gaussian(p[1])
        dyn = dict(decay=p[2], additive_noise=p[3], process_noise=p[4])
        if rank is None:
            flt = jr.rvga(model, **dyn)
            return jr.log_evidence(flt, flt.init(jnp.zeros(D), p[0] * jnp.eye(D)), X, y)
        flt = jr.lrvga(model, rank, **dyn)  # generic factors: W = 0 has repeated singular values (docstring)
        W0 = 0.3 * np.random.default_rng(6).normal(size=(D, rank))
        return jr.log_evidence(flt, flt.init(jnp.zeros(D), W0, jnp.ones(D) / p[0]), X, y)

    p = jnp.array([1.5, 0.4, 0.95, 0.02, 0.05])
    eps = 1e-6
    both = jax.jit(jax.value_and_grad(evidence), static_argnums=1)  # one program per rank: value and gradient
    for rank in (None, D, 2):
        g = both(p, rank)[1]
        fd = [(both(p + eps * e, rank)[0] - both(p - eps * e, rank)[0]) / (2 * eps) for e in np.eye(5)]
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("belief,dtype", [("dense", jnp.float64), ("lowrank", jnp.float64), ("diagonal", jnp.float64),
                                          ("lowrank", jnp.float32)])
def test_logistic_evidence_gradient_with_an_all_zero_input(belief, dtype):
    """A zero row has predictive variance 0: the quadrature's square root there must not make the
    gradient NaN. In the prior's scale, against central finite differences (float64), finite (float32)."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(8, D))
    X[3] = 0.0
    y = (rng.uniform(size=8) < 0.5).astype(float)
    xs, ys = jnp.asarray(X, dtype), jnp.asarray(y, dtype)
    model = jr.models.logistic()
    W0 = jnp.asarray(0.3 * rng.normal(size=(D, 2)), dtype)  # generic factors (log_evidence docstring)

    def evidence(s):
        if belief == "dense":
            flt = jr.rvga(model)
            return jr.log_evidence(flt, flt.init(jnp.zeros(D, dtype), s * jnp.eye(D, dtype=dtype)), xs, ys)
        if belief == "lowrank":
            flt = jr.lrvga(model, 2)
            return jr.log_evidence(flt, flt.init(jnp.zeros(D, dtype), W0, jnp.ones(D, dtype) / s), xs, ys)
        flt = jr.diag_rvga(model)
        return jr.log_evidence(flt, flt.init(jnp.zeros(D, dtype), s * jnp.ones(D, dtype)), xs, ys)

    s = jnp.asarray(1.5, dtype)
    both = jax.jit(jax.value_and_grad(evidence))  # one program: the value (for the differences) and the gradient
    value, g = both(s)
    assert np.isfinite(float(value)) and np.isfinite(float(g))
    if dtype == jnp.float64:
        h = 1e-5
        fd = (both(s + h)[0] - both(s - h)[0]) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_empirical_bayes_with_optax_equals_bayesian_ridge():
    """Maximising the Kalman filter's log evidence over the prior and noise precisions (optax L-BFGS)
    gives sklearn's BayesianRidge (evidence maximisation, no hyper-priors) on standardised diabetes."""
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import BayesianRidge

    from examples.empirical_bayes import fit

    X, y = load_diabetes(return_X_y=True)
    X, y = (X - X.mean(0)) / X.std(0), (y - y.mean()) / y.std()
    ridge = BayesianRidge(fit_intercept=False, alpha_1=0, alpha_2=0, lambda_1=0, lambda_2=0, tol=1e-12,
                          max_iter=100_000).fit(X, y)

    log_variances = fit(X, y)  # the example's L-BFGS on -jr.log_evidence, here in float64
    np.testing.assert_allclose(np.exp(-log_variances), [ridge.lambda_, ridge.alpha_], rtol=1e-4)


def test_log_evidence_needs_a_model_and_prequential_a_function():
    flt = fa_filters.recursive_em()
    with pytest.raises(ValueError, match="observation model"):
        jr.log_evidence(flt, None, np.zeros((2, 3)), np.zeros(2))
    with pytest.raises(ValueError, match="trace function"):
        jr.prequential(3)
    with pytest.raises(ValueError, match="model must be"):
        jr.trace_log_predictive("logistic")


def test_repeated_evidence_is_not_traced_again():
    """A second ``log_evidence`` call with the same filter, model and shapes reuses the compiled scan
    (the model's predictor is not traced again), and returns the same value; a filter built under
    ``jax.grad`` (traced hyper-parameters) still differentiates."""
    traces = []

    def h(theta, x):
        traces.append(1)
        return x @ theta

    model = jr.models.nonlinear(h, jr.models.gaussian(0.5))
    flt = jr.rvga(model, "ekf")
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(8, 2)), rng.normal(size=8)
    first = jr.log_evidence(flt, flt.init(jnp.zeros(2), jnp.eye(2)), X, y)
    count = len(traces)
    again = jr.log_evidence(jr.rvga(model, "ekf"), flt.init(jnp.zeros(2), jnp.eye(2)), X, y)
    assert len(traces) == count and float(again) == float(first)
    grad = jax.grad(lambda nv: jr.log_evidence(jr.kalman(nv), jr.kalman(nv).init(jnp.zeros(2), jnp.eye(2)),
                                               X, y))(0.5)
    assert np.isfinite(float(grad))
