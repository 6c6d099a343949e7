"""The examples in the docstrings of `peftviz.calibration` run, and say what the code does.

Every module of the subpackage (and the package itself) is found with pkgutil, so a new module is
checked without editing this file, and must carry at least one example.
"""

import doctest
import importlib
import pkgutil
import types

import numpy as np
import pytest

import peftviz.calibration

OPTIONS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
MODULES = [peftviz.calibration.__name__] + sorted(
    f"{peftviz.calibration.__name__}.{info.name}" for info in pkgutil.iter_modules(peftviz.calibration.__path__)
)


def run_doctests(module: types.ModuleType) -> tuple[doctest.TestResults, str]:
    """Run every docstring example found in `module` (its own objects, not what it imports).

    Returns (failed, attempted) and doctest's report of the failures. numpy's print options are set to
    their defaults while the examples run, so an earlier test that changed them cannot break the output.
    """
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    defaults = dict(precision=8, threshold=1000, edgeitems=3, linewidth=75, suppress=False, sign="-")
    with np.printoptions(**defaults, floatmode="maxprec", legacy=False):
        for test in doctest.DocTestFinder().find(module):
            runner.run(test, out=report.append)
    return runner.summarize(verbose=False), "".join(report)


@pytest.mark.parametrize("name", MODULES)
def test_module_examples_pass(name):
    results, report = run_doctests(importlib.import_module(name))
    assert results.attempted > 0, f"{name} has no docstring examples (>>>)"
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples failed in {name}:\n{report}"


def test_modules_are_discovered():
    assert MODULES[0] == "peftviz.calibration"
    for name in ("metrics", "estimators", "stats", "smooth_ece", "recalibration", "checks", "binning"):
        assert f"peftviz.calibration.{name}" in MODULES


def test_a_wrong_example_fails():
    """The check can fail: a module whose example states a wrong result is reported."""
    module = types.ModuleType("wrong_example", "Arithmetic.\n\n>>> 1 + 1\n3\n")
    results, report = run_doctests(module)
    assert results == (1, 1)
    assert "Expected:\n    3\nGot:\n    2" in report


def test_a_module_without_examples_attempts_none():
    results, _ = run_doctests(types.ModuleType("no_examples", "Words only."))
    assert results.attempted == 0
