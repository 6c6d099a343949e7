"""The Confidence page's conformal section on the store with two seeds per method: the table shows
`conformal_summary` of every group (whose numbers tests/calibration/test_conformal.py checks against MAPIE), the
chart the over-epochs table, and the widgets change both."""

import pytest

from peftviz.analysis import conformal as analysis
from peftviz.store.runs import group_runs, list_runs
from tests.support.helpers import charts, plotly_array

N_RESAMPLES = 200  # the page's default
COLUMNS = ["unit", "seeds", "test coverage", "mean set size", "calibrated on", "judged on"]


def conformal_table(at):
    return next(element.value for element in at.table if "test coverage" in element.value.columns).set_index("unit")


def test_the_section_shows_every_group_at_alpha_point_one_without_errors(confidence_page, seeds_store):
    assert not confidence_page.exception and not confidence_page.error
    assert (
        confidence_page.selectbox(key="conformal_alpha").value == 0.1
        and confidence_page.radio(key="conformal_score").value == "lac"
    )
    table = conformal_table(confidence_page)
    assert list(table.reset_index().columns) == COLUMNS and len(table) == 6 and set(table["seeds"]) == {"0,1"}
    group = next(g for g in group_runs(list_runs(seeds_store)) if g.label == "prefix-propagation")
    row = analysis.conformal_summary(group, 0.1, "lac", N_RESAMPLES)
    assert table.loc["prefix-propagation", "test coverage"] == analysis.summary_cells(row)["test coverage"].iloc[0]
    assert table.loc["prefix-propagation", "mean set size"] == analysis.summary_cells(row)["mean set size"].iloc[0]


def test_the_chart_draws_the_over_epochs_table_in_two_panels(confidence_page, seeds_store):
    spec = charts(confidence_page)["conformal-epochs"]
    assert "xaxis2" in spec["layout"] and "xaxis3" not in spec["layout"]
    traces = {(trace["name"], trace.get("xaxis", "x")): trace for trace in spec["data"]}
    group = next(g for g in group_runs(list_runs(seeds_store)) if g.label == "prefix-tuning")
    want = analysis.conformal_over_epochs(group, 0.1, "lac", N_RESAMPLES)
    assert plotly_array(traces[("prefix-tuning", "x")]["y"]).tolist() == pytest.approx(want["coverage"].tolist())
    assert plotly_array(traces[("prefix-tuning", "x2")]["y"]).tolist() == pytest.approx(want["set_size"].tolist())
    assert any(shape.get("y0") == pytest.approx(0.9) for shape in spec["layout"]["shapes"])


def test_alpha_and_score_change_the_numbers(confidence_page, own_confidence_page):
    before = conformal_table(confidence_page)
    own_confidence_page.selectbox(key="conformal_alpha").set_value(0.2)
    own_confidence_page.radio(key="conformal_score").set_value("aps").run()
    assert not own_confidence_page.exception and not own_confidence_page.error
    after = conformal_table(own_confidence_page)
    assert len(after) == 6 and not after["test coverage"].equals(before["test coverage"])
    spec = charts(own_confidence_page)["conformal-epochs"]
    assert "APS" in spec["layout"]["title"]["text"] and "α = 0.2" in spec["layout"]["title"]["text"]
