"""The filter configurations whose trajectories ``reference_filters.npz`` records (see make_reference.py).

Each case is ``(problem kind, build)``, ``build(jr, X, y, mu0, P0, W0, psi0, key) -> (filter, state)``.
Only names that exist both before and after the rewrite are used, with ``published=True`` passed to
``lrvga`` when the installed version knows it.
"""
import inspect

import numpy as np

D, T, P = 6, 40, 2


def problem(kind):
    """Small deterministic data sets: logistic, linear-Gaussian or Poisson, d = 6, T = 40."""
    import jax
    import jax.numpy as jnp
    rng = np.random.default_rng({"logistic": 0, "linear": 1, "poisson": 2}[kind])
    X = rng.normal(size=(T, D)) * 0.7
    theta = rng.normal(size=D)
    eta = X @ theta
    if kind == "logistic":
        y = (rng.random(T) < 1 / (1 + np.exp(-eta))).astype(float)
    elif kind == "linear":
        y = eta + rng.normal(size=T)
    else:
        y = rng.poisson(np.exp(0.5 * eta)).astype(float)
    mu0, P0 = jnp.zeros(D), 2.0 * jnp.eye(D)
    W0, psi0 = 0.3 * jnp.asarray(rng.normal(size=(D, P))), jnp.full(D, 0.5)
    return jnp.asarray(X), jnp.asarray(y), mu0, P0, W0, psi0, jax.random.PRNGKey(3)


def _lr(jr, model, **kw):
    if "published" in inspect.signature(jr.lrvga).parameters:
        kw["published"] = True
    return jr.lrvga(model, rank=P, **kw)


def _dense(make):
    def build(jr, X, y, mu0, P0, W0, psi0, key):
        flt = make(jr)
        return flt, flt.init(mu0, P0)
    return build


def _dense_key(make):
    def build(jr, X, y, mu0, P0, W0, psi0, key):
        flt = make(jr)
        return flt, flt.init(mu0, P0, key=key)
    return build


def _low(make):
    def build(jr, X, y, mu0, P0, W0, psi0, key):
        flt = make(jr)
        return flt, flt.init(mu0, W0, psi0, key=key)
    return build


def _h(theta, x):
    import jax.numpy as jnp
    return jnp.tanh(x @ theta)


CASES = {
    "kalman": ("linear", _dense(lambda jr: jr.kalman(0.7))),
    "kalman_noise": ("linear", _dense(lambda jr: jr.kalman(0.7, process_noise=0.05))),
    "rvga_implicit": ("logistic", _dense(lambda jr: jr.rvga(jr.models.logistic()))),
    "rvga_implicit_noise": ("logistic", _dense(lambda jr: jr.rvga(jr.models.logistic(), process_noise=0.02))),
    "rvga_explicit": ("logistic", _dense(lambda jr: jr.rvga(jr.models.logistic(), scheme="explicit"))),
    "rvga_poisson_implicit": ("poisson", _dense(lambda jr: jr.rvga(jr.models.poisson()))),
    "rvga_poisson_explicit": ("poisson", _dense(lambda jr: jr.rvga(jr.models.poisson(), scheme="explicit"))),
    "ekf_logistic": ("logistic", _dense(lambda jr: jr.ekf(jr.models.logistic()))),
    "ekf_nonlinear": ("linear", _dense(lambda jr: jr.ekf(jr.models.nonlinear(_h)))),
    "qkf": ("logistic", _dense(lambda jr: jr.qkf())),
    "mirror_prox": ("logistic", _dense(lambda jr: jr.mirror_prox(jr.models.logistic()))),
    "mirror_prox_corrected": ("logistic", _dense(
        lambda jr: jr.mirror_prox(jr.models.logistic(), correction=True, update_cov_twice=False))),
    "rvga_mc": ("linear", _dense_key(lambda jr: jr.rvga(jr.models.nonlinear(_h), scheme="implicit",
                                                       num_samples=20))),
    "rvga_mc_hessian": ("linear", _dense_key(lambda jr: jr.rvga(jr.models.nonlinear(_h), scheme="implicit",
                                                               num_samples=20, curvature="hessian"))),
    "lr_exact": ("linear", _low(lambda jr: _lr(jr, jr.models.linear_gaussian(0.7)))),
    "lr_exact_3loops": ("linear", _low(lambda jr: _lr(jr, jr.models.linear_gaussian(0.7), inner_loops=3))),
    "lr_implicit": ("logistic", _low(lambda jr: _lr(jr, jr.models.logistic()))),
    "lr_implicit_noise": ("logistic", _low(lambda jr: _lr(jr, jr.models.logistic(), process_noise=0.02))),
    "lr_explicit": ("logistic", _low(lambda jr: _lr(jr, jr.models.logistic(), scheme="explicit"))),
    "lr_extragrad": ("logistic", _low(lambda jr: _lr(jr, jr.models.logistic(), scheme="extragrad"))),
    "lr_extragrad_twice": ("logistic", _low(lambda jr: _lr(jr, jr.models.logistic(), scheme="extragrad",
                                                          update_cov_twice=True))),
    "lr_poisson_extragrad": ("poisson", _low(lambda jr: _lr(jr, jr.models.poisson(), scheme="extragrad"))),
    "lr_ekf_logistic": ("logistic", _low(lambda jr: _lr(jr, jr.models.logistic(), scheme="ekf"))),
    "lr_sampled_logistic": ("logistic", _low(lambda jr: _lr(jr, jr.models.logistic(), scheme="sampled"))),
    "lr_sampled_frozen": ("logistic", _low(lambda jr: _lr(jr, jr.models.logistic(), scheme="sampled",
                                                         frozen_draws=True))),
    "lr_ekf_nonlinear": ("linear", _low(lambda jr: _lr(jr, jr.models.nonlinear(_h), scheme="ekf"))),
    "lr_sampled_nonlinear": ("linear", _low(lambda jr: _lr(jr, jr.models.nonlinear(_h), scheme="sampled",
                                                          num_samples=8, update_cov_twice=True))),
}
