"""Oracle tests run in float64; float32 tests ask for float32 explicitly.

Shared by the test modules (``from conftest import ...``): the catalogue of filters
(:data:`LOGISTIC_FILTERS`, :data:`FULL_FILTERS`, :data:`LOWRANK_SCHEMES`, :func:`lowrank_filter`,
:func:`lowrank_variants`), the package's beliefs (:func:`package_beliefs`),
the relative error :func:`rel`, :func:`outer` (``W W^T``, the comparable part of a low-rank factor)
and :func:`run_optimised` (``jr.run`` of a long stream, its one program compiled at LLVM -O2).

One BLAS thread: on a loaded 2-core machine a multithreaded OpenBLAS (used by NumPy, SciPy and
jax's CPU LAPACK kernels) oversubscribes the cores and runs small factorisations many times slower.
"""
import gc
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

#: Python's cyclic garbage collector run 14 times less often: tracing and lowering allocate millions
#: of small objects, and at the default thresholds (700, 10, 10) 304 tests (tests/schemes, beliefs,
#: test_filters, test_average, test_autodiff; one process, cached re-run) spent 11.3 s of 87 s in
#: 8,476 collections; at (10000, 10, 10), 3.4 s in 418. Memory is still released after each test
#: module (:func:`_release_compiled_code`).
gc.set_threshold(10_000, 10, 10)

#: XLA's CPU compiler set to compile fast (issue 48: the suite is bound by compiling, not running):
#: the elemental emitters in place of the MLIR fusion emitters, and LLVM at -O0. A d = 20 sampled
#: low-rank scan compiles in 1.1 s instead of 4.5, and the whole suite took 21.5 min instead of 46
#: (2 workers). The HLO passes are the same; the machine code differs at rounding level.
#: ``JAXRVGA_TEST_XLA_DEFAULT=1`` keeps XLA's defaults (the library's users' compiler), under which
#: tests/integration/test_other_isa.py runs its float32 streams. ``USER_XLA_FLAGS``: the flags as given,
#: without the suite's own (which pytest-xdist's workers inherit from the parent process).
#: A jaxlib whose XLA lacks a flag aborts on it, so the flags are tried first in a subprocess (1 s,
#: once: the workers inherit the variable).
FAST_COMPILE_FLAGS = "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=0"
USER_XLA_FLAGS = " ".join(os.environ.get("XLA_FLAGS", "").replace(FAST_COMPILE_FLAGS, "").split())
SUITE_XLA_FLAGS = f"{USER_XLA_FLAGS} {FAST_COMPILE_FLAGS}".strip()


def _xla_accepts(flags: str) -> bool:
    """Whether this jaxlib's XLA starts with ``XLA_FLAGS=flags`` (an unknown flag aborts the process)."""
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], env=env,
                          capture_output=True).returncode == 0


if os.environ.get("JAXRVGA_TEST_XLA_DEFAULT") == "1":
    os.environ["XLA_FLAGS"] = USER_XLA_FLAGS
elif FAST_COMPILE_FLAGS not in os.environ.get("XLA_FLAGS", "") and _xla_accepts(SUITE_XLA_FLAGS):
    os.environ["XLA_FLAGS"] = SUITE_XLA_FLAGS


def with_host_devices(n: int) -> str:
    """``XLA_FLAGS`` for a child process with ``n`` host devices: the flags in effect (the suite's and the
    user's) kept, so that the child compiles as the suite does, and the device count added."""
    return f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={n}".strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)

#: JAX's persistent compilation cache, under the clone (ignored by git, removed by ``make clean``):
#: a second run reads the compiled programs instead of compiling them (the suite is bound by XLA's
#: compilation). ``JAX_COMPILATION_CACHE_DIR`` sets another place; an empty value turns it off.
#: Every program is written (``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS``, default here 0: the
#: suite's many small programs add up; re-runs of test_factor_analysis + test_em_tolerance took 58 s
#: with a 0.1 s threshold, 32 s with none, against 120 s uncached). The cache key holds
#: ``XLA_FLAGS``: a pytest subprocess that sets them (test_other_isa) gets its own entries. Both settings
#: are exported, so that the tests' child processes that compile (the memory probes of the experiments,
#: the sharded and multi-process runs) share the cache too: JAX reads them from the environment.
CACHE_DIR = os.environ.get("JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".cache" / "jax"))
if CACHE_DIR:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = CACHE_DIR
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    jax.config.update("jax_compilation_cache_dir", CACHE_DIR)
    jax.config.update("jax_persistent_cache_min_compile_time_secs",
                      float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))

import numpy as np  # noqa: E402

import jaxrvga as jr  # noqa: E402

LOGISTIC = jr.models.logistic()


def package_beliefs():
    """Every belief class that :mod:`jaxrvga.beliefs` exports (a class with a ``state_type``), sorted by
    name: a new belief is picked up by its export line and runs through the conformance tests with its
    own ``example(dim, rng)``."""
    classes = {getattr(jr.beliefs, n) for n in jr.beliefs.__all__}
    return sorted((c for c in classes if isinstance(c, type) and hasattr(c, "state_type")), key=lambda c: c.__name__)


#: The full-covariance filters of the logistic model (labels y in {0, 1}): name -> constructor.
LOGISTIC_FILTERS = {
    "rvga_implicit": lambda: jr.rvga(LOGISTIC, "implicit"),
    "rvga_explicit": lambda: jr.rvga(LOGISTIC, "explicit"),
    "ekf": lambda: jr.ekf(LOGISTIC),
    "qkf": lambda: jr.qkf(),
    "mirror_prox": lambda: jr.mirror_prox(LOGISTIC),
}
#: The same plus the Kalman filter (linear-Gaussian, noise variance 1).
FULL_FILTERS = {**LOGISTIC_FILTERS, "kalman": lambda: jr.kalman(1.0)}


def _applies(scheme: str) -> bool:
    try:
        jr.lrvga(LOGISTIC, rank=2, scheme=scheme)
    except ValueError:
        return False
    return True


#: The schemes of ``jr.lrvga`` on the logistic model, from the library's own table
#: (``jr.filters.SCHEMES``): a scheme added there is tested by every test that takes this list.
LOWRANK_SCHEMES = tuple(s for s in jr.filters.SCHEMES if _applies(s))


def lowrank_filter(scheme, rank, model=LOGISTIC, num_samples=3, **kw):
    """``jr.lrvga(model, rank=rank, scheme=scheme, **kw)``; ``num_samples`` applies to ``sampled`` only."""
    return jr.lrvga(model, rank=rank, scheme=scheme, num_samples=num_samples if scheme == "sampled" else None,
                    **kw)


def lowrank_variants(rank):
    """One ``jr.lrvga`` of rank ``rank`` per model kind and scheme (linear, GLMs, nonlinear), by name."""
    models, lrvga = jr.models, jr.lrvga
    h = lambda th, x: jnp.tanh(x @ th)  # noqa: E731
    return {
        "linear": lrvga(models.linear_gaussian(1.0), rank=rank, inner_loops=2, process_noise=0.01),
        "implicit": lrvga(models.logistic(), rank=rank),
        "explicit": lrvga(models.logistic(), rank=rank, scheme="explicit"),
        "extragrad": lrvga(models.logistic(), rank=rank, scheme="extragrad", update_cov_twice=True),
        "poisson": lrvga(models.poisson(), rank=rank),
        "ekf_logistic": lrvga(models.logistic(), rank=rank, scheme="ekf", inner_loops=3),
        "ekf_nonlinear": lrvga(models.nonlinear(h, models.poisson_family()), rank=rank, scheme="ekf"),
        "sampled_nonlinear": lrvga(models.nonlinear(h, models.bernoulli()), rank=rank, scheme="sampled",
                                    num_samples=10),
        "sampled_logistic": lrvga(models.logistic(), rank=rank, scheme="sampled", num_samples=4),
    }


def with_fa_step(flt, fa_step):
    """The low-rank filter ``flt`` with its projection replaced by ``fa_step(W, psi, X) -> (W, psi)``
    (the belief's hook for oracle tests)."""
    spec = flt.spec
    return jr.build(spec.belief._replace(fa_step=fa_step), spec.scheme, spec.model, spec.dynamics)


def outer(W):
    """``W W^T``: what a low-rank factor defines. ``W`` itself is defined only up to an orthogonal
    rotation of its columns (the spectral start takes eigenvectors, whose signs and, for repeated
    eigenvalues, whose basis the eigensolver chooses), so two programs compared by ``W`` entry by
    entry may differ by a column's sign; compare ``outer(W)`` instead."""
    W = np.asarray(W, np.float64)
    return W @ W.T


def run_together(*runs, trace_fn=None):
    """``jr.run`` of each ``(flt, state, xs, ys)`` of ``runs``, all scans (``jr.scan``, what ``jr.run``
    compiles) in one compiled program: one compilation instead of one per run. A list of
    ``(final_state, trace)``."""
    filters = [flt for flt, *_ in runs]
    together = jax.jit(lambda data: [jr.scan(flt, *args, trace_fn) for flt, args in zip(filters, data)])
    return together([tuple(jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args) for _, *args in runs])


#: XLA options for ONE program, over the process's ``XLA_FLAGS`` (``jax.jit(compiler_options=...)``):
#: LLVM at -O2 again where the suite's flags put it at -O0, for the programs whose running, not their
#: compiling, is the cost (a scan of 1e5 steps). None under XLA's defaults (``JAXRVGA_TEST_XLA_DEFAULT=1``,
#: test_other_isa's subprocess): the program is then compiled as the users' programs are. The cache key
#: of the persistent compilation cache holds these options.
OPTIMISED_COMPILER_OPTIONS = ({"xla_backend_optimization_level": 2}
                              if FAST_COMPILE_FLAGS in os.environ.get("XLA_FLAGS", "") else None)
_SCAN_OPTIMISED = jax.jit(lambda flt, state, xs, ys, trace_fn: jr.scan(flt, state, xs, ys, trace_fn),
                          static_argnums=(0, 4), compiler_options=OPTIMISED_COMPILER_OPTIONS)


def run_optimised(flt, state, xs, ys, trace_fn=None):
    """``jr.run(flt, state, xs, ys, trace_fn)`` (the same scan, ``jr.scan``, and the filter's own input
    check) compiled with :data:`OPTIMISED_COMPILER_OPTIONS`: for a long stream, where the suite's
    fast-compiling flags cost more in running than they save in compiling (the sampled L-RVGA over
    1e5 float32 steps: 2.1 s compile + 32.5 s run at -O0, 4.3 s + 24.6 s at -O2)."""
    if flt.check is not None:
        flt.check(state, xs, ys)
    return _SCAN_OPTIMISED(flt.program(), state, xs, ys, trace_fn)


def rel(a, b):
    """The relative error ``||a - b|| / ||b||`` (Frobenius norm), computed in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """Drop JAX's caches of compiled code after each test module.

    XLA on CPU maps every compiled kernel into memory (about 300 mappings for one compiled
    implicit R-VGA run), and JAX keeps compiled executables for the life of the process: the
    whole suite in one process went past Linux's default ``vm.max_map_count`` (65530) and
    crashed inside a compile (SIGSEGV / SIGABRT in ``backend_compile_and_load``).
    """
    yield
    jax.clear_caches()
    gc.collect()


_FILE_SECONDS: dict = {}


def pytest_runtest_logreport(report):
    """Sum each test file's setup, call and teardown times (printed by :func:`pytest_terminal_summary`)."""
    name = report.nodeid.split("::")[0]
    _FILE_SECONDS[name] = _FILE_SECONDS.get(name, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    """Seconds per test file, longest first: where the suite's time goes (compilation included)."""
    if _FILE_SECONDS:
        rows = sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])
        terminalreporter.write_line("seconds per test file: " + ", ".join(f"{k.split('/')[-1]} {v:.0f}" for k, v in rows))


def small_mlp(num_outputs):
    """A 3-4-k tanh network ``h(theta, x)`` on a flat vector, k = ``num_outputs`` (a scalar for k = 1),
    and its weight count."""
    sizes = [(3, 4), (4,), (4, num_outputs), (num_outputs,)]
    count = sum(int(np.prod(s)) for s in sizes)

    def h(theta, x):
        parts, i = [], 0
        for s in sizes:
            n = int(np.prod(s))
            parts.append(theta[i:i + n].reshape(s))
            i += n
        W1, b1, W2, b2 = parts
        out = jnp.tanh(x @ W1 + b1) @ W2 + b2
        return out[0] if num_outputs == 1 else out

    return h, count


def rewrite_saved_nodes(path, edit):
    """The file ``path`` of :func:`jaxrvga.io.save` (``.npz``) written again with ``edit(node)`` applied to
    every dict of its stored tree (a class node has ``module``, ``qualname``, ``fields`` and ``children``):
    a file as an older version of the library wrote it, or a corrupted one."""
    import json

    import numpy as np

    from jaxrvga import io

    with np.load(path, allow_pickle=False) as npz:
        entries = {k: npz[k] for k in npz.files}
    meta = json.loads(str(entries[io.META_KEY]))

    def walk(node):
        if isinstance(node, dict):
            edit(node)
            nodes = node.values()
        else:
            nodes = node if isinstance(node, list) else ()
        for child in nodes:
            walk(child)

    walk(meta)
    entries[io.META_KEY] = np.array(json.dumps(meta))
    np.savez(path, **entries)
