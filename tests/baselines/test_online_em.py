"""Recursive / online EM on a 1-D Gaussian mixture ([SLIDES]).

Tolerances. Each online estimate is compared with the batch-EM fixed point (the MLE) on the SAME
stream of N = 1e5 draws, in units of the MLE's standard errors ``SE_j`` (from the observed information):
* Cappe-Moulines with Polyak-Ruppert averaging over the second half is asymptotically the MLE of the
  second half; its difference from the all-data MLE has standard deviation ``SE_j`` (the variance of
  ``mean(second half) - mean(all)`` is ``sigma^2/N``), so we allow 5 SE.
* The 1/n-step recursions (Titterington (8), Cappe-Moulines with kappa = 1, Sato with lambda = 1) are
  asymptotically normal around the truth with covariance ``Sigma_T / N`` (Titterington's Thm 1; in
  several dimensions the Lyapunov equation ``(A - I/2) Sigma_T + Sigma_T (A - I/2)^T = I_c^-1 I I_c^-1``,
  ``A = I_c^-1 I``, valid when eig(A) > 1/2, which the test checks). The difference from the MLE then
  has standard deviation at most ``sd_T + SE``; we allow 4 (sd_T + SE) per coordinate.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sla

import jaxrvga as jr
from jaxrvga.baselines import online_em as oe

K = 3
N = 100_000
TRUE = oe.GMMParams(jnp.array([0.3, 0.5, 0.2]), jnp.array([-6.0, 0.0, 6.0]), jnp.array([1.0, 0.5, 1.5]))
INIT = oe.GMMParams(jnp.ones(K) / K, jnp.array([-3.0, 1.0, 4.0]), jnp.full(K, 2.0))


def _sample(n, seed):
    rng = np.random.default_rng(seed)
    z = rng.choice(K, size=n, p=np.asarray(TRUE.weights))
    return np.asarray(TRUE.means)[z] + np.sqrt(np.asarray(TRUE.variances))[z] * rng.normal(size=n)


def _free(p):
    return np.asarray(oe._to_free(p))


@pytest.fixture(scope="module")
def stream():
    x = _sample(N, 0)
    mle, ll = oe.batch_mixture_em(x, INIT, 300)
    u = oe._to_free(mle)
    H = jax.hessian(lambda v: oe.log_likelihood(oe._from_free(v, K), x))(u)
    se = np.sqrt(np.diag(np.linalg.inv(-np.asarray(H))))
    I = -np.asarray(H) / N
    Ic_inv = np.linalg.inv(np.asarray(oe.complete_data_fisher(mle)))
    A = Ic_inv @ I
    sig_T = sla.solve_continuous_lyapunov(A - 0.5 * np.eye(len(A)), Ic_inv @ I @ Ic_inv)
    return dict(x=jnp.asarray(x), mle=mle, ll=ll, se=se, A=A, sd_T=np.sqrt(np.diag(sig_T) / N))


def test_batch_em_is_monotone_and_reaches_a_fixed_point(stream):
    ll = np.asarray(stream["ll"])
    assert np.all(np.diff(ll) >= -1e-12 * np.abs(ll[-1]))
    assert ll[-1] > ll[0] + 1e4
    again = oe.em_step(stream["mle"], stream["x"])
    np.testing.assert_allclose(_free(again), _free(stream["mle"]), atol=1e-12)
    # the fixed point is a stationary point of the likelihood (score ~ 0)
    g = jax.grad(lambda v: oe.log_likelihood(oe._from_free(v, K), stream["x"]))(oe._to_free(stream["mle"]))
    assert np.max(np.abs(np.asarray(g) * stream["se"])) <= 1e-6


def test_cappe_moulines_with_averaging_reaches_the_mle(stream):
    flt = oe.cappe_moulines(kappa=0.6, average_from=N // 2)
    state, _ = jr.run(flt, flt.init(INIT), stream["x"], None)
    z = (_free(state.average) - _free(stream["mle"])) / stream["se"]
    assert np.max(np.abs(z)) <= 5.0, z
    # without averaging the kappa = 0.6 iterate is much noisier (error ~ sqrt(gamma_N), not N^-1/2)
    z_last = (_free(state.params) - _free(stream["mle"])) / stream["se"]
    assert np.linalg.norm(z_last) > 2 * np.linalg.norm(z)


@pytest.mark.parametrize("name", ["titterington", "cappe_moulines_1", "sato_1"])
def test_one_over_n_recursions_reach_the_mle(stream, name):
    assert np.min(np.real(np.linalg.eigvals(stream["A"]))) > 0.5  # Titterington's condition 2 I I_c^-1 > 1
    flt = {"titterington": oe.titterington(), "cappe_moulines_1": oe.cappe_moulines(kappa=1.0),
           "sato_1": oe.sato(1.0)}[name]
    state, _ = jr.run(flt, flt.init(INIT), stream["x"], None)
    err = np.abs(_free(state.params) - _free(stream["mle"]))
    assert np.all(err <= 4.0 * (stream["sd_T"] + stream["se"])), err / stream["se"]


def test_sato_identities():
    """Sato with lambda = 1 has eta(tau) = 1/tau: it IS Cappe-Moulines with kappa = 1; and the Neal-Hinton
    decay variant (10) with g is Sato with the constant discount lambda = g (the M-step is scale invariant)."""
    x = jnp.asarray(_sample(5000, 1))
    a, _ = jr.run(oe.sato(1.0), oe.sato(1.0).init(INIT), x, None)
    b, _ = jr.run(oe.cappe_moulines(1.0), oe.cappe_moulines(1.0).init(INIT), x, None)
    np.testing.assert_allclose(_free(a.params), _free(b.params), rtol=1e-12)
    np.testing.assert_allclose(a.eta, 1.0 / 5000, rtol=1e-12)
    g = 0.999
    a, _ = jr.run(oe.sato(g), oe.sato(g).init(INIT), x, None)
    c, _ = jr.run(oe.incremental_em_decay(g), oe.incremental_em_decay(g).init(INIT), x, None)
    np.testing.assert_allclose(_free(a.params), _free(c.params), rtol=1e-10)
    np.testing.assert_allclose(a.eta, (1 - g) / (1 - g**5000), rtol=1e-10)
    # a discount schedule given as a callable
    d, _ = jr.run(oe.sato(lambda tau: 1.0 - 1.0 / (tau + 1.0)), oe.sato(1.0).init(INIT), x, None)
    assert np.all(np.isfinite(_free(d.params)))


def test_incremental_em_reaches_the_batch_fixed_point():
    """Neal-Hinton incremental EM (9), 30 sweeps over n = 2000 items = the batch-EM fixed point to 1e-9."""
    n, sweeps = 2000, 30
    x = _sample(n, 2)
    mle, _ = oe.batch_mixture_em(x, INIT, 2000)
    flt = oe.incremental_em()
    state = flt.init(INIT, x)
    idx = np.tile(np.arange(n), sweeps)
    state, _ = jr.run(flt, state, (jnp.asarray(idx), jnp.asarray(np.tile(x, sweeps))), None)
    np.testing.assert_allclose(_free(state.params), _free(mle), atol=1e-9)
    # the running total is the sum of the stored per-item statistics
    for tot, per in zip(state.total, state.per_sample):
        np.testing.assert_allclose(tot, jnp.sum(per, 0), rtol=1e-10)


def test_titterington_step_is_eq8():
    """One step of (8) in (w, mu, sigma^2) with I_c: w += (r - w)/n, mu_k += r_k (x - mu_k)/(n w_k),
    sigma_k^2 += r_k ((x - mu_k)^2 - sigma_k^2)/(n w_k), n = k + n0."""
    flt = oe.titterington(n0=7.0)
    s = flt.init(INIT)
    s = flt.update(s, 0.3)
    x, n = 1.7, 8.0
    new = flt.update(s, x)
    w, m, v = (np.asarray(a) for a in s.params)
    r = np.asarray(oe.responsibilities(s.params, x))
    np.testing.assert_allclose(new.params.weights, w + (r - w) / n, rtol=1e-13)
    np.testing.assert_allclose(new.params.means, m + r * (x - m) / (n * w), rtol=1e-13)
    np.testing.assert_allclose(new.params.variances, v + r * ((x - m) ** 2 - v) / (n * w), rtol=1e-13)


def test_m_step_inverts_stats_of_and_filters_jit():
    np.testing.assert_allclose(_free(oe.m_step(oe.stats_of(TRUE))), _free(TRUE), rtol=1e-14)
    flt = oe.cappe_moulines()
    st = jax.jit(flt.update)(flt.init(INIT), 0.5)
    assert int(st.step) == 1


def test_value_errors():
    with pytest.raises(ValueError):
        oe.cappe_moulines(kappa=0.5)
    with pytest.raises(ValueError):
        oe.sato(1.5)
    with pytest.raises(ValueError):
        oe.incremental_em_decay(1.0)
    with pytest.raises(ValueError, match="x must be a vector"):
        oe.batch_mixture_em(np.ones((3, 2)), INIT)
    with pytest.raises(ValueError, match="num_iters"):
        oe.batch_mixture_em(np.ones(3), INIT, num_iters=-1)
    with pytest.raises(ValueError, match="x must be finite"):
        oe.batch_mixture_em(np.array([1.0, np.nan]), INIT)
    with pytest.raises(ValueError, match="means must be finite"):
        oe.sato().init(oe.GMMParams(jnp.ones(3) / 3, jnp.array([0.0, np.nan, 1.0]), jnp.ones(3)))
    with pytest.raises(ValueError):
        oe.cappe_moulines().init(oe.GMMParams(jnp.ones(3) / 3, jnp.zeros(2), jnp.ones(3)))
    with pytest.raises(ValueError):
        oe.titterington().init(oe.GMMParams(jnp.ones(3) / 2, jnp.zeros(3), jnp.ones(3)))
    with pytest.raises(ValueError):
        oe.sato().init(oe.GMMParams(jnp.ones(3) / 3, jnp.zeros(3), -jnp.ones(3)))


FILTERS = {"cappe_moulines": lambda: oe.cappe_moulines(0.6, burn_in=2),
           "cappe_moulines_avg": lambda: oe.cappe_moulines(0.6, burn_in=2, average_from=3),
           "sato": lambda: oe.sato(0.99, burn_in=2), "titterington": lambda: oe.titterington(),
           "decay": lambda: oe.incremental_em_decay(0.99, burn_in=2)}


@pytest.mark.parametrize("name", sorted(FILTERS))
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_observation_is_skipped_and_flagged(name, bad):
    """A NaN/inf observation leaves the state as it was (step included) and sets info.converged
    False; the stream then goes on as if that observation had not been there."""
    flt = FILTERS[name]()
    x = _sample(40, 5)
    with_bad = np.insert(x, 20, bad)
    clean, _ = jr.run(flt, flt.init(INIT), jnp.asarray(x), None)
    state, info = jr.run(flt, flt.init(INIT), jnp.asarray(with_bad), None, jr.trace_info)
    flags = np.asarray(info.converged)
    assert not flags[20] and flags[:20].all() and flags[21:].all()
    assert int(state.step) == 40
    for a, b in zip(jax.tree_util.tree_leaves(state.params), jax.tree_util.tree_leaves(clean.params)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    st = flt.update(flt.init(INIT), bad)
    assert not bool(st.info.converged) and int(st.step) == 0
    assert np.all(np.isfinite(_free(st.params)))


def test_incremental_em_skips_a_non_finite_item_and_checks_indices():
    x = _sample(30, 6)
    flt = oe.incremental_em()
    st0 = flt.init(INIT, x)
    st = flt.update(st0, (3, np.nan))
    assert not bool(st.info.converged) and int(st.step) == 0
    np.testing.assert_array_equal(_free(st.params), _free(st0.params))
    assert bool(flt.update(st0, (3, 0.5)).info.converged)
    with pytest.raises(ValueError, match=r"i must lie in \[0, 30\)"):
        flt.update(st0, (30, 0.5))
    with pytest.raises(ValueError, match=r"i must lie"):
        flt.update(st0, (-1, 0.5))
    with pytest.raises(ValueError, match="xs\\[0\\] must lie"):
        jr.run(flt, st0, (jnp.arange(31), jnp.zeros(31)), None)
    with pytest.raises(ValueError, match="integer"):
        jr.run(flt, st0, (jnp.zeros(3), jnp.zeros(3)), None)
    with pytest.raises(ValueError, match="x must be a scalar"):
        flt.update(st0, (1, jnp.zeros(2)))
    with pytest.raises(ValueError, match="data must be finite"):
        flt.init(INIT, np.array([0.0, np.nan]))


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_mixture_filters_refuse_vector_observations(name):
    flt = FILTERS[name]()
    with pytest.raises(ValueError, match="xs must be a vector"):
        jr.run(flt, flt.init(INIT), jnp.ones((10, 2)), None)
    with pytest.raises(ValueError, match="x must be a scalar"):
        flt.update(flt.init(INIT), jnp.ones(2))
    with pytest.raises(ValueError, match="x must be a real array"):
        flt.update(flt.init(INIT), 1.0 + 1j)
