"""The API page is generated from the docstrings: each public function documents its arguments and
what it returns in the Google-style sections that napoleon reads, and each factory shows its use.

"Public" is what a public module of the package (``jaxrvga.baselines`` included) lists in ``__all__``.
"""
import doctest
import importlib
import inspect
import pkgutil
import re

import jax
import jax.numpy as jnp
import pytest

import jaxrvga as jr

PUBLIC_MODULES = ["jaxrvga"] + [m.name for m in pkgutil.walk_packages(jr.__path__, "jaxrvga.")
                                 if not any(part.startswith("_") for part in m.name.split("."))]

# the factories: a filter, a scheme, a model or an observation family, and the average of filters
FACTORIES = [jr.rvga, jr.lrvga, jr.diag_rvga, jr.kalman, jr.ekf, jr.qkf, jr.mirror_prox, jr.build,
             jr.models.gaussian, jr.models.bernoulli, jr.models.poisson_family, jr.models.categorical,
             jr.models.linear_gaussian, jr.models.logistic, jr.models.poisson, jr.models.glm,
             jr.models.nonlinear, jr.models.minibatch, jr.models.tempered, jr.models.softmax_regression,
             jr.model_average,
             *dict.fromkeys([*jr.schemes.FACTORIES.values(), jr.schemes.published_sampled])]


def _public_functions():
    found = {}
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if inspect.isfunction(obj):
                found.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
    return sorted(found.items())


def _section(doc, *titles):
    return re.search(rf"^({'|'.join(titles)}):\s*$", doc, re.M) is not None


def _documented_args(doc):
    """The names that the ``Args:`` section of ``doc`` describes (``x, y:`` describes two)."""
    block = re.search(r"^Args:\s*\n((?:[ \t]+\S.*\n?|[ \t]*\n)*)", doc, re.M).group(1)
    lines = [line for line in block.split("\n") if line.strip()]
    indent = min(len(line) - len(line.lstrip()) for line in lines)
    heads = [line.strip().split(":")[0] for line in lines if len(line) - len(line.lstrip()) == indent]
    return [name.strip().lstrip("*") for head in heads for name in head.split(",")]


def _undocumented(functions):
    missing = []
    for name, fn in functions:
        doc = inspect.getdoc(fn) or ""
        params = inspect.signature(fn).parameters
        if not doc.strip():
            missing.append(f"{name}: no docstring")
        elif not _section(doc, "Returns", "Yields"):
            missing.append(f"{name}: no Returns: section")
        elif params and not _section(doc, "Args"):
            missing.append(f"{name}: no Args: section")
        elif params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            unknown = [a for a in _documented_args(doc) if a not in params]   # a renamed argument
            if unknown:
                missing.append(f"{name}: Args: describes {unknown}, which it does not take")
    return missing


def test_the_scan_finds_the_public_functions():
    names = dict(_public_functions())
    assert len(names) > 250
    assert {"jaxrvga.core.step_fn", "jaxrvga.io.save", "jaxrvga.filters.rvga"} <= set(names)


def test_every_public_function_documents_its_args_and_returns():
    missing = _undocumented(_public_functions())
    assert not missing, "\n".join(missing)


def test_the_check_fails_on_a_function_without_the_sections():
    def summary_only(x):
        """A summary and nothing else."""
        return x

    def no_args_section(x):
        """A summary.

        Returns:
            ``x``.
        """
        return x

    def stale_name(x):
        """A summary.

        Args:
          x, old: the inputs.

        Returns:
          ``x``.
        """
        return x

    found = _undocumented([("summary_only", summary_only), ("no_args_section", no_args_section),
                           ("stale_name", stale_name)])
    assert [line.split(":")[0] for line in found] == ["summary_only", "no_args_section", "stale_name"]


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
def test_every_factory_shows_an_example(factory):
    doc = inspect.getdoc(factory) or ""
    assert _section(doc, "Example", "Examples"), f"{factory.__module__}.{factory.__name__} has no Example: section"
    assert ">>>" in doc or "::" in doc.split("Example")[-1]


@pytest.mark.slow
@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
def test_every_factory_example_runs_as_shown(factory):
    """The examples assume ``import jax, jax.numpy as jnp, jaxrvga as jr``, as the guide does."""
    test = doctest.DocTestFinder(recurse=False).find(factory, globs={"jax": jax, "jnp": jnp, "jr": jr})[0]
    assert test.examples, f"{factory.__name__}: no >>> example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0, f"{factory.__name__}: its example does not run as shown"


def test_the_belief_protocol_documents_its_methods():
    """A new belief implements these methods (docs/architecture.md, "How to add a belief")."""
    methods = [(f"Belief.{name}", fn) for name, fn in vars(jr.beliefs.Belief).items()
               if inspect.isfunction(fn) and not name.startswith("_")]
    assert len(methods) >= 15
    missing = _undocumented(methods)
    assert not missing, "\n".join(missing)
