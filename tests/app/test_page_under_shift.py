"""The "Under shift" page: each method on its test split made noisy, the numbers of `report --shift` at the same
settings, its figures drawn from them, one document's noise shown, and what it cannot evaluate said on the page.

On the smoke store (tiny trained models) restricted to one family at severities 0 and 1, so that the models run
on one shifted set each; on the store of runs recorded from other loops (predictions, no parameters: nothing to run
on shifted text) and on an empty store."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz.analysis import calibration, group_stats
from peftviz.analysis.shift.attention import has_prefix
from peftviz.analysis.shift.corruptions import corrupt_text
from peftviz.analysis.shift.shifts import Shift, corruption_grid, shifted_texts
from peftviz.analysis.shift.table import shift_table, wide_table
from peftviz.calibration.estimators import ESTIMATORS
from peftviz.figures.shift import severity_rows
from peftviz.store.runs import Group, list_runs
from tests.app.conftest import PAGES
from tests.support.fake_runs import write_run
from tests.support.helpers import charts, plotly_array

PAGE = str(PAGES / "9_Under_shift.py")
FAMILIES, SEVERITIES = ["typo"], [0, 1]
N_RESAMPLES = 200  # the page's default
TABS = ["Accuracy", "ECE (equal width)", "NLL", "AURC", "90% coverage"]


def open_shift_page(families=FAMILIES, severities=SEVERITIES) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=300)
    at.session_state["shift_families"] = list(families)
    at.session_state["shift_severities"] = list(severities)
    return at.run()


@pytest.fixture(scope="module")
def page(smoke_store):
    """The page on the smoke store at one family and two severities, run once for the module's read-only tests."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PEFTVIZ_RUNS", str(smoke_store))
        yield open_shift_page()


def default_units(store: Path) -> list[Group]:
    """The single runs the page opens on (`appkit.choose_units`: the newest six of one evaluation)."""
    usable = [run for run in list_runs(store) if run.status != "corrupt" and run.metrics]
    return [Group(run.name, [run]) for run in calibration.default_selection(usable, 6)]


@pytest.fixture(scope="module")
def result(smoke_store):
    settings = group_stats.Settings(n_resamples=N_RESAMPLES)
    return shift_table(default_units(smoke_store), corruption_grid(FAMILIES, SEVERITIES), settings, alpha=0.1)


def test_the_tabs_hold_the_cells_of_report_shift_at_the_same_settings(page, result):
    assert not page.exception and not page.error
    assert [tab.label for tab in page.tabs] == TABS
    wide = wide_table(result)
    for tab in page.tabs:
        shown = tab.table[0].value
        assert list(shown.columns) == ["method", "seeds", "0 (clean)", "1 (5% of words)"]
        for severity, column in ((0, "0 (clean)"), (1, "1 (5% of words)")):
            expected = wide[wide["severity"] == severity].set_index("method")[tab.label]
            assert dict(zip(shown["method"], shown[column])) == expected.to_dict()
    captions = " ".join(caption.value for caption in page.caption)
    assert "`report --shift --shift-families typo --shift-severities 0,1 --resamples 200`" in captions
    assert "differences between methods significant at 5% after Holm" in captions


def test_the_figures_draw_the_tables_numbers(page, result, smoke_store):
    drawn = charts(page)
    assert list(drawn) == ["shift-ece", "shift-accuracy", "shift-coverage", "shift-attention"]  # ECE, accuracy first
    methods = list(dict.fromkeys(result.table["method"]))
    for metric in ("ece", "accuracy"):
        spec, rows = drawn[f"shift-{metric}"], severity_rows(result.table, metric)
        lines = [trace for trace in spec["data"] if trace.get("mode") == "lines+markers"]
        assert [trace["name"] for trace in lines] == methods
        for trace in lines:
            mine = rows[rows["method"] == trace["name"]]
            assert list(plotly_array(trace["x"])) == SEVERITIES
            assert plotly_array(trace["y"]) == pytest.approx(mine["mean"].to_numpy(), abs=1e-12)
        assert spec["layout"]["yaxis"]["title"]["text"] == ESTIMATORS[metric].heading
        assert list(spec["layout"]["xaxis"]["tickvals"]) == SEVERITIES
    prefix = next(unit for unit in default_units(smoke_store) if has_prefix(unit.runs[0]))
    n_test = len(shifted_texts(prefix.runs[0], Shift("typo", 0))[1])
    attention = drawn["shift-attention"]
    assert sum(len(plotly_array(trace["x"])) for trace in attention["data"]) == len(SEVERITIES) * n_test
    assert prefix.label in attention["layout"]["title"]["text"]


def test_one_test_document_is_shown_at_severities_0_1_3_and_5(page, smoke_store):
    example = next(table.value for table in page.table if "severity" in table.value.columns)
    assert list(example["severity"]) == ["0 (clean)", "1 (5% of words)", "3 (20% of words)", "5 (50% of words)"]
    run = default_units(smoke_store)[0].runs[0]
    text = shifted_texts(run, Shift("typo", 0))[0][0]
    text_column = example.columns[-1]
    for shown, severity in zip(example[text_column], (0, 1, 3, 5)):
        words = corrupt_text(text, "typo", severity, 0, 0).split()
        assert shown.removesuffix(" …") == " ".join(words[:60])
    assert example[text_column].nunique() == 4  # each severity changes the text further


def test_nll_and_aurc_are_drawn_on_request(smoke_store, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_RUNS", str(smoke_store))
    at = open_shift_page()
    at.multiselect(key="shift_metrics").set_value(["nll", "aurc"]).run()
    assert not at.exception and not at.error
    assert list(charts(at)) == ["shift-nll", "shift-aurc", "shift-coverage", "shift-attention"]


@pytest.mark.parametrize("families, severities", [([], [0, 1]), (["typo"], [])])
def test_no_family_or_no_severity_says_what_to_pick(app_store, families, severities):
    at = open_shift_page(families, severities)
    assert not at.exception and not at.error
    assert [info.value for info in at.info] == ["Pick at least one corruption family and one severity."]
    assert not charts(at)


def test_runs_recorded_from_other_loops_are_named_in_an_error_on_the_page(recorded_store, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_RUNS", str(recorded_store))
    at = open_shift_page()
    assert not at.exception
    (error,) = [error.value for error in at.error]
    assert error.startswith("no run to evaluate under shift") and "no parameters to run on shifted text" in error
    assert all(run.name in error for run in list_runs(recorded_store))
    assert not charts(at) and not at.tabs


def test_an_empty_store_says_what_to_train(empty_store):
    at = open_shift_page()
    assert not at.exception and not at.error
    assert "No runs with a finished epoch yet" in at.info[0].value


@pytest.fixture
def fake_store(tmp_path, monkeypatch) -> Path:
    """Fake runs (`tests/support/fake_runs.py`): made-up predictions, parameters that fit no model."""
    store = tmp_path / "runs"
    for seed in (0, 1):
        write_run(store, "lora", seed)
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    return store


def test_models_that_cannot_run_on_shifted_text_are_named_in_an_error_on_the_page(fake_store):
    at = open_shift_page()
    assert not at.exception
    (error,) = [error.value for error in at.error]
    assert error.startswith("no run could be evaluated under shift: run ")
    assert "params.safetensors lacks" in error and all(run.name in error for run in list_runs(fake_store))


def test_severity_0_alone_reads_the_stored_predictions_without_running_a_model(fake_store):
    at = open_shift_page(severities=[0])
    assert not at.exception and not at.error
    assert [tab.label for tab in at.tabs] == TABS
    assert list(at.tabs[0].table[0].value.columns) == ["method", "seeds", "0 (clean)"]
    assert list(charts(at)) == ["shift-ece", "shift-accuracy", "shift-coverage"]
    assert any(caption.value.startswith("Not drawn: no chosen method has prefix keys") for caption in at.caption)
