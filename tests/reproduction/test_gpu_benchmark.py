"""The GPU table's program (benchmarks/gpu.py) at toy sizes on the CPU, its refusal without a GPU,
and the backend-dependent default of the row blocks (:func:`jaxrvga.kernels.row_blocks.num_blocks`)."""
import math

import jax
import numpy as np
import pytest

from benchmarks import bench_images, gpu
from jaxrvga.kernels import row_blocks as blocks


@pytest.mark.skipif(any(d.platform == "gpu" for d in jax.devices()), reason="a GPU is present")
def test_refuses_clearly_without_a_gpu(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu.main([])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "needs a GPU" in err and "--tiny" in err


def test_rows_at_toy_sizes():
    rows = [gpu.lowrank_row(64, 2, 1), gpu.lowrank_row(64, 2, 1, block_rows=16), gpu.diagonal_row(64, 1)]
    for row in rows:
        assert row["ms/step"] > 0 and row["temp / state"] > 0
    assert rows[1]["belief"] == "low rank, row blocks of 16"
    # every method of bench_images runs in tests/reproduction/test_bench_images.py; here the rows of three
    methods = [bench_images.METHODS[i] for i in (0, 1, 9)]  # Adam 1 and 16, diagonal ekf 16
    nets = gpu.network_rows("MLP", lambda key: gpu.mlp(key, (4,)), 16, 1, methods=methods)
    assert [r["method"] for r in nets] == [name for name, _, _ in methods]
    assert nets[0]["method"] == "Adam, batch 1" and nets[0]["x adam"] == 1.0
    assert all(r["ms/image"] > 0 for r in nets)
    assert nets[0]["d"] == 784 * 4 + 4 + 4 * 10 + 10
    table = gpu.table(nets)
    assert table.count("\n") == len(nets) + 1 and "| MLP | 3,190 | Adam, batch 1 |" in table


def test_lenet_rows_at_a_few_images():
    methods = [m for m in bench_images.METHODS if m[0] in ("Adam, batch 1", "L-RVGA default (moment_ekf)")]
    nets = gpu.network_rows("LeNet-5", gpu.lenet, 2, 1, methods=methods)
    assert [r["method"] for r in nets] == ["Adam, batch 1", "L-RVGA default (moment_ekf)"]
    assert nets[1]["d"] == 61_706 and nets[1]["ms/image"] > 0 and nets[1]["x adam"] > 0


def test_lenet_has_the_lenet5_shape():
    theta0, h, blocks = gpu.lenet(jax.random.PRNGKey(0))
    assert theta0.size == 156 + 2416 + 48120 + 10164 + 850
    assert blocks == (156, 2416, 48120, 10164, 850)  # each layer's weights and biases, in theta0's order
    logits = h(theta0, np.ones((28, 28), np.float32))
    assert logits.shape == (10,) and bool(np.all(np.isfinite(logits)))
    grad = jax.grad(lambda t: h(t, np.ones((28, 28), np.float32))[0])(theta0)  # Adam and the filters need it
    assert grad.shape == theta0.shape and bool(np.all(np.isfinite(grad)))


def test_row_blocks_by_default_on_the_cpu_only(monkeypatch):
    d, p = 1 << 20, 8
    assert blocks.num_blocks(d, p) == math.ceil(d / blocks.BLOCK_ROWS)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert blocks.num_blocks(d, p) == 1
    assert blocks.num_blocks(d, p, block_rows=blocks.BLOCK_ROWS) == math.ceil(d / blocks.BLOCK_ROWS)
