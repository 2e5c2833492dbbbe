"""A sharded L-RVGA over two processes x two CPU devices equals the single-process run.

The test starts two worker processes (``tests/integration/multiprocess_worker.py``) that join
``jax.distributed`` through a coordinator on the loopback address, shard the filter's state
along d over the four devices, gather the result and write it to .npz files. It skips, with
the reason, when the installed jax cannot run distributed CPU collectives.
"""
import ipaddress
import os
import socket
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr

D, RANK, T = 32, 2, 20
TIMEOUT_S = 120
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository
UNAVAILABLE = 77  # multiprocess_worker.UNAVAILABLE


def problem():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((T, D)) / np.sqrt(D) * 3.0
    theta = rng.standard_normal(D)
    y = (rng.uniform(size=T) < 1 / (1 + np.exp(-X @ theta))).astype(float)
    return X, y


def make_filter():
    return jr.lrvga(jr.models.logistic(), rank=RANK, inner_loops=2)


def initial_state(flt):
    W0, psi0 = jr.kernels.lowrank.init_factors(jax.random.PRNGKey(1), D, RANK, 1.0, eps=1e-2)
    return flt.init(jnp.zeros(D), W0, psi0)


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env():
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}  # gRPC honours proxies
    from conftest import with_host_devices  # here: the workers import this module without tests/ on their path
    env.update(XLA_FLAGS=with_host_devices(2), JAX_PLATFORMS="cpu", OPENBLAS_NUM_THREADS="1")
    return env


def run_workers(tmp_path, n=2):
    """Start ``n`` workers; kill them all when one fails or the time runs out."""
    port, prefix = free_loopback_port(), str(tmp_path / "out")
    logs = [open(tmp_path / f"worker{i}.log", "w+") for i in range(n)]
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "multiprocess_worker.py"),
                               ROOT, str(port), str(n), str(i), prefix],
                              env=worker_env(), cwd=ROOT, stdout=logs[i],
                              stderr=subprocess.STDOUT) for i in range(n)]
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    texts = []
    for f in logs:
        f.seek(0)
        texts.append(f.read())
        f.close()
    return [p.returncode for p in procs], texts, prefix


def test_two_processes_equal_single_process(tmp_path):
    host = socket.gethostbyname(socket.gethostname())
    if not ipaddress.ip_address(host).is_loopback:
        pytest.skip(f"gloo listens on the address of this host's name ({host}), not on loopback")
    codes, logs, prefix = run_workers(tmp_path)
    if UNAVAILABLE in codes:
        pytest.skip(logs[codes.index(UNAVAILABLE)].strip().splitlines()[-1])
    assert codes == [0, 0], "\n\n".join(f"worker {i} (exit {c}):\n{t[-3000:]}"
                                        for i, (c, t) in enumerate(zip(codes, logs)))
    got = [np.load(f"{prefix}{i}.npz") for i in range(2)]
    for key in got[0].files:  # every process holds the same gathered values
        np.testing.assert_array_equal(got[0][key], got[1][key], err_msg=key)
    assert got[0]["traces"] >= 1

    from conftest import outer  # here: the workers import this module without tests/ on their path
    flt = make_filter()
    X, y = problem()
    ref, ref_info = jr.run(flt, initial_state(flt), X, y, jr.trace_info)
    assert bool(np.all(ref_info.converged))
    for run in ("final", "again"):
        for field in ("mean", "W", "psi"):
            have, want = got[0][f"{run}/{field}"], np.asarray(getattr(ref, field))
            if field == "W":  # W only up to a rotation of its columns: compare W W^T
                have, want = outer(have), outer(want)
            assert np.all(np.isfinite(want))
            np.testing.assert_allclose(have, want, rtol=1e-12,
                                       atol=1e-12 * np.max(np.abs(want)), err_msg=f"{run}.{field}")
        assert int(got[0][f"{run}/step"]) == T
    np.testing.assert_array_equal(got[0]["info/converged"], np.asarray(ref_info.converged))
