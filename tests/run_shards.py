"""Run the whole test suite as parallel pytest processes over disjoint sets of test files.

    python tests/run_shards.py [--shards N] [pytest options ...]

The suite is bound by XLA's compilation, which is single-threaded: on the 2-core CI machine two
processes finish it in a little over half the time of one. Every test file runs in exactly one
process; the files are spread by the longest-first rule over the weights below (seconds of one
file alone on the 2-core machine, measured; a file not listed counts :data:`DEFAULT_WEIGHT`).
Each process writes its own log, printed whole when it ends (so the output is not interleaved),
under its own ``--basetemp``. The exit status is the first nonzero one (0 when all pass).
``--shards 1`` is one plain pytest run.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: Seconds per file, measured (the files of one shard in one process, two shards on 2 cores); only
#: their ratios matter.
WEIGHTS = {"test_reliability": 243, "test_experiments_lrvga": 170, "test_lrvga": 143, "test_filters": 112,
           "test_autodiff": 101, "test_examples": 101, "test_rvga": 94, "test_sparse_inputs": 91,
           "test_evidence": 72, "test_experiments_rvga": 64, "test_klprox": 62, "test_validation": 59,
           "test_lrvga_buffer": 56, "test_tuning_free": 55, "test_experiments_default_figs": 52,
           "test_diagonal": 46, "test_bench_images": 60, "test_experiments_default": 38, "test_headtohead": 38,
           "test_io": 37, "test_predictive": 36, "test_em_tolerance": 36, "test_multiclass": 32,
           "test_reference": 32, "test_online_em": 31, "test_gpu_benchmark": 30, "test_factor_analysis": 29,
           "test_average": 28, "test_minibatch_projection": 28, "test_readme": 27, "test_networks": 27,
           "test_fisher_rank": 35, "test_fuzz": 27, "test_dynamics": 26,
           "test_sharding": 25, "test_other_isa": 25, "test_dual": 23,
           "test_core": 23, "test_noise": 23, "test_models": 21, "test_masked_update": 20, "test_metrics": 18,
           "test_properties": 18, "test_multiprocess": 17, "test_guard": 16, "test_docs": 15,
           "test_lowrank": 15, "test_belief_contract": 12, "test_traces": 11, "test_reliability_fullrank": 10,
           "test_programs": 9, "test_run_all": 8, "test_sample": 8, "test_smoother": 6, "test_batch": 5,
           "test_layout": 4, "test_data": 3, "test_error_hints": 2}
DEFAULT_WEIGHT = 12


def split(files: list[Path], shards: int) -> list[list[Path]]:
    """``files`` in ``shards`` groups of about equal weight (the heaviest file to the lightest group)."""
    groups = [[] for _ in range(shards)]
    load = [0.0] * shards
    for f in sorted(files, key=lambda f: (-WEIGHTS.get(f.stem, DEFAULT_WEIGHT), f.name)):
        i = load.index(min(load))
        groups[i].append(f)
        load[i] += WEIGHTS.get(f.stem, DEFAULT_WEIGHT)
    return [sorted(g) for g in groups if g]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=2)
    args, pytest_args = parser.parse_known_args(argv)
    files = sorted(TESTS.glob("test_*.py"))
    if not files:
        print("no test files found", file=sys.stderr)
        return 1
    if args.shards <= 1:
        return subprocess.call([sys.executable, "-m", "pytest", *pytest_args, *map(str, files)])
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jaxrvga-shards-") as tmp:
        runs = []
        for i, group in enumerate(split(files, args.shards)):
            log = open(Path(tmp) / f"shard{i}.log", "w+")
            cmd = [sys.executable, "-m", "pytest", *pytest_args, f"--basetemp={Path(tmp) / f'base{i}'}",
                   *map(str, group)]
            print(f"shard {i}: {len(group)} files: {' '.join(f.stem for f in group)}", flush=True)
            runs.append((i, log, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)))
        codes, pending = {}, list(runs)
        while pending:
            for run in list(pending):
                i, log, proc = run
                if proc.poll() is not None:
                    codes[i] = proc.returncode
                    log.seek(0)
                    print(f"\n===== shard {i} (exit {proc.returncode}, {time.perf_counter() - start:.0f} s) =====",
                          flush=True)
                    sys.stdout.write(log.read())
                    sys.stdout.flush()
                    log.close()
                    pending.remove(run)
            time.sleep(0.5)
    failed = [c for _, c in sorted(codes.items()) if c != 0]
    print(f"\nall shards done in {time.perf_counter() - start:.0f} s; exit codes {[codes[i] for i in sorted(codes)]}")
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main())
