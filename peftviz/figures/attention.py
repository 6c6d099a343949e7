"""Figures of the Attention page: small plotly heatmaps and lines built from peftviz.analysis.attention.

Every builder takes arrays the analysis already reduced, and refuses more than MAX_ROWS ×
MAX_COLUMNS cells, so a figure never carries a whole document's L × L attention.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from peftviz.analysis.attention import MAX_COLUMNS, MAX_ROWS, MassProfile, PrefixRows
from peftviz.errors import ConfigError
from peftviz.figures.cell_text import show_fitting_text

COLOURS = "Viridis"
ROW_PX = 16  # height of one token row
CELL_FONT_PX = 10  # a λ(C) grid's numbers in its cells
# the λ(C) grid's width on the Attention page, in half its main column, in a 1280×720 window with the
# sidebar open (measured in Chromium): its numbers are printed where they fit at this width
GRID_WIDTH_PX = 400


def _check_cells(matrix: np.ndarray) -> None:
    rows, columns = matrix.shape
    if rows > MAX_ROWS or columns > MAX_COLUMNS:
        raise ConfigError(f"{rows} × {columns} cells is too many to draw; at most {MAX_ROWS} × {MAX_COLUMNS}")


def _label_axis(labels: list[str], angle: int = 0) -> dict:
    """A categorical axis by index, so repeated tokens stay separate columns, with the labels as ticks."""
    return dict(tickmode="array", tickvals=list(range(len(labels))), ticktext=labels, tickangle=angle, tickfont_size=10)


def fitted_top(matrix: np.ndarray) -> float:
    """The top of a colour scale that starts at 0: the largest value (1 for an all-zero matrix).

    Fitted, not fixed at 1: prefix masses of 0.01–0.3 would all be the same dark on a 0–1 scale.
    """
    top = float(np.nanmax(matrix)) if np.isfinite(matrix).any() else 0.0
    return top if top > 0 else 1.0


def prefix_mass_grid_figure(
    grid: np.ndarray, title: str = "Prefix mass λ(C) per layer and head", width_px: float = GRID_WIDTH_PX
) -> go.Figure:
    """Layer × head heatmap of prefix mass (layers × heads) on a colour scale from 0 to the grid's
    largest value, stated in the colour bar's title; each cell's value printed in it where it fits at
    `width_px` (`cell_text`), and in the hover everywhere."""
    n_layers, n_heads = grid.shape
    top = fitted_top(grid)
    heatmap = go.Heatmap(
        z=grid,
        x=[f"H{h + 1}" for h in range(n_heads)],
        y=[f"L{layer + 1}" for layer in range(n_layers)],
        zmin=0,
        zmax=top,
        colorscale=COLOURS,
        texttemplate="%{z:.3f}",  # where it fits: show_fitting_text
        hovertemplate="layer %{y}, head %{x}: λ = %{z:.4f}<extra></extra>",
        colorbar=dict(title=f"λ, 0–{top:.3f}", title_side="right", nticks=4),
    )
    fig = go.Figure(heatmap)
    fig.update_layout(
        title=f"{title}<br><sup>colour scale fitted: 0 to the largest λ, {top:.4f}</sup>",
        xaxis_title="head",
        yaxis_title="layer",
        height=max(280, 160 + 36 * n_layers),
        margin={"t": 80},
    )
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return show_fitting_text(fig, width_px, CELL_FONT_PX)


def _where(layer: int | None, head: int | None) -> str:
    """ "Layer 3, head 5: " for 0-based layer and head; "" when not given."""
    parts = [f"layer {layer + 1}" if layer is not None else "", f"head {head + 1}" if head is not None else ""]
    text = ", ".join(part for part in parts if part)
    return f"{text[:1].upper()}{text[1:]}: " if text else ""


def token_heatmap_figure(
    matrix: np.ndarray,
    row_labels: list[str],
    col_labels: list[str],
    n_prefix_keys: int = 0,
    title: str = "",
    layer: int | None = None,
    head: int | None = None,
) -> go.Figure:
    """Query tokens (rows) × [prefix keys P1..Pj; nearby key tokens] (columns) of one head.

    Axis ticks are the token strings; a line separates the prefix keys from the text keys. The
    title starts with the layer and head (0-based arguments, shown 1-based) when they are given.
    """
    _check_cells(matrix)
    rows, _ = matrix.shape
    hover = np.array([[f"{q} → {k}" for k in col_labels] for q in row_labels])  # (rows, columns)
    fig = go.Figure(_indexed_heatmap(matrix, hover, "%{customdata}: %{z:.3f}<extra></extra>", "weight"))
    if n_prefix_keys:
        fig.add_vline(x=n_prefix_keys - 0.5, line_color="white", line_width=2)
    fig.update_layout(
        title=f"{_where(layer, head)}{title}",
        xaxis=dict(_label_axis(col_labels, -90), title="keys", automargin=True),
        yaxis=dict(_label_axis(row_labels), title="queries", autorange="reversed", automargin=True),
        height=160 + ROW_PX * rows,
    )
    return fig


def _indexed_heatmap(matrix: np.ndarray, hover: np.ndarray, hovertemplate: str, colorbar_title: str) -> go.Heatmap:
    """A heatmap on integer positions (so repeated tokens stay separate cells); labels come from the axes."""
    rows, columns = matrix.shape
    top = fitted_top(matrix)
    return go.Heatmap(
        z=matrix,
        x=list(range(columns)),
        y=list(range(rows)),
        zmin=0,
        zmax=top,
        colorscale=COLOURS,
        customdata=hover,
        hovertemplate=hovertemplate,
        colorbar=dict(title=f"{colorbar_title}<br>scale 0–{top:.3f}"),
    )


def prefix_rows_figure(
    rows: PrefixRows,
    title: str = "what the prefix positions attend to",
    layer: int | None = None,
    head: int | None = None,
) -> go.Figure:
    """Prefix positions (rows) × [each prefix key; text buckets] (columns) of one head; hover lists the
    top tokens. The title starts with the layer and head when they are given."""
    matrix = np.concatenate([rows.to_prefixes, rows.to_buckets], axis=1)  # (j, j + n_buckets)
    _check_cells(matrix)
    columns = rows.labels + rows.bucket_labels
    top = ["<br>".join(f"{token} @{pos}: {w:.2f}" for pos, token, w in row) for row in rows.top_tokens]
    hover = np.array([[top[r]] * len(columns) for r in range(len(rows.labels))])  # (j, columns)
    fig = go.Figure(_indexed_heatmap(matrix, hover, "%{z:.3f}<br>top tokens:<br>%{customdata}<extra></extra>", "share"))
    fig.add_vline(x=len(rows.labels) - 0.5, line_color="white", line_width=2)
    title = f"{_where(layer, head)}{title}"
    fig.update_layout(
        title=title[:1].upper() + title[1:],
        xaxis=dict(_label_axis(columns, -60), title="prefix keys, then text tokens by position", automargin=True),
        yaxis=dict(_label_axis(rows.labels), title="prefix position", autorange="reversed", automargin=True),
        height=200 + 22 * len(rows.labels),
    )
    return fig


def prefix_mass_profile_figure(profile: MassProfile, title: str = "Prefix mass along the document") -> go.Figure:
    """One line per layer: prefix mass averaged over heads and over each bucket's query tokens."""
    fig = go.Figure()
    for layer, mass in enumerate(profile.mass):
        fig.add_trace(
            go.Scatter(x=profile.starts, y=mass, mode="lines+markers", name=f"layer {layer + 1}", line_shape="hv")
        )
    fig.update_layout(
        title=f"{title} (buckets of {profile.size} tokens)",
        xaxis_title="query token position (bucket start)",
        yaxis=dict(title="λ, mean over heads", rangemode="tozero", automargin=True),
        xaxis_automargin=True,
        height=360,
    )
    return fig
