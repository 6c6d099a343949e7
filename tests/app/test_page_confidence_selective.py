"""The Confidence page's selective-prediction section on the store with two seeds per method: the table of
AURC, AUGRC and accuracy at 80% / 90% coverage equals the plain loops' values with their two-level interval,
and the risk–coverage chart draws each group's mean curve."""

import numpy as np
import pytest

from peftviz.calibration import selective, stats
from peftviz.store.runs import group_runs, list_runs
from tests.support import selective_reference as ref
from tests.support.helpers import charts, plotly_array, two_level_by_hand

HEADINGS = {
    "AURC": "aurc",
    "AUGRC": "augrc",
    "Accuracy at 80% coverage": "accuracy_at_80",
    "Accuracy at 90% coverage": "accuracy_at_90",
}
N_RESAMPLES = 200  # the page's default


def selective_table(at):
    return next(element.value for element in at.table if set(HEADINGS) <= set(element.value.columns))


def test_the_section_shows_the_four_metrics_per_group_without_errors(confidence_page):
    assert not confidence_page.exception and not confidence_page.error
    assert confidence_page.radio(key="selective_split").value == "test (best epoch)"
    table = selective_table(confidence_page)
    assert list(table.columns) == ["unit", "seeds", *HEADINGS] and len(table) == 6
    assert set(table["seeds"]) == {"0,1"}


def test_a_groups_cells_are_the_plain_loops_with_the_two_level_interval(confidence_page, seeds_store):
    table = selective_table(confidence_page).set_index("unit")
    group = next(g for g in group_runs(list_runs(seeds_store)) if g.label == "prefix-propagation")
    predictions = [run.predictions("test") for run in group.runs]
    rows = stats.resample_indices(len(predictions[0][1]), N_RESAMPLES, seed=0)
    for heading, metric in HEADINGS.items():
        values = np.array([ref.selective_metrics(p, y)[metric] for p, y in predictions])
        draws = np.array([[ref.selective_metrics(p[row], y[row])[metric] for row in rows] for p, y in predictions])
        low, high = stats.interval_around(values.mean(), two_level_by_hand(draws))
        assert table.loc["prefix-propagation", heading] == f"{values.mean():.4f} [{low:.4f}, {high:.4f}]", heading


def test_the_risk_coverage_chart_draws_each_groups_mean_risk(confidence_page, seeds_store):
    spec = charts(confidence_page)["risk-coverage"]
    traces = {trace["name"]: trace for trace in spec["data"]}
    groups = group_runs(list_runs(seeds_store))
    assert {g.label for g in groups} <= set(traces)
    group = next(g for g in groups if g.label == "prefix-tuning")
    coverage = plotly_array(traces["prefix-tuning"]["x"])
    assert np.allclose(coverage, selective.coverage_grid(), rtol=0, atol=1e-12)
    risk = plotly_array(traces["prefix-tuning"]["y"])
    for g in (0, 49, 99):
        per_run = []
        for run in group.runs:
            k = ref.answered(round(float(coverage[g]), 2), len(run.predictions("test")[1]))
            per_run.append(ref.expected_errors(*ref.confidences_and_errors(*run.predictions("test")))[k - 1] / k)
        assert risk[g] == pytest.approx(np.mean(per_run), abs=1e-12)
    assert sorted({shape["x0"] for shape in spec["layout"]["shapes"]}) == [0.8, 0.9]


def test_judged_on_validation_the_section_still_draws(own_confidence_page):
    own_confidence_page.radio(key="selective_split").set_value("validation (last epoch)").run()
    assert not own_confidence_page.exception and not own_confidence_page.error
    assert len(selective_table(own_confidence_page)) == 6
