"""Observation models and special functions: closed forms against quadrature and autodiff."""
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrvga import models
from jaxrvga.kernels import special


def test_sigmoid_derivatives_match_autodiff_and_keep_precision_in_tails():
    z = np.linspace(-30, 30, 121)
    e = np.exp(-np.abs(z))
    exact1 = e / (1 + e) ** 2  # sig'(z), symmetric, no cancellation
    exact2 = exact1 * np.sign(-z) * (1 - e) / (1 + e)  # sig'' = sig' (1 - 2 sig)
    assert np.allclose(special.sig1(z), exact1, rtol=1e-13, atol=0)
    assert np.allclose(special.sig2(z), exact2, rtol=1e-12, atol=0)
    zm = jnp.linspace(-5, 5, 41)  # where autodiff of the sigmoid is itself accurate
    assert np.allclose(special.sig2(zm), jax.vmap(jax.grad(jax.grad(special.sigmoid)))(zm), rtol=1e-9, atol=1e-15)
    # float32: sig(z)(1 - sig(z)) loses all precision at z = 20; sig(z) sig(-z) keeps it.
    z32 = jnp.float32(20.0)
    assert abs(float(special.sig1(z32)) / np.exp(-20.0) - 1) < 1e-5


@pytest.mark.parametrize("m,v", [(0.3, 0.5), (-2.0, 3.0), (1.5, 1e-3)])
def test_closed_form_moments_match_gauss_hermite(m, v):
    """Poisson and Gaussian moments are exact: they equal high-order quadrature of l' and l''."""
    y = 2.0
    for closed, family in [(models.poisson(), models.poisson_family()),
                           (models.linear_gaussian(0.7), models.gaussian(0.7))]:
        generic = models.glm(family, num_points=64)
        g1, h1 = closed.glm_moments(m, v, y)
        g2, h2 = generic.glm_moments(m, v, y)
        assert np.allclose([g1, h1], [g2, h2], rtol=1e-10)
        assert np.allclose(closed.expected_log_lik(m, v, y), generic.expected_log_lik(m, v, y), rtol=1e-10)


def test_expected_log_lik_broadcasts_over_vectors():
    """Regression: the quadrature axis must not broadcast against a vector of observations."""
    for model in (models.logistic(), models.glm(models.bernoulli())):
        m = jnp.linspace(-1, 1, 32)
        v = jnp.linspace(0.1, 2, 32)
        y = (jnp.arange(32) % 2).astype(float)
        batched = model.expected_log_lik(m, v, y)
        one_by_one = jnp.array([model.expected_log_lik(m[i], v[i], y[i]) for i in range(32)])
        assert np.allclose(batched, one_by_one, rtol=1e-14)


def test_bernoulli_log_prob_is_stable_logistic_likelihood():
    eta = jnp.array([-800.0, -3.0, 0.0, 3.0, 800.0])
    for y in (0.0, 1.0):
        lp = models.bernoulli().log_prob(y, eta)
        expected = -jnp.logaddexp(0.0, -(2 * y - 1) * eta)
        assert np.allclose(lp, expected, rtol=1e-14) and bool(jnp.all(jnp.isfinite(lp)))


def test_nonlinear_model_with_pytree_parameters():
    params = {"w": jnp.array([[1.0, -2.0], [0.5, 0.3]]), "b": jnp.array([0.1, -0.2])}
    flat, unravel = jax.flatten_util.ravel_pytree(params)

    def mlp(p, x):
        return jnp.tanh(p["w"] @ x + p["b"]).sum()

    model = models.nonlinear(mlp, models.gaussian(1.0), unravel=unravel)
    x = jnp.array([0.2, -0.4])
    assert float(model.predict(flat, x)) == pytest.approx(float(mlp(params, x)))
    assert model.log_lik(flat, x, 0.5).shape == ()


def test_probit_k_range_and_predictive_limits():
    v = jnp.logspace(-6, 6, 13)
    k = special.probit_k(v)
    assert bool(jnp.all((k > 0) & (k <= 1))) and float(special.probit_k(0.0)) == 1.0


def test_bad_family_arguments():
    with pytest.raises(ValueError, match="noise_var must be positive"):
        models.gaussian(0.0)
    with pytest.raises(ValueError, match="non-negative integer counts"):
        models.poisson_family().check_y("y", np.array([1.5]))


# ----------------------------------------------------------------------------- categorical family

LOGITS = [np.array([0.3, -1.0, 2.0]), np.array([-30.0, 0.0, 30.0, 1.0]), np.array([5.0, 5.0])]


@pytest.mark.parametrize("eta", LOGITS, ids=["K3", "K4-extreme", "K2-tied"])
def test_categorical_fisher_is_negative_expected_hessian_and_root_reproduces_it(eta):
    K = eta.shape[0]
    fam = models.categorical(K)
    p = np.exp(eta - eta.max()) / np.exp(eta - eta.max()).sum()
    # the K Hessians and scores in one compiled program (eager: one program per operation)
    hessians, scores = (np.asarray(a) for a in jax.jit(lambda e: (
        jnp.stack([jax.hessian(lambda e: fam.log_prob(k, e))(e) for k in range(K)]),
        jnp.stack([jax.grad(lambda e: fam.log_prob(k, e))(e) for k in range(K)])))(jnp.asarray(eta)))
    neg_expected = -np.einsum("k,kij->ij", p, hessians)
    F = np.asarray(fam.fisher(eta))
    assert np.allclose(F, neg_expected, rtol=0, atol=1e-15)
    assert np.allclose(F, np.einsum("k,ki,kj->ij", p, scores, scores), rtol=0, atol=1e-15)  # E[s s^T]
    assert np.allclose(F, np.diag(p) - np.outer(p, p), rtol=0, atol=1e-16)
    R = np.asarray(fam.fisher_root(eta))
    assert R.shape == (K, K) and np.allclose(R.T @ R, F, rtol=0, atol=1e-15)
    assert np.allclose(fam.variance(eta), F) and np.allclose(fam.mean(eta), p, rtol=1e-14)


def test_categorical_fisher_batches_over_leading_axes():
    fam = models.categorical(3)
    eta = jnp.asarray(np.random.default_rng(0).normal(size=(5, 3)))
    R, F = fam.fisher_root(eta), fam.fisher(eta)
    assert R.shape == F.shape == (5, 3, 3)
    assert np.allclose(jnp.einsum("nri,nrj->nij", R, R), F, atol=1e-15)
    assert np.allclose(F, jnp.stack([fam.fisher(e) for e in eta]), atol=1e-16)


@pytest.mark.parametrize("a", [-40.0, -2.5, 0.0, 0.7, 40.0])
def test_categorical_with_logits_0_a_is_the_logistic_likelihood(a):
    """K = 2 with logits (0, a): log p, Fisher (along (0, 1)) and GGN equal the Bernoulli ones."""
    cat, ber = models.categorical(2), models.bernoulli()
    eta = jnp.array([0.0, a])
    for y in (0, 1):
        exact = -np.logaddexp(0.0, -(2 * y - 1) * a)  # log sig(+-a), to full relative precision
        assert np.allclose(cat.log_prob(y, eta), exact, rtol=1e-14, atol=0)
        assert np.allclose(cat.log_prob(jnp.eye(2)[y], eta), exact, rtol=1e-14, atol=0)
        assert np.allclose(cat.log_prob(y, eta), ber.log_prob(float(y), a), rtol=1e-14, atol=1e-14)
    e = jnp.array([0.0, 1.0])  # d eta / d a
    assert np.allclose(e @ cat.fisher(eta) @ e, special.sig1(a), rtol=1e-13, atol=0)
    Re = cat.fisher_root(eta) @ e
    assert np.allclose(Re @ Re, special.sig1(a), rtol=1e-13, atol=0)
    # The same through models: softmax-type model with logits (0, x^T theta) vs logistic regression.
    x, theta = jnp.array([0.5, -1.0, 2.0]), jnp.array([0.3, 0.1, -0.4]) * a / 10
    two = models.nonlinear(lambda th, x: jnp.stack([0.0 * (x @ th), x @ th]), cat)
    for y in (0, 1):
        assert np.allclose(two.log_lik(theta, x, y), models.logistic().log_lik(theta, x, float(y)), rtol=1e-14)
    J = jax.jacfwd(two.predict)(theta, x)
    X = J.T @ cat.fisher_root(two.predict(theta, x)).T  # the GGN increment factor
    assert np.allclose(X @ X.T, special.sig1(x @ theta) * jnp.outer(x, x), rtol=1e-13, atol=1e-300)


def test_categorical_log_prob_is_stable_and_accepts_one_hot():
    fam = models.categorical(3)
    eta = jnp.array([-800.0, 0.0, 800.0])
    lp = jnp.stack([fam.log_prob(k, eta) for k in range(3)])
    assert np.allclose(lp, [-1600.0, -800.0, 0.0], rtol=1e-14) and bool(jnp.all(jnp.isfinite(lp)))
    assert float(fam.log_prob(2.0, eta)) == 0.0  # float-valued labels as filters pass them
    eta = jnp.array([[0.1, 0.2, -0.3], [1.0, -1.0, 0.0]])
    labels = jnp.array([2, 0])
    assert np.allclose(fam.log_prob(labels, eta), fam.log_prob(jax.nn.one_hot(labels, 3), eta), rtol=1e-15)
    assert np.allclose(fam.log_prob(labels, eta), jax.nn.log_softmax(eta)[jnp.arange(2), labels], rtol=1e-15)
    with pytest.raises(ValueError, match="labels of shape"):
        fam.log_prob(jnp.zeros((2, 2, 3)), jnp.zeros(3))


def test_categorical_float32():
    fam = models.categorical(3)
    eta = jnp.array([-60.0, 0.0, 60.0], dtype=jnp.float32)
    R, F = fam.fisher_root(eta), fam.fisher(eta)
    assert R.dtype == F.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(R)))
    assert np.allclose(R.T @ R, F, atol=1e-7)
    assert fam.log_prob(0, eta).dtype == jnp.float32 and np.isclose(float(fam.log_prob(0, eta)), -120.0)


def test_categorical_labels_are_validated():
    fam = models.categorical(3)
    for bad in (3, -1, 1.5, [0, 1, 7], np.nan):
        with pytest.raises(ValueError, match=r"ys must contain integer labels in \{0..2\}"):
            fam.check_y("ys", np.array(bad))
    # Labels of shape (T, m) with m = K (minibatches of K labels) are labels, not one-hot rows: the
    # check cannot tell them apart and does not try (log_prob does, from the shape of the logits).
    for good in (0, 2.0, [0, 1, 2, 2], np.eye(3)[[2, 0]], [[2, 2, 0], [1, 1, 1]]):
        assert fam.check_y("ys", np.array(good)) is not None
    # Traced labels are not checked (no guessing inside a trace).
    assert float(jax.jit(lambda y: fam.check_y("y", y) + 0.0)(7.0)) == 7.0
    with pytest.raises(ValueError, match="num_classes must be at least 2"):
        models.categorical(1)
    with pytest.raises(ValueError, match="num_classes must be a positive integer"):
        models.categorical(2.5)


def test_softmax_regression_is_a_linear_multiclass_model():
    dim, K = 3, 4
    model = models.softmax_regression(dim, K)
    rng = np.random.default_rng(1)
    Theta, x = rng.normal(size=(dim, K)), rng.normal(size=dim)
    theta = jnp.asarray(Theta.ravel())  # row-major: theta[i * K + k] = Theta[i, k]
    logits = x @ Theta
    assert model.kind == "nonlinear" and model.family.name == "categorical"
    assert np.allclose(model.predict(theta, x), logits, rtol=1e-14)
    lse = np.log(np.sum(np.exp(logits - logits.max()))) + logits.max()
    for y in range(K):
        assert np.allclose(model.log_lik(theta, x, y), logits[y] - lse, rtol=1e-13)
    with pytest.raises(ValueError, match="dim must be a positive integer"):
        models.softmax_regression(0, 3)
    with pytest.raises(ValueError, match="family: a categorical output needs K logits"):
        models.glm(models.categorical(3))


def test_elementwise_families_get_a_diagonal_fisher_root():
    from jaxrvga.baselines.klprox import laplace_likelihood_family
    eta = jnp.array([-2.0, 0.1, 3.0])
    for fam in (models.gaussian(0.5), models.bernoulli(), models.poisson_family(), laplace_likelihood_family(2.0)):
        R = fam.fisher_root(eta)
        assert R.shape == (3, 3) and np.allclose(R.T @ R, jnp.diag(fam.fisher(eta)), rtol=1e-14, atol=0)
    assert models.bernoulli().fisher_root(0.3).shape == (1, 1)  # a scalar eta is (1,)
    # positional construction with six fields, as older code does, still works
    fam = models.Family("id", lambda y, e: -(y - e) ** 2, lambda e: e, jnp.ones_like, jnp.ones_like,
                        lambda n, y: y)
    assert np.allclose(fam.fisher_root(eta), jnp.eye(3))


def test_root_diagonal_is_the_diagonal_of_the_default_root_only():
    eta = jnp.array([-2.0, 0.1, 3.0])
    for fam in (models.gaussian(0.5), models.bernoulli(), models.poisson_family()):
        np.testing.assert_array_equal(fam.root_diagonal(eta), jnp.diagonal(fam.fisher_root(eta)))
        assert fam.root_diagonal(jnp.ones((2, 4))).shape == (2, 4)  # the shape of eta, not flattened
    assert models.categorical(3).root_diagonal is None  # a full (K, K) root
    given = models.bernoulli()._replace(fisher_root=lambda e: jnp.diag(jnp.sqrt(models.bernoulli().fisher(e))))
    assert given.root_diagonal is None  # a root given by the user is taken as it is


@pytest.mark.parametrize("eta", [[1.0, 1.0, 1.0], [0.3, -2.0, 1.0], [-800.0, 0.0, 800.0], [2.0, 2.0, -1.0]])
def test_log_softmax_value_and_gradient(eta):
    """The score of the categorical likelihood is ``onehot(y) - softmax(eta)``, ties included."""
    eta = jnp.asarray(eta)
    p = jax.nn.softmax(eta)
    assert np.allclose(special.log_softmax(eta), jax.nn.log_softmax(eta), rtol=1e-15, atol=1e-300)
    fam = models.categorical(3)
    for y in range(3):
        assert np.allclose(jax.grad(lambda e: fam.log_prob(y, e))(eta), jnp.eye(3)[y] - p, rtol=1e-14, atol=1e-300)
        assert bool(jnp.all(jnp.isfinite(jax.jacrev(fam.fisher_root)(eta))))
