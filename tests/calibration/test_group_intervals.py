"""Every interval inside its metric's range and around its value (issue 32): the groups table of Home
and `runs` gives the test numbers `report` gives (the two-level bootstrap, not a t-interval over two
seeds, which left [0, 1]: "0.9742 [0.9444, 1.0040]", ECE "[-0.1628, 0.1996]"), and recalibration's
table holds every value inside its interval (smooth ECE "0.0063 [0.0064, 0.0817]": a calibration
error near 0, whose resamples all folded above it)."""

import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from peftviz.analysis import calibration as analysis
from peftviz.analysis import group_stats
from peftviz.calibration import estimators
from peftviz.calibration.stats import interval_around, percentile_interval
from peftviz.cli import main
from peftviz.store.runs import Group, group_runs, list_runs

ROOT = Path(__file__).resolve().parents[2]
HOME = str(ROOT / "pages/0_home.py")
CELL = re.compile(r"(-?\d+\.\d{4}) \[(-?\d+\.\d{4}), (-?\d+\.\d{4})\]")  # "mean [low, high]", 4 decimals
RANGES = {
    "accuracy": (0, 1),
    "macro_f1": (0, 1),
    "ece": (0, 1),
    "smooth_ece": (0, 1),
    "debiased_ece": (-1, 1),
    "ece_sweep": (0, 1),
    "nll": (0, np.inf),
    "brier": (0, 2),
    "ece_mass": (0, 1),
    "classwise_ece": (0, 1),
    "mce": (0, 1),
    "ace": (0, 1),
    "brier_reliability": (0, 2),
    "brier_resolution": (0, 2),
    "brier_uncertainty": (0, 1),
    "paper_ece": (0, 1),
    "aurc": (0, 1),
    "augrc": (0, 1),
    "accuracy_at_80": (0, 1),
    "accuracy_at_90": (0, 1),
}
COLUMNS = {"test accuracy": "accuracy", "test ECE": "ece"}  # the groups table's columns: their metrics


def assert_inside(metric: str, value: float, low: float, high: float, where: str) -> None:
    bottom, top = RANGES[metric]
    rounding = 1e-12  # sums of float64 terms: a Brier term of 0 can come out as -6e-17
    assert bottom - rounding <= low <= value <= high <= top + rounding, f"{where}: {metric} {value} [{low}, {high}]"


def cells(rows: pd.DataFrame) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(method, metric) -> (mean, low, high) read from a groups table's "mean [low, high]" cells."""
    found = {}
    for row in rows.to_dict("records"):
        for column, metric in COLUMNS.items():
            match = CELL.fullmatch(row[column].strip())
            assert match, f"{row['method']}: {column} {row[column]!r}"
            found[(row["method"], metric)] = tuple(map(float, match.groups()))
    return found


@pytest.fixture(scope="module")
def reported(seeds_store, tmp_path_factory) -> pd.DataFrame:
    """`report`'s summary of the two-seed store at its defaults, every default metric."""
    prefix = tmp_path_factory.mktemp("report") / "r"
    assert main(["report", "--csv", str(prefix), "--runs-dir", str(seeds_store)]) == 0
    return pd.read_csv(f"{prefix}-summary.csv")


def test_every_interval_of_report_lies_in_its_metrics_range_around_its_value(reported):
    assert set(reported["n"]) == {2} and len(reported) == 6 * len(estimators.DEFAULT_METRICS)
    for row in reported.itertuples():
        assert_inside(row.metric, row.mean, row.low, row.high, f"report {row.unit}")


def test_home_shows_reports_numbers_for_each_group_inside_range_and_around_its_value(app_seeds_store, reported):
    page = AppTest.from_file(HOME, default_timeout=300).run()
    assert not page.exception and not page.error
    home = cells(page.dataframe[1].value)
    assert len(home) == 12  # six groups of two seeds, two metrics
    for (method, metric), (mean, low, high) in home.items():
        assert_inside(metric, mean, low, high, f"Home {method}")
        (row,) = reported[(reported["unit"] == method) & (reported["metric"] == metric)].itertuples()
        assert (mean, low, high) == (round(row.mean, 4), round(row.low, 4), round(row.high, 4)), (method, metric)


def markdown_rows(text: str) -> pd.DataFrame:
    """A markdown table printed by the CLI (`tables.format_table`) read back."""
    lines = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|")
    ]
    return pd.DataFrame(lines[2:], columns=lines[0])


def test_runs_prints_the_same_groups_table(seeds_store, capsys):
    assert main(["runs", "--runs-dir", str(seeds_store)]) == 0
    printed = markdown_rows(capsys.readouterr().out.split("Groups (runs that differ only in the training seed)")[1])
    expected = pd.DataFrame([group_stats.group_row(group) for group in group_runs(list_runs(seeds_store))])
    assert len(printed) == 6 and (printed[list(COLUMNS)] == expected[list(COLUMNS)]).all().all()
    for (method, metric), (mean, low, high) in cells(printed).items():
        assert_inside(metric, mean, low, high, f"runs {method}")


def test_a_group_says_not_yet_until_a_run_has_test_predictions_then_shows_those(seeds_store, tmp_path):
    group = group_runs(list_runs(seeds_store))[0]
    for run in group.runs:
        shutil.copytree(run.path, tmp_path / run.name)
    first, second = (tmp_path / run.name / "predictions" / "test.npz" for run in group.runs)
    first.unlink()
    (copied,) = group_runs(list_runs(tmp_path))
    row = group_stats.group_row(copied)
    assert row["complete"] == 1 and row["seeds"] == "0,1"
    alone = group_stats.group_row(Group(copied.key, copied.runs[1:]))  # the run that has them, as a unit of one
    assert alone["seeds"] == "one run: seed 1" and CELL.fullmatch(alone["test ECE"])
    assert [row[column] for column in COLUMNS] == [alone[column] for column in COLUMNS]
    second.unlink()
    row = group_stats.group_row(group_runs(list_runs(tmp_path))[0])
    assert row["complete"] == 0 and [row[column] for column in COLUMNS] == ["not yet", "not yet"]


def test_every_recalibration_value_lies_inside_its_interval(mixed_store):
    """Every map and estimator on every run of the mixed store. With the bare percentile interval, 54 of its
    728 cells had the value outside (smooth ECE after temperature scaling 0.0025 [0.0026, 0.1281] among them)."""
    settings = group_stats.Settings(n_resamples=200)
    checked = 0
    for run in list_runs(mixed_store):
        table = analysis.recalibration_estimates(run, settings, None)
        for row in table.itertuples():
            assert_inside(row.metric, row.value, row.low, row.high, f"{run.name} {row.map}")
            checked += 1
    assert checked == 16 * 4 * len(estimators.ESTIMATORS)


def test_the_interval_is_the_percentile_interval_widened_only_to_hold_its_value():
    draws = np.random.default_rng(0).normal(0.05, 0.01, 400)
    low, high = percentile_interval(draws)
    assert interval_around(0.05, draws) == (low, high)  # inside: untouched
    assert interval_around(0.001, draws) == (0.001, high)  # every draw above: down to the value, no further
    assert interval_around(0.2, draws) == (low, 0.2)
    assert interval_around(np.nan, draws) == (low, high)
