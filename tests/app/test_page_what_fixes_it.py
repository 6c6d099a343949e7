"""The "What fixes it" page: each method as trained and after each uncertainty method, the numbers of
`report --uncertainty` at the same settings, what it leaves out named in a line, and its two figures.

On fake stores (`tests/support/fake_runs.py`: made-up predictions, parameters that fit no model, so a method that
runs the model leaves every run out with a line, and the plain pass is "not measured"), and on the store of runs
recorded from other training loops (predictions, no parameters)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from peftviz.analysis import group_stats
from peftviz.analysis.uncertainty import MAX_PASSES, comparison
from peftviz.calibration.estimators import ESTIMATORS
from peftviz.cli import main
from peftviz.store.runs import list_runs
from tests.app.conftest import PAGES
from tests.support.fake_runs import write_run
from tests.support.helpers import charts, plotly_array

PAGE = str(PAGES / "8_What_fixes_it.py")
N_RESAMPLES = 200  # the page's default
# a member computed afresh holds the float64 it was computed in, one read back from its cache the float32 written
# (`uncertainty.cache.cached_member`): the page's first computation and a later one differ by ~1e-9
FRESH_OR_CACHED = 1e-6


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """lora and prefix-tuning at seeds 0, 1 and 2, complete after 2 epochs, on one data split."""
    root = tmp_path_factory.mktemp("what-fixes-it") / "runs"
    for method in ("lora", "prefix-tuning"):
        for seed in (0, 1, 2):
            write_run(root, method, seed)
    return root


@pytest.fixture(scope="module")
def page(store):
    """The page on the store at its defaults (temperature and ensembles at 3 passes), run once for the module's
    read-only tests."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PEFTVIZ_RUNS", str(store))
        yield AppTest.from_file(PAGE, default_timeout=300).run()


@pytest.fixture
def own_page(store, monkeypatch):
    """The page on the same store for one test alone, which may change its widgets."""
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    return AppTest.from_file(PAGE, default_timeout=300).run()


def shown_table(at) -> pd.DataFrame:
    """The comparison's wide table as the page shows it, in three tabs (each metric, Δ, cost): put back together."""
    assert [tab.label for tab in at.tabs] == ["Each metric", "Δ to the plain method", "Cost"]
    values, differences, cost = (tab.table[0].value for tab in at.tabs)
    keys = ["method", "uncertainty"]
    wide = values.merge(differences, on=keys, how="left").merge(cost, on=keys).fillna("")
    return wide[
        values.columns.tolist() + [c for c in differences if c not in keys] + [c for c in cost if c not in keys]
    ]


def left_out(at) -> list[str]:
    return [caption.value for caption in at.caption if caption.value.startswith("Left out")]


def result_of(store: Path, names=("temperature", "ensemble"), passes: int = 3) -> comparison.UncertaintyResult:
    units = group_stats.choose(list_runs(store)).units
    settings = group_stats.Settings(n_resamples=N_RESAMPLES)
    return comparison.compare_uncertainty(units, comparison.equal_budget(names, passes), settings)


def test_the_page_opens_on_temperature_and_ensembles_without_errors(page):
    assert not page.exception and not page.error
    assert page.multiselect(key="fixes_methods").value == ["temperature", "ensemble"]
    assert page.number_input(key="fixes_passes").value == 3
    assert set(charts(page)) == {"what-fixes-it", "ensemble-size"}
    table = shown_table(page)
    assert list(table["uncertainty"]) == ["plain", "temperature", "ensemble of 3 (probabilities)"] * 2
    assert set(table["s / 1,000 docs"]) == {"not measured"}  # fake parameters: no model to time


def test_the_tables_are_the_comparisons_in_three_tabs(page, store):
    expected = comparison.wide_table(result_of(store))
    shown = shown_table(page)
    assert sorted(shown.columns) == sorted(expected.columns)
    pd.testing.assert_frame_equal(shown[expected.columns].reset_index(drop=True), expected)
    differences = page.tabs[1].table[0].value
    assert "plain" not in set(differences["uncertainty"])  # nothing to compare the plain method with


def test_the_table_holds_the_cells_of_report_at_the_same_settings(page, store, tmp_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        flags = ["--uncertainty", "temperature,ensemble", "--passes", "3", "--resamples", str(N_RESAMPLES)]
        assert main(["report", "--runs-dir", str(store), "--csv", str(tmp_path / "r"), *flags]) == 0
    printed = pd.read_csv(tmp_path / "r-uncertainty.csv")
    table = shown_table(page).set_index(["method", "uncertainty"])
    assert len(printed) == len(table) * len(comparison.METRICS)
    for row in printed.itertuples():
        cell = table.loc[(row.method, row.uncertainty), ESTIMATORS[row.metric].heading]
        assert cell == f"{row.mean:.4f} [{row.low:.4f}, {row.high:.4f}]"
        if row.uncertainty != "plain":
            delta = table.loc[(row.method, row.uncertainty), f"Δ {ESTIMATORS[row.metric].heading}"]
            assert delta.startswith(f"{row.difference:+.4f} [{row.difference_low:+.4f}, {row.difference_high:+.4f}]")
            assert delta.endswith(" *") == bool(row.significant)
    assert "`report --uncertainty temperature,ensemble --passes 3 --resamples 200`" in " ".join(
        caption.value for caption in page.caption
    )


def test_the_forest_draws_each_rows_mean_and_interval(page, store):
    rows = result_of(store).table.query("metric == 'ece'")
    spec = charts(page)["what-fixes-it"]
    drawn = {}
    for trace in spec["data"]:
        x, up, down = (plotly_array(v) for v in (trace["x"], trace["error_x"]["array"], trace["error_x"]["arrayminus"]))
        for label, mean, high, low in zip(trace["y"], x, up, down):
            drawn[(trace["name"].split(" · ")[0], label)] = (mean, mean - low, mean + high)
    assert len(drawn) == len(rows) == 6
    for row in rows.itertuples():
        assert drawn[(row.method, row.uncertainty)] == pytest.approx((row.mean, row.low, row.high), abs=FRESH_OR_CACHED)
    assert spec["layout"]["xaxis"]["title"]["text"] == ESTIMATORS["ece"].heading


def test_another_metric_redraws_the_forest_on_it(own_page, store):
    own_page.selectbox(key="fixes_metric").set_value("nll").run()
    assert not own_page.exception and not own_page.error
    spec = charts(own_page)["what-fixes-it"]
    nll = result_of(store).table.query("metric == 'nll'")["mean"].to_numpy()
    drawn = np.concatenate([plotly_array(trace["x"]) for trace in spec["data"]])
    assert sorted(drawn) == pytest.approx(sorted(nll), abs=FRESH_OR_CACHED)
    assert spec["layout"]["xaxis"]["title"]["text"] == "NLL"


def test_the_ensemble_size_figure_draws_k_1_to_3_per_group(page, store):
    spec = charts(page)["ensemble-size"]
    units = group_stats.choose(list_runs(store)).units
    settings = group_stats.Settings(n_resamples=N_RESAMPLES)
    for trace, unit in zip(spec["data"], units, strict=True):
        curve = comparison.ensemble_curve(unit, settings, "ece")
        assert list(plotly_array(trace["x"])) == [1, 2, 3]
        assert plotly_array(trace["y"]) == pytest.approx(curve["mean"].to_numpy(), abs=1e-12)
    assert spec["layout"]["xaxis"]["dtick"] == 1


def test_the_passes_are_bounded_and_a_budget_of_two_names_the_seed_its_ensembles_leave_out(own_page):
    passes = own_page.number_input(key="fixes_passes")
    assert (passes.min, passes.max) == (1, MAX_PASSES)
    passes.set_value(2).run()
    assert not own_page.exception and not own_page.error
    assert "ensemble of 2 (probabilities)" in set(shown_table(own_page)["uncertainty"])
    lines = left_out(own_page)
    assert len(lines) == 2 and all("leaves out seed 2: ensembles are disjoint" in line for line in lines)


def test_single_runs_leave_the_ensemble_out_in_a_line_not_an_error(own_page):
    own_page.radio(key="fixes_show").set_value("single runs").run()
    assert not own_page.exception and not own_page.error
    table = shown_table(own_page)
    assert set(table["uncertainty"]) == {"plain", "temperature"}
    lines = left_out(own_page)
    assert any("an ensemble of 3 needs 3 seeds, the group has 1" in line for line in lines)
    assert any("choose one unit per method" in line for line in lines)  # two runs of one method: one is compared
    assert list(charts(own_page)) == ["what-fixes-it"]
    assert any("No chosen group has two seeds or more" in caption.value for caption in own_page.caption)


def test_mc_dropout_on_fake_parameters_is_left_out_in_a_line(own_page):
    own_page.multiselect(key="fixes_methods").set_value(["temperature", "mc-dropout"]).run()
    assert not own_page.exception and not own_page.error
    lines = [line for line in left_out(own_page) if line.startswith("Left out: mc-dropout, T = 3")]
    assert len(lines) == 2 and all("params.safetensors lacks" in line for line in lines)
    assert set(shown_table(own_page)["uncertainty"]) == {"plain", "temperature"}


def test_no_uncertainty_method_chosen_says_so(own_page):
    own_page.multiselect(key="fixes_methods").set_value([]).run()
    assert not own_page.exception and not own_page.error
    assert [info.value for info in own_page.info] == ["Pick at least one uncertainty method."]


def test_recorded_runs_are_named_where_mc_dropout_needs_parameters(recorded_store, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_RUNS", str(recorded_store))
    at = AppTest.from_file(PAGE, default_timeout=300).run()
    at.multiselect(key="fixes_methods").set_value(["temperature", "mc-dropout"]).run()
    assert not at.exception and not at.error
    lines = [line for line in left_out(at) if "mc-dropout" in line]
    assert lines and all("no parameters to run (recorded runs)" in line for line in lines)
    named = " ".join(lines)
    assert all(run.name in named for run in list_runs(recorded_store))
    assert set(shown_table(at)["uncertainty"]) == {"plain", "temperature"}
