"""Figures of the Kernel page: λ(C) per layer, and accuracy and ECE against α.

Inputs are the rows of `peftviz.analysis.kernel`; outputs are plotly figures. No Streamlit.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from peftviz.methods.kernel_prefix_propagation import ALPHA_GRID

EXACT = "exact"
SWEEP_NAME = "evaluated under α"
EXACT_NAME = "exact λ(C)"
TRAINED_NAME = "trained at α"
SEEDS_NAME = "each seed"
PANELS = (("accuracy", "validation accuracy"), ("ece", "validation ECE"))
GRID_BAND = (min(ALPHA_GRID), max(ALPHA_GRID))
SWEEP_COLOR, GROUP_COLORS = qualitative.Plotly[0], qualitative.Plotly[1:]


def lambda_figure(summary: list[dict], per_head: bool = False, alpha: float | None = None) -> go.Figure:
    """Box per layer of λ(C) from `lambda_summary` rows: box q25–q75, median, whiskers q05–q95.

    per_head: one box per head, grouped by layer, instead of all heads pooled. alpha: the α a
    kernel run was trained with, drawn as a dashed line. The paper's α grid is shaded.
    """
    fig = go.Figure()
    if per_head:
        heads = sorted({row["head"] for row in summary if row["head"] is not None})
        for head in heads:
            _add_boxes(fig, [row for row in summary if row["head"] == head], f"head {head + 1}")
        fig.update_layout(boxmode="group")
    else:
        _add_boxes(fig, [row for row in summary if row["head"] is None], "all heads")
    fig.add_hrect(y0=GRID_BAND[0], y1=GRID_BAND[1], fillcolor="gray", opacity=0.2, line_width=0,
                  annotation_text="paper's α grid", annotation_position="top left")  # fmt: skip
    if alpha is not None:
        fig.add_hline(y=alpha, line_dash="dash", annotation_text=f"this run's α = {alpha:g}")
    fig.update_layout(
        xaxis_title="layer", yaxis_title="λ(C): share of attention on the prefixes",
        yaxis_range=[0, 1], showlegend=per_head, margin={"t": 30},
    )  # fmt: skip
    return fig


def _add_boxes(fig: go.Figure, rows: list[dict], name: str) -> None:
    """One box trace from precomputed quantiles (whiskers at q05/q95, not 1.5 IQR)."""
    fig.add_trace(
        go.Box(
            name=name,
            x=[f"layer {row['layer'] + 1}" for row in rows],
            q1=[row["q25"] for row in rows],
            median=[row["median"] for row in rows],
            q3=[row["q75"] for row in rows],
            lowerfence=[row["q05"] for row in rows],
            upperfence=[row["q95"] for row in rows],
            mean=[row["mean"] for row in rows],
        )
    )


def alpha_figure(sweep: list[dict] | None = None, trained: list[dict] = (), sweep_label: str = "") -> go.Figure:
    """Accuracy (left) and ECE (right) against α on a log axis.

    sweep: `alpha_sweep` rows of one run: a line over the α values, and its exact-λ(C) row as a
    dashed horizontal line. trained: `trained_alpha_rows` or `trained_alpha_groups`: diamonds, one
    series per group; a row over several seeds has its t-interval as an error bar and its seeds as dots.
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=[title for _, title in PANELS], horizontal_spacing=0.1)
    if sweep:
        _add_sweep(fig, sweep, sweep_label)
    for index, group in enumerate(dict.fromkeys(row["group"] for row in trained)):
        color = GROUP_COLORS[index % len(GROUP_COLORS)]
        _add_trained(fig, [row for row in trained if row["group"] == group], group, color)
    fig.update_xaxes(type="log", title_text="α (log scale)")
    fig.update_yaxes(title_text="accuracy", col=1)
    fig.update_yaxes(title_text="ECE", col=2)
    fig.update_layout(legend={"orientation": "h", "y": -0.25}, margin={"t": 40})
    return fig


def _add_sweep(fig: go.Figure, sweep: list[dict], label: str) -> None:
    points = [row for row in sweep if row["alpha"] != EXACT]
    exact = next((row for row in sweep if row["alpha"] == EXACT), None)
    name = f"{SWEEP_NAME} · {label}" if label else SWEEP_NAME
    for col, (metric, _) in enumerate(PANELS, start=1):
        fig.add_trace(
            go.Scatter(
                x=[row["alpha"] for row in points], y=[row[metric] for row in points], mode="lines+markers",
                name=name, legendgroup="sweep", showlegend=col == 1, line={"color": SWEEP_COLOR},
                hovertemplate="α=%{x:g}<br>" + metric + "=%{y:.4f}<extra></extra>",
            ),
            row=1, col=col,
        )  # fmt: skip
        if exact is not None:
            fig.add_hline(y=exact[metric], line_dash="dash", line_color=SWEEP_COLOR, row=1, col=col,
                          annotation_text=EXACT_NAME, annotation_position="bottom right")  # fmt: skip


def _add_trained(fig: go.Figure, rows: list[dict], group: str, color: str) -> None:
    """Diamonds at each row's α; a group of seeds' row gets its t-interval as an error bar, its seeds as dots."""
    for col, (metric, _) in enumerate(PANELS, start=1):
        fig.add_trace(
            go.Scatter(
                x=[row["alpha"] for row in rows], y=[row[metric] for row in rows], mode="markers",
                name=f"{TRAINED_NAME} · {group}", legendgroup=group, showlegend=col == 1,
                marker={"size": 10, "symbol": "diamond", "color": color}, error_y=_error_bars(rows, metric, color),
                text=[_trained_hover(row, metric) for row in rows],
                hovertemplate="%{text}<br>" + metric + "=%{y:.4f}<extra></extra>",
            ),
            row=1, col=col,
        )  # fmt: skip
        _add_seeds(fig, rows, metric, group, color, col)


def _add_seeds(fig: go.Figure, rows: list[dict], metric: str, group: str, color: str, col: int) -> None:
    """Each seed of the rows over several seeds as a small dot at its α: the values behind the mean and interval."""
    members = [member for row in rows if len(row.get("members", ())) > 1 for member in row["members"]]
    if not members:
        return
    fig.add_trace(
        go.Scatter(
            x=[row["alpha"] for row in members], y=[row[metric] for row in members], mode="markers",
            name=f"{SEEDS_NAME} · {group}", legendgroup=group, showlegend=False,
            marker={"size": 5, "color": color, "opacity": 0.6},
            text=[f"{row['label']} · seed {row['seed']}" for row in members],
            hovertemplate="%{text}<br>" + metric + "=%{y:.4f}<extra></extra>",
        ),
        row=1, col=col,
    )  # fmt: skip


def _error_bars(rows: list[dict], metric: str, color: str) -> dict | None:
    """Asymmetric error bars from each row's `<metric>_low`/`_high` (a t-interval over seeds); None if no row has one."""
    above = [_gap(row.get(f"{metric}_high"), row[metric]) for row in rows]
    below = [_gap(row[metric], row.get(f"{metric}_low")) for row in rows]
    if all(gap is None for gap in above):
        return None
    return {"type": "data", "symmetric": False, "array": above, "arrayminus": below, "color": color, "thickness": 1.5}


def _gap(upper, lower) -> float | None:
    """upper - lower, or None when either is missing or NaN (a one-seed group has no interval)."""
    if upper is None or lower is None or not math.isfinite(upper - lower):
        return None
    return upper - lower


def _trained_hover(row: dict, metric: str = "") -> str:
    text = f"{row['label']}<br>trained at α={row['alpha']:g}"
    if row.get("n", 1) > 1:
        low, high = row[f"{metric}_low"], row[f"{metric}_high"]
        seeds = ", ".join(map(str, row["seeds"]))
        text += f"<br>mean of {row['n']} seeds ({seeds}), 95% t-interval [{low:.4f}, {high:.4f}]"
    if row.get("learned_alpha"):
        text += "<br>learned α per layer: " + ", ".join(f"{a:.3g}" for a in row["learned_alpha"])
    return text
