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
from jaxrvga.kernels import lowrank  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


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


def test_math_renders_without_a_network(site):
    """Every page with a formula loads MathJax from the site itself (sphinx-mathjax-offline), never
    from a CDN: the formulas render where the docs were built, offline too."""
    pages = [p for p in site.rglob("*.html") if 'class="math' in p.read_text(encoding="utf-8")]
    assert len(pages) >= 5
    for page in pages:
        scripts = re.findall(r'<script\b[^>]*\bsrc="([^"]*mathjax[^"]*)"', page.read_text(encoding="utf-8"), flags=re.I)
        assert scripts, page
        for src in scripts:
            assert "://" not in src, (page, src)
            assert (page.parent / src).resolve().exists(), (page, src)


def test_api_page_holds_the_docstrings(site):
    page = site / "api" / "jaxrvga.kernels.lowrank.html"
    assert 'id="jaxrvga.kernels.lowrank.solve"' in page.read_text(encoding="utf-8")
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


def test_the_predictive_functions_are_documented_in_their_module(site):
    # jr.predictive is published at the top level; its module gets the page
    page = (site / "api" / "jaxrvga.posterior_predictive.html").read_text(encoding="utf-8")
    assert 'id="module-jaxrvga.posterior_predictive"' in page
    assert 'id="jaxrvga.posterior_predictive.predictive"' in page
    package = (site / "api" / "jaxrvga.html").read_text()
    assert 'href="jaxrvga.posterior_predictive.html#jaxrvga.posterior_predictive.predictive"' in package


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


# --- the example gallery, published text, internal links ---------------------------------------

EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py") if p.stem not in ("__init__", "common"))


def test_every_example_has_a_gallery_page_with_a_figure(site):
    assert len(EXAMPLES) >= 5
    index = (site / "examples.html").read_text(encoding="utf-8")
    for name in EXAMPLES:
        page = site / "gallery" / f"{name}.html"
        assert page.exists(), f"examples/{name}.py has no page docs/gallery/{name}.md"
        assert f'href="gallery/{name}.html"' in index, name
        source = page.read_text(encoding="utf-8")
        images = re.findall(r'<img\b[^>]*\bsrc="([^"]+)"', source)
        assert images, f"gallery/{name}.html has no <img>"
        for src in images:
            assert (page.parent / src).resolve().exists(), (name, src)
        text = _text(page)
        assert f"python -m examples.{name}" in text, name                    # its command
        assert "def main(" in text, name                                       # its code
        assert f"{name}.main(" in text, name                                   # its printed result


def _pages(site):
    return sorted(site.rglob("*.html"))


def test_no_issue_numbers_or_placeholder_text_in_published_pages(site):
    # _modules/ holds the highlighted source of jaxrvga (viewcode): the code verbatim, comments included.
    found = []
    for page in _pages(site):
        if "_modules" in page.relative_to(site).parts:
            continue
        text = _text(page)
        for match in re.finditer(r"\bissues? #?\d+", text, flags=re.I):
            found.append((str(page.relative_to(site)), text[max(0, match.start() - 60):match.end() + 20]))
        if "will list them as they are added" in text:
            found.append((str(page.relative_to(site)), "placeholder text"))
    assert not found, found


def test_internal_links_and_anchors_resolve(site):
    ids, broken = {}, []
    for page in _pages(site):
        ids[page] = set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))
    for page in _pages(site):
        for href in re.findall(r'\bhref="([^"]*)"', page.read_text(encoding="utf-8")):
            href = html.unescape(href)
            if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", href) or href.startswith("//"):
                continue                                     # external (http:, mailto:, ...)
            path, _, anchor = href.partition("#")
            path = path.split("?", 1)[0]
            target = (page.parent / path).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append((str(page.relative_to(site)), href, "no such file"))
            elif anchor and target.suffix == ".html" and anchor not in ids.get(target, ()):
                broken.append((str(page.relative_to(site)), href, "no such id"))
    assert not broken, f"{len(broken)} broken internal links, e.g. {broken[:10]}"


def test_front_page_example_runs():
    """The short example of the front page (docs/index.md) runs as written."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "index.md").read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "docs/index.md has no python block"
    assert len([line for line in blocks[0].splitlines() if line.strip()]) <= 10
    namespace = {}
    exec(compile(blocks[0], "docs/index.md", "exec"), namespace)
    p, var = namespace["p"], namespace["var"]
    assert p.shape == var.shape == (3,) and bool(namespace["state"].info.converged)


# --- code blocks fit the content column at 1280 px ----------------------------------------------
# Measured in headless Chromium, window 1280 px wide, furo theme: a <pre> of the content column is
# 708 px wide inside its padding and the code font (13 px) takes 7.8 px a character, so 90
# characters fit; 88 leaves a margin for a block indented in a list. A longer line is cut off at
# the right edge, behind a scroll bar that is easy to miss.
CODE_COLUMNS = 88
# Pages that include files of measurements (BENCHMARKS.md, experiments/REPORT.md): their wide
# tables and commands scroll. The API pages hold formulas of the docstrings.
WIDE_PAGES = {"benchmarks", "report"}
_BLOCK = re.compile(r'<div class="([^"]*)"><div class="highlight"><pre>(.*?)</pre>|<pre\b[^>]*>(.*?)</pre>', re.S)


def _blocks(page):
    """(classes, text) of every code block of ``page``."""
    for match in _BLOCK.finditer(page.read_text(encoding="utf-8")):
        classes, code = match.group(1) or "", match.group(2) if match.group(1) is not None else match.group(3)
        yield classes.split(), html.unescape(re.sub(r"<[^>]+>", "", code))


def _long_lines(text, limit=CODE_COLUMNS):
    return [(line.rstrip(), len(line.rstrip())) for line in text.splitlines() if len(line.rstrip()) > limit]


def _long_code_lines(page, limit=CODE_COLUMNS):
    """(line, length) of every line of a code block of ``page`` longer than ``limit``.

    Only blocks of printed output marked ``wrapped`` (``:class: wrapped``, ``:language: none``: what
    an example of the gallery prints, verbatim) are skipped: docs/_static/css/jaxrvga.css wraps them.
    Code is never skipped, the gallery's listings of examples/ included.
    """
    found = []
    for classes, text in _blocks(page):
        if "wrapped" in classes and "highlight-none" in classes:
            continue
        found.extend(_long_lines(text, limit))
    return found


def _narrative_pages(site):
    """The HTML pages of docs/*.md and docs/gallery/*.md, but those of WIDE_PAGES."""
    sources = sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs" / "gallery").glob("*.md"))
    pages = [site / source.relative_to(ROOT / "docs").with_suffix(".html") for source in sources
             if source.stem not in WIDE_PAGES]
    assert len(pages) >= 10 and all(page.exists() for page in pages)
    return pages


def test_code_blocks_fit_the_content_column_at_1280px(site):
    too_long = {}
    for page in _narrative_pages(site):
        lines = _long_code_lines(page)
        if lines:
            too_long[str(page.relative_to(site))] = lines
    assert not too_long, f"code lines longer than {CODE_COLUMNS} characters overflow at 1280 px: {too_long}"


# API pages whose docstrings' plain-text formula blocks were rewrapped to fit the column.
FITTING_API_PAGES = ("jaxrvga.baselines.dual", "jaxrvga.kernels.root_solvers", "jaxrvga.baselines.klprox", "jaxrvga.baselines.data",
                     "jaxrvga.baselines.metrics", "jaxrvga.kernels.factor_analysis")


def test_formula_blocks_of_these_api_pages_fit_the_content_column(site):
    too_long = {name: lines for name in FITTING_API_PAGES
                if (lines := _long_code_lines(site / "api" / f"{name}.html"))}
    assert not too_long, f"code lines longer than {CODE_COLUMNS} characters overflow at 1280 px: {too_long}"


def test_gallery_code_is_not_wrapped_and_wrapped_output_has_its_style(site):
    """The listings of examples/ fit the column unwrapped; only printed output with a line longer
    than the column is marked ``wrapped``, and the site's CSS wraps it."""
    css = (site / "_static" / "jaxrvga.css").read_text(encoding="utf-8")
    assert re.search(r"div\.wrapped pre\s*\{[^}]*white-space:\s*pre-wrap", css)
    for name in EXAMPLES:
        page = site / "gallery" / f"{name}.html"
        source = page.read_text(encoding="utf-8")
        assert "_static/jaxrvga.css" in source, name
        assert '<div class="highlight-python' in source, name            # the example's code
        for classes, text in _blocks(page):
            if "wrapped" in classes:
                assert "highlight-none" in classes, (name, classes)     # printed output only
                assert _long_lines(text), (name, "wrapped but every line fits")
    for path in sorted((ROOT / "examples").glob("*.py")):                # the sources themselves
        lines = _long_lines(path.read_text(encoding="utf-8"))
        assert not lines, (str(path.relative_to(ROOT)), lines)
