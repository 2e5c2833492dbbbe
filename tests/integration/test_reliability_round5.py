"""Reliability, round 5: the learned noise variance, the model average, scheme values with options,
the smoother, the files of the new states and the low-rank mean step under bad or extreme input.

Each test is one finding of the adversarial round (issue "Reliability 5"): a clear ``ValueError``
naming the argument, or a finite, flagged step that keeps the prior, never a silently wrong result.
"""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga.baselines import online_em as oe

X3 = jnp.array([1.0, 0.5, -0.2])
LEARNED = jr.models.linear_gaussian(None)


def _learned_filters(dtype):
    """One filter per belief of the learned-noise linear model, with its initial state."""
    kf, lf, df = jr.kalman(None), jr.lrvga(LEARNED, rank=1), jr.diag_rvga(LEARNED)
    z = jnp.zeros(3, dtype)
    W = jnp.array([[0.3], [0.1], [-0.2]], dtype)
    return {"dense": (kf, kf.init(z, jnp.eye(3, dtype=dtype))), "lowrank": (lf, lf.init(z, W, jnp.ones(3, dtype))),
            "diagonal": (df, df.init(z, jnp.ones(3, dtype)))}


def _assert_kept(prior, out):
    """A flagged step: converged False, the prior's mean and noise statistics kept bit for bit."""
    assert not bool(out.info.converged)
    np.testing.assert_array_equal(out.mean, prior.mean)
    np.testing.assert_array_equal(out.noise.shape, prior.noise.shape)
    np.testing.assert_array_equal(out.noise.rate, prior.noise.rate)
    assert int(out.step) == int(prior.step) + 1


@pytest.mark.parametrize("belief", ["dense", "lowrank", "diagonal"])
@pytest.mark.parametrize("dtype, y", [(jnp.float64, 1e200), (jnp.float32, 3e19)])
def test_a_step_whose_noise_statistics_overflow_keeps_the_prior(belief, dtype, y):
    """Item 1: the residual's square overflows the rate; the step is flagged and keeps the whole prior,
    mean included (it moved the mean to 4e199 before), so a later step is unaffected by the outlier."""
    flt, state = _learned_filters(dtype)[belief]
    update = jax.jit(flt.update)  # one program for the three steps (eager: one per operation and shape)
    out = update(state, X3.astype(dtype), jnp.asarray(y, dtype))
    _assert_kept(state, out)
    after = update(out, X3.astype(dtype), jnp.asarray(1.0, dtype))
    clean = update(state, X3.astype(dtype), jnp.asarray(1.0, dtype))
    np.testing.assert_allclose(after.mean, clean.mean, rtol=1e-5)


@pytest.mark.parametrize("shape, rate", [(1.0, -1.0), (-1.0, 1.0), (0.0, 1.0), (jnp.nan, 1.0), (1.0, jnp.inf)])
def test_traced_invalid_noise_statistics_are_a_flagged_step(shape, rate):
    """Items 1-2: a traced (here jitted) shape or rate that is not finite and > 0 flags the step and keeps
    the prior (a shape of -1 or 0 gave converged steps and a NaN evidence)."""
    kf, state = _learned_filters(jnp.float64)["dense"]

    @jax.jit
    def step(a, b):
        prior = state._replace(noise=jr.core.NoiseStats(a, b))
        return prior, kf.update(prior, X3, 1.0)

    prior, out = step(jnp.float64(shape), jnp.float64(rate))
    assert not bool(out.info.converged)
    np.testing.assert_array_equal(out.mean, prior.mean)


@pytest.mark.parametrize("noise", [(1e39, 1.0), (1.0, 1e39), (1e-50, 1.0), (1.0, 1e-50)])
def test_noise_prior_checked_in_the_state_dtype(noise):
    """Item 3: values that float32 stores as inf or 0 are refused by init, naming ``noise``; the error is
    the only report (no NumPy overflow warning from the cast beside it)."""
    kf = jr.kalman(None)
    with warnings.catch_warnings(), pytest.raises(ValueError, match="^noise: .* in the state's dtype float32"):
        warnings.simplefilter("error")
        kf.init(jnp.zeros(3, jnp.float32), jnp.eye(3, dtype=jnp.float32), noise=noise)
    kf.init(jnp.zeros(3), jnp.eye(3), noise=noise)  # float64 holds them


def test_a_subnormal_noise_discount_is_refused_and_a_known_variance_takes_none():
    """Items 3 and 9: ``noise_discount=1e-320`` (subnormal: the statistics flushed to 0) is refused; on a
    filter whose noise variance is known the discount would be ignored, so it is refused too."""
    with pytest.raises(ValueError, match="^noise_discount must be in"):
        jr.kalman(None, noise_discount=1e-320)
    with pytest.raises(ValueError, match="^noise_discount discounts the statistics of a learned"):
        jr.kalman(1.0, noise_discount=0.9)
    with pytest.raises(ValueError, match="^noise_discount discounts"):
        jr.lrvga(jr.models.logistic(), rank=1, noise_discount=0.9)


def test_a_traced_discount_that_underflows_the_statistics_is_flagged():
    """Item 3: a traced discount whose product with the statistics flushes to 0 flags the step and keeps
    the statistics it had."""
    state = jr.kalman(None).init(jnp.zeros(3, jnp.float32), jnp.eye(3, dtype=jnp.float32), noise=(1e-20, 1e-20))

    @jax.jit
    def step(delta):
        return jr.kalman(None, noise_discount=delta).update(state, X3.astype(jnp.float32), jnp.float32(1.0))

    out = step(jnp.float32(1e-30))
    assert not bool(out.info.converged)
    np.testing.assert_array_equal(out.mean, state.mean)
    assert float(out.noise.shape) > 0 and float(out.noise.rate) > 0


def test_the_plug_in_of_a_learned_noise_has_zero_epistemic_variance():
    """Item 4: ``scale=0`` is ``p(y | theta = mean)``: its epistemic variance is 0 whatever ``E[s2]``
    (infinite for the default prior (1, 1)); it was 0 x inf = NaN. With the noise it is infinite."""
    kf, state = _learned_filters(jnp.float64)["dense"]
    X = jnp.ones((2, 3))
    np.testing.assert_array_equal(jr.predictive(state, X, LEARNED, scale=0.0).var, 0.0)
    assert np.all(np.isinf(jr.predictive(state, X, LEARNED, scale=0.0, observation_noise=True).var))
    avg = jr.model_average(kf)
    members = jax.vmap(lambda v: kf.init(jnp.zeros(3), v * jnp.eye(3)))(jnp.array([0.1, 1.0]))
    var = jr.predictive(avg.init(members), X, LEARNED).var
    assert not np.any(np.isnan(var))


def _average(K=2):
    kf = jr.kalman(1.0)
    members = jax.vmap(lambda v: kf.init(jnp.zeros(3), v * jnp.eye(3)))(jnp.linspace(0.1, 1.0, K))
    return kf, jr.model_average(kf, scales=(0.0, 1.0)), members


@pytest.mark.parametrize("log_prior", [[np.nan, 0.0], [np.inf, 0.0], [-np.inf, -np.inf]])
def test_model_average_refuses_log_prior_values_that_weigh_nothing(log_prior):
    """Item 5: NaN, +inf or no finite entry in ``log_prior`` is refused, naming it."""
    _, avg, members = _average()
    with pytest.raises(ValueError, match="^log_prior must hold log weights"):
        avg.init(members, log_prior=jnp.array(log_prior))
    avg.init(members, log_prior=jnp.array([-np.inf, 0.0]))  # a member of prior weight 0 is fine


def test_a_traced_nan_log_weight_flags_the_step_and_keeps_the_weights():
    """Item 5: under jit, a NaN log weight cannot be refused; the step is flagged and the weights kept."""
    kf, avg, members = _average()
    state = avg.init(members)

    @jax.jit
    def step(lw):
        return avg.update(state._replace(log_weight=lw), X3, 1.0)

    lw = state.log_weight.at[0, 0].set(jnp.nan)
    out = step(lw)
    assert not bool(out.info.converged)
    np.testing.assert_array_equal(out.log_weight, lw)


def test_the_predictive_of_an_average_checks_its_members():
    """Item 6: a member with a NaN covariance is refused as a plain state is, naming the member; traced,
    a component of weight 0 adds nothing to the mixture (no 0 x NaN)."""
    kf, avg, members = _average()
    state = avg.init(members, log_prior=jnp.array([0.0, -jnp.inf]))
    bad = state._replace(members=state.members._replace(cov=state.members.cov.at[1].set(jnp.nan)))
    for fn in (lambda s: jr.predictive(s, X3, kf.model), lambda s: jr.log_predictive(s, X3, 1.0, kf.model)):
        with pytest.raises(ValueError, match=r"^state.members\[1\]: state.cov must be finite"):
            fn(bad)
        fn(state)
    mean, var = jax.jit(lambda s: jr.predictive(s, X3, kf.model))(bad)
    np.testing.assert_allclose(mean, jr.predictive(jax.tree_util.tree_map(lambda a: a[0], members), X3, kf.model).mean)
    assert np.isfinite(var)
    lp = jax.jit(lambda s: jr.log_predictive(s, X3, 1.0, kf.model))(bad)
    assert np.isfinite(lp)


def test_average_state_files_are_checked(tmp_path):
    """Item 7: an AverageState whose info fields are not scalars, or whose log weights are all -inf, and
    a bare NoiseStats with a negative rate are refused at load, naming the field."""
    _, avg, members = _average()
    state = avg.init(members)
    cases = {"info": state._replace(info=jax.tree_util.tree_map(lambda a: jnp.stack([a] * 3), state.info)),
             "log_weight": state._replace(log_weight=jnp.full_like(state.log_weight, -jnp.inf)),
             "noise.rate": jr.core.NoiseStats(jnp.array(1.0), jnp.array(-1.0))}
    for name, bad in cases.items():
        path = tmp_path / f"{name}.npz"
        jr.io.save(path, bad)
        with pytest.raises(ValueError, match=name):
            jr.io.load(path)
    jr.io.save(tmp_path / "good.npz", state)
    jr.io.load(tmp_path / "good.npz")


def test_online_em_files_of_mixed_dtypes_are_refused(tmp_path):
    """Item 11 (round 3): a MixtureStatsState with float32 means in a float64 state loaded, then failed
    in jr.run's scan; it is refused at load."""
    init = oe.GMMParams(jnp.ones(2) / 2, jnp.array([-1.0, 1.0]), jnp.ones(2))
    state = oe.cappe_moulines(0.6, burn_in=1).init(init)
    bad = state._replace(params=state.params._replace(means=state.params.means.astype(jnp.float32)))
    jr.io.save(tmp_path / "bad.npz", bad)
    with pytest.raises(ValueError, match="share one dtype"):
        jr.io.load(tmp_path / "bad.npz")
    jr.io.save(tmp_path / "good.npz", state)
    jr.io.load(tmp_path / "good.npz")


@pytest.mark.parametrize("option", [{"correction": False}, {"update_cov_twice": False}, {"correction": True}])
def test_an_option_beside_a_scheme_value_is_given_twice_whatever_its_value(option):
    """Item 8: ``correction=False`` beside ``scheme=jr.schemes.extragrad()`` was dropped silently."""
    with pytest.raises(ValueError, match=f"^{next(iter(option))}: a scheme value carries its own options"):
        jr.rvga(jr.models.logistic(), scheme=jr.schemes.extragrad(), **option)


def test_the_smoother_checks_its_covariances_and_flags_a_step_it_cannot_smooth():
    """Item 9: NaN or negative definite filtered covariances are refused; a run whose predicted
    covariance is 0 (``decay=0`` without noise: every step flagged) smooths to finite beliefs, the
    steps it could not smooth flagged (``converged`` False) and kept as filtered."""
    flt = jr.kalman(1.0, decay=0.9, additive_noise=0.1)
    means = jnp.zeros((3, 2))
    for covs in (jnp.full((3, 2, 2), jnp.nan), jnp.stack([-jnp.eye(2)] * 3)):
        with pytest.raises(ValueError, match="^filtered_"):
            jr.rts_smoother(flt, means, covs)
    frozen = jr.kalman(1.0, decay=0.0)
    state = frozen.init(jnp.zeros(2), jnp.eye(2))
    xs, ys = jnp.ones((4, 2)), jnp.arange(4.0)
    _, (m, c, ok) = jr.run(frozen, state, xs, ys, lambda s, x, y: (s.mean, s.cov, s.info.converged))
    assert not np.any(ok)
    out = jr.rts_smoother(frozen, m, c)
    assert np.all(np.isfinite(out.mean)) and np.all(np.isfinite(out.cov))
    np.testing.assert_array_equal(out.converged, [False, False, False, True])
    np.testing.assert_array_equal(out.mean, m)
    good = jr.rts_smoother(flt, means, jnp.stack([jnp.eye(2)] * 3))
    assert np.all(good.converged)


@pytest.mark.parametrize("dtype, scale", [(jnp.float64, 1e6), (jnp.float32, 1e2), (jnp.float32, 1e3)])
def test_the_diagonal_belief_at_d_1_is_the_exact_posterior_for_large_inputs(dtype, scale):
    """Item 10 (round 4): at d = 1 the diagonal belief is the dense one; its Woodbury mean step cancelled
    for inputs of 1e6 (float64) or 1e2-1e3 (float32). Every step matches the Kalman filter to the
    dtype's rounding, in posterior standard deviations: the posterior of ``N(0, 1)`` after ``t``
    observations is ``N(sum x y / (1 + sum x^2), 1 / (1 + sum x^2))``, sums of float64 terms without
    cancellation (the dense covariance form is no reference here: it cancels too, 0.25 sd at 1e6)."""
    rng = np.random.default_rng(0)
    x = scale * rng.normal(size=(20, 1)).astype(dtype).astype(np.float64)
    y = (0.7 * x[:, 0] + rng.normal(size=20)).astype(dtype).astype(np.float64)
    df = jr.diag_rvga(jr.models.linear_gaussian(1.0))
    trace = lambda s, x, y: (s.mean[0], s.info.converged)  # noqa: E731
    _, (m, ok) = jr.run(df, df.init(jnp.zeros(1, dtype), jnp.ones(1, dtype)), x.astype(dtype), y.astype(dtype),
                        trace)
    precision = 1.0 + np.cumsum(x[:, 0] ** 2)
    exact = np.cumsum(x[:, 0] * y) / precision
    assert np.all(ok)
    err = np.abs(np.asarray(m, np.float64) - exact) * np.sqrt(precision)
    assert np.max(err) < 0.02


def test_a_bad_member_of_a_diagonal_fleet_changes_no_other_member():
    """Item 10 (round 4): a vmapped fleet of diag_rvga where one member's data hold NaN and inf: that
    member's steps are flagged and it stays finite, the others' results are those of a clean run."""
    df = jr.diag_rvga(jr.models.logistic())
    init = jax.vmap(lambda v: df.init(jnp.zeros(3), v * jnp.ones(3)))(jnp.array([1.0, 2.0, 3.0]))
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3, 10, 3))
    Y = (rng.random((3, 10)) < 0.5).astype(float)
    Xb = X.copy()
    Xb[1, 4, 0], Xb[1, 6, 2] = np.nan, np.inf
    run = jax.jit(jax.vmap(lambda s, xs, ys: jr.scan(df, s, xs, ys, jr.trace_info)))
    good, _ = run(init, X, Y)
    bad, info = run(init, Xb, Y)
    for k in (0, 2):
        np.testing.assert_allclose(bad.mean[k], good.mean[k], rtol=1e-12)
    np.testing.assert_array_equal(~info.converged[1], np.isin(np.arange(10), [4, 6]))
    assert np.all(np.isfinite(bad.mean[1]))


def _mean_step_error(dtype, scale, belief, seed, d=20):
    """The distance of one low-rank or diagonal step's mean from the exact step of the same prior (dense,
    float64), in posterior standard deviations (Mahalanobis under the exact posterior)."""
    rng = np.random.default_rng(seed)
    W = 0.5 * rng.normal(size=(d, 2))
    x = scale * rng.normal(size=d)
    y = x @ rng.normal(size=d) + rng.normal()
    lg = jr.models.linear_gaussian(1.0)
    if belief == "lowrank":
        flt = jr.lrvga(lg, rank=2)
        state = flt.init(jnp.zeros(d, dtype), jnp.asarray(W, dtype), jnp.ones(d, dtype))
        prec = W @ W.T + np.eye(d)
    else:
        flt = jr.diag_rvga(lg)
        state = flt.init(jnp.zeros(d, dtype), jnp.ones(d, dtype))
        prec = np.eye(d)
    out = jax.jit(flt.update)(state, jnp.asarray(x, dtype), jnp.asarray(y, dtype))
    post = prec + np.outer(x, x)
    exact = np.linalg.solve(post, x * y)
    e = np.asarray(out.mean, np.float64) - exact
    return bool(out.info.converged), float(np.sqrt(e @ post @ e))


@pytest.mark.parametrize("belief", ["lowrank", "diagonal"])
@pytest.mark.parametrize("dtype, scale, tol", [(jnp.float32, 1e2, 0.05), (jnp.float64, 1e5, 1e-4),
                                               (jnp.float64, 1e7, 0.5)])
def test_the_mean_step_stays_on_the_exact_step_for_large_inputs(belief, dtype, scale, tol):
    """Item 12: with a factor narrower than d, the Woodbury mean step subtracted two terms of the prior's
    scale; inputs of 1e2 (float32) or 1e5 (float64) moved the mean by 0.1-7 and 0.2-4 posterior standard
    deviations, 1e7 (float64) by millions. The corrected step (``Woodbury.solve_corrected``) stays within
    ``tol`` of the exact step (float32 at 1e3: within 2, was 1e3-3e4; README, "Reliability")."""
    for seed in range(3):
        converged, err = _mean_step_error(dtype, scale, belief, seed)
        assert converged and err < tol, (seed, err)


def test_the_corrected_woodbury_solve_is_the_solve():
    """``Woodbury.solve_corrected`` and ``solve_accurate`` (either branch) equal the dense solve (float64
    oracle), and the correction is taken exactly where its bound exceeds the tolerance."""
    from jaxrvga.kernels import lowrank

    rng = np.random.default_rng(3)
    W, psi, v = rng.normal(size=(12, 3)), rng.uniform(0.5, 2.0, 12), rng.normal(size=12)
    fac = lowrank.factorize(jnp.asarray(W), jnp.asarray(psi))
    projection = W.T @ (v / psi)
    exact = np.linalg.solve(W @ W.T + np.diag(psi), v)
    gram = (W / np.sqrt(psi)[:, None]).T @ (W / np.sqrt(psi)[:, None])
    np.testing.assert_allclose(fac.solve_corrected(v, projection), exact, rtol=1e-12)
    for tol in (0.0, np.inf):
        np.testing.assert_allclose(fac.solve_accurate(v, projection, gram, tol=tol), exact, rtol=1e-12)


    class Marked(lowrank.Woodbury):  # its corrected branch marks its output
        def solve_corrected(self, v, projection):
            return jnp.full_like(v, 7.0)

    marked = Marked(*fac)
    big = 1e14 * v  # the bound 2 eps |Psi^{-1/2} v| sqrt(1 + trace gram): 2e-15 |v| here, 0.9 at 1e14
    assert np.all(marked.solve_accurate(big, 1e14 * projection, gram) == 7.0)
    assert not np.any(marked.solve_accurate(v, projection, gram) == 7.0)


def test_bench_corrected_step_prints_its_table(capsys):
    """The benchmark of the corrected step runs (tiny sizes) and prints one row per dtype."""
    from benchmarks import bench_corrected_step

    bench_corrected_step.main(["--d", "30", "--p", "2", "--steps", "2", "--repeat", "1"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("float")]
    assert [r[0] for r in rows] == ["float32", "float64"] and all(len(r) == 7 for r in rows)


def test_cancellation_bound():
    """``2 eps |h| sqrt(1 + trace(gram))`` in the gram's dtype (an equation, by hand)."""
    from jaxrvga.kernels import lowrank

    gram = jnp.diag(jnp.array([3.0, 5.0], jnp.float32))
    np.testing.assert_allclose(lowrank.cancellation_bound(jnp.float32(4.0), gram),
                               2 * np.finfo(np.float32).eps * 2.0 * 3.0, rtol=1e-6)


def test_the_members_check_inside_a_trace_of_a_concrete_average():
    """A concrete average read inside a trace (a scan's body, as a run's trace function does) is checked
    at trace time without converting a tracer to a bool (it raised TracerBoolConversionError)."""
    kf, avg, members = _average()
    state = avg.init(members)
    _, means = jax.lax.scan(lambda c, _: (c, jr.predictive(state, X3, kf.model).mean), 0, None, length=2)
    np.testing.assert_allclose(means, jr.predictive(state, X3, kf.model).mean)
