"""experiments/tuning_free.py at quick sizes: every task runs with no hyper-parameter chosen, and the
learned-noise linear regression predicts as well as exact Bayes with the true hyper-parameters."""
import json
import math

import pytest

from experiments import tuning_free


#: The tasks run here (the 10-class and the known-noise diabetes tasks run the same code).
QUICK_TASKS = ("binary", "diabetes", "linear")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("tuning_free")
    return tuning_free.run(True, out, tasks=QUICK_TASKS, timing=False), out


def test_every_task_runs_and_is_written(quick):
    results, out = quick
    assert [r["task"] for r in results] == list(QUICK_TASKS)
    assert json.loads((out / "tuning_free.json").read_text()) == json.loads(json.dumps(results))
    for r in results:
        assert math.isfinite(r["grid_nlpd"]) and r["converged"], r["task"]
        assert math.isfinite(r["learned_nlpd"]) and r["learned_converged"], r["task"]
        layers = 1 if r["task"] == "linear" else 2  # one learned prior variance per layer of a network
        assert len(r["learned_prior_var"]) == layers, r["task"]
        assert all(math.isfinite(v) and v > 0 for v in r["learned_prior_var"])
        assert math.isclose(sum(r["prior_weights"]), 1.0, rel_tol=1e-4)
        assert math.isclose(sum(r["scale_weights"]), 1.0, rel_tol=1e-4)
        assert len(r["members"]) == len(r["priors"])
        assert 1 <= r["kept_members"] <= len(r["priors"])
        assert math.isclose(r["pruned_nlpd"], r["grid_nlpd"], rel_tol=1e-5), r["task"]  # 1e-12 of the mass dropped
    # the table bolds each task's documented default: the learned prior of a network, the linear task's grid
    for r, line in zip(results, (out / "tuning_free.md").read_text().splitlines()[2:]):
        default = r["learned_nlpd"] if r["task"] != "linear" else r["grid_nlpd"]
        assert line.count("**") == 2 and f"**{default:.3f}**" in line, line


def test_linear_regression_as_good_as_the_true_hyper_parameters(quick):
    """Noise learned and prior averaged: within 0.05 nats per point of the exact predictive that knows
    the true prior and noise variance (60 training points)."""
    linear = next(r for r in quick[0] if r["task"] == "linear")
    assert linear["grid_nlpd"] < linear["reference"] + 0.05


def test_the_evidence_fit_recovers_the_linear_task_from_a_bad_prior():
    """One learned-noise Kalman filter from a prior 1000x too tight, then its prior precision fitted by
    the evidence (jr.evidence.fit_prior_precision): the test NLPD of the exact predictive with the true
    hyper-parameters, up to what 60 points can tell."""
    row, = tuning_free.prior_fit_rows("linear", quick=True, prior_vars=(1e-3,))
    fitted = row["one"]
    assert fitted["converged"]
    assert fitted["linearised"] <= row["reference"] + 0.02
    assert fitted["linearised"] < row["linearised"] - 0.5  # the tight prior was far worse


def test_summary_gives_each_task_its_nlpd_and_costs():
    """``--json FILE``: per task the documented default (the prior learned per layer for a network, the grid
    for the linear task), its test NLPD and its time over one filter's and Adam's, and the same for each average;
    without timing, the NLPDs alone."""
    timed = {"task": "binary", "grid_nlpd": 0.09, "one_prior_nlpd": 0.11, "learned_nlpd": 0.1, "seconds_average": 6.0,
             "seconds_one_prior_average": 1.5, "seconds_learned_prior": 2.0, "seconds_one_filter": 0.5,
             "seconds_adam": 0.05, "predictive_seconds_pruned": 3e-4, "predictive_seconds_member": 2e-4}
    untimed = {"task": "linear", "grid_nlpd": 0.75, "one_prior_nlpd": 0.76, "learned_nlpd": 0.77}
    out = tuning_free.summary([timed, untimed])
    assert out["binary"] == {"recipe": "learned_prior", "nlpd": 0.1, "cost_vs_one_filter": 4.0, "cost_vs_adam": 40.0,
                             "grid": {"nlpd": 0.09, "cost_vs_one_filter": 12.0, "cost_vs_adam": 120.0,
                                      "predictive_cost_vs_member": pytest.approx(1.5)},
                             "one_prior": {"nlpd": 0.11, "cost_vs_one_filter": 3.0, "cost_vs_adam": 30.0},
                             "learned_prior": {"nlpd": 0.1, "cost_vs_one_filter": 4.0, "cost_vs_adam": 40.0}}
    assert out["linear"] == {"recipe": "grid", "nlpd": 0.75, "grid": {"nlpd": 0.75}, "one_prior": {"nlpd": 0.76},
                             "learned_prior": {"nlpd": 0.77}}


def test_calibration_rows_read_the_same_runs(quick):
    """``--calibration``: an ECE in [0, 1] for each predictive of the binary task, and the NLPDs of the
    same passes as the main run's (the default, the one prior x scales, the learned prior)."""
    binary = next(r for r in quick[0] if r["task"] == "binary")
    rows = {r["method"]: r for r in tuning_free.calibration_rows("binary", quick=True)}
    assert set(rows) == {"average", "one_prior_average", "learned_prior", "one_prior_plug_in", "one_prior_linearised"}
    assert all(0.0 <= r["ece"] <= 1.0 and math.isfinite(r["nlpd"]) for r in rows.values())
    for method, key in (("average", "grid_nlpd"), ("one_prior_average", "one_prior_nlpd"),
                        ("learned_prior", "learned_nlpd")):
        assert math.isclose(rows[method]["nlpd"], binary[key], rel_tol=1e-4), method


def test_seed_rows_start_from_the_main_run(quick):
    """``--seeds``: seed 0 is the main run (the same NLPDs), seed 1 other initial weights and order."""
    binary = next(r for r in quick[0] if r["task"] == "binary")
    first, second = tuning_free.seed_rows("binary", quick=True, seeds=2)
    for method, key in (("average", "grid_nlpd"), ("one_prior_average", "one_prior_nlpd"),
                        ("learned_prior", "learned_nlpd")):
        assert math.isclose(first[method], binary[key], rel_tol=1e-4), method
        assert math.isfinite(second[method]) and abs(second[method] - first[method]) > 1e-4, method
    assert second["seed"] == 1 and len(second["learned_prior_var"]) == 2 and min(second["learned_prior_var"]) > 0


def test_passes_rows_start_from_the_recipe(quick):
    """``--passes``: one pass is the main run's recipe (the same NLPD); two tempered passes another belief."""
    binary = next(r for r in quick[0] if r["task"] == "binary")
    one, two = tuning_free.passes_rows("binary", quick=True, passes=(1, 2))
    assert (one["passes"], two["passes"]) == (1, 2)
    assert math.isclose(one["nlpd"], binary["learned_nlpd"], rel_tol=1e-4)
    assert math.isfinite(two["nlpd"]) and abs(two["nlpd"] - one["nlpd"]) > 1e-4
    assert len(two["learned_prior_var"]) == 2 and min(two["learned_prior_var"]) > 0


def test_layer_sizes_are_the_blocks_of_each_layer():
    """``layer_sizes``: one block per layer of the flat MLP, the same split as ``layer_groups`` (weights and
    biases of a layer together), covering every parameter; ``mlp_sizes`` the task's widths (quick: one
    hidden layer of 8)."""
    import numpy as np
    from experiments.networks_any_prior import SIZES

    for sizes in SIZES.values():
        blocks = tuning_free.layer_sizes(sizes)
        np.testing.assert_array_equal(np.repeat(np.arange(len(blocks)), blocks), tuning_free.layer_groups(sizes) // 2)
    assert tuning_free.mlp_sizes("diabetes-noise-0.5", quick=True) == (SIZES["diabetes"][0], 8, SIZES["diabetes"][-1])
    assert tuning_free.layer_sizes((4, 8, 3)) == (4 * 8 + 8, 8 * 3 + 3)
