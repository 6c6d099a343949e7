"""The figures of "What fixes it" (`peftviz.figures.uncertainty`) from hand-made tables: the forest plot draws each
row's mean with its interval in its method's panel, the plain method as the reference line, significance as the
fill; the ensemble-size figure draws each k with its interval on integer ticks, one ensemble marked hollow."""

import re

import numpy as np
import pandas as pd
import pytest

from peftviz.analysis.uncertainty.comparison import COLUMNS
from peftviz.calibration.estimators import ESTIMATORS
from peftviz.figures import palette
from peftviz.figures.uncertainty import ensemble_size_figure, uncertainty_figure

UNCERTAINTY = ("plain", "temperature", "ensemble of 3 (probabilities)", "mc-dropout, T = 3")


def row(method: str, uncertainty: str, metric: str, mean: float, half: float, significant: bool = False) -> dict:
    plain = uncertainty == "plain"
    return dict.fromkeys(COLUMNS, np.nan) | {
        "method": method,
        "uncertainty": uncertainty,
        "n": 3,
        "seeds": "0,1,2",
        "metric": metric,
        "mean": mean,
        "low": mean - half,
        "high": mean + 2 * half,  # asymmetric, as bootstrap intervals are
        "difference": np.nan if plain else mean - 0.2,
        "difference_low": np.nan if plain else mean - 0.25,
        "difference_high": np.nan if plain else mean - 0.15,
        "p": np.nan if plain else 0.01,
        "p_holm": np.nan if plain else (0.02 if significant else 0.4),
        "significant": significant,
        "passes": 1,
        "extra_parameters": 0,
        "seconds_per_1000": np.nan,
    }


@pytest.fixture
def table() -> pd.DataFrame:
    rows = []
    for method, base in (("lora", 0.2), ("prefix-tuning", 0.3)):
        for metric, scale in (("ece", 1.0), ("nll", 5.0)):
            for i, uncertainty in enumerate(UNCERTAINTY):
                rows.append(row(method, uncertainty, metric, scale * (base - 0.03 * i), 0.01 * (i + 1), i == 1))
    return pd.DataFrame(rows, columns=list(COLUMNS))


@pytest.fixture
def series() -> dict:
    return {"lora": palette.Series("lora"), "prefix-tuning": palette.Series("prefix-tuning", seed=None)}


def points(fig) -> dict:
    """(panel's x axis, uncertainty) -> (mean, low, high, symbol, colour), from the drawn traces."""
    found = {}
    for trace in fig.data:
        symbols = trace.marker.symbol
        for i, (x, y) in enumerate(zip(trace.x, trace.y)):
            low, high = x - trace.error_x.arrayminus[i], x + trace.error_x.array[i]
            found[(trace.xaxis, y)] = (x, low, high, symbols[i], trace.marker.color)
    return found


def panels(fig) -> dict[str, str]:
    """Panel title -> its x axis ("x", "x2", ...), in make_subplots' order."""
    titles = [a.text for a in fig.layout.annotations]
    return {title: ("x" if i == 0 else f"x{i + 1}") for i, title in enumerate(titles)}


def test_every_method_gets_a_panel_and_every_row_its_mean_and_interval(table, series):
    fig = uncertainty_figure(table, "ece", series)
    where = panels(fig)
    assert list(where) == ["lora", "prefix-tuning"]
    drawn = points(fig)
    rows = table[table["metric"] == "ece"]
    assert len(drawn) == len(rows) == 8
    for r in rows.itertuples():
        mean, low, high, _, _ = drawn[(where[r.method], r.uncertainty)]
        assert (mean, low, high) == pytest.approx((r.mean, r.low, r.high), abs=1e-12)


def test_error_bars_are_the_intervals_lengths(table, series):
    fig = uncertainty_figure(table, "ece", series)
    rows = table[table["metric"] == "ece"].set_index(["method", "uncertainty"])
    for trace in fig.data:
        method = trace.name.split(" · ")[0]
        for i, label in enumerate(trace.y):
            r = rows.loc[(method, label)]
            assert trace.error_x.array[i] == pytest.approx(r["high"] - r["mean"], abs=1e-12)
            assert trace.error_x.arrayminus[i] == pytest.approx(r["mean"] - r["low"], abs=1e-12)
            assert trace.error_x.symmetric is False


def test_the_plain_method_is_the_reference_line_in_its_panel(table, series):
    fig = uncertainty_figure(table, "ece", series)
    where = panels(fig)
    plain = table.query("metric == 'ece' and uncertainty == 'plain'").set_index("method")["mean"]
    lines = {shape.xref: shape.x0 for shape in fig.layout.shapes}
    assert lines == {where[method]: pytest.approx(value, abs=1e-12) for method, value in plain.items()}
    assert all(shape.x0 == shape.x1 and shape.yref.endswith("domain") for shape in fig.layout.shapes)
    drawn = points(fig)
    assert {drawn[(axis, "plain")][3] for axis in where.values()} == {"diamond"}


def test_significant_rows_are_filled_the_others_hollow(table, series):
    drawn = points(uncertainty_figure(table, "ece", series))
    symbols = {uncertainty: symbol for (_, uncertainty), (*_, symbol, _) in drawn.items() if uncertainty != "plain"}
    assert symbols == {
        "temperature": "circle",
        "ensemble of 3 (probabilities)": "circle-open",
        "mc-dropout, T = 3": "circle-open",
    }


def test_each_method_has_its_palette_colour(table, series):
    fig = uncertainty_figure(table, "ece", series)
    where = panels(fig)
    for (axis, _), (*_, colour) in points(fig).items():
        method = next(m for m, a in where.items() if a == axis)
        assert colour == palette.color(series[method])


def test_the_axes_hold_every_interval_and_name_the_metric(table, series):
    fig = uncertainty_figure(table, "nll", series)
    rows = table[table["metric"] == "nll"]
    low, high = fig.layout.xaxis.range
    assert low < rows["low"].min() and high > rows["high"].max()
    assert high - low < 1.2 * (rows["high"].max() - rows["low"].min())  # a margin, not a wider axis
    titled = {axis.title.text for axis in fig.select_xaxes() if axis.title.text}
    assert titled == {ESTIMATORS["nll"].heading}
    assert ESTIMATORS["nll"].heading in fig.layout.title.text
    assert list(fig.layout.yaxis.categoryarray) == list(UNCERTAINTY[::-1])  # the plain method on top


def test_a_row_without_an_interval_gets_no_bar_not_nan(table, series):
    table.loc[(table["uncertainty"] == "temperature") & (table["metric"] == "ece"), ["low", "high"]] = np.nan
    fig = uncertainty_figure(table, "ece", series)
    for trace in fig.data:
        assert np.isfinite(trace.error_x.array).all() and np.isfinite(trace.error_x.arrayminus).all()
        for i, label in enumerate(trace.y):
            if label == "temperature":
                assert trace.error_x.array[i] == trace.error_x.arrayminus[i] == 0


def test_a_method_without_an_uncertainty_row_keeps_its_panel_and_reference(table, series):
    table = table[~((table["method"] == "prefix-tuning") & (table["uncertainty"] != "plain"))]
    fig = uncertainty_figure(table, "ece", series)
    assert list(panels(fig)) == ["lora", "prefix-tuning"] and len(fig.layout.shapes) == 2


# ---------------------------------------------------------------- ensembles by size


def curve(method: str, n: int, level: float) -> pd.DataFrame:
    k = np.arange(1, n + 1)
    mean = level / k
    return pd.DataFrame(
        {"method": method, "k": k, "ensembles": n // k, "mean": mean, "low": mean * 0.7, "high": mean * 1.5}
    )


@pytest.fixture
def curves() -> pd.DataFrame:
    return pd.concat([curve("lora", 4, 0.2), curve("prefix-tuning", 3, 0.3)], ignore_index=True)


def test_the_ensemble_figure_draws_every_k_with_its_interval(curves, series):
    fig = ensemble_size_figure(curves, "ece", series)
    assert [trace.name for trace in fig.data] == ["lora", "prefix-tuning"]
    assert [a.text for a in fig.layout.annotations] == ["lora", "prefix-tuning"]
    for trace in fig.data:
        rows = curves[curves["method"] == trace.name]
        assert list(trace.x) == rows["k"].tolist() and all(isinstance(k, int) for k in trace.x)
        assert np.allclose(trace.y, rows["mean"], rtol=0, atol=1e-12)
        assert np.allclose(trace.error_y.array, rows["high"] - rows["mean"], rtol=0, atol=1e-12)
        assert np.allclose(trace.error_y.arrayminus, rows["mean"] - rows["low"], rtol=0, atol=1e-12)
        assert trace.line.color == palette.color(series[trace.name])


def test_one_ensemble_only_is_hollow_and_said(curves, series):
    fig = ensemble_size_figure(curves, "ece", series)
    lora = next(trace for trace in fig.data if trace.name == "lora")
    assert list(lora.marker.symbol) == ["circle", "circle", "circle-open", "circle-open"]  # 4, 2, 1, 1 ensembles
    assert "hollow: one ensemble of k only" in " ".join(re.sub("<[^>]+>", " ", fig.layout.title.text).split())
    assert [c[2] for c in lora.customdata] == [
        "4 ensembles of 1",
        "2 ensembles of 2",
        "1 ensemble of 3",
        "1 ensemble of 4",
    ]


def test_the_ensemble_figure_has_integer_ticks_and_holds_every_whisker(curves, series):
    fig = ensemble_size_figure(curves, "brier", series)
    for axis in fig.select_xaxes():
        assert (axis.tickmode, axis.tick0, axis.dtick) == ("linear", 1, 1)
    assert tuple(fig.layout.xaxis.range) == pytest.approx((0.6, 4.4))
    low, high = fig.layout.yaxis.range
    assert low == 0 and curves["high"].max() < high < 1.2 * curves["high"].max()
    assert fig.layout.yaxis.title.text == ESTIMATORS["brier"].heading
    assert {a.title.text for a in fig.select_xaxes() if a.title.text} == {"ensemble size k (seeds averaged)"}
