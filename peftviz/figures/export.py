"""Getting a chart out of the app: the image from plotly's own toolbar, the numbers as CSV.

Reading groups put figures on slides, and a figure without its numbers cannot be checked, so every
chart the app draws offers both:

* `toolbar_config(name, image_format)`: the plotly.js `config` whose camera button downloads the
  chart as SVG (vector, for slides and papers) or PNG (at twice the screen's resolution). It is
  drawn in the browser by plotly.js itself: no server-side browser or kaleido is needed.
* `figure_table(fig)`: the data behind the chart, read back from the figure's own traces, one row
  per drawn point (heatmaps: per cell), so the CSV always holds exactly what is drawn.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from peftviz.errors import ConfigError

IMAGE_FORMATS = ("svg", "png")
# per-point arrays that carry numbers or labels: of bars and lines, then of boxes drawn from precomputed quantiles
_POINT_FIELDS = ("x", "y", "base", "text", "lowerfence", "q1", "median", "q3", "upperfence", "mean")


def file_stem(name: str) -> str:
    """A file name from a chart's name: lower-case words joined by hyphens."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "chart"


def toolbar_config(name: str, image_format: str = "svg") -> dict:
    """plotly.js config: the toolbar's camera button saves `<name>.svg` (or .png at scale 2)."""
    if image_format not in IMAGE_FORMATS:
        raise ConfigError(f"image format must be one of {', '.join(IMAGE_FORMATS)}, not {image_format!r}")
    return {
        "displaylogo": False,
        "toImageButtonOptions": {
            "format": image_format,
            "filename": file_stem(name),
            "scale": 2 if image_format == "png" else 1,
        },
    }


def _values(trace, field: str):
    value = getattr(trace, field, None)
    if value is None or isinstance(value, (str, int, float)):
        return None
    return list(np.asarray(value, dtype=object).ravel()) if np.ndim(value) else None


def _heatmap_rows(trace) -> pd.DataFrame:
    z = np.asarray(trace.z, dtype=float)  # (rows, cols)
    xs = list(trace.x) if trace.x is not None else list(range(z.shape[1]))
    ys = list(trace.y) if trace.y is not None else list(range(z.shape[0]))
    row, col = np.meshgrid(np.arange(z.shape[0]), np.arange(z.shape[1]), indexing="ij")
    return pd.DataFrame({"x": [xs[c] for c in col.ravel()], "y": [ys[r] for r in row.ravel()], "z": z.ravel()})


def _point_rows(trace) -> pd.DataFrame:
    columns = {field: _values(trace, field) for field in _POINT_FIELDS}
    columns = {field: values for field, values in columns.items() if values is not None}
    if not columns:
        return pd.DataFrame()
    length = max(len(values) for values in columns.values())
    rows = pd.DataFrame(
        {
            field: values if len(values) == length else values + [None] * (length - len(values))
            for field, values in columns.items()
        }
    )
    if trace.type == "bar" and "base" in rows:  # a bar from `base` reaches base + y: the number a reader sees
        rows["top"] = pd.to_numeric(rows["base"], errors="coerce") + pd.to_numeric(rows["y"], errors="coerce")
    return rows.dropna(how="all")  # a legend-only trace (x=[None]) draws no point


def figure_table(fig: go.Figure) -> pd.DataFrame:
    """Every trace's points as rows: trace (its name), point, and the trace's x, y, z, base, text; a bar
    drawn from a base, its top (base + y); a box's quartiles and fences (lowerfence, q1, median, q3,
    upperfence, mean). Columns no trace has are left out."""
    frames = []
    for index, trace in enumerate(fig.data):
        rows = _heatmap_rows(trace) if trace.type == "heatmap" else _point_rows(trace)
        if rows.empty:
            continue
        rows.insert(0, "point", np.arange(len(rows)))
        rows.insert(0, "trace", trace.name if trace.name else f"trace {index}")
        frames.append(rows)
    if not frames:
        return pd.DataFrame(columns=["trace", "point"])
    return pd.concat(frames, ignore_index=True).dropna(axis="columns", how="all")
