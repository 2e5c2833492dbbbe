"""The GPU table: time per step of the low-rank and diagonal beliefs at large d, and of networks of 28 x 28 images.

    python -m benchmarks.gpu            # on a machine with a GPU (make bench-gpu); about 5 minutes
    python -m benchmarks.gpu --tiny     # the same program at toy sizes, on any device (a check)

Refuses (exit 2, with the reason) where JAX sees no GPU, unless ``--tiny``. Everything runs in
float32 on the first GPU, each row one jitted ``jr.run`` of ``STEPS`` updates with the state
donated, compile time excluded (one warm-up run) and the best of ``--repeat`` runs kept.

* **Low rank**: ``jr.lrvga(logistic, rank=p)`` (the default scheme of a GLM) at d = 1e5, 1e6, 1e7
  and p = 1, 10, 50, on Gaussian inputs made on the device (and at d = 1e7 with the CPU's row
  blocks, :mod:`jaxrvga.kernels.row_blocks`). Beside each time, the time of one pass over ``W`` (``v @ W``,
  the least any step must do) measured in the same process, and XLA's temporary memory of the
  run as a multiple of the state.
* **Diagonal**: ``jr.diag_rvga(logistic)`` at d = 1e7.
* **Networks**: an MLP 784-256-256-10 (269,322 weights) and a LeNet-5 CNN (61,706 weights), the
  10-class categorical model, on random 28 x 28 images (time only: no accuracy is claimed here,
  see ``benchmarks/bench_images`` for scores on real digits): the methods of
  ``benchmarks.bench_images.METHODS`` (Adam with batch 1 and 16; the default filter
  (``moment_ekf``) at rank 10, with a buffer of 40 columns, the EKF, the empirical Fisher and
  minibatches of 16; the diagonal belief) in the same process; time per image and its ratio to
  Adam (batch 1).
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

import jaxrvga as jr
from benchmarks.machine import describe
from jaxrvga.kernels.row_blocks import BLOCK_ROWS

STEPS = 20
SIZES = {"full": {"dims": (100_000, 1_000_000, 10_000_000), "ranks": (1, 10, 50), "diag": 10_000_000, "images": 200,
                  "hidden": (256, 256)},
         "tiny": {"dims": (1_000,), "ranks": (1, 2), "diag": 1_000, "images": 16, "hidden": (8,)}}


def gpu_or_exit(tiny: bool):
    """The first GPU, or (``tiny``) the default device; exits with a message where there is no GPU."""
    try:
        return jax.devices("gpu")[0]
    except RuntimeError as err:
        if tiny:
            return jax.devices()[0]
        print(f"benchmarks.gpu needs a GPU, and JAX sees none ({err}). Install jax with CUDA "
              f"(pip install 'jax[cuda13]') on a machine with one, or run with --tiny to check the program here.",
              file=sys.stderr)
        sys.exit(2)


def best_seconds(fn, state, args, repeat: int):
    """Best wall time of ``fn(state, *args)`` over ``repeat`` runs after a warm-up (compile), each
    on a fresh copy of ``state`` (the run donates it)."""
    jax.block_until_ready(fn(jax.tree_util.tree_map(jnp.copy, state), *args))
    times = []
    for _ in range(repeat):
        fresh = jax.block_until_ready(jax.tree_util.tree_map(jnp.copy, state))
        t0 = time.perf_counter()
        jax.block_until_ready(fn(fresh, *args))
        times.append(time.perf_counter() - t0)
    return min(times)


def filter_run(flt):
    """``run(state, xs, ys) -> state``: one jitted pass, the state donated."""
    return jax.jit(lambda state, xs, ys: jr.run(flt, state, xs, ys)[0], donate_argnums=0)


def glm_stream(key, d):
    """``STEPS`` Gaussian inputs scaled by ``1 / sqrt(d)`` and their logistic labels, made on the device."""
    kx, ky = jax.random.split(key)
    xs = jax.random.normal(kx, (STEPS, d), jnp.float32) / math.sqrt(d)
    return xs, (jax.random.uniform(ky, (STEPS,)) < 0.5).astype(jnp.float32)


def lowrank_row(d, p, repeat, block_rows=None):
    """Time per step of the default low-rank filter (``block_rows`` as there), one pass over ``W``
    and XLA's temporary memory of the run as a multiple of the state."""
    flt = jr.lrvga(jr.models.logistic(), rank=p, block_rows=block_rows)
    W0, psi0 = jr.lowrank.init_factors(jax.random.PRNGKey(0), d, p, 1.0, dtype=jnp.float32)
    state = flt.init(jnp.zeros(d, jnp.float32), W0, psi0)
    xs, ys = glm_stream(jax.random.PRNGKey(1), d)
    step = best_seconds(filter_run(flt), state, (xs, ys), repeat) / STEPS
    one_pass = best_seconds(jax.jit(lambda W, v: v @ W), W0, (xs[0],), repeat)
    name = "low rank" + ("" if block_rows is None else f", row blocks of {block_rows}")
    return {"belief": name, "d": d, "p": p, "ms/step": 1e3 * step, "passes of W": step / one_pass,
            "state GB": 4 * d * (p + 2) / 1e9, "temp / state": temp_bytes(flt, state, xs, ys) / (4 * d * (p + 2))}


def temp_bytes(flt, state, xs, ys):
    """XLA's count of the temporary buffers of one run (``memory_analysis``), in bytes (NaN where not reported)."""
    analysis = filter_run(flt).lower(state, xs, ys).compile().memory_analysis()
    return float(getattr(analysis, "temp_size_in_bytes", float("nan")))


def diagonal_row(d, repeat):
    """Time per step of ``jr.diag_rvga`` on the logistic model."""
    flt = jr.diag_rvga(jr.models.logistic())
    state = flt.init(jnp.zeros(d, jnp.float32), 1.0)
    xs, ys = glm_stream(jax.random.PRNGKey(1), d)
    step = best_seconds(filter_run(flt), state, (xs, ys), repeat) / STEPS
    return {"belief": "diagonal", "d": d, "p": 0, "ms/step": 1e3 * step, "passes of W": float("nan"),
            "state GB": 8 * d / 1e9, "temp / state": temp_bytes(flt, state, xs, ys) / (8 * d)}


# --------------------------------------------------------------------------- networks

def dense_params(key, sizes):
    return [(jax.random.normal(k, (m, n), jnp.float32) / math.sqrt(m), jnp.zeros(n, jnp.float32))
            for k, (m, n) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:]))]


def mlp(key, hidden=(256, 256)):
    """``(theta0, h, blocks)`` of the MLP 784-``hidden``-10 (ReLU): ``h(theta, image) -> 10 logits``,
    ``blocks`` each layer's number of parameters in ``theta0``'s order (``prior_groups`` of a prior
    learned per layer)."""
    layers = dense_params(key, (784, *hidden, 10))
    theta0, unravel = ravel_pytree(layers)

    def h(theta, image):
        layers, x = unravel(theta), image.reshape(-1)
        for W, b in layers[:-1]:
            x = jax.nn.relu(x @ W + b)
        W, b = layers[-1]
        return x @ W + b

    return theta0, h, jr.learned_prior.block_sizes(layers)


def lenet(key):
    """``(theta0, h, blocks)`` of LeNet-5: conv 5x5x6 (same), pool, conv 5x5x16, pool, 120, 84, 10 (tanh);
    ``blocks`` as :func:`mlp`'s."""
    k1, k2, k3 = jax.random.split(key, 3)
    convs = [(jax.random.normal(k, (o, i, 5, 5), jnp.float32) / math.sqrt(25 * i), jnp.zeros(o, jnp.float32))
             for k, (i, o) in zip((k1, k2), ((1, 6), (6, 16)))]
    dense = dense_params(k3, (400, 120, 84, 10))
    theta0, unravel = ravel_pytree((convs, dense))

    def pool(x):  # 2 x 2 average pooling
        c, h, w = x.shape[1:]
        return x.reshape(1, c, h // 2, 2, w // 2, 2).mean(axis=(3, 5))

    def h(theta, image):
        convs, dense = unravel(theta)
        x = image.reshape(1, 1, 28, 28)
        for (K, b), padding in zip(convs, ("SAME", "VALID")):
            x = pool(jnp.tanh(jax.lax.conv_general_dilated(x, K, (1, 1), padding) + b[:, None, None]))
        x = x.reshape(-1)
        for W, b in dense[:-1]:
            x = jnp.tanh(x @ W + b)
        W, b = dense[-1]
        return x @ W + b

    return theta0, h, jr.learned_prior.block_sizes([*convs, *dense])  # ravel order: convs, then dense


def network_rows(name, make, n, repeat, methods=None):
    """Time per image of the networks' methods on ``n`` random images: every method of
    :data:`benchmarks.bench_images.METHODS` (or ``methods``, a list of its entries), the
    filters' state donated, Adam (batch 1) first and the ratios to it."""
    from benchmarks import bench_images as bi
    theta0, h, blocks = make(jax.random.PRNGKey(0))
    xs = jax.random.uniform(jax.random.PRNGKey(1), (n, 28, 28), jnp.float32)
    ys = jax.random.randint(jax.random.PRNGKey(2), (n,), 0, 10)
    rows, adam = [], None
    for method, kind, options in bi.METHODS if methods is None else methods:
        if kind == "adam":
            run = jax.jit(bi.adam_pass(h, options["lr"], options["batch"]))
            t = best_seconds(run, theta0, (xs, ys), repeat)
        else:
            flt, state, _ = bi.make_filter(h, theta0, kind, options, blocks)
            run = jax.jit(bi.filter_pass(flt, options.get("batch", 1), options.get("passes", 1)), donate_argnums=0)
            t = best_seconds(run, state, (xs, ys), repeat)
        batch = options.get("batch", 1)
        t /= n // batch * batch  # the images a pass takes (whole minibatches)
        adam = t if adam is None else adam
        rows.append({"network": name, "d": theta0.size, "method": method, "ms/image": 1e3 * t,
                     "x adam": t / adam})
    return rows


def table(rows):
    """Rows of dicts as a Markdown table (numbers to 3 significant digits)."""
    keys = list(rows[0])
    cell = lambda v: f"{v:,}" if isinstance(v, int) else (f"{v:.3g}" if isinstance(v, float) else str(v))  # noqa: E731
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    return "\n".join(lines + ["| " + " | ".join(cell(r[k]) for k in keys) + " |" for r in rows])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="toy sizes on any device (checks the program)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    device = gpu_or_exit(args.tiny)
    sizes = SIZES["tiny" if args.tiny else "full"]
    print(describe())
    print(f"# device: {device.device_kind} ({device.platform}); float32; {STEPS} steps a run, best of {args.repeat}")
    with jax.default_device(device):
        rows = [lowrank_row(d, p, args.repeat) for d in sizes["dims"] for p in sizes["ranks"]]
        rows += [lowrank_row(sizes["dims"][-1], p, args.repeat, BLOCK_ROWS) for p in sizes["ranks"]]
        rows.append(diagonal_row(sizes["diag"], args.repeat))
        print(table(rows), flush=True)
        hidden = sizes["hidden"]
        nets = network_rows(f"MLP 784-{'-'.join(map(str, hidden))}-10", lambda key: mlp(key, hidden), sizes["images"],
                            args.repeat)
        nets += network_rows("LeNet-5", lenet, sizes["images"], args.repeat)
        print(table(nets))


if __name__ == "__main__":
    main()
