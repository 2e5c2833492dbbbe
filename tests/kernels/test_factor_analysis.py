"""Factor analysis: Algorithm 1, batch EM, online EM and the ML fixed point ([LRVGA] §3, App. A-E).

float64. Oracles: an exact FA representation is a fixed point, one inner loop of Alg. 1 is
one batch-EM step, the EM fixed point is the ML fixed point (App. B), online EM = recursive EM
after the first sample.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import multivariate_normal

from jaxrvga.kernels import row_blocks as blocks
from jaxrvga.baselines import fa_filters
from jaxrvga.kernels import factor_analysis as fa
from jaxrvga.baselines import batch_fa
from jaxrvga.kernels import lowrank

from conftest import rel


def random_factors(d, p, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(size=(d, p))), jnp.asarray(rng.uniform(0.2, 2.0, size=d))


def fa_samples(d, p, n, seed=0):
    """n samples of N(0, W W^T + diag(psi)) and their (uncentred) empirical covariance."""
    rng = np.random.default_rng(seed)
    W, psi = rng.normal(size=(d, p)), rng.uniform(0.2, 1.0, d)
    V = rng.normal(size=(n, p)) @ W.T + rng.normal(size=(n, d)) * np.sqrt(psi)
    return V, V.T @ V / n


def test_exact_representation_is_fixed_point():
    d, p = 40, 4
    W, psi = random_factors(d, p)
    S = lowrank.to_dense_precision(W, psi)
    W1, psi1 = batch_fa.batch_em_step(S, W, psi)
    assert rel(W1, W) <= 1e-12 and rel(psi1, psi) <= 1e-12
    # Algorithm 1 with target alpha (W W^T + Psi) + beta X X^T, X = 0, and with beta = 0
    for alpha, beta, X in [(1.0, 0.0, np.ones(d)), (1.0, 2.5, np.zeros((d, 3)))]:
        W2, psi2 = fa.recursive_em_step(W, psi, X, alpha, beta, inner_loops=5)
        assert rel(W2, W) <= 1e-12 and rel(psi2, psi) <= 1e-12


def test_one_inner_loop_alpha0_equals_batch_em_step():
    d, p, K = 40, 4, 25
    W, psi = random_factors(d, p, seed=1)
    V = np.random.default_rng(2).normal(size=(d, K))
    Wr, psir = fa.recursive_em_step(W, psi, V / np.sqrt(K), 0.0, 1.0, inner_loops=1)
    Wb, psib = batch_fa.batch_em_step(jnp.asarray(V @ V.T / K), W, psi)
    assert rel(Wr, Wb) <= 1e-12 and rel(psir, psib) <= 1e-12


@pytest.mark.parametrize("store", [True, False])
@pytest.mark.parametrize("alpha,beta,m,loops", [(1.0, 1.0, 1, 1), (0.7, 0.3, 5, 3), (2.0, 0.5, 2, 10), (0.0, 1.0, 5, 4)])
def test_inner_loops_equal_batch_em_on_dense_target(alpha, beta, m, loops, store):
    """Each inner loop of Algorithm 1 is one batch-EM step on S = alpha Lam_prev + beta X X^T (eq. 28),
    whether the iterate is stored or its rows are recomputed from W_prev in every pass."""
    d, p = 30, 3
    W, psi = random_factors(d, p, seed=3)
    X = np.random.default_rng(4).normal(size=(d, m))
    S = alpha * lowrank.to_dense_precision(W, psi) + beta * X @ X.T
    Wb, psib = W, psi
    for _ in range(loops):
        Wb, psib = batch_fa.batch_em_step(S, Wb, psib)
    Wr, psir = fa.recursive_em_step(W, psi, X[:, 0] if m == 1 else X, alpha, beta, loops, store_iterate=store)
    assert rel(Wr, Wb) <= 1e-11 and rel(psir, psib) <= 1e-11


def test_em_fixed_point_is_ml_fixed_point():
    d, p = 40, 4
    _, S = fa_samples(d, p, 2000)
    rng = np.random.default_rng(5)
    W0, psi0 = jnp.asarray(rng.normal(size=(d, p))), jnp.asarray(np.diag(S))
    W, psi, it = jax.jit(batch_fa.batch_em, static_argnums=3)(jnp.asarray(S), W0, psi0, 20000, 1e-15)
    assert int(it) < 20000
    rW, rpsi = batch_fa.ml_residuals(jnp.asarray(S), W, psi)
    assert float(rW) <= 1e-10 and float(rpsi) <= 1e-10


def test_batch_em_decreases_fa_kl_monotonically():
    """EM never decreases the likelihood, i.e. never increases KL(N(0,S) || N(0, W W^T + Psi)) (eq. 11-13)."""
    d, p = 30, 3
    _, S = fa_samples(d, p, 500, seed=6)
    S = jnp.asarray(S)
    W, psi = 1e-2 * random_factors(d, p, seed=7)[0], jnp.diag(S)
    kls = []
    for _ in range(30):
        kls.append(float(batch_fa.fa_kl(S, W, psi)))
        W, psi = batch_fa.batch_em_step(S, W, psi)
    assert np.all(np.diff(kls) <= 1e-12 * abs(kls[0]))
    assert kls[-1] < 0.5 * kls[0]


def test_fa_kl_and_neg_log_lik_equal_dense_formulas():
    d, p, n = 25, 3, 400
    V, S = fa_samples(d, p, n, seed=8)
    W, psi = random_factors(d, p, seed=9)
    Lam = np.asarray(lowrank.to_dense_precision(W, psi))
    kl = 0.5 * (np.trace(np.linalg.solve(Lam, S)) + np.linalg.slogdet(Lam)[1]
                - np.linalg.slogdet(S)[1] - d)
    assert abs(float(batch_fa.fa_kl(jnp.asarray(S), W, psi)) - kl) <= 1e-10 * abs(kl)
    nll = -np.mean(multivariate_normal(np.zeros(d), Lam).logpdf(V))
    assert abs(float(batch_fa.fa_neg_log_lik(V, W, psi)) - nll) <= 1e-10 * abs(nll)
    # eq. 13: the average NLL equals the KL up to a constant independent of (W, psi)
    W2, psi2 = random_factors(d, p, seed=10)
    diff_kl = batch_fa.fa_kl(jnp.asarray(S), W, psi) - batch_fa.fa_kl(jnp.asarray(S), W2, psi2)
    diff_nll = batch_fa.fa_neg_log_lik(V, W, psi) - batch_fa.fa_neg_log_lik(V, W2, psi2)
    assert abs(float(diff_kl - diff_nll)) <= 1e-9 * abs(float(diff_kl))
    assert abs(float(batch_fa.fa_kl(lowrank.to_dense_precision(W, psi), W, psi))) <= 1e-10


def test_online_fa_em_equals_recursive_em_after_first_sample():
    d, p = 40, 4
    W0, psi0 = random_factors(d, p, seed=11)
    x = np.random.default_rng(12).normal(size=d)
    rec = fa_filters.recursive_em(inner_loops=1, mode="covariance")
    onl = fa_filters.online_fa_em(averaging=None)
    sr = rec.update(rec.init(W0, psi0), x)
    so = onl.update(onl.init(W0, psi0), x)
    assert rel(so.W, sr.W) <= 1e-12 and rel(so.psi, sr.psi) <= 1e-12


def test_recursive_em_filter_modes_match_algorithm1_calls():
    d, p, N, m = 30, 3, 6, 8
    W0, psi0 = random_factors(d, p, seed=13)
    # batches of m > p columns: a rank-one first target (alpha_1 = 0) would make psi collapse
    # to its floor and the comparison ill-conditioned
    xs = np.random.default_rng(14).normal(size=(N, d, m))
    for mode, eta in (("covariance", None), ("precision", None), ("precision", 0.3)):
        flt = fa_filters.recursive_em(inner_loops=2, mode=mode, process_noise=eta)
        state = flt.init(W0, psi0)
        update = jax.jit(flt.update)
        step = jax.jit(fa.recursive_em_step, static_argnums=5)
        W, psi = W0, psi0
        for t, x in enumerate(xs, start=1):
            state = update(state, x)
            a, b = ((t - 1) / t, 1 / t) if mode == "covariance" else (1 / (1 + (eta or 0.0)), 1.0)
            W, psi = step(W, psi, x, a, b, 2)
        assert int(state.step) == N
        assert rel(state.W, W) <= 1e-13 and rel(state.psi, psi) <= 1e-13


def test_online_fa_em_averaging_variants():
    d, p, N, start = 12, 2, 40, 20
    W0, psi0 = random_factors(d, p, seed=15)
    xs = jnp.asarray(np.random.default_rng(16).normal(size=(N, d)))
    ys = jnp.zeros(N)

    plain = fa_filters.online_fa_em(averaging=None)
    from jaxrvga import core
    _, iterates = core.run(plain, plain.init(W0, psi0), xs, ys,
                           trace_fn=lambda s, x, y: (s.W, s.psi))
    # paper: post-processing average over iterates t > N/2 (0-based t), E-step unaffected
    paper = fa_filters.online_fa_em(num_steps=N, averaging="paper")
    sp, _ = core.run(paper, paper.init(W0, psi0), xs, ys)
    # donating the state (whose averages start equal to W, psi) gives the same run
    donated, _ = core.run(paper, paper.init(jnp.array(W0), jnp.array(psi0)), xs, ys, donate=True)
    np.testing.assert_allclose(donated.W_avg, sp.W_avg, rtol=1e-12, atol=1e-14)  # another compiled program
    assert rel(sp.W, iterates[0][-1]) <= 1e-13
    assert rel(sp.W_avg, jnp.mean(iterates[0][start + 1:], axis=0)) <= 1e-12
    assert rel(sp.psi_avg, jnp.mean(iterates[1][start + 1:], axis=0)) <= 1e-12
    # code: averaging from t > average_start, fed back into the E-step
    code = fa_filters.online_fa_em(averaging="code", average_start=start)
    _, cw = core.run(code, code.init(W0, psi0), xs, ys, trace_fn=lambda s, x, y: s.W)
    assert rel(cw[start], iterates[0][start]) <= 1e-13  # identical before averaging starts
    assert rel(cw[-1], iterates[0][-1]) > 1e-6
    with pytest.raises(ValueError, match="num_steps"):
        fa_filters.online_fa_em(averaging="paper")
    with pytest.raises(ValueError, match="averaging"):
        fa_filters.online_fa_em(averaging="sometimes")


def test_psi_floor_keeps_psi_positive_on_rank_deficient_target():
    d, p = 10, 2
    W, psi = random_factors(d, p, seed=17)
    X = np.zeros((d, 1))
    X[:5, 0] = 1.0  # target of rank one with five zero rows and columns
    W1, psi1 = fa.recursive_em_step(W, psi, X, 0.0, 1.0, inner_loops=20)
    assert bool(jnp.all(psi1 > 0)) and bool(jnp.all(jnp.isfinite(W1)))
    assert float(jnp.max(psi1)) <= 1e-11  # the rank-one target is exactly representable


def test_validation():
    W, psi = random_factors(10, 2)
    with pytest.raises(ValueError, match="inner_loops"):
        fa.recursive_em_step(W, psi, jnp.ones(10), 1.0, 1.0, 0)
    with pytest.raises(ValueError, match="must agree"):
        fa.recursive_em_step(W, psi, jnp.ones(9), 1.0, 1.0, 1)
    with pytest.raises(ValueError, match="mode"):
        fa_filters.recursive_em(mode="variance")
    with pytest.raises(ValueError, match="process_noise"):
        fa_filters.recursive_em(mode="covariance", process_noise=0.1)
    with pytest.raises(ValueError, match="psi"):
        fa_filters.recursive_em().init(W, -psi)
    with pytest.raises(ValueError, match="W must be"):
        fa_filters.online_fa_em(averaging=None).init(W, psi[:5])


@pytest.mark.parametrize("store", [True, False])
@pytest.mark.parametrize("loops,m", [(1, 1), (2, 1), (3, 2)])
def test_blocked_inner_loops_equal_unblocked(loops, m, store):
    """The streamed (row-blocked, rewritten in place) inner loops compute the same Algorithm 1 iterates,
    with the iterate stored or recomputed."""
    rng = np.random.default_rng(3)
    d, p = 240, 4
    W = jnp.asarray(rng.normal(size=(d, p)))
    psi = jnp.asarray(rng.uniform(0.5, 2.0, d))
    X = jnp.asarray(rng.normal(size=(d, m)))
    assert blocks.num_blocks(d, p, 60) == 4 and blocks.num_blocks(d, p, None) == 1
    ref = fa.recursive_em_step(W, psi, X, 0.7, 1.3, loops)
    got = fa.recursive_em_step(W, psi, X, 0.7, 1.3, loops, block_rows=60, store_iterate=store)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * float(jnp.max(jnp.abs(b))))
    # the Gram of M streamed over the same blocks
    np.testing.assert_allclose(lowrank.gram_m(W, psi, block_rows=60), lowrank.gram_m(W, psi), rtol=1e-13)


def test_block_rows_zero_is_one_block():
    """``block_rows=0`` (what sharded filters are rebuilt with): one block, whatever the size."""
    d, p = 1 << 20, 10
    assert blocks.num_blocks(d, p) > 1 and blocks.num_blocks(d, p, block_rows=8) > 1
    assert blocks.num_blocks(d, p, block_rows=0) == 1


def test_block_map_in_place_and_sums():
    """A blocked pass rewrites rows in place or into fresh arrays and sums per-block results."""
    d, p, nb = 4096, 8, 8
    r = jnp.arange(d, dtype=jnp.float64)
    expected = 2.0 + r[:, None] * jnp.ones((1, p))

    def fn(b):
        new = 2.0 * b[0] + b[1][:, None]
        return (new,), {"gram": new.T @ new}

    for in_place in (0, 1):
        (new,), sums = jax.jit(lambda W: blocks.block_map(fn, (W, r), nb, in_place))(jnp.ones((d, p)))
        np.testing.assert_array_equal(new, expected)
        np.testing.assert_allclose(sums["gram"], expected.T @ expected, rtol=1e-14)


@pytest.mark.parametrize("loops,store", [(1, None), (3, None), (3, True)])
def test_recursive_em_step_memory(loops, store):
    """Algorithm 1 at a blocked size (d p >= BLOCK_MIN_ELEMENTS, compiled only): XLA's own account
    of the temporaries is under ``inner_loops + 2`` d-vectors (Diag(S), one psi per loop, the new
    psi, blocks) for any number of loops by default: W is rewritten in place and no iterate W_k is
    stored. (The new psi goes to a fresh d-vector: rewritten in place, XLA copied the whole psi in
    every block, jaxrvga.kernels.row_blocks.block_map.) Storing the iterate (``store_iterate=True``) costs one
    d x p array more."""
    d, p = 1 << 19, 8
    assert blocks.num_blocks(d, p) > 1
    S = jax.ShapeDtypeStruct
    step = jax.jit(lambda W, psi, x: fa.recursive_em_step(W, psi, x, 1.0, 1.0, loops, store_iterate=store),
                   donate_argnums=(0, 1))
    mem = step.lower(S((d, p), jnp.float64), S((d,), jnp.float64), S((d,), jnp.float64)).compile().memory_analysis()
    W_bytes = d * p * 8
    assert mem.alias_size_in_bytes >= W_bytes  # (W, psi) are written into the donated inputs
    extra = W_bytes if store else 0
    assert extra <= mem.temp_size_in_bytes < extra + (loops + 2) * d * 8
