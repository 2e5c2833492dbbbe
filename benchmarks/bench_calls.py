"""First and repeated calls of the un-jitted entry points: ``python -m benchmarks.bench_calls``.

The README quick start's patterns on its small problem (200 observations, d = 5): each entry point is
called three times with the same configuration and shapes (a filter built anew each call, as a
user's loop does), and the wall time of each call is printed, with a jitted ``jax.numpy`` dot of
the same data as the baseline of a call that does no tracing. The first call traces and compiles;
a repeated call should not (the goal: under 50 ms on a quiet 2-core machine).

Two more tables, measured the same way: the main filter of each gallery example (examples/*.py)
on its own data, cut small (:func:`_example_calls`), and the common schemes of the dense and the
low-rank belief on the quick start's logistic problem (:func:`_scheme_calls`).
"""
from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrvga as jr
from benchmarks.machine import describe


def _data(n: int = 200, d: int = 5):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d) + 0.3 * rng.normal(size=n)


def _calls(X, y):
    """``name -> fn()``: one call of each entry point, its filter built inside."""
    d = X.shape[1]

    def evidence():
        kf = jr.kalman(0.09, decay=0.99, additive_noise=1e-3)
        return jr.log_evidence(kf, kf.init(jnp.zeros(d), jnp.eye(d)), X, y)

    def run_logistic():
        flt = jr.rvga(jr.models.logistic(), scheme="implicit")
        return jr.run(flt, flt.init(jnp.zeros(d), 10.0 * jnp.eye(d)), X, (y > 0).astype(float))[0].mean

    def fleet_logistic():  # the README's pattern: jax.vmap of a function that calls jr.run
        flt = jr.rvga(jr.models.logistic(), scheme="implicit")
        labels = (y > 0).astype(float)

        def fit(prior_var):
            return jr.run(flt, flt.init(jnp.zeros(d), prior_var * jnp.eye(d)), X, labels)[0].mean

        return jax.vmap(fit)(jnp.logspace(-1, 1, 5))

    state = jr.kalman(0.09).init(jnp.zeros(d), jnp.eye(d))
    model = jr.models.linear_gaussian(0.09)
    return {"jr.log_evidence (Kalman, drift)": evidence,
            "jr.run (implicit logistic R-VGA)": run_logistic,
            "5-member implicit fleet (vmap of jr.run)": fleet_logistic,
            "jr.predictive (3 inputs)": lambda: jr.predictive(state, X[:3], model).mean,
            "jr.log_predictive (1 observation)": lambda: jr.log_predictive(state, X[0], y[0], model)}


def _digits(n: int, even: bool):
    """The first ``n`` 8 x 8 digits (pixels / 16, float32) and their labels (even, or the class)."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return jnp.asarray(X[:n] / 16.0, jnp.float32), jnp.asarray(y[:n] % 2 == 0 if even else y[:n], jnp.float32)


def _lowrank_run(model, theta0, xs, ys, scheme="ekf", trace=None, **options):
    """``jr.run`` of the rank-10 ``jr.lrvga(model, scheme=scheme)`` of the examples (built anew)."""
    from examples.common import lowrank_init

    flt = jr.lrvga(model, rank=10, scheme=scheme, **options)
    state = lowrank_init(flt, theta0, 10, 0.1, jax.random.PRNGKey(1))
    return jr.run(flt, state, xs, ys, trace)


def _network_calls() -> dict:
    """The examples' networks: digits (flax and equinox MLPs), diabetes (flax), drifting stream."""
    from jax.flatten_util import ravel_pytree

    from examples import diabetes_regression, digits_binary, digits_multiclass, drifting_stream

    Xb, yb = _digits(100, even=True)
    Xm, ym = _digits(100, even=False)
    binary = digits_binary.MLP(32)
    theta_b, unravel_b = ravel_pytree(binary.init(jax.random.PRNGKey(0), Xb[0]))
    bernoulli = jr.models.nonlinear(binary.apply, jr.models.bernoulli(), unravel=unravel_b)
    theta_m, unravel_m, h = digits_multiclass.network(32, jax.random.PRNGKey(0))
    categorical = jr.models.nonlinear(h, jr.models.categorical(10), unravel=unravel_m)
    Xd = jnp.asarray(np.random.default_rng(0).normal(size=(100, 10)), jnp.float32)
    reg = diabetes_regression.MLP(16)
    theta_r, unravel_r = ravel_pytree(reg.init(jax.random.PRNGKey(0), Xd[0]))
    gaussian = jr.models.nonlinear(reg.apply, jr.models.gaussian(0.5), unravel=unravel_r)
    return {"digits_binary (flax MLP, 2113 weights, EKF, 100 images)": lambda: _lowrank_run(bernoulli, theta_b, Xb, yb),
            "ekf_calibration (the same, sampled scheme)": lambda: _lowrank_run(bernoulli, theta_b, Xb, yb, "sampled"),
            "digits_multiclass (equinox MLP, 2410 weights, categorical)": lambda: _lowrank_run(
                categorical, theta_m, Xm, ym),
            "diabetes_regression (flax MLP, 193 weights, Gaussian)": lambda: _lowrank_run(
                gaussian, theta_r, Xd, Xd[:, 0]),
            "drifting_stream (equinox MLP, 337 weights, prequential trace)": _drifting(drifting_stream)}


def _drifting(drifting_stream):
    """The drifting stream's random-walk filter over 200 points, scored one step ahead. The model
    (a lambda) is built once, as the example does: a model built anew is a new program."""
    import equinox as eqx
    from jax.flatten_util import ravel_pytree

    xs, ys, _ = drifting_stream.stream(200)
    mlp = eqx.nn.MLP(2, "scalar", 16, depth=2, activation=jnp.tanh, key=jax.random.PRNGKey(0))
    params, static = eqx.partition(mlp, eqx.is_array)
    theta0, unravel = ravel_pytree(params)
    model = jr.models.nonlinear(lambda q, x: eqx.combine(q, static)(x), jr.models.bernoulli(), unravel=unravel)
    trace = jr.prequential(jr.trace_log_predictive(model).fn)
    return lambda: _lowrank_run(model, theta0, jnp.asarray(xs), jnp.asarray(ys), trace=trace,
                                additive_noise=1e-4)


#: ``jax.grad`` of the empirical-Bayes loss, jitted once (as the example's L-BFGS step is).
_EVIDENCE_GRAD = None


def _evidence_grad(X, y):
    """The gradient of ``-jr.log_evidence`` in ``log (s0, s2)`` of examples/empirical_bayes.py."""
    from examples import empirical_bayes

    global _EVIDENCE_GRAD
    if _EVIDENCE_GRAD is None:
        _EVIDENCE_GRAD = jax.jit(jax.grad(lambda p, X, y: -jr.log_evidence(
            *empirical_bayes.filter_and_prior(p, X.shape[1]), X, y)))
    return _EVIDENCE_GRAD(jnp.zeros(2), X, y)


def _example_calls() -> dict:
    """``name -> fn()``: the main filter of each gallery example on its own data, small."""
    from examples import empirical_bayes, thompson_bandit, tuning_free

    X, y, _, _ = empirical_bayes.data()
    bandit = jax.jit(jax.vmap(functools.partial(thompson_bandit.play, "thompson", "linear", epsilon=0.1)))
    problems = [thompson_bandit.problem("contextual", 5, 5, 200, s) for s in range(2)]
    theta, contexts, uniforms = (jnp.stack(p) for p in zip(*problems))
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    return {**_network_calls(),
            "empirical_bayes (jit of grad of jr.log_evidence, Kalman, 342 points)": lambda: _evidence_grad(X, y),
            "thompson_bandit (5-arm Kalman fleet, masked_update, 200 rounds x 2 seeds)": lambda: bandit(
                theta, contexts, uniforms, keys)[0],
            "tuning_free (model average of 11 learned-noise Kalman filters)": lambda: tuning_free.run(X, y)[0].step}


def _scheme_calls(X, y) -> dict:
    """``name -> fn()``: ``jr.run`` of the common schemes, dense and low-rank, on the quick start's
    logistic problem cut to 150 observations (a length of its own: no program of the first table reused)."""
    X, y = X[:150], y[:150]
    d, labels = X.shape[1], (y > 0).astype(float)
    calls = {}
    for scheme in ("implicit", "ekf", "moment_ekf", "sampled", "explicit"):
        calls[f"dense {scheme}"] = functools.partial(_scheme_run, "dense", scheme, X, labels, d)
        calls[f"low-rank (p = 2) {scheme}"] = functools.partial(_scheme_run, "lowrank", scheme, X, labels, d)
    return calls


def _scheme_run(belief, scheme, X, labels, d):
    model, key = jr.models.logistic(), jax.random.PRNGKey(0)
    samples = 10 if scheme == "sampled" else None
    if belief == "dense":
        flt = jr.rvga(model, scheme, num_samples=samples)
        state = flt.init(jnp.zeros(d), 10.0 * jnp.eye(d), key=key)
    else:
        flt = jr.lrvga(model, rank=2, scheme=scheme, num_samples=samples)
        W0, psi0 = jr.lowrank.init_factors(key, d, 2, 10.0, eps=1e-3)
        state = flt.init(jnp.zeros(d), W0, psi0, key=key)
    return jr.run(flt, state, X, labels)[0].mean


def _seconds(fn) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def _table(title: str, calls: dict, baseline: float):
    print(f"\n| {title} | first call | second | third | third / baseline |")
    print("|---|---|---|---|---|")
    for name, fn in calls.items():
        times = [_seconds(fn) for _ in range(3)]
        print(f"| {name} | {times[0] * 1e3:.0f} ms | {times[1] * 1e3:.1f} ms | {times[2] * 1e3:.1f} ms | "
              f"{times[2] / baseline:.0f}x |", flush=True)


def main():
    X, y = _data()
    dot = jax.jit(lambda a, b: a @ b)
    baseline = min(_seconds(lambda: dot(y, X)) for _ in range(5))
    print(describe())
    print(f"baseline: a jitted dot of the same data, {baseline * 1e3:.3f} ms per call")
    _table("entry point", _calls(X, y), baseline)
    _table("gallery example (its main filter, small)", _example_calls(), baseline)
    _table("scheme (logistic, d = 5, 150 observations)", _scheme_calls(X, y), baseline)


if __name__ == "__main__":
    main()
