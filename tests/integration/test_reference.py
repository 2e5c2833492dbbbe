"""Results that must not move: the filters against trajectories recorded before the one-filter-layer rewrite.

``tests/integration/data/reference_filters.npz`` holds the means after every step and the final covariance or
factors of 27 configurations (``tests/integration/data/reference_cases.py``), recorded with the code of commit
cc06f81 by ``tests/integration/data/make_reference.py``. Dense filters and ``lrvga(..., published=True)`` must
reproduce them to rounding (the programs are compiled differently, so not bit for bit).
"""
import os
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr

HERE = os.path.join(os.path.dirname(__file__), "data")
sys.path.insert(0, HERE)
from reference_cases import CASES, problem  # noqa: E402

REF = np.load(os.path.join(HERE, "reference_filters.npz"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_filter_reproduces_recorded_trajectory(name):
    kind, build = CASES[name]
    X, y, mu0, P0, W0, psi0, key = problem(kind)
    flt, state = build(jr, X, y, mu0, P0, W0, psi0, key)
    final, means = jr.run(flt, state, X, y, trace_fn=jr.trace_mean)
    ref = REF[name + "/means"]
    scale = np.max(np.abs(ref)) + 1.0
    np.testing.assert_allclose(np.asarray(means), ref, rtol=0, atol=1e-9 * scale)
    for field in ("cov", "W", "psi"):
        key_ = f"{name}/{field}"
        if key_ in REF.files:
            np.testing.assert_allclose(np.asarray(getattr(final, field)), REF[key_], rtol=0,
                                       atol=1e-9 * (np.max(np.abs(REF[key_])) + 1.0))
    assert bool(jnp.all(final.info.converged)) or name.startswith("rvga_mc")
