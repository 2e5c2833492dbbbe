"""Reference trajectories of the filters as they were before the one-filter-layer rewrite (commit cc06f81).

Run once with that commit's code: ``python tests/integration/data/make_reference.py`` writes ``reference_filters.npz``.
tests/integration/test_reference.py checks that today's dense filters and ``lrvga(..., published=True)`` still
produce these numbers (to rounding; the programs are compiled differently, so not bit for bit).
"""
import os
import sys

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

import jaxrvga as jr  # noqa: E402

from reference_cases import CASES, problem  # noqa: E402


def main():
    out = {}
    for name, (kind, build) in CASES.items():
        X, y, mu0, P0, W0, psi0, key = problem(kind)
        flt, state = build(jr, X, y, mu0, P0, W0, psi0, key)
        final, means = jr.run(flt, state, X, y, trace_fn=jr.trace_mean)
        out[name + "/means"] = np.asarray(means)
        for field in ("cov", "W", "psi"):
            if hasattr(final, field):
                out[f"{name}/{field}"] = np.asarray(getattr(final, field))
    np.savez(os.path.join(os.path.dirname(__file__), "reference_filters.npz"), **out)
    print(len(out), "arrays")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    main()
