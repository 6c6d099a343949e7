"""One number everywhere (issue 45): a group of seeds shows the same interval on Home, the Calibration page,
the Confidence page and in `report` where their settings agree, and each says how many resamples it used; the
Tour's ECE per epoch is the Calibration page's seed mean; a debiased ECE below 0 is explained where it is shown.

On fake stores (`tests/support/fake_runs.py`): run folders written by the store's writer, no training."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from peftviz.analysis import calibration as analysis
from peftviz.analysis import group_stats
from peftviz.analysis.selective import SELECTIVE_METRICS
from peftviz.calibration import estimators
from peftviz.cli import main
from peftviz.run_config import preset_config
from peftviz.store.runs import group_runs, list_runs
from peftviz.store.writer import RunWriter
from tests.app.conftest import open_page
from tests.app.test_page_calibration import charts_by_kind, table
from tests.support.fake_runs import LABELS, write_run
from tests.support.helpers import charts

CELL = re.compile(r"-?\d+\.\d{4} \[-?\d+\.\d{4}, -?\d+\.\d{4}\]")  # "mean [low, high]"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """lora and bitfit, each at seeds 0 and 1, complete after 2 epochs, on one data split."""
    root = tmp_path_factory.mktemp("one-number") / "runs"
    for seed in (0, 1):
        write_run(root, "lora", seed)
        write_run(root, "bitfit", seed)
    return root


def report(store: Path, tmp_path: Path, *flags: str) -> tuple[str, pd.DataFrame]:
    """`report`'s markdown (stdout) and its summary CSV, at its defaults but for `flags`."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", "--runs-dir", str(store), "--csv", str(tmp_path / "r"), *flags]) == 0
    return out.getvalue(), pd.read_csv(tmp_path / "r-summary.csv")


def csv_cell(summary: pd.DataFrame, method: str, metric: str) -> str:
    row = summary[(summary["method"] == method) & (summary["metric"] == metric)].iloc[0]
    return f"{row['mean']:.4f} [{row['low']:.4f}, {row['high']:.4f}]"


def markdown_cells(text: str, method: str) -> list[str]:
    """The "mean [low, high]" cells of `method`'s row of report's markdown summary, in its columns' order."""
    row = next(line for line in text.splitlines() if line.startswith(f"| {method} "))
    return CELL.findall(row)


def test_a_group_shows_one_interval_on_home_the_calibration_page_and_in_report(on_store, tmp_path):
    home = open_page("0_home.py")
    assert not home.exception and not home.error
    groups = home.dataframe[1].value.set_index("method")
    assert any("1,000 resamples, seed 0, 10 equal-width bins" in c.value for c in home.caption)  # says what it used

    page = open_page("2_Calibration.py")
    page.radio(key="calibration_resamples").set_value(1000).run()
    assert not page.exception and not page.error
    shown = table(page, "unit").set_index("unit")
    assert any(
        "from 1,000 bootstrap resamples" in c.value and "These are the cells of `report`" in c.value
        for c in page.caption
    )

    markdown, summary = report(on_store, tmp_path)
    assert "from 1000 resamples (seed 0)" in markdown
    columns = list(group_stats.check_metrics(None))
    for method in ("lora", "bitfit"):
        in_markdown = dict(zip(columns, markdown_cells(markdown, method)))
        for metric, column in (("accuracy", "test accuracy"), ("ece", "test ECE")):
            cell = csv_cell(summary, method, metric)
            assert groups.loc[method, column] == shown.loc[method, metric] == in_markdown[metric] == cell, metric
            assert CELL.fullmatch(cell) and summary.query("method == @method")["n"].eq(2).all()


def test_the_calibration_page_at_200_resamples_says_report_uses_1000(on_store):
    page = open_page("2_Calibration.py")
    assert page.radio(key="calibration_resamples").value == 200
    caption = next(c.value for c in page.caption if c.value.startswith("Each cell"))
    assert "from 200 bootstrap resamples" in caption and "use 1,000 resamples: with those" in caption


def test_the_confidence_pages_selective_table_is_reports(on_store, tmp_path):
    page = open_page("7_Confidence.py")
    page.radio(key="confidence_resamples").set_value(1000).run()
    assert not page.exception and not page.error
    headings = {estimators.ESTIMATORS[name].heading: name for name in SELECTIVE_METRICS}
    shown = next(t.value for t in page.table if "AURC" in t.value.columns).rename(columns=headings).set_index("unit")
    caption = next(c.value for c in page.caption if c.value.startswith("Each cell"))
    assert "from 1,000 bootstrap resamples" in caption and "`report --metric aurc --metric augrc" in caption

    flags = [flag for name in SELECTIVE_METRICS for flag in ("--metric", name)]
    _, summary = report(on_store, tmp_path, *flags)
    for method in ("lora", "bitfit"):
        for metric in SELECTIVE_METRICS:
            assert shown.loc[method, metric] == csv_cell(summary, method, metric), (method, metric)


def test_the_tours_ece_per_epoch_is_the_calibration_pages_seed_mean(on_store):
    tour = open_page("6_Tour.py", step="4")
    assert not tour.exception and not tour.error
    traces = {trace["name"]: trace for trace in charts(tour)["tour_calibration"]["data"]}
    assert "lora · mean of seeds 0,1" in traces and "bitfit · mean of seeds 0,1" in traces  # named as a mean
    assert (
        "mean of seeds: over its seeds and the examples" in charts(tour)["tour_calibration"]["layout"]["title"]["text"]
    )

    page = open_page("2_Calibration.py")  # the ECE figure at its default 200 resamples, as the Tour's
    drawn = {trace["name"]: trace for trace in charts_by_kind(page)["ece"][0]["data"]}
    groups = {group.label: group for group in group_runs(list_runs(on_store))}
    for label, group in groups.items():
        expected = analysis.group_ece_over_epochs(group, 10, "width", label, 200)
        tour_line = traces[f"{label} · mean of seeds 0,1"]
        assert tour_line["y"] == pytest.approx(expected["ece"].tolist(), abs=1e-12)
        assert drawn[label]["y"] == pytest.approx(tour_line["y"], abs=1e-12)
        assert traces[f"{label} · mean of seeds 0,1 95% high"]["y"] == pytest.approx(expected["high"].tolist())


def test_the_calibration_pages_smooth_diagram_draws_two_seeds_without_a_band(on_store):
    page = open_page("2_Calibration.py")
    assert not page.exception and not page.error
    (smooth,) = charts_by_kind(page)["smooth"]
    names = [trace["name"] for trace in smooth["data"]]
    assert not [name for name in names if " 95% " in name]  # groups of two seeds: too few for a band
    assert {"lora seed 0", "lora seed 1", "bitfit seed 0", "bitfit seed 1"} <= set(names)
    assert "too few seeds for a band" in smooth["layout"]["title"]["text"]
    assert any("A group of fewer than 3 seeds has no band" in c.value for c in page.caption)


# ---------------------------------------------------------------- a debiased ECE below 0


def calibrated_run(root: Path, n: int = 100) -> None:
    """A complete run that is exactly calibrated: every prediction made with confidence 0.7, and 70% of them
    right. Its binned ECE is 0 and its debiased ECE below 0: the plug-in minus the bias it expects, ~0.037."""
    import torch

    config = preset_config("smoke", "lora", epochs=1)
    parameters = {"total": 10, "trainable": 4, "method": 2, "backbone": 6, "head": 2}
    writer = RunWriter.create(
        root, config, {"label_names": LABELS, "parameters": parameters, "environment": {"created": "2026-01-01 00:00"}}
    )
    probs = np.tile(np.float32([0.7, 0.15, 0.15]), (n, 1))  # (N, 3) class 0 on top
    labels = np.where(np.arange(n) < 0.7 * n, 0, 1)  # right on the first 70%
    writer.write_epoch({"epoch": 1, "micro_f1": 0.7, "accuracy": 0.7, "ece": 0.0, "seconds": 1.0}, probs, labels)
    writer.write_params({"head.weight": torch.zeros(3, 4)}, 1)
    writer.write_predictions("test", probs, labels)
    writer.finish({"params_epoch": 1, "test": {"accuracy": 0.7, "ece": 0.0}})


@pytest.fixture
def calibrated(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "runs"
    calibrated_run(root)
    monkeypatch.setenv("PEFTVIZ_RUNS", str(root))
    return root


def test_a_debiased_ece_below_zero_is_explained_where_it_is_shown(calibrated, tmp_path):
    (run,) = list_runs(calibrated)
    debiased = estimators.estimate_all(*run.predictions("test"), 10, "width", 200, metrics=["debiased_ece"])
    assert debiased["debiased_ece"].value < 0  # the case to explain

    page = open_page("2_Calibration.py")
    assert not page.exception and not page.error
    assert table(page, "unit")["debiased_ece"].iloc[0].startswith("-")  # shown below 0
    captions = [c.value for c in page.caption]
    comparison = next(c for c in captions if c.startswith("Each cell"))
    assert analysis.DEBIASED_BELOW_ZERO in comparison  # under the comparison table
    assert analysis.DEBIASED_BELOW_ZERO in captions  # and under the recalibration table, which shows it too

    markdown, _ = report(calibrated, tmp_path)
    assert analysis.DEBIASED_BELOW_ZERO in markdown


def test_the_note_is_said_only_where_a_debiased_ece_is_below_zero():
    def long(metric, mean, low, high):
        return pd.DataFrame({"metric": [metric], "mean": [mean], "low": [low], "high": [high]})

    assert analysis.below_zero_note(long("debiased_ece", 0.01, -0.02, 0.04)) == analysis.DEBIASED_BELOW_ZERO
    assert analysis.below_zero_note(long("debiased_ece", -0.01, -0.02, 0.04)) == analysis.DEBIASED_BELOW_ZERO
    assert analysis.below_zero_note(long("debiased_ece", 0.05, 0.02, 0.08)) is None
    assert analysis.below_zero_note(long("accuracy", -1.0, -1.0, -1.0)) is None  # only debiased ECE
    recalibration = pd.DataFrame(
        {"map": ["as trained"], "metric": ["debiased_ece"], "value": [0.01], "low": [-0.01], "high": [0.03]}
    )
    assert analysis.below_zero_note(recalibration) == analysis.DEBIASED_BELOW_ZERO
