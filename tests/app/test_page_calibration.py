"""The Calibration page: its analysis functions and figures on the smoke store, then the page itself.

The smoke runs are a tiny random BERT, so their predictions are nearly uniform over five classes:
all confidences sit in one equal-width bin. That is fine for what is checked here (counts, ECE
identities, figure data against tables); the equal-mass scheme spreads them over every bin.
"""

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from peftviz import calibration
from peftviz.analysis import calibration as analysis
from peftviz.analysis import group_stats
from peftviz.calibration import estimators
from peftviz.errors import RunError
from peftviz.figures import calibration as figures
from peftviz.run_config import TrainConfig
from peftviz.store.runs import Run, group_runs, list_runs, load_run
from tests.calibration.test_calibration import bins_by_hand, scipy_wilson
from tests.support.build_counts import count_calls, private_store
from tests.support.helpers import charts, plotly_array, seed_values_and_draws, two_level_by_hand

ROOT = Path(__file__).resolve().parents[2]
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
        result = analysis.recalibration_bins(run, "temperature", 10, "width")
        assert result.temperature > 0 and result.fitted_on_epoch == run.best_epoch
        assert result.after["nll"] <= result.before["nll"] + 0.05  # fitted elsewhere, so not a strict minimum
        assert result.after["accuracy"] == result.before["accuracy"]  # one T never changes the argmax
        assert result.before["ece"] == pytest.approx(run.summary["test"]["ece"], abs=1e-12)
        _, test_labels = run.predictions("test")
        assert result.after_bins["count"].sum() == result.before_bins["count"].sum() == len(test_labels)


def fake_run(name, label, status="complete", dataset="bbc-news"):
    return Run(Path(name), status, TrainConfig(method="fine-tuning", label=label, dataset=dataset))


def test_display_names_are_unique_and_say_when_a_run_is_unfinished():
    runs = [fake_run("a-111111", "ft"), fake_run("b-222222", "ft"), fake_run("c-333333", "pt", "incomplete")]
    assert analysis.display_names(runs) == {
        "a-111111": "ft · 111111",
        "b-222222": "ft · 222222",
        "c-333333": "pt (incomplete)",
    }


def created_at(run: Run, minute: int) -> Run:
    run.record = {"environment": {"created": f"2026-11-26T06:{minute:02d}:00+00:00"}}
    return run


def test_default_selection_takes_complete_runs_evaluated_as_the_newest_was():
    runs = [created_at(fake_run(f"r{i}", f"m{i}", dataset="bbc-news"), i) for i in range(8)]
    runs += [created_at(fake_run("s", "m", dataset="sst2"), 9), created_at(fake_run("u", "m", "failed"), 30)]
    assert [run.name for run in analysis.default_selection(runs, limit=3)] == ["s"]  # the newest complete run's data
    runs[-2].record = {}  # no time recorded: oldest
    assert [run.name for run in analysis.default_selection(runs, limit=6)] == [f"r{i}" for i in range(2, 8)]
    runs[3].config = TrainConfig(method="fine-tuning", model="tiny-bert")  # same data, another model
    runs[5].config = TrainConfig(method="fine-tuning", limit=40)  # same data, another split (a limit)
    assert [run.name for run in analysis.default_selection(runs, limit=5)] == [f"r{i}" for i in (1, 2, 4, 6, 7)]
    assert analysis.default_selection([fake_run("u", "m", "failed")]) != []
    assert analysis.default_selection([]) == []


# ---------------------------------------------------------------- figures


def test_reliability_figure_draws_the_table(run):
    table = analysis.reliability_table(run, 2, 8, "mass")
    fig = figures.reliability_figure(table)
    accuracy, over, under, reference, count = fig.data
    assert [t.name for t in fig.data] == [
        "accuracy",
        figures.OVER_NAME,
        figures.UNDER_NAME,
        "perfect calibration",
        "count",
    ]
    assert len(accuracy.y) == len(count.y) == 8
    assert nan_equal(accuracy.y, table["accuracy"]) and list(count.y) == list(table["count"])
    # a gap bar runs between the accuracy and the mean confidence, whichever is higher
    for i, (conf, acc) in enumerate(zip(table["confidence"], table["accuracy"])):
        gap = over if conf > acc else under
        if conf != acc:
            assert sorted([gap.base[i], gap.base[i] + gap.y[i]]) == pytest.approx(sorted([conf, acc]), abs=1e-12)
    assert list(reference.x) == list(range(8)) and nan_equal(reference.y, table["confidence"])  # equal mass: by rank
    assert "N = 120" in fig.layout.title.text and "8 equal-mass bins" in fig.layout.title.text


def test_ece_figure_has_a_band_and_a_line_per_run(runs):
    curves = pd.concat([analysis.ece_over_epochs(run, 10, "width", 20, name=f"r{i}") for i, run in enumerate(runs[:2])])
    fig = figures.ece_over_epochs_figure(curves, "width", 10, "95% bootstrap over 20 resamples", epoch=1)
    assert len(fig.data) == 6
    _, low, line = fig.data[:3]
    assert low.fill == "tonexty" and line.name == "r0"
    assert list(line.y) == list(curves.loc[curves["run"] == "r0", "ece"])
    assert "10 equal-width bins" in fig.layout.title.text and "20 resamples" in fig.layout.title.text


def test_recalibration_figure_shows_before_and_after(run):
    result = analysis.recalibration_bins(run, "temperature", 10, "width")
    fig = figures.recalibration_figure(result)
    assert len(fig.data) == 10
    assert nan_equal(fig.data[0].y, result.before_bins["accuracy"])
    assert nan_equal(fig.data[5].y, result.after_bins["accuracy"])
    assert f"T = {result.temperature:.3g}" in fig.layout.annotations[1].text


# ---------------------------------------------------------------- the page


def charts_by_kind(at) -> dict[str, list[dict]]:
    """The page's plotly charts by kind, the start of their widget key: "reliability" (one per run, keyed
    reliability-<run>), "smooth", "ece", "differences", "recalibration"; each as its JSON spec with its config."""
    found = {}
    for key, spec in charts(at).items():
        found.setdefault(key.split("-")[0], []).append(spec)
    return found


def table(at, first_column: str) -> pd.DataFrame:
    """The page's table whose first column is `first_column`: "unit" (the comparison summary), "pair"; its
    columns named by metric again (the page heads them "Smooth ECE", …)."""
    names = {estimator.heading: name for name, estimator in estimators.ESTIMATORS.items()}
    frames = [element.value for element in [*at.table, *at.dataframe]]
    return next(frame for frame in frames if frame.columns[0] == first_column).rename(columns=names)


def bars(spec: dict, name: str) -> list[dict]:
    return [trace for trace in spec["data"] if trace.get("name") == name]


@pytest.fixture(autouse=True)
def few_resamples(monkeypatch):
    """Pages bootstrap every estimator of every run (smooth ECE costs ~7 ms a resample): 20 keep tests quick."""
    monkeypatch.setattr(group_stats, "RESAMPLE_CHOICES", (20, 1000))
    return 20


@pytest.fixture
def page(app_store):
    return AppTest.from_file(PAGE, default_timeout=300).run()


def test_page_draws_every_section_without_errors(page):
    assert not page.exception and not page.error
    assert page.radio(key="calibration_show").value == "single runs"  # one seed per setting in the smoke store
    found = charts_by_kind(page)
    assert len(found["reliability"]) == 6  # the default: at most six complete runs
    assert len(found["ece"]) == len(found["smooth"]) == len(found["recalibration"]) == len(found["differences"]) == 1
    assert len(found["ece"][0]["data"]) == 18  # band edges and line per run
    assert len([t for t in found["smooth"][0]["data"] if t["name"].endswith(")")]) == 6  # a curve per run
    for spec in found["reliability"]:
        assert len(bars(spec, "accuracy")[0]["x"]) == 10 and "N = 120" in spec["layout"]["title"]["text"]
    assert any("10 equal-width bins" in caption.value for caption in page.caption)
    summary = table(page, "unit")
    assert len(summary) == 6 and list(summary.columns) == ["unit", "seeds", *estimators.DEFAULT_METRICS]
    assert len(table(page, "pair")) == 15


def test_every_chart_downloads_as_svg_or_png_with_its_numbers_as_csv(page):
    specs = list(charts(page).values())
    assert {spec["config"]["toImageButtonOptions"]["format"] for spec in specs} == {"svg"}
    csv_buttons = [b for b in page.get("download_button") if b.proto.label == "CSV"]
    assert len(csv_buttons) == len(specs)
    page.sidebar.radio(key="chart_image_format").set_value("png").run()
    specs = list(charts(page).values())
    assert {spec["config"]["toImageButtonOptions"]["format"] for spec in specs} == {"png"}
    assert all(spec["config"]["toImageButtonOptions"]["scale"] == 2 for spec in specs)


def test_page_follows_its_widgets(page):
    page.slider(key="calibration_bins").set_value(15).run()
    assert not page.exception
    for spec in charts_by_kind(page)["reliability"]:
        assert len(bars(spec, "accuracy")[0]["x"]) == 15

    page.radio(key="calibration_scheme").set_value("mass").run()
    assert not page.exception
    for spec in charts_by_kind(page)["reliability"]:
        assert sorted(set(bars(spec, "count")[0]["y"])) == [8]  # 120 examples in 15 equal-mass bins
    assert "equal-mass" in charts_by_kind(page)["ece"][0]["layout"]["title"]["text"]

    page.slider(key="calibration_epoch").set_value(1).run()
    assert all(" · epoch 1<br>" in spec["layout"]["title"]["text"] for spec in charts_by_kind(page)["reliability"])

    units = page.multiselect(key="calibration_units_False")
    units.set_value(units.value[:2]).run()
    assert not page.exception and not page.error
    assert len(charts_by_kind(page)["reliability"]) == 2 and len(charts_by_kind(page)["ece"][0]["data"]) == 6
    assert len(table(page, "unit")) == 2


def test_no_metric_chosen_means_the_default_metrics(page):
    page.multiselect(key="calibration_metrics").set_value([]).run()
    assert not page.exception and not page.error
    assert list(table(page, "unit").columns) == ["unit", "seeds", *estimators.DEFAULT_METRICS]


def test_the_comparison_table_of_single_runs_shows_each_runs_bootstrap_interval(page, few_resamples):
    summary = table(page, "unit")
    runs = {analysis.display_names(list_runs())[run.name]: run for run in list_runs()}
    for _, row in summary.iterrows():
        probs, labels = runs[row["unit"]].predictions("test")
        expected = estimators.estimate_all(probs, labels, 10, "width", few_resamples, 0.95, 0, ["ece"])["ece"]
        assert row["ece"] == f"{expected.value:.4f} [{expected.low:.4f}, {expected.high:.4f}]"


def test_page_on_an_empty_store_says_so(empty_store):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception and not at.error
    assert at.info and "No runs" in at.info[0].value
    assert not charts(at)


@pytest.fixture
def unfinished_store(smoke_store, tmp_path, monkeypatch):
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


def test_page_shows_unfinished_runs_and_skips_corrupt_ones(unfinished_store):
    _, killed = unfinished_store
    assert killed.status == "incomplete"
    with pytest.raises(RunError):
        analysis.recalibration_bins(killed, "temperature")

    at = AppTest.from_file(PAGE, default_timeout=300).run()
    assert not at.exception and not at.error
    assert any(caption.value.startswith("Left out, unreadable: broken (") for caption in at.caption)
    at.multiselect(key="calibration_units_False").set_value(
        [run.name for run in list_runs() if run.status != "corrupt"]
    ).run()
    assert not at.exception and not at.error
    titles = [spec["layout"]["title"]["text"] for spec in charts_by_kind(at)["reliability"]]
    assert len(titles) == 2 and any("(incomplete) · epoch 1<br>" in title for title in titles)  # slider at 2
    assert len(charts_by_kind(at)["recalibration"]) == 1
    assert len(at.selectbox(key="recalibration_run").options) == 1  # only the finished run has test predictions
    # the comparison judges test predictions, which the killed run lacks: it is left out, and the page says so
    assert len(table(at, "unit")) == 1
    assert any(
        c.value.startswith(f"Left out: {killed.name} (seed 0, incomplete, 1 epoch): no test predictions")
        for c in at.caption
    )


# ---------------------------------------------------------------- uncertainty: each bin's interval, classwise views


def floats(values) -> np.ndarray:
    """A plotly JSON array as floats, NaN for null."""
    return np.array([np.nan if v is None else v for v in plotly_array(values)], dtype=float)


def whisker_ends(trace: dict) -> tuple[np.ndarray, np.ndarray]:
    """Where a drawn trace's whiskers end: y - arrayminus and y + array (NaN where it has none)."""
    y, bars = floats(trace["y"]), trace["error_y"]
    assert bars["symmetric"] is False
    return y - floats(bars["arrayminus"]), y + floats(bars["array"])


def assert_wilson_per_bin(low, high, outcomes, ids, n_bins):
    """The whiskers of bins 0 … n_bins - 1 are the Wilson intervals of their outcomes (NaN if empty)."""
    assert len(low) == len(high) == n_bins
    for b in range(n_bins):
        members = outcomes[ids == b]
        if members.size == 0:
            assert np.isnan(low[b]) and np.isnan(high[b])
        else:
            assert (low[b], high[b]) == pytest.approx(scipy_wilson(members.sum(), members.size), abs=1e-12)


@pytest.mark.parametrize(("scheme", "n_bins"), [("width", 10), ("mass", 15)])
def test_each_drawn_accuracy_bar_has_its_bins_wilson_interval(page, scheme, n_bins):
    if scheme != "width":  # the smoke runs' confidences all lie in one equal-width bin; equal mass spreads them
        page.radio(key="calibration_scheme").set_value(scheme).run()
        page.slider(key="calibration_bins").set_value(n_bins).run()
    assert not page.exception and not page.error
    runs = {run.name: run for run in list_runs()}
    drawn = {
        key.removeprefix("reliability-"): spec for key, spec in charts(page).items() if key.startswith("reliability")
    }
    assert len(drawn) == 6
    for name, spec in drawn.items():
        probs, labels = runs[name].predictions(2)  # the epoch slider starts at the last epoch
        confidence, correct = probs.max(axis=1), probs.argmax(axis=1) == labels
        low, high = whisker_ends(bars(spec, "accuracy")[0])
        assert_wilson_per_bin(low, high, correct, bins_by_hand(confidence, n_bins, scheme), n_bins)
    note = "Whiskers: 95% Wilson interval of each bin's accuracy (n_b predictions)."
    assert sum(note in caption.value for caption in page.caption) == 6


def test_the_classwise_view_draws_a_panel_per_class_with_each_bins_share_of_the_class(page):
    page.radio(key="calibration_diagram").set_value("classwise (one-vs-rest)").run()
    page.radio(key="calibration_scheme").set_value("mass").run()
    assert not page.exception and not page.error
    found = charts_by_kind(page)
    assert "reliability" not in found and len(found["classwise"]) == 6
    runs = {run.name: run for run in list_runs()}
    for key, spec in charts(page).items():
        if not key.startswith("classwise-"):
            continue
        run = runs[key.removeprefix("classwise-")]
        probs, labels = run.predictions(2)
        panel_titles = [annotation["text"].split("<br>")[0] for annotation in spec["layout"]["annotations"]]
        assert panel_titles == run.label_names and len(panel_titles) == probs.shape[1] == 5
        frequencies, counts = bars(spec, "frequency"), bars(spec, "count")
        assert len(frequencies) == len(counts) == 5
        for k, (line, count) in enumerate(zip(frequencies, counts)):
            ids = bins_by_hand(probs[:, k], 10, "mass")
            share = [np.mean(labels[ids == b] == k) for b in range(10)]
            assert floats(line["y"]) == pytest.approx(share, abs=1e-12)
            assert floats(count["y"]) == pytest.approx([np.sum(ids == b) for b in range(10)])
            assert_wilson_per_bin(*whisker_ends(line), labels == k, ids, 10)


# ---------------------------------------------------------------- groups of seeds


@pytest.fixture
def group_page(app_seeds_store):
    return AppTest.from_file(PAGE, default_timeout=300).run()


def test_a_store_with_seeds_opens_on_groups_with_their_mean_interval_and_pairs(group_page, app_seeds_store):
    at = group_page
    assert not at.exception and not at.error
    assert at.radio(key="calibration_show").value == "groups of seeds"
    summary = table(at, "unit")
    assert len(summary) == 6 and set(summary["seeds"]) == {"0,1"}
    groups = {g.label: g for g in group_runs(list_runs())}
    for _, row in summary.iterrows():
        values, draws = seed_values_and_draws(groups[row["unit"]].runs, "ece", n_resamples=20)
        low, high = np.quantile(two_level_by_hand(draws), [0.025, 0.975])
        assert row["ece"] == f"{values.mean():.4f} [{low:.4f}, {high:.4f}]" and low >= 0
    pairs = table(at, "pair")
    assert len(pairs) == 15
    a, b = "prefix-tuning", "prefix-propagation"
    row = pairs[pairs["pair"].isin([f"{a} − {b}", f"{b} − {a}"])].iloc[0]
    first, second = row["pair"].split(" − ")
    brier = [
        np.mean([calibration.brier(*r.predictions("test")) for r in groups[name].runs]) for name in (first, second)
    ]
    assert row["brier"].rstrip(" *") == f"{brier[0] - brier[1]:+.4f}"


def test_the_probability_of_improvement_cells_are_rliables_with_their_two_level_interval(group_page):
    from rliable.metrics import probability_of_improvement

    improvement = next(
        frame
        for frame in (e.value for e in group_page.table)
        if frame.columns[0] == "pair" and frame["pair"].str.contains(" vs ").all()
    )
    assert len(improvement) == 15
    groups = {g.label: g for g in group_runs(list_runs())}
    for pair, cell in zip(improvement["pair"], improvement["Smooth ECE"]):
        a, b = (seed_values_and_draws(groups[name].runs, "smooth_ece", n_resamples=20) for name in pair.split(" vs "))
        point = probability_of_improvement(-a[0][:, None], -b[0][:, None])  # lower smooth ECE is better
        rows = np.random.default_rng([0, 1, 0]).integers(0, 2, size=(20, 2))  # same seeds 0, 1: shared seed rows
        draws = [probability_of_improvement(-a[1][rows[r], r][:, None], -b[1][rows[r], r][:, None]) for r in range(20)]
        low, high = np.quantile(draws, [0.025, 0.975])
        assert cell == f"{point:.2f} [{low:.2f}, {high:.2f}]"
    assert any("rest on 120 test documents" in md.value for md in group_page.markdown)


def test_a_groups_ece_band_is_the_two_level_bootstrap_over_its_seeds(group_page):
    spec = charts_by_kind(group_page)["ece"][0]
    groups = {g.label: g for g in group_runs(list_runs())}
    group = groups["prefix-propagation"]
    traces = {trace["name"]: trace for trace in spec["data"]}
    for i, epoch in enumerate([1, 2]):
        values, draws = seed_values_and_draws(group.runs, "ece", which=epoch, n_resamples=20)
        low, high = np.quantile(two_level_by_hand(draws), [0.025, 0.975])
        assert traces["prefix-propagation"]["y"][i] == pytest.approx(values.mean(), abs=1e-12)
        assert traces["prefix-propagation 95% high"]["y"][i] == pytest.approx(high, abs=1e-12)
        assert traces["prefix-propagation 95% low"]["y"][i] == pytest.approx(low, abs=1e-12) and low >= 0
        for seed, run_value in zip(group.seeds, values):
            assert traces[f"prefix-propagation seed {seed}"]["y"][i] == pytest.approx(run_value, abs=1e-12)


# ---------------------------------------------------------------- recalibration and export


def test_recalibration_is_fitted_on_validation_and_judged_on_test_with_every_estimator(run):
    from peftviz.analysis.group_stats import Settings
    from peftviz.calibration import recalibration

    table = analysis.recalibration_estimates(run, Settings(n_resamples=40), ["ece", "nll"])
    assert list(table["map"].unique()) == list(analysis.RECALIBRATION_NAMES.values())
    val_probs, val_labels = run.predictions(run.best_epoch)
    test_probs, test_labels = run.predictions("test")
    for method, heading in analysis.RECALIBRATION_NAMES.items():
        probs = test_probs if method == "none" else recalibration.recalibrate(val_probs, val_labels, test_probs, method)
        rows = table[table["map"] == heading].set_index("metric")
        assert rows.loc["ece", "value"] == pytest.approx(calibration.ece(probs, test_labels), abs=1e-12)
        assert rows.loc["nll", "value"] == pytest.approx(calibration.nll(probs, test_labels), abs=1e-12)
    wide = analysis.recalibration_wide(table)
    assert list(wide["metric"]) == ["ECE (equal width)", "NLL"] and list(wide.columns)[1:] == list(
        table["map"].unique()
    )


def test_a_figures_csv_holds_every_drawn_point(run):
    from peftviz.figures.export import figure_table, toolbar_config

    curves = analysis.ece_over_epochs(run, 10, "width", 20, name="r")
    fig = figures.ece_over_epochs_figure(curves, "width", 10, "band", epoch=1)
    rows = figure_table(fig)
    line = rows[rows["trace"] == "r"]
    assert list(line["x"]) == [1, 2] and np.allclose(line["y"].astype(float), curves["ece"])
    assert set(rows["trace"]) == {"r", "r 95% high", "r 95% low"}
    assert toolbar_config("ECE per epoch", "png")["toImageButtonOptions"] == {
        "format": "png",
        "filename": "ece-per-epoch",
        "scale": 2,
    }
    with pytest.raises(ValueError):
        toolbar_config("x", "jpeg")


FIGURE_BUILDERS = (
    "reliability_figure",
    "smooth_reliability_figure",
    "ece_over_epochs_figure",
    "differences_figure",
    "recalibration_figure",
)


def test_a_second_reader_draws_the_first_readers_figures_and_tables_without_building_them(
    smoke_store, tmp_path, monkeypatch
):
    """appkit.shared: what one session built, the next session (another reader) draws as it is; a
    widget change builds only what depends on it; a run that changes is drawn anew."""
    store = private_store(smoke_store, tmp_path, monkeypatch)
    built = count_calls(monkeypatch, figures, *FIGURE_BUILDERS)
    stats_built = count_calls(monkeypatch, group_stats, "stats_of_estimates")
    first = AppTest.from_file(PAGE, default_timeout=300).run()
    assert not first.exception and not first.error
    once = {
        "reliability_figure": 6,
        "smooth_reliability_figure": 1,
        "ece_over_epochs_figure": 1,
        "differences_figure": 1,
        "recalibration_figure": 1,
    }
    assert built == once and stats_built == {"stats_of_estimates": 1}

    second = AppTest.from_file(PAGE, default_timeout=300).run()
    assert not second.exception and not second.error
    assert built == once and stats_built == {"stats_of_estimates": 1}  # nothing built again
    assert charts(second) == charts(first)  # the same figures, unchanged by the first session's drawing
    assert table(second, "unit").equals(table(first, "unit")) and table(second, "pair").equals(table(first, "pair"))

    second.slider(key="calibration_bins").set_value(15).run()  # binned diagrams, binned ECE, the comparison
    assert not second.exception and not second.error
    assert built["reliability_figure"] == 12 and built["ece_over_epochs_figure"] == 2
    assert stats_built == {"stats_of_estimates": 2}
    assert built["smooth_reliability_figure"] == 1  # no bins: not built again

    run = store / first.multiselect(key="calibration_units_False").value[0]  # a run the page draws
    later = (run / "metrics.jsonl").stat().st_mtime + 5
    os.utime(run / "metrics.jsonl", (later, later))  # as when a run finishes an epoch
    third = AppTest.from_file(PAGE, default_timeout=300).run()
    assert not third.exception and not third.error
    assert built["smooth_reliability_figure"] == 2 and built["ece_over_epochs_figure"] == 3
    assert stats_built == {"stats_of_estimates": 3}
