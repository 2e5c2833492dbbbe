"""Row-blocked passes over tall ``d x p`` arrays, so that large problems need no ``d x p`` temporary.

XLA on CPU does not fuse an elementwise producer into a matrix product: ``(W / psi[:, None]).T @ W``
materialises the scaled ``d x p`` copy of ``W`` before the Gram. At ``d p`` in the hundreds of
millions such temporaries, not the state, set the peak memory. The two passes of Algorithm 1
of [LRVGA] (Grams of the rows, then a row-wise rewrite of ``W``) are row-separable, so they are
streamed over equal row blocks:

* :func:`block_sum` - ``sum_b fn(block_b)`` of small (p x p, m x p) results, by ``lax.scan``;
* :func:`block_map` - one pass writing new ``d``-leading arrays block by block, optionally in
  place (``lax.fori_loop`` over dynamic-update-slices of the carry, so that updating ``W`` needs
  no second ``d x p`` buffer), while summing small per-block results (the Grams of the next
  pass), so that each EM iteration after the first reads the rows once.

Only block-sized temporaries exist. Small problems (``d p`` below :data:`BLOCK_MIN_ELEMENTS`)
use a single block, i.e. the plain unblocked expressions, and so does every problem by default
where JAX's default backend is not the CPU: on a GPU the blocks are a sequential loop of small
kernels (at d = 1e7, p = 1 on an H100 a step took 40 ms blocked, BENCHMARKS.md "GPU"), and its
memory holds the ``d x p`` temporaries; pass ``block_rows`` to block there too.
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax

from ..validation import positive_int

#: Target rows per block for large problems.
BLOCK_ROWS = 8192
#: Problems with ``d p`` below this many elements are not blocked.
BLOCK_MIN_ELEMENTS = 1 << 22

def num_blocks(d: int, p: int, block_rows=None) -> int:
    """Number of equal row blocks for a ``d x p`` pass (1 = no blocking).

    With ``block_rows=0`` it is 1 (what arrays sharded along ``d`` need: :mod:`jaxrvga.sharding`).
    ``block_rows=None`` blocks only large problems (``d p >= BLOCK_MIN_ELEMENTS``) on the CPU
    (module docstring) with blocks of about :data:`BLOCK_ROWS` rows. The count must divide ``d`` with blocks of at least
    ``block_rows / 8`` rows, else 1 (a ``d`` without a suitable divisor is not blocked).

    Args:
      d: the rows of the pass.
      p: its columns.
      block_rows: rows per block (None: automatic; 0: one block).

    Returns:
      The number of blocks, an int >= 1.
    """
    if block_rows == 0:
        return 1
    if block_rows is None:
        if d * p < BLOCK_MIN_ELEMENTS or jax.default_backend() != "cpu":
            return 1
        block_rows = BLOCK_ROWS
    block_rows = positive_int("block_rows", block_rows)
    for nb in range(-(-d // block_rows), d + 1):
        if d % nb == 0:
            return nb if d // nb >= max(1, block_rows // 8) else 1
    return 1


def _split(a, nb: int):
    return a.reshape((nb, a.shape[0] // nb) + a.shape[1:])


def block_sum(fn: Callable, arrays: Sequence, nb: int):
    """``sum_b fn(*[a[rows_b] for a in arrays])`` over ``nb`` equal row blocks.

    ``fn`` returns a pytree of small arrays (Grams); with ``nb = 1`` it is ``fn(*arrays)``.

    Args:
      fn: ``fn(*blocks) -> pytree`` of small arrays.
      arrays: arrays with a leading axis of ``d`` rows.
      nb: the number of blocks (dividing ``d``).

    Returns:
      The summed pytree.
    """
    if nb == 1:
        return fn(*arrays)
    rows = [_split(a, nb) for a in arrays]
    shapes = jax.eval_shape(fn, *(r[0] for r in rows))
    zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def step(acc, blocks):
        return jax.tree_util.tree_map(jnp.add, acc, fn(*blocks)), None

    return lax.scan(step, zeros, rows)[0]


def block_map(fn: Callable, arrays: Sequence, nb: int, in_place: int = 0):
    """One pass over the row blocks: ``fn(blocks) -> (new_blocks, sums)``, ``new`` and ``sum`` gathered.

    ``arrays`` is a tuple of arrays whose leading axis has length ``d``; ``fn`` receives the
    tuple of their blocks and returns a tuple of new ``d``-leading blocks and a pytree of small
    arrays (e.g. the Grams of the next EM iteration; ``()`` for none). Returns
    ``(new_arrays, summed)``.

    With ``in_place = k > 0`` the first ``k`` new blocks overwrite the first ``k`` arrays (same
    shapes): each block is read before it is written, so XLA updates those buffers in place
    (a ``lax.scan`` over the block index with dynamic-update-slices of the carry; a buffer the
    caller still uses afterwards is copied once); the other new blocks are the scan's outputs
    (fresh buffers). Overwrite only an array whose new block is a materialised result (a matrix
    product): when the new block is an elementwise function of the old one, XLA fuses the two and
    copies the whole carried array in every block to stay safe (measured: ``psi`` copied
    2 x 1250 times per step at d = 1e7). With ``in_place = 0`` the new arrays are fresh buffers
    written block by block (``lax.scan`` outputs). With ``nb = 1`` it is ``fn(arrays)``.

    Args:
      fn: ``fn(blocks) -> (new_blocks, sums)``.
      arrays: arrays with a leading axis of ``d`` rows.
      nb: the number of blocks (dividing ``d``).
      in_place: how many leading arrays the new blocks overwrite.

    Returns:
      ``(new_arrays, summed)``: a tuple of (d, ...) arrays and the summed pytree.
    """
    arrays = tuple(arrays)
    if nb == 1:
        new, sums = fn(arrays)
        return tuple(new), sums
    rows = tuple(_split(a, nb) for a in arrays)
    shapes = jax.eval_shape(fn, tuple(r[0] for r in rows))[1]
    zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def add(acc, sums):
        return jax.tree_util.tree_map(jnp.add, acc, sums)

    if in_place == 0:
        def step(acc, blocks):
            new, sums = fn(blocks)
            return add(acc, sums), tuple(new)

        summed, new = lax.scan(step, zeros, rows)
    else:
        def body(carry, i):
            own, acc = carry
            new, sums = fn(tuple(a[i] for a in own) + tuple(r[i] for r in rows[in_place:]))
            new = tuple(new)
            return (tuple(a.at[i].set(n) for a, n in zip(own, new)), add(acc, sums)), new[in_place:]

        (own, summed), fresh = lax.scan(body, (tuple(rows[:in_place]), zeros), jnp.arange(nb))
        new = own + tuple(fresh)
    return tuple(a.reshape((-1,) + a.shape[2:]) for a in new), summed


__all__ = ["BLOCK_ROWS", "BLOCK_MIN_ELEMENTS", "num_blocks", "block_sum", "block_map"]
