"""The Calibration page: its analysis functions and figures on the smoke store, then the page itself.

The smoke runs are a tiny random BERT, so their predictions are nearly uniform over five classes:
all confidences sit in one equal-width bin. That is fine for what is checked here (counts, ECE
identities, figure data against tables); the equal-mass scheme spreads them over every bin.
"""

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from peftviz import calibration
from peftviz.analysis import calibration as analysis
from peftviz.figures import calibration as figures
from peftviz.runs import Run, RunError, list_runs, load_run

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "pages/2_Calibration.py")


@pytest.fixture(scope="module")
def runs(smoke_store):
    return list_runs(smoke_store)


@pytest.fixture(scope="module")
def run(runs):
    return runs[0]


def nan_equal(values, expected) -> bool:
    """Figure JSON holds null for an empty bin's NaN."""
    values = np.array([np.nan if v is None else v for v in values], dtype=float)
    return np.allclose(values, np.asarray(expected, dtype=float), equal_nan=True, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- analysis


def test_reliability_table_counts_every_example_and_reproduces_the_stored_ece(runs):
    for run in runs:
        for record in run.metrics:  # the trainer stored ECE with 10 equal-width bins
            table = analysis.reliability_table(run, record["epoch"], 10, "width")
            assert list(table.columns) == list(analysis.BIN_COLUMNS)
            assert len(table) == 10 and table["count"].sum() == record["n"]
            assert analysis.table_ece(table) == pytest.approx(record["ece"], abs=1e-12)


def test_equal_mass_bins_hold_equal_counts_and_give_calibrations_ece(run):
    table = analysis.reliability_table(run, 2, 7, "mass")
    probs, labels = run.predictions(2)
    assert table["count"].max() - table["count"].min() <= 1 and table["count"].sum() == len(labels)
    assert analysis.table_ece(table) == pytest.approx(calibration.ece(probs, labels, 7, "mass"), abs=1e-12)


def test_an_epoch_past_the_last_shows_the_last(run):
    assert analysis.resolve(run, 99) == 2 and analysis.resolve(run, 1) == 1
    assert set(analysis.reliability_table(run, 99)["epoch"]) == {2}
    assert analysis.resolve(run, "test") == "test"


def test_ece_over_epochs_has_one_row_per_epoch_with_its_bootstrap_interval(run):
    curve = analysis.ece_over_epochs(run, 10, "width", n_resamples=50, name="x")
    assert list(curve["epoch"]) == [1, 2] and set(curve["run"]) == {"x"}
    assert np.allclose(curve["ece"], [m["ece"] for m in run.metrics], atol=1e-12)
    assert (curve["low"] <= curve["high"]).all() and (curve["low"] >= 0).all()


def test_temperature_scaling_fits_on_validation_and_does_not_hurt_test_nll(runs):
    for run in runs:
        result = analysis.temperature_scaling(run, 10, "width")
        assert result.temperature > 0 and result.fitted_on_epoch == run.best_epoch
        assert result.after["nll"] <= result.before["nll"] + 0.05  # fitted elsewhere, so not a strict minimum
        assert result.after["accuracy"] == result.before["accuracy"]  # one T never changes the argmax
        assert result.before["ece"] == pytest.approx(run.summary["test"]["ece"], abs=1e-12)
        _, test_labels = run.predictions("test")
        assert result.after_bins["count"].sum() == result.before_bins["count"].sum() == len(test_labels)
        assert list(result.comparison().columns) == ["before", "after"]


def test_metrics_table_has_one_row_per_run_matching_the_stored_metrics(runs):
    table = analysis.metrics_table(runs, 2, 10, "width", analysis.display_names(runs))
    assert len(table) == len(runs) and table["run"].is_unique
    assert list(table.columns) == ["run", "epoch", "N", *analysis.METRIC_NAMES.values()]
    stored = [run.metrics[1] for run in runs]
    for heading, key in [("ECE", "ece"), ("NLL", "nll"), ("Brier", "brier"), ("accuracy", "accuracy")]:
        assert np.allclose(table[heading], [m[key] for m in stored], atol=1e-9)


def test_bins_csv_has_the_header_and_one_line_per_bin(runs):
    tables = [analysis.reliability_table(run, 1, 12, "mass", name=f"run {i}") for i, run in enumerate(runs[:3])]
    text = analysis.bins_csv(tables)
    assert text.splitlines()[0] == ",".join(analysis.BIN_COLUMNS)
    parsed = pd.read_csv(io.StringIO(text))
    assert len(parsed) == 36 and list(parsed["run"].unique()) == ["run 0", "run 1", "run 2"]
    assert analysis.bins_csv([]).strip() == ",".join(analysis.BIN_COLUMNS)


def fake_run(name, label, status="complete", dataset="bbc-news"):
    return Run(Path(name), status, {"method": label, "label": label, "dataset": dataset})


def test_display_names_are_unique_and_say_when_a_run_is_unfinished():
    runs = [fake_run("a-111111", "ft"), fake_run("b-222222", "ft"), fake_run("c-333333", "pt", "incomplete")]
    assert analysis.display_names(runs) == {
        "a-111111": "ft · 111111",
        "b-222222": "ft · 222222",
        "c-333333": "pt (incomplete)",
    }


def test_default_selection_takes_complete_runs_of_the_most_common_dataset():
    runs = [fake_run(f"r{i}", f"m{i}", dataset="bbc-news") for i in range(8)]
    runs += [fake_run("s", "m", dataset="sst2"), fake_run("u", "m", "failed", "bbc-news")]
    assert [run.name for run in analysis.default_selection(runs, limit=6)] == [f"r{i}" for i in range(6)]
    assert analysis.default_selection([fake_run("u", "m", "failed")]) != []
    assert analysis.default_selection([]) == []


# ---------------------------------------------------------------- figures


def test_reliability_figure_draws_the_table(run):
    table = analysis.reliability_table(run, 2, 8, "mass")
    fig = figures.reliability_figure(table)
    accuracy, gap, diagonal, count = fig.data
    assert [t.name for t in fig.data] == ["accuracy", "gap", "perfect calibration", "count"]
    assert len(accuracy.y) == len(count.y) == 8
    assert nan_equal(accuracy.y, table["accuracy"]) and list(count.y) == list(table["count"])
    assert nan_equal(np.add(gap.base, gap.y), table["confidence"])  # the gap bar ends at the mean confidence
    assert list(diagonal.x) == list(diagonal.y) == [0, 1]
    assert "N = 120" in fig.layout.title.text and "8 equal-mass bins" in fig.layout.title.text


def test_ece_figure_has_a_band_and_a_line_per_run(runs):
    curves = pd.concat([analysis.ece_over_epochs(run, 10, "width", 20, name=f"r{i}") for i, run in enumerate(runs[:2])])
    fig = figures.ece_over_epochs_figure(curves, "width", 10, 20, epoch=1)
    assert len(fig.data) == 6
    high, low, line = fig.data[:3]
    assert low.fill == "tonexty" and line.name == "r0"
    assert list(line.y) == list(curves.loc[curves["run"] == "r0", "ece"])
    assert "10 equal-width bins" in fig.layout.title.text and "20 resamples" in fig.layout.title.text


def test_temperature_figure_shows_before_and_after(run):
    result = analysis.temperature_scaling(run, 10, "width")
    fig = figures.temperature_figure(result)
    assert len(fig.data) == 8
    assert nan_equal(fig.data[0].y, result.before_bins["accuracy"])
    assert nan_equal(fig.data[4].y, result.after_bins["accuracy"])
    assert f"T = {result.temperature:.3g}" in fig.layout.annotations[1].text


# ---------------------------------------------------------------- the page


def charts(at) -> dict[str, list[dict]]:
    """The page's plotly charts by kind, each as its JSON spec."""
    found = {"reliability": [], "ece": [], "temperature": []}
    for element in at.get("plotly_chart"):
        spec = json.loads(element.proto.spec)
        title = spec["layout"]["title"]["text"]
        kind = "ece" if title.startswith("ECE") else "temperature" if title.startswith("Temperature") else "reliability"
        found[kind].append(spec)
    return found


def bars(spec: dict, name: str) -> list[dict]:
    return [trace for trace in spec["data"] if trace.get("name") == name]


@pytest.fixture
def page(app_store):
    return AppTest.from_file(PAGE, default_timeout=60).run()


def test_page_draws_every_section_without_errors(page):
    assert not page.exception and not page.error
    found = charts(page)
    assert len(found["reliability"]) == 6  # the default: at most six complete runs
    assert len(found["ece"]) == 1 and len(found["temperature"]) == 1
    assert len(found["ece"][0]["data"]) == 18  # band edges and line per run
    for spec in found["reliability"]:
        assert len(bars(spec, "accuracy")[0]["x"]) == 10 and "N = 120" in spec["layout"]["title"]["text"]
    assert any("10 equal-width bins" in caption.value for caption in page.caption)
    assert len(page.dataframe[-1].value) == 6  # the metrics table
    assert len(page.get("download_button")) == 1


def test_page_follows_its_widgets(page):
    page.slider[0].set_value(15).run()  # bins
    assert not page.exception
    for spec in charts(page)["reliability"]:
        assert len(bars(spec, "accuracy")[0]["x"]) == 15

    page.radio[0].set_value("mass").run()
    assert not page.exception
    for spec in charts(page)["reliability"]:
        assert sorted(set(bars(spec, "count")[0]["y"])) == [8]  # 120 examples in 15 equal-mass bins
    assert "equal-mass" in charts(page)["ece"][0]["layout"]["title"]["text"]

    page.slider[1].set_value(1).run()  # epoch
    assert all(" · epoch 1<br>" in spec["layout"]["title"]["text"] for spec in charts(page)["reliability"])

    chosen = page.multiselect[0].value[:2]
    page.multiselect[0].set_value(chosen).run()
    assert not page.exception and not page.error
    assert len(charts(page)["reliability"]) == 2 and len(charts(page)["ece"][0]["data"]) == 6
    assert len(page.dataframe[-1].value) == 2


def test_page_on_an_empty_store_says_so(empty_store):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception and not at.error
    assert at.info and "No runs" in at.info[0].value
    assert not at.get("plotly_chart")


@pytest.fixture
def mixed_store(smoke_store, tmp_path, monkeypatch):
    """One complete run, one killed after epoch 1 (no summary, no test predictions), one corrupt folder."""
    complete, killed = sorted(smoke_store.iterdir())[:2]
    shutil.copytree(complete, tmp_path / complete.name)
    shutil.copytree(killed, tmp_path / killed.name)
    killed = tmp_path / killed.name
    (killed / "summary.json").unlink()
    (killed / "predictions" / "test.npz").unlink()
    (killed / "predictions" / "epoch_2.npz").unlink()
    metrics = (killed / "metrics.jsonl").read_text().splitlines()
    (killed / "metrics.jsonl").write_text(metrics[0] + "\n")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    monkeypatch.setenv("PEFTVIZ_RUNS", str(tmp_path))
    return tmp_path, load_run(killed)


def test_page_shows_unfinished_runs_and_skips_corrupt_ones(mixed_store):
    _, killed = mixed_store
    assert killed.status == "incomplete"
    with pytest.raises(RunError):
        analysis.temperature_scaling(killed)

    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception and not at.error
    assert any("Skipped unreadable runs: broken" in caption.value for caption in at.caption)
    at.multiselect[0].set_value([run.name for run in list_runs() if run.status != "corrupt"]).run()
    assert not at.exception and not at.error
    titles = [spec["layout"]["title"]["text"] for spec in charts(at)["reliability"]]
    assert len(titles) == 2 and any("(incomplete) · epoch 1<br>" in title for title in titles)  # slider at 2
    assert len(charts(at)["temperature"]) == 1
    assert len(at.selectbox[0].options) == 1  # only the finished run has test predictions
