"""Figures of the Tour: the trainable-parameter bars of its first step, and any figure made legible on a projector."""

from __future__ import annotations

import plotly.graph_objects as go

PROJECTOR_FONT = 20  # px; a back row reads ~20 px text on a 1080p projector


def trainable_figure(rows: list[dict]) -> go.Figure:
    """One bar per method: the share of the model's parameters it trains (log axis, 0.01 % to 100 %).

    rows: {"label", "trainable", "total", "color"}, in the order to draw (top to bottom).
    """
    shares = [100 * row["trainable"] / row["total"] for row in rows]
    fig = go.Figure(
        go.Bar(
            x=shares,
            y=[row["label"] for row in rows],
            orientation="h",
            marker_color=[row["color"] for row in rows],
            text=[f"{share:.3g} % · {row['trainable']:,}" for share, row in zip(shares, rows, strict=True)],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{x:.3g} % of the parameters trained<extra></extra>",
        )
    )
    fig.update_layout(
        title="Share of the parameters each method trains (classification head included)",
        xaxis={"type": "log", "title": "trained parameters, % of the model (log scale)", "range": [-2, 3.4],
               "tickvals": [0.01, 0.1, 1, 10, 100], "ticktext": ["0.01", "0.1", "1", "10", "100"]},
        yaxis={"autorange": "reversed", "automargin": True},
        showlegend=False,
    )  # fmt: skip
    return fig


def presentable(fig: go.Figure) -> go.Figure:
    """The figure with projector-sized text and margins that keep every label inside it (a copy)."""
    big = go.Figure(fig)
    big.update_layout(font={"size": PROJECTOR_FONT}, title={"font": {"size": PROJECTOR_FONT + 4}}, height=560,
                      legend={"font": {"size": PROJECTOR_FONT - 4}})  # fmt: skip
    for axes in (big.update_xaxes, big.update_yaxes):  # the figures set their own tick and title sizes
        axes(automargin=True, tickfont={"size": PROJECTOR_FONT - 2}, title={"font": {"size": PROJECTOR_FONT}})
    big.update_annotations(font={"size": PROJECTOR_FONT})  # subplot titles
    big.update_traces(textfont={"size": PROJECTOR_FONT - 2}, selector={"type": "bar"})
    big.update_traces(textfont={"size": PROJECTOR_FONT - 2}, selector={"type": "heatmap"})
    return big
