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
#: Seconds per file, measured (one file at a time, 2 cores); only their ratios matter.
WEIGHTS = {"test_reliability": 140, "test_experiments_lrvga": 120, "test_lrvga": 90, "test_rvga": 80,
           "test_autodiff": 80, "test_filters": 85, "test_klprox": 50, "test_examples": 45,
           "test_experiments_rvga": 43, "test_experiments_default_figs": 43, "test_validation": 40,
           "test_headtohead": 33, "test_evidence": 35, "test_diagonal": 45, "test_networks": 35,
           "test_multiclass": 30, "test_docs": 25, "test_sharding": 25, "test_dual": 20, "test_io": 20,
           "test_fuzz": 22, "test_experiments_default": 25, "test_em_tolerance": 20, "test_dynamics": 20,
           "test_belief_contract": 20, "test_readme": 20, "test_multiprocess": 15, "test_predictive": 20,
           "test_tuning_free": 45, "test_noise": 25, "test_average": 25, "test_masked_update": 15}
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
