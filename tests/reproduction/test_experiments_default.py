"""``experiments/lrvga_default_accuracy.py`` at quick sizes: the claims of REPORT.md's section
"L-RVGA accurate by default" (issue 17)."""
from experiments import lrvga_default_accuracy
from experiments.common import quick_fixture

default = quick_fixture(lrvga_default_accuracy)


def test_default_is_exact_at_full_rank_and_far_closer_below(default):
    s, out = default
    assert abs(s["kl_p20_default"]) < 1e-6  # exact at full rank (to rounding)
    assert s["kl_p20_published"] > 1.0  # the published projection is not
    assert 4 * s["kl_p5_default"] <= s["kl_p5_published"]
    assert (out / "lrvga_default_linear.csv").stat().st_size > 0


def test_default_does_not_diverge_on_the_mlp_or_with_samples(default):
    s, _ = default
    assert s["rmse_L-RVGA p=10, default"] <= 1.25 * s["rmse_full-covariance EKF"]
    assert abs(s["sampled_norm_default"] - s["sampled_norm_exact posterior"]) <= 0.2 * s["sampled_norm_exact posterior"]
    assert s["sampled_norm_published"] > 10 * s["sampled_norm_exact posterior"]  # what the issue found
