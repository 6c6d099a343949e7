"""Numbers in a heatmap's cells only where they fit: a grid of 6 layers × 12 heads in half a page's
column left 20 px per cell, and "0.137" at 9 px is 20 px wide, so every row printed one long number.

plotly draws a heatmap's cell texts at a fixed size whatever the cell's width, so the figure decides
when it is built, for the width it is drawn at (`width_px`, in a 1280-pixel window): the widest
format of FORMATS whose text fits every cell, or none. The hover shows every value either way.
The browser figure audit (tests/support/figure_audit.py) checks the result as drawn: no two texts overlap.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

FORMATS = (".3f", ".2f")  # "0.137", then "0.14"
DIGIT_EM = 0.5  # a character's width in font sizes, over a number's digits and point: drawn, 0.44 (Chromium)
LINE_EM = 1.3  # a line of text's height in font sizes
PAD_PX = 4  # clear space a text keeps inside its cell, both sides together
LEFT_PX = 65  # left of the plot area: the y axis's ticks and title (drawn in Chromium: 62)
COLORBAR_PX = 100  # right of it: the colour bar, its tick labels and its title (drawn: 95–98)


def text_px(text: str, font_px: float) -> float:
    """The drawn width of a number's text, from its characters (digits, point and sign alike)."""
    return len(text) * DIGIT_EM * font_px


def fitting_format(values, cell_px: tuple[float, float], font_px: float) -> str | None:
    """The first of FORMATS whose texts of `values` fit a cell of (width, height) px; None when none does."""
    width, height = cell_px
    if LINE_EM * font_px > height - PAD_PX:
        return None
    for spec in FORMATS:
        widest = max((text_px(format(float(v), spec), font_px) for v in values if math.isfinite(v)), default=0.0)
        if widest <= width - PAD_PX:
            return spec
    return None


def show_fitting_text(fig: go.Figure, width_px: float, font_px: float, plot_height_px: float | None = None):
    """Each heatmap's cell texts (of those that have a `texttemplate`) at `font_px`, in the widest format
    that fits its cells when the figure is drawn `width_px` wide, else none; the figure itself, changed.
    plot_height_px: the plot area's height (default: the figure's height less its top and bottom margins)."""
    margin = fig.layout.margin
    plot_w = width_px - LEFT_PX - COLORBAR_PX
    plot_h = plot_height_px or (fig.layout.height or 450) - (margin.t or 100) - (margin.b or 80)
    for trace in fig.select_traces(selector={"type": "heatmap"}):
        if trace.texttemplate is None:  # a heatmap drawn without numbers stays so
            continue
        rows = len(trace.z)
        columns = len(trace.z[0]) if rows else 0
        values = [value for row in trace.z for value in row]
        spec = fitting_format(values, (plot_w / max(columns, 1), plot_h / max(rows, 1)), font_px) if rows else None
        trace.update(texttemplate=f"%{{z:{spec}}}" if spec else "", textfont_size=font_px)
    return fig
