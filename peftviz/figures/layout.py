"""Layout that holds however a figure is sized: a title above the plot, rows of panels apart in pixels.

plotly places a title in the top margin, which a figure must size for the title's lines; and the
gap between rows of subplots is a fraction of the plot's height. Both went wrong when a figure was
drawn at another height or type size (the Tour's): a two-line title sat on the first panel's title,
and the second row's titles on the first row's zero line. Measured in Chromium (plotly.js 3):

* a title anchored to the plot area's top (`yref="paper"`, `y=1`, `yanchor="bottom"`) with
  `automargin` pushes the top margin to fit its lines, 1 to 3 alike, and keeps `pad.b` px clear
  below it, room for the first row's panel titles; anchored to the figure's top instead, a
  multi-line title started 14 px above the figure;
* `respace_rows` sets the rows' domains so that `gap_px` separate them at a known plot height.
"""

from __future__ import annotations

import plotly.graph_objects as go

TITLE_PAD_PX = 20  # above a title: plotly sizes a title's lines up to ~14 px short (a subtitle's more)


def title_over_plot(fig: go.Figure, text: str, clearance_px: float = 0) -> None:
    """Set the title `text` just above the plot area, `clearance_px` above it (for panel titles),
    with the top margin grown to hold all of its lines."""
    fig.update_layout(
        title={
            "text": text,
            "yref": "paper",
            "y": 1,
            "yanchor": "bottom",
            "automargin": True,
            "pad": {"b": clearance_px, "t": TITLE_PAD_PX},
        },
        margin={"t": 10},
    )


def respace_rows(fig: go.Figure, plot_px: float, gap_px: float) -> None:
    """Rows of subplots `gap_px` apart in a plot area `plot_px` tall, each row keeping its share of
    the height; the panel titles over each row move with it. One row: nothing to do."""
    old = sorted({tuple(axis.domain) for axis in _y_axes(fig)}, reverse=True)  # top row first
    if len(old) < 2:
        return
    gap = min(gap_px / plot_px, 0.5 / (len(old) - 1))
    scale = (1 - gap * (len(old) - 1)) / sum(high - low for low, high in old)
    top, new = 1.0, {}
    for low, high in old:
        new[(low, high)] = (top - (high - low) * scale, top)
        top = new[(low, high)][0] - gap
    for axis in _y_axes(fig):
        low, high = new[tuple(axis.domain)]
        axis.domain = (max(low, 0.0), min(high, 1.0))  # the sums drift by ~1e-16
    for annotation in fig.layout.annotations:  # make_subplots puts a panel's title at its row's top
        moved = next((high for (_, old_high), (_, high) in new.items() if abs(annotation.y - old_high) < 1e-9), None)
        if moved is not None:
            annotation.y = moved


def _y_axes(fig: go.Figure) -> list:
    """The y axes that own a row's domain (a secondary axis overlays its row's primary one)."""
    return [axis for axis in fig.select_yaxes() if axis.domain and not axis.overlaying]
