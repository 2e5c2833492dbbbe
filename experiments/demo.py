"""The main job (`make demo`): Bayesian logistic regression in one pass over a data stream.

Default: the breast-cancer data (683 x 10, LIBSVM scale, plus an intercept), a random 70/30
split, prior N(0, sigma0^2 I). Compares R-VGA implicit and explicit, the EKF, the QKF and the
batch Laplace approximation on the MC-KL to the posterior (R-VGA eqs. 92-94, common random
numbers), the held-out log-loss and accuracy, and writes a plot of the KL along the stream.

    python -m experiments.demo [--data PATH | --synthetic] [--sigma0 10] [--out DIR]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)


import numpy as np  # noqa: E402

import jaxrvga as jr  # noqa: E402
from jaxrvga.baselines import data
from jaxrvga.baselines import metrics  # noqa: E402


def load(args):
    if args.synthetic:
        ds = data.logistic_data(s=2.0, N=1000, d=20, c=1, seed=1)
        X, y = ds.X, ds.y
    else:
        X, y = data.load_breast_cancer(args.data)
        X = np.hstack([X, np.ones((X.shape[0], 1))])  # intercept
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(y))
    n_train = int(0.7 * len(y))
    return X[order[:n_train]], y[order[:n_train]], X[order[n_train:]], y[order[n_train:]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="LIBSVM breast-cancer file (default: shared/data)")
    parser.add_argument("--synthetic", action="store_true", help="use the R-VGA paper's two-class generator")
    parser.add_argument("--sigma0", type=float, default=10.0, help="prior standard deviation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="demo_output", help="folder for the plot and CSV")
    args = parser.parse_args(argv)

    Xtr, ytr, Xte, yte = load(args)
    n, d = Xtr.shape
    mu0, P0 = np.zeros(d), args.sigma0**2 * np.eye(d)
    z = metrics.base_normals(d, 300, seed=10)
    kl = jax.jit(lambda m, P: metrics.mc_kl_logistic(m, P, z, Xtr, ytr, mu0, P0))

    filters = {
        "R-VGA implicit": jr.rvga(jr.models.logistic(), "implicit"),
        "R-VGA explicit": jr.rvga(jr.models.logistic(), "explicit"),
        "EKF": jr.ekf(jr.models.logistic()),
        "QKF": jr.qkf(),
    }
    rows, curves = [], {}
    for name, flt in filters.items():
        t0 = time.perf_counter()
        state, (means, covs) = jr.run(flt, flt.init(mu0, P0), Xtr, ytr, lambda s, x, y: (s.mean, s.cov))
        state.mean.block_until_ready()
        elapsed = time.perf_counter() - t0
        curves[name] = np.asarray(jax.vmap(kl)(means, covs))
        rows.append((name, curves[name][-1], metrics.logistic_log_loss(state.mean, state.cov, Xte, yte),
                     np.mean((Xte @ state.mean > 0) == yte), elapsed))
    t0 = time.perf_counter()
    lap = jr.baselines.laplace.laplace(jr.models.logistic(), Xtr, ytr, mu0, P0)
    elapsed = time.perf_counter() - t0
    rows.append(("Laplace (batch)", kl(lap.mean, lap.cov), metrics.logistic_log_loss(lap.mean, lap.cov, Xte, yte),
                 np.mean((Xte @ lap.mean > 0) == yte), elapsed))

    source = "synthetic (R-VGA generator, s=2, d=20)" if args.synthetic else "breast-cancer (LIBSVM, + intercept)"
    print(f"Bayesian logistic regression, {source}: {n} training / {len(yte)} test points, d = {d}, "
          f"prior N(0, {args.sigma0:g}^2 I), one pass")
    print(f"{'method':<18}{'MC-KL (t=N)':>14}{'test log-loss':>15}{'test acc.':>11}{'time [s]':>10}")
    for name, k, loss, acc, sec in rows:
        print(f"{name:<18}{float(k):>14.3f}{float(loss):>15.4f}{float(acc):>11.3f}{sec:>10.2f}")
    print("MC-KL is KL - log Z_p (R-VGA eq. 94): only differences between methods are meaningful.")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "demo.csv", "w") as f:
        f.write("method,mc_kl,test_log_loss,test_accuracy,seconds\n")
        for name, k, loss, acc, sec in rows:
            f.write(f"{name},{float(k):.6f},{float(loss):.6f},{float(acc):.4f},{sec:.3f}\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"wrote {out / 'demo.csv'} (matplotlib missing: no plot)")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    lap_kl = float(rows[-1][1])
    offset = min(min(c.min() for c in curves.values()), lap_kl) - 1.0  # log axis needs positive values
    for name, curve in curves.items():
        ax.plot(np.arange(1, n + 1), curve - offset, label=name)
    ax.axhline(lap_kl - offset, color="k", ls="--", label="Laplace (batch)")
    ax.set_yscale("log")
    ax.set_xlabel("observations processed")
    ax.set_ylabel(f"MC-KL - ({offset:.1f})")
    ax.set_title("One pass of Bayesian logistic regression")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "demo.png", dpi=120)
    print(f"wrote {out / 'demo.csv'} and {out / 'demo.png'}")


if __name__ == "__main__":
    main()
