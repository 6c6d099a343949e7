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
from peftviz.figures.layout import title_over_plot
from peftviz.figures.palette import Series, color, series_of

PANELS = {"coverage": "coverage", "set_size": "mean set size"}  # the table's column -> the panel's title
LEGEND_PX = 64  # the legend's rows under the plot
TARGET_COLOR = "gray"


def conformal_epochs_figure(table: pd.DataFrame, alpha: float, series: dict[str, Series] | None = None) -> go.Figure:
    """Coverage and mean set size per epoch (rows of `conformal_over_epochs`, concatenated): each unit's
    values joined by a line, its interval as whiskers, the units set side by side at each epoch (six
    translucent bands over one another blend into one); a dashed line at 1 − α on the coverage panel."""
    score = SCORES.get(table["score"].iloc[0], "") if len(table) else ""
    titles = [f"{PANELS['coverage']} (dashed: 1 − α = {1 - alpha:g})", PANELS["set_size"]]
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.1)
    names = list(dict.fromkeys(table["run"]))
    for place, name in enumerate(names):
        rows, line_color = table[table["run"] == name], color(series_of(name, series))
        x = (rows["epoch"] + _dodge(place, len(names))).tolist()
        for col, measure in enumerate(PANELS, start=1):
            value, low, high = (rows[f"{measure}{end}"] for end in ("", "_low", "_high"))
            whiskers = {
                "type": "data",
                "symmetric": False,
                "array": (high - value).tolist(),
                "arrayminus": (value - low).tolist(),
                "color": line_color,
                "width": 3,
            }
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=value.tolist(),
                    mode="lines+markers",
                    name=name,
                    error_y=whiskers,
                    line={"color": line_color},
                    legendgroup=name,
                    showlegend=col == 1,
                ),
                row=1,
                col=col,
            )
    fig.add_hline(y=1 - alpha, line={"dash": "dash", "color": TARGET_COLOR}, row=1, col=1)  # named in the title
    _axes(fig, table, alpha)
    title = (
        f"Conformal sets per epoch, {score}, α = {alpha:g}<br><sup>calibrated on one half of each epoch's "
        "validation predictions, judged on the other; whiskers: 95% bootstrap interval</sup>"
    )
    title_over_plot(fig, title, 30)
    fig.update_layout(
        height=420 + LEGEND_PX,
        margin={"b": 40 + LEGEND_PX, "l": 60, "r": 20},
        legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0},
    )
    return fig


def _dodge(place: int, n_units: int) -> float:
    """The x offset of unit `place` of `n_units` at an epoch: side by side within ±0.15 of it."""
    step = min(0.08, 0.3 / max(n_units - 1, 1))
    return (place - (n_units - 1) / 2) * step


def _axes(fig: go.Figure, table: pd.DataFrame, alpha: float) -> None:
    """Ranges that hold every line, band and the target: coverage up to 1, set size from 0."""
    lowest = min([1 - alpha, *table["coverage_low"].dropna(), *table["coverage"].dropna()])
    highest = max([1 - alpha, *table["coverage_high"].dropna()])
    fig.update_yaxes(title_text="coverage", range=[max(lowest - 0.05, 0), min(highest + 0.02, 1.02)], row=1, col=1)
    tallest = max([1.0, *table["set_size_high"].dropna(), *table["set_size"].dropna()])
    fig.update_yaxes(title_text="labels per set", range=[0, tallest * 1.1], row=1, col=2)
    if len(table):
        epochs = table["epoch"]
        fig.update_xaxes(dtick=1, range=[epochs.min() - 0.3, epochs.max() + 0.3])
    fig.update_xaxes(title_text="epoch", automargin=True)
    fig.update_yaxes(automargin=True)
