"""L-RVGA accurate by default: the default projection against ``published=True`` (issue 17).

Three problems, each run with the published L-RVGA (Algorithm 1 from ``W_{t-1}``, mean step with
the projected precision) and with the default (spectral warm start of the projection, mean step
with the unprojected precision; also with ``buffer=9``, one projection per 10 observations,
where ``p + 9 <= d``):

* a correlated linear-Gaussian problem (d = 20, N = 300, prior variance 9): KL(q || exact
  posterior) and the relative error of the mean, for p = 20, 10, 5, 2;
* a tanh MLP regression (385 parameters, 32 hidden units) on sklearn's diabetes data, EKF scheme,
  p = 10, prior variance 1: test RMSE against the full-covariance EKF;
* a linear model written as ``nonlinear`` with the sampled scheme (d = 20, p = 5, 10
  observations): the norm of the mean against the exact posterior's.

``quick``: the linear problem at N = 100 and p in {20, 5}, an MLP of 8 hidden units, and only the
variants the tests check (:data:`QUICK_VARIANTS`): each variant is a program of its own to compile.
"""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxrvga as jr
from experiments.common import cli, make_split, write_csv

VARIANTS = {"published": dict(published=True), "published, 3 loops": dict(published=True, inner_loops=3),
            "default": dict(), "default, 1 loop": dict(inner_loops=1), "default, 3 loops": dict(inner_loops=3),
            "default, buffer 9": dict(buffer=9)}
#: The variants of the quick run: those tests/reproduction/test_experiments_default.py checks.
QUICK_VARIANTS = ("published", "default")


def exact_posterior(X, y, prior_var, noise_var=1.0):
    prec = np.eye(X.shape[1]) / prior_var + X.T @ X / noise_var
    cov = np.linalg.inv(prec)
    return cov @ X.T @ y / noise_var, cov


def gaussian_kl(m, P, m_ref, P_ref):
    """KL(N(m, P) || N(m_ref, P_ref))."""
    prec = np.linalg.inv(P_ref)
    return 0.5 * (np.trace(prec @ P) + (m_ref - m) @ prec @ (m_ref - m) - len(m)
                  + np.linalg.slogdet(P_ref)[1] - np.linalg.slogdet(P)[1])


def correlated_linear(d=20, N=300, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d))
    X = rng.multivariate_normal(np.zeros(d), A @ A.T / d + 0.1 * np.eye(d), size=N)
    return X, X @ rng.normal(size=d) + rng.normal(size=N)


def linear_table(ranks, N, variants=VARIANTS):
    X, y = correlated_linear(N=N)
    d, prior_var = X.shape[1], 9.0
    m, P = exact_posterior(X, y, prior_var)
    rows = []
    for p in ranks:
        W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(0), d, p, prior_var=prior_var)
        for name, kw in variants.items():
            if p + kw.get("buffer", 0) > d:
                continue  # the buffer's columns do not fit beside rank p
            flt = jr.lrvga(jr.models.linear_gaussian(), rank=p, **kw)
            s, _ = jr.run(flt, flt.init(jnp.zeros(d), W0, psi0), X, y)
            cov = np.asarray(jr.kernels.lowrank.to_dense_covariance(s.W, s.psi))
            mean = np.asarray(s.mean)
            rows.append((p, name, gaussian_kl(mean, cov, m, P), np.linalg.norm(mean - m) / np.linalg.norm(m)))
    return rows


def mlp(hidden):
    def h(theta, x):
        W1 = theta[:10 * hidden].reshape(10, hidden)
        b1, w2 = theta[10 * hidden:11 * hidden], theta[11 * hidden:12 * hidden]
        return jnp.tanh(x @ W1 + b1) @ w2 + theta[12 * hidden]
    return h, 12 * hidden + 1


def mlp_table(quick, variants=VARIANTS):
    from sklearn.datasets import load_diabetes
    X, y = load_diabetes(return_X_y=True)
    y = (y - y.mean()) / y.std()
    split = make_split(X, y, seed=0, train_fraction=0.7, standardise=True)
    Xtr, ytr, Xte, yte = (jnp.asarray(a) for a in (split.Xtr, split.ytr, split.Xte, split.yte))
    h, d = mlp(8 if quick else 32)
    model = jr.models.nonlinear(h, jr.models.gaussian(0.5))
    key = jax.random.PRNGKey(0)
    theta0 = 0.3 * jax.random.normal(key, (d,))

    def rmse(mean):
        return float(jnp.sqrt(jnp.mean((jax.vmap(h, (None, 0))(mean, Xte) - yte) ** 2)))

    full = jr.ekf(model)
    s, _ = jr.run(full, full.init(theta0, jnp.eye(d)), Xtr, ytr)
    rows = [("full-covariance EKF", rmse(s.mean), bool(s.info.converged))]
    W0, psi0 = jr.lowrank.init_factors(key, d, 10, prior_var=1.0)
    for name, kw in variants.items():
        flt = jr.lrvga(model, rank=10, scheme="ekf", **kw)
        s, info = jr.run(flt, flt.init(theta0, W0, psi0), Xtr, ytr, trace_fn=jr.trace_info)
        rows.append((f"L-RVGA p=10, {name}", rmse(s.mean), bool(jnp.all(info.converged))))
    return rows, d


def sampled_table():
    rng = np.random.default_rng(1)
    d, N, p = 20, 10, 5
    X = rng.normal(size=(N, d))
    y = X @ rng.normal(size=d) + rng.normal(size=N)
    m, _ = exact_posterior(X, y, 1.0)
    model = jr.models.nonlinear(lambda th, x: x @ th)
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(0), d, p, prior_var=1.0)
    rows = [("exact posterior", float(np.linalg.norm(m)))]
    for name in ("published", "default"):
        flt = jr.lrvga(model, rank=p, scheme="sampled", **VARIANTS[name])
        s, _ = jr.run(flt, flt.init(jnp.zeros(d), W0, psi0, key=jax.random.PRNGKey(1)), X, y)
        rows.append((name, float(jnp.linalg.norm(s.mean))))
    return rows


def run(quick: bool, out: Path) -> dict:
    variants = {k: VARIANTS[k] for k in QUICK_VARIANTS} if quick else VARIANTS
    lin = linear_table((20, 5) if quick else (20, 10, 5, 2), 100 if quick else 300, variants)
    write_csv(out / "lrvga_default_linear.csv", ["rank", "variant", "kl", "mean_rel_error"], lin)
    nn, d = mlp_table(quick, variants)
    write_csv(out / "lrvga_default_mlp.csv", ["method", "test_rmse", "all_converged"], nn)
    smp = sampled_table()
    write_csv(out / "lrvga_default_sampled.csv", ["method", "mean_norm"], smp)
    kl = {(p, name): k for p, name, k, _ in lin}
    summary = {f"kl_p{p}_{name.replace(', ', '_').replace(' ', '_')}": v for (p, name), v in kl.items()}
    summary.update({f"rmse_{name}": r for name, r, _ in nn})
    summary.update({f"sampled_norm_{name}": v for name, v in smp})
    summary["mlp_params"] = d
    return summary


if __name__ == "__main__":
    cli(run, __doc__)
