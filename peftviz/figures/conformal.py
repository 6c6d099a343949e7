"""Figures of conformal prediction sets, from `peftviz.analysis.conformal`'s tables.

`conformal_epochs_figure`: two panels over epochs, the empirical coverage (a dashed line at the target
1 − α) and the mean set size; per unit (run or group of seeds) a line over its band, coloured by
`palette` as on every page. Both panels share the legend, under the plot.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from peftviz.calibration.conformal import SCORES
from peftviz.figures.calibration import shaded_band
from peftviz.figures.layout import title_over_plot
from peftviz.figures.palette import Series, color, series_of

PANELS = {"coverage": "coverage", "set_size": "mean set size"}  # the table's column -> the panel's title
LEGEND_PX = 64  # the legend's rows under the plot
TARGET_COLOR = "gray"


def conformal_epochs_figure(table: pd.DataFrame, alpha: float, series: dict[str, Series] | None = None) -> go.Figure:
    """Coverage and mean set size per epoch (rows of `conformal_over_epochs`, concatenated), each unit's
    line over its interval band; a dashed line at 1 − α on the coverage panel."""
    score = SCORES.get(table["score"].iloc[0], "") if len(table) else ""
    titles = [f"{PANELS['coverage']} (dashed: 1 − α = {1 - alpha:g})", PANELS["set_size"]]
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.1)
    for name in dict.fromkeys(table["run"]):
        rows, line_color = table[table["run"] == name], color(series_of(name, series))
        for col, measure in enumerate(PANELS, start=1):
            where = {"row": 1, "col": col}
            shaded_band(fig, rows["epoch"], rows[f"{measure}_low"], rows[f"{measure}_high"], line_color, name, where)
            fig.add_trace(go.Scatter(x=rows["epoch"].tolist(), y=rows[measure].tolist(), mode="lines+markers",
                                     name=name, line={"color": line_color}, legendgroup=name, showlegend=col == 1),
                          **where)  # fmt: skip
    fig.add_hline(y=1 - alpha, line={"dash": "dash", "color": TARGET_COLOR}, row=1, col=1)  # named in the title
    _axes(fig, table, alpha)
    title = (f"Conformal sets per epoch, {score}, α = {alpha:g}<br><sup>calibrated on one half of each epoch's "
             "validation predictions, judged on the other; band: 95% bootstrap interval</sup>")  # fmt: skip
    title_over_plot(fig, title, 30)
    fig.update_layout(height=420 + LEGEND_PX, margin={"b": 40 + LEGEND_PX, "l": 60, "r": 20},
                      legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0})  # fmt: skip
    return fig


def _axes(fig: go.Figure, table: pd.DataFrame, alpha: float) -> None:
    """Ranges that hold every line, band and the target: coverage up to 1, set size from 0."""
    lowest = min([1 - alpha, *table["coverage_low"].dropna(), *table["coverage"].dropna()])
    highest = max([1 - alpha, *table["coverage_high"].dropna()])
    fig.update_yaxes(title_text="coverage", range=[max(lowest - 0.05, 0), min(highest + 0.02, 1.02)], row=1, col=1)
    tallest = max([1.0, *table["set_size_high"].dropna(), *table["set_size"].dropna()])
    fig.update_yaxes(title_text="labels per set", range=[0, tallest * 1.1], row=1, col=2)
    if len(table):
        epochs = table["epoch"]
        fig.update_xaxes(dtick=1, range=[epochs.min() - 0.15, epochs.max() + 0.15])
    fig.update_xaxes(title_text="epoch", automargin=True)
    fig.update_yaxes(automargin=True)
