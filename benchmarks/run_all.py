"""Run the benchmark scripts one after the other: ``python -m benchmarks.run_all [--full]``.

Default (about 13 minutes on 2 cores): the full-covariance table (:mod:`benchmarks.bench_rvga`),
one observation per call (:mod:`benchmarks.bench_step`),
the small L-RVGA grid (``bench_lrvga --quick``), the memory/scale run at d = 1e6, p = 10
with 1 and 3 inner loops (:mod:`benchmarks.scale_lrvga`) and Algorithm 1 with the iterate stored
or recomputed (:mod:`benchmarks.bench_iterate`), and an MLP trained online by L-RVGA against
Adam with the breakdown of the EKF step (:mod:`benchmarks.bench_nn`, about 3 minutes).
``--full`` adds the whole L-RVGA grid of the issue (d up to 1e6, p up to 100; hours on 2 cores)
and the d = 1e7, p = 100 float32 memory run (about 9 GB). Each script runs in its own process, so their peak memories are apart.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

DEFAULT = [
    ["benchmarks.bench_rvga"],
    ["benchmarks.bench_step"],
    ["benchmarks.bench_lrvga", "--quick"],
    ["benchmarks.scale_lrvga", "--d", "1000000", "--p", "10", "--steps", "5", "--inner-loops", "1"],
    ["benchmarks.scale_lrvga", "--d", "1000000", "--p", "10", "--steps", "5", "--inner-loops", "3"],
    ["benchmarks.bench_iterate", "--d", "1000000", "--p", "10", "--loops", "3"],
    ["benchmarks.bench_nn", "--profile"],
]
FULL = [
    ["benchmarks.bench_lrvga"],
    ["benchmarks.bench_iterate", "--d", "1000000", "--p", "100", "--loops", "3"],
    ["benchmarks.scale_lrvga", "--d", "10000000", "--p", "100", "--steps", "2", "--dtype", "float32",
     "--models", "linear", "--inner-loops", "1"],
    ["benchmarks.scale_lrvga", "--d", "10000000", "--p", "100", "--steps", "2", "--dtype", "float32",
     "--models", "linear", "--inner-loops", "3"],
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="also the whole grid and d = 1e7")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    status = 0
    for cmd in DEFAULT + (FULL if args.full else []):
        print(f"\n$ python -m {' '.join(cmd)}", flush=True)
        status |= subprocess.run([sys.executable, "-m", *cmd], cwd=root).returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
