"""Figures of the Tour: the trainable-parameter dot plot of its first step, and any figure made legible on a projector.

A Tour step's figure sits beside its text, FIGURE_HEIGHT px tall, so that at 1280×720 it ends above
the fold; `presentable` sets that height and the projector's type sizes, and lays the title and the
panels out for them (`peftviz.figures.layout`).
"""

from __future__ import annotations

import math
import textwrap

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from peftviz.figures.cell_text import show_fitting_text
from peftviz.figures.layout import TITLE_PAD_PX, respace_rows, title_over_plot
from peftviz.figures.palette import Series, color, series_of, translucent

PROJECTOR_FONT = 20  # px; a back row reads ~20 px text on a 1080p projector
FIGURE_HEIGHT = 540  # px; under the step's heading, it ends above the fold of a 720-pixel window
LINE_PX = 1.35  # a line of text, in font sizes
TITLE_CHARS = 44  # a title line's characters at the projector's size, in the figure's column at 1280 px
PANEL_CHARS = 54  # the same for the panel titles of a row of small multiples, shared between its panels
BOTTOM_PX = 70  # under the plot: the x axis's tick labels and title
FIGURE_WIDTH_PX = 640  # a step's figure column in a 1280-pixel window (measured in Chromium)
MAX_PANEL_COLUMNS = 6  # small multiples per row: a panel ~100 px wide in the figure's column at 1280 px
Y_TICKS = 3  # ECE ticks per panel: rows of panels are ~150 px tall at the projector's type size


def trainable_figure(rows: list[dict]) -> go.Figure:
    """One dot per method at the share of the model's parameters it trains, on a log axis.

    Dots, not bars: a bar's length on a log axis depends on where the axis starts, so bars from
    0.01 % would not be proportional to anything. A label sits right of its dot, or left of a dot
    past 10 %, so it stays inside the axis. rows: {"label", "trainable", "total", "color"},
    in the order to draw (top to bottom).
    """
    shares = [100 * row["trainable"] / row["total"] for row in rows]
    fig = go.Figure(
        go.Scatter(
            x=shares,
            y=[row["label"] for row in rows],
            mode="markers+text",
            marker={"color": [row["color"] for row in rows], "size": 16, "line": {"color": "#333", "width": 1}},
            text=[f"{share:.3g} % · {row['trainable']:,}" for share, row in zip(shares, rows, strict=True)],
            textposition=["middle left" if share > 10 else "middle right" for share in shares],  # inside the axis
            cliponaxis=False,
            hovertemplate="%{y}: %{x:.3g} % of the parameters trained<extra></extra>",
            name="trained parameters",
        )
    )
    low, high = math.floor(math.log10(min(shares))), math.ceil(math.log10(max(shares)))
    decades = [10.0**power for power in range(low, high + 1)]
    fig.update_layout(
        title="Share of the parameters each method trains (classification head included)",
        xaxis={
            "type": "log",
            "title": "trained parameters, % of the model (log scale)",
            "range": [low - 0.1, high + 0.15],
            "tickvals": decades,
            "ticktext": [f"{value:g}" for value in decades],
        },
        yaxis={"autorange": "reversed", "automargin": True},
        showlegend=False,
    )
    return fig


def wrap(text: str, width: int) -> str:
    """Plotly title text with each line broken at spaces into lines of at most `width` characters
    (plotly does not wrap titles); a subtitle line (`<sup>`) may be 1.4 times as long, its type is
    smaller. The tags take no room: a line is wrapped without them, and they go back on its ends."""
    lines = []
    for line in text.split("<br>"):
        opens, closes = line.startswith("<sup>"), line.endswith("</sup>")
        subtitle = opens or _open_sup(lines)
        plain = line.removeprefix("<sup>").removesuffix("</sup>")
        pieces = textwrap.wrap(plain, round(width * 1.4) if subtitle else width, break_long_words=False) or [""]
        pieces[0] = ("<sup>" if opens else "") + pieces[0]
        pieces[-1] += "</sup>" if closes else ""
        lines.extend(pieces)
    return "<br>".join(lines)


def _open_sup(lines: list[str]) -> bool:
    joined = "".join(lines)
    return joined.rfind("<sup>") > joined.rfind("</sup>")


def presentable(fig: go.Figure) -> go.Figure:
    """The figure at FIGURE_HEIGHT with projector-sized text (a copy): its title and panel titles
    wrapped to the width a Tour step gives a figure at 1280 px, the title above the panels' titles,
    rows of panels re-spaced for the projector's panel titles, and a heatmap's numbers in its cells
    only where they fit at that size (`cell_text`)."""
    big = go.Figure(fig)
    columns = len({annotation.x for annotation in big.layout.annotations}) or 1
    for annotation in big.layout.annotations:  # small multiples' panel titles
        annotation.text = wrap(annotation.text, max(12, PANEL_CHARS // columns))
    panel_lines = max((a.text.count("<br>") + 1 for a in big.layout.annotations), default=0)
    panel_px = (PROJECTOR_FONT - 2) * LINE_PX * panel_lines
    title = wrap(big.layout.title.text or "", TITLE_CHARS)
    clearance = panel_px + 6 if panel_px else 12  # between the title and the plot (or its panels' titles)
    title_over_plot(big, title, clearance)
    top = TITLE_PAD_PX + (PROJECTOR_FONT + 4) * LINE_PX * (title.count("<br>") + 1) + clearance
    ticks_px = (PROJECTOR_FONT - 2) * LINE_PX if (big.layout.meta or {}).get("ticks_under_every_row") else 0
    respace_rows(big, FIGURE_HEIGHT - top - BOTTOM_PX, panel_px + 12 + ticks_px)
    big.update_layout(
        font={"size": PROJECTOR_FONT},
        height=FIGURE_HEIGHT,
        title_font_size=PROJECTOR_FONT + 4,
        legend={"font": {"size": PROJECTOR_FONT - 4}},
    )
    for axes in (big.update_xaxes, big.update_yaxes):  # the figures set their own tick and title sizes
        axes(automargin=True, tickfont={"size": PROJECTOR_FONT - 2}, title={"font": {"size": PROJECTOR_FONT}})
    big.update_annotations(font={"size": PROJECTOR_FONT - 2})  # subplot titles
    big.update_traces(textfont={"size": PROJECTOR_FONT - 2}, selector={"type": "bar"})
    big.update_traces(textfont={"size": PROJECTOR_FONT - 2}, selector={"type": "scatter", "mode": "markers+text"})
    return show_fitting_text(big, FIGURE_WIDTH_PX, PROJECTOR_FONT - 2, FIGURE_HEIGHT - top - BOTTOM_PX)


def ece_panels_figure(
    curves: pd.DataFrame, band: str, series: dict[str, Series] | None = None, n_bins: int = 10
) -> go.Figure:
    """ECE per epoch for the projector: a panel per run, at most two rows of MAX_PANEL_COLUMNS (three
    beyond 12 runs), each panel's epoch axis spanning the run's own epochs (a 2-epoch run is not squashed
    onto an 8-epoch axis), the ECE axes shared from 0 with Y_TICKS ticks so their labels stay apart.
    curves: rows of `analysis.calibration.ece_over_epochs` (run, epoch, ece, low, high), concatenated."""
    names = list(dict.fromkeys(curves["run"]))
    rows = 1 if len(names) <= 4 else max(2, math.ceil(len(names) / MAX_PANEL_COLUMNS))
    columns = math.ceil(len(names) / rows)
    fig = make_subplots(rows=rows, cols=columns, shared_yaxes="all", subplot_titles=names, horizontal_spacing=0.04)
    for index, name in enumerate(names):
        where = {"row": index // columns + 1, "col": index % columns + 1}
        _ece_panel(fig, curves[curves["run"] == name], name, color(series_of(name, series)), where)
        if index + columns >= len(names):  # no panel under it: the column's axis title
            fig.update_xaxes(title_text="epoch", **where)
    for index in range(len(names), rows * columns):  # the last row's empty cells draw nothing
        fig.update_xaxes(visible=False, row=rows, col=index % columns + 1)
        fig.update_yaxes(visible=False, row=rows, col=index % columns + 1)
    top = max(float(curves[["ece", "high"]].max().max()), 1e-3) * 1.1
    fig.update_yaxes(range=[0, top], nticks=Y_TICKS, automargin=True)
    fig.update_yaxes(title_text="ECE", col=1)
    cut = " (cut at 0, where ECE ends)" if (curves["low"] < 0).any() else ""
    # every panel has its own epochs, so every row its tick labels: `presentable` leaves room for them
    fig.update_layout(
        title=f"ECE per epoch ({n_bins} equal-width bins)<br><sup>band: {band}{cut}</sup>",
        showlegend=False,
        margin={"t": 10, "b": 60, "l": 60, "r": 20},
        meta={"ticks_under_every_row": True},
    )
    return fig


def _ece_panel(fig: go.Figure, rows: pd.DataFrame, name: str, line_color: str, where: dict) -> None:
    """One run's ECE line over its band, on an epoch axis of its own epochs (whole numbers only)."""
    epochs = rows["epoch"].tolist()
    band = {"mode": "lines", "line": {"width": 0}, "hoverinfo": "skip", "showlegend": False}
    fig.add_trace(go.Scatter(x=epochs, y=rows["high"].tolist(), name=f"{name} 95% high", **band), **where)
    fig.add_trace(
        go.Scatter(
            x=epochs,
            y=rows["low"].clip(lower=0).tolist(),
            name=f"{name} 95% low",
            fill="tonexty",
            fillcolor=translucent(line_color),
            **band,
        ),
        **where,
    )
    fig.add_trace(
        go.Scatter(x=epochs, y=rows["ece"].tolist(), mode="lines+markers", name=name, line={"color": line_color}),
        **where,
    )
    step = max(1, math.ceil(len(epochs) / 4))  # at most 4 epoch ticks in a ~100-px panel
    fig.update_xaxes(range=[min(epochs) - 0.3, max(epochs) + 0.3], tick0=min(epochs), dtick=step, **where)
