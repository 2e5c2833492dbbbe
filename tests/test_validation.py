"""Input validation of every public constructor, ``init`` and ``update``, and the checked mode.

Contract (README "Conventions and numerics", jaxrvga/validation.py): shapes and dtypes are
checked at trace time, values (labels, positivity, symmetry) wherever they are concrete, and
every failure is a ``ValueError`` naming the argument and what was expected. Inside ``jit``
a value check is skipped, never guessed; ``jr.run`` checks a whole data set before scanning
it, and ``jr.run(..., validate=True)`` (checkify) names the first step whose data or state
holds a NaN or inf.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga.baselines import fa_filters
from jaxrvga.kernels import factor_analysis as fa
from jaxrvga.baselines import batch_fa
from jaxrvga.kernels import lowrank
from jaxrvga.baselines import online_em as oem

from conftest import FULL_FILTERS, LOGISTIC, LOGISTIC_FILTERS, LOWRANK_SCHEMES, lowrank_filter

lrvga = jr.lrvga

D, P = 3, 2

# Full-covariance filters: name -> (factory, whether y is a {0, 1} label).
FULL = {**{name: (make, name in LOGISTIC_FILTERS) for name, make in FULL_FILTERS.items()},
        "rvga_linear": (lambda: jr.rvga(jr.models.linear_gaussian(2.0)), False),
        "rvga_poisson": (lambda: jr.rvga(jr.models.poisson()), False)}
LABEL_FILTERS = sorted(LOGISTIC_FILTERS)
LR_SCHEMES = list(LOWRANK_SCHEMES)


def lr_filter(scheme, model=LOGISTIC, **kw):
    return lowrank_filter(scheme, P, model, **kw)


def lr_state(flt, dtype=jnp.float64):
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), D, P, 1.0, dtype=dtype)
    return flt.init(jnp.zeros(D, dtype), W0, psi0, jax.random.PRNGKey(1))


def full_state(flt, dtype=jnp.float64):
    return flt.init(jnp.zeros(D, dtype), jnp.eye(D, dtype=dtype))


# ============================================================================ full-covariance filters


@pytest.mark.parametrize("name", sorted(FULL))
def test_full_init_rejects_bad_mean_and_cov(name):
    flt = FULL[name][0]()
    with pytest.raises(ValueError, match=r"^mean must be a vector"):
        flt.init(np.zeros((D, 1)), np.eye(D))
    with pytest.raises(ValueError, match=r"^cov must be a square matrix"):
        flt.init(np.zeros(D), np.ones((D, D - 1)))
    with pytest.raises(ValueError, match=r"^cov must have shape \(3, 3\)"):
        flt.init(np.zeros(D), np.eye(D + 1))
    with pytest.raises(ValueError, match=r"^cov must be symmetric"):
        flt.init(np.zeros(2), np.array([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"^cov must be finite"):
        flt.init(np.zeros(2), np.array([[1.0, np.inf], [np.inf, 1.0]]))
    with pytest.raises(ValueError, match=r"^cov must be a real array"):
        flt.init(np.zeros(D), 1j * np.eye(D))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", sorted(FULL))
def test_full_update_rejects_x_of_wrong_length(name, jit):
    """A shape error is raised at trace time, so also under ``jit``."""
    flt = FULL[name][0]()
    update = jax.jit(flt.update) if jit else flt.update
    with pytest.raises(ValueError, match=r"^x must have shape \(3,\)"):
        update(full_state(flt), jnp.ones(D + 1), 1.0)


@pytest.mark.parametrize("name", sorted(FULL))
def test_full_run_rejects_bad_data_shapes(name):
    flt = FULL[name][0]()
    st = full_state(flt)
    with pytest.raises(ValueError, match=r"^xs must have"):
        jr.run(flt, st, np.ones((4, D + 1)), np.zeros(4))
    with pytest.raises(ValueError, match=r"leading \(time\) axis"):
        jr.run(flt, st, np.ones((4, D)), np.zeros(5))


@pytest.mark.parametrize("name", LABEL_FILTERS)
def test_logistic_labels_outside_01_are_rejected_where_concrete(name):
    flt = FULL[name][0]()
    st = full_state(flt)
    for bad in (2.0, -1.0, 0.5):
        with pytest.raises(ValueError, match=r"^y must contain labels in \{0, 1\}"):
            flt.update(st, jnp.ones(D), bad)
    with pytest.raises(ValueError, match=r"^ys must contain labels in \{0, 1\}"):
        jr.run(flt, st, np.ones((4, D)), np.array([0.0, 1.0, 2.0, 0.0]))
    with pytest.raises(ValueError, match=r"^y must have shape \(\)"):
        flt.update(st, jnp.ones(D), jnp.ones(2))
    # Inside jit the label is a tracer: the value check is skipped, not guessed (the check runs at
    # trace time: traced as jit traces it, by eval_shape, with no program compiled) ...
    jax.eval_shape(flt.update, st, jnp.ones(D), 2.0)
    # ... and jr.run still checks the concrete data set before it scans.
    with pytest.raises(ValueError, match=r"^ys must contain labels"):
        jr.run(flt, st, np.ones((2, D)), np.array([1.0, 3.0]))


def test_poisson_counts_must_be_non_negative_integers():
    flt = FULL["rvga_poisson"][0]()
    st = full_state(flt)
    for bad in (-1.0, 1.5):
        with pytest.raises(ValueError, match=r"^y must contain non-negative integer counts"):
            flt.update(st, jnp.ones(D), bad)


def test_kalman_vector_observation_shapes():
    flt = jr.kalman(1.0)
    st = full_state(flt)
    with pytest.raises(ValueError, match=r"^y must have shape \(2,\) to match x"):
        flt.update(st, jnp.ones((2, D)), jnp.ones(3))
    with pytest.raises(ValueError, match=r"^x must have shape \(3,\) or \(m, 3\)"):
        flt.update(st, jnp.ones((2, D + 1)), jnp.ones(2))


def test_full_constructors_reject_bad_options():
    for bad in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match=r"^noise_var must be positive"):
            jr.models.linear_gaussian(bad)
        with pytest.raises(ValueError, match=r"^noise_var must be positive"):
            jr.kalman(bad)
    with pytest.raises(ValueError, match=r"unknown scheme 'newton'"):
        jr.rvga(LOGISTIC, scheme="newton")
    with pytest.raises(ValueError, match=r"unknown curvature"):
        jr.rvga(LOGISTIC, curvature="bfgs")
    for factory in (jr.rvga, jr.ekf, jr.mirror_prox):
        with pytest.raises(ValueError, match=r"^model must be"):
            factory("logistic")
    with pytest.raises(ValueError, match=r"^model must be a GLM"):
        jr.mirror_prox(jr.models.nonlinear(lambda th, x: x @ th))
    with pytest.raises(ValueError, match=r"^num_iters must be a positive integer"):
        jr.rvga(jr.models.nonlinear(lambda th, x: x @ th), "sampled", num_iters=0)
    with pytest.raises(ValueError, match=r"^num_iters is not used by scheme 'implicit'"):
        jr.rvga(jr.models.poisson(), num_iters=3)
    with pytest.raises(ValueError, match=r"^num_samples must be >= 2"):
        jr.rvga(jr.models.nonlinear(lambda th, x: x @ th), "sampled", num_samples=1)
    factories = [lambda pn: jr.rvga(LOGISTIC, process_noise=pn), lambda pn: jr.ekf(LOGISTIC, process_noise=pn),
                 lambda pn: jr.qkf(process_noise=pn), lambda pn: jr.kalman(1.0, process_noise=pn),
                 lambda pn: jr.mirror_prox(LOGISTIC, process_noise=pn),
                 lambda pn: lrvga(LOGISTIC, rank=P, process_noise=pn)]
    for make in factories:
        for bad in (-0.1, np.nan):
            with pytest.raises(ValueError, match=r"^process_noise must be >= 0"):
                make(bad)


def test_monte_carlo_rvga_needs_a_key():
    flt = jr.rvga(jr.models.nonlinear(lambda th, x: jnp.tanh(x @ th)), "sampled")
    with pytest.raises(ValueError, match=r"^key"):
        flt.update(full_state(flt), jnp.ones(D), 0.0)


def test_laplace_validates_its_data():
    with pytest.raises(ValueError, match=r"^(X|prior_mean) must have"):
        jr.baselines.laplace.laplace(LOGISTIC, np.ones((4, D + 1)), np.zeros(4), np.zeros(D), np.eye(D))
    with pytest.raises(ValueError, match=r"^y must contain labels"):
        jr.baselines.laplace.laplace(LOGISTIC, np.ones((4, D)), np.array([0, 1, 2, 0.0]), np.zeros(D), np.eye(D))
    with pytest.raises(ValueError, match=r"^y must have length 4"):
        jr.baselines.laplace.laplace(LOGISTIC, np.ones((4, D)), np.zeros(5), np.zeros(D), np.eye(D))
    with pytest.raises(ValueError, match=r"^prior_cov must be symmetric"):
        jr.baselines.laplace.laplace(LOGISTIC, np.ones((4, D)), np.zeros(4), np.zeros(D), np.triu(np.ones((D, D))))


# ============================================================================ L-RVGA


def test_lrvga_constructor_rejects_bad_options():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match=r"^rank must be a positive integer"):
            lrvga(LOGISTIC, rank=bad)
    with pytest.raises(ValueError, match=r"unknown scheme 'newton'"):
        lrvga(LOGISTIC, rank=P, scheme="newton")
    with pytest.raises(ValueError, match=r"scheme 'qkf' does not apply"):
        lrvga(jr.models.poisson(), rank=P, scheme="qkf")  # the Jaakkola-Jordan bound is logistic only
    with pytest.raises(ValueError, match=r"^inner_loops must be a positive integer"):
        lrvga(LOGISTIC, rank=P, inner_loops=0, published=True)
    with pytest.raises(ValueError, match=r"^inner_loops must be an integer >= 0"):
        lrvga(LOGISTIC, rank=P, inner_loops=-1)
    with pytest.raises(ValueError, match=r"^num_samples must be a positive integer"):
        lrvga(LOGISTIC, rank=P, scheme="sampled", num_samples=0)
    with pytest.raises(ValueError, match=r"^num_samples is not used by scheme 'explicit'"):
        lrvga(LOGISTIC, rank=P, scheme="explicit", num_samples=3)
    with pytest.raises(ValueError, match=r"^frozen_draws must be a pair"):
        lrvga(LOGISTIC, rank=P, scheme="sampled", frozen_draws=(np.ones((4, D)), np.ones((4, P + 1))),
              published=True)
    with pytest.raises(ValueError, match=r"^noise_var must be positive"):
        lrvga(jr.models.linear_gaussian(0.0), rank=P)


def test_lrvga_model_must_be_a_model():
    with pytest.raises(ValueError, match=r"^model must be"):
        lrvga("logistic", rank=P)


def test_lrvga_rank_accepts_integer_like_values():
    """A rank computed with NumPy (``np.int64``) is an integer: accept it, as ``range`` would."""
    flt = lrvga(LOGISTIC, rank=np.int64(P))
    assert lr_state(flt).W.shape == (D, P)


@pytest.mark.parametrize("scheme", LR_SCHEMES)
def test_lrvga_init_rejects_bad_factors(scheme):
    flt = lr_filter(scheme)
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), D, P, 1.0)
    key = jax.random.PRNGKey(1)
    with pytest.raises(ValueError, match=r"^mean must be a vector"):
        flt.init(np.zeros((D, 1)), W0, psi0, key)
    with pytest.raises(ValueError, match=r"^W must have shape \(d, rank\) = \(3, 2\)"):
        flt.init(np.zeros(D), W0[:, :1], psi0, key)
    with pytest.raises(ValueError, match=r"^W must have shape"):
        flt.init(np.zeros(D), jnp.ones((D + 1, P)), psi0, key)
    with pytest.raises(ValueError, match=r"^psi must have shape \(d,\) = \(3,\)"):
        flt.init(np.zeros(D), W0, psi0[:-1], key)
    for bad in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match=r"^psi must be positive and finite"):
            flt.init(np.zeros(D), W0, psi0.at[1].set(bad), key)
    with pytest.raises(ValueError, match=r"^rank must satisfy rank <= d"):
        lrvga(LOGISTIC, rank=D + 1).init(np.zeros(D), jnp.ones((D, D + 1)), jnp.ones(D))


@pytest.mark.parametrize("scheme", LR_SCHEMES)
def test_lrvga_init_rejects_non_finite_W(scheme):
    """``check_cov`` rejects a non-finite covariance; the factor ``W`` deserves the same."""
    flt = lr_filter(scheme)
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), D, P, 1.0)
    with pytest.raises(ValueError, match=r"^W must be finite"):
        flt.init(np.zeros(D), W0.at[0, 0].set(np.nan), psi0, jax.random.PRNGKey(1))


def test_lrvga_sampled_needs_a_key():
    flt = lr_filter("sampled")
    W0, psi0 = lowrank.init_factors(jax.random.PRNGKey(0), D, P, 1.0)
    with pytest.raises(ValueError, match=r"^key is required"):
        flt.init(np.zeros(D), W0, psi0)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("scheme", LR_SCHEMES)
def test_lrvga_update_rejects_x_of_wrong_length(scheme, jit):
    flt = lr_filter(scheme)
    update = jax.jit(flt.update) if jit else flt.update
    with pytest.raises(ValueError, match=r"^x must have shape \(3,\) or \(m, 3\)"):
        update(lr_state(flt), jnp.ones(D + 1), 1.0)


@pytest.mark.parametrize("scheme", LR_SCHEMES)
def test_lrvga_glm_update_rejects_x_matrix_and_y_vector(scheme):
    """GLMs take ``x`` (d,) with a scalar ``y``, or a minibatch (m, d) with ``y`` (m,) (filters docstring)."""
    flt = lr_filter(scheme)
    st = lr_state(flt)
    with pytest.raises(ValueError, match=r"^y must have shape \(2,\) to match x"):
        flt.update(st, jnp.ones((2, D)), 1.0)
    with pytest.raises(ValueError, match=r"^y must have shape \(\)"):
        flt.update(st, jnp.ones(D), jnp.ones(2))
    with pytest.raises(ValueError, match=r"^x must have shape"):
        flt.update(st, jnp.ones((2, 2, D)), jnp.ones((2, 2)))


@pytest.mark.parametrize("scheme", LR_SCHEMES)
def test_lrvga_labels_and_data_set_checks(scheme):
    flt = lr_filter(scheme)
    st = lr_state(flt)
    with pytest.raises(ValueError, match=r"^y must contain labels in \{0, 1\}"):
        flt.update(st, jnp.ones(D), 2.0)
    with pytest.raises(ValueError, match=r"^ys must contain labels in \{0, 1\}"):
        jr.run(flt, st, np.ones((4, D)), np.array([0.0, 1.0, 0.5, 0.0]))
    with pytest.raises(ValueError, match=r"^xs must have shape \(T, 3\)"):
        jr.run(flt, st, np.ones((4, D + 1)), np.zeros(4))


# ============================================================================ dtypes


def _float32_filters():
    out = {name: (FULL[name][0], full_state) for name in sorted(FULL) if name != "rvga_poisson"}
    for scheme in LR_SCHEMES:
        out[f"lrvga_{scheme}"] = (lambda s=scheme: lr_filter(s), lr_state)
    return out


FLOAT32 = _float32_filters()


@pytest.mark.parametrize("name", sorted(FLOAT32))
def test_state_dtype_is_kept_whatever_the_data_dtype(name):
    """A float32 state driven by float64 NumPy data (the default under x64) stays float32.

    The state's dtype is the user's choice of precision; the data must be cast to it, not
    promote the state (under ``lax.scan`` a promotion is an obscure carry-type error).
    """
    make, make_state = FLOAT32[name]
    flt = make()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, D))
    y = (rng.random(6) < 0.5).astype(np.float64)
    st = make_state(flt, jnp.float32)
    out, _ = jr.run(flt, st, X, y)
    ref, _ = jr.run(flt, st, X.astype(np.float32), y.astype(np.float32))
    for a, b in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(ref)):
        if hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating):
            assert a.dtype == jnp.float32 and b.dtype == jnp.float32
            # float64 data cast inside vs outside the compiled scan: two programs, same rounding
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * float(np.max(np.abs(b))))


# ============================================================================ factor analysis, lowrank


def _factors(d=5, p=2, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(size=(d, p))), jnp.asarray(rng.uniform(0.5, 2.0, d))


def test_recursive_em_step_shapes():
    W, psi = _factors()
    with pytest.raises(ValueError, match=r"must agree"):
        fa.recursive_em_step(W, psi, jnp.ones(4), 1.0, 1.0)
    with pytest.raises(ValueError, match=r"must agree"):
        fa.recursive_em_step(W, psi[:4], jnp.ones(5), 1.0, 1.0)
    with pytest.raises(ValueError, match=r"^inner_loops must be a positive integer"):
        fa.recursive_em_step(W, psi, jnp.ones(5), 1.0, 1.0, 0)


def test_recursive_em_step_rank_must_lie_in_1_to_d():
    with pytest.raises(ValueError, match=r"rank"):
        fa.recursive_em_step(jnp.ones((2, 3)), jnp.ones(2), jnp.ones(2), 1.0, 1.0)
    with pytest.raises(ValueError, match=r"rank"):
        fa.recursive_em_step(jnp.ones((5, 0)), jnp.ones(5), jnp.ones(5), 1.0, 1.0)


def test_recursive_em_step_values_where_concrete():
    W, psi = _factors()
    for bad in (0.0, -1.0, np.nan):
        with pytest.raises(ValueError, match=r"^psi_prev must be positive"):
            fa.recursive_em_step(W, psi.at[2].set(bad), jnp.ones(5), 1.0, 1.0)
    with pytest.raises(ValueError, match=r"^alpha must be"):
        fa.recursive_em_step(W, psi, jnp.ones(5), -0.5, 1.0)
    with pytest.raises(ValueError, match=r"^beta must be"):
        fa.recursive_em_step(W, psi, jnp.ones(5), 1.0, -0.5)
    # Traced values are not inspected (they may legitimately be anything at trace time): traced
    # as jit traces it, by eval_shape (no program compiled).
    jax.eval_shape(lambda a: fa.recursive_em_step(W, psi, jnp.ones(5), a, 1.0), 0.5)


def test_fa_filters_validate_at_construction_and_init():
    W, psi = _factors()
    with pytest.raises(ValueError, match=r"^inner_loops must be a positive integer"):
        fa_filters.recursive_em(inner_loops=0)
    with pytest.raises(ValueError, match=r"^process_noise must be >= 0"):
        fa_filters.recursive_em(mode="precision", process_noise=-0.1)
    with pytest.raises(ValueError, match=r"unknown mode"):
        fa_filters.recursive_em(mode="variance")
    for flt in (fa_filters.recursive_em(), fa_filters.online_fa_em(averaging=None)):
        with pytest.raises(ValueError, match=r"rank p = W.shape\[1\] must satisfy 1 <= p <= d"):
            flt.init(jnp.ones((2, 3)), jnp.ones(2))
        with pytest.raises(ValueError, match=r"^W must be \(d, p\) and psi \(d,\)"):
            flt.init(W, psi[:4])
        with pytest.raises(ValueError, match=r"^psi must be positive"):
            flt.init(W, psi.at[0].set(0.0))
    with pytest.raises(ValueError, match=r"^online_fa_em: x must have shape \(5,\)"):
        flt = fa_filters.online_fa_em(averaging=None)
        flt.update(flt.init(W, psi), jnp.ones(4))
    with pytest.raises(ValueError, match=r"unknown averaging"):
        fa_filters.online_fa_em(averaging="sometimes")


def test_online_fa_em_step_exponent_is_a_robbins_monro_exponent():
    """Cappe & Moulines need gamma_t = t^-kappa with kappa in (1/2, 1] (as online_em.cappe_moulines checks)."""
    for bad in (0.5, 1.5, 0.0):
        with pytest.raises(ValueError, match=r"^step_exponent must lie in \(0.5, 1\]"):
            fa_filters.online_fa_em(averaging=None, step_exponent=bad)


def test_batch_em_step_target_must_be_a_matching_symmetric_matrix():
    W, psi = _factors()
    with pytest.raises(ValueError, match=r"^S must have shape \(5, 5\)"):
        batch_fa.batch_em_step(jnp.eye(4), W, psi)
    with pytest.raises(ValueError, match=r"^S must be symmetric"):
        batch_fa.batch_em_step(jnp.eye(5).at[0, 1].set(1.0), W, psi)


def test_init_factors_validation():
    key = jax.random.PRNGKey(0)
    for rank in (0, 6):
        with pytest.raises(ValueError, match=r"^rank must satisfy 1 <= rank <= dim=5"):
            lowrank.init_factors(key, 5, rank, 1.0)
    with pytest.raises(ValueError, match=r"^eps must lie in \(0, 1\)"):
        lowrank.init_factors(key, 5, 2, 1.0, eps=0.0)
    for init in (lowrank.init_factors, lowrank.init_factors_plain):
        for bad in (0.0, -1.0, np.nan):
            with pytest.raises(ValueError, match=r"^prior_var must be positive"):
                init(key, 5, 2, bad)


def test_lowrank_factors_of_mismatched_shapes():
    W, psi = _factors()
    with pytest.raises(ValueError, match=r"psi"):
        lowrank.solve(W, psi[:4], jnp.ones(5))
    with pytest.raises(ValueError, match=r"psi"):
        lowrank.sample(jax.random.PRNGKey(0), jnp.zeros(5), W, psi[:4], 3)


# ============================================================================ online EM (mixtures)


def test_online_em_mixture_validation():
    GP = oem.GMMParams
    with pytest.raises(ValueError, match=r"^weights must be positive and sum to one"):
        oem.cappe_moulines().init(GP(jnp.array([0.5, 0.6]), jnp.zeros(2), jnp.ones(2)))
    with pytest.raises(ValueError, match=r"^variances must be positive"):
        oem.sato().init(GP(jnp.array([0.5, 0.5]), jnp.zeros(2), jnp.array([1.0, 0.0])))
    with pytest.raises(ValueError, match=r"^weights, means and variances must be vectors of one length"):
        oem.titterington().init(GP(jnp.array([0.5, 0.5]), jnp.zeros(3), jnp.ones(2)))
    with pytest.raises(ValueError, match=r"^kappa must lie in \(0.5, 1\]"):
        oem.cappe_moulines(kappa=0.4)
    with pytest.raises(ValueError, match=r"^discount must lie in \(0, 1\]"):
        oem.sato(0.0)
    with pytest.raises(ValueError, match=r"^decay must lie in \(0, 1\)"):
        oem.incremental_em_decay(1.0)


def test_titterington_n0_at_least_one():
    """``n0 >= 1`` (titterington docstring): n0 = 0 divides by zero at the first step."""
    with pytest.raises(ValueError, match=r"^n0 must be >= 1"):
        oem.titterington(0.0)


# ============================================================================ checked mode


@pytest.mark.parametrize("name", ["rvga_implicit", "ekf", "kalman"])
def test_checked_mode_names_the_step_with_bad_data(name):
    flt = FULL[name][0]()
    st = full_state(flt)
    X, y = np.ones((8, D)), np.zeros(8)
    Xb = X.copy()
    Xb[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"NaN or inf in the data at step 3\b"):
        jr.run(flt, st, Xb, y, validate=True)
    yb = y.copy()
    yb[5] = np.inf
    if FULL[name][1]:  # inf is not a label: the concrete data-set check fires first
        with pytest.raises(ValueError, match=r"^ys must contain labels"):
            jr.run(flt, st, X, yb, validate=True)
    else:
        with pytest.raises(ValueError, match=r"NaN or inf in the data at step 5\b"):
            jr.run(flt, st, X, yb, validate=True)


def test_checked_mode_names_the_step_where_the_state_breaks():
    """Finite data, a state that overflows: step 1 (0-based) of a filter that multiplies its state
    by 1e300 per step. The library's filters skip and flag such a step instead (the prediction step
    is guarded, issue 26.5): a Kalman filter whose fading memory multiplies the covariance by
    1 + 1e300 per step stays finite, every step flagged, and the checked mode finds nothing."""
    grow = jr.Filter(lambda: None, lambda s, x, y: s * 1e300)
    with pytest.raises(ValueError, match=r"state became NaN or inf at step 1\b"):
        jr.run(grow, jnp.ones(D), np.ones((5, D)), np.zeros(5), validate=True)
    flt = jr.kalman(1.0, process_noise=1e300)
    out, info = jr.run(flt, full_state(flt), np.ones((5, D)), np.zeros(5), jr.trace_info, validate=True)
    assert np.all(np.isfinite(out.cov)) and not np.any(info.converged)


@pytest.mark.parametrize("name", ["rvga_implicit", "lrvga_sampled"])
def test_checked_mode_returns_the_unchecked_result(name):
    if name.startswith("lrvga"):
        flt = lr_filter(name.split("_")[1])
        st = lr_state(flt)
    else:
        flt = FULL[name][0]()
        st = full_state(flt)
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(20, D)), (rng.random(20) < 0.5).astype(float)
    a, ta = jr.run(flt, st, X, y, jr.trace_info)
    b, tb = jr.run(flt, st, X, y, jr.trace_info, validate=True)
    for u, v in zip(jax.tree_util.tree_leaves((a, ta)), jax.tree_util.tree_leaves((b, tb))):
        if jnp.issubdtype(u.dtype, jax.dtypes.prng_key):
            u, v = jax.random.key_data(u), jax.random.key_data(v)
        if jnp.issubdtype(u.dtype, jnp.floating):  # checkify compiles another program: rounding may differ
            np.testing.assert_allclose(v, u, rtol=1e-12, atol=1e-14)
        else:
            np.testing.assert_array_equal(u, v)


def test_all_finite_is_true_exactly_when_every_floating_entry_is_finite():
    """``validation.all_finite``: NaN and both infinities anywhere make it False, integer arrays are
    not inspected, no arrays give True; the same traced."""
    from jaxrvga.validation import all_finite
    a, b, n = jnp.ones(5), jnp.zeros((2, 3), jnp.float32), jnp.arange(3)
    for f in (all_finite, jax.jit(all_finite)):
        assert bool(f(a, b, n)) and bool(f()) and bool(f(jnp.full(4, 3e38, jnp.float32)))
        for bad in (np.nan, np.inf, -np.inf):
            assert not bool(f(a, b.at[1, 2].set(bad), n))
            assert not bool(f(a.at[0].set(bad)))


def _log_predictive_cases():
    """``(name, call, argument)``: a bad input of ``jr.log_predictive`` or ``jr.predictive`` and the argument
    its ``ValueError`` names."""
    X = np.ones((4, D))
    softmax = jr.models.softmax_regression(2, 3)
    batch = jr.models.minibatch(softmax)
    return [
        ("scalar_y_over_minibatch", lambda s, c: jr.log_predictive(s, X, 1.0), "y"),
        ("label_2", lambda s, c: jr.log_predictive(s, X[0], 2.0), "y"),
        ("label_half", lambda s, c: jr.log_predictive(s, X, np.array([0.0, 1.0, 0.5, 1.0])), "y"),
        ("class_3", lambda s, c: jr.log_predictive(c, np.ones(2), 3, softmax), "y"),
        ("class_minus_1", lambda s, c: jr.log_predictive(c, np.ones(2), -1, softmax), "y"),
        ("class_3_minibatch", lambda s, c: jr.log_predictive(c, np.ones((2, 2)), np.array([0, 3]), batch), "y"),
        ("complex_x", lambda s, c: jr.log_predictive(s, X[0] * (1 + 1j), 1.0), "x"),
        ("num_points_400", lambda s, c: jr.log_predictive(s, X[0], 1.0, num_points=400), "num_points"),
        ("integer_key", lambda s, c: jr.log_predictive(s, X[0], 1.0, key=0), "key"),
        ("short_y", lambda s, c: jr.log_predictive(s, X, np.ones(3)), "y"),
        ("long_x", lambda s, c: jr.log_predictive(s, np.ones(D + 1), 1.0), "x"),
        ("predictive_integer_key", lambda s, c: jr.predictive(s, X, key=0), "key"),
        ("predictive_complex_x", lambda s, c: jr.predictive(s, X * (1 + 1j)), "X"),
    ]


LOG_PREDICTIVE_CASES = _log_predictive_cases()


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("name, call, argument", LOG_PREDICTIVE_CASES, ids=[c[0] for c in LOG_PREDICTIVE_CASES])
def test_log_predictive_refuses_what_the_filters_refuse(name, call, argument, dtype):
    """The predictive densities check an observation as the filters' update does: each bad input is a
    ``ValueError`` naming the argument, not a silent answer or a TypeError."""
    state = jr.rvga(LOGISTIC).init(jnp.zeros(D, dtype), jnp.eye(D, dtype=dtype))
    cat = jr.rvga(jr.models.softmax_regression(2, 3)).init(jnp.zeros(6, dtype), jnp.eye(6, dtype=dtype))
    with pytest.raises(ValueError, match=f"^{argument}\\b"):
        call(state, cat)


def test_log_predictive_takes_every_rule_up_to_its_maximum():
    """``num_points`` up to :data:`jaxrvga.kernels.special.MAX_GAUSS_HERMITE` gives a finite value that agrees with 32 nodes."""
    state = jr.rvga(LOGISTIC).init(jnp.zeros(D), 2.0 * jnp.eye(D))
    x = jnp.array([1.0, -0.5, 0.3])
    ref = jr.log_predictive(state, x, 1.0, num_points=32)
    top = jr.log_predictive(state, x, 1.0, num_points=jr.kernels.special.MAX_GAUSS_HERMITE)
    assert np.isfinite(top) and abs(top - ref) < 1e-12
    with pytest.raises(ValueError, match="^num_points must be at most"):
        jr.kernels.special.gauss_hermite(jr.kernels.special.MAX_GAUSS_HERMITE + 1)


def test_check_tolerance_refuses_what_is_not_a_finite_real_scalar_by_name():
    """NaN, inf, negative values, complex numbers, strings, bools, arrays and None raise a ``ValueError``
    naming the argument; a finite value >= 0 comes back unchanged."""
    from jaxrvga.validation import check_tolerance

    for bad in (None, -0.1, float("nan"), float("inf"), 1j, "a", True, np.ones(2)):
        with pytest.raises(ValueError, match="tol"):
            check_tolerance("tol", bad)
    assert check_tolerance("tol", 0.0) == 0.0 and check_tolerance("tol", 1e-6) == 1e-6
