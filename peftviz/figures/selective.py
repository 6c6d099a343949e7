"""Figures of selective prediction, built from `peftviz.analysis.selective`'s tables.

A risk–coverage curve: answer the predictions the model is most confident of and abstain on the
rest; at coverage kappa (the share answered) the curve gives the error rate among those answered.
Read from the right: at coverage 1 it is the plain error rate, and a model whose confidence ranks
its errors last falls to 0 as it abstains. The area under it is AURC.

Small multiples, as `calibration.ece_over_epochs_figure` draws ECE over epochs: one panel per run
or group on shared axes, its line over its band, colours from `palette` (one per method on every
page), no legend (each panel's title names its unit), for the same reason: six translucent bands
on one plot blend into one another. Dotted vertical lines mark 80% and 90% coverage, where the
page's table reads its accuracies.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from peftviz.figures.calibration import panel_grid, shaded_band
from peftviz.figures.palette import Series, color, series_of

MARKED_COVERAGES = (0.8, 0.9)  # the table's "accuracy at 80% / 90% coverage"
PANEL_PX = 200
COVERAGE_RANGE = [0, 1.02]  # the curve ends at 1; a little more so its last point is whole
HOVER = "coverage %{x:.2f} · error rate %{y:.4f}<extra></extra>"


def _highest_drawn(table: pd.DataFrame) -> float:
    """The largest finite risk or band top (at least 1e-3, so an all-correct unit still has an axis)."""
    values = table[["risk", "high"]].to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    return max(float(finite.max()) if finite.size else 0.0, 1e-3)


def risk_coverage_figure(table: pd.DataFrame, series: dict[str, Series] | None, band_text: str) -> go.Figure:
    """One panel per unit of `table` (rows of `analysis.selective.risk_coverage_table`, concatenated):
    the error rate among the answered against coverage, over its band; `band_text` says what the band is."""
    names = list(dict.fromkeys(table["run"]))
    title = f"Risk–coverage: error rate among the most confident answers<br><sup>band: {band_text}</sup>"
    fig, panels = panel_grid(names, PANEL_PX, title, "coverage (share answered)")
    for name in names:
        rows, where = table[table["run"] == name], panels[name]
        line_color = color(series_of(name, series))
        coverage = rows["coverage"].tolist()
        shaded_band(fig, coverage, rows["low"], rows["high"], line_color, name, where)
        fig.add_trace(
            go.Scatter(
                x=coverage,
                y=rows["risk"].tolist(),
                mode="lines",
                name=name,
                legendgroup=name,
                line={"color": line_color},
                hovertemplate=HOVER,
            ),
            **where,
        )
    for coverage in MARKED_COVERAGES:
        fig.add_vline(x=coverage, line={"dash": "dot", "color": "gray"}, row="all", col="all")
    fig.update_xaxes(range=COVERAGE_RANGE, tickformat=".0%", automargin=True)
    fig.update_yaxes(range=[0, _highest_drawn(table) * 1.1], automargin=True)
    fig.update_yaxes(title_text="error rate", col=1)
    return fig
