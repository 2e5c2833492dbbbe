"""The documentation site builds without a warning, and its API pages hold the docstrings."""
import html
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="sphinx is not installed (pip install -e '.[docs]')")
pytest.importorskip("myst_parser", reason="myst-parser is not installed (pip install -e '.[docs]')")

import jaxrvga  # noqa: E402
from jaxrvga import lowrank  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _text(page):
    """The visible text of an HTML page, whitespace collapsed."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", page.read_text(encoding="utf-8"), flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", body)).split())


def _plain(rst):
    """A docstring paragraph as the page shows it: inline-literal markers dropped, one line."""
    return " ".join(rst.replace("``", "").split())


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs")
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(out / "doctrees"), str(ROOT / "docs"), str(out / "html")]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"sphinx-build -W failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return out / "html"


def test_api_page_holds_the_docstrings(site):
    page = site / "api" / "jaxrvga.lowrank.html"
    assert 'id="jaxrvga.lowrank.solve"' in page.read_text(encoding="utf-8")
    text = _text(page)
    for obj in (lowrank, lowrank.solve, lowrank.factorize):
        first_paragraph = inspect.getdoc(obj).split("\n\n")[0]
        assert _plain(first_paragraph) in text, obj


def test_every_public_module_has_an_api_page(site):
    names = [m.name for m in pkgutil.walk_packages(jaxrvga.__path__, "jaxrvga.")
             if not any(part.startswith("_") for part in m.name.split("."))]
    assert len(names) >= 10
    package = (site / "api" / "jaxrvga.html").read_text(encoding="utf-8")
    for name in names:
        page = site / "api" / f"{name}.html"
        assert page.exists(), name
        assert f'href="{name}.html"' in package, name
        assert f'id="module-{name}"' in page.read_text(encoding="utf-8"), name
        summary = (inspect.getdoc(importlib.import_module(name)) or "").split("\n\n")[0]
        assert _plain(summary) in _text(page), name


def test_function_named_like_its_module_is_documented_in_it(site):
    # jaxrvga.predictive is the function once the package is imported; its module still gets a page.
    page = (site / "api" / "jaxrvga.predictive.html").read_text(encoding="utf-8")
    assert 'id="module-jaxrvga.predictive"' in page and 'id="jaxrvga.predictive.predictive"' in page
    package = (site / "api" / "jaxrvga.html").read_text()
    assert 'href="jaxrvga.predictive.html#jaxrvga.predictive.predictive"' in package


def test_markdown_pages_are_included_not_copied(site):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    intro = readme.split("\n\n")[1]                      # the paragraph under the title
    assert _plain(intro) in _text(site / "index.html")
    quick = readme.split("## Quick start", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    code = _text(site / "quickstart.html")
    for line in quick.splitlines():
        if line.strip():
            assert " ".join(line.split()) in code, line
    report = (site / "report.html").read_text(encoding="utf-8")
    figures = re.findall(r"!\[[^\]]*\]\(results/([^)]+)\)", (ROOT / "experiments" / "REPORT.md").read_text())
    assert figures
    for name in figures:
        assert f'src="_images/{name}"' in report and (site / "_images" / name).exists(), name
    assert "<h1>Benchmarks" in (site / "benchmarks.html").read_text(encoding="utf-8")
    assert "```" not in _text(site / "benchmarks.html")       # fences parsed, not shown raw
