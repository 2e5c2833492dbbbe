"""The Filter contract and the scan driver."""
import numpy as np
import pytest

import jaxrvga as jr


def kalman_problem(n=12, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d) + rng.normal(size=n)


def test_run_equals_python_loop_and_trace_is_stacked():
    X, y = kalman_problem()
    flt = jr.kalman(1.0)
    s0 = flt.init(np.zeros(3), np.eye(3))
    final, means = jr.run(flt, s0, X, y, jr.trace_mean)
    s = s0
    for t in range(len(y)):
        s = flt.update(s, X[t], y[t])
        np.testing.assert_allclose(means[t], s.mean, rtol=1e-13)
    assert int(final.step) == len(y)


def test_run_rejects_mismatched_lengths():
    flt = jr.kalman(1.0)
    with pytest.raises(ValueError, match="leading \\(time\\) axis"):
        jr.run(flt, flt.init(np.zeros(3), np.eye(3)), np.ones((5, 3)), np.ones(4))


def test_donated_run_gives_the_same_result():
    X, y = kalman_problem()
    flt = jr.kalman(1.0)
    ref, _ = jr.run(flt, flt.init(np.zeros(3), np.eye(3)), X, y)
    don, _ = jr.run(flt, flt.init(np.zeros(3), np.eye(3)), X, y, donate=True)
    # two compiled programs (with and without donation): equal to rounding, not bit for bit
    np.testing.assert_allclose(don.mean, ref.mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(don.cov, ref.cov, rtol=1e-12, atol=1e-14)


def test_validate_mode_names_the_first_bad_step():
    X, y = kalman_problem()
    flt = jr.kalman(1.0)
    s0 = flt.init(np.zeros(3), np.eye(3))
    ok, _ = jr.run(flt, s0, X, y, validate=True)
    np.testing.assert_allclose(ok.mean, jr.run(flt, s0, X, y)[0].mean, rtol=1e-12, atol=1e-14)
    X_bad = X.copy()
    X_bad[7, 1] = np.inf
    with pytest.raises(ValueError, match="NaN or inf in the data at step 7"):
        jr.run(flt, s0, X_bad, y, validate=True)


def test_skipped_update_is_flagged_and_keeps_the_belief():
    """An update that would make the covariance indefinite (a non-log-concave likelihood
    with strongly negative curvature) is skipped and flagged, never applied."""
    from jaxrvga.rvga import rank_one_update
    s0 = jr.rvga(jr.models.logistic()).init(np.zeros(2), np.eye(2))
    v = np.array([1.0, 0.0])
    bad = rank_one_update(s0, s0.cov, v, 1.0, 0.3, 2.0, s0.info)  # s nu0 = 2 > 1
    assert not bool(bad.info.converged)
    np.testing.assert_array_equal(bad.cov, s0.cov)
    np.testing.assert_array_equal(bad.mean, s0.mean)
    assert int(bad.step) == 1
