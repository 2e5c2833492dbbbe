"""Regenerate every figure and table: ``python -m experiments.run_all [--quick] [--only PREFIX] [--out DIR]``.

Discovers the modules ``experiments/<prefix>*.py`` (prefixes in :data:`common.PREFIXES`), runs
each one's ``run(quick, out)`` and writes ``summary.json`` (``summary_<PREFIX>.json`` with
``--only``) next to the results: ``experiments/results`` (``results/quick`` with ``--quick``)
unless ``--out`` names another folder.
"""
from __future__ import annotations

import argparse
import importlib
import json
import time
from pathlib import Path

from experiments.common import PREFIXES, results_dir


def discover(only: str | None = None):
    """Names of the experiment modules, sorted by prefix then name."""
    here = Path(__file__).resolve().parent
    names = []
    for prefix in PREFIXES:
        names += sorted(p.stem for p in here.glob(f"{prefix}*.py"))
    return [n for n in names if only is None or n.startswith(only)]


def main(argv=None) -> Path:
    """Run the experiments; returns the path of the summary file written."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=None, help="run only modules whose name starts with this")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: experiments/results, or results/quick with --quick)")
    args = parser.parse_args(argv)
    if args.out is None:
        out = results_dir(args.quick)
    else:
        out = args.out
        out.mkdir(parents=True, exist_ok=True)
    names = discover(args.only)
    if not names:
        parser.error(f"no experiment module starts with {args.only!r}")
    summary = {}
    start = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        module = importlib.import_module(f"experiments.{name}")
        result = module.run(args.quick, out)
        summary[name] = {k: (float(v) if hasattr(v, "__float__") else v) for k, v in result.items()}
        print(f"[{time.perf_counter() - t0:7.1f} s] {name}: {summary[name]}", flush=True)
    path = out / ("summary.json" if args.only is None else f"summary_{args.only}.json")
    path.write_text(json.dumps(summary, indent=1, default=str))
    print(f"wrote {path} ({len(names)} modules, {time.perf_counter() - start:.1f} s)")
    return path


if __name__ == "__main__":
    main()
