"""The last hostile inputs of the run store (issue 22): what config.json records besides the settings,
the Kernel page's α-sweep cache, and damaged test predictions on the Calibration page."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from peftviz.analysis import calibration as analysis
from peftviz.analysis import kernel
from peftviz.analysis.run_labels import run_row
from peftviz.store import caches
from peftviz.store.runs import list_runs, load_run
from tests.store.test_store_fuzz import npz_bytes, write_good_run

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- config.json's record

BAD_RECORDS = {  # folder -> (what config.json records instead, the listing's reason)
    "parameters-text": ({"parameters": "many"}, 'config.json: parameters must be an object, not "many"'),
    "counts-text": (
        {"parameters": {"total": "10", "trainable": "4"}},
        'config.json: parameters.total must be an integer, not "10"',
    ),
    "count-huge": (  # 100 * trainable / total overflows a float
        {"parameters": {"total": 1, "trainable": 10**400}},
        f"config.json: parameters.trainable must be at most {10**15}, not {str(10**400)[:37]}...",
    ),
    "labels-number": ({"label_names": 3}, "config.json: label_names must be a list of strings, not 3"),
    "environment-list": ({"environment": ["x"]}, 'config.json: environment must be an object, not ["x"]'),
    "attempts-object": ({"attempts": {"engine": "ray"}}, 'config.json: attempts must be a list, not {"engine": "ray"}'),
    "attempt-engine": (
        {"attempts": [{"engine": "slurm", "node": "n1", "started": "2026-11-24", "from_epoch": 0}]},
        'config.json: attempts[1].engine must be one of local, ray, not "slurm"',
    ),
    "attempt-epoch": (
        {"attempts": [{"engine": "ray", "node": "n1", "started": "2026-11-24", "from_epoch": -1}]},
        "config.json: attempts[1].from_epoch must be at least 0, not -1",
    ),
    "imported-kind": (
        {"imported": {"kind": "pickle", "source": "x", "revision": None, "files": {}, "labels": "by name"}},
        'config.json: imported.kind must be one of peft-adapter, hf-classifier, peftviz, not "pickle"',
    ),
    "imported-hash": (
        {"imported": {"kind": "peftviz", "source": "x", "revision": None, "files": {"a.json": "beef"}, "labels": "x"}},
        'config.json: imported.files["a.json"] must be 64 hex digits, not "beef"',
    ),
    "repeat-path": (  # a name in the store, never a path a listing could be steered by
        {"repeat_of": "../../etc"},
        'config.json: repeat_of must be a run folder\'s name or null, not "../../etc"',
    ),
    "repeat-number": ({"repeat_of": 7}, "config.json: repeat_of must be a run folder's name or null, not 7"),
    "repeat-dots": ({"repeat_of": ".."}, 'config.json: repeat_of must be a run folder\'s name or null, not ".."'),
}


@pytest.fixture(scope="module")
def record_store(tmp_path_factory) -> Path:
    """A good run, and copies of it whose config.json records one field of the wrong type."""
    store = tmp_path_factory.mktemp("record_store") / "runs"
    good = write_good_run(store)
    for name, (fields, _) in BAD_RECORDS.items():
        shutil.copytree(good, store / name)
        config = json.loads((store / name / "config.json").read_text())
        (store / name / "config.json").write_text(json.dumps(config | fields))
    return store


def test_a_record_of_the_wrong_type_lists_as_corrupt_naming_the_field(record_store):
    runs = {run.name: run for run in list_runs(record_store)}
    for name, (_, reason) in BAD_RECORDS.items():
        assert (runs[name].status, runs[name].error) == ("corrupt", reason)
        run = runs[name]  # what a page reads of a listed run: the record's fields as their types say
        assert isinstance(run.parameters, dict) and isinstance(run.label_names, list) and isinstance(run.created, str)
        assert run_row(run)["status"] == f"corrupt: {reason}"


def test_cli_lists_a_run_whose_record_has_the_wrong_types(record_store, capsys):
    from peftviz.cli import main

    assert main(["runs", "--runs-dir", str(record_store)]) == 0
    listing = capsys.readouterr().out
    for name, (_, reason) in BAD_RECORDS.items():
        row = next(line for line in listing.splitlines() if line.startswith(f"| {name} |"))
        assert f"corrupt: {reason}" in row
    assert "| complete |" in listing  # the good run


def test_home_page_lists_a_run_whose_record_has_the_wrong_types(record_store, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_RUNS", str(record_store))
    at = AppTest.from_file(str(ROOT / "pages/0_home.py"), default_timeout=120).run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    status = dict(zip(at.dataframe[0].value["run"], at.dataframe[0].value["status"]))
    for name, (_, reason) in BAD_RECORDS.items():
        assert status[name] == f"corrupt: {reason}"


# ---------------------------------------------------------------- the α-sweep cache


def sweep_rows(alphas, accuracy: float = 0.5) -> list[dict]:
    """Rows as `kernel.alpha_sweep` stores them: one per α, then the exact λ(C)."""
    return [{"alpha": a, "accuracy": accuracy, "ece": 0.1, "nll": 1.2} for a in [*alphas, kernel.EXACT]]


def damaged(rows: list[dict], index: int, **fields) -> list[dict]:
    rows = [dict(row) for row in rows]
    rows[index].update(fields)
    return rows


def without(rows: list[dict], index: int, key: str) -> list[dict]:
    rows = [dict(row) for row in rows]
    del rows[index][key]
    return rows


GRID = list(kernel.grid_alphas())
GOOD_ROWS = sweep_rows(GRID)
BAD_SWEEPS = {  # what a damaged cache holds as the grid's rows
    "no rows": [],
    "alpha zero": damaged(GOOD_ROWS, 0, alpha=0.0),  # a log axis cannot draw it
    "alpha negative": damaged(GOOD_ROWS, 1, alpha=-0.01),
    "alpha text": damaged(GOOD_ROWS, 1, alpha="0.01"),
    "alpha not the key's": damaged(GOOD_ROWS, 1, alpha=0.5),
    "a row missing": GOOD_ROWS[1:],
    "no exact row": GOOD_ROWS[:-1],
    "accuracy NaN": damaged(GOOD_ROWS, 2, accuracy=math.nan),
    "ece infinite": damaged(GOOD_ROWS, 2, ece=math.inf),
    "accuracy above 1": damaged(GOOD_ROWS, 2, accuracy=3.0),
    "nll negative": damaged(GOOD_ROWS, 2, nll=-1.0),
    "accuracy text": damaged(GOOD_ROWS, 2, accuracy="high"),
    "nll missing": without(GOOD_ROWS, 3, "nll"),
    "row a list": [*GOOD_ROWS[:-1], [0.1, 0.2]],
}


@pytest.fixture
def sweep_run(tmp_path):
    """A run with two finished epochs (best: 2) and no sweep stored yet."""
    return load_run(write_good_run(tmp_path / "runs"))


def store_sweeps(run, sweeps: dict[str, list], best_epoch: int = 2, code=None) -> None:
    """analysis/alpha_sweep.json holding `sweeps` (α list key -> rows), as `kernel._store_sweep` writes it
    (`code`: the identity of the code that computed them, by default today's)."""
    path = caches.cache_path(run.path, kernel.SWEEP_FILE)
    path.parent.mkdir(exist_ok=True)
    code = kernel.sweep_code(run) if code is None else code
    entries = {
        key: {"alphas": [float(a) for a in key.split(",")], "best_epoch": best_epoch, "code": code, "rows": rows}
        for key, rows in sweeps.items()
    }
    path.write_text(json.dumps({"format": kernel.SWEEP_FORMAT, "sweeps": entries}))


def test_a_good_sweep_cache_reads_back(sweep_run):
    store_sweeps(sweep_run, {kernel._sweep_key(GRID): GOOD_ROWS})
    assert kernel.cached_alpha_sweep(sweep_run) == GOOD_ROWS


def test_a_sweep_the_code_of_today_did_not_compute_is_computed_again(sweep_run):
    store_sweeps(sweep_run, {kernel._sweep_key(GRID): GOOD_ROWS}, code="0" * 64)  # sound, by other code
    assert kernel.cached_alpha_sweep(sweep_run) is None and kernel.damaged_sweep(sweep_run) is None
    kernel._store_sweep(sweep_run, GRID, GOOD_ROWS)
    assert kernel.cached_alpha_sweep(sweep_run) == GOOD_ROWS


@pytest.mark.parametrize("code", ["", "0" * 63, "G" * 64, 7, None])
def test_a_sweep_whose_code_is_not_a_digest_is_damaged(sweep_run, code):
    path = caches.cache_path(sweep_run.path, kernel.SWEEP_FILE)
    store_sweeps(sweep_run, {kernel._sweep_key(GRID): GOOD_ROWS})
    stored = json.loads(path.read_text())
    stored["sweeps"][kernel._sweep_key(GRID)]["code"] = code
    path.write_text(json.dumps(stored))
    assert kernel.cached_alpha_sweep(sweep_run) is None
    assert "code must be 64 hex digits" in kernel.damaged_sweep(sweep_run)


def test_a_sweep_file_of_another_format_is_computed_again_silently(sweep_run):
    path = caches.cache_path(sweep_run.path, kernel.SWEEP_FILE)
    store_sweeps(sweep_run, {kernel._sweep_key(GRID): GOOD_ROWS})
    path.write_text(json.dumps(json.loads(path.read_text()) | {"format": kernel.SWEEP_FORMAT - 1}))
    assert kernel.cached_alpha_sweep(sweep_run) is None and kernel.damaged_sweep(sweep_run) is None


@pytest.mark.parametrize("damage", list(BAD_SWEEPS))
def test_a_damaged_sweep_cache_is_computed_again_and_other_sweeps_stay(sweep_run, damage):
    other = [2e-3]
    store_sweeps(sweep_run, {kernel._sweep_key(GRID): BAD_SWEEPS[damage], kernel._sweep_key(other): sweep_rows(other)})
    assert kernel.cached_alpha_sweep(sweep_run) is None  # the page offers to evaluate again
    assert kernel.cached_alpha_sweep(sweep_run, other) == sweep_rows(other)
    said = kernel.damaged_sweep(sweep_run)  # and says why, naming the file and the field
    assert (
        said.startswith("analysis/alpha_sweep.json")
        and "\n" not in said
        and kernel.damaged_sweep(sweep_run, other) is None
    )

    kernel._store_sweep(sweep_run, GRID, GOOD_ROWS)  # what the evaluation then writes over the damaged entry
    assert kernel.cached_alpha_sweep(sweep_run) == GOOD_ROWS and kernel.damaged_sweep(sweep_run) is None
    assert kernel.cached_alpha_sweep(sweep_run, other) == sweep_rows(other)


# ---------------------------------------------------------------- damaged test predictions on the Calibration page

CALIBRATION = str(ROOT / "pages/2_Calibration.py")


def nan_probs(probs, labels):
    return {"probs": np.full_like(probs, np.nan), "labels": labels}


def doubled_probs(probs, labels):
    return {"probs": probs * 2, "labels": labels}


def labels_out_of_range(probs, labels):
    return {"probs": probs, "labels": labels + probs.shape[1]}


TEST_DAMAGE = {  # how a finished run's test predictions are damaged -> the problem the page names
    nan_probs: "probs must be probabilities in [0, 1]; {n} are NaN or inf",
    doubled_probs: "each row of probs must sum to 1",
    labels_out_of_range: "labels must be class ids 0..{last}",
    None: "the file does not exist",
}


@pytest.fixture
def damaged_test_store(smoke_store, tmp_path, monkeypatch):
    """Five complete runs of the smoke store: the first whole, the others with damaged test predictions.
    Returns (the whole run's name, {damaged run's name: the line the page must show for it})."""
    store = tmp_path / "runs"
    complete = [run for run in list_runs(smoke_store) if run.status == "complete"][:5]
    for run in complete:
        shutil.copytree(run.path, store / run.name, ignore=shutil.ignore_patterns("analysis"))
    expected = {}
    for run, (damage, problem) in zip(complete[1:], TEST_DAMAGE.items()):
        path = store / run.name / "predictions" / "test.npz"
        probs, labels = run.predictions("test")
        path.unlink()
        if damage is not None:
            path.write_bytes(npz_bytes(**damage(probs, labels)))
        problem = problem.format(n=probs.size, last=probs.shape[1] - 1)
        expected[run.name] = f"run {run.name}: predictions/test.npz: {problem}"
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    return complete[0].name, expected


def test_judging_on_test_sets_each_damaged_run_apart_with_its_file_and_problem(damaged_test_store):
    whole, expected = damaged_test_store
    runs = list_runs()
    judged = analysis.judgeable([analysis.Group(run.name, [run]) for run in runs], "test")
    assert [unit.key for unit in judged.units] == [whole] and not judged.waiting
    assert len(judged.damaged) == len(expected)
    for line, name in zip(judged.damaged, [run.name for run in runs if run.name != whole]):
        assert line.startswith(expected[name]) and "\n" not in line


def chosen(at, names) -> None:
    at.multiselect(key="calibration_units_False").set_value(list(names)).run()


def test_calibration_page_names_each_damaged_test_file_and_compares_the_rest(damaged_test_store):
    whole, expected = damaged_test_store
    at = AppTest.from_file(CALIBRATION, default_timeout=300).run()
    chosen(at, [whole, *expected])
    assert not at.exception, at.exception[0].message if at.exception else ""
    errors = [error.value for error in at.error]
    for line in expected.values():
        assert sum(error.startswith(line) for error in errors) == 1, (line, errors)
    assert not any("has finished" in error for error in errors)
    summary = next(element.value for element in at.table if element.value.columns[0] == "unit")
    assert len(summary) == 1  # the whole run is still compared


def test_calibration_page_with_only_damaged_runs_says_why_not_that_none_finished(damaged_test_store):
    _, expected = damaged_test_store
    at = AppTest.from_file(CALIBRATION, default_timeout=300).run()
    chosen(at, expected)
    assert not at.exception, at.exception[0].message if at.exception else ""
    errors = [error.value for error in at.error]
    assert all(any(error.startswith(line) for error in errors) for line in expected.values())
    assert not any("has finished" in text for text in [*errors, *(info.value for info in at.info)])
