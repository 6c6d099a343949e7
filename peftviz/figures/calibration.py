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

import pandas as pd
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from peftviz.analysis.calibration import SCHEME_NAMES, TemperatureScaling, table_ece

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
        go.Bar(x=centres, y=accuracy, width=widths, name="accuracy", marker_color=ACCURACY_COLOR,
               customdata=custom, hovertemplate=hover, **legend),
        row=1, col=col,
    )
    # the gap bar starts at the accuracy and ends at the mean confidence: red above a bar is
    # over-confidence, red inside it under-confidence
    fig.add_trace(
        go.Bar(x=centres, y=(table["confidence"] - table["accuracy"]).tolist(), base=accuracy, width=widths,
               name="gap", marker_color=GAP_COLOR, customdata=custom, hovertemplate=hover, **legend),
        row=1, col=col,
    )
    fig.add_trace(
        go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration",
                   line={"dash": "dash", "color": "gray"}, hoverinfo="skip", **legend),
        row=1, col=col,
    )
    fig.add_trace(
        go.Bar(x=centres, y=table["count"].tolist(), width=widths, name="count", marker_color=COUNT_COLOR,
               customdata=custom, hovertemplate=hover, **legend),
        row=2, col=col,
    )


def _diagram_layout(fig: go.Figure, title: str, n_cols: int) -> go.Figure:
    fig.update_layout(title=title, barmode="overlay", bargap=0, height=460, margin={"t": 70, "b": 40},
                      legend={"orientation": "h", "y": -0.15})
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


def temperature_figure(result: TemperatureScaling) -> go.Figure:
    """Test-set reliability diagrams side by side: as trained (T = 1) and with the fitted T."""
    titles = [  # two titles for a 2x2 grid: they go to the top row
        f"before (T = 1): ECE {result.before['ece']:.4f}",
        f"after (T = {result.temperature:.3g}): ECE {result.after['ece']:.4f}",
    ]
    fig = make_subplots(rows=2, cols=2, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06,
                        horizontal_spacing=0.06, subplot_titles=titles)
    _add_reliability(fig, result.before_bins, col=1)
    _add_reliability(fig, result.after_bins, col=2, showlegend=False)
    title = (f"Temperature scaling · {result.before_bins['run'].iloc[0]}"
             f"<br><sup>T fitted on epoch {result.fitted_on_epoch} validation (N = {result.n_validation}); "
             f"{caption(result.before_bins)}</sup>")
    return _diagram_layout(fig, title, 2)


def _translucent(color: str, alpha: float = 0.2) -> str:
    red, green, blue = plotly.colors.hex_to_rgb(color)
    return f"rgba({red}, {green}, {blue}, {alpha})"


def ece_over_epochs_figure(curves: pd.DataFrame, scheme: str, n_bins: int, n_resamples: int,
                           epoch: int | None = None) -> go.Figure:
    """One line per run (rows of analysis.ece_over_epochs, concatenated) over its bootstrap band.

    Per run three traces: the band's upper edge (invisible), its lower edge filled up to it,
    then the ECE line. `epoch`, when given, is marked with a vertical line.
    """
    fig = go.Figure()
    for i, (name, rows) in enumerate(curves.groupby("run", sort=False)):
        color = PALETTE[i % len(PALETTE)]
        epochs = rows["epoch"].tolist()
        group = {"legendgroup": name, "hoverinfo": "skip"}
        fig.add_trace(go.Scatter(x=epochs, y=rows["high"].tolist(), mode="lines", line={"width": 0},
                                 showlegend=False, name=f"{name} 95% high", **group))
        fig.add_trace(go.Scatter(x=epochs, y=rows["low"].tolist(), mode="lines", line={"width": 0}, fill="tonexty",
                                 fillcolor=_translucent(color), showlegend=False, name=f"{name} 95% low", **group))
        fig.add_trace(go.Scatter(x=epochs, y=rows["ece"].tolist(), mode="lines+markers", name=name,
                                 line={"color": color}, legendgroup=name))
    if epoch is not None:
        fig.add_vline(x=epoch, line={"dash": "dot", "color": "gray"})
    fig.update_layout(
        title=f"ECE per epoch ({n_bins} {SCHEME_NAMES[scheme]} bins)"
              f"<br><sup>band: 95% percentile bootstrap over {n_resamples} resamples of the validation examples</sup>",
        xaxis={"title": "epoch", "dtick": 1}, yaxis={"title": "ECE", "rangemode": "tozero"},
        height=420, margin={"t": 70},
    )
    return fig
