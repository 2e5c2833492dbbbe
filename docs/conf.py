"""Sphinx configuration of the jaxrvga documentation (``make docs``).

The API reference is generated from the docstrings: every build writes one page per public
module of the ``jaxrvga`` package (found by ``pkgutil``; names starting with ``_`` are private)
into ``docs/api/``, so a module added to the package gets its page without editing these
files. The Markdown pages include README.md, BENCHMARKS.md and experiments/REPORT.md through
MyST rather than copying them.
"""
import importlib
import inspect
import os
import pkgutil
import re
import shutil
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DOCS)
sys.path.insert(0, ROOT)          # document this checkout's jaxrvga, not another installed one

import jaxrvga  # noqa: E402
from sphinx.ext import autosummary  # noqa: E402

project = "jaxrvga"
author = "the jaxrvga authors"
copyright = "the jaxrvga authors, MIT licence"
release = version = jaxrvga.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",      # MathJax served from _static/mathjax: formulas render without a network
    "sphinx.ext.viewcode",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
highlight_language = "none"       # unlabelled literal blocks are formulas and tables, not Python

# --- API reference -------------------------------------------------------------------------
autosummary_generate = False
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"   # no Parameters list of the annotated args only
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True
nitpicky = False


# The summary tables end a summary at its first ". "; papers' abbreviations are not such an end
# ("The R-VGA filter ([RVGA] Alg. 1)" would otherwise be cut after "Alg.").
_ABBREVIATIONS = (" Alg.", " eq.", " eqs.", " Eq.", " Eqs.", " App.", " Fig.", " Figs.", " Thm.", " Prop.",
                  " Sec.", " cf.")
autosummary.WELL_KNOWN_ABBREVIATIONS = tuple(getattr(autosummary, "WELL_KNOWN_ABBREVIATIONS", ())) + _ABBREVIATIONS


# --- the API pages -------------------------------------------------------------------------
# Written here rather than by autosummary's ``:recursive:``: the package re-exports functions
# named like their modules (``jaxrvga.rvga`` is the function ``rvga`` once the package is
# imported), and autosummary resolves such a name to the function, not to the module.
API = os.path.join(DOCS, "api")


def _summary(module):
    """First paragraph of a module's docstring, on one line."""
    doc = inspect.getdoc(module) or ""
    return " ".join(doc.split("\n\n")[0].split()) or "(no docstring)"


def _modules(package):
    """Public direct submodules of ``package``: [(name, module, is_package)]."""
    found = []
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        if not info.name.rsplit(".", 1)[1].startswith("_"):
            found.append((info.name, importlib.import_module(info.name), info.ispkg))
    return found


def _reexports(package):
    """Public functions and classes that ``package`` imports from its modules (``module.name``)."""
    names = getattr(package, "__all__", None) or [n for n in vars(package) if not n.startswith("_")]
    homes = []
    for name in names:
        obj = getattr(package, name, None)
        home = getattr(obj, "__module__", None) or ""
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and home.startswith(package.__name__ + "."):
            homes.append(f"{home[len(package.__name__) + 1:]}.{obj.__qualname__}")   # relative
    return homes


def _package_page(package):
    """A package documents what its __init__ defines, a table of its re-exports and its modules.

    Its re-exports are documented on their modules' pages only (``jaxrvga.rvga`` the function
    and ``jaxrvga.rvga`` the module cannot both be described under one name).
    """
    name = package.__name__
    lines = [".. automodule:: " + name, "   :members:", "   :ignore-module-all:", ""]
    homes = _reexports(package)
    if homes:
        lines += [f".. rubric:: Names of the package (``{name}.<name>``)", "", ".. autosummary::", ""]
        lines += ["   ~" + home for home in homes] + [""]
    submodules = _modules(package)
    lines += [".. rubric:: Modules", "", ".. list-table::", "   :widths: 25 75", ""]
    for sub, module, _ in submodules:
        lines += [f"   * - :mod:`~{sub}`", "     - " + _summary(module)]
    lines += ["", ".. toctree::", "   :hidden:", ""] + ["   " + sub for sub, _, _ in submodules]
    for sub, module, ispkg in submodules:
        _write_page(module, ispkg)
    return lines


def _write_page(module, ispkg):
    name = module.__name__
    body = _package_page(module) if ispkg else [".. automodule:: " + name, "   :members:"]
    with open(os.path.join(API, name + ".rst"), "w") as f:
        f.write("\n".join([name, "=" * len(name), ""] + body) + "\n")


# A page of a module that is gone would be "not in any toctree" (an error with -W): start from
# an empty folder on every build.
shutil.rmtree(API, ignore_errors=True)
os.makedirs(API)
_write_page(jaxrvga, ispkg=True)

# The docstrings write display formulas as an indented block after a blank line (readable in
# ``help()``). reST would read it as a block quote (lines run together, or a warning), so
# autodoc turns every such block into a literal block before napoleon parses the docstring.
_LIST_OR_MARKUP = re.compile(r"\s*([-*+] |\d+[.)] |#\. |\.\. |:\w|>>>)")
_SECTION = re.compile(r"\s*[A-Z][A-Za-z]*( [A-Za-z]+){0,2}:\s*$")      # napoleon's "Args:", ...


def _indent(line):
    return len(line) - len(line.lstrip())


def _formula_blocks(app, what, name, obj, options, lines):
    """Make indented blocks after a blank line literal; indent the block of a summary's ``::``."""
    i = 1
    while i < len(lines) - 1:
        if lines[i].strip() or not lines[i + 1].strip() or not lines[i - 1].strip():
            i += 1
            continue
        start = i - 1                                    # first line of the paragraph above
        while start > 0 and lines[start - 1].strip():
            start -= 1
        above, below, base = lines[i - 1], lines[i + 1], _indent(lines[start])
        if above.rstrip().endswith("::") and _indent(below) <= base:
            end = i + 1                                  # "::" on the summary line: dedented by
            while end < len(lines) and lines[end].strip():   # inspect.cleandoc; indent it back
                lines[end] = "    " + lines[end]
                end += 1
        elif (_indent(below) > base and not above.rstrip().endswith("::")
              and not _LIST_OR_MARKUP.match(lines[start]) and not _SECTION.match(lines[start])):
            if above.rstrip().endswith(":"):
                lines[i - 1] = above.rstrip() + ":"
            else:
                lines[i:i] = ["", " " * base + "::"]
                i += 2
        i += 1


def _skip_namedtuple_fields(app, what, name, obj, skip, options):
    """Hide the ``Alias for field number k`` entries of NamedTuples (the class lists its fields)."""
    if what == "class" and (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


def _viewcode_own_module(app, modname, fullname):
    """No source link for a name a module re-exports (``jaxrvga.baselines.metrics.fa_kl``, defined in
    ``batch_fa.py``).

    viewcode keeps, for each source file, the module of the first page that documented one of its
    names and links every name of that file to that module's page: when the re-exporting module's page
    is read first, all the links of the defining file's source page pointed at anchors of the
    re-exporting module on the defining module's page, which do not exist.
    Answering with the documenting module itself, where the name is not defined, leaves the
    re-export without a source link and the defining module's page with correct ones.
    """
    try:
        obj = importlib.import_module(modname)
        for part in fullname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    home = getattr(obj, "__module__", None)
    return modname if isinstance(home, str) and home != modname else None


# README.md links the package's modules by their files (``[jaxrvga/filters.py](jaxrvga/filters.py)``),
# which GitHub shows; the pages that include it link their API pages instead (its links to docs/
# pages are made relative by the include's ``:relative-docs: docs/``).
_MODULE_FILE_LINK = re.compile(r"\]\(jaxrvga/([a-z_/]+?)(?:/__init__)?\.py\)")


def _module_links_to_api_pages(app, relative_path, parent_docname, content):
    """In an included README.md, a link to ``jaxrvga/<name>.py`` goes to the page of ``jaxrvga.<name>``."""
    if relative_path.name == "README.md":
        content[0] = _MODULE_FILE_LINK.sub(lambda m: f"](api/jaxrvga.{m[1].replace('/', '.')}.rst)", content[0])


def setup(app):
    app.connect("include-read", _module_links_to_api_pages)
    app.connect("autodoc-process-docstring", _formula_blocks, priority=400)   # before napoleon (500)
    app.connect("autodoc-skip-member", _skip_namedtuple_fields)
    app.connect("viewcode-follow-imported", _viewcode_own_module)


# --- Markdown ------------------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

# --- HTML ----------------------------------------------------------------------------------
try:
    import furo  # noqa: F401
    html_theme = "furo"
except ImportError:                # the docs extra installs furo; alabaster ships with Sphinx
    html_theme = "alabaster"
html_title = f"jaxrvga {release}"
html_static_path = ["_static/css"]   # the CSS only (_static/gallery is read by the pages)
html_css_files = ["jaxrvga.css"]
