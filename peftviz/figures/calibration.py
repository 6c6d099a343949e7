"""Figures of the Calibration page, built from `peftviz.analysis.calibration`'s tables.

A reliability diagram here has two rows sharing the x axis:

* top: per bin, a bar of accuracy (traces named "accuracy") that always reaches the bin's
  accuracy; beside it, a thin bar from the accuracy to the bin's mean confidence, red when the
  bin is over-confident (confidence above accuracy) and hatched teal when under-confident; and
  the reference acc = conf ("perfect calibration");
* bottom: how many examples fall in each bin ("count"), so a large gap over a nearly empty bin
  reads as what it is.

On a single run's diagram (`reliability_figure`) each accuracy bar carries a whisker: the 95% Wilson
interval of the bin's accuracy, k_b hits of n_b predictions (the table's accuracy_low, accuracy_high).
`classwise_figure` draws the one-vs-rest diagrams of every class as small multiples.

Equal-width bins sit on a confidence axis from 0 to 1 (each bar spans its bin). Equal-mass bins of
a trained model crowd near confidence 1, so they sit on a rank axis instead: bin 1 … n in order of
confidence, equally wide, each tick labelled with its bin's mean confidence, and the reference is
the line through each bin's mean confidence. Data go to plotly as plain lists, so the figure's JSON
holds readable numbers (NaN, an empty bin, becomes null).

Lines that stand for a run or a group take their colour from `palette`: one colour per method on
every page, whatever else is selected.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from peftviz.analysis.calibration import (
    MIN_BAND_SEEDS,
    RECALIBRATION_NAMES,
    SCHEME_NAMES,
    GroupDiagram,
    Recalibration,
    table_ece,
)
from peftviz.calibration import stats
from peftviz.calibration.estimators import SmoothDiagram
from peftviz.figures.layout import respace_rows, title_over_plot
from peftviz.figures.palette import Series, color, series_of, translucent

ACCURACY_COLOR = "#4c78a8"
OVER_COLOR = "#d62728"  # confidence above accuracy: the common failure, in red
UNDER_COLOR = "#17a2a2"  # accuracy above confidence, hatched so it differs in more than hue
COUNT_COLOR = "#9d9da1"
WHISKER_COLOR = "#2b2b2b"
ACCURACY_SHARE, GAP_SHARE = 0.66, 0.28  # of a bin's width: the accuracy bar, then the gap bar beside it
OVER_NAME = "over-confident (conf > acc)"
UNDER_NAME = "under-confident (acc > conf)"
LEGEND_PX = 64  # the legend's rows under a diagram: two in a column a third of the page wide
UNIT_RANGE = [-0.02, 1.02]  # [0, 1] and a little more, so the end ticks and bars are not cut
MAX_RANK_TICKS = 6
PANEL_COLUMNS = 3  # small multiples per row
PANEL_TITLE_PX = 40  # a panel title's two lines
PANEL_GAP_PX = PANEL_TITLE_PX + 12  # between rows of panels
PANEL_TOP_PX = 130  # above the first row: the title (up to three lines) and the first row's panel titles
PANEL_MARGIN = {"t": 10, "b": 60, "l": 60, "r": 20}  # the title pushes the top margin out as far as it needs
SUBTITLE_CHARS = 110  # a subtitle line of a full-width figure: ~160 characters fill it at 1280 px (Chromium)
DENSITY_COLOR = "rgba(128, 128, 128, 0.45)"
DENSITY_SHARE = 0.25  # the density's peak reaches a quarter of the way up a smooth diagram's panel
CLASS_PANEL_PX = 230  # a classwise diagram's panel
MIN_COUNT_WIDTH = 0.01  # a count bar of equal-mass bins of nearly equal confidences, still visible
HOVER = "conf %{customdata[0]:.4f} · acc %{customdata[1]:.4f} · n %{customdata[2]}<extra></extra>"
HOVER_INTERVAL = (
    "conf %{customdata[0]:.4f} · acc %{customdata[1]:.4f} [%{customdata[3]:.4f}, %{customdata[4]:.4f}]"
    " · n %{customdata[2]}<extra></extra>"
)


def caption(table: pd.DataFrame) -> str:
    """What a reader needs next to a diagram: N, the binning and the ECE it implies."""
    n = int(table["count"].sum())
    split = "test" if table["epoch"].iloc[0] == "test" else "validation"
    scheme = SCHEME_NAMES[table["scheme"].iloc[0]]
    return f"N = {n} {split} examples · {len(table)} {scheme} bins · ECE = {table_ece(table):.4f}"


def _where(table: pd.DataFrame) -> str:
    epoch = table["epoch"].iloc[0]
    return "test" if epoch == "test" else f"epoch {epoch}"


def interval_note(level: float = stats.LEVEL) -> str:
    """What a diagram's whiskers are, for the caption under it."""
    return f"Whiskers: {level:.0%} Wilson interval of each bin's accuracy (n_b predictions)."


def _short_caption(table: pd.DataFrame, level: float) -> str:
    """The caption in two short lines, so it fits a chart a third of the page wide."""
    n = int(table["count"].sum())
    split = "test" if table["epoch"].iloc[0] == "test" else "validation"
    bins = f"{len(table)} {SCHEME_NAMES[table['scheme'].iloc[0]]} bins"
    return f"N = {n} {split} · {bins}<br>ECE = {table_ece(table):.4f} · whiskers: {level:.0%} Wilson"


def _on_rank_axis(table: pd.DataFrame) -> bool:
    return table["scheme"].iloc[0] == "mass"


def _bin_positions(table: pd.DataFrame) -> tuple[list[float], list[float]]:
    """Each bin's left edge and width on the x axis: its confidence interval, or its rank (width 1)."""
    if _on_rank_axis(table):
        return [b - 0.5 for b in range(len(table))], [1.0] * len(table)
    return table["lower"].tolist(), (table["upper"] - table["lower"]).tolist()


def _bars(
    name, left, widths, y, color, custom, legend, share=1.0, shift=0.0, base=None, hover=HOVER, **style
) -> go.Bar:
    """Bars from each bin's left edge + shift·width, share·width wide, with the bins' hover."""
    return go.Bar(
        x=[edge + width / 2 for edge, width in zip(left, widths)],  # the bin's centre, for hover and CSV
        offset=[(shift - 0.5) * width for width in widths],
        width=[share * width for width in widths],
        y=y,
        base=base,
        name=name,
        marker_color=color,
        customdata=custom,
        hovertemplate=hover,
        **legend,
        **style,
    )


def _only(values, keep) -> list:
    """values where keep holds, None elsewhere (no bar, a gap in a line); Series or arrays."""
    return [float(v) if k else None for v, k in zip(values, keep)]


def whiskers(table: pd.DataFrame) -> dict:
    """plotly's error_y from each bin's accuracy down to accuracy_low and up to accuracy_high (None
    for an empty bin)."""
    accuracy, filled = table["accuracy"], table["count"] > 0
    return {
        "type": "data",
        "symmetric": False,
        "array": _only(table["accuracy_high"] - accuracy, filled),
        "arrayminus": _only(accuracy - table["accuracy_low"], filled),
        "color": WHISKER_COLOR,
        "thickness": 1.2,
        "width": 3,
    }


def _add_gaps(fig: go.Figure, table: pd.DataFrame, left, widths, gap_bar: dict, top: dict) -> None:
    """The gap between each bin's confidence and its accuracy: filled above the accuracy bar where the bin is
    overconfident, hatched where it is underconfident."""
    accuracy, confidence = table["accuracy"], table["confidence"]
    over, under = confidence > accuracy, accuracy > confidence  # NaN (an empty bin) is neither
    over_bars = _bars(
        OVER_NAME, left, widths, _only(confidence - accuracy, over), OVER_COLOR, base=_only(accuracy, over), **gap_bar
    )
    under_bars = _bars(
        UNDER_NAME,
        left,
        widths,
        _only(accuracy - confidence, under),
        "white",
        base=_only(confidence, under),
        marker_line={"color": UNDER_COLOR, "width": 1},
        marker_pattern={"shape": "/", "fgcolor": UNDER_COLOR, "solidity": 0.5},
        **gap_bar,
    )
    fig.add_trace(over_bars, **top)
    fig.add_trace(under_bars, **top)


def _add_reliability(
    fig: go.Figure, table: pd.DataFrame, col: int = 1, showlegend: bool = True, intervals: bool = False
) -> None:
    """Accuracy, gap bars, the reference and the count bars of one diagram, in column `col`;
    `intervals`: each accuracy bar with its whisker (`whiskers`)."""
    left, widths = _bin_positions(table)
    custom = table[["confidence", "accuracy", "count"]].to_numpy().tolist()
    legend = {"showlegend": showlegend, "legendgroup": "diagram"}
    accuracy, confidence = table["accuracy"], table["confidence"]
    gap_bar = {"share": GAP_SHARE, "shift": ACCURACY_SHARE + 0.02, "custom": custom, "legend": legend}
    top = {"row": 1, "col": col}
    if intervals:
        bounds = table[["confidence", "accuracy", "count", "accuracy_low", "accuracy_high"]].to_numpy().tolist()
        accuracy_style = {"custom": bounds, "hover": HOVER_INTERVAL, "error_y": whiskers(table)}
    else:
        accuracy_style = {"custom": custom}
    fig.add_trace(
        _bars(
            "accuracy",
            left,
            widths,
            accuracy.tolist(),
            ACCURACY_COLOR,
            legend=legend,
            share=ACCURACY_SHARE,
            **accuracy_style,
        ),
        **top,
    )
    _add_gaps(fig, table, left, widths, gap_bar, top)
    if _on_rank_axis(table):  # the level each bar should reach: its bin's mean confidence
        reference = {"x": list(range(len(table))), "y": confidence.tolist(), "mode": "lines+markers"}
    else:
        reference = {"x": [0, 1], "y": [0, 1], "mode": "lines"}
    fig.add_trace(
        go.Scatter(
            **reference,
            name="perfect calibration",
            line={"dash": "dash", "color": "gray"},
            marker={"size": 4},
            hoverinfo="skip",
            **legend,
        ),
        **top,
    )
    fig.add_trace(_bars("count", left, widths, table["count"].tolist(), COUNT_COLOR, custom, legend), row=2, col=col)


def _x_axis(table: pd.DataFrame) -> dict:
    """Confidence from 0 to 1 with a margin; for equal-mass bins, their ranks labelled with mean confidence."""
    if not _on_rank_axis(table):
        return {"range": UNIT_RANGE, "title_text": "confidence (top-label probability)"}
    n = len(table)
    shown = list(range(0, n, math.ceil(n / MAX_RANK_TICKS)))
    labels = [f"{value:.3f}" if math.isfinite(value) else "" for value in table["confidence"].iloc[shown]]
    return {
        "range": [-0.6, n - 0.4],
        "tickvals": shown,
        "ticktext": labels,
        "title_text": "equal-mass bins by rank; tick: mean confidence",
    }


def _diagram_layout(fig: go.Figure, title: str, tables: list[pd.DataFrame]) -> go.Figure:
    title_over_plot(fig, title, PANEL_TITLE_PX / 2 if fig.layout.annotations else 0)  # clear of 1-line panel titles
    fig.update_layout(
        title_font_size=14,
        barmode="overlay",
        bargap=0,
        height=480 + LEGEND_PX,
        margin={"b": 40 + LEGEND_PX, "l": 50, "r": 20},  # the top: title_over_plot's
        # anchored to the figure's bottom edge, in a margin of its own, so however many rows the
        # legend wraps into in a narrow column, it stays clear of the x axis's title
        legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0},
    )
    for col, table in enumerate(tables, start=1):
        axis = _x_axis(table)
        fig.update_yaxes(title_text="accuracy" if col == 1 else None, range=UNIT_RANGE, row=1, col=col)
        fig.update_yaxes(title_text="count" if col == 1 else None, row=2, col=col)
        fig.update_xaxes({k: v for k, v in axis.items() if k != "title_text"}, row=1, col=col)
        fig.update_xaxes(axis, row=2, col=col)
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig


def reliability_figure(table: pd.DataFrame, level: float = stats.LEVEL) -> go.Figure:
    """One run's reliability diagram with its confidence histogram, each bin's accuracy with its Wilson
    interval at `level` (the table's, see analysis.wilson_interval); the title names run and epoch."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06)
    _add_reliability(fig, table, intervals=True)
    title = f"{table['run'].iloc[0]} · {_where(table)}<br><sup>{_short_caption(table, level)}</sup>"
    return _diagram_layout(fig, title, [table])


def classwise_figure(table: pd.DataFrame, level: float = stats.LEVEL) -> go.Figure:
    """One run's one-vs-rest reliability diagrams (rows of analysis.classwise_table), a panel per class k
    on shared axes: per bin, the fraction of its predictions that are class k against their mean p_k,
    with its Wilson interval at `level` (the table's); the diagonal; in grey along the bottom, the
    predictions per bin (the most a quarter of the way up, in every panel). A panel's title: the class,
    its examples n_k and its ECE; the figure's: the classwise ECE, the mean of the classes' ECEs."""
    names = list(dict.fromkeys(table["class"]))
    per_class = [table[table["class"] == name] for name in names]
    titles = [
        f"{name}<br>n = {int(rows['hits'].sum())} · ECE {table_ece(rows):.4f}" for name, rows in zip(names, per_class)
    ]
    first = per_class[0]
    split = "test" if first["epoch"].iloc[0] == "test" else "validation"
    classwise_ece = float(np.mean([table_ece(rows) for rows in per_class]))
    title = (
        f"{first['run'].iloc[0]} · {_where(first)} · one-vs-rest per class<br><sup>N = {int(first['count'].sum())} "
        f"{split} · {len(first)} {SCHEME_NAMES[first['scheme'].iloc[0]]} bins of p_k · classwise ECE = "
        f"{classwise_ece:.4f}<br>dots: fraction of class k in the bin · whiskers: {level:.0%} Wilson interval "
        "(n_b predictions) · grey: n_b</sup>"
    )
    fig, panels = panel_grid(titles, CLASS_PANEL_PX, title, "p_k, predicted probability of class k", secondary_y=True)
    for panel, rows in zip(titles, per_class):
        _add_class_diagram(fig, rows, panels[panel])
    fig.update_yaxes(range=UNIT_RANGE, automargin=True, secondary_y=False)
    counts_scale = float(table["count"].max()) / DENSITY_SHARE  # scaled as UNIT_RANGE: the bars start at its 0
    fig.update_yaxes(range=[end * counts_scale for end in UNIT_RANGE], visible=False, secondary_y=True)
    fig.update_xaxes(range=UNIT_RANGE, automargin=True)
    fig.update_yaxes(title_text="fraction of class k", col=1, secondary_y=False)
    return fig


def _add_class_diagram(fig: go.Figure, rows: pd.DataFrame, where: dict) -> None:
    """One class's panel of `classwise_figure`: count bars over each bin's edges, then the diagonal and
    each bin's frequency of the class at its mean p_k, with whiskers."""
    filled = rows["count"] > 0
    widths = np.maximum((rows["upper"] - rows["lower"]).to_numpy(), MIN_COUNT_WIDTH)
    bounds = rows[["confidence", "accuracy", "count", "accuracy_low", "accuracy_high"]].to_numpy().tolist()
    fig.add_trace(
        go.Bar(
            x=((rows["lower"] + rows["upper"]) / 2).tolist(),
            y=_only(rows["count"], filled),
            width=widths.tolist(),
            marker_color=DENSITY_COLOR,
            name="count",
            customdata=bounds,
            hovertemplate=HOVER,
        ),
        secondary_y=True,
        **where,
    )
    fig.add_trace(
        go.Scatter(
            x=[0, 1],
            y=[0, 1],
            mode="lines",
            name="perfect calibration",
            hoverinfo="skip",
            line={"dash": "dash", "color": "gray", "width": 1},
        ),
        secondary_y=False,
        **where,
    )
    fig.add_trace(
        go.Scatter(
            x=_only(rows["confidence"], filled),
            y=_only(rows["accuracy"], filled),
            mode="lines+markers",
            name="frequency",
            marker={"color": ACCURACY_COLOR, "size": 6},
            line={"color": ACCURACY_COLOR, "width": 1},
            error_y=whiskers(rows),
            customdata=bounds,
            hovertemplate=HOVER_INTERVAL,
        ),
        secondary_y=False,
        **where,
    )


def recalibration_figure(result: Recalibration) -> go.Figure:
    """Test-set reliability diagrams side by side: as trained and recalibrated (e.g. with the fitted T)."""
    titles = [  # two titles for a 2x2 grid: they go to the top row
        f"before ({'T = 1' if result.temperature is not None else 'as trained'}): ECE {result.before['ece']:.4f}",
        f"after ({result.label}): ECE {result.after['ece']:.4f}",
    ]
    fig = make_subplots(
        rows=2,
        cols=2,
        shared_xaxes=True,
        row_heights=[0.72, 0.28],
        vertical_spacing=0.06,
        horizontal_spacing=0.08,
        subplot_titles=titles,
    )
    _add_reliability(fig, result.before_bins, col=1)
    _add_reliability(fig, result.after_bins, col=2, showlegend=False)
    title = (
        f"{RECALIBRATION_NAMES[result.method].capitalize()} · {result.before_bins['run'].iloc[0]}"
        f"<br><sup>fitted on epoch {result.fitted_on_epoch} validation (N = {result.n_validation})"
        f"<br>judged on {caption(result.before_bins)}</sup>"
    )
    return _diagram_layout(fig, title, [result.before_bins, result.after_bins])


def panel_grid(names: list[str], row_px: int, title: str, x_title: str, secondary_y: bool = False) -> tuple:
    """Small multiples: a subplot per name, PANEL_COLUMNS to a row, `row_px` tall each, on shared axes,
    each titled by its name (two lines at most), under `title`; returns the figure and name -> {"row",
    "col"}. Rows are PANEL_GAP_PX apart, and the title keeps clear of the first row's panel titles.
    The last panel of each column carries the x axis's ticks and `x_title`; empty cells draw nothing."""
    columns = min(len(names), PANEL_COLUMNS)
    rows = math.ceil(len(names) / columns)
    fig, where = shared_grid(names, rows, columns, x_title, 0.05, secondary_y)
    fig.update_layout(height=PANEL_TOP_PX + PANEL_MARGIN["b"] + rows * row_px, margin=PANEL_MARGIN, showlegend=False)
    respace_rows(fig, rows * row_px, PANEL_GAP_PX)
    title_over_plot(fig, title, PANEL_TITLE_PX)
    return fig, where


def shared_grid(
    names: list[str], rows: int, columns: int, x_title: str, spacing: float, secondary_y: bool = False
) -> tuple:
    """`rows` × `columns` subplots on shared axes, one titled by each name in reading order; each column's lowest
    panel carries the x axis's ticks and `x_title`, and the empty cells under it are hidden. Returns the figure
    and name -> {"row", "col"}: what `panel_grid` and the Tour's compact grids lay out their own way."""
    fig = make_subplots(
        rows=rows,
        cols=columns,
        shared_xaxes="all",
        shared_yaxes="all",
        subplot_titles=names,
        horizontal_spacing=spacing,
        specs=[[{"secondary_y": secondary_y}] * columns] * rows,
    )
    for col in range(1, columns + 1):
        last = rows if (rows - 1) * columns + col <= len(names) else rows - 1  # the column's lowest panel
        fig.update_xaxes(showticklabels=True, title_text=x_title, row=last, col=col)
        for row in range(last + 1, rows + 1):  # an empty cell under it
            fig.update_xaxes(visible=False, row=row, col=col)
            fig.update_yaxes(visible=False, row=row, col=col)
    return fig, {name: {"row": i // columns + 1, "col": i % columns + 1} for i, name in enumerate(names)}


def _add_seed_lines(fig: go.Figure, rows: pd.DataFrame, name: str, who: Series, where: dict) -> None:
    """A group's seeds, each a thin dotted line in a shade of the group's colour (none for a single run)."""
    for seed, values in seed_lines(rows):
        shade = color(Series(who.method, who.variant, seed))
        line = go.Scatter(
            x=rows["epoch"].tolist(),
            y=list(values),
            mode="lines",
            line={"color": shade, "width": 1, "dash": "dot"},
            name=f"{name} seed {seed}",
            legendgroup=name,
            showlegend=False,
        )
        fig.add_trace(line, **where)


def ece_over_epochs_figure(
    curves: pd.DataFrame,
    scheme: str,
    n_bins: int,
    band: str,
    epoch: int | None = None,
    series: dict[str, Series] | None = None,
) -> go.Figure:
    """Small multiples: one panel per run or group (rows of analysis.ece_over_epochs or
    group_ece_over_epochs, concatenated), on shared axes, each its line over its band; a group's
    seeds as thin dotted lines in shades of its colour (`seed_lines`: a single run's rows have no
    members, NaN in a table that also holds a group's). `band` says what the band is.

    One panel each because six translucent bands on one plot blend into one another; shared axes
    keep the panels comparable. `series`: name -> Series, for the palette's colours. `epoch`,
    when given, is marked with a vertical line in every panel.

    A band below 0 (a t-interval over a few seeds can reach there) is drawn from 0, and the
    subtitle says so. The ECE axis runs from 0 to just above the highest value drawn, set here:
    the panels' y axes match one another, and matched axes with `autorange` unset are not
    autoranged by plotly.js 3, which drew its empty-axis default instead, 0 to 4 for values under 0.13.
    """
    names = list(dict.fromkeys(curves["run"]))
    cut = " (cut at 0, where ECE ends)" if (curves["low"] < 0).any() else ""
    title = f"ECE per epoch ({n_bins} {SCHEME_NAMES[scheme]} bins)<br><sup>band: {band}{cut}</sup>"
    fig, panels = panel_grid(names, 200, title, "epoch")
    for name in names:
        rows, where = curves[curves["run"] == name], panels[name]
        who = series_of(name, series)
        line_color = color(who)
        epochs = rows["epoch"].tolist()
        shaded_band(fig, epochs, rows["low"].clip(lower=0), rows["high"], line_color, name, where)  # ECE ≥ 0
        fig.add_trace(
            go.Scatter(
                x=epochs,
                y=rows["ece"].tolist(),
                mode="lines+markers",
                name=name,
                line={"color": line_color},
                legendgroup=name,
            ),
            **where,
        )
        _add_seed_lines(fig, rows, name, who, where)
    if epoch is not None:
        fig.add_vline(x=epoch, line={"dash": "dot", "color": "gray"}, row="all", col="all")
    epochs = curves["epoch"]  # a margin either side, so the first and last markers are whole
    fig.update_xaxes(dtick=1, range=[epochs.min() - 0.15, epochs.max() + 0.15], automargin=True)
    fig.update_yaxes(range=[0, _highest_drawn(curves) * 1.1], automargin=True)
    fig.update_yaxes(title_text="ECE", col=1)
    return fig


def _is_seed_list(cell) -> bool:
    """A `members` or `seeds` cell of a group's row: a list. A single run's row has none (NaN once its
    rows are concatenated with a group's)."""
    return isinstance(cell, (list, tuple, np.ndarray))


def seed_lines(rows: pd.DataFrame) -> list[tuple[int, list[float]]]:
    """(seed, its ECE at each epoch) for each seed of one panel's rows; [] for a single run's panel.
    Rows of `group_ece_over_epochs` list every seed's ECE in `members`, in the order of `seeds`."""
    if "members" not in rows or not all(map(_is_seed_list, rows["members"])):
        return []
    seeds = rows["seeds"].iloc[0]
    return [(seed, [float(members[i]) for members in rows["members"]]) for i, seed in enumerate(seeds)]


def _highest_drawn(curves: pd.DataFrame) -> float:
    """The largest finite value of the ECE lines, their bands' tops and their seeds' lines (at least 1e-3)."""
    columns = [curves[c].to_numpy(dtype=float) for c in ("ece", "high")]
    if "members" in curves:
        columns += [np.asarray(members, dtype=float) for members in curves["members"] if _is_seed_list(members)]
    values = np.concatenate([np.ravel(c) for c in columns])
    finite = values[np.isfinite(values)]
    return max(float(finite.max()) if finite.size else 0.0, 1e-3)


# ---------------------------------------------------------------- smooth reliability diagrams


def shaded_band(fig: go.Figure, x, low, high, color: str, name: str, where: dict | None = None) -> None:
    """An invisible upper edge, then the lower edge filled up to it: a shaded band (in subplot `where`)."""
    where = where or {}
    group = {"legendgroup": name, "hoverinfo": "skip", "showlegend": False}
    fig.add_trace(
        go.Scatter(x=list(x), y=list(high), mode="lines", line={"width": 0}, name=f"{name} 95% high", **group), **where
    )
    fig.add_trace(
        go.Scatter(
            x=list(x),
            y=list(low),
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=translucent(color),
            name=f"{name} 95% low",
            **group,
        ),
        **where,
    )


def _stretches(mask: np.ndarray) -> list[slice]:
    """The runs of consecutive True in `mask`, as slices."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))  # starts, then stops
    return [slice(int(start), int(stop)) for start, stop in zip(edges[::2], edges[1::2])]


DIAGONAL_LINE = {"dash": "dash", "color": "gray", "width": 1}


def _add_density(fig: go.Figure, diagram, name: str, where: dict) -> None:
    """The density of a run's confidences along the bottom of its panel, in grey as relplot draws it, on an axis
    of its own scaled to its own peak (one run's spike at 1 hid the rest)."""
    density = go.Scatter(
        x=diagram.mesh.tolist(),
        y=diagram.density.tolist(),
        mode="lines",
        fill="tozeroy",
        line={"color": DENSITY_COLOR, "width": 0.5},
        name=f"{name} density",
        hoverinfo="skip",
    )
    fig.add_trace(density, secondary_y=True, **where)
    density_axis = fig.layout[fig.data[-1].yaxis.replace("y", "yaxis")]
    density_axis.update(matches=None, range=[0, float(diagram.density.max()) / DENSITY_SHARE])


def smooth_reliability_figure(
    curves: dict[str, SmoothDiagram], title: str, band: str, series: dict[str, Series] | None = None
) -> go.Figure:
    """relplot's kernel-smoothed reliability curves as small multiples, a panel per run (six bands on
    one plot hid one another): the curve over its band and the diagonal, and along the bottom, in
    grey as relplot draws it, the density of the confidences (a quarter of the panel at the run's peak).

    The curve and band are drawn only where they rest on predictions (`SmoothDiagram.supported`):
    elsewhere the smoother has nothing to average and read as accuracy 0 where a run had no
    prediction. A band is clipped to [0, 1], where accuracy lies. `band` says what a run's band is;
    a group (`GroupDiagram`) draws its seeds' mean over the t-band of the seeds, and each seed's curve
    dotted, and below MIN_BAND_SEEDS seeds no band: too few seeds for one, the subtitle says.
    `series`: name -> Series, for the palette's colours.
    """
    titles = [f"{name}<br>smECE {diagram.smooth_ece:.4f}" for name, diagram in curves.items()]
    notes = ["dotted: each seed of a group"] if any(isinstance(d, GroupDiagram) for d in curves.values()) else []
    notes += ["dashed: perfect calibration", "grey: density of the confidences", "curve drawn where predictions are"]
    heading = f"{title}<br>{subtitle([*_band_parts(curves, band), *notes])}"
    fig, panels = panel_grid(titles, 230, heading, "confidence", secondary_y=True)
    for (name, diagram), panel in zip(curves.items(), titles):
        where, line_color = panels[panel], color(series_of(name, series))
        _add_density(fig, diagram, name, where)
        supported = diagram.supported()
        if not isinstance(diagram, GroupDiagram) or diagram.banded:
            for stretch in _stretches(supported):
                low, high = (np.clip(edge[stretch], 0, 1) for edge in (diagram.lower, diagram.upper))
                shaded_band(fig, diagram.mesh[stretch], low, high, line_color, name, where)
        _seed_curves(fig, diagram, name, series_of(name, series), supported, where)
        fig.add_trace(
            go.Scatter(
                x=diagram.mesh.tolist(),
                y=_only(diagram.curve, supported),
                mode="lines",
                line={"color": line_color},
                legendgroup=name,
                name=f"{name} (smECE {diagram.smooth_ece:.4f})",
            ),
            secondary_y=False,
            **where,
        )
        diagonal = go.Scatter(
            x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration", hoverinfo="skip", line=DIAGONAL_LINE
        )
        fig.add_trace(diagonal, secondary_y=False, **where)
    fig.update_yaxes(range=UNIT_RANGE, automargin=True, secondary_y=False)
    fig.update_yaxes(visible=False, secondary_y=True)
    fig.update_xaxes(range=UNIT_RANGE, automargin=True)
    fig.update_yaxes(title_text="accuracy", col=1, secondary_y=False)
    return fig


def _band_parts(curves: dict[str, SmoothDiagram], band: str) -> list[str]:
    """What each kind of panel's band is: a run's (`band`), a group's t-band over its seeds, or none for a
    group of fewer than MIN_BAND_SEEDS seeds; the first part says "band:"."""
    groups = [diagram for diagram in curves.values() if isinstance(diagram, GroupDiagram)]
    parts = [] if len(groups) == len(curves) else [f"one run: {band}" if groups else band]
    if any(group.banded for group in groups):
        parts.append("a group: 95% t-interval of its seeds' mean")
    if not all(group.banded for group in groups):
        parts.append(f"a group of fewer than {MIN_BAND_SEEDS} seeds: none, too few seeds for a band")
    return [f"band: {parts[0]}", *parts[1:]]


def subtitle(parts: list[str], width: int = SUBTITLE_CHARS) -> str:
    """`parts` joined with " · " into lines of at most `width` characters (a part longer stands alone), as one
    small-type subtitle under a figure's title."""
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += f" · {part}"
        else:
            lines.append(part)
    return f"<sup>{'<br>'.join(lines)}</sup>"


def _seed_curves(fig: go.Figure, diagram: SmoothDiagram, name: str, who: Series, supported, where: dict) -> None:
    """A group's seeds' own curves, thin and dotted in shades of its colour, where the group's curve is drawn."""
    if not isinstance(diagram, GroupDiagram):
        return
    for seed, curve in zip(diagram.seeds, diagram.seed_curves):
        fig.add_trace(
            go.Scatter(
                x=diagram.mesh.tolist(),
                y=_only(curve, supported),
                mode="lines",
                line={"color": color(Series(who.method, who.variant, seed)), "width": 1, "dash": "dot"},
                name=f"{name} seed {seed}",
                legendgroup=name,
                showlegend=False,
            ),
            secondary_y=False,
            **where,
        )


# ---------------------------------------------------------------- pairwise differences


def _coloured(name: str, series: dict[str, Series] | None) -> str:
    return f"<span style='color:{color(series_of(name, series))}'>{name}</span>"


def differences_figure(
    pairs: pd.DataFrame, metric: str, heading: str, series: dict[str, Series] | None = None
) -> go.Figure:
    """A forest plot: per pair of units, A − B in `metric` with its 95% interval; significant pairs
    (after Holm) filled, the others hollow; the zero line is "no difference". Each name in the
    pair labels is written in its palette colour (`series`: name -> Series); the data keep plain names."""
    rows = pairs[pairs["metric"] == metric].iloc[::-1]  # first pair on top
    labels = (rows["a"] + " − " + rows["b"]).tolist()
    significant = rows["significant"].tolist()
    fig = go.Figure(
        go.Scatter(
            x=rows["difference"].tolist(),
            y=labels,
            mode="markers",
            name=f"{heading}: A − B",
            error_x={
                "type": "data",
                "symmetric": False,
                "array": (rows["high"] - rows["difference"]).tolist(),
                "arrayminus": (rows["difference"] - rows["low"]).tolist(),
            },
            marker={
                "symbol": ["circle" if s else "circle-open" for s in significant],
                "size": 10,
                "color": ACCURACY_COLOR,
            },
            customdata=np.column_stack([rows["p"], rows["p_holm"]]).tolist(),
            hovertemplate="%{y}: %{x:.4f}<br>p = %{customdata[0]:.3g}, Holm %{customdata[1]:.3g}<extra></extra>",
        )
    )
    fig.add_vline(x=0, line={"dash": "dash", "color": "gray"})
    ticks = [f"{_coloured(a, series)} − {_coloured(b, series)}" for a, b in zip(rows["a"], rows["b"])]
    fig.update_layout(
        title=f"{heading}: differences between methods<br><sup>95% intervals; filled: significant "
        f"at 5% after Holm's correction over {len(rows)} pairs</sup>",
        xaxis={"title": f"{heading} of A − {heading} of B", "automargin": True},
        yaxis={"tickmode": "array", "tickvals": labels, "ticktext": ticks, "automargin": True},
        height=max(260, 80 + 36 * len(rows)),
        margin={"t": 80, "l": 10, "r": 20},
    )
    return fig
