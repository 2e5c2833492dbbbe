"""Data sets of the papers: the synthetic generators and the real data.

Synthetic generators ([RVGA] §6, [LRVGA] §5; the authors' ``KalmanMachine/KDataGenerator.py``
and ``XP_LRVGA_LargeScaleCovariance.py``):

* :func:`covariance` — input covariance ``C = Q^T diag(1, 1/2^c, ..., 1/d^c) Q`` ([RVGA] eq. 91,
  [LRVGA] eq. 48), ``Q`` a random rotation;
* :func:`logistic_data` — two Gaussian classes at distance ``s`` (the logistic experiments);
* :func:`linear_data` — Gaussian inputs, ``y = x^T theta* + N(0, sigma^2)`` ([LRVGA] eqs. 48-49);
* :func:`fa_covariance_data` — samples of an FA covariance ``diag(psi) + W W^T`` ([LRVGA] Fig. 1).

Each generator has two random modes:

* **NumPy-legacy mode** (``seed=...``): the authors' exact protocol. Their code reseeds NumPy's
  global legacy RNG (``np.random.seed``) before every draw and uses ``np.random.multivariate_normal``
  and ``scipy.stats.special_ortho_group.rvs``. We replay exactly the same call sequence on a private
  ``np.random.RandomState`` (which is what the global RNG is), so the numbers are the authors'
  without touching the caller's global RNG state. Two caveats: ``multivariate_normal`` factors the
  covariance by an SVD, whose signs depend on the LAPACK build, and the rotation must be drawn with
  the algorithm of the SciPy versions the authors used (``rotation="stewart"``, the default; see
  :func:`random_rotation`).
* **JAX mode** (``key=...``): the same distributions drawn with ``jax.random`` (for new
  experiments). Draws use JAX's default float type, so the numbers depend on ``jax_enable_x64``.

Generators return NumPy float64 arrays in small NamedTuples; pass them to JAX as needed.

Real data: :func:`read_libsvm`, :func:`load_breast_cancer` (experiments/REPORT.md §1) and
:func:`load_digits_pair` (scikit-learn's 8x8 digits, a stand-in for USPS 3-vs-5 of [KLPROX]).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple, Optional

import jax
import numpy as np

#: Environment variable naming a directory that holds the data files (checked first).
DATA_ENV = "JAXRVGA_DATA"

BREAST_CANCER_FILE = "breast-cancer_scale.txt"


# ---------------------------------------------------------------------------------------------
# Random sources
# ---------------------------------------------------------------------------------------------

def _mode(seed, key) -> str:
    if (seed is None) == (key is None):
        raise ValueError("give exactly one of seed (NumPy-legacy mode, the authors' protocol) "
                         "or key (JAX mode)")
    return "legacy" if key is None else "jax"


def _legacy_rng(seed: int) -> np.random.RandomState:
    """A RandomState in the state ``np.random.seed(seed)`` leaves the global RNG in."""
    return np.random.RandomState(seed)


def _stewart_special_ortho(d: int, rs: np.random.RandomState) -> np.ndarray:
    """``scipy.stats.special_ortho_group.rvs(d)`` as in SciPy up to 1.15 (Stewart 1980).

    A product of Householder reflections built from ``d - 1`` Gaussian vectors of decreasing
    length, drawn from ``rs`` in this order. This is the algorithm of the authors' SciPy
    (2020-2021); it agrees bit for bit with SciPy 1.15.3. SciPy >= 1.16 (scipy PR #22304) takes
    the QR factor of one d x d Gaussian matrix instead, so the same seed gives another rotation.
    """
    H = np.eye(d)
    D = np.empty((d,))
    for n in range(d - 1):
        x = rs.normal(size=(d - n,))
        norm2 = np.dot(x, x)
        x0 = x[0].item()
        D[n] = np.sign(x[0]) if x[0] != 0 else 1
        x[0] += D[n] * np.sqrt(norm2)
        x /= np.sqrt((norm2 - x0**2 + x[0] ** 2) / 2.0)
        H[:, n:] -= np.outer(np.dot(H[:, n:], x), x)
    D[-1] = (-1) ** (d - 1) * D[:-1].prod()
    return (D * H.T).T


def _jax_special_ortho(key, d: int) -> np.ndarray:
    """A Haar-distributed rotation of SO(d) from ``key`` (QR with sign correction, Mezzadri 2007).

    The Gaussian matrix comes from ``key``; the QR runs in float64 NumPy.
    """
    q, r = np.linalg.qr(_jax_normal(key, (d, d)))
    q = q * np.sign(np.diagonal(r))[None, :]
    if np.linalg.slogdet(q)[0] < 0:  # reflect into SO(d)
        q[0, :] = -q[0, :]
    return q


def random_rotation(d: int, seed: Optional[int] = None, *, key=None,
                    rotation: str = "stewart") -> np.ndarray:
    """A random rotation ``Q`` in SO(d), Haar distributed (the ``M`` of [RVGA] eq. 91).

    Legacy mode (``seed``): ``np.random.seed(seed); Q = special_ortho_group.rvs(dim=d)``.
    ``rotation="stewart"`` (default) replays the Householder algorithm of SciPy <= 1.15, which the
    authors used; ``rotation="scipy"`` calls the installed SciPy (different numbers from SciPy 1.16
    on). JAX mode (``key``): QR of a Gaussian matrix with the sign correction.

    Args:
      d: the dimension.
      seed: the legacy mode's seed (NumPy's global stream, the authors' protocol).
      key: a JAX PRNG key instead (JAX mode); give exactly one of ``seed`` and ``key``.
      rotation: ``"stewart"`` or ``"scipy"``, as :func:`random_rotation`'s.

    Returns:
      ``Q``, a (d, d) NumPy array.
    """
    if _mode(seed, key) == "jax":
        return _jax_special_ortho(key, d)
    rs = _legacy_rng(seed)
    if rotation == "stewart":
        return _stewart_special_ortho(d, rs)
    if rotation == "scipy":
        from scipy.stats import special_ortho_group
        return special_ortho_group.rvs(dim=d, random_state=rs)
    raise ValueError(f"rotation must be 'stewart' or 'scipy', got {rotation!r}")


def _jax_normal(key, shape):
    """Standard normal draws from ``key`` as float64 NumPy."""
    return np.asarray(jax.random.normal(key, shape), dtype=np.float64)


def _jax_uniform(key, shape, lo=0.0, hi=1.0):
    """Uniform(lo, hi) draws from ``key`` as float64 NumPy."""
    return np.asarray(jax.random.uniform(key, shape, minval=lo, maxval=hi), dtype=np.float64)


def _jax_mvn(key, mean, cov, n):
    """``n`` draws of N(mean, cov) from ``key`` (Cholesky factor), as float64 NumPy."""
    L = np.linalg.cholesky(np.asarray(cov, dtype=np.float64))
    return np.asarray(mean, dtype=np.float64) + _jax_normal(key, (n, len(mean))) @ L.T


# ---------------------------------------------------------------------------------------------
# Synthetic generators ([RVGA] eq. 91, [LRVGA] eqs. 48-49)
# ---------------------------------------------------------------------------------------------

def covariance(d: int, c: float, scale: float = 1.0, rotate: bool = True, normalize: bool = True,
               seed: Optional[int] = None, *, key=None, rotation: str = "stewart") -> np.ndarray:
    """Input covariance ``C = Q^T diag(v) Q`` of [RVGA] eq. (91) / [LRVGA] eq. (48).

    ``v_i = scale^2 / i^c`` (i = 1..d). With ``normalize`` the authors divide ``v`` by its
    *squared Euclidean norm* ``sum_i v_i^2`` (not by the trace: ``tr C = 1`` only for c = 0; [RVGA]
    §6 describes a per-class normalisation instead). ``Q`` is a random rotation (:func:`random_rotation`)
    when ``rotate`` and ``d > 1``; otherwise ``C = diag(v)`` and no random number is drawn.

    Args:
      d: the dimension.
      c: the decay exponent of the eigenvalues.
      scale: the scale of the eigenvalues (``v_1 = scale^2``).
      rotate: rotate by a random ``Q``.
      normalize: divide ``v`` by ``sum_i v_i^2``.
      seed: the legacy mode's seed (NumPy's global stream, the authors' protocol).
      key: a JAX PRNG key instead (JAX mode); give exactly one of ``seed`` and ``key``.
      rotation: ``"stewart"`` or ``"scipy"``, as :func:`random_rotation`'s.

    Returns:
      ``C``, (d, d).
    """
    vec = (1 / np.arange(1, d + 1) ** c) * scale**2
    if normalize:
        vec = vec / np.linalg.norm(vec) ** 2
    cov = np.diag(vec)
    if d > 1 and rotate:
        if seed is None and key is None:
            raise ValueError("a rotated covariance needs a seed or a key")
        Q = random_rotation(d, seed, key=key, rotation=rotation)
        cov = np.transpose(Q).dot(cov).dot(Q)
    return cov


def prior_mean(mu0: float, d: int) -> np.ndarray:
    """The experiments' prior mean ``mu_0 = mu0 * 1_d / sqrt(d)``, so that ``||mu_0|| = mu0``.

    Args:
      mu0: the norm of the mean.
      d: the dimension.

    Returns:
      The (d,) NumPy array.
    """
    return mu0 * np.ones(d) / np.sqrt(d)


class LogisticData(NamedTuple):
    """Output of :func:`logistic_data`.

    ``X`` (N', d) inputs and ``y`` (N',) labels in {0., 1.} in stream order (N' = 2 floor(N/2));
    ``theta_opt = C^{-1} (mean1 - mean0)``; ``cov`` the class covariance ``C``; ``mean0``/``mean1``
    the class means. ``rng`` is the legacy RandomState after the last draw (the authors' global
    stream continues from there), ``None`` in JAX mode.
    """

    X: np.ndarray
    y: np.ndarray
    theta_opt: np.ndarray
    cov: np.ndarray
    mean0: np.ndarray
    mean1: np.ndarray
    rng: Optional[np.random.RandomState] = None


def logistic_data(s: float, N: int, d: int, c: float, seed: Optional[int] = None, *, key=None,
                  scale: float = 1.0, rotate: bool = True, normalize: bool = True,
                  rotation: str = "stewart") -> LogisticData:
    """Two Gaussian classes at separation ``s`` (``LogisticRegObservations``; [RVGA] §6).

    Legacy protocol (``seed``), in the authors' order::

        C = covariance(d, c, scale, rotate, normalize, seed)
        np.random.seed(seed);   u = rand(d); u /= ||u||
                                mean0 = u s/2 (label 0), mean1 = -u s/2 (label 1)
        theta_opt = inv(C) (mean1 - mean0)
        np.random.seed(seed);   X0 = multivariate_normal(mean0, C, N//2)
        np.random.seed(seed+1); X1 = multivariate_normal(mean1, C, N//2)
        shuffle the pairs (y, x) with the global stream, which continues after X1

    Labels are deterministic by class, not Bernoulli(sig(theta^T x)). An odd ``N`` drops one
    sample, as in the authors' code. The experiments pass ``normalize=True``.

    Args:
      s: the separation of the class means.
      N: the number of samples (even).
      d: the dimension.
      c: the decay exponent of the covariance's eigenvalues (:func:`covariance`).
      seed: the legacy mode's seed (NumPy's global stream, the authors' protocol).
      key: a JAX PRNG key instead (JAX mode); give exactly one of ``seed`` and ``key``.
      scale, rotate, normalize: as :func:`covariance`'s.
      rotation: ``"stewart"`` or ``"scipy"``, as :func:`random_rotation`'s.

    Returns:
      A :class:`LogisticData`: ``X`` (N, d), ``y`` (N,), ``theta_opt``, ``cov``, the class means and ``rng``.
    """
    mode = _mode(seed, key)
    n_half = int(N / 2)
    if mode == "legacy":
        cov = covariance(d, c, scale, rotate, normalize, seed, rotation=rotation)
        rs = _legacy_rng(seed)
        mean_dir = rs.rand(d)
        u = mean_dir / np.linalg.norm(mean_dir)
    else:
        k_rot, k_dir, k0, k1, k_perm = jax.random.split(key, 5)
        cov = covariance(d, c, scale, rotate, normalize, key=k_rot)
        mean_dir = _jax_uniform(k_dir, (d,))
        u = mean_dir / np.linalg.norm(mean_dir)
    mean0 = u * s / 2
    mean1 = -u * s / 2
    theta_opt = np.linalg.inv(cov).dot(mean1 - mean0)
    if mode == "legacy":
        rs.seed(seed)
        X0 = rs.multivariate_normal(mean0, cov, n_half)
        rs.seed(seed + 1)
        X1 = rs.multivariate_normal(mean1, cov, n_half)
        # np.random.shuffle on the list of pairs performs the same swaps as on an index array.
        perm = np.arange(2 * n_half)
        rs.shuffle(perm)
    else:
        X0 = _jax_mvn(k0, mean0, cov, n_half)
        X1 = _jax_mvn(k1, mean1, cov, n_half)
        perm = np.asarray(jax.random.permutation(k_perm, 2 * n_half))
        rs = None
    X = np.concatenate((X0, X1))
    y = np.concatenate((np.zeros(n_half), np.ones(n_half)))
    return LogisticData(X[perm], y[perm], theta_opt, cov, mean0, mean1, rs)


class LinearData(NamedTuple):
    """Output of :func:`linear_data`: ``X`` (N, d), ``y`` (N,), ``theta_star`` (d,) of unit norm,
    ``cov`` the input covariance; ``rng`` the legacy RandomState after the last draw (or ``None``)."""

    X: np.ndarray
    y: np.ndarray
    theta_star: np.ndarray
    cov: np.ndarray
    rng: Optional[np.random.RandomState] = None


def linear_data(sigma: float, N: int, d: int, c: float, seed: Optional[int] = None, *, key=None,
                normalize: bool = True, scale: float = 1.0, rotate: bool = True,
                rotation: str = "stewart") -> LinearData:
    """Linear-regression data ``y = X theta* + N(0, sigma^2)`` ([LRVGA] eqs. 48-49).

    Legacy protocol (``LinearRegObservations``; the same seed is reused three times)::

        C = covariance(d, c, scale, rotate, normalize, seed)
        np.random.seed(seed); X = multivariate_normal(0, C, N)
        np.random.seed(seed); theta* = uniform(-1, 1, d); theta* /= ||theta*||
        y = X theta*;  if sigma > 0: np.random.seed(seed); y += normal(0, sigma, N)

    Args:
      sigma: the noise standard deviation (0: none).
      N: the number of samples.
      d: the dimension.
      c: the decay exponent of the covariance's eigenvalues (:func:`covariance`).
      seed: the legacy mode's seed (NumPy's global stream, the authors' protocol).
      key: a JAX PRNG key instead (JAX mode); give exactly one of ``seed`` and ``key``.
      normalize, scale, rotate: as :func:`covariance`'s.
      rotation: ``"stewart"`` or ``"scipy"``, as :func:`random_rotation`'s.

    Returns:
      A :class:`LinearData`: ``X`` (N, d), ``y`` (N,), ``theta_star``, ``cov`` and ``rng``.
    """
    mode = _mode(seed, key)
    if mode == "legacy":
        cov = covariance(d, c, scale, rotate, normalize, seed, rotation=rotation)
        rs = _legacy_rng(seed)
        X = rs.multivariate_normal(np.zeros((d,)), cov, N)
        rs.seed(seed)
        theta = rs.uniform(-1, 1, d)
    else:
        k_rot, k_x, k_t, k_n = jax.random.split(key, 4)
        cov = covariance(d, c, scale, rotate, normalize, key=k_rot)
        X = _jax_mvn(k_x, np.zeros(d), cov, N)
        theta = _jax_uniform(k_t, (d,), -1.0, 1.0)
        rs = None
    theta_star = theta / np.linalg.norm(theta)
    y = X.dot(theta_star)
    if sigma > 0:  # sigma <= 0: no noise, as in the authors' code
        if mode == "legacy":
            rs.seed(seed)
            noise = rs.normal(0, sigma, N).reshape(N,)
        else:
            noise = sigma * _jax_normal(k_n, (N,))
        y = y + noise
    return LinearData(X, y, theta_star, cov, rs)


def normalize_rows(X: np.ndarray, mode: str = "unit") -> np.ndarray:
    """Row normalisation of the covariance experiments ([LRVGA] Fig. 1, §5.1).

    ``mode="unit"``: every row to unit Euclidean norm (the [LRVGA] HEAD script, row by row as
    there). ``mode="mean"``: all rows divided by the mean row norm (the Dec-2021 script and the
    authors' ``read_LibSVM(rescaleX=True)``).

    Args:
      X: the rows, (n, d).
      mode: ``"unit"`` or ``"mean"``.

    Returns:
      The normalised (n, d) array.
    """
    X = np.array(X, dtype=np.float64)
    if mode == "unit":
        for i in range(X.shape[0]):
            X[i] = X[i] / np.linalg.norm(X[i])
        return X
    if mode == "mean":
        return X / np.mean(np.linalg.norm(X, axis=1))
    raise ValueError(f"mode must be 'unit' or 'mean', got {mode!r}")


class FACovData(NamedTuple):
    """Output of :func:`fa_covariance_data`.

    ``X`` (N, d) normalised samples, ``S`` (d, d) their uncentred second moment (the target of
    [LRVGA] Fig. 1), ``W`` (d, p) and ``psi`` (d,) the generating factors, ``cov`` the generating
    covariance ``diag(psi) + W W^T`` (before normalisation). After normalisation ``S`` is not exactly
    FA(p), so the minimal KL is > 0. ``rng`` is the legacy RandomState after the last draw: the
    HEAD script draws ``W_0`` from it right after ``X`` without reseeding.
    """

    X: np.ndarray
    S: np.ndarray
    W: np.ndarray
    psi: np.ndarray
    cov: np.ndarray
    rng: Optional[np.random.RandomState] = None


def fa_covariance_data(d: int, p: int, N: int, seed: Optional[int] = 1, *, key=None,
                       variant: str = "head") -> FACovData:
    """Samples of the FA covariance of the covariance-factorisation experiment ([LRVGA] Fig. 1).

    Legacy protocol (``XP_LRVGA_LargeScaleCovariance.py``; the script uses seed 1)::

        np.random.seed(seed); psi = uniform(size=(d, 1))
        np.random.seed(seed); W = multivariate_normal(0, I_p, d);  Cov = diag(psi) + W W^T
        np.random.seed(seed); X = multivariate_normal(0, Cov, N)

    ``variant="head"`` (HEAD, 2022-11): each row to unit norm, ``S = X^T X / N``.
    ``variant="dec2021"``: rows divided by the mean row norm, ``S = X^T X / N + 1e-12 I``.
    Pass ``seed=None, key=...`` for JAX mode (``X = z W^T + sqrt(psi) e``, no d x d factorisation).

    Args:
      d: the dimension.
      p: the rank of the factor.
      N: the number of samples.
      seed: the legacy mode's seed (NumPy's global stream, the authors' protocol).
      key: a JAX PRNG key instead (JAX mode); give exactly one of ``seed`` and ``key``.
      variant: ``"head"`` or ``"dec2021"``.

    Returns:
      A :class:`FACovData`: ``X`` (N, d), ``S`` (d, d), the true ``W``, ``psi`` and ``cov``, and ``rng``.
    """
    if variant not in ("head", "dec2021"):
        raise ValueError(f"variant must be 'head' or 'dec2021', got {variant!r}")
    if key is not None:
        seed = None
    mode = _mode(seed, key)
    if mode == "legacy":
        rs = _legacy_rng(seed)
        psi = rs.uniform(size=[d, 1])
        rs.seed(seed)
        W = rs.multivariate_normal(np.zeros(p), np.identity(p), (d))
        cov = np.diag(psi.reshape(d,)) + W.dot(W.T)
        rs.seed(seed)
        X = rs.multivariate_normal(np.zeros(d), cov, (N))
    else:
        k_psi, k_w, k_z, k_e = jax.random.split(key, 4)
        psi = _jax_uniform(k_psi, (d, 1))
        W = _jax_normal(k_w, (d, p))
        cov = np.diag(psi.reshape(d,)) + W.dot(W.T)
        z = _jax_normal(k_z, (N, p))
        e = _jax_normal(k_e, (N, d))
        X = z @ W.T + e * np.sqrt(psi.reshape(d,))
        rs = None
    if variant == "head":
        X = normalize_rows(X, "unit")
        S = X.T.dot(X) / N
    else:
        X = normalize_rows(X, "mean")
        S = X.T.dot(X) / N + 1e-12 * np.identity(d)
    return FACovData(X, S, W, psi.reshape(d,), cov, rs)


# ---------------------------------------------------------------------------------------------
# Real data (experiments/REPORT.md §1)
# ---------------------------------------------------------------------------------------------

class Dataset(NamedTuple):
    """A labelled data set: ``X`` (N, d) float64, ``y`` (N,) float64."""

    X: np.ndarray
    y: np.ndarray


def read_libsvm(path, n_features: Optional[int] = None) -> Dataset:
    """Read a LIBSVM / SVMlight sparse text file into dense arrays.

    Each line is ``label index:value index:value ...`` with 1-based, increasing indices; missing
    entries are 0. The dimension is ``n_features`` when given, else the **largest index over all
    records** (the authors' reader took the number of entries of the first record, which truncates
    sparse files). Labels are returned as read (no remapping); blank lines and
    ``#`` comments are skipped. Raises ``ValueError`` on a malformed line or an index out of range.

    Args:
      path: the file's path.
      n_features: the dimension (None: the largest index).

    Returns:
      A :class:`Dataset` of float64 ``X`` (n, d) and ``y`` (n,).
    """
    labels, rows = [], []
    max_index = 0
    with open(path, "r") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            try:
                labels.append(float(parts[0]))
                entries = {}
                for item in parts[1:]:
                    idx, val = item.split(":")
                    if idx == "qid":
                        continue
                    i = int(idx)
                    if i < 1:
                        raise ValueError(f"index {i} < 1 (LIBSVM indices are 1-based)")
                    entries[i] = float(val)
            except ValueError as err:
                raise ValueError(f"{path}:{lineno}: malformed LIBSVM line ({err})") from None
            if entries:
                max_index = max(max_index, max(entries))
            rows.append(entries)
    d = max_index if n_features is None else int(n_features)
    if max_index > d:
        raise ValueError(f"{path}: feature index {max_index} exceeds n_features={d}")
    X = np.zeros((len(rows), d))
    for r, entries in enumerate(rows):
        for i, v in entries.items():
            X[r, i - 1] = v
    return Dataset(X, np.asarray(labels, dtype=np.float64))


def _search_roots():
    here = Path(__file__).resolve().parent
    seen = []
    for base in [here, *here.parents, Path.cwd(), *Path.cwd().parents]:
        if base not in seen:
            seen.append(base)
    return seen


def find_data_file(name: str) -> Path:
    """Locate a data file: ``$JAXRVGA_DATA/name`` first, then ``shared/data/name`` in the package
    directory's parents and in the working directory's parents, then the copy bundled with the
    package (``jaxrvga/datasets/``: the LIBSVM ``breast-cancer_scale`` file, 60 KB). Raises
    ``FileNotFoundError`` listing what was tried.

    Args:
      name: the file's name.

    Returns:
      The :class:`~pathlib.Path` found.
    """
    tried = []
    env = os.environ.get(DATA_ENV)
    if env:
        cand = Path(env)
        cand = cand if cand.is_file() and cand.name == name else cand / name
        if cand.is_file():
            return cand
        tried.append(str(cand))
    for base in _search_roots():
        cand = base / "shared" / "data" / name
        if cand.is_file():
            return cand
        tried.append(str(cand))
    cand = Path(__file__).resolve().parent / "datasets" / name
    if cand.is_file():
        return cand
    tried.append(str(cand))
    raise FileNotFoundError(f"data file {name!r} not found; set {DATA_ENV} to its directory. "
                            f"Tried: {', '.join(tried[:6])}{' ...' if len(tried) > 6 else ''}")


def load_breast_cancer(path=None) -> Dataset:
    """LIBSVM ``breast-cancer_scale`` (683 x 10), the data of [LRVGA] Fig. 1 (lower right).

    Labels 2 (benign, 444 samples) map to 0 and 4 (malignant, 239 samples) to 1. Features are the
    LIBSVM-scaled values in [-1, 1], unnormalised (use :func:`normalize_rows` with ``"mean"`` for
    the authors' ``rescaleX``). ``path`` defaults to :func:`find_data_file`'s search.

    Args:
      path: the file's path (None: searched).

    Returns:
      A :class:`Dataset`: ``X`` (683, 10), ``y`` (683,) in {0, 1}.
    """
    path = find_data_file(BREAST_CANCER_FILE) if path is None else path
    X, raw = read_libsvm(path, n_features=10)
    if not np.all((raw == 2) | (raw == 4)):
        raise ValueError(f"{path}: breast-cancer labels must be 2 or 4, got {np.unique(raw)}")
    return Dataset(X, (raw == 4).astype(np.float64))


def load_digits_pair(a: int = 3, b: int = 5) -> Dataset:
    """scikit-learn's 8x8 handwritten digits restricted to classes ``a`` (label 0) and ``b`` (1).

    A small bundled stand-in for the USPS 3-vs-5 task of [KLPROX] Table 3 (USPS itself is 16x16,
    1540 samples, and is not bundled). Pixels are scaled from 0..16 to [0, 1]; 64 features.
    Requires scikit-learn (``pip install scikit-learn`` or the ``experiments`` extra).

    Args:
      a: the digit of label 0.
      b: the digit of label 1.

    Returns:
      A :class:`Dataset`: ``X`` (n, 64), ``y`` (n,) in {0, 1}.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("load_digits_pair needs scikit-learn: pip install scikit-learn "
                          "(or pip install 'jaxrvga[experiments]')") from err
    if a == b:
        raise ValueError("a and b must differ")
    digits = load_digits()
    keep = (digits.target == a) | (digits.target == b)
    X = digits.data[keep].astype(np.float64) / 16.0
    y = (digits.target[keep] == b).astype(np.float64)
    return Dataset(X, y)


__all__ = ["covariance", "random_rotation", "prior_mean", "logistic_data", "LogisticData",
           "linear_data", "LinearData", "fa_covariance_data", "FACovData", "normalize_rows",
           "read_libsvm", "find_data_file", "load_breast_cancer", "load_digits_pair", "Dataset"]
