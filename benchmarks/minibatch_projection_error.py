"""The projection of a 10-class minibatch step: the thin residual against the d x m product of before.

    python -m benchmarks.minibatch_projection_error [--steps 0 10 40]

On the network of :mod:`benchmarks.bench_minibatch` (float32, rank 10, minibatches of 16: 160 new
columns a step), the pending factor ``[W, X]`` of the update after ``t`` updates is projected
three ways: the library's default (the thin residual, float32), the former product ``L V_r``
(float32, same eigenvectors) and that product in NumPy float64 (the reference). Printed: the relative
Frobenius error of the precision ``W W^T + diag(psi)`` against the reference (from p x p Grams,
in float64) and the largest relative error of ``psi``.
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import jaxrvga as jr
from benchmarks import bench_minibatch as bm
from jaxrvga import schemes
from jaxrvga.kernels import lowrank


def by_product(W, psi, X, gram):
    """The start as before this change: ``W_0 = L V_p``, ``psi_0 = psi + rowsum((L V_r)^2)``."""
    p = W.shape[1]
    lam, V = lowrank.symmetric_eigh(gram)
    q = gram.shape[0]
    L = jnp.concatenate([W, X], axis=1)
    R = L @ V[:, :q - p]
    return L @ V[:, q - p:], jnp.maximum(psi + jnp.sum(R * R, axis=1), 0.0)


def by_product_f64(W, psi, X):
    """:func:`by_product` in NumPy float64 (the Gram and its eigenvectors too)."""
    p = W.shape[1]
    L = np.concatenate([W, X], axis=1)
    B = L / np.sqrt(psi)[:, None]
    lam, V = np.linalg.eigh(B.T @ B)
    q = L.shape[1]
    R = L @ V[:, :q - p]
    return L @ V[:, q - p:], psi + np.sum(R * R, axis=1)


def frobenius_error(W, psi, V, e):
    """``|W W^T + diag(psi) - V V^T - diag(e)|_F / |V V^T + diag(e)|_F`` in float64, from Grams."""
    W, psi, V, e = (np.asarray(a, np.float64) for a in (W, psi, V, e))
    def inner(A, a, B, b):  # <A A^T + diag a, B B^T + diag b>
        return np.sum((A.T @ B) ** 2) + a @ np.sum(B * B, 1) + b @ np.sum(A * A, 1) + a @ b
    diff = inner(W, psi, W, psi) + inner(V, e, V, e) - 2 * inner(W, psi, V, e)
    return np.sqrt(max(diff, 0.0) / inner(V, e, V, e))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[0, 10, 40])
    a = parser.parse_args()
    Xtr, ytr, _, _ = bm.digits()
    theta0, h = bm.mlp(jax.random.PRNGKey(0))
    model, flt, state = bm.filter_and_state(h, theta0, 16, "ekf", {})
    belief = flt.spec.belief
    batched = jr.models.minibatch(model)
    xs, ys = jnp.asarray(Xtr[:16 * 75]).reshape(75, 16, -1), jnp.asarray(ytr[:16 * 75]).reshape(75, 16)
    print("| updates before | rel. Frobenius error of the precision, thin (f32) | the product (f32) | "
          "max rel. error of psi, thin | the product | dropped |")
    print("|---|---|---|---|---|---|")
    done = 0
    for t in a.steps:
        if t > done:
            state = jr.scan(flt, state, xs[done:t], ys[done:t])[0]
            done = t
        inc = schemes.ekf_site(batched, state, xs[t], ys[t])
        pre, _ = belief.absorb(state, inc.X, inc.c, inc.gradient(), inc.prior_gain)
        out, (dropped, _, _) = belief.finish(pre)
        W, X = pre.W
        W32, psi32 = by_product(W, pre.psi, X, pre.gram)
        W64, psi64 = by_product_f64(*(np.asarray(v, np.float64) for v in (W, pre.psi, X)))
        rel = lambda s: float(np.max(np.abs(np.asarray(s, np.float64) - psi64) / psi64))  # noqa: E731
        print(f"| {t} | {frobenius_error(out.W, out.psi, W64, psi64):.1e} | {frobenius_error(W32, psi32, W64, psi64):.1e} "
              f"| {rel(out.psi):.1e} | {rel(psi32):.1e} | {float(dropped):.3f} |", flush=True)


if __name__ == "__main__":
    main()
