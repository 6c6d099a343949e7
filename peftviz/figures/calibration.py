"""Figures of the Calibration page, built from `peftviz.analysis.calibration`'s tables.

A reliability diagram here has two rows sharing the x axis:

* top: per bin, a bar of accuracy (traces named "accuracy") that always reaches the bin's
  accuracy; beside it, a thin bar from the accuracy to the bin's mean confidence, red when the
  bin is over-confident (confidence above accuracy) and hatched teal when under-confident; and
  the reference acc = conf ("perfect calibration");
* bottom: how many examples fall in each bin ("count"), so a large gap over a nearly empty bin
  reads as what it is.

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

from peftviz.analysis.calibration import RECALIBRATION_NAMES, SCHEME_NAMES, Recalibration, table_ece
from peftviz.estimators import SmoothDiagram
from peftviz.figures.palette import Series, color, series_of, translucent

ACCURACY_COLOR = "#4c78a8"
OVER_COLOR = "#d62728"  # confidence above accuracy: the common failure, in red
UNDER_COLOR = "#17a2a2"  # accuracy above confidence, hatched so it differs in more than hue
COUNT_COLOR = "#9d9da1"
ACCURACY_SHARE, GAP_SHARE = 0.66, 0.28  # of a bin's width: the accuracy bar, then the gap bar beside it
OVER_NAME = "over-confidence (conf > acc)"
UNDER_NAME = "under-confidence (acc > conf)"
UNIT_RANGE = [-0.02, 1.02]  # [0, 1] and a little more, so the end ticks and bars are not cut
MAX_RANK_TICKS = 6
PANEL_COLUMNS = 3  # small multiples per row
# several runs' bands overlap on one plot: a legend entry hides its run's line, band and density
LEGEND_HINT = "click: hide · double-click: show alone"


def caption(table: pd.DataFrame) -> str:
    """What a reader needs next to a diagram: N, the binning and the ECE it implies."""
    n = int(table["count"].sum())
    split = "test" if table["epoch"].iloc[0] == "test" else "validation"
    scheme = SCHEME_NAMES[table["scheme"].iloc[0]]
    return f"N = {n} {split} examples · {len(table)} {scheme} bins · ECE = {table_ece(table):.4f}"


def _where(table: pd.DataFrame) -> str:
    epoch = table["epoch"].iloc[0]
    return "test" if epoch == "test" else f"epoch {epoch}"


def _short_caption(table: pd.DataFrame) -> str:
    """The caption in two short lines, so it fits a chart a third of the page wide."""
    n = int(table["count"].sum())
    split = "test" if table["epoch"].iloc[0] == "test" else "validation"
    bins = f"{len(table)} {SCHEME_NAMES[table['scheme'].iloc[0]]} bins"
    return f"N = {n} {split} · {bins}<br>ECE = {table_ece(table):.4f}"


def _on_rank_axis(table: pd.DataFrame) -> bool:
    return table["scheme"].iloc[0] == "mass"


def _bin_positions(table: pd.DataFrame) -> tuple[list[float], list[float]]:
    """Each bin's left edge and width on the x axis: its confidence interval, or its rank (width 1)."""
    if _on_rank_axis(table):
        return [b - 0.5 for b in range(len(table))], [1.0] * len(table)
    return table["lower"].tolist(), (table["upper"] - table["lower"]).tolist()


def _bars(name, left, widths, y, color, custom, legend, share=1.0, shift=0.0, base=None, **style) -> go.Bar:
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
        hovertemplate="conf %{customdata[0]:.4f} · acc %{customdata[1]:.4f} · n %{customdata[2]}<extra></extra>",
        **legend,
        **style,
    )


def _only(values: pd.Series, keep: pd.Series) -> list:
    """values where keep holds, None elsewhere (no bar)."""
    return [float(v) if k else None for v, k in zip(values, keep)]


def _add_reliability(fig: go.Figure, table: pd.DataFrame, col: int = 1, showlegend: bool = True) -> None:
    """Accuracy, gap bars, the reference and the count bars of one diagram, in column `col`."""
    left, widths = _bin_positions(table)
    custom = table[["confidence", "accuracy", "count"]].to_numpy().tolist()
    legend = {"showlegend": showlegend, "legendgroup": "diagram"}
    accuracy, confidence = table["accuracy"], table["confidence"]
    over, under = confidence > accuracy, accuracy > confidence  # NaN (an empty bin) is neither
    gap_bar = {"share": GAP_SHARE, "shift": ACCURACY_SHARE + 0.02, "custom": custom, "legend": legend}
    top = {"row": 1, "col": col}
    fig.add_trace(_bars("accuracy", left, widths, accuracy.tolist(), ACCURACY_COLOR, custom, legend,
                        share=ACCURACY_SHARE), **top)  # fmt: skip
    fig.add_trace(_bars(OVER_NAME, left, widths, _only(confidence - accuracy, over), OVER_COLOR,
                        base=_only(accuracy, over), **gap_bar), **top)  # fmt: skip
    fig.add_trace(_bars(UNDER_NAME, left, widths, _only(accuracy - confidence, under), "white",
                        base=_only(confidence, under), marker_line={"color": UNDER_COLOR, "width": 1},
                        marker_pattern={"shape": "/", "fgcolor": UNDER_COLOR, "solidity": 0.5}, **gap_bar), **top)  # fmt: skip
    if _on_rank_axis(table):  # the level each bar should reach: its bin's mean confidence
        reference = {"x": list(range(len(table))), "y": confidence.tolist(), "mode": "lines+markers"}
    else:
        reference = {"x": [0, 1], "y": [0, 1], "mode": "lines"}
    fig.add_trace(go.Scatter(**reference, name="perfect calibration", line={"dash": "dash", "color": "gray"},
                             marker={"size": 4}, hoverinfo="skip", **legend), **top)  # fmt: skip
    fig.add_trace(_bars("count", left, widths, table["count"].tolist(), COUNT_COLOR, custom, legend),
                  row=2, col=col)  # fmt: skip


def _x_axis(table: pd.DataFrame) -> dict:
    """Confidence from 0 to 1 with a margin; for equal-mass bins, their ranks labelled with mean confidence."""
    if not _on_rank_axis(table):
        return {"range": UNIT_RANGE, "title_text": "confidence (top-label probability)"}
    n = len(table)
    shown = list(range(0, n, math.ceil(n / MAX_RANK_TICKS)))
    labels = [f"{value:.3f}" if math.isfinite(value) else "" for value in table["confidence"].iloc[shown]]
    return {"range": [-0.6, n - 0.4], "tickvals": shown, "ticktext": labels,
            "title_text": "equal-mass bins by rank; tick: mean confidence"}  # fmt: skip


def _diagram_layout(fig: go.Figure, title: str, tables: list[pd.DataFrame], top: int = 100) -> go.Figure:
    fig.update_layout(
        title={"text": title, "font_size": 14},
        barmode="overlay",
        bargap=0,
        height=480,
        margin={"t": top, "b": 40, "l": 50, "r": 20},
        legend={"orientation": "h", "y": -0.18, "yanchor": "top"},
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


def reliability_figure(table: pd.DataFrame) -> go.Figure:
    """One run's reliability diagram with its confidence histogram; the title names run and epoch."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06)
    _add_reliability(fig, table)
    title = f"{table['run'].iloc[0]} · {_where(table)}<br><sup>{_short_caption(table)}</sup>"
    return _diagram_layout(fig, title, [table])


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
    return _diagram_layout(fig, title, [result.before_bins, result.after_bins], top=120)


def ece_over_epochs_figure(curves: pd.DataFrame, scheme: str, n_bins: int, band: str, epoch: int | None = None,
                           series: dict[str, Series] | None = None) -> go.Figure:  # fmt: skip
    """Small multiples: one panel per run or group (rows of analysis.ece_over_epochs or
    group_ece_over_epochs, concatenated), on shared axes, each its line over its band; a group's
    seeds as thin dotted lines in shades of its colour. `band` says what the band is.

    One panel each because six translucent bands on one plot blend into one another; shared axes
    keep the panels comparable. `series`: name -> Series, for the palette's colours. `epoch`,
    when given, is marked with a vertical line in every panel.
    """
    names = list(dict.fromkeys(curves["run"]))
    columns = min(len(names), PANEL_COLUMNS)
    rows_needed = math.ceil(len(names) / columns)
    fig = make_subplots(rows=rows_needed, cols=columns, shared_xaxes="all", shared_yaxes="all", subplot_titles=names,
                        horizontal_spacing=0.05, vertical_spacing=0.22 / rows_needed)  # fmt: skip
    for index, name in enumerate(names):
        where = {"row": index // columns + 1, "col": index % columns + 1}
        rows = curves[curves["run"] == name]
        who = series_of(name, series)
        line_color = color(who)
        epochs = rows["epoch"].tolist()
        _band(fig, epochs, rows["low"], rows["high"], line_color, name, where)
        fig.add_trace(go.Scatter(x=epochs, y=rows["ece"].tolist(), mode="lines+markers", name=name,
                                 line={"color": line_color}, legendgroup=name), **where)  # fmt: skip
        members = rows["members"].tolist() if "members" in rows else []
        seeds = rows["seeds"].iloc[0] if members else []
        for seed, values in zip(seeds, zip(*members)):
            shade = color(Series(who.method, who.variant, seed))
            fig.add_trace(go.Scatter(x=epochs, y=list(values), mode="lines", line={"color": shade, "width": 1, "dash": "dot"},
                                     name=f"{name} seed {seed}", legendgroup=name, showlegend=False), **where)  # fmt: skip
    if epoch is not None:
        fig.add_vline(x=epoch, line={"dash": "dot", "color": "gray"}, row="all", col="all")
    fig.update_layout(
        title=f"ECE per epoch ({n_bins} {SCHEME_NAMES[scheme]} bins)<br><sup>band: {band}</sup>",
        height=110 + 230 * rows_needed,
        margin={"t": 90, "r": 20},
        showlegend=False,  # each panel's title names it
    )
    epochs = curves["epoch"]  # a margin either side, so the first and last markers are whole
    fig.update_xaxes(dtick=1, range=[epochs.min() - 0.15, epochs.max() + 0.15], automargin=True)
    fig.update_yaxes(rangemode="tozero", automargin=True)
    fig.update_xaxes(title_text="epoch", row=rows_needed)
    fig.update_yaxes(title_text="ECE", col=1)
    return fig


# ---------------------------------------------------------------- smooth reliability diagrams


def _band(fig: go.Figure, x, low, high, color: str, name: str, where: dict | None = None) -> None:
    """An invisible upper edge, then the lower edge filled up to it: a shaded band (in subplot `where`)."""
    where = where or {}
    group = {"legendgroup": name, "hoverinfo": "skip", "showlegend": False}
    fig.add_trace(go.Scatter(x=list(x), y=list(high), mode="lines", line={"width": 0}, name=f"{name} 95% high",
                             **group), **where)  # fmt: skip
    fig.add_trace(go.Scatter(x=list(x), y=list(low), mode="lines", line={"width": 0}, fill="tonexty",
                             fillcolor=translucent(color), name=f"{name} 95% low", **group), **where)  # fmt: skip


def smooth_reliability_figure(curves: dict[str, SmoothDiagram], title: str, band: str,
                              series: dict[str, Series] | None = None) -> go.Figure:  # fmt: skip
    """relplot's kernel-smoothed reliability curves (one per run), each over its band, with the diagonal;
    below, the density of the confidences. `band` says what the band is, for the subtitle; `series`:
    name -> Series, for the palette's colours."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06)
    for name, diagram in curves.items():
        line_color = color(series_of(name, series))
        _band(fig, diagram.mesh, diagram.lower, diagram.upper, line_color, name, {"row": 1, "col": 1})
        fig.add_trace(go.Scatter(x=diagram.mesh.tolist(), y=diagram.curve.tolist(), mode="lines",
                                 line={"color": line_color}, name=f"{name} (smECE {diagram.smooth_ece:.4f})",
                                 legendgroup=name), row=1, col=1)  # fmt: skip
        fig.add_trace(go.Scatter(x=diagram.mesh.tolist(), y=diagram.density.tolist(), mode="lines", showlegend=False,
                                 line={"color": line_color, "width": 1}, name=f"{name} density", legendgroup=name),
                      row=2, col=1)  # fmt: skip
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration",
                             line={"dash": "dash", "color": "gray"}, hoverinfo="skip"), row=1, col=1)  # fmt: skip
    fig.update_layout(title=f"{title}<br><sup>band: {band}</sup>", height=480, margin={"t": 80, "b": 40, "r": 20},
                      legend={"orientation": "h", "y": -0.15, "yanchor": "top", "title_text": LEGEND_HINT})  # fmt: skip
    fig.update_yaxes(title_text="accuracy (smoothed)", range=UNIT_RANGE, row=1, col=1)
    fig.update_yaxes(title_text="density", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(range=UNIT_RANGE, automargin=True)
    fig.update_xaxes(title_text="confidence (top-label probability)", row=2, col=1)
    fig.update_yaxes(automargin=True)
    return fig


# ---------------------------------------------------------------- pairwise differences


def _coloured(name: str, series: dict[str, Series] | None) -> str:
    return f"<span style='color:{color(series_of(name, series))}'>{name}</span>"


def differences_figure(pairs: pd.DataFrame, metric: str, heading: str,
                       series: dict[str, Series] | None = None) -> go.Figure:  # fmt: skip
    """A forest plot: per pair of units, A − B in `metric` with its 95% interval; significant pairs
    (after Holm) filled, the others hollow; the zero line is "no difference". Each name in the
    pair labels is written in its palette colour (`series`: name -> Series); the data keep plain names."""
    rows = pairs[pairs["metric"] == metric].iloc[::-1]  # first pair on top
    labels = (rows["a"] + " − " + rows["b"]).tolist()
    significant = rows["significant"].tolist()
    fig = go.Figure(go.Scatter(
        x=rows["difference"].tolist(), y=labels, mode="markers", name=f"{heading}: A − B",
        error_x={"type": "data", "symmetric": False, "array": (rows["high"] - rows["difference"]).tolist(),
                 "arrayminus": (rows["difference"] - rows["low"]).tolist()},
        marker={"symbol": ["circle" if s else "circle-open" for s in significant], "size": 10, "color": ACCURACY_COLOR},
        customdata=np.column_stack([rows["p"], rows["p_holm"]]).tolist(),
        hovertemplate="%{y}: %{x:.4f}<br>p = %{customdata[0]:.3g}, Holm %{customdata[1]:.3g}<extra></extra>",
    ))  # fmt: skip
    fig.add_vline(x=0, line={"dash": "dash", "color": "gray"})
    ticks = [f"{_coloured(a, series)} − {_coloured(b, series)}" for a, b in zip(rows["a"], rows["b"])]
    fig.update_layout(title=f"{heading}: differences between methods<br><sup>95% intervals; filled: significant "
                            f"at 5% after Holm's correction over {len(rows)} pairs</sup>",
                      xaxis={"title": f"{heading} of A − {heading} of B", "automargin": True},
                      yaxis={"tickmode": "array", "tickvals": labels, "ticktext": ticks, "automargin": True},
                      height=max(260, 80 + 36 * len(rows)), margin={"t": 80, "l": 10, "r": 20})  # fmt: skip
    return fig
