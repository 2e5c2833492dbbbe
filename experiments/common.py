"""Shared plumbing of the experiment scripts.

Every script ``experiments/<paper>_<item>.py`` defines ``run(quick: bool, out: Path) -> dict``:
it writes its PNG and CSV files into ``out`` and returns the headline numbers (final KLs etc.)
that ``REPORT.md`` quotes and the tests check. ``quick=True`` runs reduced sizes in seconds.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Callable, Iterable, Sequence

import jax

jax.config.update("jax_enable_x64", True)

RESULTS = Path(__file__).resolve().parent / "results"
#: Module-name prefixes that run_all discovers, in this order.
PREFIXES = ("rvga_", "lrvga_", "klprox_", "dual_", "headtohead_")


def results_dir(quick: bool) -> Path:
    """``experiments/results`` for full runs, ``experiments/results/quick`` (not committed) for quick ones."""
    out = RESULTS / "quick" if quick else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence]) -> None:
    """Write rows of numbers or strings to a CSV file with a header."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for row in rows:
            w.writerow([f"{v:.6g}" if isinstance(v, float) else v for v in row])


def progress(iterable, desc: str, quick: bool):
    """A tqdm progress bar on long (non-quick) runs; a plain iterator otherwise."""
    if quick:
        return iterable
    try:
        from tqdm import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, desc=desc)


def pyplot():
    """matplotlib.pyplot with the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def cli(run: Callable[[bool, Path], dict], doc: str | None = None) -> None:
    """Command line of one script: ``python -m experiments.<name> [--quick]``."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--quick", action="store_true", help="reduced sizes (seconds)")
    args = parser.parse_args()
    summary = run(args.quick, results_dir(args.quick))
    for key, value in summary.items():
        print(f"{key}: {value}")
