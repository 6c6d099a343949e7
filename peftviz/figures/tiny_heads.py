"""Figures of the tiny-attention page: heads and their average, head similarity, averaging's effect.

Inputs come from `peftviz.analysis.tiny_heads`; every function is pure and returns a plotly figure.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from peftviz.analysis.tiny_heads import MATRICES, SYMBOLS, AveragingTable, HeadWeights
from peftviz.figures.palette import Series, color

COLORSCALE = "RdBu_r"  # diverging: negative blue, zero white, positive red
SIMILARITY_MIN_PX = 300


def head_matrix(weights: HeadWeights, name: str, head: int) -> np.ndarray:
    """One head's matrix as (D, H): rows = the head's D dimensions, columns = hidden dimensions.

    W_Q, W_K, W_V are stored (M, D, H); O is (M, H, D), so it is shown transposed.
    """
    matrix = weights[name][head]
    return matrix.T if name == "out" else matrix


def _panels(weights: HeadWeights, averaged: HeadWeights, name: str) -> list[tuple[str, np.ndarray]]:
    """[(row label, (D, H) matrix)] for head 1 … M, then the averaged head."""
    n_heads = weights[name].shape[0]
    panels = [(f"head {m + 1}", head_matrix(weights, name, m)) for m in range(n_heads)]
    return panels + [("avg", head_matrix(averaged, name, 0))]


def _colorbar(fig: go.Figure, column: int, y: float) -> dict:
    """A horizontal colour bar at paper height `y`, under subplot column `column` (1-based)."""
    domain = fig.layout["xaxis" if column == 1 else f"xaxis{column}"].domain
    return {
        "orientation": "h",
        "x": (domain[0] + domain[1]) / 2,
        "len": (domain[1] - domain[0]) * 0.9,
        "y": y,
        "yanchor": "top",
        "thickness": 10,
    }


def heads_figure(
    weights: HeadWeights, averaged: HeadWeights, matrices: tuple[str, ...] = MATRICES, layer: int | None = None
) -> go.Figure:
    """Grid of heatmaps: columns = the chosen matrices, rows = head 1 … M, then "avg".

    Each cell is one head's (D, H) matrix, so hidden dimensions line up down a column and heads
    can be compared by eye. A column shares one symmetric colour scale; the averaged O is
    M·Ō = Σ_m O^(m), the projection the one-head model really uses, so it is M times stronger
    than a head's share when heads agree.
    """
    n_heads = weights["query"].shape[0]
    head_dim, hidden = head_matrix(weights, "query", 0).shape
    rows = n_heads + 1
    plot_height = rows * min(250, max(70, 10 * head_dim + 50))  # px between the top and bottom margins
    colorbar_y = -70 / plot_height  # paper units: below the x-axis title
    fig = make_subplots(
        rows=rows,
        cols=len(matrices),
        shared_xaxes=True,
        column_titles=[_column_title(name, n_heads) for name in matrices],
        row_titles=[label for label, _ in _panels(weights, averaged, "query")],
        horizontal_spacing=0.04,
        vertical_spacing=min(0.04, 0.3 / rows),
    )
    for column, name in enumerate(matrices, start=1):
        _add_matrix_column(fig, _panels(weights, averaged, name), name, column, colorbar_y)
    fig.update_yaxes(showticklabels=head_dim > 1, autorange="reversed")
    fig.update_xaxes(title_text="hidden dimension", row=rows)
    title = f"Layer {layer + 1}: " if layer is not None else ""
    fig.update_layout(
        title=f"{title}each head's matrices (M = {n_heads}, D = {head_dim}, H = {hidden}) and the averaged head",
        height=plot_height + 80 + 130,
        margin={"t": 80, "b": 130, "r": 50},  # the row titles (head 1 … avg) stand right of the last column
    )
    fig.update_yaxes(automargin=True)
    return fig


def _add_matrix_column(fig: go.Figure, panels: list, name: str, column: int, colorbar_y: float) -> None:
    """One matrix's heads and average down subplot column `column`, on one symmetric colour axis."""
    scale = max(float(np.abs(matrix).max()) for _, matrix in panels) or 1.0
    axis = "coloraxis" if column == 1 else f"coloraxis{column}"
    for row, (label, matrix) in enumerate(panels, start=1):
        fig.add_trace(_heatmap(matrix, name, label, axis), row=row, col=column)
    colorbar = _colorbar(fig, column, colorbar_y)
    fig.layout[axis] = {"colorscale": COLORSCALE, "cmin": -scale, "cmax": scale, "colorbar": colorbar}


def _column_title(name: str, n_heads: int) -> str:
    return "O (avg row: M·Ō = Σ O⁽ᵐ⁾)" if name == "out" and n_heads > 1 else SYMBOLS[name]


def _heatmap(matrix: np.ndarray, name: str, label: str, axis: str) -> go.Heatmap:
    """(D, H) matrix -> heatmap; `meta` names the matrix and the head for readers of the figure."""
    return go.Heatmap(
        z=matrix,
        coloraxis=axis,
        name=f"{SYMBOLS[name]} {label}",
        meta={"matrix": name, "head": label},
        hovertemplate=f"{SYMBOLS[name]} {label}<br>hidden %{{x}}, d %{{y}}<br>%{{z:.4g}}<extra></extra>",
    )


def similarity_figure(similarity: np.ndarray, layer: int | None = None) -> go.Figure:
    """(M, M) cosine similarity as an annotated heatmap, its colour scale fitted to the pairs.

    The scale runs from the lowest pair's cosine to 1 (stated on the colour bar): on a fixed
    [-1, 1] scale heads at 0.93 and at 0.99 were the same dark red. Below 0 it stays [-1, 1].
    One head has no pair: its one cell is drawn without a colour bar, and the subtitle says so.
    """
    labels = [f"head {m + 1}" for m in range(similarity.shape[0])]
    pairs = similarity[~np.eye(len(similarity), dtype=bool)]
    low = float(np.floor(pairs.min() * 1000) / 1000) if pairs.size and pairs.min() > 0 else -1.0
    low = min(low, 0.999)  # heads all equal (untrained copies): still a scale to draw
    fig = go.Figure(
        go.Heatmap(
            z=similarity,
            x=labels,
            y=labels,
            zmin=low if pairs.size else 0,
            zmax=1,
            colorscale=COLORSCALE if low < 0 else "Reds",
            showscale=bool(pairs.size),
            colorbar={"title": {"text": f"cosine, {low:g}–1"}, "len": 0.9},
            texttemplate="%{z:.3f}",
            hovertemplate="%{y} · %{x}: %{z:.4f}<extra></extra>",
            name="cosine similarity",
        )
    )
    where = f"layer {layer + 1}, " if layer is not None else ""
    what = "[W_Q; W_K; W_V; O] concatenated" if pairs.size else "one head: no pair to compare"
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(  # two short title lines: the figure sits in a narrow column
        title=f"Cosine similarity between heads<br><sup>{where}{what}</sup>",
        height=max(SIMILARITY_MIN_PX, 180 + 50 * len(labels)),  # a colour bar tall enough for its ticks
        margin={"t": 80, "r": 20, "l": 70},  # automargin fits "head 1" to the pixel; a little more room
    )
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig


def _split_values(table: AveragingTable, metric: str, column: str) -> list:
    """[validation, test] values of `metric` ("accuracy" or "ECE") in `column` ("before"/"after")."""
    rows = {row["quantity"]: row for row in table.rows}
    return [rows[f"{split} {metric}"][column] for split in ("validation", "test")]


def averaging_figure(table: AveragingTable, series: Series | None = None, label: str = "") -> go.Figure:
    """Grouped bars: accuracy (left) and ECE (right) on validation and test, before vs after averaging.

    Both bars take the run's palette colour (`series`: its method, variant and seed), so the run
    looks the same here as on the Calibration page; "after" is hatched. Values are written on the
    bars to four decimals.
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=("accuracy", "ECE"))
    columns = ("before",) if table.kind == "not averaged" else ("before", "after")
    colour = color(series) if series else "#636efa"
    patterns = {"before": {}, "after": {"shape": "/", "fillmode": "overlay", "fgcolor": "white", "solidity": 0.4}}
    for col, metric in enumerate(("accuracy", "ECE"), start=1):
        for column in columns:
            values = _split_values(table, metric, column)
            fig.add_trace(
                go.Bar(
                    x=["validation", "test"],
                    y=values,
                    name=f"{column} averaging",
                    marker={"color": colour, "pattern": patterns[column], "line": {"color": "#333", "width": 1}},
                    text=[f"{v:.4f}" if v is not None else "" for v in values],
                    legendgroup=column,
                    showlegend=col == 1,
                ),
                row=1,
                col=col,
            )
    title = f"Before vs after head averaging · {label}" if label else "Before vs after head averaging"
    fig.update_layout(barmode="group", title=title, height=360, margin={"t": 70, "r": 20})
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig
