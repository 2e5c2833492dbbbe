"""Online training of an MLP: L-RVGA (EKF and sampled schemes) and the diagonal belief against optax Adam.

    python -m benchmarks.bench_nn [--repeat 3] [--profile] [--only TEXT ...]
    python -m benchmarks.bench_nn --kernels [--repeat 5]

Same network on both sides: an MLP 64-128-64-1 (ReLU, 16 641 weights, LeCun-normal start, the
same start for every method) on the sklearn digits labelled even/odd (1200 training images,
597 test), float32. Each method is one jitted ``lax.scan`` over the training set: ``jr.scan`` of
``jr.lrvga(model, rank=10, scheme=...)`` (prior ``N(theta0, 0.1 I)``; with ``buffer=b`` the
curvature columns are projected once per ``b`` columns, :func:`jaxrvga.lrvga`), ``jr.diag_rvga``
(the same prior, mean field); "batch m": each EKF update takes m images at once, the network vmapped over them, one linearisation at the mean for
the m), and Adam steps on the log-loss with batch 1 (1200 steps) or batch 16 (75 steps). Compile
time (``lower().compile()``) is excluded from the run time and reported apart; the run time is the
best of ``--repeat`` rounds, each round running every method in turn (so that a change of the
machine's load falls on all), a run shorter than ``MIN_ROUND_S`` (Adam's) repeated within its turn
until that time is spent.
Time per observation is given as a ratio to Adam (batch 1) measured in the same process. Test
scores: accuracy, log-loss and expected calibration error (10 bins) of the linearised predictive
(L-RVGA; ``jr.predictive`` without a key) and of ``sig(h(theta, x))`` (Adam). Memory: XLA's own
count of the run's temporary buffers (``compiled.memory_analysis()``) as a multiple of the
L-RVGA state (``d (p + 1) + d`` floats), and the rise of the process's resident set size over
the run (sampled every millisecond from ``/proc/self/statm``; XLA's allocations bypass
``tracemalloc``).

After the table, the floating-point operations per observation of each method, by XLA's own count
of one update (``compiled.cost_analysis()``; a buffered projection counted once per projection, not
in every update as XLA counts a conditional), in units of d and as a ratio to Adam's step: the
time ratios are to be read against these.

``--profile``: where the time of one L-RVGA step goes at this size, each piece jitted alone and
repeated inside one ``fori_loop`` (no dispatch): the VJP of the output, the Woodbury solve of the
mean step, the spectral projection (:func:`jaxrvga.kernels.factor_analysis.spectral_em_step`), two
skinny matrix products for scale, the whole update; the same for the sampled scheme (draws,
VJPs at the draws, the mean of their K gradients in two forms, rank p + K solve and projection);
Adam's step for comparison.

``--kernels`` (alone): the skinny-matrix kernels of a buffered EKF step with ``W`` row-major
``(d, q)`` as the state stores it and transposed ``(q, d)``, and NumPy on ``(d, q)``
(:func:`kernels`).
"""
from __future__ import annotations

import argparse
import os
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

import jaxrvga as jr
from benchmarks.machine import best_time, describe, timed

RANK = 10
PRIOR_VAR = 0.1
SIZES = (64, 128, 64, 1)
MIN_ROUND_S = 0.25  # each method's turn in a round repeats its run until this many seconds
METHODS = [("Adam, batch 1", "adam", (1e-3, 1)), ("Adam, batch 16", "adam", (3e-3, 16)),
           ("L-RVGA ekf", "lrvga", ("ekf", {})), ("L-RVGA ekf, buffer=9", "lrvga", ("ekf", {"buffer": 9})),
           ("L-RVGA ekf, batch 4, buffer=8", "lrvga", ("ekf", {"batch": 4, "buffer": 8})),
           ("L-RVGA ekf, batch 16, buffer=16", "lrvga", ("ekf", {"batch": 16, "buffer": 16})),
           ("L-RVGA sampled (K=10)", "lrvga", ("sampled", {})),
           ("L-RVGA sampled, buffer=20", "lrvga", ("sampled", {"buffer": 20})),
           ("diagonal ekf", "diag", ("ekf", {})), ("diagonal moment_ekf", "diag", ("moment_ekf", {})),
           ("diagonal ekf, batch 16", "diag", ("ekf", {"batch": 16}))]


# --------------------------------------------------------------------------- problem

def digits(num_train=1200):
    """Even/odd sklearn digits (pixels / 16), shuffled: ``(Xtr, ytr, Xte, yte)`` float32."""
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(0).permutation(len(X))
    X, y = (X[perm] / 16.0).astype(np.float32), (y[perm] % 2 == 0).astype(np.float32)
    return X[:num_train], y[:num_train], X[num_train:], y[num_train:]


def mlp(key, sizes=SIZES):
    """``(theta0, h)``: flat LeCun-normal weights of the ReLU MLP ``sizes`` and ``h(theta, x)``, its
    output (a scalar logit where ``sizes`` ends in 1)."""
    params = []
    for k, (m, n) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:])):
        params.append((jax.random.normal(k, (m, n), jnp.float32) / np.sqrt(m), jnp.zeros(n, jnp.float32)))
    theta0, unravel = ravel_pytree(params)

    def h(theta, x):
        layers = unravel(theta)
        for W, b in layers[:-1]:
            x = jax.nn.relu(x @ W + b)
        W, b = layers[-1]
        out = x @ W + b
        return out[0] if sizes[-1] == 1 else out

    return theta0, h


def scores(p, y):
    p = np.clip(np.asarray(p, np.float64), 1e-7, 1 - 1e-7)
    return {"accuracy": float(np.mean((p > 0.5) == y)),
            "log_loss": float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))), "ece": jr.baselines.metrics.ece(p, y)}


# --------------------------------------------------------------------------- methods

def minibatches(xs, ys, batch):
    """``(xs, ys)`` as ``(T, batch, 64)`` and ``(T, batch)``, ``T = len(xs) // batch`` (1200 images
    divide by every batch size used here)."""
    T = xs.shape[0] // batch
    return xs[:T * batch].reshape(T, batch, -1), ys[:T * batch].reshape(T, batch)


def lrvga_run(h, theta0, scheme, batch=1, **options):
    """``(run(state, xs, ys) -> state, init_state, model, filter)`` of one L-RVGA pass.

    ``batch > 1``: each update takes a minibatch of ``batch`` images (``jr.models.minibatch``,
    ``eta`` of shape (batch,)); ``model`` is still the one-image model (for predictions).
    """
    model = jr.models.nonlinear(h, jr.models.bernoulli())
    batched = model if batch == 1 else jr.models.minibatch(model)
    flt = jr.lrvga(batched, rank=RANK, scheme=scheme, **options)
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(1), theta0.shape[0], RANK, PRIOR_VAR)
    state = flt.init(theta0, W0, psi0, **({"key": jax.random.PRNGKey(2)} if scheme == "sampled" else {}))

    def run(state, xs, ys):
        return jr.scan(flt, state, *((xs, ys) if batch == 1 else minibatches(xs, ys, batch)))[0]

    return run, state, model, flt


def diag_run(h, theta0, scheme, batch=1, **options):
    """``(run(state, xs, ys) -> state, init_state, model, filter)`` of one pass of ``jr.diag_rvga``
    (prior ``N(theta0, PRIOR_VAR I)``; ``batch`` as in :func:`lrvga_run`)."""
    model = jr.models.nonlinear(h, jr.models.bernoulli())
    flt = jr.diag_rvga(model if batch == 1 else jr.models.minibatch(model), scheme=scheme, **options)
    state = flt.init(theta0, PRIOR_VAR)

    def run(state, xs, ys):
        return jr.scan(flt, state, *((xs, ys) if batch == 1 else minibatches(xs, ys, batch)))[0]

    return run, state, model, flt


RUNS = {"lrvga": lrvga_run, "diag": diag_run}


def adam_step(h, opt):
    """``step((theta, opt_state), (X, y)) -> ((theta, opt_state), None)``: one step of ``opt`` on the
    mean log-loss of the minibatch ``X`` (m, 64)."""
    def loss(theta, X, y):
        eta = jax.vmap(h, in_axes=(None, 0))(theta, X)
        return jnp.mean(optax.sigmoid_binary_cross_entropy(eta, y))

    def step(carry, xy):
        theta, s = carry
        g = jax.grad(loss)(theta, *xy)
        upd, s = opt.update(g, s, theta)
        return (optax.apply_updates(theta, upd), s), None

    return step


def adam_run(h, lr, batch):
    """``run(theta, xs, ys) -> theta``: one pass of Adam on the log-loss, minibatches of ``batch``."""
    opt = optax.adam(lr)
    step = adam_step(h, opt)

    def run(theta, xs, ys):
        return jax.lax.scan(step, (theta, opt.init(theta)), minibatches(xs, ys, batch))[0][0]

    return run


# --------------------------------------------------------------------------- measuring

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakRSS:
    """Peak resident set size above the level at entry, sampled every millisecond by a thread (MB)."""

    def __enter__(self):
        self.base = self.peak = rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb())
            time.sleep(1e-3)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())
        self.rise = self.peak - self.base


def compiled_run(fn, args):
    """``(compiled, compile_s, temp_mb)``: ``jit(fn)`` compiled for ``args`` and XLA's temporary buffers."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    temp_mb = getattr(mem, "temp_size_in_bytes", float("nan")) / 2**20 if mem is not None else float("nan")
    return compiled, compile_s, temp_mb


def timed_rss(compiled, args):
    """``(output, seconds, rss_rise_mb)`` of one run: :func:`benchmarks.machine.timed` under :class:`PeakRSS`."""
    with PeakRSS() as rss:
        out, seconds = timed(compiled, *args)
    return out, seconds, rss.rise


def compare(repeat, methods=METHODS):
    """Every method compiled first, then timed in ``repeat`` rounds that run each method once in turn
    (a change of the machine's load during the run then falls on every method alike); the time of a
    method is its best round."""
    Xtr, ytr, Xte, yte = digits()
    xs, ys, Xte_j = jnp.asarray(Xtr), jnp.asarray(ytr), jnp.asarray(Xte)
    theta0, h = mlp(jax.random.PRNGKey(0))
    d, T = theta0.shape[0], xs.shape[0]
    state_mb = (d * (RANK + 2)) * 4 / 2**20
    print(f"\n## MLP 64-128-64-1 (d = {d}) on digits even/odd, one pass of {T} images, float32, "
          f"p = {RANK}\n# L-RVGA state: {state_mb:.2f} MB (mean, W, psi); best of {repeat} interleaved rounds")
    print(f"{'method':<32} {'acc':>6} {'logloss':>8} {'ECE':>6} {'us/obs':>9} {'x Adam1':>8} "
          f"{'compile s':>9} {'XLA temp MB':>11} {'x state':>7} {'RSS rise MB':>11}")
    predict = jax.jit(jax.vmap(lambda th, x: jax.nn.sigmoid(h(th, x)), in_axes=(None, 0)))
    runs = []
    for name, kind, arg in methods:
        if kind == "adam":
            fn, args, score = adam_run(h, *arg), (theta0, xs, ys), lambda th: predict(th, Xte_j)
        else:
            fn, state, model, _ = RUNS[kind](h, theta0, arg[0], **arg[1])
            args = (state, xs, ys)
            score = lambda out, model=model: jr.predictive(out, Xte_j, model=model).mean
        runs.append((name, args, score) + compiled_run(fn, args))
    best = {name: (float("inf"), None, 0.0) for name, *_ in runs}
    for _ in range(repeat):
        for name, args, _, compiled, _, _ in runs:
            spent = 0.0
            while spent < MIN_ROUND_S:  # a short run (Adam's: 30 ms) is repeated within its turn
                out, seconds, rise = timed_rss(compiled, args)
                spent += seconds
                t, _, r = best[name]
                best[name] = (min(t, seconds), out, max(r, rise))
    rows, base = [], None
    for name, _, score, _, c, temp in runs:
        t, out, rise = best[name]
        sc = scores(score(out), yte)
        us = t / T * 1e6
        base = us if base is None else base
        rows.append(dict(name=name, us=us, ratio=us / base, compile=c, temp=temp, rise=rise, **sc))
        print(f"{name:<32} {sc['accuracy']:6.3f} {sc['log_loss']:8.3f} {sc['ece']:6.3f} {us:9.1f} "
              f"{us / base:8.1f} {c:9.2f} {temp:11.2f} {temp / state_mb:7.1f} {rise:11.1f}", flush=True)
    return rows


# --------------------------------------------------------------------------- flops

def xla_flops(fn, *args):
    """XLA's count of the floating-point operations of one call of ``jit(fn)`` (every branch of a
    conditional counted)."""
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost["flops"])


def update_flops(h, theta0, scheme, batch=1, buffer=0, **options):
    """Floating-point operations of one L-RVGA update per observation, its projection counted as
    often as it runs: with a buffer of ``b`` columns and ``m`` new columns a step (``m`` = batch for
    the EKF, ``num_samples`` for the sampled scheme), once every ``b // m + 1`` steps (the update's
    conditional holds it; XLA counts it in every update, so it is counted apart and subtracted)."""
    from jaxrvga.kernels import factor_analysis as fa
    _, state, _, flt = lrvga_run(h, theta0, scheme, batch=batch, buffer=buffer, **options)
    Xtr, ytr, _, _ = digits()
    x, y = (jnp.asarray(Xtr[0]), jnp.asarray(ytr[0])) if batch == 1 else (jnp.asarray(Xtr[:batch]),
                                                                          jnp.asarray(ytr[:batch]))
    total = xla_flops(flt.update, state, x, y)
    m = batch if scheme == "ekf" else flt.spec.scheme.cfg.num_samples
    if buffer < m:  # a projection every step, no conditional
        return total / batch
    d = theta0.shape[0]
    lead, pending = state.W[:, :RANK], jnp.zeros((d, buffer + m), state.W.dtype)
    gram = jnp.eye(RANK + buffer + m, dtype=state.W.dtype)
    projection = xla_flops(lambda W, psi, X, G: fa.spectral_em_step(W, psi, X, 1.0, 1.0, 0, gram=G, details=True),
                           lead, state.psi, pending, gram)
    return (total - projection + projection / (buffer // m + 1)) / batch


def flops(methods):
    """Table: floating-point operations per observation of each method (XLA's count), in units of d
    and as a ratio to Adam's step of batch 1."""
    theta0, h = mlp(jax.random.PRNGKey(0))
    d = theta0.shape[0]
    Xtr, ytr, _, _ = digits()
    opt = optax.adam(1e-3)
    step = adam_step(h, opt)

    print(f"\n## Floating-point operations per observation (XLA's count of one update), d = {d}")
    print(f"{'method':<32} {'flops / d':>10} {'x Adam1':>8}")
    base = None
    for name, kind, arg in methods:
        if kind == "adam":
            batch = arg[1]
            minibatch = (jnp.asarray(Xtr[:batch]), jnp.asarray(ytr[:batch]))
            per = xla_flops(step, (theta0, opt.init(theta0)), minibatch) / batch
        elif kind == "diag":
            _, state, _, flt = diag_run(h, theta0, arg[0], **arg[1])
            batch = arg[1].get("batch", 1)
            x, y = (Xtr[0], ytr[0]) if batch == 1 else (Xtr[:batch], ytr[:batch])
            per = xla_flops(flt.update, state, jnp.asarray(x), jnp.asarray(y)) / batch
        else:
            per = update_flops(h, theta0, arg[0], **arg[1])
        base = per if base is None else base
        print(f"{name:<32} {per / d:10.1f} {per / base:8.1f}", flush=True)


# --------------------------------------------------------------------------- profile

def loop_time(piece, carry, n, repeat):
    """Seconds per application of ``carry -> piece(carry)`` (same structure), ``n`` of them in one ``fori_loop``."""
    f = jax.jit(lambda c: jax.lax.fori_loop(0, n, lambda i, c: piece(c), c)).lower(carry).compile()
    return best_time(lambda: f(carry), repeat=repeat) / n


def profile(repeat, n=200):
    """Time of the pieces of one L-RVGA EKF step and of the sampled one (module docstring), d = 16 641, p = 10.

    Each piece maps its carry to a carry of the same structure (the projections are applied again
    to their own output), so no work is loop-invariant.
    """
    from jaxrvga.kernels import factor_analysis as fa
    from jaxrvga import schemes
    from jaxrvga.kernels import lowrank
    Xtr, ytr, _, _ = digits()
    theta0, h = mlp(jax.random.PRNGKey(0))
    d = theta0.shape[0]
    run, state, model, flt = lrvga_run(h, theta0, "ekf")
    state = jax.jit(run)(state, jnp.asarray(Xtr[:200]), jnp.asarray(ytr[:200]))  # a realistic belief
    x, y = jnp.asarray(Xtr[300]), jnp.asarray(ytr[300])
    W, psi, mu = state.W, state.psi, state.mean
    C, g = schemes.linearise(model, mu, x, y)
    K = 10
    thetas = lowrank.sample(jax.random.PRNGKey(4), mu, W, psi, K)
    Cs, grads = jax.vmap(schemes.linearise, in_axes=(None, 0, None, None))(model, thetas, x, y)
    Xs = Cs[:, 0, :].T / np.sqrt(K)
    Q = jnp.linalg.qr(jax.random.normal(jax.random.PRNGKey(3), (RANK, RANK)))[0]  # orthogonal: W @ Q stays bounded

    def project(X, loops, spectral=True, **kw):
        step = fa.spectral_em_step if spectral else fa.recursive_em_step
        return lambda c: step(c[0], c[1], X, 1.0, 1.0, loops, **kw)[:2]

    def solve_piece(_):
        """``P v`` by Woodbury, factorisation included (the factors are perturbed so it is not hoisted)."""
        return lambda c: (c[0] * (1 + 1e-30 * c[1][0]), lowrank.solve(c[0], psi, c[1]))

    def update(scheme, **options):
        f = lrvga_run(h, theta0, scheme, **options)[3]
        return lambda s: f.update(s, x, y)

    sampled_state = state._replace(key=jax.random.PRNGKey(2))
    pieces = {
        "forward h(theta, x)": (lambda m: m + 1e-30 * h(m, x), mu),
        "linearise: VJP row + score": (lambda m: m + 1e-30 * sum(a.sum() for a in schemes.linearise(model, m, x, y)),
                                       mu),
        "Woodbury solve, rank p + 1": (solve_piece(jnp.concatenate([W, C.T], 1)), (jnp.concatenate([W, C.T], 1), g)),
        "spectral_em_step, 0 EM loops": (project(C.T, 0), (W, psi)),
        "spectral_em_step, 1 EM loop": (project(C.T, 1), (W, psi)),
        "spectral_em_step, 1 loop, no store": (project(C.T, 1, store_iterate=False), (W, psi)),
        "recursive_em_step, 1 loop (published)": (project(C.T, 1, spectral=False), (W, psi)),
        "Gram (d, p+1)^T (d, p+1)": (lambda A: A + 1e-30 * (A.T @ A).sum(), jnp.concatenate([W, C.T], 1)),
        "product (d, p) @ (p, p)": (lambda A: A @ Q, W),
        "whole EKF update (defaults)": (update("ekf"), state),
        "whole EKF update, published=True": (update("ekf", published=True), state),
        "sampled: K = 10 draws (lowrank.sample)": (
            lambda m: m + 1e-30 * lowrank.sample(jax.random.PRNGKey(5), m, W, psi, K).sum(), mu),
        "sampled: linearise at the K draws (vmap)": (
            lambda th: th + 1e-30 * jax.vmap(schemes.linearise, in_axes=(None, 0, None, None))(
                model, th, x, y)[0].sum(), thetas),
        "sampled: K x d standard normals (threefry)": (
            lambda k: jax.random.fold_in(k, (0 * jax.random.normal(k, (K, d)).sum()).astype(jnp.uint32)),
            jax.random.key(6)),
        "sampled: mean of K gradients, jnp.mean(axis=0)": (lambda G: G * (1 + 1e-30 * jnp.mean(G, axis=0)), grads),
        "sampled: mean of K gradients, schemes.mean_rows": (lambda G: G * (1 + 1e-30 * schemes.mean_rows(G)), grads),
        "sampled: Woodbury solve, rank p + K": (solve_piece(None), (jnp.concatenate([W, Xs], 1), g)),
        "sampled: spectral_em_step of rank p + K": (project(Xs, 1), (W, psi)),
        "whole sampled update (3 passes)": (update("sampled"), sampled_state),
        "whole sampled update, num_iters=1": (update("sampled", num_iters=1), sampled_state),
    }
    opt = optax.adam(1e-3)
    step = adam_step(h, opt)
    pieces["Adam step (batch 1)"] = (lambda c: step(c, (x[None], y[None]))[0], (mu, opt.init(mu)))
    print(f"\n## Where the time of one L-RVGA step goes, d = {d}, p = {RANK}, float32 "
          f"(us per call, best of {repeat}, {n} calls in one fori_loop)")
    out = {}
    for name, (piece, carry) in pieces.items():
        out[name] = loop_time(piece, carry, n, repeat) * 1e6
        print(f"{name:<42} {out[name]:9.1f}", flush=True)
    return out


def kernels(repeat, n=300):
    """The skinny-matrix kernels of a buffered EKF step, by layout: XLA with ``W`` stored as the state
    stores it, ``(d, q)`` row-major, XLA with ``W`` transposed, ``(q, d)``, and NumPy (OpenBLAS) on the
    ``(d, q)`` array, in the same process (d = 16 641, q = p + 9 = 19). The forms are checked to agree
    on the first input before they are timed.

    Each XLA kernel runs ``n`` times in one ``lax.scan`` over ``n`` different inputs (so nothing is
    hoisted); NumPy runs a Python loop over the same inputs. Times are us per call, best of ``repeat``.
    """
    d, q = 16641, RANK + 9
    rng = np.random.default_rng(0)
    W = rng.standard_normal((d, q)).astype(np.float32)
    V = rng.standard_normal((n, 2, d)).astype(np.float32)
    psi = 1.0 + V[:, 0] ** 2
    c = rng.standard_normal((n, q)).astype(np.float32)
    M = rng.standard_normal((n, q, q + 1)).astype(np.float32)
    cases = {  # name: (row-major form, transposed form, inputs)
        "empty scan (one entry of each input)": (lambda A, v: v[:, :1], lambda At, v: v[:, :1], V),
        "border: V^T W, V = [X, g] / psi (2 rows)": (lambda A, v: v @ A,
                                                     lambda At, v: jnp.stack([At @ v[0], At @ v[1]]), V),
        "mean step: W c": (lambda A, x: A @ x, lambda At, x: x @ At, c),
        "projection: W M, M (q, q + 1)": (lambda A, m: A @ m, lambda At, m: m.T @ At, M),
        "whitened Gram: B^T B, B = W diag(r)": (lambda A, r: (A * r[:, None]).T @ (A * r[:, None]),
                                                    lambda At, r: (At * r) @ (At * r).T, 1 / np.sqrt(psi)),
    }

    def xla(fn, A, xs):
        run = jax.jit(lambda A, xs: jax.lax.scan(lambda acc, x: (acc + jnp.sum(fn(A, x)), None), 0.0, xs)[0])
        return best_time(lambda: run(A, xs), repeat=repeat) / n

    def store(A, xs, column):
        def step(A, ix):
            i, x = ix
            return column(A, i % (q - RANK) + RANK, x), None
        run = jax.jit(lambda A, xs: jax.lax.scan(step, A, (jnp.arange(n), xs))[0])
        return best_time(lambda: run(A, xs), repeat=repeat) / n

    def numpy_time(fn, xs):
        def loop():
            for x in xs:
                fn(W, x)
        return best_time(loop, repeat=repeat) / n

    print(f"\n## Kernels of a buffered step by layout, d = {d}, q = {q}, float32 (us per call, best of {repeat})")
    print(f"{'kernel':<42} {'XLA (d,q)':>9} {'XLA (q,d)':>9} {'NumPy':>7} {'(d,q)/(q,d)':>12} {'XLA/NumPy':>10}")
    Wj, Wt = jnp.asarray(W), jnp.asarray(W.T.copy())
    for name, (f, ft, xs) in cases.items():  # the two forms compute the same (up to rounding)
        a, b = np.asarray(f(Wj, xs[0])), np.asarray(ft(Wt, xs[0]))
        b = b if b.shape == a.shape else b.T  # a (d, k) result comes transposed from the (q, d) form
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * np.abs(a).max(), err_msg=name)
    rows = {name: (xla(f, Wj, jnp.asarray(xs)), xla(ft, Wt, jnp.asarray(xs)),
                   float("nan") if name.startswith("empty") else numpy_time(f, xs))
            for name, (f, ft, xs) in cases.items()}

    def np_store(A, x):
        A[:, RANK] = x[0]
    rows["store a column x into the buffer"] = (
        store(Wj, jnp.asarray(V[:, 0]), lambda A, j, x: A.at[:, j].set(x)),
        store(Wt, jnp.asarray(V[:, 0]), lambda A, j, x: A.at[j].set(x)), numpy_time(np_store, V))
    for name, (rm, tr, npy) in rows.items():
        print(f"{name:<42} {rm * 1e6:9.1f} {tr * 1e6:9.1f} {npy * 1e6:7.1f} {rm / tr:12.2f} {rm / npy:10.2f}",
              flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="also the breakdown of one L-RVGA step")
    parser.add_argument("--only", nargs="+", metavar="TEXT",
                        help="only the methods whose name contains one of these (Adam, batch 1 is always run)")
    parser.add_argument("--kernels", action="store_true",
                        help="only the skinny kernels of a buffered step, by layout, against NumPy")
    args = parser.parse_args(argv)
    print(describe())
    if args.kernels:
        kernels(args.repeat)
        return
    methods = METHODS if not args.only else [METHODS[0]] + [m for m in METHODS[1:]
                                                             if any(t in m[0] for t in args.only)]
    compare(args.repeat, methods)
    flops(methods)
    if args.profile:
        profile(args.repeat)


if __name__ == "__main__":
    main()
