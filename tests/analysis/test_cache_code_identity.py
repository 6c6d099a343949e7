"""The analysis caches are keyed by the code that computes them (issue 46): a changed estimator computes its
draws again at the next `report`, unchanged code reads them back, and nobody bumps a format number by hand."""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from peftviz.analysis import estimates, kernel
from peftviz.analysis.code_identity import code_identity, modules_reached, source_digest
from peftviz.analysis.group_stats import Settings
from peftviz.cli import main
from peftviz.methods import alpha_grid_method
from peftviz.store.runs import load_run
from tests.support.fake_runs import write_run

ROOT = Path(__file__).resolve().parents[2]
ECE_LINE = "        return s.totals(scheme).eces()\n"  # equal-width ECE of every resample (`_binned_ece`)


def copy_package(folder: Path) -> Path:
    """A copy of the peftviz package under `folder` (what PYTHONPATH=folder imports)."""
    shutil.copytree(ROOT / "peftviz", folder / "peftviz", ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def plant(folder: Path, module: str, old: str, new: str) -> None:
    path = folder / "peftviz" / module
    text = path.read_text()
    assert text.count(old) == 1, f"{module} no longer holds {old!r}"
    path.write_text(text.replace(old, new))


def report_argv(store: Path, out: Path) -> list[str]:
    return ["report", "--runs-dir", str(store), "--metric", "ece", "--resamples", "50", "--csv", str(out / "r")]


def report_here(store: Path, out: Path) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(report_argv(store, out)) == 0


def report_in_child(code: Path, store: Path, out: Path) -> str:
    """`python -m peftviz report` in a child process whose peftviz is the one under `code`."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "peftviz", *report_argv(store, out)]
    done = subprocess.run(command, check=False, cwd=out, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def cache_files(store: Path) -> dict[str, tuple[int, int, bytes]]:
    """Each estimates cache file of the store -> (inode, mtime, bytes): a file written again has another inode."""
    found = sorted(store.glob(f"*/analysis/{estimates.ESTIMATES_DIR}/*.npz"))
    return {path.name: (path.stat().st_ino, path.stat().st_mtime_ns, path.read_bytes()) for path in found}


def stored(store: Path, name: str) -> dict[str, np.ndarray]:
    (path,) = store.glob(f"*/analysis/{estimates.ESTIMATES_DIR}/{name}")
    with np.load(path, allow_pickle=False) as npz:
        return {member: npz[member] for member in npz.files}


def copy_identity(folder: Path) -> str:
    """`estimates.estimators_code` as a process whose peftviz is the copy under `folder` computes it."""
    modules = modules_reached(estimates.DRAWN_BY, folder / "peftviz")
    return source_digest(modules, extra=inspect.getsource(estimates._compute))  # _compute: not planted here


@pytest.mark.slow  # runs report in a child process on a copied package
def test_a_planted_change_to_an_estimator_makes_the_next_report_compute_its_draws_again(tmp_path, monkeypatch):
    store, out = tmp_path / "runs", tmp_path / "out"
    out.mkdir()
    write_run(store, "lora", 0)
    report_here(store, out)  # this process, the repository's code: computes and stores
    first = cache_files(store)
    report_here(store, out)
    assert cache_files(store) == first  # the second report computed nothing, wrote nothing
    (name,) = first
    run = load_run(next(store.iterdir()))
    predictions, settings = run.predictions("test"), Settings("test", 10, "width", 50, 0)  # report's defaults
    assert str(stored(store, name)["key"]) == estimates.estimates_key(*predictions, "test", settings)

    planted = copy_package(tmp_path / "planted")
    assert copy_identity(planted) == estimates.estimators_code()  # an unchanged copy elsewhere: the same key
    plant(planted, "calibration/estimators.py", ECE_LINE, ECE_LINE.replace("return ", "return 2 * "))
    report_in_child(planted, store, out)  # `python -m peftviz report` with the planted estimator

    now = cache_files(store)
    assert now[name] == first[name] and len(now) == 2  # the old file left alone; the draws computed anew
    (new,) = set(now) - {name}
    monkeypatch.setattr(estimates, "estimators_code", lambda: copy_identity(planted))
    assert str(stored(store, new)["key"]) == estimates.estimates_key(*predictions, "test", settings)  # code alone
    old_arrays, new_arrays = stored(store, name), stored(store, new)
    assert new_arrays["value__ece"] == 2 * old_arrays["value__ece"] > 0
    assert np.array_equal(new_arrays["draws__ece"], 2 * old_arrays["draws__ece"])


def test_the_estimators_code_is_every_module_the_registry_calls():
    reached = set(modules_reached(estimates.DRAWN_BY))
    calibration = {"binning", "checks", "estimators", "paper_ece", "selective", "smooth_ece", "stats"}
    assert {f"peftviz.calibration.{name}" for name in calibration} <= reached  # smooth_ece: a lazy import
    assert "peftviz.calibration.metrics" not in reached and "peftviz.store.schema" not in reached
    assert estimates.estimators_code() == code_identity(estimates.DRAWN_BY, extra=inspect.getsource(estimates._compute))


def test_a_comment_where_the_registry_reaches_changes_the_identity_and_one_elsewhere_does_not(tmp_path):
    def identity(folder: Path) -> str:
        return source_digest(modules_reached(estimates.DRAWN_BY, folder / "peftviz"))

    def comment(module: str) -> None:
        path = copy / "peftviz" / module
        path.write_text("# a comment\n" + path.read_text())

    today = source_digest(modules_reached(estimates.DRAWN_BY))
    copy = copy_package(tmp_path / "copy")
    assert identity(copy) == today  # not where the files lie
    comment("calibration/metrics.py")  # metrics calls the registry; the registry never calls it
    assert identity(copy) == today
    comment("calibration/smooth_ece.py")  # imported inside a function of the registry
    assert identity(copy) != today


def test_the_sweep_code_covers_the_sweep_method_the_prediction_loop_and_the_metrics():
    reached = set(modules_reached((kernel.__name__, alpha_grid_method().__module__)))
    assert {alpha_grid_method().__module__, "peftviz.training.inference", "peftviz.calibration.estimators"} <= reached
    assert {"peftviz.analysis.attention", "peftviz.calibration.smooth_ece"} <= reached
