"""Calibration: reliability diagrams, ECE per epoch with bootstrap bands, and temperature scaling."""

import pandas as pd
import streamlit as st

from peftviz import appkit
from peftviz.analysis import calibration as analysis
from peftviz.figures import calibration as figures
from peftviz.runs import RunError, run_signature

N_RESAMPLES = 200  # enough for a readable band; thousands would slow every widget change
MAX_DEFAULT_RUNS = 6

appkit.page(
    "Calibration",
    "A classifier is *calibrated* when its confidence matches its accuracy: of the predictions made "
    "with 80% confidence, 80% should be right. A **reliability diagram** sorts the predictions into "
    "confidence bins and plots each bin's accuracy against its mean confidence; a calibrated model "
    "sits on the diagonal. The **expected calibration error** summarises the diagram as the gap "
    "weighted by how many predictions each bin holds: "
    r"$\mathrm{ECE} = \sum_b \frac{n_b}{N}\,\lvert \mathrm{acc}(b) - \mathrm{conf}(b) \rvert$.",
)


# cache_resource, not cache_data: results are shared, never pickled. The run object is not hashed
# (leading underscore): `key` (run folder, run signature) stands for it, and changes with every epoch.
@st.cache_resource(show_spinner=False, max_entries=512)
def reliability(_run, key, epoch, n_bins, scheme, name):
    return analysis.reliability_table(_run, epoch, n_bins, scheme, name)


@st.cache_resource(show_spinner=False, max_entries=256)
def ece_curve(_run, key, n_bins, scheme, name):
    return analysis.ece_over_epochs(_run, n_bins, scheme, N_RESAMPLES, name)


@st.cache_resource(show_spinner=False, max_entries=64)
def temperature(_run, key, n_bins, scheme, name):
    return analysis.temperature_scaling(_run, n_bins, scheme, name)


@st.cache_resource(show_spinner=False, max_entries=256)
def metrics(_run, key, epoch, n_bins, scheme, name):
    return analysis.metrics_row(_run, epoch, n_bins, scheme, name)


corrupt = [run for run in appkit.runs() if run.status == "corrupt"]
if corrupt:
    st.caption("Skipped unreadable runs: " + "; ".join(f"{run.name} ({run.error})" for run in corrupt))
usable = appkit.runs(usable_only=True)
if not usable:
    st.info("No runs with a finished epoch yet: train some on the Home or Train page, then come back.")
    st.stop()

by_name = {run.name: run for run in usable}
names = analysis.display_names(usable)
chosen = st.multiselect(
    "Runs",
    list(by_name),
    default=[run.name for run in analysis.default_selection(usable, MAX_DEFAULT_RUNS)],
    format_func=names.get,
)
if not chosen:
    st.info("Pick at least one run.")
    st.stop()
runs = [by_name[name] for name in chosen]

left, middle, right = st.columns(3)
scheme = left.radio("Bins", list(analysis.SCHEME_NAMES), format_func=analysis.SCHEME_NAMES.get, horizontal=True)
n_bins = middle.slider("Number of bins", 5, 30, 10)
max_epoch = max(max(analysis.finished_epochs(run)) for run in runs)
epoch = right.slider("Epoch", 1, max_epoch, max_epoch) if max_epoch > 1 else 1
right.caption("Runs with fewer finished epochs show their last one.")

keys = {run.name: (str(run.path), run_signature(run.path)) for run in runs}

st.subheader("Reliability diagrams")
cells = [cell for _ in range(0, len(runs), 3) for cell in st.columns(3)]  # rows of three
tables = []
for run, cell in zip(runs, cells):
    with cell:
        try:
            table = reliability(run, keys[run.name], epoch, n_bins, scheme, names[run.name])
        except (RunError, ValueError) as err:
            appkit.show_error(err)
            continue
        tables.append(table)
        st.plotly_chart(figures.reliability_figure(table), key=f"reliability-{run.name}")
        st.caption(figures.caption(table))

st.subheader("ECE over epochs")
curves = []
for run in runs:
    try:
        curves.append(ece_curve(run, keys[run.name], n_bins, scheme, names[run.name]))
    except (RunError, ValueError) as err:
        appkit.show_error(err)
if curves:
    st.plotly_chart(figures.ece_over_epochs_figure(pd.concat(curves), scheme, n_bins, N_RESAMPLES, epoch))
    st.caption("ECE is biased upwards and resampling adds to that, so a band can lie above its line.")

st.subheader("Temperature scaling")
with_test = [run for run in runs if analysis.has_predictions(run, "test")]
if with_test:
    run = by_name[st.selectbox("Run", [run.name for run in with_test], format_func=names.get)]
    try:
        result = temperature(run, keys[run.name], n_bins, scheme, names[run.name])
    except (RunError, ValueError) as err:
        appkit.show_error(err)
    else:
        st.plotly_chart(figures.temperature_figure(result), key="temperature")
        st.dataframe(result.comparison(), width="content")
        st.caption(
            f"One temperature T = {result.temperature:.3g} divides every log-probability. It is fitted "
            f"to minimise NLL on the validation predictions of epoch {result.fitted_on_epoch}, the best "
            "epoch, and judged on that epoch's test predictions. It never changes the predicted class."
        )
else:
    st.info("None of the chosen runs has test predictions: they are written when a run finishes.")

st.subheader("Metrics")
rows = []
for run in runs:
    try:
        rows.append(metrics(run, keys[run.name], epoch, n_bins, scheme, names[run.name]))
    except (RunError, ValueError) as err:
        appkit.show_error(err)
if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    st.caption(f"Validation predictions at the chosen epoch; ECE, MCE, ACE and classwise ECE with "
               f"{n_bins} {analysis.SCHEME_NAMES[scheme]} bins.")
st.download_button(
    "Download the per-bin table (CSV)",
    analysis.bins_csv(tables),
    file_name=f"calibration-bins-{scheme}-{n_bins}-epoch{epoch}.csv",
    mime="text/csv",
)
