"""The figures of "Under shift" (`peftviz.figures.shift`) from hand-made tables: the severity figure draws per
method the mean over the families, their averaged interval as a band and their spread as boxes on integer severity
ticks, with the clean value as a reference; the coverage figure the same with the target 1 − α; the attention
figure each document's prefix mass against its confidence, right and wrong apart, a panel per severity."""

import re

import numpy as np
import pandas as pd
import pytest

from peftviz.analysis.shift.table import ALL, COLUMNS, COVERAGE_COLUMNS, family_spread
from peftviz.calibration.estimators import ESTIMATORS
from peftviz.figures import palette
from peftviz.figures.shift import (
    attention_shift_figure,
    coverage_figure,
    coverage_rows,
    severity_figure,
    severity_rows,
)

METHODS = {"lora": 0.05, "prefix-tuning": 0.08}  # method -> its clean ECE
FAMILIES = {"typo": 1.0, "ocr": 2.0, "keyboard": 4.0}  # family -> how fast its ECE grows with severity
SEVERITIES = (0, 1, 2, 3)


def ece(method: str, family: str | None, severity: int) -> float:
    return METHODS[method] + (0 if family is None else 0.01 * FAMILIES[family] * severity)


def family_mean(method: str, severity: int) -> float:
    return float(np.mean([ece(method, family, severity) for family in FAMILIES]))


@pytest.fixture
def table() -> pd.DataFrame:
    """Two methods at two seeds, clean and three families at severities 1 … 3, ECE and accuracy; a domain shift; and
    as `shift_table` adds them, each severity's mean over the families ("all families"), its interval narrower
    than the families' (the bootstrap of a mean)."""
    rows = []
    for method in METHODS:
        shifts = [("clean", "clean", 0)] + [
            (f"{family} {s}", family, s) for family in FAMILIES for s in SEVERITIES if s > 0
        ]
        shifts.append(("domain: other.csv", "domain", None))
        shifts += [(f"all families {s}", ALL, s) for s in SEVERITIES if s > 0]
        for shift, family, severity in shifts:
            if family == ALL:
                value = family_mean(method, severity)
            else:
                value = ece(method, None if family in ("clean", "domain") else family, severity or 0)
            narrower = 0.5 if family == ALL else 1.0
            for metric, mean in (("ece", value), ("accuracy", 0.9 - value)):
                rows.append(
                    {
                        "method": method,
                        "uncertainty": "plain",
                        "shift": shift,
                        "family": family,
                        "severity": severity,
                        "n": 2,
                        "seeds": "0,1",
                        "metric": metric,
                        "mean": mean,
                        "low": mean - 0.01 * narrower,
                        "high": mean + 0.02 * narrower,  # asymmetric, as bootstrap intervals are
                    }
                )
    return pd.DataFrame(rows, columns=list(COLUMNS))


@pytest.fixture
def series() -> dict:
    return {"lora": palette.Series("lora", seed=None), "prefix-tuning": palette.Series("prefix-tuning", seed=None)}


def panels(fig) -> dict[str, str]:
    """Panel title -> its x axis ("x", "x2", ...), in make_subplots' order."""
    return {a.text: ("x" if i == 0 else f"x{i + 1}") for i, a in enumerate(fig.layout.annotations)}


def traces(fig, kind: str, axis: str) -> list:
    return [t for t in fig.data if t.type == kind and (t.xaxis or "x") == axis]


def plain_text(title: str) -> str:
    return " ".join(re.sub("<[^>]+>", " ", title).split())


def test_each_method_gets_a_panel_with_the_mean_over_the_families_at_each_severity(table, series):
    fig = severity_figure(table, "ece", series)
    where = panels(fig)
    assert list(where) == list(METHODS)
    for method, axis in where.items():
        (line,) = [t for t in traces(fig, "scatter", axis) if t.mode == "lines+markers"]
        assert list(line.x) == list(SEVERITIES) and all(isinstance(s, int) for s in line.x)
        expected = [ece(method, None, 0)] + [np.mean([ece(method, f, s) for f in FAMILIES]) for s in SEVERITIES[1:]]
        assert np.allclose(line.y, expected, rtol=0, atol=1e-12)
        assert line.line.color == palette.color(series[method])


def test_the_mean_is_that_of_the_cores_family_spread_and_the_domain_shift_is_left_out(table):
    rows = severity_rows(table, "ece")
    spread = family_spread(table[table["metric"] == "ece"])
    merged = rows.merge(spread, on=["method", "uncertainty", "severity"], suffixes=("", "_core"))
    assert len(merged) == len(rows) == len(METHODS) * len(SEVERITIES)
    for ours, core in (("mean", "mean"), ("lowest", "lowest"), ("median", "median"), ("highest", "highest")):
        assert np.allclose(merged[ours], merged[f"{core}_core"], rtol=0, atol=1e-12)
    assert set(rows["families"]) == {1, len(FAMILIES)}  # the "all families" rows are no family of the spread
    assert set(rows["interval"]) == {"mean"}


def bands(fig) -> dict[str, tuple[list, list]]:
    """Panel's x axis -> (the band's lower edge, its upper edge)."""
    found = {}
    for axis in {(t.xaxis or "x") for t in fig.data}:
        high, low = [t for t in traces(fig, "scatter", axis) if t.mode == "lines" and "95%" in t.name]
        assert high.name.endswith("95% high") and low.fill == "tonexty"
        found[axis] = (list(low.y), list(high.y))
    return found


def test_the_band_is_the_interval_of_the_families_mean(table, series):
    fig = severity_figure(table, "ece", series)
    drawn = bands(fig)
    for method, axis in panels(fig).items():
        means = np.array([ece(method, None, 0)] + [family_mean(method, s) for s in SEVERITIES[1:]])
        half = np.array([1.0, 0.5, 0.5, 0.5])  # severity 0: the clean set's own interval; then the mean's
        low, high = drawn[axis]
        assert np.allclose(high, means + 0.02 * half, rtol=0, atol=1e-12)
        assert np.allclose(low, means - 0.01 * half, rtol=0, atol=1e-12)
    assert "band: its 95% two-level bootstrap interval" in plain_text(fig.layout.title.text)


def test_without_the_families_mean_the_band_is_their_intervals_averaged_and_says_so(table, series):
    fig = severity_figure(table[table["family"] != ALL], "ece", series)
    drawn = bands(fig)
    for method, axis in panels(fig).items():
        means = np.array([ece(method, None, 0)] + [family_mean(method, s) for s in SEVERITIES[1:]])
        low, high = drawn[axis]
        assert np.allclose(high, means + 0.02, rtol=0, atol=1e-12)
        assert np.allclose(low, means - 0.01, rtol=0, atol=1e-12)
    assert "intervals (seeds, test documents), averaged" in plain_text(fig.layout.title.text)


def test_the_boxes_are_the_families_spread_at_each_corrupted_severity(table, series):
    fig = severity_figure(table, "ece", series)
    for method, axis in panels(fig).items():
        (box,) = traces(fig, "box", axis)
        assert list(box.x) == [1, 2, 3]  # severity 0 is one set: no box
        for i, s in enumerate(box.x):
            values = np.array([ece(method, f, s) for f in FAMILIES])
            assert box.lowerfence[i] == pytest.approx(values.min(), abs=1e-12)
            assert box.upperfence[i] == pytest.approx(values.max(), abs=1e-12)
            assert box.median[i] == pytest.approx(np.median(values), abs=1e-12)
            assert box.q1[i] == pytest.approx(np.quantile(values, 0.25), abs=1e-12)
            assert box.q3[i] == pytest.approx(np.quantile(values, 0.75), abs=1e-12)
        assert box.line.color == palette.color(series[method])


def test_the_clean_value_is_each_panels_dashed_reference(table, series):
    fig = severity_figure(table, "ece", series)
    lines = {shape.yref: shape.y0 for shape in fig.layout.shapes}
    expected = {axis.replace("x", "y"): ece(method, None, 0) for method, axis in panels(fig).items()}
    assert lines == pytest.approx(expected, abs=1e-12)
    assert all(shape.line.dash == "dash" and shape.xref.endswith("domain") for shape in fig.layout.shapes)


def test_severity_ticks_are_whole_numbers_with_their_share_of_words_and_the_axes_are_labelled(table, series):
    fig = severity_figure(table, "ece", series)
    for axis in fig.select_xaxes():
        assert list(axis.tickvals) == list(SEVERITIES) and axis.tickmode == "array"
        assert [text.replace("<br>", " ") for text in axis.ticktext] == ["0 clean", "1 5%", "2 10%", "3 20%"]
        assert tuple(axis.range) == (-0.5, 3.5)
    assert {a.title.text for a in fig.select_xaxes() if a.title.text} == {"severity (share of words corrupted)"}
    assert fig.layout.yaxis.title.text == ESTIMATORS["ece"].heading
    title = plain_text(fig.layout.title.text)
    assert title.startswith("ECE (equal width) as the test text gets noisier") and "lower is better" in title


def test_an_error_axis_holds_every_band_and_box_from_0_and_accuracy_is_zoomed(table, series):
    fig = severity_figure(table, "ece", series)
    rows = severity_rows(table, "ece")
    low, high = fig.layout.yaxis.range
    top = max(rows["high"].max(), rows["highest"].max())  # the worst family's box may reach past the band
    assert top == pytest.approx(0.08 + 0.04 * 3) and low == 0 and top < high <= 1.1 * top + 1e-12
    accuracy = severity_figure(table, "accuracy", series)
    assert "higher is better" in plain_text(accuracy.layout.title.text)
    # accuracy is zoomed to what is drawn, a tenth of its extent either side: from 0 its fall would be a hair
    drawn = severity_rows(table, "accuracy")
    lowest = min(drawn["low"].min(), drawn["lowest"].min())
    highest = max(drawn["high"].max(), drawn["highest"].max())
    pad = 0.1 * (highest - lowest)
    assert tuple(accuracy.layout.yaxis.range) == pytest.approx((lowest - pad, highest + pad))
    assert 0 < accuracy.layout.yaxis.range[0] and accuracy.layout.yaxis.range[1] <= 1.02


def test_a_missing_interval_draws_no_nan_band_and_one_family_no_box(table, series):
    only_typo = table[table["family"].isin(["clean", "typo"])].copy()
    only_typo.loc[only_typo["severity"] == 2, ["low", "high"]] = np.nan
    fig = severity_figure(only_typo, "ece", series)
    assert not [t for t in fig.data if t.type == "box"]
    rows = severity_rows(only_typo, "ece")
    assert rows["families"].max() == 1 and rows.loc[rows["severity"] == 2, "high"].isna().all()
    line = next(t for t in fig.data if t.mode == "lines+markers")
    assert np.isfinite(np.asarray(line.y, dtype=float)).all()


# ---------------------------------------------------------------- coverage


@pytest.fixture
def coverage() -> pd.DataFrame:
    rows = []
    for method, drop in (("lora", 0.01), ("prefix-tuning", 0.03)):
        rows.append(dict(zip(COVERAGE_COLUMNS, (method, "clean", "clean", 0, 0.1, 0.91, 0.87, 0.95, 3.0))))
        for family, extra in (("typo", 0.0), ("ocr", 0.02)):
            for s in (1, 2):
                value = 0.91 - (drop + extra) * s
                rows.append(
                    dict(
                        zip(
                            COVERAGE_COLUMNS,
                            (method, f"{family} {s}", family, s, 0.1, value, value - 0.04, value + 0.04, 3.2),
                        )
                    )
                )
    return pd.DataFrame(rows, columns=list(COVERAGE_COLUMNS))


def test_coverage_is_drawn_against_severity_with_the_target_dashed(coverage, series):
    fig = coverage_figure(coverage, series)
    where = panels(fig)
    assert list(where) == ["lora", "prefix-tuning"]
    rows = coverage_rows(coverage)
    for method, axis in where.items():
        (line,) = [t for t in traces(fig, "scatter", axis) if t.mode == "lines+markers"]
        expected = rows[rows["method"] == method]["mean"].to_numpy()
        assert list(line.x) == [0, 1, 2] and np.allclose(line.y, expected, rtol=0, atol=1e-12)
    assert line.y[2] == pytest.approx((0.85 + 0.81) / 2, abs=1e-12)  # prefix-tuning at severity 2: typo, ocr
    targets = [shape for shape in fig.layout.shapes if shape.y0 == pytest.approx(0.9)]
    assert len(targets) == 2 and all(shape.line.dash == "dash" for shape in targets)
    low, high = fig.layout.yaxis.range
    assert low <= rows["low"].min() and high >= max(rows["high"].max(), 0.9) and high <= 1.02
    assert fig.layout.yaxis.title.text == "coverage"
    assert plain_text(fig.layout.title.text).startswith("Does a 90% conformal set stay 90% on noisy text?")


# ---------------------------------------------------------------- attention


@pytest.fixture
def attention() -> pd.DataFrame:
    """Two seeds, four documents, clean and typo 1 and 3: the mass falls as severity rises, more on wrong answers."""
    rows = []
    for seed in (0, 1):
        for family, severity in (("clean", 0), ("typo", 1), ("typo", 3)):
            for document in range(4):
                correct = document % 2 == 0
                rows.append(
                    {
                        "run": f"run-{seed}",
                        "seed": seed,
                        "shift": "clean" if severity == 0 else f"typo {severity}",
                        "family": family,
                        "severity": severity,
                        "document": document,
                        "prefix_mass": 0.5 - 0.05 * severity - (0 if correct else 0.1) + 0.01 * seed,
                        "confidence": 0.9 - 0.1 * severity + 0.01 * document,
                        "correct": correct,
                    }
                )
    return pd.DataFrame(rows)


def test_the_attention_figure_draws_each_document_in_its_severitys_panel_right_and_wrong_apart(attention):
    fig = attention_shift_figure(attention, "prefix-tuning")
    where = panels(fig)
    assert list(where) == ["severity 0 · clean", "severity 1 · 5% of words", "severity 3 · 20% of words"]
    for (name, axis), severity in zip(where.items(), (0, 1, 3)):
        right, wrong = traces(fig, "scatter", axis)
        for trace, correct in ((right, True), (wrong, False)):
            rows = attention[(attention["severity"] == severity) & (attention["correct"] == correct)]
            assert len(trace.x) == len(rows) == 4
            assert np.allclose(trace.x, rows["prefix_mass"], rtol=0, atol=1e-12)
            assert np.allclose(trace.y, rows["confidence"], rtol=0, atol=1e-12)
        assert (right.name, wrong.name) == ("right answer", "wrong answer")
        assert right.marker.color != wrong.marker.color
    assert [t.showlegend for t in fig.data] == [True, True] + [False] * 4  # one legend entry per colour


def test_the_attention_figure_marks_the_mean_mass_of_each_colour_and_labels_its_axes(attention):
    fig = attention_shift_figure(attention, "prefix-tuning")
    where = panels(fig)
    for (_, axis), severity in zip(where.items(), (0, 1, 3)):
        lines = sorted(shape.x0 for shape in fig.layout.shapes if shape.xref == axis)
        mine = attention[attention["severity"] == severity]
        expected = sorted(mine.groupby("correct")["prefix_mass"].mean())
        assert lines == pytest.approx(expected, abs=1e-12)
    low, high = fig.layout.xaxis.range
    assert low < attention["prefix_mass"].min() and high > attention["prefix_mass"].max() and 0 <= low
    low, high = fig.layout.yaxis.range
    assert low < attention["confidence"].min() and high > attention["confidence"].max() and high <= 1
    assert {a.title.text for a in fig.select_xaxes() if a.title.text} == {"attention mass on the prefix"}
    assert fig.layout.yaxis.title.text == "confidence"
    assert "prefix-tuning" in fig.layout.title.text
    assert fig.layout.legend.orientation == "h" and fig.layout.showlegend


def test_an_empty_attention_table_draws_an_empty_figure():
    fig = attention_shift_figure(
        pd.DataFrame(
            columns=["run", "seed", "shift", "family", "severity", "document", "prefix_mass", "confidence", "correct"]
        )
    )
    assert not fig.data and tuple(fig.layout.xaxis.range) == (0, 1)


def test_the_compact_figure_for_the_tour_ticks_severities_by_number_under_a_short_title(table, series):
    fig = severity_figure(table, "ece", series, compact=True)
    for axis in fig.select_xaxes():
        assert list(axis.tickvals) == list(SEVERITIES) and list(axis.ticktext) == ["0", "1", "2", "3"]
    assert {a.title.text for a in fig.select_xaxes() if a.title.text} == {"severity"}
    assert fig.layout.yaxis.title.text == "ECE" and {axis.nticks for axis in fig.select_yaxes()} == {3}
    assert plain_text(fig.layout.title.text).startswith("ECE as the test text gets noisier line:")
    full = severity_figure(table, "ece", series)
    assert [t.y for t in fig.data] == [t.y for t in full.data]  # the same numbers


def test_the_compact_figure_lays_nine_methods_out_as_the_tours_ece_step_does(table):
    """The smoke comparison's nine runs: two rows of five (three rows of three were ~50 px tall on a projector)."""
    lora = table[table["method"] == "lora"]
    many = pd.concat([lora.assign(method=f"method {i}") for i in range(9)], ignore_index=True)
    fig = severity_figure(many, "ece", compact=True)
    assert len(fig.layout.annotations) == 9
    columns = sorted({round(axis.domain[0], 6) for axis in fig.select_xaxes()})
    rows = sorted({tuple(axis.domain) for axis in fig.select_yaxes()})
    assert len(columns) == 5 and len(rows) == 2
    hidden = [axis for axis in fig.select_xaxes() if axis.visible is False]
    assert len(hidden) == 1  # the tenth cell
    assert fig.layout.meta["ticks_under_every_row"]


def test_the_figures_name_the_tables_rows_as_the_core_does():
    """The figure module keeps the core's names without importing it (the core loads `datasets`)."""
    from peftviz.analysis.shift import table as core
    from peftviz.figures import shift as figures

    assert (figures.ALL, figures.PLAIN) == (core.ALL, core.PLAIN)
