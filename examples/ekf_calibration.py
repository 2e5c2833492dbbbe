"""Why the Monte-Carlo predictive of the EKF scheme is over-dispersed:
``python -m examples.ekf_calibration``.

The even/odd digits MLP of :mod:`examples.digits_binary` is trained by ``jr.lrvga`` with
the EKF and with the sampled scheme. For each belief ``N(mu, P)`` and test image ``x``
it compares

* the linearised predictive: logit ``~ N(h(mu, x), J P J^T)`` (``J = dh/dtheta`` at
  ``mu``), and
* Monte Carlo over draws ``theta_s ~ N(mu, c P)`` pushed through the network, and the
  same draws pushed through the network's linearisation ``h(mu, x) + J (theta_s - mu)``
  (a control: it must reproduce the linearised predictive up to Monte-Carlo error),

for the covariance scaled by ``c`` in {1, 0.3, 0.1}: the median ratio of the Monte-Carlo
logit variance to ``c J P J^T``, the median shift of the Monte-Carlo logit mean from
``h(mu, x)`` in linearised standard deviations, and the ECE / accuracy of both
Monte-Carlo predictives. It also reports how much of ``J P J^T`` comes from the diagonal
part: ``J Psi^{-1} J^T / J P J^T``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from sklearn.datasets import load_digits

import jaxrvga as jr
from jaxrvga.baselines.metrics import ece
from examples.common import as_f32, lowrank_init, split
from examples.digits_binary import MLP

SCALES = (1.0, 0.3, 0.1)


def _ece(probs, labels):
    """:func:`jaxrvga.baselines.metrics.ece` of probabilities of class 1, in float64."""
    return ece(np.asarray(probs, np.float64), labels)


def dispersion(state, h, X, y, key, num_samples: int = 512) -> dict:
    """The comparison of the module docstring for one belief ``state`` on inputs ``X``
    (n, 64), labels ``y``."""
    J = jax.vmap(jax.grad(h), in_axes=(None, 0))(state.mean, X)  # (n, d)
    m = jax.vmap(h, in_axes=(None, 0))(state.mean, X)
    v = jr.kernels.lowrank.factorize(state.W, state.psi).quad_form(J.T)
    out = {"plug_in_ece": _ece(jax.nn.sigmoid(m), y),
           "linearised_ece": _ece(jr.kernels.special.probit_predictive(m, v)[0], y),
           "diagonal_share": float(jnp.median(jnp.sum(J**2 / state.psi, axis=1) / v)),
           "median_psi": float(jnp.median(state.psi))}
    for c in SCALES:
        th = jr.lowrank.sample(key, state.mean, state.W / np.sqrt(c), state.psi / c,
                               num_samples)
        eta = jax.vmap(lambda t: jax.vmap(h, in_axes=(None, 0))(t, X))(th)  # (S, n)
        lin = m + (th - state.mean) @ J.T
        p_net, p_lin = (np.asarray(jnp.mean(jax.nn.sigmoid(e), axis=0))
                        for e in (eta, lin))
        shift = jnp.abs(jnp.mean(eta, axis=0) - m) / jnp.sqrt(c * v)
        out[c] = {"var_ratio": float(jnp.median(jnp.var(eta, axis=0) / (c * v))),
                  "var_ratio_linear": float(jnp.median(jnp.var(lin, axis=0) / (c * v))),
                  "mean_shift": float(jnp.median(shift)),
                  "ece_network": _ece(p_net, y),
                  "acc_network": float(np.mean((p_net > .5) == y)),
                  "ece_linear": _ece(p_lin, y),
                  "acc_linear": float(np.mean((p_lin > .5) == y))}
    return out


def main(num_train: int = 1200, num_test: int = 597, hidden: int = 32, rank: int = 10,
         prior_var: float = 0.1, num_samples: int = 512, seed: int = 0,
         verbose: bool = True) -> dict:
    """Train with each scheme and compare the predictives; returns
    ``{scheme: dispersion(...)}``."""
    X, y = load_digits(return_X_y=True)
    Xtr, ytr, Xte, yte = split(X / 16.0, (y % 2 == 0), num_train, num_test, seed)
    net = MLP(hidden)
    theta0, unravel = ravel_pytree(net.init(jax.random.PRNGKey(seed), Xtr[0]))
    model = jr.models.nonlinear(net.apply, jr.models.bernoulli(), unravel=unravel)
    out = {}
    for scheme in ("ekf", "sampled"):
        flt = jr.lrvga(model, rank=rank, scheme=scheme)
        state = lowrank_init(flt, theta0, rank, prior_var, jax.random.PRNGKey(seed + 1))
        state, _ = jr.run(flt, state, *as_f32(Xtr, ytr))
        out[scheme] = r = dispersion(state, model.predict, *as_f32(Xte), yte,
                                     jax.random.PRNGKey(seed + 5), num_samples)
        if verbose:
            print(f"{scheme}: median psi {r['median_psi']:.1f} "
                  f"(prior {1 / prior_var:.1f}); "
                  f"J Psi^-1 J^T / J P J^T = {r['diagonal_share']:.2f}; "
                  f"ECE plug-in {r['plug_in_ece']:.3f}, "
                  f"linearised {r['linearised_ece']:.3f}")
            for c in SCALES:
                s = r[c]
                print(f"  cov x {c:<4}: MC var / J P J^T {s['var_ratio']:.2f} "
                      f"(linearised net {s['var_ratio_linear']:.2f}), "
                      f"mean shift {s['mean_shift']:.2f} sd; "
                      f"ECE network {s['ece_network']:.3f} "
                      f"(acc {s['acc_network']:.3f}), "
                      f"linearised net {s['ece_linear']:.3f} "
                      f"(acc {s['acc_linear']:.3f})")
    return out


if __name__ == "__main__":
    main()
