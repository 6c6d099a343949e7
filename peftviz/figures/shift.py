"""Figures of "Under shift": each method's calibration as its test text gets noisier, its conformal coverage, and
where a prefix method's attention goes, built from `peftviz.analysis.shift`'s tables.

`severity_figure`: one metric against the corruption's severity, 0 (the clean test split) to 5 (half of each
document's words corrupted). The question it answers is "does this method's calibration hold as the text moves
away from what it was trained on, and does it matter which kind of noise?" (Ovadia et al., NeurIPS 2019, Fig. 2).
Small multiples, one panel per method on shared axes, as the Calibration page draws ECE per epoch: a method's
band and the families' boxes of six methods on one plot blend into one another. In each panel the line is the
mean over the corruption families at each severity; the band, its 95% two-level bootstrap interval over seeds and
test documents (the table's "all families" rows: every family's set holds the same documents, so the families'
mean of the draws is the bootstrap of the mean; a table without those rows gets the families' intervals averaged
bound by bound, and the subtitle says so); the box, Ovadia et al.'s, the spread over the families (whiskers at the
lowest and highest family, the box between their quartiles, the bar at their median); a dashed line at the clean
value, against which the rise or fall is read. Severities are whole numbers, and only those evaluated are ticked. One colour per method from
`palette`, as on every page; no legend (the panels' titles name the methods).

`coverage_figure`: the same layout for split-conformal coverage, sets calibrated on the clean validation split:
"does a 90% set stay 90% on noisy text?", the dashed line at the target 1 − α. The coverage table has no mean
over the families with its own interval, so the band is the families' intervals averaged (the subtitle says so).

`attention_shift_figure`: for one method with prefix keys, each test document's attention mass on the prefix
against the model's confidence, right answers and wrong ones in two colours, one panel per severity on shared
axes (the families and seeds pooled): "as the text gets noisier, does the attention move onto or off the prefix,
and do the wrong answers sit apart from the right ones?" A dotted vertical line per panel marks the mean mass of
each colour. A scatter per severity rather than means against severity: at a few hundred documents a panel the
cloud shows the spread the means would hide, and at 1280×720 six panels in two rows keep each one readable.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from peftviz.analysis.shift import DOMAIN, SHARES
from peftviz.calibration.estimators import ESTIMATORS
from peftviz.figures.calibration import ACCURACY_COLOR, OVER_COLOR, panel_grid, shaded_band, shared_grid, subtitle
from peftviz.figures.palette import Series, color, series_of, translucent

PLAIN = "plain"  # shift.table.PLAIN: the method as trained
ALL = "all families"  # shift.table.ALL: a severity's mean over the corruption families (not imported: light)
PANEL_PX = 200  # a method's panel
MAX_COMPACT_COLUMNS = 6  # the Tour's panels per row: ~100 px wide each in its figure column at 1280 px
ATTENTION_PANEL_PX = 210  # a severity's panel of the attention figure
LEGEND_PX = 40  # the attention figure's legend, one row under the plot
REFERENCE_LINE = {"dash": "dash", "color": "gray", "width": 1}
BOUNDED = {"accuracy", "ece", "aurc"}  # metrics that never pass 1
SPREAD_COLUMNS = ("lowest", "q1", "median", "q3", "highest")
ROW_COLUMNS = ("method", "uncertainty", "severity", "families", "mean", "low", "high", *SPREAD_COLUMNS)
HOVER = (
    "severity %{x}: %{y:.4f} (mean over %{customdata[0]} families)<br>band %{customdata[1]:.4f} to "
    "%{customdata[2]:.4f}<br>lowest: %{customdata[3]} · highest: %{customdata[4]}<extra>%{fullData.name}</extra>"
)
ATTENTION_HOVER = (
    "prefix mass %{x:.4f} · confidence %{y:.4f}<br>%{customdata[0]} · document %{customdata[1]} · seed "
    "%{customdata[2]}<extra>%{fullData.name}</extra>"
)
X_TITLE = "severity (share of words corrupted)"
RIGHT, WRONG = "right", "wrong"
ANSWER_COLORS = {RIGHT: ACCURACY_COLOR, WRONG: OVER_COLOR}


def heading(metric: str) -> str:
    return ESTIMATORS[metric].heading


def severity_label(severity: int) -> str:
    """A severity as its tick reads: "0 clean", "3 20%"."""
    return "0<br>clean" if severity == 0 else f"{severity}<br>{SHARES[severity - 1]:.0%}"


# ---------------------------------------------------------------- what the figures draw, as tables


def spread_rows(frame: pd.DataFrame, value: str = "mean") -> pd.DataFrame:
    """Per method, uncertainty method and severity (ROW_COLUMNS), over the corruption families: the mean of the
    families' `value` (as `shift.table.family_spread`), its interval (`low`, `high`), and the families' spread
    (lowest, quartiles, median, highest), with the families that are lowest and highest. The interval is that of
    the table's "all families" row where it has one (the two-level bootstrap of the families' mean), else the
    families' intervals averaged bound by bound (`interval` says which: "mean", "averaged"). Severity 0, the clean
    test split, is one set: its own interval, its spread one value. Domain shifts have no severity and are left
    out. `frame`: `ShiftResult.table` rows of one metric, or `ShiftResult.coverage`."""
    rows = frame[frame["family"] != DOMAIN].copy()
    if "uncertainty" not in rows:
        rows["uncertainty"] = PLAIN
    if rows.empty:
        return pd.DataFrame(columns=[*ROW_COLUMNS, "interval", "lowest_family", "highest_family"])
    rows["severity"] = rows["severity"].astype(int)
    keys = ["method", "uncertainty", "severity"]
    means = {tuple(row[:3]): row[3:] for row in rows[rows["family"] == ALL][[*keys, value, "low", "high"]].to_numpy()}
    families = rows[rows["family"] != ALL]
    found = []
    for key, part in families.groupby(keys, sort=False):
        values = part[value].astype(float)
        mean, low, high = means.get(key, (values.mean(), part["low"].mean(), part["high"].mean()))
        found.append(
            dict(zip(keys, key))
            | {
                "severity": int(key[2]),
                "families": len(part),
                "mean": float(mean),
                "low": float(low),
                "high": float(high),
                "interval": "mean" if key in means or len(part) == 1 else "averaged",
                "lowest": values.min(),
                "q1": values.quantile(0.25),
                "median": values.median(),
                "q3": values.quantile(0.75),
                "highest": values.max(),
                "lowest_family": part["family"].iloc[int(np.argmin(values.to_numpy()))],
                "highest_family": part["family"].iloc[int(np.argmax(values.to_numpy()))],
            }
        )
    return pd.DataFrame(found).sort_values(keys, key=_order_of(families, keys), kind="stable", ignore_index=True)


def _order_of(rows: pd.DataFrame, keys: list[str]):
    """A sort key keeping methods and uncertainty methods in the table's order, severities ascending."""
    orders = {key: list(dict.fromkeys(rows[key])) for key in keys if key != "severity"}
    return lambda column: column.map(orders[column.name].index) if column.name in orders else column


def severity_rows(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """What `severity_figure` draws for `metric` (see `spread_rows`), from `ShiftResult.table`."""
    return spread_rows(table[table["metric"] == metric])


def coverage_rows(coverage: pd.DataFrame) -> pd.DataFrame:
    """What `coverage_figure` draws (see `spread_rows`), from `ShiftResult.coverage`."""
    return spread_rows(coverage, "coverage")


def _unit_name(method: str, uncertainty: str) -> str:
    return method if uncertainty == PLAIN else f"{method} · {uncertainty}"


# ---------------------------------------------------------------- a value against severity, a panel per method


def compact_grid(names: list[str], title: str, x_title: str) -> tuple:
    """Small multiples for the Tour's narrow column, as its ECE step lays them out: one row up to four panels,
    else two rows (three beyond 12), up to MAX_COMPACT_COLUMNS to a row, on shared axes; each column's lowest
    panel carries the x axis's ticks and `x_title`. Returns the figure and name -> {"row", "col"}."""
    rows = 1 if len(names) <= 4 else max(2, math.ceil(len(names) / MAX_COMPACT_COLUMNS))
    fig, where = shared_grid(names, rows, math.ceil(len(names) / rows), x_title, 0.04)
    # a column whose lowest panel is above the last row has its ticks under that row: `presentable` makes room
    fig.update_layout(
        title=title, showlegend=False, margin={"t": 10, "b": 60, "l": 60, "r": 20}, meta={"ticks_under_every_row": True}
    )
    return fig, where


def _against_severity(
    rows: pd.DataFrame,
    title: str,
    y_title: str,
    series: dict[str, Series] | None,
    reference: str,
    compact: bool = False,
) -> go.Figure:
    """Small multiples of `rows` (`spread_rows`): per method its band, boxes and line (see the module), and a
    dashed line at its clean value (reference "clean") or none (the caller draws its own). `compact`: laid out
    for the Tour (`compact_grid`)."""
    rows = rows.assign(name=[_unit_name(m, u) for m, u in zip(rows["method"], rows["uncertainty"])])
    names = list(dict.fromkeys(rows["name"]))
    if compact:
        fig, panels = compact_grid(names or [""], title, "severity")
    else:
        fig, panels = panel_grid(names or [""], PANEL_PX, title, X_TITLE)
    for name in names:
        mine, where = rows[rows["name"] == name], panels[name]
        line_color = color(series_of(mine["method"].iloc[0], series))
        x = mine["severity"].astype(int).tolist()
        shaded_band(fig, x, mine["low"].clip(lower=0), mine["high"], line_color, name, where)
        spread = mine[mine["families"] > 1]  # severity 0: one set, no spread to draw
        if not spread.empty:
            fig.add_trace(
                go.Box(
                    x=spread["severity"].astype(int).tolist(),
                    lowerfence=spread["lowest"].tolist(),
                    q1=spread["q1"].tolist(),
                    median=spread["median"].tolist(),
                    q3=spread["q3"].tolist(),
                    upperfence=spread["highest"].tolist(),
                    name=f"{name} · families",
                    width=0.42,
                    line={"color": line_color, "width": 1.5},
                    fillcolor=translucent(line_color, 0.35),
                    boxpoints=False,
                    showlegend=False,
                ),
                **where,
            )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=mine["mean"].tolist(),
                mode="lines+markers",
                name=name,
                line={"color": line_color},
                marker={"size": 7, "color": line_color},
                customdata=[
                    [
                        r.families,
                        r.low,
                        r.high,
                        f"{r.lowest_family} {r.lowest:.4f}",
                        f"{r.highest_family} {r.highest:.4f}",
                    ]
                    for r in mine.itertuples()
                ],
                hovertemplate=HOVER,
                cliponaxis=False,
            ),
            **where,
        )
        clean = mine[mine["severity"] == 0]
        if reference == "clean" and not clean.empty:
            fig.add_hline(y=float(clean["mean"].iloc[0]), line=REFERENCE_LINE, **where)
    severities = sorted(set(rows["severity"].astype(int))) or [0]
    fig.update_xaxes(
        tickmode="array",
        tickvals=severities,
        ticktext=[str(s) if compact else severity_label(s) for s in severities],
        range=[severities[0] - 0.5, severities[-1] + 0.5],
        automargin=True,
    )
    fig.update_yaxes(title_text=y_title, col=1)
    fig.update_yaxes(automargin=True)
    return fig


def _drawn(rows: pd.DataFrame, *extra: float) -> np.ndarray:
    values = np.concatenate([rows[["mean", "low", "high", *SPREAD_COLUMNS]].to_numpy(dtype=float).ravel(), extra])
    return values[np.isfinite(values)]


def severity_figure(
    table: pd.DataFrame, metric: str, series: dict[str, Series] | None = None, compact: bool = False
) -> go.Figure:
    """`metric` against severity, a panel per method (see the module): `table` is `ShiftResult.table` (long: one
    row per method, uncertainty method, shift and metric); `series`: method (the table's `method`) -> Series.
    `compact`: for the Tour's narrow column at the projector's type size, a short subtitle, the severities ticked
    by number alone and three ticks on the metric's axis."""
    rows = severity_rows(table, metric)
    better = "lower" if ESTIMATORS[metric].lower_is_better else "higher"
    averaged = bool((rows["interval"] == "averaged").any()) if len(rows) else False
    parts = [
        "line: mean over the corruption families (severity 0: the clean test split)",
        "band: the families' 95% two-level bootstrap intervals (seeds, test documents), averaged"
        if averaged
        else "band: its 95% two-level bootstrap interval (seeds, test documents)",
        "box: the families' spread (lowest, quartiles, highest)",
        "dashed: clean",
        f"{better} is better",
    ]
    name = heading(metric)
    if compact:
        parts = ["line: mean over the kinds of noise", "box: their spread", "band: 95% interval", "dashed: clean"]
        name = name.split(" (")[0]  # "ECE (equal width)": "ECE", as the Tour's ECE step names it
    title = f"{name} as the test text gets noisier<br>" + subtitle(parts)
    fig = _against_severity(rows, title, name, series, "clean", compact)
    values = _drawn(rows)
    highest = max(float(values.max()) if values.size else 0.0, 1e-3) * 1.1  # every metric here is at least 0
    if ESTIMATORS[metric].lower_is_better is False and values.size:  # accuracy: from 0 a fall of 0.08 is a hair
        lowest, top = float(values.min()), float(values.max())
        pad = max(0.1 * (top - lowest), 0.01)
        fig.update_yaxes(range=[max(lowest - pad, 0.0), min(top + pad, 1.02)])
    else:  # an error: from 0, so a rise reads as its share of the whole
        fig.update_yaxes(range=[0, min(highest, 1.02) if metric in BOUNDED else highest])
    if compact:
        fig.update_yaxes(nticks=3)
    return fig


def coverage_figure(coverage: pd.DataFrame, series: dict[str, Series] | None = None) -> go.Figure:
    """Conformal coverage against severity, a panel per method (see the module), with a dashed line at the
    target 1 − α: `coverage` is `ShiftResult.coverage`; `series`: method -> Series."""
    rows = coverage_rows(coverage)
    alpha = float(coverage["alpha"].iloc[0]) if len(coverage) else 0.1
    target = 1 - alpha
    title = f"Does a {target:.0%} conformal set stay {target:.0%} on noisy text?<br>" + subtitle(
        [
            "sets calibrated on the clean validation split (LAC), judged on the shifted test split",
            "line: mean coverage over the corruption families",
            "band: the families' 95% bootstrap intervals, averaged",
            "box: their spread",
            f"dashed: the target 1 − α = {target:g}",
        ]
    )
    fig = _against_severity(rows, title, "coverage", series, "target")
    fig.add_hline(y=target, line=REFERENCE_LINE, row="all", col="all", exclude_empty_subplots=True)
    values = _drawn(rows, target)
    fig.update_yaxes(range=[max(float(values.min()) - 0.05, 0.0), min(float(values.max()) + 0.02, 1.02)])
    return fig


# ---------------------------------------------------------------- where a prefix method's attention goes


def _axis_range(values: pd.Series, low: float = 0.0, high: float = 1.0) -> list[float]:
    """The values' extent and 6% more either side, within [low, high] and never empty."""
    finite = values.to_numpy(dtype=float)
    finite = finite[np.isfinite(finite)]
    if not finite.size:
        return [low, high]
    smallest, largest = float(finite.min()), float(finite.max())
    pad = max(largest - smallest, 1e-3) * 0.06
    return [max(smallest - pad, low), min(largest + pad, high)]


def attention_shift_figure(rows: pd.DataFrame, title_name: str = "") -> go.Figure:
    """Per test document, its prefix mass against the model's confidence, right and wrong answers in two colours,
    a panel per severity (see the module): `rows` are `shift.attention.attention_table`'s (one method's runs,
    any families and seeds); `title_name` names the method in the title."""
    rows = rows[rows["family"] != DOMAIN]
    severities = sorted({int(s) for s in rows["severity"]})
    names = [f"severity {s} · clean" if s == 0 else f"severity {s} · {SHARES[s - 1]:.0%} of words" for s in severities]
    title = f"Attention on the prefix as the text gets noisier{f' · {title_name}' if title_name else ''}<br>" + (
        subtitle(
            [
                "dot: a test document (corruption families and seeds pooled)",
                "prefix mass: its tokens' attention on the prefix, over layers and heads",
                "dotted: the mean mass of the right and of the wrong answers",
            ]
        )
    )
    fig, panels = panel_grid(names or [""], ATTENTION_PANEL_PX, title, "attention mass on the prefix")
    for severity, name in zip(severities, names):
        mine, where = rows[rows["severity"].astype(int) == severity], panels[name]
        for answer, right in ((RIGHT, True), (WRONG, False)):
            part = mine[mine["correct"].astype(bool) == right]
            fig.add_trace(
                go.Scatter(
                    x=part["prefix_mass"].astype(float).tolist(),
                    y=part["confidence"].astype(float).tolist(),
                    mode="markers",
                    name=f"{answer} answer",
                    legendgroup=answer,
                    showlegend=severity == severities[0],
                    marker={"color": ANSWER_COLORS[answer], "size": 5, "opacity": 0.55},
                    customdata=part[["family", "document", "seed"]].to_numpy().tolist(),
                    hovertemplate=ATTENTION_HOVER,
                ),
                **where,
            )
            if len(part):
                line = {"dash": "dot", "color": ANSWER_COLORS[answer], "width": 1.5}
                fig.add_vline(x=float(part["prefix_mass"].astype(float).mean()), line=line, **where)
    fig.update_xaxes(range=_axis_range(rows["prefix_mass"]), nticks=5, automargin=True)
    fig.update_yaxes(range=_axis_range(rows["confidence"]), nticks=5, automargin=True)
    fig.update_yaxes(title_text="confidence", col=1)
    fig.update_layout(
        showlegend=True,
        height=fig.layout.height + LEGEND_PX,
        margin={"b": fig.layout.margin.b + LEGEND_PX},
        legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0},
    )
    return fig
