"""Metrics (KL divergences, Monte-Carlo KL of [RVGA] eqs. 92-94, predictive scores), float64."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import multivariate_normal

from jaxrvga.baselines import metrics
from jaxrvga.kernels import special


def _spd(rng, d, jitter=0.5):
    A = rng.normal(size=(d, d))
    return A @ A.T / d + jitter * np.eye(d)


def _toy_logistic(rng, n, d):
    """Random inputs (n, d) and random labels in {0, 1}."""
    return rng.normal(size=(n, d)), (rng.uniform(size=n) < 0.5).astype(float)


def _kl_numpy(m1, P1, m2, P2):
    """Textbook formula with inv / slogdet (the authors' PosteriorLinReg.divergence)."""
    d = len(m1)
    P2i = np.linalg.inv(P2)
    diff = m2 - m1
    return 0.5 * (np.linalg.slogdet(P2)[1] - np.linalg.slogdet(P1)[1] - d
                  + np.trace(P2i @ P1) + diff @ P2i @ diff)


# --------------------------------------------------------------------- exact Gaussian KL

def test_gaussian_kl_scalar_closed_form():
    m1, s1, m2, s2 = 0.3, 0.7, -1.1, 2.0
    exact = math.log(s2 / s1) + (s1**2 + (m1 - m2) ** 2) / (2 * s2**2) - 0.5
    got = metrics.gaussian_kl(jnp.array([m1]), jnp.array([[s1**2]]), jnp.array([m2]), jnp.array([[s2**2]]))
    assert float(got) == pytest.approx(exact, rel=1e-14)


def test_gaussian_kl_matches_numpy_and_is_zero_on_itself():
    rng = np.random.default_rng(0)
    d = 7
    m1, m2 = rng.normal(size=d), rng.normal(size=d)
    P1, P2 = _spd(rng, d), _spd(rng, d)
    got = metrics.gaussian_kl(m1, P1, m2, P2)
    assert float(got) == pytest.approx(_kl_numpy(m1, P1, m2, P2), rel=1e-12)
    assert abs(float(metrics.gaussian_kl(m1, P1, m1, P1))) < 1e-12
    assert float(got) > 0


# --------------------------------------------------------------------- FA algebra and FA KL

def _fa(rng, d, p):
    return rng.normal(size=(d, p)), rng.uniform(0.5, 2.0, size=d)


def test_fa_kl_matches_dense_formula():
    rng = np.random.default_rng(2)
    d, p = 25, 3
    W, psi = _fa(rng, d, p)
    V = rng.normal(size=(d, 200))
    S = V @ V.T / 200
    Lam = W @ W.T + np.diag(psi)
    dense = 0.5 * (np.trace(np.linalg.inv(Lam) @ S) + np.linalg.slogdet(Lam)[1]
                   - np.linalg.slogdet(S)[1] - d)
    got = metrics.fa_kl(S, W, psi)
    assert float(got) == pytest.approx(dense, rel=1e-11)
    # [LRVGA] eq. (11) is a Gaussian KL: KL(N(0, S) || N(0, Lam)).
    assert float(got) == pytest.approx(float(metrics.gaussian_kl(np.zeros(d), S, np.zeros(d), Lam)),
                                       rel=1e-11)
    logdet_S = np.linalg.slogdet(S)[1]
    assert float(metrics.fa_kl(S, W, psi, logdet_S=logdet_S)) == pytest.approx(float(got), rel=1e-12)
    # An exact FA target has KL 0.
    assert abs(float(metrics.fa_kl(Lam, W, psi))) < 1e-10


# --------------------------------------------------------------------- Monte-Carlo KL

def test_base_normals_legacy_protocol():
    np.random.seed(10)
    expected = np.random.multivariate_normal(np.zeros(4,), np.identity(4), size=(300,))
    np.testing.assert_array_equal(metrics.base_normals(4, 300, 10), expected)
    z = metrics.base_normals(4, 5, key=jax.random.PRNGKey(0))
    assert z.shape == (5, 4)
    with pytest.raises(ValueError):
        metrics.base_normals(4, 5)


def test_mc_kl_check25_linear_gaussian():
    """Check 25: on a linear-Gaussian model with known log Z_p, KL_MC + log Z_p -> exact KL."""
    rng = np.random.default_rng(3)
    d, n, s2 = 3, 15, 0.5
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + math.sqrt(s2) * rng.normal(size=n)
    m0, P0 = np.full(d, 0.2), 2.0 * np.eye(d)
    # Exact posterior and evidence (B3).
    S_post = np.linalg.inv(np.linalg.inv(P0) + X.T @ X / s2)
    m_post = S_post @ (np.linalg.inv(P0) @ m0 + X.T @ y / s2)
    log_Z = multivariate_normal.logpdf(y, X @ m0, X @ P0 @ X.T + s2 * np.eye(n))

    def log_target(theta):
        resid = y - X @ theta
        return (-0.5 * jnp.sum(resid**2) / s2 - 0.5 * n * math.log(2 * math.pi * s2)
                + metrics.gaussian_log_density(theta, m0, P0))

    mu = m_post + np.array([0.3, -0.2, 0.1])  # a belief that is not the posterior
    P = 1.5 * S_post + 0.01 * np.eye(d)
    exact = _kl_numpy(mu, P, m_post, S_post)
    z = metrics.base_normals(d, 100_000, key=jax.random.PRNGKey(7))
    kl, se = metrics.mc_kl(log_target, mu, P, z, return_stderr=True)
    assert abs(float(kl) + log_Z - exact) <= 4 * float(se)
    assert float(se) < 0.05 * exact  # the test has power
    # The same holds with the authors' legacy base normals.
    kl2, se2 = metrics.mc_kl(log_target, mu, P, metrics.base_normals(d, 100_000, 10),
                             return_stderr=True)
    assert abs(float(kl2) + log_Z - exact) <= 4 * float(se2)


def _authors_mc_kl(theta, Cov, normal_samples, X, Y, theta0, Cov0):
    """Transcription of [CODE-L] PosteriorLogReg.divergence + bayesianlogisticPdf, in NumPy."""
    d = theta.shape[0]
    invCov0 = np.linalg.inv(Cov0)
    logdet_prec0 = np.linalg.slogdet(invCov0)[1]
    entropy = 0.5 * np.linalg.slogdet(Cov)[1] + d / 2 * (1 + math.log(2 * math.pi))
    thetas = theta.reshape(d, 1) + np.linalg.cholesky(Cov) @ normal_samples.T
    A = 0.0
    Yb = 2 * Y.reshape(-1, 1) - 1
    for i in range(normal_samples.shape[0]):
        th = thetas[:, i].reshape(d, 1)
        e = th - theta0.reshape(d, 1)
        log_prior = -0.5 * (e.T @ invCov0 @ e) - 0.5 * d * math.log(2 * math.pi) + 0.5 * logdet_prec0
        log_lik = np.sum(-np.logaddexp(0, -Yb * X @ th), axis=0)
        A -= (log_lik + log_prior).item()
    return A / normal_samples.shape[0] - entropy


def test_mc_kl_logistic_matches_authors_transcription():
    rng = np.random.default_rng(4)
    d, n = 4, 40
    X, y = _toy_logistic(rng, n, d)
    mu0, P0 = np.full(d, 0.5), 3.0 * np.eye(d)
    mu, P = rng.normal(size=d), _spd(rng, d, 0.2)
    z = metrics.base_normals(d, 300, 10)
    ref = _authors_mc_kl(mu, P, z, X, y, mu0, P0)
    for prior_cov in (P0, np.full(d, 3.0), 3.0):  # dense, diagonal and isotropic priors agree
        got = metrics.mc_kl_logistic(mu, P, z, X, y, mu0, prior_cov)
        assert float(got) == pytest.approx(ref, rel=1e-12)


def test_mc_kl_common_random_numbers_under_vmap():
    rng = np.random.default_rng(5)
    d, n, T = 3, 20, 4
    X, y = _toy_logistic(rng, n, d)
    means = rng.normal(size=(T, d))
    covs = np.stack([_spd(rng, d) for _ in range(T)])
    z = metrics.base_normals(d, 50, 1)
    f = lambda m, P: metrics.mc_kl_logistic(m, P, z, X, y, np.zeros(d), 4.0)  # noqa: E731
    batched = jax.vmap(f)(means, covs)
    looped = np.array([float(f(means[t], covs[t])) for t in range(T)])
    np.testing.assert_allclose(batched, looped, rtol=1e-12)


def test_mc_kl_logistic_terms_average_to_the_mc_kl():
    rng = np.random.default_rng(8)
    d, n = 4, 30
    X, y = _toy_logistic(rng, n, d)
    mu, P = rng.normal(size=d), _spd(rng, d)
    z = metrics.base_normals(d, 120, 2)
    kl, se = metrics.mc_kl_logistic(mu, P, z, X, y, np.zeros(d), 2.0, return_stderr=True)
    terms = metrics.mc_kl_logistic_terms(mu, P, z, X, y, np.zeros(d), 2.0)
    assert terms.shape == (120,)
    assert float(jnp.mean(terms)) == pytest.approx(float(kl), rel=1e-12)
    assert float(jnp.std(terms, ddof=1) / jnp.sqrt(120)) == pytest.approx(float(se), rel=1e-12)
    # In batches of 50 (two full batches and a remainder of 20): the same terms.
    batched = metrics.mc_kl_logistic_terms(mu, P, z, X, y, np.zeros(d), 2.0, batch_size=50)
    np.testing.assert_allclose(batched, terms, rtol=1e-12)


def test_mc_kl_logistic_fa_dense_equals_full():
    rng = np.random.default_rng(6)
    d, p, n = 12, 2, 30
    W, psi = _fa(rng, d, p)
    X, y = _toy_logistic(rng, n, d)
    mu = rng.normal(size=d)
    z = metrics.base_normals(d, 100, 1)
    full = metrics.mc_kl_logistic(mu, np.linalg.inv(W @ W.T + np.diag(psi)), z, X, y, np.zeros(d), 1.0)
    fa = metrics.mc_kl_logistic_fa(mu, W, psi, z, X, y, np.zeros(d), 1.0)
    assert float(fa) == pytest.approx(float(full), rel=1e-10)


def test_mc_kl_logistic_fa_sampled_agrees_with_dense():
    rng = np.random.default_rng(7)
    d, p, n = 10, 2, 25
    W, psi = _fa(rng, d, p)
    X, y = _toy_logistic(rng, n, d)
    mu = rng.normal(size=d)
    num = 40_000
    kl_s, se_s = metrics.mc_kl_logistic_fa_sampled(jax.random.PRNGKey(3), jnp.asarray(mu), W, psi,
                                                   num, X, y, np.zeros(d), 1.0, return_stderr=True)
    z = metrics.base_normals(d, num, key=jax.random.PRNGKey(4))
    kl_d, se_d = metrics.mc_kl_logistic_fa(mu, W, psi, z, X, y, np.zeros(d), 1.0, return_stderr=True)
    assert abs(float(kl_s) - float(kl_d)) <= 5 * math.hypot(float(se_s), float(se_d))


# --------------------------------------------------------------------- predictive scores

BETA2 = special.PROBIT_BETA**2


def test_logistic_log_loss_hand_cases():
    x = jnp.array([[1.0, 0.0]])
    zero = jnp.zeros((2, 2))
    # Point mass at x^T mu = log 3: p(y=1) = 3/4.
    mu = jnp.array([math.log(3.0), 5.0])
    loss = lambda m, P, y: float(metrics.logistic_log_loss(m, P, x, jnp.array([y])))  # noqa: E731
    assert loss(mu, zero, 1.0) == pytest.approx(-math.log(0.75), rel=1e-14)
    assert loss(mu, zero, 0.0) == pytest.approx(-math.log(0.25), rel=1e-14)
    # x^T P x = 3 beta^2 gives k = 1/2, so x^T mu = 2 log 3 again gives p = 3/4 ([RVGA] eq. 62).
    cov = jnp.diag(jnp.array([3 * BETA2, 1.0]))
    mu2 = jnp.array([2 * math.log(3.0), 0.0])
    assert loss(mu2, cov, 1.0) == pytest.approx(-math.log(0.75), rel=1e-13)
    p, _ = special.logistic_predictive(mu2, cov, x)
    assert float(p[0]) == pytest.approx(0.75, rel=1e-14)
    # Mean over two points: (log 2 + log 2) / 2 at a = 0.
    X2 = jnp.array([[0.0, 1.0], [0.0, -2.0]])
    got = metrics.logistic_log_loss(jnp.zeros(2), zero, X2, jnp.array([1.0, 0.0]))
    assert float(got) == pytest.approx(math.log(2.0), rel=1e-14)
    assert float(metrics.logistic_log_loss(jnp.zeros(2), zero, X2, jnp.array([1.0, 0.0]), "sum")) == \
        pytest.approx(2 * math.log(2.0), rel=1e-14)
    # Confident and wrong: finite, = 1000 (where 1 - p rounds to 0).
    assert loss(jnp.array([1000.0, 0.0]), zero, 0.0) == pytest.approx(1000.0, rel=1e-14)
    with pytest.raises(ValueError):
        metrics.logistic_log_loss(mu, zero, x, jnp.array([1.0]), reduction="max")


def test_logistic_log_loss_matches_predictive():
    rng = np.random.default_rng(8)
    d, n = 4, 30
    mu, P = rng.normal(size=d), _spd(rng, d)
    X, y = _toy_logistic(rng, n, d)
    p, _ = special.logistic_predictive(mu, P, X)
    p = np.asarray(p)
    ref = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    np.testing.assert_allclose(metrics.logistic_log_loss(mu, P, X, y, "none"), ref, rtol=1e-12)


def test_gaussian_nlpd_hand_cases():
    assert float(metrics.gaussian_nlpd(1.0, 2.0, 1.0)) == pytest.approx(0.5 * math.log(4 * math.pi),
                                                                        rel=1e-14)
    # y - x^T mu = 1, x^T P x = 1, noise 1: v = 2.
    got = metrics.linear_gaussian_nlpd(jnp.array([1.0, 0.0]), jnp.eye(2), jnp.array([[1.0, 0.0]]),
                                       jnp.array([2.0]), 1.0)
    assert float(got) == pytest.approx(0.5 * (math.log(2 * math.pi * 2.0) + 0.5), rel=1e-14)
    rng = np.random.default_rng(9)
    m, v, y = rng.normal(size=5), rng.uniform(0.5, 2, 5), rng.normal(size=5)
    ref = -np.array([multivariate_normal.logpdf(y[i], m[i], v[i]) for i in range(5)])
    np.testing.assert_allclose(metrics.gaussian_nlpd(m, v, y, "none"), ref, rtol=1e-13)


def test_logistic_log_posterior_prior_forms():
    rng = np.random.default_rng(10)
    d = 3
    theta, m0 = rng.normal(size=d), rng.normal(size=d)
    ref = multivariate_normal.logpdf(theta, m0, 2.5 * np.eye(d))
    for cov in (2.5, np.full(d, 2.5), 2.5 * np.eye(d)):
        assert float(metrics.gaussian_log_density(theta, m0, cov)) == pytest.approx(ref, rel=1e-13)
    # No data: the log posterior is the log prior.
    X0, y0 = np.zeros((0, d)), np.zeros(0)
    assert float(metrics.logistic_log_posterior(theta, X0, y0, m0, 2.5)) == pytest.approx(ref, rel=1e-13)
    # One point: log sig((2y-1) x^T theta) added.
    x = rng.normal(size=(1, d))
    got = metrics.logistic_log_posterior(theta, x, np.array([1.0]), m0, 2.5)
    assert float(got) == pytest.approx(ref - math.log1p(math.exp(-(x @ theta).item())), rel=1e-13)


# --------------------------------------------------------------------- calibration

def test_ece_binary_by_hand():
    """Probabilities of class 1: confidence max(p, 1 - p), prediction p > 1/2."""
    p = np.array([0.9, 0.8, 0.3, 0.45, 0.5])
    y = np.array([1, 0, 0, 1, 0])
    # confidences 0.9, 0.8, 0.7, 0.55, 0.5 fall in bins 9, 8, 7, 5, 5; predictions 1, 1, 0, 0, 0
    # (p = 1/2 predicts 0), so hits 1, 0, 1, 0, 1. Bin 5 holds 0.55 (miss) and 0.5 (hit):
    # |1/2 - 0.525|.
    want = (abs(1 - 0.9) + abs(0 - 0.8) + abs(1 - 0.7) + 2 * abs(0.5 - 0.525)) / 5
    assert metrics.ece(p, y) == pytest.approx(want, abs=1e-12)
    assert metrics.ece(np.stack([1 - p, p], axis=1), y) == metrics.ece(p, y)
    # Two bins: everything lands in [0.5, 1], so ECE = |accuracy - mean confidence|.
    assert metrics.ece(p, y, bins=2) == pytest.approx(abs(3 / 5 - 0.69), abs=1e-12)
    # A calibrated set scores 0: confidence 0.7 everywhere, 7 of 10 right.
    assert metrics.ece(np.full(10, 0.7), np.array([1] * 7 + [0] * 3)) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="labels"):
        metrics.ece(p, y[:3])


def test_ece_classes_by_hand():
    """(n, K) class probabilities: confidence max_k p_k, prediction the argmax."""
    probs = np.array([[0.95, 0.05], [0.95, 0.05], [0.4, 0.6], [0.3, 0.7]])
    labels = np.array([0, 1, 1, 1])
    # bins: conf 0.95 (two points, one right): |0.5 - 0.95|; 0.6 and 0.7 (one point each, right)
    want = (2 * 0.45 + 1 * 0.4 + 1 * 0.3) / 4
    assert metrics.ece(probs, labels) == pytest.approx(want, abs=1e-12)
    assert metrics.ece(np.eye(3), np.arange(3)) == 0.0  # confident and right
    # uniform probabilities: argmax is class 0 (right for labels 0), confidence 0.25
    assert metrics.ece(np.full((4, 4), 0.25), np.zeros(4, int)) == pytest.approx(0.75, abs=1e-12)
    with pytest.raises(ValueError, match="labels"):
        metrics.ece(probs, labels[:3])
