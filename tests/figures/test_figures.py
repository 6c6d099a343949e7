"""The figures read right at a glance: bars reach their values, one colour per method whatever is
selected, exact numbers in titles, nothing drawn at the very edge of an axis, colour scales fitted
to the data. Pure figure functions on small made-up inputs; the browser test checks the drawing."""

import itertools
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from peftviz.analysis.calibration import BIN_COLUMNS, classwise_frame, wilson_interval
from peftviz.figures import attention, calibration, kernel, palette, tiny_heads
from peftviz.figures.palette import Series
from peftviz.methods import METHODS


def bins_table(rows, scheme="width", run="r", epoch=2) -> pd.DataFrame:
    """A per-bin table from (lower, upper, count, confidence, accuracy) rows."""
    frame = pd.DataFrame(rows, columns=["lower", "upper", "count", "confidence", "accuracy"])
    frame["gap"] = frame["accuracy"] - frame["confidence"]
    frame["hits"] = np.rint(np.nan_to_num(frame["accuracy"] * frame["count"])).astype(int)
    frame["accuracy_low"], frame["accuracy_high"] = wilson_interval(frame["hits"], frame["count"])
    frame["run"], frame["epoch"], frame["scheme"], frame["bin"] = run, epoch, scheme, range(len(frame))
    return frame[list(BIN_COLUMNS)]


# an under-confident bin (acc 1.0 at conf 0.59), an over-confident one, an empty one
TABLE = bins_table([(0.5, 0.6, 10, 0.59, 1.0), (0.6, 0.7, 20, 0.65, 0.4), (0.7, 0.8, 0, np.nan, np.nan)])


def trace(fig, name):
    return next(t for t in fig.data if t.name == name)


# ---------------------------------------------------------------- reliability diagrams


def test_an_under_confident_bins_accuracy_bar_reaches_its_accuracy():
    fig = calibration.reliability_figure(TABLE)
    accuracy = trace(fig, "accuracy")
    assert accuracy.y[0] == 1.0 and accuracy.base is None  # from 0 to the accuracy, not to the confidence
    under, over = trace(fig, calibration.UNDER_NAME), trace(fig, calibration.OVER_NAME)
    # the gap runs from the confidence up to the accuracy, beside the accuracy bar, not over it
    assert under.base[0] == pytest.approx(0.59) and under.base[0] + under.y[0] == pytest.approx(1.0)
    assert over.base[1] == pytest.approx(0.4) and over.base[1] + over.y[1] == pytest.approx(0.65)
    assert under.y[1] is None and over.y[0] is None and under.y[2] is over.y[2] is None
    left_of_gap = [o + w for o, w in zip(accuracy.offset, accuracy.width)]
    assert all(end < gap_start for end, gap_start in zip(left_of_gap, under.offset))  # side by side
    assert under.marker.pattern.shape == "/" and not over.marker.pattern.shape  # two styles, both in the legend
    assert under.marker.color != over.marker.color and under.showlegend and over.showlegend


def test_reliability_title_shows_the_ece_to_four_decimals():
    table = bins_table([(0.0, 0.5, 100, 0.3, 0.3355), (0.5, 1.0, 0, np.nan, np.nan)])
    fig = calibration.reliability_figure(table)
    assert "ECE = 0.0355" in fig.layout.title.text
    recalibrated = fig.layout.title.text.split("<br>")
    assert all(len(line.replace("<sup>", "").replace("</sup>", "")) <= 45 for line in recalibrated)  # fits a third


def test_the_confidence_axis_reaches_past_zero_and_one():
    fig = calibration.reliability_figure(TABLE)
    for axis in (fig.layout.xaxis, fig.layout.xaxis2, fig.layout.yaxis):
        low, high = axis.range
        assert low < 0 and high > 1 and high - 1 >= 0.01
    assert fig.layout.xaxis2.automargin and fig.layout.yaxis.automargin


def test_equal_mass_bins_sit_on_a_rank_axis_labelled_with_their_confidence():
    confidence = [0.3, 0.95, 0.96, 0.97, 0.98, 0.985, 0.99, 0.995]
    table = bins_table([(c - 0.001, c + 0.001, 5, c, min(1.0, c + 0.01)) for c in confidence], scheme="mass")
    fig = calibration.reliability_figure(table)
    assert list(trace(fig, "accuracy").x) == list(range(8))  # equally spaced, whatever the confidences
    reference = trace(fig, "perfect calibration")
    assert list(reference.x) == list(range(8)) and list(reference.y) == confidence
    axis = fig.layout.xaxis2
    assert axis.range[0] < 0 and axis.range[1] > 7 and "rank" in axis.title.text
    assert list(axis.ticktext) == [f"{confidence[i]:.3f}" for i in axis.tickvals]


def lower_and_upper_ends(trace) -> tuple[list, list]:
    """Where a trace's whiskers end: y - arrayminus and y + array (None where it has none)."""
    bars = trace.error_y
    assert bars.type == "data" and bars.symmetric is False
    low = [None if m is None else y - m for y, m in zip(trace.y, bars.arrayminus)]
    return low, [None if a is None else y + a for y, a in zip(trace.y, bars.array)]


def test_each_accuracy_bar_has_a_whisker_from_its_bins_interval_low_to_high():
    fig = calibration.reliability_figure(TABLE)
    low, high = lower_and_upper_ends(trace(fig, "accuracy"))
    assert low[:2] == pytest.approx(TABLE["accuracy_low"][:2].tolist(), abs=1e-12)
    assert high[:2] == pytest.approx(TABLE["accuracy_high"][:2].tolist(), abs=1e-12)
    assert low[2] is None and high[2] is None  # the empty bin: no bar, no whisker
    # 10 of 10 right still leaves room below; 8 of 20 is a wider interval than 10 of 10 gives
    assert 0.65 < low[0] < 0.75 and high[0] == pytest.approx(1.0) and high[1] - low[1] > 1 - low[0]
    assert "whiskers: 95% Wilson" in fig.layout.title.text
    assert "95% Wilson" in calibration.interval_note() and "80% Wilson" in calibration.interval_note(0.8)
    for other in fig.data[1:]:  # the gap bars, reference and counts have none
        assert other.error_y.array is None


CLASS_NAMES = ["ant", "bee", "cat", "dog"]


def four_class_predictions():
    """200 random probability vectors over four classes and random labels."""
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(200, 4)) * 2
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return probs, rng.integers(0, 4, 200)


@pytest.mark.parametrize("scheme", ["width", "mass"])
def test_a_classwise_figure_has_a_panel_per_class_drawing_its_rows(scheme):
    from peftviz.calibration import metrics

    probs, labels = four_class_predictions()
    table = classwise_frame(probs, labels, 10, scheme, "lora", 3, CLASS_NAMES)
    fig = calibration.classwise_figure(table)
    titles = [a.text for a in fig.layout.annotations]
    assert [t.split("<br>")[0] for t in titles] == CLASS_NAMES
    frequencies = [t for t in fig.data if t.name == "frequency"]
    counts = [t for t in fig.data if t.name == "count"]
    assert len(frequencies) == len(counts) == 4
    for k, (name, line, count) in enumerate(zip(CLASS_NAMES, frequencies, counts)):
        rows = table[table["class"] == name]
        filled = (rows["count"] > 0).to_numpy()
        assert [y for y in line.y if y is not None] == pytest.approx(rows["accuracy"][filled].tolist(), abs=1e-12)
        assert [x for x in line.x if x is not None] == pytest.approx(rows["confidence"][filled].tolist(), abs=1e-12)
        low, high = lower_and_upper_ends(line)
        assert [v for v in low if v is not None] == pytest.approx(rows["accuracy_low"][filled].tolist(), abs=1e-12)
        assert [v for v in high if v is not None] == pytest.approx(rows["accuracy_high"][filled].tolist(), abs=1e-12)
        assert [y for y in count.y if y is not None] == rows["count"][filled].tolist()
        assert f"n = {(labels == k).sum()} ·" in titles[k]
        assert line.xaxis == count.xaxis and line.yaxis != count.yaxis  # counts on the panel's second axis
    assert f"classwise ECE = {metrics.classwise_ece(probs, labels, 10, scheme):.4f}" in fig.layout.title.text
    assert "95% Wilson" in fig.layout.title.text


def test_a_classwise_panels_counts_start_at_its_accuracy_zero_and_reach_a_quarter_up():
    probs, labels = four_class_predictions()
    table = classwise_frame(probs, labels, 10, "width", "lora", 3, CLASS_NAMES)
    fig = calibration.classwise_figure(table)
    accuracy_axis = fig.layout.yaxis
    count_axis = fig.layout[fig.data[0].yaxis.replace("y", "yaxis")]
    low, high = accuracy_axis.range
    count_low, count_high = count_axis.range
    assert low < 0 and high > 1
    assert count_low / (count_high - count_low) == pytest.approx(low / (high - low))  # 0 at the same height
    top = table["count"].max()
    assert (top - count_low) / (count_high - count_low) == pytest.approx((0.25 - low) / (high - low))


# ---------------------------------------------------------------- one palette


def fake_run(name, method, label="", seed=0):
    return SimpleNamespace(name=name, config=SimpleNamespace(method=method), label=label or method, seed=seed)


STORE = [
    fake_run("a", "fine-tuning"),
    fake_run("b", "tiny-attention", "tiny-attention 1H"),
    fake_run("c", "tiny-attention", "tiny-attention 4H averaged"),
    fake_run("d", "prefix-tuning"),
    fake_run("e", "prefix-tuning", seed=1),
]


def test_a_method_keeps_its_colour_whatever_the_store_order_and_selection():
    forward, backward = palette.store_series(STORE), palette.store_series(STORE[::-1])
    assert forward == backward
    colours = {name: palette.color(series) for name, series in forward.items()}
    assert colours["a"] == palette.color(Series("fine-tuning"))  # the method itself: its base colour
    assert colours["b"] != colours["c"]  # two variants of one method: two shades
    assert colours["d"] != colours["e"] and colours["d"] == palette.color(Series("prefix-tuning"))  # seeds: shades
    assert len({palette.color(Series(method)) for method in METHODS}) == len(METHODS)


def test_a_method_outside_the_registry_gets_a_stable_colour():
    assert palette.method_index("new-method") == palette.method_index("new-method") >= len(METHODS)
    assert palette.color(Series("new-method")).startswith("#")


def test_a_peft_tuner_type_gets_a_hue_no_registered_method_has_the_same_in_every_process():
    """`peft:<TYPE>` is not in the registry's iteration: its hue is one the registry leaves free, from its name's
    CRC-32, not from Python's per-process string hash."""
    import os
    import subprocess
    import sys

    from peftviz.methods.peft_tuner import tuner_types

    registered = {palette.color(Series(method)) for method in METHODS}
    names = [f"peft:{peft_type}" for peft_type in tuner_types()]
    colours = {name: palette.color(Series(name)) for name in names}
    assert not set(colours.values()) & registered
    assert {palette.method_index(name) for name in names} <= set(range(len(METHODS), len(palette.BASE)))
    code = "from peftviz.figures.palette import Series, color; import sys; print(color(Series(sys.argv[1])))"
    for seed in ("1", "2"):
        other = subprocess.run(
            [sys.executable, "-c", code, "peft:RANDLORA"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        )
        assert other.stdout.strip() == colours["peft:RANDLORA"]


def curves(names):
    return pd.concat(
        pd.DataFrame({"run": name, "epoch": [1, 2], "ece": [0.1, 0.05], "low": [0.05, 0.02], "high": [0.15, 0.08]})
        for name in names
    )


def test_the_same_method_has_the_same_colour_in_two_selection_orders():
    series = {"ft": Series("fine-tuning"), "pt": Series("prefix-tuning"), "tiny 4H": Series("tiny-attention", 1)}
    first = calibration.ece_over_epochs_figure(curves(["ft", "pt", "tiny 4H"]), "width", 10, "band", series=series)
    second = calibration.ece_over_epochs_figure(curves(["tiny 4H", "ft"]), "width", 10, "band", series=series)
    for name in ("ft", "tiny 4H"):
        assert trace(first, name).line.color == trace(second, name).line.color == palette.color(series[name])
    assert trace(first, "ft").line.color != trace(first, "pt").line.color


def test_ece_over_epochs_draws_one_panel_per_unit_on_shared_axes():
    fig = calibration.ece_over_epochs_figure(curves(["a", "b", "c", "d"]), "width", 10, "band", epoch=2)
    axes = {(t.xaxis, t.yaxis) for t in fig.data if t.name in "abcd"}
    assert len(axes) == 4  # a panel each
    assert [a.text for a in fig.layout.annotations] == ["a", "b", "c", "d"]
    y_axes = [fig.layout[f"yaxis{i or ''}"] for i in range(5) if i != 1]
    assert len({axis.matches for axis in y_axes if axis.matches}) == 1  # one shared ECE scale
    assert len([s for s in fig.layout.shapes if s.x0 == 2]) == 4  # the chosen epoch in every panel


def test_kernel_and_tiny_attention_figures_use_the_methods_colour():
    trained = [
        {
            "alpha": 0.01,
            "accuracy": 0.5,
            "ece": 0.1,
            "label": "k",
            "run": "k1",
            "group": "g",
            "learned_alpha": None,
            "seed": 0,
        }
    ]
    fig = kernel.alpha_figure(None, trained, series={"k1": Series("kernel-prefix-propagation", 2, 0)})
    assert fig.data[0].marker.color == palette.color(Series("kernel-prefix-propagation"))
    table = SimpleNamespace(
        kind="averaged",
        rows=[
            {"quantity": f"{split} {metric}", "before": 0.5, "after": 0.4}
            for split in ("validation", "test")
            for metric in ("accuracy", "ECE")
        ],
    )
    bars = tiny_heads.averaging_figure(table, Series("tiny-attention", 1), "tiny-attention 4H averaged")
    assert {t.marker.color for t in bars.data} == {palette.color(Series("tiny-attention", 1))}
    assert "tiny-attention 4H averaged" in bars.layout.title.text and bars.data[0].text[0] == "0.5000"


# ---------------------------------------------------------------- kernel, attention


def test_alpha_ticks_are_full_numbers_at_one_two_five():
    ticks = kernel.log_ticks([1e-3, 4e-2])
    assert ticks == [0.001, 0.002, 0.005, 0.01, 0.02, 0.05]
    assert [kernel.tick_text(t) for t in ticks] == ["0.001", "0.002", "0.005", "0.01", "0.02", "0.05"]
    assert kernel.log_ticks([1e-5, 1.0]) == [1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]  # many decades: decades only
    fig = kernel.alpha_figure(
        None,
        [
            {"alpha": a, "accuracy": 0.5, "ece": 0.1, "label": "k", "run": "k", "group": "g", "learned_alpha": None}
            for a in (1e-3, 1e-2, 4e-2)
        ],
    )
    assert list(fig.layout.xaxis.ticktext) == ["0.001", "0.002", "0.005", "0.01", "0.02", "0.05"]
    assert not fig.layout.annotations or all("λ" not in a.text for a in fig.layout.annotations)


def test_lambda_per_head_colours_are_distinct_for_twelve_heads():
    rows = [
        {"layer": 0, "head": h, "q05": 0.0, "q25": 0.01, "median": 0.02, "q75": 0.03, "q95": 0.05, "mean": 0.02}
        for h in range(12)
    ] + [{"layer": 0, "head": None, "q05": 0, "q25": 0.01, "median": 0.02, "q75": 0.03, "q95": 0.05, "mean": 0.02}]
    fig = kernel.lambda_figure(rows, per_head=True, alpha=0.01, grid=(1e-3, 4e-2))
    boxes = [t for t in fig.data if t.type == "box"]
    assert len(boxes) == 12 and len({t.marker.color for t in boxes}) == 12
    assert fig.layout.yaxis.range[1] == pytest.approx(1.1 * 0.05)  # fitted, not 0–1
    assert not fig.layout.annotations  # the grid and α are legend entries, not text over the boxes
    assert {t.name for t in fig.data if t.type == "scatter"} == {kernel.GRID_NAME, "this run's α = 0.01"}


def test_the_lambda_grid_colour_scale_is_fitted_and_stated():
    grid = np.array([[0.01, 0.3], [0.05, 0.2]])
    heatmap = attention.prefix_mass_grid_figure(grid).data[0]
    assert (heatmap.zmin, heatmap.zmax) == (0, 0.3) and "0–0.300" in heatmap.colorbar.title.text


def test_token_heatmap_title_names_its_layer_and_head():
    fig = attention.token_heatmap_figure(np.full((2, 3), 0.2), ["a", "b"], ["x", "y", "z"], 0, "tokens 0–1", 2, 4)
    assert fig.layout.title.text == "Layer 3, head 5: tokens 0–1"
    assert fig.data[0].zmax == pytest.approx(0.2)


def test_the_head_similarity_scale_is_fitted_to_the_pairs_and_stated():
    from peftviz.figures.tiny_heads import similarity_figure

    similarity = np.array([[1.0, 0.934, 0.99], [0.934, 1.0, 0.95], [0.99, 0.95, 1.0]])
    heatmap = similarity_figure(similarity, layer=0).data[0]
    assert (heatmap.zmin, heatmap.zmax) == (0.934, 1) and heatmap.colorbar.title.text == "cosine, 0.934–1"
    opposite = similarity_figure(np.array([[1.0, -0.5], [-0.5, 1.0]])).data[0]
    assert (opposite.zmin, opposite.zmax) == (-1, 1)  # a negative pair: the full signed scale
    equal = similarity_figure(np.ones((2, 2))).data[0]
    assert equal.zmin == 0.999 and equal.zmax == 1  # identical heads still get a scale
    one = similarity_figure(np.ones((1, 1)), layer=0)
    assert not one.data[0].showscale and "one head: no pair to compare" in one.layout.title.text
    assert one.layout.height >= 300  # was 230: its -1–1 colour bar squashed five ticks into 70 px


def confident_run(n: int = 400, seed: int = 0):
    """Predictions of a run that is right 90% of the time, all made with confidence 0.8 to 1: (N, 4) probs, labels."""
    rng = np.random.default_rng(seed)
    top = rng.uniform(0.8, 1.0, n)  # (N,)
    probs = np.column_stack([top, *(np.tile((1 - top) / 3, (3, 1)))])  # class 0 on top
    labels = np.where(rng.uniform(size=n) < 0.9, 0, rng.integers(1, 4, n))
    return probs, labels


def test_the_smooth_diagram_draws_a_panel_per_run_and_no_curve_where_there_are_no_predictions():
    """The quick store's fine-tuning curve lay flat at accuracy 0 up to confidence 0.67, where it made
    no predictions, and six runs' bands on one plot hid one another."""
    from peftviz.calibration import estimators

    curves = {
        name: estimators.smooth_reliability(*confident_run(seed=i), n_resamples=10, seed=i)
        for i, name in enumerate(["prefix-tuning", "lora", "bitfit", "ia3"])
    }
    fig = calibration.smooth_reliability_figure(curves, "smooth", "95% bootstrap")
    assert [a.text for a in fig.layout.annotations] == [
        f"{name}<br>smECE {diagram.smooth_ece:.4f}" for name, diagram in curves.items()
    ]
    for name, diagram in curves.items():
        curve = trace(fig, f"{name} (smECE {diagram.smooth_ece:.4f})")
        drawn = np.array([np.nan if y is None else y for y in curve.y], dtype=float)
        mesh = np.asarray(curve.x)
        assert np.isnan(drawn[mesh < 0.6]).all()  # no prediction below 0.8: nothing drawn there
        assert np.isfinite(drawn[(mesh > 0.85) & (mesh < 0.95)]).all()
        band = [t for t in fig.data if t.name.startswith(f"{name} 95%")]
        assert band and all(0 <= y <= 1 for t in band for y in t.y)  # accuracy's band stays in [0, 1]
        density = trace(fig, f"{name} density")
        assert density.yaxis != curve.yaxis and density.xaxis == curve.xaxis  # its panel's second axis
    for name, diagram in curves.items():  # each density to its own peak: one run's spike at 1 hid the others'
        secondary = fig.layout[trace(fig, f"{name} density").yaxis.replace("y", "yaxis")]
        assert secondary.range[1] == pytest.approx(diagram.density.max() / calibration.DENSITY_SHARE)
        assert not secondary.visible and not secondary.matches
    assert len({(t.xaxis, t.yaxis) for t in fig.data if t.name.endswith(")")}) == 4  # a panel each
    # four panels in rows of three: the first row's third panel ends its column, with ticks and title;
    # the two empty cells under it and beside the fourth draw nothing
    assert fig.layout.xaxis3.showticklabels and fig.layout.xaxis3.title.text == "confidence"
    assert fig.layout.xaxis5.visible is False and fig.layout.yaxis9.visible is False


def test_the_ece_axis_is_set_from_what_is_drawn():
    """Matched axes with autorange unset are not autoranged by plotly.js: it drew ECE 0.002–0.125 on 0 to 4."""
    frame = curves(["a", "b", "c", "d"])
    frame["members"], frame["seeds"] = [[0.2, 0.01]] * len(frame), [[0, 1]] * len(frame)  # a seed's line at 0.2
    fig = calibration.ece_over_epochs_figure(frame, "width", 10, "band", epoch=2)
    for axis in (fig.layout.yaxis, fig.layout.yaxis4):
        assert list(axis.range) == pytest.approx([0, 0.2 * 1.1])
    assert fig.layout.title.yanchor == "bottom" and fig.layout.title.automargin  # above the panels' titles


def test_rows_of_panels_are_respaced_in_pixels():
    from plotly.subplots import make_subplots

    from peftviz.figures.layout import respace_rows

    fig = make_subplots(rows=3, cols=2, subplot_titles=list("abcdef"), row_heights=[0.5, 0.25, 0.25])
    respace_rows(fig, plot_px=400, gap_px=60)
    rows = sorted({tuple(fig.layout[f"yaxis{i}"].domain) for i in ("", 3, 5)}, reverse=True)
    gaps = [upper[0] - lower[1] for upper, lower in itertools.pairwise(rows)]
    assert gaps == pytest.approx([60 / 400] * 2)  # 60 px each
    heights = [high - low for low, high in rows]
    assert heights[0] == pytest.approx(2 * heights[1]) and rows[0][1] == 1 and rows[-1][0] == pytest.approx(0)
    assert sorted({a.y for a in fig.layout.annotations}) == pytest.approx(sorted(high for _, high in rows))


def test_a_box_plots_csv_holds_its_quartiles_not_an_empty_y():
    from peftviz.figures.export import figure_table

    rows = [{"layer": 0, "head": None, "q05": 0.0, "q25": 0.01, "median": 0.02, "q75": 0.03, "q95": 0.05, "mean": 0.02}]
    table = figure_table(kernel.lambda_figure(rows, alpha=0.01, title="λ(C) per layer · run", grid=(1e-3, 4e-2)))
    assert list(table.columns) == ["trace", "point", "x", "lowerfence", "q1", "median", "q3", "upperfence", "mean"]
    assert table.iloc[0][["lowerfence", "q1", "median", "q3", "upperfence"]].tolist() == [0.0, 0.01, 0.02, 0.03, 0.05]
    assert len(table) == 1  # the legend-only entries (the α grid, the run's α) draw no point


def test_the_alpha_panels_fit_their_points_inside_zero_to_one():
    """Points of one value: plotly's autorange drew accuracy from -0.5."""
    trained = [
        {"alpha": a, "accuracy": 0.233, "ece": 0.0209, "label": "k", "run": "k", "group": "g", "learned_alpha": None}
        for a in (1e-3, 1e-2, 4e-2)
    ]
    fig = kernel.alpha_figure(None, trained)
    assert list(fig.layout.yaxis.range) == pytest.approx([0.223, 0.243])
    assert list(fig.layout.yaxis2.range) == pytest.approx([0.0109, 0.0309])
    near_one = [{**row, "accuracy": 0.999} for row in trained]
    assert kernel.alpha_figure(None, near_one).layout.yaxis.range[1] == 1.0


def test_a_bar_drawn_from_a_base_has_its_top_in_the_csv():
    """A gap bar runs from a bin's accuracy to its confidence: the CSV holds both ends, not only base and length."""
    from peftviz.figures.export import figure_table

    table = figure_table(calibration.reliability_figure(TABLE))
    over = table[table["trace"] == calibration.OVER_NAME].dropna(subset=["y"])
    assert over["top"].tolist() == pytest.approx([0.65]) and over["base"].tolist() == pytest.approx([0.4])
