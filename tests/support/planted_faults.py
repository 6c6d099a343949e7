"""A Streamlit script that draws one known fault per `?fault=` link, for the figure audit to catch.

Served by test_browser.py (`streamlit run tests/support/planted_faults.py`); `?fault=none` draws the same
charts without a fault, so the audit is seen to pass as well as to fail. Charts go through
`appkit.chart`, as on the app's pages, with a CSV button each.
"""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from peftviz.app import appkit
from peftviz.figures import attention, calibration

# ECE 0.002–0.125 over three epochs, as the issue saw it on the quick store
ECE = pd.concat(
    pd.DataFrame(
        {"run": name, "epoch": [1, 2, 3], "ece": values, "low": np.array(values) * 0.6, "high": np.array(values) * 1.4}
    )
    for name, values in {
        "fine-tuning": [0.02, 0.01, 0.002],
        "prefix-tuning": [0.125, 0.06, 0.04],
        "tiny-attention 4H averaged": [0.05, 0.03, 0.029],
    }.items()
)


def ece_figure() -> go.Figure:
    return calibration.ece_over_epochs_figure(ECE, "width", 10, "planted", epoch=3)


def old_ece_figure() -> go.Figure:
    """The figure as it was before the fix: its matched ECE axes with no range and `autorange` unset,
    from 0 (plotly.js then draws its empty-axis default, 0 to 4)."""
    fig = ece_figure()
    fig.update_yaxes(range=None, autorange=None, rangemode="tozero")
    return fig


# λ(C) of MiniLM's 6 layers × 12 heads, 0.01–0.2 as a prefix run's are
GRID = np.random.default_rng(0).uniform(0.01, 0.2, size=(6, 12))


def old_grid_figure() -> go.Figure:
    """The λ(C) grid as it was before the fix: every cell's number at 9 px, whatever the cell's width."""
    fig = attention.prefix_mass_grid_figure(GRID)
    fig.update_traces(texttemplate="%{z:.3f}", textfont_size=9)
    return fig


def grid_column():
    """Where the Attention page draws the grid: half the main column, beside the sidebar (400 px at 1280)."""
    st.sidebar.radio("Charts download as", ["SVG", "PNG"])
    return st.columns(2)[0]


def line(**layout) -> go.Figure:
    fig = go.Figure(go.Scatter(x=[0, 1, 2], y=[0.1, 0.4, 0.3], mode="lines+markers", name="a line"))
    fig.update_layout({"title": "A line", "height": 360} | layout)
    return fig


st.set_page_config(page_title="planted faults", layout="wide")
fault = st.query_params.get("fault", "none")
if fault == "old-ece":
    appkit.chart(old_ece_figure(), "planted")
elif fault == "point-outside":
    appkit.chart(line(yaxis_range=[0, 0.35]), "planted")
elif fault == "overlapping-title":  # the title moved down onto the plot area
    appkit.chart(line(title={"text": "A title over the plot", "yref": "paper", "y": 0.6}), "planted")
elif fault == "title-on-legend":  # a horizontal legend right under the x axis, on its title
    legend = {"orientation": "h", "x": 0.45, "y": -0.12}
    appkit.chart(line(xaxis_title="x axis title", legend=legend, showlegend=True), "planted")
elif fault == "clipped-equation":
    st.columns(3)[0].latex(r"H = " + " + ".join(rf"\alpha_{{{i}}}\,\mathrm{{Attn}}(q, P_{{{i}}})" for i in range(12)))
    appkit.chart(line(), "planted")
elif fault == "wide-table":
    st.dataframe(pd.DataFrame({f"a long column name {i}": ["0.0123 [0.0100, 0.0150]"] for i in range(12)}))
    appkit.chart(line(), "planted")
elif fault == "empty-csv":
    appkit.chart(line(), "planted", data=pd.DataFrame({"what": ["nothing"]}))
elif fault == "csv-without-numbers":
    appkit.chart(line(), "planted", data=pd.DataFrame({"x": [0, 1, 2], "y": [0.1, 0.4, 0.31]}))
elif fault == "crowded-grid":  # on the Attention page: in half the page's width
    appkit.chart(old_grid_figure(), "planted", grid_column())
elif fault == "below-fold":
    st.markdown("Some text above the chart. " * 40)
    appkit.chart(line(height=700), "planted")
else:  # no fault: the fixed ECE figure and a plain line
    appkit.chart(ece_figure(), "planted")
    appkit.chart(line(), "planted-line")
    appkit.chart(attention.prefix_mass_grid_figure(GRID), "planted-grid", grid_column())
