"""jr.predictive for every belief and model: closed forms against oracles, low rank against dense,
Monte Carlo against exact values and quadrature (float64 unless said)."""
import functools

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga import models
from jaxrvga.kernels import special
from jaxrvga.posterior_predictive import Predictive

D = 6  # parameter dimension of every belief below


def beliefs(dtype=np.float64, seed=0):
    """A low-rank belief and the dense state and Laplace result with the same covariance."""
    rng = np.random.default_rng(seed)
    W = 0.6 * rng.normal(size=(D, 2))
    psi = rng.uniform(1.5, 3.0, size=D)
    mean = 0.5 * rng.normal(size=D)
    cov = np.linalg.inv(W @ W.T + np.diag(psi))  # dense, in the test only
    lr = jr.LowRankState(jnp.asarray(mean, dtype), jnp.asarray(W, dtype), jnp.asarray(psi, dtype), 0, None)
    dense = jr.GaussianState(jnp.asarray(mean, dtype), jnp.asarray(cov, dtype), 0, None)
    lap = jr.baselines.laplace.LaplaceResult(jnp.asarray(mean, dtype), jnp.asarray(cov, dtype), True, 3)
    return lr, dense, lap


def custom_poisson():
    """The Poisson family under another name: predictive moments then come from Gauss-Hermite."""
    return models.poisson_family()._replace(name="poisson-by-quadrature")


def vector_tanh(theta, x):
    return jnp.tanh(jnp.reshape(theta, (2, 3)) @ x)


def two_class(theta, x):  # logits (0, x^T theta): the logistic model as a categorical one
    a = x @ theta
    return jnp.stack([jnp.zeros_like(a), a])


MODELS = {  # name -> (model, inputs)
    "logistic": (models.logistic(), "glm"),
    "poisson": (models.poisson(), "glm"),
    "linear_gaussian": (models.linear_gaussian(0.3), "glm"),
    "glm_bernoulli": (models.glm(models.bernoulli()), "glm"),
    "glm_quadrature": (models.glm(custom_poisson()), "glm"),
    "softmax_regression": (models.softmax_regression(3, 2), "x3"),
    "softmax_3_classes": (models.nonlinear(lambda th, x: jnp.reshape(th, (2, 3)).T @ x,
                                           models.categorical(3)), "x2"),
    "nonlinear_gaussian": (models.nonlinear(vector_tanh, models.gaussian(0.2)), "x3"),
    "nonlinear_poisson": (models.nonlinear(lambda th, x: jnp.sin(x @ th), models.poisson_family()), "glm"),
}


def inputs(kind, n=5, seed=1):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(size=(n, {"glm": D, "x3": 3, "x2": 2}[kind])) / np.sqrt(2.0))


# ----------------------------------------------------------------------------- the logistic default


def test_default_is_the_logistic_predictive_of_equations_62_63():
    _, dense, _ = beliefs()
    X = inputs("glm")
    for x in (X, X[0]):
        out = jr.predictive(dense, x)
        p, var = special.logistic_predictive(dense.mean, dense.cov, x)
        assert isinstance(out, Predictive) and out.mean.shape == np.shape(x)[:-1]
        assert np.allclose(out.mean, p, rtol=1e-15, atol=0) and np.allclose(out.var, var, rtol=1e-15, atol=0)
        m, v = x @ dense.mean, jnp.einsum("...i,ij,...j->...", x, dense.cov, x)
        k = np.sqrt(8 / np.pi) / np.sqrt(v + 8 / np.pi)
        assert np.allclose(out.mean, 1 / (1 + np.exp(-k * m)), rtol=1e-14)  # [RVGA] eq. 62
        assert np.allclose(out.var, out.mean * (1 - out.mean) * (1 - k), rtol=1e-14)  # eq. 63
        mean2, var2 = jr.predictive(dense, x, models.logistic())  # unpacks as a pair
        assert np.allclose(mean2, p, rtol=1e-15) and np.allclose(var2, var, rtol=1e-15)


# ----------------------------------------------------------------------------- low rank == dense


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("noise", [False, True], ids=["epistemic", "total"])
def test_low_rank_and_laplace_beliefs_match_the_dense_belief(name, noise):
    model, kind = MODELS[name]
    lr, dense, lap = beliefs()
    X = inputs(kind)
    a = jr.predictive(lr, X, model, observation_noise=noise)
    b = jr.predictive(dense, X, model, observation_noise=noise)
    c = jr.predictive(lap, X, model, observation_noise=noise)
    assert a.mean.shape == a.var.shape and a.mean.shape[0] == 5
    for u, w in ((a, b), (c, b)):
        assert np.allclose(u.mean, w.mean, rtol=1e-11, atol=1e-15)
        assert np.allclose(u.var, w.var, rtol=1e-10, atol=1e-15)
    assert bool(jnp.all(b.var >= 0)) and bool(jnp.all(jnp.isfinite(b.mean)))


def largest_array(jaxpr):
    """Size of the largest value any equation of ``jaxpr`` (or of its sub-jaxprs) produces."""
    sizes = [0]
    for eqn in jaxpr.eqns:
        sizes += [int(np.prod(v.aval.shape)) for v in eqn.outvars]
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    sizes.append(largest_array(sub.jaxpr))
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    sizes.append(largest_array(sub))
    return max(sizes)


def test_low_rank_predictive_forms_no_d_by_d_array():
    d, K, n = 600, 3, 7
    rng = np.random.default_rng(2)
    lr = jr.LowRankState(jnp.zeros(d * K), jnp.asarray(rng.normal(size=(d * K, 4))), jnp.ones(d * K), 0, None)
    X = jnp.asarray(rng.normal(size=(n, d)))
    model = models.softmax_regression(d, K)
    for fn in (lambda s: jr.predictive(s, X, model),
               lambda s: jr.predictive(s, X, model, key=jax.random.PRNGKey(0), num_samples=8)):
        assert largest_array(jax.make_jaxpr(fn)(lr).jaxpr) <= n * K * d * K  # the n Jacobians (K, dK)
    glm_state = lr._replace(mean=jnp.zeros(d), W=lr.W[:d], psi=lr.psi[:d])
    for key in (None, jax.random.PRNGKey(0)):
        fn = functools.partial(jr.predictive, X=X, model=models.poisson(), key=key, num_samples=8)
        assert largest_array(jax.make_jaxpr(fn)(glm_state).jaxpr) <= 8 * d  # X or the 8 samples


# ----------------------------------------------------------------------------- closed forms


def test_gaussian_and_poisson_closed_forms():
    _, dense, _ = beliefs()
    X = inputs("glm")
    m = np.asarray(X @ dense.mean)
    v = np.einsum("ni,ij,nj->n", X, dense.cov, X)
    out = jr.predictive(dense, X, models.linear_gaussian(0.3))
    assert np.allclose(out.mean, m, rtol=1e-14) and np.allclose(out.var, v, rtol=1e-14)
    out = jr.predictive(dense, X, models.linear_gaussian(0.3), observation_noise=True)
    assert np.allclose(out.var, v + 0.3, rtol=1e-14)
    # Poisson: E[e^a] = exp(m + v/2), Var[e^a] = (e^v - 1) exp(2m + v); total adds E[e^a].
    out = jr.predictive(dense, X, models.poisson())
    assert np.allclose(out.mean, np.exp(m + v / 2), rtol=1e-14)
    assert np.allclose(out.var, np.expm1(v) * np.exp(2 * m + v), rtol=1e-13)
    # The same family by Gauss-Hermite quadrature agrees.
    for noise in (False, True):
        exact = jr.predictive(dense, X, models.poisson(), observation_noise=noise)
        quad = jr.predictive(dense, X, models.glm(custom_poisson()), observation_noise=noise)
        assert np.allclose(quad.mean, exact.mean, rtol=1e-12) and np.allclose(quad.var, exact.var, rtol=1e-10)


def test_nonlinear_predictor_is_linearised_at_the_mean():
    """``eta = tanh(x^T theta)``: ``v = J P J^T`` with ``J = (1 - tanh^2(x^T mu)) x``."""
    _, dense, _ = beliefs()
    X = inputs("glm")
    model = models.nonlinear(lambda th, x: jnp.tanh(x @ th), models.gaussian(0.5))
    out = jr.predictive(dense, X, model, observation_noise=True)
    t = np.tanh(np.asarray(X @ dense.mean))
    J = (1 - t**2)[:, None] * np.asarray(X)
    assert out.mean.shape == (5,)
    assert np.allclose(out.mean, t, rtol=1e-14)
    assert np.allclose(out.var, np.einsum("ni,ij,nj->n", J, dense.cov, J) + 0.5, rtol=1e-13)
    batched = jr.predictive(dense, X, models.minibatch(model), observation_noise=True)  # as its one-input model
    np.testing.assert_allclose(batched.mean, out.mean, rtol=1e-14)
    np.testing.assert_allclose(batched.var, out.var, rtol=1e-14)


def test_categorical_with_logits_0_a_is_the_logistic_predictive():
    lr, dense, _ = beliefs()
    X = inputs("glm")
    cat = models.nonlinear(two_class, models.categorical(2))
    for state in (lr, dense):
        p, var = jr.predictive(state, X, models.logistic())
        out = jr.predictive(state, X, cat)
        assert out.mean.shape == (5, 2)
        assert np.allclose(out.mean[:, 1], p, rtol=1e-13) and np.allclose(out.mean[:, 0], 1 - p, rtol=1e-13)
        assert np.allclose(out.var, var[:, None], rtol=1e-12)  # eq. 63 for both classes
        total = jr.predictive(state, X, cat, observation_noise=True)
        assert np.allclose(total.var[:, 1], p * (1 - p), rtol=1e-13)


def test_categorical_closed_form_properties():
    rng = np.random.default_rng(3)
    m = jnp.asarray(rng.normal(size=4))
    A = rng.normal(size=(4, 4))
    V = jnp.asarray(A @ A.T)
    p, var = special.softmax_probit(m, V)
    assert np.isclose(float(jnp.sum(p)), 1.0, rtol=1e-15) and bool(jnp.all((var >= 0) & (var <= p * (1 - p))))
    p0, var0 = special.softmax_probit(m, 0 * V)  # no uncertainty: the plug-in softmax
    assert np.allclose(p0, jax.nn.softmax(m), rtol=1e-14) and np.allclose(var0, 0, atol=1e-16)
    # A common (random, correlated) shift of the logits changes nothing.
    c, s = jnp.asarray(rng.normal(size=4)), 2.0
    one = jnp.ones(4)
    p2, var2 = special.softmax_probit(m + 5.0, V + jnp.outer(one, c) + jnp.outer(c, one) + s * jnp.outer(one, one))
    assert np.allclose(p2, p, rtol=1e-13) and np.allclose(var2, var, rtol=1e-12)
    # Batched over leading axes.
    pb, vb = special.softmax_probit(jnp.stack([m, m + 1]), jnp.stack([V, V]))
    assert np.allclose(pb, jnp.stack([p, p]), rtol=1e-14) and np.allclose(vb, jnp.stack([var, var]), rtol=1e-13)


def test_softmax_probit_logits_stay_finite_where_a_probability_underflows():
    """``softmax_probit_logits``: their log-softmax is the log of ``softmax_probit``'s ``p``; with ``V = 0``
    in float32 and logits 88 apart (a class probability below float32's smallest normal) the categorical
    log predictive is ``log_softmax(m)[y]``, finite, where ``log(p)`` was not."""
    rng = np.random.default_rng(4)
    m = jnp.asarray(rng.normal(size=4))
    A = rng.normal(size=(4, 4))
    V = jnp.asarray(A @ A.T)
    p, _ = special.softmax_probit(m, V)
    np.testing.assert_allclose(jax.nn.log_softmax(special.softmax_probit_logits(m, V)), jnp.log(p), rtol=1e-12)
    m32 = jnp.asarray([-0.02, -12.6, 57.4, -30.6], jnp.float32)
    V32 = jnp.zeros((4, 4), jnp.float32)
    family = jr.models.categorical(4)
    for y in range(4):
        out = family.log_predictive(family, jnp.asarray(y), m32, V32)
        assert out.dtype == jnp.float32 and np.isfinite(out), y
        np.testing.assert_allclose(out, jax.nn.log_softmax(np.asarray(m32, np.float64))[y], rtol=1e-5, atol=1e-6)
    log_p = jnp.log(jnp.asarray([0.0, 0.3, 0.7, 0.0], jnp.float32))  # probabilities 0: log 0 = -inf
    np.testing.assert_allclose([family.log_prob(jnp.asarray(y), log_p) for y in (1, 2)], np.log([0.3, 0.7]), rtol=1e-6)
    assert family.log_prob(jnp.asarray(0), log_p) == -np.inf  # not NaN


# ----------------------------------------------------------------------------- Monte Carlo


def quadrature_moments(f, m, v, num_points=128):
    """Mean, variance and the standard errors of their S-sample estimates, for ``f(a)``, ``a ~ N(m, v)``."""
    z, w = np.polynomial.hermite_e.hermegauss(num_points)
    w = w / w.sum()
    vals = f(np.asarray(m)[..., None] + np.sqrt(np.asarray(v))[..., None] * z)
    mean = vals @ w
    dev = vals - mean[..., None]
    var, mu4 = dev**2 @ w, dev**4 @ w
    return mean, var, lambda S: (np.sqrt(var / S), np.sqrt((mu4 - var**2) / S))


def assert_within_standard_errors(out, mean, var, se, S, k=4.5):
    se_mean, se_var = se(S)
    assert np.all(np.abs(np.asarray(out.mean) - mean) <= k * se_mean), (out.mean, mean, se_mean)
    assert np.all(np.abs(np.asarray(out.var) - var) <= k * se_var + 4.0 * var / S), (out.var, var, se_var)


@pytest.mark.parametrize("belief", ["low_rank", "dense"])
@pytest.mark.parametrize("name", ["poisson", "linear_gaussian", "logistic"])
def test_monte_carlo_converges_to_the_exact_moments(belief, name):
    """Poisson and Gaussian: to the closed forms; logistic: to Gauss-Hermite quadrature of sig."""
    lr, dense, _ = beliefs()
    state = lr if belief == "low_rank" else dense
    model = MODELS[name][0]
    X = inputs("glm")
    m = np.asarray(X @ dense.mean)
    v = np.einsum("ni,ij,nj->n", X, dense.cov, X)
    f = {"poisson": np.exp, "linear_gaussian": lambda a: a, "logistic": lambda a: 1 / (1 + np.exp(-a))}[name]
    mean, var, se = quadrature_moments(f, m, v)
    if name != "logistic":  # the closed forms are exact
        exact = jr.predictive(state, X, model)
        assert np.allclose(exact.mean, mean, rtol=1e-12) and np.allclose(exact.var, var, rtol=1e-10)
    for S, seed in ((2**10, 0), (2**17, 1)):
        out = jr.predictive(state, X, model, key=jax.random.PRNGKey(seed), num_samples=S)
        assert_within_standard_errors(out, mean, var, se, S)


def test_monte_carlo_categorical_and_nonlinear_low_rank():
    """Sampling by Proposition 1 (corrected) with nonlinear predictors: a two-class softmax converges
    to the quadrature of sig, and a vector predictor linear in theta to its exact closed form."""
    lr, dense, _ = beliefs()
    X = inputs("glm")
    m = np.asarray(X @ dense.mean)
    v = np.einsum("ni,ij,nj->n", X, dense.cov, X)
    mean, var, se = quadrature_moments(lambda a: 1 / (1 + np.exp(-a)), m, v)
    S = 2**16
    out = jr.predictive(lr, X, models.nonlinear(two_class, models.categorical(2)),
                        key=jax.random.PRNGKey(4), num_samples=S)
    assert out.mean.shape == (5, 2) and np.allclose(out.mean.sum(-1), 1.0, rtol=1e-14)
    assert_within_standard_errors(Predictive(out.mean[:, 1], out.var[:, 1]), mean, var, se, S)
    model = models.nonlinear(lambda th, x: jnp.reshape(th, (2, 3)) @ x, models.gaussian(0.2))
    X3 = inputs("x3")
    exact = jr.predictive(lr, X3, model, observation_noise=True)
    mc = jr.predictive(lr, X3, model, key=jax.random.PRNGKey(5), num_samples=S, observation_noise=True)
    sd = np.sqrt(np.asarray(exact.var) - 0.2)
    assert mc.mean.shape == (5, 2)
    assert np.all(np.abs(mc.mean - exact.mean) <= 4.5 * sd / np.sqrt(S))
    assert np.all(np.abs(mc.var - exact.var) <= 4.5 * sd**2 * np.sqrt(2 / S) + 4.0 * sd**2 / S)


def test_monte_carlo_of_a_point_mass_is_the_plug_in():
    _, dense, _ = beliefs()
    X = inputs("glm")
    point = dense._replace(cov=0 * dense.cov)
    out = jr.predictive(point, X, models.poisson(), key=jax.random.PRNGKey(0), num_samples=16)
    assert np.allclose(out.mean, np.exp(X @ dense.mean), rtol=1e-14) and np.allclose(out.var, 0, atol=1e-28)
    out = jr.predictive(point, X, models.poisson(), key=jax.random.PRNGKey(0), num_samples=16,
                        observation_noise=True)
    assert np.allclose(out.var, np.exp(X @ dense.mean), rtol=1e-14)  # the Poisson variance alone


# ----------------------------------------------------------------------------- inputs, dtypes, jit


def test_pytree_batch_for_nonlinear_models():
    _, dense, _ = beliefs()
    rng = np.random.default_rng(5)
    X = {"u": jnp.asarray(rng.normal(size=(4, 3))), "s": jnp.asarray(rng.normal(size=4))}

    def h(theta, x):
        return jnp.sin(theta[:3] @ x["u"]) * x["s"] + theta[3:] @ x["u"]

    model = models.nonlinear(h, models.poisson_family())
    out = jr.predictive(dense, X, model)
    one_by_one = [jr.predictive(dense, jax.tree_util.tree_map(lambda a: a[i:i + 1], X), model) for i in range(4)]
    assert out.mean.shape == (4,)
    assert np.allclose(out.mean, [o.mean[0] for o in one_by_one], rtol=1e-13)
    assert np.allclose(out.var, [o.var[0] for o in one_by_one], rtol=1e-13)


@pytest.mark.parametrize("name", ["logistic", "poisson", "softmax_3_classes", "nonlinear_gaussian"])
def test_float32_and_jit(name):
    model, kind = MODELS[name]
    X = inputs(kind)
    for s64, s32 in zip(beliefs()[:2], beliefs(np.float32)[:2]):
        ref = jr.predictive(s64, X, model)
        out = jr.predictive(s32, X.astype(jnp.float32), model)
        assert out.mean.dtype == out.var.dtype == jnp.float32
        assert np.allclose(out.mean, ref.mean, rtol=2e-5, atol=1e-6)
        assert np.allclose(out.var, ref.var, rtol=2e-4, atol=1e-6)
        jitted = jax.jit(functools.partial(jr.predictive, model=model))(s64, X)
        assert np.allclose(jitted.mean, ref.mean, rtol=1e-12) and np.allclose(jitted.var, ref.var, rtol=1e-12)
        mc = jax.jit(lambda s, k: jr.predictive(s, X, model, key=k, num_samples=64))(s64, jax.random.PRNGKey(1))
        mc_eager = jr.predictive(s64, X, model, key=jax.random.PRNGKey(1), num_samples=64)
        assert np.allclose(mc.mean, mc_eager.mean, rtol=1e-10) and np.allclose(mc.var, mc_eager.var, rtol=1e-8)


def test_bad_arguments():
    lr, dense, _ = beliefs()
    X = inputs("glm")
    with pytest.raises(ValueError, match=r"X must have shape \(6,\) or \(n, 6\)"):
        jr.predictive(dense, X[:, :4])
    with pytest.raises(ValueError, match="state must be a GaussianState, LowRankState or DiagonalState"):
        jr.predictive(type("MeanOnly", (), {"mean": dense.mean})(), X)
    with pytest.raises(ValueError, match=r"state.cov must have shape \(6, 6\)"):
        jr.predictive(dense._replace(cov=dense.cov[:5]), X)
    with pytest.raises(ValueError, match="state must be a Gaussian belief"):
        jr.predictive((1, 2), X)
    with pytest.raises(ValueError, match="model must be a jaxrvga.models.Model"):
        jr.predictive(dense, X, "logistic")
    with pytest.raises(ValueError, match="num_samples must be a positive integer"):
        jr.predictive(lr, X, key=jax.random.PRNGKey(0), num_samples=0)


def test_invalid_beliefs_raise_where_concrete():
    """Issue 26.6: a NaN mean, ``cov = -I``, a non-symmetric cov, ``psi <= 0`` or a NaN ``W`` gave NaN or
    negative variances; they raise ValueError naming the field (a point mass, cov = 0, is accepted)."""
    lr, dense, _ = beliefs()
    X = inputs("glm")
    bad = [(dense._replace(mean=dense.mean.at[0].set(jnp.nan)), "state.mean"),
           (dense._replace(cov=-jnp.eye(6)), "state.cov"),
           (dense._replace(cov=dense.cov.at[0, 1].add(1.0)), "state.cov"),
           (lr._replace(psi=lr.psi.at[2].set(-1.0)), "state.psi"),
           (lr._replace(psi=lr.psi.at[2].set(0.0)), "state.psi"),
           (lr._replace(W=lr.W.at[0, 0].set(jnp.inf)), "state.W")]
    for state, name in bad:
        with pytest.raises(ValueError, match=name.replace(".", r"\.")):
            jr.predictive(state, X)
    out = jr.predictive(dense._replace(cov=0 * dense.cov), X)
    assert np.all(np.asarray(out.var) >= 0)


def test_a_family_brings_its_own_predictive():
    """Family behaviour is a value of the family, not a branch on its name: a Gaussian family renamed
    keeps its closed forms (equal to the original), and one without them is integrated by
    quadrature (equal to the closed forms to quadrature accuracy)."""
    lr, dense, _ = beliefs()
    X = inputs("glm")
    y = np.linspace(-1.0, 1.0, X.shape[0])
    base = jr.models.gaussian(0.3)
    renamed = base._replace(name="my gaussian")
    bare = renamed._replace(predictive=None, log_predictive=None)
    h = lambda th, x: jnp.tanh(x @ th)  # noqa: E731
    want_moments = jr.predictive(dense, X, jr.models.nonlinear(h, base), observation_noise=True)
    want_log = jr.log_predictive(dense, X[0], y[0], jr.models.nonlinear(h, base))
    got = jr.predictive(dense, X, jr.models.nonlinear(h, renamed), observation_noise=True)
    assert np.array_equal(got.mean, want_moments.mean) and np.array_equal(got.var, want_moments.var)
    assert jr.log_predictive(dense, X[0], y[0], jr.models.nonlinear(h, renamed)) == want_log
    quad = jr.predictive(dense, X, jr.models.nonlinear(h, bare), observation_noise=True)
    np.testing.assert_allclose(quad.mean, want_moments.mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(quad.var, want_moments.var, rtol=1e-8)
    np.testing.assert_allclose(jr.log_predictive(dense, X[0], y[0], jr.models.nonlinear(h, bare), num_points=64),
                               want_log, rtol=1e-8)


def test_linearize_is_the_predictor_and_its_jacobian():
    """``jr.models.linearize``: a GLM's rows themselves; a nonlinear model's flattened output and its
    Jacobian (forward-mode autodiff as the oracle); a minibatch model's m predictions as the k components;
    ``jacobian=False`` gives no Jacobian."""
    from conftest import small_mlp

    rng = np.random.default_rng(5)
    theta = jnp.asarray(rng.normal(size=4))
    X = jnp.asarray(rng.normal(size=(3, 4)))
    eta, J = jr.models.linearize(jr.models.logistic(), theta, X)
    np.testing.assert_allclose(eta, X @ theta, rtol=1e-12)
    assert J is X
    h, d = small_mlp(3)
    model = jr.models.nonlinear(h, jr.models.categorical(3))
    theta = jnp.asarray(rng.normal(size=d))
    x = jnp.asarray(rng.normal(size=3))
    eta, J = jr.models.linearize(model, theta, x)
    np.testing.assert_allclose(eta, h(theta, x), rtol=1e-12)
    np.testing.assert_allclose(J, jax.jacfwd(h)(theta, x), rtol=1e-12)
    assert jr.models.linearize(model, theta, x, jacobian=False)[1] is None
    batch = jnp.asarray(rng.normal(size=(2, 3)))
    eta, J = jr.models.linearize(jr.models.minibatch(model), theta, batch)
    assert eta.shape == (6,) and J.shape == (6, d)
    np.testing.assert_allclose(J[3:], jax.jacfwd(h)(theta, batch[1]), rtol=1e-12)


def test_joint_log_density_is_the_log_predictive_of_the_moments():
    """``posterior_predictive.joint_log_density`` of ``eta ~ N(m, V)``: the Gaussian ``N(y; m, V + s2 I)``,
    the Student-t of a learned noise variance, and, for the logistic GLM, what ``jr.log_predictive`` gives
    the belief whose moments they are."""
    from jaxrvga.posterior_predictive import joint_log_density

    m, V, y = jnp.array([0.3, -1.0]), jnp.array([[0.5, 0.1], [0.1, 0.4]]), jnp.array([0.0, -0.5])
    want = jax.scipy.stats.multivariate_normal.logpdf(y, m, V + 0.25 * jnp.eye(2))
    np.testing.assert_allclose(joint_log_density(jr.models.linear_gaussian(0.25), None, y, m, V), want, rtol=1e-12)
    stats = jr.noise.check_noise((3.0, 2.0), jnp.float64)
    np.testing.assert_allclose(joint_log_density(jr.models.linear_gaussian(None), stats, y, m, V),
                               jr.noise.log_student_t(stats, y - m, V + jnp.eye(2)), rtol=1e-12)
    state = jr.rvga(jr.models.logistic()).init(jnp.array([0.5, -1.0]), jnp.array([[1.0, 0.2], [0.2, 0.5]]))
    x = jnp.array([1.0, 2.0])
    v = x @ state.cov @ x
    np.testing.assert_allclose(joint_log_density(jr.models.logistic(), None, jnp.array([1.0]), (x @ state.mean)[None],
                                                 v[None, None]),
                               jr.log_predictive(state, x, 1.0), rtol=1e-12)
