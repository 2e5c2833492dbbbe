"""Data generators ([RVGA] eq. 91, [LRVGA] eqs. 48-49) and real-data readers.

The pinned values below were produced by the authors' generator code (KDataGenerator.py @ 960e7b8,
run verbatim with the global NumPy RNG) under SciPy 1.15.3, whose special_ortho_group is the
Householder algorithm of the authors' SciPy; at the time of writing our generators matched that
run bit for bit on all the configurations of the papers' experiments tried.
"""
import jax
from pathlib import Path

import numpy as np
import pytest

from jaxrvga.baselines import data

# np.random.seed(10); scipy<1.16 special_ortho_group.rvs(dim=4)
Q_SEED10_D4 = np.array([
    [-0.615981720144388, 0.7284765414343253, -0.24760080247424393, 0.169062981287905],
    [-0.3308825762852492, -0.4800660057323516, -0.7687365298444611, -0.26286403050573204],
    [0.7148903411788766, 0.40696080416883335, -0.5682949864746494, 0.018855034001136292],
    [-0.0038783047773374205, 0.27063159939357706, 0.15741282871667575, -0.9497182200616892]])


def test_rotation_matches_authors_scipy():
    Q = data.random_rotation(4, 10)
    np.testing.assert_allclose(Q, Q_SEED10_D4, rtol=0, atol=1e-14)
    np.testing.assert_allclose(Q @ Q.T, np.eye(4), atol=1e-14)
    assert np.linalg.det(Q) == pytest.approx(1.0, abs=1e-12)


def test_rotation_scipy_option_matches_when_scipy_is_old():
    scipy = pytest.importorskip("scipy")
    major, minor = (int(v) for v in scipy.__version__.split(".")[:2])
    if (major, minor) >= (1, 16):
        pytest.skip("SciPy >= 1.16 uses a QR algorithm for special_ortho_group")
    np.testing.assert_array_equal(data.random_rotation(7, 3, rotation="scipy"),
                                  data.random_rotation(7, 3))


def test_logistic_data_matches_authors():
    # LogisticRegObservations(2, 100, 2, 2, 10, normalize=True): the setting of [RVGA] Fig. 3.
    ds = data.logistic_data(2, 100, 2, 2, 10)
    np.testing.assert_allclose(ds.X[:3], [[1.9400103991889237, 0.6064374157795758],
                                          [1.7361013051820078, 0.30537895030575657],
                                          [0.09381786611940812, -0.8627184894449582]],
                               rtol=1e-12)
    np.testing.assert_array_equal(ds.y[:12], [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    np.testing.assert_allclose(ds.theta_opt, [-3.4797956987619836, 2.4664112822110584], rtol=1e-12)
    np.testing.assert_allclose(ds.cov, [[0.7831080194770058, 0.29426534787408815],
                                        [0.29426534787408815, 0.39336256875828696]], rtol=1e-13)


def test_logistic_data_structure():
    s, N, d = 3.0, 101, 6
    ds = data.logistic_data(s, N, d, 1, 4)
    assert ds.X.shape == (100, d) and ds.y.shape == (100,)  # odd N drops one sample
    assert ds.y.sum() == 50
    np.testing.assert_allclose(np.linalg.norm(ds.mean0 - ds.mean1), s, rtol=1e-14)
    np.testing.assert_allclose(ds.mean0, -ds.mean1, rtol=0, atol=0)
    np.testing.assert_allclose(ds.cov @ ds.theta_opt, ds.mean1 - ds.mean0, atol=1e-12)
    # Same seed -> same data; the caller's global RNG is not touched.
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    again = data.logistic_data(s, N, d, 1, 4)
    np.testing.assert_array_equal(np.random.get_state()[1], before)
    np.testing.assert_array_equal(again.X, ds.X)


def test_covariance_normalisation_is_squared_norm():
    # d = 2, c = 2: v = (1, 1/4) / (1 + 1/16): trace 1.25 / 1.0625.
    C = data.covariance(2, 2, seed=0)
    assert np.trace(C) == pytest.approx(1.25 / 1.0625, rel=1e-14)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(C)), np.array([0.25, 1.0]) / 1.0625,
                               rtol=1e-13)
    C0 = data.covariance(5, 0, seed=0)
    assert np.trace(C0) == pytest.approx(1.0, rel=1e-14)
    np.testing.assert_allclose(data.covariance(3, 1, rotate=False),
                               np.diag([1, 1 / 2, 1 / 3]) / (1 + 1 / 4 + 1 / 9), rtol=1e-15)


def test_linear_data_matches_authors():
    ds = data.linear_data(1, 20, 3, 1, 1)
    np.testing.assert_allclose(
        ds.X[:2], [[-1.4476321962619298, 0.005099549532584396, 0.22049804833507095],
                   [0.6686831045112049, -1.0565260416877342, -0.9245550145940484]], rtol=1e-12)
    np.testing.assert_allclose(
        ds.y[:3], [1.6442916595558228, -0.2970219294657299, -0.6423527891943741], rtol=1e-12)
    np.testing.assert_allclose(
        ds.theta_star, [-0.1501722446808358, 0.3987397335857706, -0.9046849848358642], rtol=1e-13)
    noiseless = data.linear_data(0, 20, 3, 1, 1)
    np.testing.assert_allclose(noiseless.y, noiseless.X @ noiseless.theta_star, rtol=1e-15)
    np.testing.assert_array_equal(noiseless.X, ds.X)


def test_fa_covariance_data():
    ds = data.fa_covariance_data(10, 2, 30, 1)
    np.testing.assert_allclose(
        ds.S[:2, :3], [[0.10644409225006156, -0.005019111314791628, 0.05311697691451345],
                       [-0.005019111314791628, 0.12478550943208841, 0.0784365421292559]], rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(ds.X, axis=1), 1.0, rtol=1e-14)
    assert np.trace(ds.S) == pytest.approx(1.0, rel=1e-14)
    np.testing.assert_allclose(ds.cov, np.diag(ds.psi) + ds.W @ ds.W.T, rtol=1e-15)
    old = data.fa_covariance_data(10, 2, 30, 1, variant="dec2021")
    np.testing.assert_allclose(np.mean(np.linalg.norm(old.X, axis=1)), 1.0, rtol=1e-14)
    np.testing.assert_allclose(old.S, old.X.T @ old.X / 30 + 1e-12 * np.eye(10), rtol=1e-15)
    # The HEAD script draws W_0 from the global stream right after X: rng continues it.
    rs = np.random.RandomState(1)
    rs.uniform(size=[10, 1]); rs.seed(1)
    rs.multivariate_normal(np.zeros(2), np.eye(2), 10); rs.seed(1)
    rs.multivariate_normal(np.zeros(10), ds.cov, 30)
    np.testing.assert_array_equal(ds.rng.normal(size=5), rs.normal(size=5))


def test_jax_mode_distributions():
    key = jax.random.PRNGKey(0)
    Q = data.random_rotation(6, key=key)
    np.testing.assert_allclose(Q @ Q.T, np.eye(6), atol=1e-13)
    assert np.linalg.det(Q) == pytest.approx(1.0, abs=1e-12)
    ds = data.logistic_data(2.0, 4000, 3, 1, key=key)
    assert ds.y.sum() == 2000
    np.testing.assert_allclose(ds.X[ds.y == 0].mean(0), ds.mean0, atol=0.1)
    np.testing.assert_allclose(np.cov(ds.X[ds.y == 1].T), ds.cov, atol=0.05)
    lin = data.linear_data(0.5, 4000, 3, 1, key=key)
    resid = lin.y - lin.X @ lin.theta_star
    assert np.std(resid) == pytest.approx(0.5, rel=0.05)
    fa = data.fa_covariance_data(8, 2, 50, key=key)
    np.testing.assert_allclose(np.linalg.norm(fa.X, axis=1), 1.0, rtol=1e-12)
    with pytest.raises(ValueError):
        data.logistic_data(2.0, 10, 3, 1, 1, key=key)
    with pytest.raises(ValueError):
        data.linear_data(1.0, 10, 3, 1)


def test_prior_mean():
    m = data.prior_mean(3.0, 9)
    np.testing.assert_allclose(m, np.ones(9), rtol=1e-15)
    assert np.linalg.norm(data.prior_mean(2.5, 7)) == pytest.approx(2.5, rel=1e-15)


def test_read_libsvm_sparse(tmp_path):
    f = tmp_path / "tiny.txt"
    f.write_text("+1 2:0.5 4:-1\n-1 1:3\n\n2 3:1e-1 # comment\n")
    X, y = data.read_libsvm(f)
    np.testing.assert_array_equal(y, [1, -1, 2])
    # d comes from the largest index (4), not from the first record's entry count (2).
    np.testing.assert_array_equal(X, [[0, 0.5, 0, -1], [3, 0, 0, 0], [0, 0, 0.1, 0]])
    X6, _ = data.read_libsvm(f, n_features=6)
    assert X6.shape == (3, 6)
    with pytest.raises(ValueError, match="exceeds"):
        data.read_libsvm(f, n_features=3)
    bad = tmp_path / "bad.txt"
    bad.write_text("1 0:2\n")
    with pytest.raises(ValueError, match="1-based"):
        data.read_libsvm(bad)


def test_breast_cancer(monkeypatch, tmp_path):
    path = data.find_data_file(data.BREAST_CANCER_FILE)  # shared/data, else the bundled copy
    bundled = Path(data.__file__).parent / "datasets" / data.BREAST_CANCER_FILE
    assert bundled.read_bytes() == path.read_bytes()
    ds = data.load_breast_cancer()
    assert ds.X.shape == (683, 10)
    assert ds.y.sum() == 239 and (ds.y == 0).sum() == 444  # 4 -> 1 (malignant), 2 -> 0 (benign)
    assert np.abs(ds.X).max() <= 1.0
    # The environment variable takes precedence.
    monkeypatch.setenv(data.DATA_ENV, str(path.parent))
    assert data.find_data_file(data.BREAST_CANCER_FILE) == path
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path))
    (tmp_path / data.BREAST_CANCER_FILE).write_text("4 1:0.5\n2 10:-0.5\n")
    small = data.load_breast_cancer()
    np.testing.assert_array_equal(small.y, [1, 0])
    (tmp_path / data.BREAST_CANCER_FILE).write_text("1 1:0.5\n")
    with pytest.raises(ValueError, match="2 or 4"):
        data.load_breast_cancer()


def test_digits_pair():
    pytest.importorskip("sklearn")
    X, y = data.load_digits_pair(3, 5)
    assert X.shape[1] == 64 and 0.0 <= X.min() and X.max() <= 1.0
    assert set(np.unique(y)) == {0.0, 1.0}
    assert 300 < len(y) < 400
