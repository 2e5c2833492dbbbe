"""``make experiments-quick`` plumbing (:mod:`experiments.run_all`).

Every module that ``run_all`` discovers must run at quick sizes in some test: the test files build
their quick runs with :func:`experiments.common.quick_fixture`, and the first test reads them (as
source, without importing them) to check that the discovered set and the exercised set are equal,
so a new ``experiments/<prefix>_*.py`` script cannot be left out of the tests. The CLI itself is
run on the cheapest module into a temporary folder (the committed results are not touched).
"""
import ast
import json
import math
from pathlib import Path

import pytest

from experiments import run_all

TESTS = Path(__file__).resolve().parents[1]


def quick_fixture_modules():
    """``{module name: test file}`` for every ``fixture = quick_fixture(module, ...)`` of the test
    files whose fixture some test or fixture requests (an unrequested fixture never runs)."""
    found = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        alias = {a.asname or a.name: a.name for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module == "experiments" for a in node.names}
        requested = {a.arg for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                     for a in node.args.args}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", None) == "quick_fixture"):
                fixture, module = node.targets[0].id, node.value.args[0].id
                if fixture in requested:
                    found[alias.get(module, module)] = path.name
    return found


def test_every_discovered_module_runs_quick_in_a_test():
    discovered = set(run_all.discover())
    assert discovered, "run_all discovered no module"
    exercised = quick_fixture_modules()
    assert set(exercised) == discovered, (sorted(discovered - set(exercised)),
                                          sorted(set(exercised) - discovered))


def test_cli_writes_the_summary(tmp_path):
    """``run_all --quick --only rvga_fig11 --out DIR`` runs that module (the cheapest, ~1 s) and
    writes its numbers to ``DIR/summary_rvga_fig11.json`` next to its figure and CSV files."""
    path = run_all.main(["--quick", "--only", "rvga_fig11", "--out", str(tmp_path)])
    assert path == tmp_path / "summary_rvga_fig11.json"
    summary = json.loads(path.read_text())
    assert list(summary) == ["rvga_fig11_predict"]
    values = summary["rvga_fig11_predict"]
    assert values and all(isinstance(v, float) and math.isfinite(v) for v in values.values()), values
    assert (tmp_path / "rvga_fig11.png").stat().st_size > 0
    assert (tmp_path / "rvga_fig11_confidence.csv").stat().st_size > 0


def test_cli_rejects_an_unknown_prefix(tmp_path):
    with pytest.raises(SystemExit):
        run_all.main(["--quick", "--only", "no_such_experiment", "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())
