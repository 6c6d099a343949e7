"""Figures of the Kernel page: λ(C) per layer, and accuracy and ECE against α.

Inputs are the rows of `peftviz.analysis.kernel`; outputs are plotly figures. No Streamlit.
Runs are coloured by `palette` (one colour per method on every page); the reference lines (the
paper's α grid, a run's α, the exact λ(C)) are legend entries rather than text on the plot, so no
label lies over a line.
"""

from __future__ import annotations

import itertools
import math

import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from peftviz.figures.layout import title_over_plot
from peftviz.figures.palette import Series, color

EXACT = "exact"
SWEEP_NAME = "evaluated under α"
EXACT_NAME = "exact λ(C)"
TRAINED_NAME = "trained at α"
SEEDS_NAME = "each seed"
GRID_NAME = "shaded: the paper's α grid"
PANELS = (("accuracy", "validation accuracy"), ("ece", "validation ECE"))
NEUTRAL = "#555555"  # a sweep drawn without knowing its run's method
HEAD_SCALE = "Viridis"  # heads in order along a sequential scale: 12 heads, 12 distinct colours
GROUP_SYMBOLS = ("diamond", "square", "triangle-up", "circle", "star", "hexagon")  # colour is the method's
MAX_LOG_TICKS = 8


def lambda_figure(
    summary: list[dict],
    per_head: bool = False,
    alpha: float | None = None,
    title: str = "",
    grid: tuple[float, ...] = (),
) -> go.Figure:
    """Box per layer of λ(C) from `lambda_summary` rows: box q25–q75, median, whiskers q05–q95.

    per_head: one box per head, grouped by layer, instead of all heads pooled, each head a colour
    of a sequential scale. alpha: the α a kernel run was trained with, drawn as a dashed line.
    grid: the paper's α grid (`analysis.kernel.grid_alphas`), shaded from its least to its largest α.
    The y axis runs from 0 to a little above the largest value drawn. title: what the boxes are of
    (the run, its documents).
    """
    fig = go.Figure()
    if per_head:
        heads = sorted({row["head"] for row in summary if row["head"] is not None})
        colours = sample_colorscale(HEAD_SCALE, [0.9 * i / max(len(heads) - 1, 1) for i in range(len(heads))])
        for head, colour in zip(heads, colours):  # 0.9: the scale's last yellow is too pale on white
            _add_boxes(fig, [row for row in summary if row["head"] == head], f"head {head + 1}", colour)
        fig.update_layout(boxmode="group")
    else:
        _add_boxes(fig, [row for row in summary if row["head"] is None], "all heads", NEUTRAL)
    if grid:
        fig.add_hrect(y0=min(grid), y1=max(grid), fillcolor="gray", opacity=0.2, line_width=0)
        fig.add_trace(
            _legend_entry(
                GRID_NAME,
                {"mode": "markers", "marker": {"symbol": "square", "size": 12, "color": "rgba(128, 128, 128, 0.3)"}},
            )
        )
    if alpha is not None:
        fig.add_hline(y=alpha, line_dash="dash")
        fig.add_trace(
            _legend_entry(f"this run's α = {alpha:g}", {"mode": "lines", "line": {"dash": "dash", "color": "#444"}})
        )
    top = max([row["q95"] for row in summary] + [max(grid, default=0), alpha or 0])
    fig.update_layout(
        xaxis_title="layer",
        yaxis_title="λ(C): share of attention on the prefixes",
        yaxis_range=[0, min(1.0, 1.1 * top)],
        margin={"t": 30, "r": 20},
        legend={"orientation": "h", "y": -0.2, "yanchor": "top"},
    )
    if title:
        title_over_plot(fig, title)
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig


def _legend_entry(name: str, style: dict) -> go.Scatter:
    """A trace with no points: only its legend entry, for a shape or line drawn as layout."""
    return go.Scatter(x=[None], y=[None], name=name, hoverinfo="skip", **style)


def _add_boxes(fig: go.Figure, rows: list[dict], name: str, colour: str) -> None:
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
            marker_color=colour,
        )
    )


def log_ticks(values: list[float]) -> list[float]:
    """Ticks for a log axis over `values`: 1, 2, 5 per decade, or only the decades when those are too many."""
    low, high = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    decades = [10.0**power for power in range(low, high + 1)]
    every = [round(step * decade, 12) for decade in decades for step in (1, 2, 5)]
    inside = [tick for tick in every if min(values) / 1.5 <= tick <= max(values) * 1.5]
    return inside if len(inside) <= MAX_LOG_TICKS else decades


def tick_text(value: float) -> str:
    """A tick as its full decimal number: 0.002, not 2 or 2e-3."""
    return f"{value:.12f}".rstrip("0").rstrip(".")


def alpha_figure(
    sweep: list[dict] | None = None,
    trained: list[dict] = (),
    sweep_label: str = "",
    sweep_series: Series | None = None,
    series: dict[str, Series] | None = None,
) -> go.Figure:
    """Accuracy (left) and ECE (right) against α on a log axis with ticks at full numbers.

    sweep: `alpha_sweep` rows of one run: a line over the α values, and its exact-λ(C) row as a
    dashed horizontal line, in the colour of `sweep_series` (the run). trained:
    `trained_alpha_rows` or `trained_alpha_groups`: markers in their method's colour (from
    `series`: run name -> Series), one symbol per group; a row over several seeds has its
    t-interval as an error bar and its seeds as dots in shades of that colour.
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=[title for _, title in PANELS], horizontal_spacing=0.12)
    if sweep:
        _add_sweep(fig, sweep, sweep_label, color(sweep_series) if sweep_series else NEUTRAL)
    for index, group in enumerate(dict.fromkeys(row["group"] for row in trained)):
        rows = [row for row in trained if row["group"] == group]
        who = _method_series(rows[0], series)
        _add_trained(fig, rows, group, who, GROUP_SYMBOLS[index % len(GROUP_SYMBOLS)])
    alphas = [row["alpha"] for row in [*(sweep or []), *trained] if row["alpha"] != EXACT]
    ticks = log_ticks(alphas) if alphas else []
    fig.update_xaxes(
        type="log", title_text="α (log scale)", tickvals=ticks, ticktext=[tick_text(t) for t in ticks], automargin=True
    )
    fig.update_yaxes(automargin=True)
    for col, axis in enumerate(("y", "y2"), start=1):
        fig.update_yaxes(range=_fitted_range(_drawn_values(fig, axis)), row=1, col=col)
    fig.update_yaxes(title_text="accuracy", col=1)
    fig.update_yaxes(title_text="ECE", col=2)
    fig.update_layout(legend={"orientation": "h", "y": -0.3, "yanchor": "top"}, margin={"t": 40, "r": 20})
    return fig


def _drawn_values(fig: go.Figure, axis: str) -> list[float]:
    """Every finite y the traces on `axis` draw: their points and their error bars' ends."""
    values = []
    for trace in (t for t in fig.data if t.yaxis == axis and t.y is not None):
        bars = trace.error_y
        up = list(bars.array) if bars and bars.array is not None else []
        down = list(bars.arrayminus) if bars and bars.arrayminus is not None else up
        for y, above, below in itertools.zip_longest(trace.y, up, down):
            if y is not None:
                values += [y, y + (above or 0), y - (below or 0)]
    return [float(v) for v in values if math.isfinite(v)]


def _fitted_range(values: list[float]) -> list[float] | None:
    """An axis around `values` with a margin, inside [0, 1] where accuracy and ECE lie: plotly's own
    autorange drew accuracy from -0.5 when every point had the same value. None: nothing drawn."""
    if not values:
        return None
    low, high = min(values), max(values)
    margin = max(0.1 * (high - low), 0.01)
    return [max(0.0, low - margin), min(1.0, high + margin)]


def _method_series(row: dict, series: dict[str, Series] | None) -> Series:
    """The method's base colour for a row of trained runs: its first member's method, variant 0, no seed."""
    first = (row.get("members") or [row])[0]
    found = (series or {}).get(first.get("run"))
    return Series(found.method) if found else Series("")


def _add_sweep(fig: go.Figure, sweep: list[dict], label: str, colour: str) -> None:
    points = [row for row in sweep if row["alpha"] != EXACT]
    exact = next((row for row in sweep if row["alpha"] == EXACT), None)
    name = f"{SWEEP_NAME} · {label}" if label else SWEEP_NAME
    span = [min(row["alpha"] for row in points), max(row["alpha"] for row in points)] if points else []
    for col, (metric, _) in enumerate(PANELS, start=1):
        fig.add_trace(
            go.Scatter(
                x=[row["alpha"] for row in points],
                y=[row[metric] for row in points],
                mode="lines+markers",
                name=name,
                legendgroup="sweep",
                showlegend=col == 1,
                line={"color": colour},
                hovertemplate="α=%{x:g}<br>" + metric + "=%{y:.4f}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        if exact is not None and span:  # a trace across the swept α, not a shape: it gets a legend entry
            fig.add_trace(
                go.Scatter(
                    x=span,
                    y=[exact[metric]] * 2,
                    mode="lines",
                    name=f"{EXACT_NAME} · {label}" if label else EXACT_NAME,
                    legendgroup="exact",
                    showlegend=col == 1,
                    line={"color": colour, "dash": "dash"},
                    hovertemplate=EXACT_NAME + ": " + metric + "=%{y:.4f}<extra></extra>",
                ),
                row=1,
                col=col,
            )


def _add_trained(fig: go.Figure, rows: list[dict], group: str, who: Series, symbol: str) -> None:
    """Markers at each row's α; a group of seeds' row gets its t-interval as an error bar, its seeds as dots."""
    colour = color(who)
    for col, (metric, _) in enumerate(PANELS, start=1):
        fig.add_trace(
            go.Scatter(
                x=[row["alpha"] for row in rows],
                y=[row[metric] for row in rows],
                mode="markers",
                name=f"{TRAINED_NAME} · {group}",
                legendgroup=group,
                showlegend=col == 1,
                marker={"size": 10, "symbol": symbol, "color": colour},
                error_y=_error_bars(rows, metric, colour),
                text=[_trained_hover(row, metric) for row in rows],
                hovertemplate="%{text}<br>" + metric + "=%{y:.4f}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        _add_seeds(fig, rows, metric, group, who, col)


def _add_seeds(fig: go.Figure, rows: list[dict], metric: str, group: str, who: Series, col: int) -> None:
    """Each seed of the rows over several seeds as a small dot at its α, in its seed's shade of the method's colour."""
    members = [member for row in rows if len(row.get("members", ())) > 1 for member in row["members"]]
    if not members:
        return
    fig.add_trace(
        go.Scatter(
            x=[row["alpha"] for row in members],
            y=[row[metric] for row in members],
            mode="markers",
            name=f"{SEEDS_NAME} · {group}",
            legendgroup=group,
            showlegend=False,
            marker={"size": 5, "color": [color(Series(who.method, 0, row["seed"])) for row in members], "opacity": 0.7},
            text=[f"{row['label']} · seed {row['seed']}" for row in members],
            hovertemplate="%{text}<br>" + metric + "=%{y:.4f}<extra></extra>",
        ),
        row=1,
        col=col,
    )


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
