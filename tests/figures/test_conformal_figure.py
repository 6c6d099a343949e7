"""The conformal figure: two panels (coverage with the 1 − α line, mean set size), per unit a line with whiskers."""

import numpy as np
import pandas as pd
import pytest

from peftviz.analysis.conformal import EPOCH_COLUMNS
from peftviz.figures.conformal import conformal_epochs_figure
from peftviz.figures.palette import Series, color


@pytest.fixture
def table() -> pd.DataFrame:
    rows = []
    for name, shift in (("lora", 0.0), ("prefix-tuning", 0.03)):
        for epoch in (1, 2, 3):
            coverage, size = 0.86 + shift + 0.01 * epoch, 2.4 - 0.3 * epoch + shift
            rows.append(
                {
                    "run": name,
                    "epoch": epoch,
                    "score": "aps",
                    "alpha": 0.1,
                    "coverage": coverage,
                    "coverage_low": coverage - 0.04,
                    "coverage_high": min(coverage + 0.04, 1.0),
                    "set_size": size,
                    "set_size_low": size - 0.2,
                    "set_size_high": size + 0.25,
                    "n_calibration": 100,
                    "n_evaluated": 100,
                    "n_seeds": 2,
                    "seeds": "0,1",
                }
            )
    return pd.DataFrame(rows, columns=EPOCH_COLUMNS)


def traces(fig, axis: str) -> dict[str, object]:
    """name -> its trace, for the traces on x axis `axis` ("x" or "x2")."""
    return {trace.name: trace for trace in fig.data if trace.xaxis == axis}


def test_two_panels_each_with_a_line_and_its_interval_as_whiskers_per_unit_side_by_side(table):
    fig = conformal_epochs_figure(table, 0.1, {"lora": Series("lora")})
    assert [a.text for a in fig.layout.annotations][:2] == ["coverage (dashed: 1 − α = 0.9)", "mean set size"]
    for axis, measure in (("x", "coverage"), ("x2", "set_size")):
        drawn = traces(fig, axis)
        assert list(drawn) == ["lora", "prefix-tuning"]
        for name, rows in table.groupby("run", sort=False):
            trace = drawn[name]
            assert np.array_equal(np.array(trace.y), rows[measure].to_numpy())
            low = np.array(trace.y) - np.array(trace.error_y.arrayminus)
            high = np.array(trace.y) + np.array(trace.error_y.array)
            np.testing.assert_allclose(low, rows[f"{measure}_low"], atol=1e-12)
            np.testing.assert_allclose(high, rows[f"{measure}_high"], atol=1e-12)
        offsets = [np.array(drawn[name].x) - np.array([1, 2, 3]) for name in drawn]
        assert offsets[0][0] < 0 < offsets[1][0] and np.all(np.abs(np.concatenate(offsets)) <= 0.15)  # side by side
    lines = [trace for trace in fig.data if trace.name == "lora"]
    assert {trace.line.color for trace in lines} == {color(Series("lora"))}
    assert [trace.showlegend for trace in lines] == [True, False]  # one legend entry per unit


def test_the_target_line_and_ranges_hold_everything_drawn(table):
    fig = conformal_epochs_figure(table, 0.1)
    (target,) = [shape for shape in fig.layout.shapes if shape.line.dash == "dash"]
    assert target.y0 == target.y1 == pytest.approx(0.9) and target.yref == "y"
    low, high = fig.layout.yaxis.range
    assert low <= min(table["coverage_low"].min(), 0.9) and high >= table["coverage_high"].max()
    low, high = fig.layout.yaxis2.range
    assert low == 0 and high >= table["set_size_high"].max()
    assert fig.layout.xaxis.range[0] < 1 and fig.layout.xaxis.range[1] > 3
    assert "α = 0.1" in fig.layout.title.text and "APS" in fig.layout.title.text
    assert fig.layout.yaxis.title.text == "coverage" and fig.layout.xaxis.title.text == "epoch"
    assert fig.layout.legend.orientation == "h"  # under the plot, clear of the panels


def test_a_target_below_every_band_stays_in_range(table):
    fig = conformal_epochs_figure(table.assign(coverage_low=0.97, coverage=0.98, coverage_high=0.99), 0.2)
    low, high = fig.layout.yaxis.range
    assert low <= 0.8 and high >= 0.99
