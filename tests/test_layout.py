"""The package's layout by role: the filter layer, the numerical kernels, the papers' baselines.

Static checks of what ``docs/architecture.md`` promises: which wing imports which, a small top
level, an ``__all__`` in every module; and that the published names and files written before the
layout still work.
"""
import ast
import importlib
import pkgutil
import re
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrvga as jr
from conftest import rewrite_saved_nodes
from jaxrvga import io

PACKAGE = Path(jr.__file__).parent


def _modules():
    return [m.name for m in pkgutil.walk_packages(jr.__path__, "jaxrvga.")]


def _imported(path: Path) -> set:
    """Absolute names of the package's modules that the file imports (``jaxrvga.x.y``)."""
    here = ["jaxrvga", *path.relative_to(PACKAGE).parent.parts]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[:len(here) - node.level + 1]
            mod = ".".join(base + ([node.module] if node.module else []))
            found |= {mod} if node.module else {f"{mod}.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxrvga"):
            found.add(node.module)
    return found


def _wing(path: Path) -> str:
    """``kernels`` or ``baselines``, else ``filters``: the filter layer is the top level and its packages
    (``beliefs/``, ``schemes/``, ``models/``)."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 and parts[0] in ("kernels", "baselines") else "filters"


def test_every_module_lists_its_public_names():
    for name in _modules():
        module = importlib.import_module(name)
        assert hasattr(module, "__all__"), f"{name} has no __all__"
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert not missing, f"{name}.__all__ names what it lacks: {missing}"


def test_the_filter_layer_never_imports_the_baselines_and_the_kernels_only_the_kernels():
    for path in PACKAGE.rglob("*.py"):
        wing, imported = _wing(path), _imported(path)
        if wing == "filters" and path != PACKAGE / "__init__.py":
            assert not any(m.startswith("jaxrvga.baselines") for m in imported), path
        if wing == "kernels":
            outside = {m for m in imported if not m.startswith("jaxrvga.kernels")}
            # the kernels' only way up: the validation helpers and SolverInfo of the core
            assert outside <= {"jaxrvga.validation", "jaxrvga.core"}, (path, outside)


def _module_name(path: Path) -> str:
    parts = ["jaxrvga", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _reaches(graph: dict, start: str) -> set:
    """The modules that ``start`` imports, directly or through others."""
    seen, todo = set(), list(graph[start])
    while todo:
        mod = todo.pop()
        if mod not in seen:
            seen.add(mod)
            todo.extend(graph.get(mod, ()))
    return seen


def test_no_module_imports_itself_back():
    """No import circle, an import inside a function included (``average`` and ``predictive`` were one:
    a state type of its own registers its predictive instead of being named by it)."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: {i for i in _imported(p) if i in paths and i != m} for m, p in paths.items()}
    circles = sorted(m for m in graph if m in _reaches(graph, m) and not m.endswith(("jaxrvga", "__init__")))
    assert not circles, circles


def test_io_is_the_codec_and_names_no_state_type():
    """Each state type registers its own reader and file check in its own module
    (:func:`jaxrvga.beliefs.base.register_state`, :func:`jaxrvga.io.register`): ``io.py`` imports
    nothing of the package but the checks' pieces."""
    assert _imported(PACKAGE / "io.py") <= {"jaxrvga.file_checks"}
    text = (PACKAGE / "io.py").read_text()
    assert not any(name in text for name in ("GaussianState", "LowRankState", "DiagonalState", "AverageState"))


#: The longest module of the filter layer and the kernels: one idea a file (the baselines are
#: reproductions of whole papers' methods and may be longer). The docstrings' reference sections
#: (``Args:``, ``Returns:``, ``Example:``, ..., which tests/test_docstrings.py asks of every public
#: function) are not counted: they document the file's functions, they add no idea to it.
MAX_LINES = 600
_REFERENCE_SECTION = re.compile(r"(\s*)(Args|Returns|Yields|Raises|Example|Examples):\s*$")


def _reference_section_lines(text: str) -> int:
    """The lines of ``text`` inside the reference sections of its docstrings (header, body, blank lines)."""
    lines, count = text.splitlines(), 0
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if not (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            continue
        header = None                             # indent of the section the line is in
        for line in lines[body[0].lineno - 1:body[0].end_lineno]:
            indent = len(line) - len(line.lstrip())
            if header is not None and line.strip() and indent <= header:
                header = None
            if header is None and (match := _REFERENCE_SECTION.match(line)):
                header = len(match.group(1))
            count += header is not None
    return count


def test_no_module_of_the_filter_layer_or_the_kernels_is_long():
    long = {}
    for p in PACKAGE.rglob("*.py"):
        text = p.read_text()
        n = len(text.splitlines()) - _reference_section_lines(text)
        if _wing(p) != "baselines" and n > MAX_LINES:
            long[str(p.relative_to(PACKAGE))] = n
    assert not long, long


def test_the_length_leaves_out_the_reference_sections_only():
    text = '''def f(x):
    """Summary.

    Args:
      x: the input,
        on two lines.

    Returns:
      ``x``.
    """
    return x
'''
    assert _reference_section_lines(text) == 6           # Args (3 lines), the blank line, Returns (2)


def test_the_top_level_is_small():
    values = [getattr(jr, n) for n in jr.__all__]
    modules = [v for v in values if isinstance(v, types.ModuleType)]
    assert len(values) - len(modules) <= 30 and len(modules) <= 10, (len(values), len(modules))


def test_the_published_names_keep_working():
    """``jr.lowrank`` and ``jr.factor_analysis`` (the published API) are the kernels' modules."""
    assert jr.lowrank is jr.kernels.lowrank and jr.factor_analysis is jr.kernels.factor_analysis
    W, psi = jr.lowrank.init_factors(jax.random.PRNGKey(0), 6, 2, 0.5)
    draws = jr.lowrank.sample(jax.random.PRNGKey(1), jnp.zeros(6), W, psi, 4)
    assert W.shape == (6, 2) and psi.shape == (6,) and draws.shape == (4, 6)
    W2, psi2 = jr.factor_analysis.recursive_em_step(W, psi, jnp.ones(6), 1.0, 1.0, 2)
    assert W2.shape == (6, 2) and bool(jnp.all(psi2 > 0))


def test_no_module_is_shadowed_by_a_name_of_its_package():
    """``import jaxrvga.x.y as m`` gives the module ``y``: no function or value of the package ``x``
    carries a module's name (a factory named like its module would be returned instead)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.stem.startswith("_"):
            continue
        name = ".".join(("jaxrvga",) + path.relative_to(PACKAGE).with_suffix("").parts)
        parent, _, leaf = name.rpartition(".")
        assert isinstance(getattr(importlib.import_module(parent), leaf), types.ModuleType), name


def test_a_renamed_module_is_served_under_its_former_name_with_a_warning():
    """``jr.kernels.woodbury`` (the low-rank algebra's name before ``lowrank``) still works, warned;
    an unknown name is still an ``AttributeError``."""
    with pytest.warns(DeprecationWarning, match="kernels.lowrank"):
        assert jr.kernels.woodbury is jr.lowrank
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        jr.kernels.nothing


def _rewrite_module(path: Path, old: str, new: str):
    """The same file with every stored class module ``new`` replaced by ``old``."""
    def rename(node):
        if node.get("module") == new:
            node["module"] = old

    rewrite_saved_nodes(path, rename)


@pytest.mark.parametrize("old, make", [
    ("jaxrvga.batch", lambda: jr.baselines.laplace.LaplaceResult(jnp.zeros(2), jnp.eye(2), jnp.asarray(True),
                                                                 jnp.asarray(3))),
    ("jaxrvga.factor_analysis", lambda: jr.baselines.fa_filters.recursive_em().init(jnp.ones((4, 1)), jnp.ones(4))),
])
def test_files_written_before_the_layout_still_load(tmp_path, old, make):
    state = make()
    path = tmp_path / "state.npz"
    io.save(path, state)
    _rewrite_module(path, old, type(state).__module__)
    loaded = io.load(path)
    assert type(loaded) is type(state)
    for a, b in zip(loaded, state):
        np.testing.assert_array_equal(a, b)


def test_a_state_is_read_by_its_type_and_an_ambiguous_object_is_refused():
    """The library's states are read by their type; another object only as a dense batch result."""
    from typing import NamedTuple

    class Other(NamedTuple):
        mean: jax.Array
        cov_last: jax.Array
        psi: jax.Array

    mean = jnp.zeros(3)
    low = jr.beliefs.LowRankState(mean, jnp.ones((3, 1)), jnp.ones(3), None, None)
    assert isinstance(jr.beliefs.of_state(low)[0], jr.beliefs.LowRank)
    lap = jr.baselines.laplace.LaplaceResult(mean, jnp.eye(3), jnp.asarray(True), jnp.asarray(1))
    assert isinstance(jr.beliefs.of_state(lap)[0], jr.beliefs.Dense)
    with pytest.raises(ValueError, match="GaussianState, LowRankState or DiagonalState"):
        jr.beliefs.of_state(Other(mean, jnp.eye(3), jnp.ones(3)))
