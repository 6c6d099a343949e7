"""Figures of the Calibration page, built from `peftviz.analysis.calibration`'s tables.

A reliability diagram here has two rows sharing the confidence axis:

* top: per bin, a bar of accuracy (traces named "accuracy"), a translucent bar from the accuracy
  to the bin's mean confidence (the gap, "gap"), and the diagonal acc = conf ("perfect calibration");
* bottom: how many examples fall in each bin ("count"), so a large gap over a nearly empty bin
  reads as what it is.

Bars span their bin's [lower, upper] edges. Equal-mass bins can be very narrow (all their
confidences nearly equal), so no bar is drawn narrower than MIN_BAR_WIDTH. Data go to plotly
as plain lists, so the figure's JSON holds readable numbers (NaN, an empty bin, becomes null).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from peftviz.analysis.calibration import RECALIBRATION_NAMES, SCHEME_NAMES, Recalibration, table_ece
from peftviz.estimators import SmoothDiagram

MIN_BAR_WIDTH = 0.004
ACCURACY_COLOR = "#4c78a8"
GAP_COLOR = "rgba(228, 87, 86, 0.45)"
COUNT_COLOR = "#9d9da1"
PALETTE = plotly.colors.qualitative.Plotly


def caption(table: pd.DataFrame) -> str:
    """What a reader needs next to a diagram: N, the binning and the ECE it implies."""
    n = int(table["count"].sum())
    split = "test" if table["epoch"].iloc[0] == "test" else "validation"
    scheme = SCHEME_NAMES[table["scheme"].iloc[0]]
    return f"N = {n} {split} examples · {len(table)} {scheme} bins · ECE = {table_ece(table):.4f}"


def _where(table: pd.DataFrame) -> str:
    epoch = table["epoch"].iloc[0]
    return "test" if epoch == "test" else f"epoch {epoch}"


def _add_reliability(fig: go.Figure, table: pd.DataFrame, col: int = 1, showlegend: bool = True) -> None:
    """The three top-row traces, the diagonal and the count bars of one diagram, in column `col`."""
    centres = ((table["lower"] + table["upper"]) / 2).tolist()
    widths = (table["upper"] - table["lower"]).clip(lower=MIN_BAR_WIDTH).tolist()
    accuracy = table["accuracy"].tolist()
    hover = "conf %{customdata[0]:.3f} · acc %{customdata[1]:.3f} · n %{customdata[2]}<extra></extra>"
    custom = table[["confidence", "accuracy", "count"]].to_numpy().tolist()
    legend = {"showlegend": showlegend, "legendgroup": "diagram"}
    fig.add_trace(
        go.Bar(
            x=centres,
            y=accuracy,
            width=widths,
            name="accuracy",
            marker_color=ACCURACY_COLOR,
            customdata=custom,
            hovertemplate=hover,
            **legend,
        ),
        row=1,
        col=col,
    )
    # the gap bar starts at the accuracy and ends at the mean confidence: red above a bar is
    # over-confidence, red inside it under-confidence
    fig.add_trace(
        go.Bar(
            x=centres,
            y=(table["confidence"] - table["accuracy"]).tolist(),
            base=accuracy,
            width=widths,
            name="gap",
            marker_color=GAP_COLOR,
            customdata=custom,
            hovertemplate=hover,
            **legend,
        ),
        row=1,
        col=col,
    )
    fig.add_trace(
        go.Scatter(
            x=[0, 1],
            y=[0, 1],
            mode="lines",
            name="perfect calibration",
            line={"dash": "dash", "color": "gray"},
            hoverinfo="skip",
            **legend,
        ),
        row=1,
        col=col,
    )
    fig.add_trace(
        go.Bar(
            x=centres,
            y=table["count"].tolist(),
            width=widths,
            name="count",
            marker_color=COUNT_COLOR,
            customdata=custom,
            hovertemplate=hover,
            **legend,
        ),
        row=2,
        col=col,
    )


def _diagram_layout(fig: go.Figure, title: str, n_cols: int) -> go.Figure:
    fig.update_layout(
        title=title,
        barmode="overlay",
        bargap=0,
        height=460,
        margin={"t": 70, "b": 40},
        legend={"orientation": "h", "y": -0.15},
    )
    for col in range(1, n_cols + 1):
        fig.update_yaxes(title_text="accuracy" if col == 1 else None, range=[0, 1], row=1, col=col)
        fig.update_yaxes(title_text="count" if col == 1 else None, row=2, col=col)
        fig.update_xaxes(title_text="confidence (top-label probability)", range=[0, 1], row=2, col=col)
    return fig


def reliability_figure(table: pd.DataFrame) -> go.Figure:
    """One run's reliability diagram with its confidence histogram; the title names run and epoch."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06)
    _add_reliability(fig, table)
    title = f"{table['run'].iloc[0]} · {_where(table)}<br><sup>{caption(table)}</sup>"
    return _diagram_layout(fig, title, 1)


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
        horizontal_spacing=0.06,
        subplot_titles=titles,
    )
    _add_reliability(fig, result.before_bins, col=1)
    _add_reliability(fig, result.after_bins, col=2, showlegend=False)
    title = (
        f"{RECALIBRATION_NAMES[result.method].capitalize()} · {result.before_bins['run'].iloc[0]}"
        f"<br><sup>fitted on epoch {result.fitted_on_epoch} validation (N = {result.n_validation}); "
        f"{caption(result.before_bins)}</sup>"
    )
    return _diagram_layout(fig, title, 2)


def _translucent(color: str, alpha: float = 0.2) -> str:
    red, green, blue = plotly.colors.hex_to_rgb(color)
    return f"rgba({red}, {green}, {blue}, {alpha})"


def ece_over_epochs_figure(curves: pd.DataFrame, scheme: str, n_bins: int, band: str,
                           epoch: int | None = None) -> go.Figure:  # fmt: skip
    """One line per run or group (rows of analysis.ece_over_epochs or group_ece_over_epochs, concatenated)
    over its band; a group's seeds as thin lines beside its mean. `band` says what the band is.

    `epoch`, when given, is marked with a vertical line.
    """
    fig = go.Figure()
    for i, (name, rows) in enumerate(curves.groupby("run", sort=False)):
        color = PALETTE[i % len(PALETTE)]
        epochs = rows["epoch"].tolist()
        _band(fig, epochs, rows["low"], rows["high"], color, name)
        fig.add_trace(go.Scatter(x=epochs, y=rows["ece"].tolist(), mode="lines+markers", name=name,
                                 line={"color": color}, legendgroup=name))  # fmt: skip
        members = rows["members"].tolist() if "members" in rows else []
        seeds = rows["seeds"].iloc[0] if members else []
        for seed, values in zip(seeds, zip(*members)):
            fig.add_trace(go.Scatter(x=epochs, y=list(values), mode="lines", line={"color": color, "width": 1, "dash": "dot"},
                                     name=f"{name} seed {seed}", legendgroup=name, showlegend=False))  # fmt: skip
    if epoch is not None:
        fig.add_vline(x=epoch, line={"dash": "dot", "color": "gray"})
    fig.update_layout(
        title=f"ECE per epoch ({n_bins} {SCHEME_NAMES[scheme]} bins)<br><sup>band: {band}</sup>",
        xaxis={"title": "epoch", "dtick": 1},
        yaxis={"title": "ECE", "rangemode": "tozero"},
        height=420,
        margin={"t": 70},
    )
    return fig


# ---------------------------------------------------------------- smooth reliability diagrams


def _band(fig: go.Figure, x, low, high, color: str, name: str, row: int | None = None) -> None:
    """An invisible upper edge, then the lower edge filled up to it: a shaded band."""
    where = {"row": row, "col": 1} if row else {}
    group = {"legendgroup": name, "hoverinfo": "skip", "showlegend": False}
    fig.add_trace(go.Scatter(x=list(x), y=list(high), mode="lines", line={"width": 0}, name=f"{name} 95% high",
                             **group), **where)  # fmt: skip
    fig.add_trace(go.Scatter(x=list(x), y=list(low), mode="lines", line={"width": 0}, fill="tonexty",
                             fillcolor=_translucent(color), name=f"{name} 95% low", **group), **where)  # fmt: skip


def smooth_reliability_figure(curves: dict[str, SmoothDiagram], title: str, band: str) -> go.Figure:
    """relplot's kernel-smoothed reliability curves (one per run), each over its band, with the diagonal;
    below, the density of the confidences. `band` says what the band is, for the subtitle."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06)
    for i, (name, diagram) in enumerate(curves.items()):
        color = PALETTE[i % len(PALETTE)]
        _band(fig, diagram.mesh, diagram.lower, diagram.upper, color, name, row=1)
        fig.add_trace(go.Scatter(x=diagram.mesh.tolist(), y=diagram.curve.tolist(), mode="lines", line={"color": color},
                                 name=f"{name} (smECE {diagram.smooth_ece:.4f})", legendgroup=name), row=1, col=1)  # fmt: skip
        fig.add_trace(go.Scatter(x=diagram.mesh.tolist(), y=diagram.density.tolist(), mode="lines", showlegend=False,
                                 line={"color": color, "width": 1}, name=f"{name} density", legendgroup=name),
                      row=2, col=1)  # fmt: skip
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration",
                             line={"dash": "dash", "color": "gray"}, hoverinfo="skip"), row=1, col=1)  # fmt: skip
    fig.update_layout(title=f"{title}<br><sup>band: {band}</sup>", height=460, margin={"t": 70, "b": 40},
                      legend={"orientation": "h", "y": -0.15})  # fmt: skip
    fig.update_yaxes(title_text="accuracy (smoothed)", range=[0, 1], row=1, col=1)
    fig.update_yaxes(title_text="density", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="confidence (top-label probability)", range=[0, 1], row=2, col=1)
    return fig


# ---------------------------------------------------------------- pairwise differences


def differences_figure(pairs: pd.DataFrame, metric: str, heading: str) -> go.Figure:
    """A forest plot: per pair of units, A − B in `metric` with its 95% interval; significant pairs
    (after Holm) filled, the others hollow; the zero line is "no difference"."""
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
    fig.update_layout(title=f"{heading}: differences between methods<br><sup>95% intervals; filled: significant "
                            f"at 5% after Holm's correction over {len(rows)} pairs</sup>",
                      xaxis={"title": f"{heading} of A − {heading} of B"}, height=max(260, 60 + 36 * len(rows)),
                      margin={"t": 70, "l": 10})  # fmt: skip
    return fig
