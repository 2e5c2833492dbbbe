"""jr.model_average: members weighted by their evidence, against the members run alone."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp

import jaxrvga as jr

D = 3
PRIORS = jnp.array([0.1, 1.0, 10.0])


def _data(n=30, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    return X, X @ np.array([1.0, -2.0, 0.5]) + 0.5 * rng.normal(size=n)


def _members(flt, priors=PRIORS):
    return jax.vmap(lambda v: flt.init(jnp.zeros(D), v * jnp.eye(D)))(priors)


def _alone(flt, priors, xs, ys):
    """Each member run alone: its final state and its log evidence."""
    ev = [jr.log_evidence(flt, flt.init(jnp.zeros(D), v * jnp.eye(D)), xs, ys) for v in priors]
    finals = [jr.run(flt, flt.init(jnp.zeros(D), v * jnp.eye(D)), xs, ys)[0] for v in priors]
    return finals, jnp.array(ev)


@pytest.mark.parametrize("flt", [jr.kalman(0.25), jr.kalman(None)], ids=["known-noise", "learned-noise"])
def test_weights_are_the_members_evidence(flt):
    """After a run, ``log_weight`` is each member's log evidence run alone; the members are the
    members run alone; the average's log predictive is ``logsumexp(ev + lp) - logsumexp(ev)``; its
    own log evidence is ``logsumexp(ev) - log K``."""
    X, y = _data()
    avg = jr.model_average(flt, scales=(1.0,))
    s0 = avg.init(_members(flt))
    out, _ = jr.run(avg, s0, X[:-1], y[:-1])
    finals, ev = _alone(flt, PRIORS, X[:-1], y[:-1])
    np.testing.assert_allclose(out.log_weight[:, 0], ev, rtol=1e-10)
    for k, final in enumerate(finals):
        np.testing.assert_allclose(out.members.mean[k], final.mean, atol=1e-10)
    lp = jnp.array([jr.log_predictive(f, X[-1], y[-1], flt.model) for f in finals])
    np.testing.assert_allclose(jr.log_predictive(out, X[-1], y[-1], flt.model), logsumexp(ev + lp) - logsumexp(ev),
                               rtol=1e-10)
    np.testing.assert_allclose(jr.log_evidence(avg, s0, X[:-1], y[:-1]), logsumexp(ev) - np.log(3), rtol=1e-10)
    assert bool(out.info.converged) and int(out.step) == len(y) - 1


def test_forecasters_of_each_scale():
    """With the default scales, the column of scale ``c`` is the prequential log score of the predictive
    ``N(y | x^T m, c x^T P x + s2)`` of each member (minus log S, the prior weight split over the scales);
    the column of scale 1 is the members' log evidence."""
    flt = jr.kalman(0.25)
    X, y = _data(n=12)
    avg = jr.model_average(flt)
    S = len(jr.average.PREDICTIVE_SCALES)
    out, _ = jr.run(avg, avg.init(_members(flt)), X, y)
    assert out.log_weight.shape == (3, S)
    _, ev = _alone(flt, PRIORS, X, y)
    np.testing.assert_allclose(out.log_weight[:, -1] + np.log(S), ev, rtol=1e-10)
    for k, v in enumerate(PRIORS):
        st = flt.init(jnp.zeros(D), v * jnp.eye(D))
        score = 0.0
        for x, t in zip(X, y):
            m, P = np.asarray(st.mean), np.asarray(st.cov)
            var = 0.25 + 0.25 * (x @ P @ x)  # the forecaster of scale 1/4
            score += -0.5 * ((t - x @ m) ** 2 / var + np.log(2 * np.pi * var))
            st = flt.update(st, x, t)
        np.testing.assert_allclose(out.log_weight[k, S - 2] + np.log(S), score, rtol=1e-10)


def test_each_forecaster_learns_its_own_noise_rate(tmp_path):
    """With a learned noise variance (normal-inverse-gamma members), forecaster ``(k, s)`` absorbs each
    residual in its own width: its rate is ``b0 + sum_t r_t^2 / (2 (1 + c_s x_t^T P_t x_t))`` (at ``c = 1``
    the member's own) and its prequential score the Student-t ``t_{2a}(r | 0, (b / a) (1 + c_s x^T P x))`` of
    that rate; the state keeps each rate over its member's. A flagged step leaves the ratios; jr.io keeps them."""
    from scipy import stats

    flt = jr.kalman(None)
    X, y = _data(n=12)
    avg = jr.model_average(flt)
    scales = np.asarray(jr.average.PREDICTIVE_SCALES)
    out, _ = jr.run(avg, avg.init(_members(flt)), X, y)
    for k, v in enumerate(PRIORS):
        st = flt.init(jnp.zeros(D), v * jnp.eye(D))
        a, b, score = float(st.noise.shape), np.full(len(scales), float(st.noise.rate)), 0.0
        for x, t in zip(X, y):
            r, width = t - x @ np.asarray(st.mean), 1.0 + scales * (x @ np.asarray(st.cov) @ x)
            score = score + stats.t.logpdf(r, df=2 * a, scale=np.sqrt(b / a * width))
            a, b = a + 0.5, b + 0.5 * r ** 2 / width
            st = flt.update(st, x, t)
        np.testing.assert_allclose(out.rate_ratio[k] * out.members.noise.rate[k], b, rtol=1e-10)
        np.testing.assert_allclose(out.log_weight[k] + np.log(len(scales)), score, rtol=1e-10)
    np.testing.assert_allclose(out.rate_ratio[:, -1], 1.0, rtol=1e-14)
    assert bool(jnp.all(out.rate_ratio[:, 0] > 1.0))  # the plug-in's residuals are the widest in its units
    flagged = avg.update(out, jnp.ones(D), jnp.nan)
    np.testing.assert_array_equal(flagged.rate_ratio, out.rate_ratio)
    jr.io.save(tmp_path / "avg.npz", out)
    np.testing.assert_array_equal(jr.io.load(tmp_path / "avg.npz").rate_ratio, out.rate_ratio)
    known = jr.kalman(0.25)
    assert jr.model_average(known).init(_members(known)).rate_ratio is None  # no learned noise: nothing kept


def test_scale_zero_is_the_plug_in():
    """``scale=0`` is the plug-in ``p(y | theta = mean)``: the Bernoulli log likelihood at the mean."""
    flt = jr.rvga(jr.models.logistic())
    st = flt.init(jnp.array([0.5, -1.0, 2.0]), 3.0 * jnp.eye(D))
    x = jnp.array([1.0, 0.2, 0.3])
    eta = float(x @ st.mean)
    np.testing.assert_allclose(jr.log_predictive(st, x, 1.0, scale=0.0), -np.log1p(np.exp(-eta)), rtol=1e-12)
    np.testing.assert_allclose(jr.predictive(st, x, scale=0.0).mean, 1 / (1 + np.exp(-eta)), rtol=1e-12)
    with pytest.raises(ValueError, match="scale"):
        jr.log_predictive(st, x, 1.0, scale=-1.0)


def test_predictive_is_the_weighted_mixture():
    """``jr.predictive`` of the average: ``sum w_k m_k`` and the total variance ``sum w_k (v_k + (m_k - m)^2)``."""
    flt = jr.kalman(0.25)
    X, y = _data()
    avg = jr.model_average(flt, scales=(1.0,))
    out, _ = jr.run(avg, avg.init(_members(flt)), X, y)
    w = jr.average.weights(out)[:, 0]
    np.testing.assert_allclose(jnp.sum(w), 1.0, rtol=1e-12)
    each = [jr.predictive(jax.tree_util.tree_map(lambda a: a[k], out.members), X[:4], flt.model,
                          observation_noise=True) for k in range(3)]
    m = sum(w[k] * each[k].mean for k in range(3))
    v = sum(w[k] * (each[k].var + (each[k].mean - m) ** 2) for k in range(3))
    got = jr.predictive(out, X[:4], flt.model, observation_noise=True)
    np.testing.assert_allclose(got.mean, m, rtol=1e-12)
    np.testing.assert_allclose(got.var, v, rtol=1e-12)


def test_log_prior_weights():
    """``log_prior`` shifts every weight: ``log_weight = log_prior + log evidence``."""
    flt = jr.kalman(0.25)
    X, y = _data(n=5)
    avg = jr.model_average(flt)
    prior = jnp.log(jnp.array([0.5, 0.3, 0.2]))
    a, _ = jr.run(avg, avg.init(_members(flt), prior), X, y)
    b, _ = jr.run(avg, avg.init(_members(flt)), X, y)
    np.testing.assert_allclose(a.log_weight - b.log_weight, jnp.broadcast_to(prior[:, None], a.log_weight.shape),
                               rtol=1e-10)


def test_low_rank_network_members_and_io(tmp_path):
    """A nonlinear model on low-rank members (float32) runs, stays finite, round-trips through jr.io."""
    def h(theta, x):
        return jnp.tanh(x @ theta[:D]) * theta[D]

    model = jr.models.nonlinear(h, jr.models.gaussian(0.3))
    flt = jr.lrvga(model, rank=2)
    f32 = jnp.float32
    members = jax.vmap(lambda v: flt.init(jnp.full(D + 1, 0.5, f32), jnp.zeros((D + 1, 2), f32),
                                          jnp.full(D + 1, 1.0, f32) / v))(PRIORS.astype(f32))
    X, y = _data(n=20)
    avg = jr.model_average(flt)
    out, _ = jr.run(avg, avg.init(members), jnp.asarray(X, f32), jnp.asarray(y, f32))
    assert out.log_weight.dtype == f32 and bool(jnp.all(jnp.isfinite(out.log_weight)))
    jr.io.save(tmp_path / "avg.npz", out)
    back = jr.io.load(tmp_path / "avg.npz")
    np.testing.assert_array_equal(back.log_weight, out.log_weight)
    np.testing.assert_array_equal(back.members.W, out.members.W)


def test_member_filter_and_an_average_over_another_member_filter():
    """``member_filter`` reads the members' filter back (None for a plain filter); ``with_member_filter``
    rebuilds the average over another filter of the same states (here one row block in place of blocks
    of 2 rows: the sums' order only), keeping the scales, nodes and learned prior: the same run."""
    flt = jr.lrvga(jr.models.logistic(), rank=2, block_rows=2)
    avg = jr.model_average(flt, scales=(0.0, 1.0), num_points=8, learn_prior=4.0)
    assert jr.average.member_filter(avg) is flt and jr.average.member_filter(flt) is None
    one = jr.average.with_member_filter(avg, lambda f: jr.filters.with_block_rows(f, 0))
    assert jr.average.member_filter(one).spec.belief.block_rows == 0
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(0), D, 2, 1.0)
    members = jax.tree_util.tree_map(lambda a: a[None], flt.init(jnp.zeros(D), W0, psi0))
    X, y = _data()
    y = (y > 0).astype(float)
    runs = [jr.run(a, a.init(members, prior_precision=1.0), X, y)[0] for a in (avg, one)]
    np.testing.assert_allclose(runs[1].log_weight, runs[0].log_weight, rtol=1e-10)
    np.testing.assert_allclose(runs[1].prior.log_precision, runs[0].prior.log_precision, rtol=1e-10)
    np.testing.assert_allclose(runs[1].members.mean, runs[0].members.mean, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="model_average"):
        jr.average.with_member_filter(flt, lambda f: f)


def test_non_finite_data_keep_the_weights():
    flt = jr.kalman(0.25)
    avg = jr.model_average(flt)
    s0 = avg.init(_members(flt))
    out = avg.update(s0, jnp.ones(D), jnp.nan)
    np.testing.assert_array_equal(out.log_weight, s0.log_weight)
    assert not bool(out.info.converged)


def test_bad_arguments():
    flt = jr.kalman(0.25)
    with pytest.raises(ValueError, match=r"members must be .* one filter's state: .*a\[None\]"):  # how to stack
        jr.model_average(flt).init(flt.init(jnp.zeros(D), jnp.eye(D)))
    with pytest.raises(ValueError, match="log_prior"):
        jr.model_average(flt).init(_members(flt), jnp.zeros(2))
    for bad in ((), (1.0, 1.0), (-1.0,), (float("nan"),), "a"):
        with pytest.raises(ValueError, match="scales"):
            jr.model_average(flt, scales=bad)
    with pytest.raises(ValueError, match="observation model"):
        jr.model_average(flt._replace(model=None))
    for bad in (0.0, -0.5, 1.5, float("nan"), True, "a", jnp.array(0.9)):
        with pytest.raises(ValueError, match="forget"):
            jr.model_average(flt, forget=bad)
    for good in (np.float32(0.9), np.float64(0.9), 1):  # NumPy scalars and ints are numbers too
        assert jr.model_average(flt, forget=good).update.args[-1] == float(good)


def test_forgetting_discounts_the_weights():
    """``forget=a``: the log weights after T steps are ``a^T w_0 + sum_t a^(T - t) lp_t``, ``lp_t`` each
    forecaster's step-t log predictive (the members, which do not depend on the weights, as with
    ``forget=1``); ``with_member_filter`` keeps ``a``."""
    flt, a = jr.kalman(0.25), 0.9
    X, y = _data()
    full = jr.model_average(flt, scales=(0.0, 1.0))
    s0 = full.init(_members(flt), jnp.log(jnp.array([0.2, 0.3, 0.5])))
    _, trace = jr.run(full, s0, X, y, lambda state, *_: state.log_weight)
    lp = jnp.diff(jnp.concatenate([s0.log_weight[None], trace]), axis=0)  # (T, K, S)
    T = len(y)
    want = a**T * s0.log_weight + jnp.einsum("t,tks->ks", a ** jnp.arange(T - 1, -1, -1.0), lp)
    for avg in (jr.model_average(flt, scales=(0.0, 1.0), forget=a),
                jr.average.with_member_filter(jr.model_average(flt, scales=(0.0, 1.0), forget=a), lambda f: f)):
        out, _ = jr.run(avg, s0, X, y)
        np.testing.assert_allclose(out.log_weight, want, rtol=1e-9)
        np.testing.assert_allclose(out.members.mean, jr.run(full, s0, X, y)[0].members.mean, rtol=1e-12)


def test_evidence_of_the_mixture_is_the_chain_of_its_predictives():
    """With every forecaster (default scales): the average's log evidence (the chain of its mixture
    predictives) equals ``logsumexp(final log weights) - logsumexp(initial)``, hence its cumulative
    log loss is within ``log(K S)`` of the best forecaster's."""
    flt = jr.kalman(0.25)
    X, y = _data(n=20)
    avg = jr.model_average(flt)
    s0 = avg.init(_members(flt))
    out, _ = jr.run(avg, s0, X, y)
    ev = jr.log_evidence(avg, s0, X, y)
    np.testing.assert_allclose(ev, logsumexp(out.log_weight) - logsumexp(s0.log_weight), rtol=1e-10)
    best = jnp.max(out.log_weight - s0.log_weight)
    assert best - np.log(out.log_weight.size) <= ev <= best


@pytest.mark.parametrize("K", [1, 3])
def test_each_member_maps_fn_over_the_members(K):
    """``each_member(fn, *stacked)`` equals ``fn`` of each member's slices stacked along K (K = 1 takes
    the path without a batch axis); a one-member average's step is the member's own step."""
    flt = jr.kalman(None)
    members = _members(flt, PRIORS[:K])
    X, y = _data(n=2)
    out = jr.average.each_member(lambda m, v: (flt.update(m, X[0], y[0]).mean * v, v + 1.0), members, PRIORS[:K])
    for k in range(K):
        alone = flt.update(jax.tree_util.tree_map(lambda a, k=k: a[k], members), X[0], y[0])
        np.testing.assert_allclose(out[0][k], alone.mean * PRIORS[k], rtol=1e-12)
    np.testing.assert_allclose(out[1], PRIORS[:K] + 1.0)
    avg = jr.model_average(flt, scales=(1.0,))
    stepped = avg.update(avg.init(members), X[1], y[1])
    np.testing.assert_allclose(stepped.members.cov[0], flt.update(jax.tree_util.tree_map(lambda a: a[0], members),
                                                                  X[1], y[1]).cov, rtol=1e-12)


def test_low_rank_members_one_at_a_time_are_each_member_alone():
    """Low-rank members go one at a time (``lax.map``): a model average of three low-rank members steps
    and scores each as the member alone would."""
    flt = jr.lrvga(jr.models.logistic(), rank=2)
    starts = [flt.init(jnp.zeros(D), *jr.lowrank.init_factors(jax.random.PRNGKey(k), D, 2, v))
              for k, v in enumerate(PRIORS)]
    members = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *starts)
    X, y = _data(n=6)
    y = (y > 0).astype(float)
    avg = jr.model_average(flt, scales=(1.0,))
    out, _ = jr.run(avg, avg.init(members), X, y)
    for k, start in enumerate(starts):
        np.testing.assert_allclose(out.members.mean[k], jr.run(flt, start, X, y)[0].mean, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(out.log_weight[k, 0], jr.log_evidence(flt, start, X, y), rtol=1e-9)


def test_prune_drops_the_members_of_negligible_weight():
    """``prune`` keeps the members of weight above ``min_weight`` (and always the heaviest): the pruned
    mixture's predictive equals the whole one up to the mass dropped, and the pruned state goes on
    learning as its members would."""
    flt = jr.kalman(None)
    X, y = _data()
    avg = jr.model_average(flt)
    state, _ = jr.run(avg, avg.init(_members(flt), log_prior=jnp.array([0.0, -60.0, 0.0])), X[:-2], y[:-2])
    w = jr.average.weights(state).sum(1)
    assert w[1] < 1e-20 < w[0] and w[2] > 1e-20
    pruned = jr.average.prune(state)
    np.testing.assert_array_equal(pruned.members.mean, state.members.mean[jnp.array([0, 2])])
    np.testing.assert_array_equal(pruned.rate_ratio, state.rate_ratio[jnp.array([0, 2])])
    np.testing.assert_allclose(jr.log_predictive(pruned, X[-1], y[-1], flt.model),
                               jr.log_predictive(state, X[-1], y[-1], flt.model), rtol=1e-12)
    np.testing.assert_allclose(jr.predictive(pruned, X[-2:], flt.model).var,
                               jr.predictive(state, X[-2:], flt.model).var, rtol=1e-12)
    stepped = avg.update(pruned, X[-2], y[-2])
    np.testing.assert_allclose(stepped.members.mean, avg.update(state, X[-2], y[-2]).members.mean[jnp.array([0, 2])],
                               rtol=1e-12)
    assert jr.average.prune(state, 1.0 - 1e-9).log_weight.shape[0] == 1
    with pytest.raises(ValueError, match="min_weight"):
        jr.average.prune(state, 1.0)
    with pytest.raises(ValueError, match="concrete"):
        jax.jit(jr.average.prune)(state)
    batch = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), state)  # two averages stacked: refused
    with pytest.raises(ValueError, match="one average"):
        jr.average.prune(batch)


def test_prune_keeps_a_learned_prior_with_its_members():
    flt = jr.kalman(0.25)
    X, y = _data(n=10)
    avg = jr.model_average(flt, scales=(1.0,), learn_prior=4.0)
    state, _ = jr.run(avg, avg.init(_members(flt), log_prior=jnp.array([-60.0, 0.0, 0.0]),
                                    prior_precision=1.0 / PRIORS), X, y)
    pruned = jr.average.prune(state)
    np.testing.assert_array_equal(pruned.prior.log_precision, state.prior.log_precision[1:])
    np.testing.assert_array_equal(pruned.prior.mean, state.prior.mean[1:])
