"""L-RVGA Table 1: memory and time of the covariance factorisation at d = 1e6, p = 100, 1 inner loop.

Paper ([LRVGA] Table 1, laptop i7 2.3 GHz): batch EM (estimated) 8000 GB; online EM 1 s/iteration,
1.6 GB; recursive EM 2 s/iteration, 0.8 GB. The memory column is the model ``8 d p`` bytes per d x p
array (recursive EM stores W: 0.8 GB; online EM also S2: 1.6 GB).

Here the memory is **measured**: each configuration runs in a fresh interpreter
(``subprocess``) that imports jax, enables float64, warms up (the same algorithm at d = 64) and
draws the T data vectors. It then runs T steps with :func:`jaxrvga.run` (``donate=True``, so the
initial state's buffers are reused) once, to compile. The baseline is the resident set size at
that point, once it has settled (XLA frees dropped buffers asynchronously): the interpreter with
jax, the compiled step and the data, but no state. The peak RSS is reset to it
(``/proc/self/clear_refs``), the initial state is built (one fused kernel: no RNG temporaries) and
the T steps run again, timed. Reported, in decimal MB: peak RSS - baseline during that run
(initial state + every buffer and temporary of the jitted steps), the initial state alone, and,
as a conservative figure, the peak over the compile-and-first run minus the RSS after the warm-up.

The peak is read as ``VmHWM`` (``/proc/self/status``), the kernel's peak RSS of the process's
address space, the quantity behind ``getrusage().ru_maxrss``. ``ru_maxrss`` itself cannot be used in
a child process: after fork + exec Linux folds the parent's RSS at fork time into it, and
``clear_refs`` does not reset that part (a probe started from a 1.8 GB ``run_all`` reported
>= 1.8 GB for every configuration).

Models: ``8 d p`` (recursive EM: W), ``2 x 8 d p`` (online EM: W and S2), ``8 d^2`` (batch EM:
the dense S, counted in its measured peak). Batch EM is measured at a small d to show the
quadratic scaling.

The machine is shared (2 cores, other jobs running): times are indicative only.
``quick``: d = 5e4 (batch EM at d = 3000), T = 2; full: d = 1e6 (batch EM at d = 5000), T = 5 steps.

The probe (:func:`experiments.memory.measure_memory`) is shared with Table 2.
"""
from __future__ import annotations

from pathlib import Path

from experiments.common import cli, progress, write_csv
from experiments.memory import MEMORY_HEADER, measure_memory

#: ``(d, d of batch EM, p, T)``.
QUICK, FULL = (50_000, 3000, 100, 2), (1_000_000, 5000, 100, 5)


def run(quick: bool, out: Path) -> dict:
    d, d_batch, p, T = QUICK if quick else FULL
    configs = [("online EM, 1 inner loop", "online", d, 2 * 8 * d * p),
               ("recursive EM, 1 inner loop", "recem", d, 8 * d * p),
               (f"batch EM (measured at d = {d_batch})", "batch", d_batch, 8 * d_batch**2)]
    summary, rows = {}, []
    for label, algo, dd, model in progress(configs, "Table 1", quick):
        res = measure_memory(algo, dd, p, T)
        rows.append([label, dd, p, res["time_per_iter"], res["peak_mb"], res["state_mb"], model / 1e6,
                     res["peak_mb"] / (model / 1e6), res["peak_total_mb"], res["base_mb"]])
        summary[f"{algo}_d{dd}_peak_mb"] = res["peak_mb"]
        summary[f"{algo}_d{dd}_state_mb"] = res["state_mb"]
        summary[f"{algo}_d{dd}_peak_total_mb"] = res["peak_total_mb"]
        summary[f"{algo}_d{dd}_model_mb"] = model / 1e6
        summary[f"{algo}_d{dd}_time_per_iter_s"] = res["time_per_iter"]
    rows.append([f"batch EM at d = {d} (model only)", d, p, "", "", "", 8 * d**2 / 1e6, "", "", ""])
    summary[f"batch_d{d}_model_mb"] = 8 * d**2 / 1e6
    write_csv(out / "lrvga_table01.csv", MEMORY_HEADER, rows)
    return summary


if __name__ == "__main__":
    cli(run, __doc__)
