"""The suite's own layout (tests/README.md): folders that mirror the package, unique file names."""
import os
from collections import Counter
from pathlib import Path

import jaxrvga as jr

TESTS = Path(__file__).resolve().parent
PACKAGE = Path(jr.__file__).parent
#: The folders of the suite beside the package's own wings: properties across the layers, and the
#: experiments, examples, benchmarks and documents at small sizes.
ACROSS = {"integration", "reproduction"}


def _test_files():
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_file_name_is_unique():
    """pytest imports a test file of a folder without ``__init__.py`` by its base name: two files of
    one name in two folders would collide."""
    twice = [name for name, n in Counter(p.name for p in _test_files()).items() if n > 1]
    assert not twice, twice


def test_every_folder_is_a_wing_of_the_package_or_a_suite_across_it():
    """A folder of tests is named for a subpackage of ``jaxrvga`` (or a module being split into one)
    or is one of the suites across the layers; every subpackage with code has its folder."""
    wings = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    folders = {p.relative_to(TESTS).parts[0] for p in _test_files() if len(p.relative_to(TESTS).parts) > 1}
    assert folders <= wings | modules | ACROSS, folders - (wings | modules | ACROSS)
    assert {"beliefs", "kernels", "baselines"} <= folders
    assert all(len(p.relative_to(TESTS).parts) <= 2 for p in _test_files())


def test_suite_compiles_with_the_fast_flags_that_this_xla_accepts():
    """conftest.py adds its fast-compiling XLA flags where this jaxlib starts with them (not under
    ``JAXRVGA_TEST_XLA_DEFAULT=1``, where it removes them even if inherited), and its probe refuses a
    flag that XLA does not know."""
    from conftest import FAST_COMPILE_FLAGS, SUITE_XLA_FLAGS, USER_XLA_FLAGS, _xla_accepts

    assert not _xla_accepts("--xla_no_such_flag_in_any_version=1")
    wanted = os.environ.get("JAXRVGA_TEST_XLA_DEFAULT") != "1" and _xla_accepts(SUITE_XLA_FLAGS)
    assert FAST_COMPILE_FLAGS not in USER_XLA_FLAGS
    assert (FAST_COMPILE_FLAGS in os.environ.get("XLA_FLAGS", "")) == wanted
