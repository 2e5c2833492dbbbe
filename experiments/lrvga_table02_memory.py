"""L-RVGA Table 2: memory and time of the linear L-RVGA at d = 1e6 with 3 inner loops, p in {100, 10, 2, 1}.

Paper ([LRVGA] Table 2, laptop i7 2.3 GHz): full Kalman (estimated) 8000 GB; L-RVGA p = 100: 6 s,
816 MB; p = 10: 0.7 s, 96 MB; p = 2: 0.2 s, 32 MB; p = 1: 0.06 s, 24 MB. The memory column equals
the model ``8 d (p + 2)`` bytes (W plus the two d-vectors mu and psi).

Measured exactly as Table 1 (:func:`experiments.memory.measure_memory`: a fresh
interpreter per configuration, peak RSS of the timed run minus the baseline), for the linear L-RVGA
(:func:`jaxrvga.lrvga`, exact scheme, 3 inner loops) over T steps of random data. The full
Kalman filter (:func:`jaxrvga.kalman`) is measured at a small d (its d x d covariance) next to its
model ``8 d^2`` to show the quadratic scaling; at d = 1e6 it is the model only.

``quick``: d = 5e4 (Kalman at d = 3000), T = 2; full: d = 1e6 (Kalman at d = 5000), T = 5.
The machine is shared (2 cores): times are indicative only.
"""
from __future__ import annotations

from pathlib import Path

from experiments.common import cli, progress, write_csv
from experiments.memory import MEMORY_HEADER, measure_memory

PS = (100, 10, 2, 1)
PAPER = {100: (6.0, 816), 10: (0.7, 96), 2: (0.2, 32), 1: (0.06, 24)}
#: ``(d, d of the full Kalman filter, T)``.
QUICK, FULL = (50_000, 3000, 2), (1_000_000, 5000, 5)


def run(quick: bool, out: Path) -> dict:
    d, d_kf, T = QUICK if quick else FULL
    configs = [(f"L-RVGA p = {p}, 3 inner loops", "lrvga", d, p, 8 * d * (p + 2)) for p in PS]
    configs.append((f"full Kalman (measured at d = {d_kf})", "kalman", d_kf, 1, 8 * d_kf**2))
    summary, rows = {}, []
    for label, algo, dd, p, model in progress(configs, "Table 2", quick):
        res = measure_memory(algo, dd, p, T, loops=3)
        paper = PAPER.get(p, ("", "")) if algo == "lrvga" else ("", "")
        rows.append([label, dd, p, res["time_per_iter"], res["peak_mb"], res["state_mb"], model / 1e6,
                     res["peak_mb"] / (model / 1e6), res["peak_total_mb"], res["base_mb"], *paper])
        tag = f"{algo}_p{p}_d{dd}" if algo == "lrvga" else f"kalman_d{dd}"
        summary[f"{tag}_peak_mb"] = res["peak_mb"]
        summary[f"{tag}_state_mb"] = res["state_mb"]
        summary[f"{tag}_model_mb"] = model / 1e6
        summary[f"{tag}_time_per_iter_s"] = res["time_per_iter"]
    rows.append([f"full Kalman at d = {d} (model only)", d, "", "", "", "", 8 * d**2 / 1e6, "", "", "", "",
                 8e6])
    summary[f"kalman_d{d}_model_mb"] = 8 * d**2 / 1e6
    write_csv(out / "lrvga_table02.csv", MEMORY_HEADER + ["paper_time_s", "paper_MB"], rows)
    return summary


if __name__ == "__main__":
    cli(run, __doc__)
