"""The risk–coverage figure (`peftviz.figures.selective`) from hand-made tables: its traces carry the table's
numbers, its axes hold the bands, the 80% and 90% coverages are marked, each unit has its method's colour."""

import numpy as np
import pandas as pd
import pytest

from peftviz.figures import palette
from peftviz.figures.selective import MARKED_COVERAGES, risk_coverage_figure


def curve(name: str, level: float, spread: float, n: int = 1) -> pd.DataFrame:
    coverage = np.arange(1, 101) / 100
    risk = level * coverage  # errors among the least confident, as a useful ranking gives
    return pd.DataFrame(
        {
            "run": name,
            "coverage": coverage,
            "risk": risk,
            "low": np.maximum(risk - spread, 0),
            "high": risk + spread,
            "n": n,
        }
    )


@pytest.fixture
def table():
    return pd.concat([curve("lora", 0.3, 0.05, n=3), curve("prefix", 0.5, 0.12)])


@pytest.fixture
def series():
    return {"lora": palette.Series("lora"), "prefix": palette.Series("prefix-tuning")}


def lines(fig, name):
    return [t for t in fig.data if t.name == name]


def test_each_unit_is_a_line_over_its_band_with_its_colour(table, series):
    fig = risk_coverage_figure(table, series, "95% bootstrap over seeds × examples")
    for name in ("lora", "prefix"):
        rows = table[table["run"] == name]
        (line,) = lines(fig, name)
        assert np.allclose(line.x, rows["coverage"]) and np.allclose(line.y, rows["risk"])
        assert line.line.color == palette.color(series[name])
        (high,) = lines(fig, f"{name} 95% high")
        (low,) = lines(fig, f"{name} 95% low")
        assert np.allclose(high.y, rows["high"]) and np.allclose(low.y, rows["low"]) and low.fill == "tonexty"
        assert low.xaxis == line.xaxis and low.yaxis == line.yaxis  # in the unit's own panel
    assert lines(fig, "lora")[0].xaxis != lines(fig, "prefix")[0].xaxis
    assert not fig.layout.showlegend  # panel titles name the units
    assert [a.text for a in fig.layout.annotations][:2] == ["lora", "prefix"]


def test_axes_hold_every_band_and_start_at_zero(table, series):
    fig = risk_coverage_figure(table, series, "band")
    top = table["high"].max()  # 0.62
    for axis in fig.select_yaxes():
        assert axis.range[0] == 0 and top < axis.range[1] <= top * 1.2
    for axis in fig.select_xaxes():
        assert axis.range[0] <= 0.01 and axis.range[1] >= 1.0
    assert fig.layout.yaxis.title.text == "error rate"
    assert "band: band" in fig.layout.title.text and "Risk–coverage" in fig.layout.title.text


def test_the_80_and_90_percent_coverages_are_marked_in_every_panel(table, series):
    fig = risk_coverage_figure(table, series, "band")
    marks = [shape for shape in fig.layout.shapes if shape.type == "line" and shape.line.dash == "dot"]
    assert MARKED_COVERAGES == (0.8, 0.9)
    assert sorted({shape.x0 for shape in marks}) == [0.8, 0.9] and all(s.x0 == s.x1 for s in marks)
    assert len(marks) == 2 * 2  # two panels, two marks each


def test_an_all_correct_unit_still_has_an_axis(series):
    perfect = curve("lora", 0.0, 0.0)
    fig = risk_coverage_figure(perfect, series, "band")
    assert fig.layout.yaxis.range[1] > 0
