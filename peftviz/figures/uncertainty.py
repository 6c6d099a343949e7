"""Figures of "What fixes it": each method before and after each uncertainty method, and seed ensembles by size,
built from `peftviz.analysis.uncertainty.comparison`'s tables.

`uncertainty_figure`: a forest plot, one panel per method (a group of seeds or a single run) on one shared
metric axis, one row per uncertainty method. The question it answers is "how far does each uncertainty
method move this method, and is that further than the noise?", so the plain method (as trained) is the
reference: its own row, a diamond, and a dashed vertical line at its mean through the panel, against which
every other row's dot (the mean over the unit's members) and its bar (the 95% two-level bootstrap interval
over members and test documents) are read. A dot is filled where its paired difference to the plain method
is significant at 5% after Holm's correction (as the table's *), hollow otherwise: the interval of a row
and the test of its difference are not the same thing (the difference pairs the seeds), and the fill says
which rows the test backs. Panels share the x axis, so the methods compare too; one colour per method from
`palette`, as on every page, no legend (the panels' titles name the methods).

`ensemble_size_figure`: the metric of seed ensembles of k = 1 … N, one panel per group, shared axes: does
averaging more seeds keep helping, or does it level off after two? Discrete k, so dots joined by a line
with the interval as error bars, integer ticks only. A group of N seeds makes ⌊N / k⌋ disjoint ensembles
of k; where that is one (k > N / 2), the interval is over the test documents only, narrower for what it
leaves out: those dots are hollow, and the subtitle says so. k = 1 is the plain method.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from peftviz.calibration.estimators import ESTIMATORS
from peftviz.figures.calibration import panel_grid, subtitle
from peftviz.figures.palette import Series, color, series_of

PLAIN = "plain"  # comparison.PLAIN: the method as trained, the row every other row is read against
ROW_PX = 30  # a forest row
FOREST_PANEL_PX = 60  # a forest panel besides its rows
CURVE_PANEL_PX = 200
REFERENCE_LINE = {"dash": "dash", "color": "gray", "width": 1}
MARGIN = 0.06  # of the data's extent, either side of a forest's x axis: whole whiskers, nothing at the edge
HOVER = "%{y}: %{x:.4f} [%{customdata[0]:.4f}, %{customdata[1]:.4f}]<br>%{customdata[2]}<extra></extra>"
CURVE_HOVER = "k = %{x}: %{y:.4f} [%{customdata[0]:.4f}, %{customdata[1]:.4f}]<br>%{customdata[2]}<extra></extra>"


def heading(metric: str) -> str:
    return ESTIMATORS[metric].heading


def _whiskers(value: pd.Series, low: pd.Series, high: pd.Series) -> dict:
    """Asymmetric error bars from value to low and high (0 where there is no interval: NaN bounds)."""
    return {
        "type": "data",
        "symmetric": False,
        "array": (high - value).fillna(0).clip(lower=0).tolist(),
        "arrayminus": (value - low).fillna(0).clip(lower=0).tolist(),
    }


def _difference_text(row) -> str:
    if not np.isfinite(row.difference):
        return "the method as trained"
    word = "significant" if row.significant else "not significant"
    return (
        f"Δ {row.difference:+.4f} [{row.difference_low:+.4f}, {row.difference_high:+.4f}], "
        f"Holm p = {row.p_holm:.3g} ({word})"
    )


def _forest_range(rows: pd.DataFrame) -> list[float]:
    values = rows[["mean", "low", "high"]].to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    if not finite.size:
        return [0.0, 1.0]
    low, high = float(finite.min()), float(finite.max())
    pad = max(high - low, 1e-3) * MARGIN
    return [low - pad, high + pad]


def uncertainty_figure(table: pd.DataFrame, metric: str, series: dict[str, Series] | None = None) -> go.Figure:
    """The forest plot of one metric (see the module): `table` is `UncertaintyResult.table` (long: one row per
    method, uncertainty method and metric); `series`: method (the table's `method`) -> Series, for its colour."""
    rows = table[table["metric"] == metric]
    methods = list(dict.fromkeys(rows["method"]))
    labels = list(dict.fromkeys([PLAIN, *rows["uncertainty"]])) if len(rows) else [PLAIN]
    name = heading(metric)
    better = "lower" if ESTIMATORS[metric].lower_is_better else "higher"
    title = f"{name}: each method as trained and after each uncertainty method<br>" + subtitle(
        [
            "dot: mean over seeds (ensembles: over disjoint ensembles)",
            "bar: 95% two-level bootstrap interval",
            "◆ and dashed line: as trained",
            "filled: differs from it at 5% after Holm's correction",
            f"{better} is better",
        ]
    )
    fig, panels = panel_grid(methods or [""], FOREST_PANEL_PX + ROW_PX * len(labels), title, name)
    for method in methods:
        mine, where = rows[rows["method"] == method], panels[method]
        method_color = color(series_of(method, series))
        plain = mine[mine["uncertainty"] == PLAIN]
        others = mine[mine["uncertainty"] != PLAIN]
        for part, symbols in (
            (plain, ["diamond"] * len(plain)),
            (others, ["circle" if s else "circle-open" for s in others["significant"]]),
        ):
            if part.empty:
                continue
            fig.add_trace(
                go.Scatter(
                    x=part["mean"].tolist(),
                    y=part["uncertainty"].tolist(),
                    mode="markers",
                    name=f"{method} · {'as trained' if part is plain else 'uncertainty methods'}",
                    error_x=_whiskers(part["mean"], part["low"], part["high"]) | {"color": method_color},
                    marker={"symbol": symbols, "size": 10, "color": method_color, "line": {"width": 2}},
                    customdata=[[r.low, r.high, _difference_text(r)] for r in part.itertuples()],
                    hovertemplate=HOVER,
                ),
                **where,
            )
        if not plain.empty:
            fig.add_vline(x=float(plain["mean"].iloc[0]), line=REFERENCE_LINE, **where)
    fig.update_xaxes(range=_forest_range(rows), automargin=True)
    fig.update_yaxes(
        type="category", categoryorder="array", categoryarray=labels[::-1], range=[-0.6, len(labels) - 0.4]
    )  # the plain method on top
    fig.update_yaxes(automargin=True, col=1)
    return fig


def ensemble_size_figure(curves: pd.DataFrame, metric: str, series: dict[str, Series] | None = None) -> go.Figure:
    """The metric of seed ensembles against their size k (see the module): `curves` is `comparison.ensemble_curve`'s
    tables concatenated (method, k, ensembles, mean, low, high); `series`: method -> Series, for its colour."""
    methods = list(dict.fromkeys(curves["method"]))
    name = heading(metric)
    title = f"{name} of seed ensembles by size<br>" + subtitle(
        [
            "dot: mean over the group's disjoint ensembles of k seeds",
            "bar: 95% two-level bootstrap interval",
            "hollow: one ensemble of k only, its interval over the test documents alone",
            "k = 1: as trained",
        ]
    )
    fig, panels = panel_grid(methods or [""], CURVE_PANEL_PX, title, "ensemble size k (seeds averaged)")
    for method in methods:
        rows = curves[curves["method"] == method].sort_values("k")
        method_color = color(series_of(method, series))
        fig.add_trace(
            go.Scatter(
                x=rows["k"].astype(int).tolist(),
                y=rows["mean"].tolist(),
                mode="lines+markers",
                name=method,
                line={"color": method_color},
                error_y=_whiskers(rows["mean"], rows["low"], rows["high"]) | {"color": method_color},
                marker={
                    "symbol": ["circle" if n > 1 else "circle-open" for n in rows["ensembles"]],
                    "size": 9,
                    "color": method_color,
                    "line": {"width": 2},
                },
                customdata=[
                    [r.low, r.high, f"{r.ensembles} ensemble{'s' if r.ensembles != 1 else ''} of {r.k}"]
                    for r in rows.itertuples()
                ],
                hovertemplate=CURVE_HOVER,
                cliponaxis=False,  # a hollow dot at 0 drawn whole
            ),
            **panels[method],
        )
    largest = int(curves["k"].max()) if len(curves) else 1
    fig.update_xaxes(tickmode="linear", tick0=1, dtick=1, range=[0.6, largest + 0.4], automargin=True)
    fig.update_yaxes(range=_curve_range(curves), automargin=True)
    fig.update_yaxes(title_text=name, col=1)
    return fig


def _curve_range(curves: pd.DataFrame) -> list[float]:
    """From 0 (every metric here is a loss or an error of at least 0) to just above the highest whisker."""
    values = curves[["mean", "low", "high"]].to_numpy(dtype=float) if len(curves) else np.zeros(1)
    finite = values[np.isfinite(values)]
    lowest = min(float(finite.min()) if finite.size else 0.0, 0.0)
    highest = max(float(finite.max()) if finite.size else 0.0, 1e-3)
    return [lowest * 1.1, highest * 1.1]
