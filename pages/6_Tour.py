"""Tour: the papers' ideas in order, one figure from the store each, large enough for a projector.

← and → (or the buttons) step through; `?step=N` links to a step. The steps' text and which runs
they draw live in `peftviz.app.tour`; this page only draws them.
"""

import numpy as np
import pandas as pd
import streamlit as st

from peftviz.analysis import attention, group_stats, kernel, tiny_heads
from peftviz.analysis import calibration as calibration_analysis
from peftviz.analysis.shift.shifts import corruption_grid
from peftviz.analysis.shift.table import shift_table
from peftviz.app import appkit, tour
from peftviz.errors import PeftvizError
from peftviz.figures import attention as attention_figures
from peftviz.figures import kernel as kernel_figures
from peftviz.figures import palette
from peftviz.figures import tiny_heads as tiny_figures
from peftviz.figures.shift import severity_figure
from peftviz.figures.tour import ece_panels_figure, presentable, trainable_figure
from peftviz.store.runs import Group, group_runs

# projector legibility: larger body text and equations, less chrome; the heading shrinks with the
# window so a step's title stays on one line and its figure above the fold of a 720-pixel window
PROJECTOR_CSS = """<style>
.stMainBlockContainer { max-width: 1500px; padding-top: 3.5rem; padding-bottom: 1rem; }
.stMainBlockContainer p { font-size: 1.3rem; line-height: 1.45; }
.stMainBlockContainer h1 { font-size: clamp(1.5rem, 2.2vw, 2.6rem); padding: 0.2rem 0; }
.stMainBlockContainer .katex { font-size: 1.3em; }
</style>"""

appkit.leave_folder_navigation()
st.set_page_config(page_title="peftviz · Tour", layout="wide", initial_sidebar_state="collapsed")
appkit.style(appkit.PAGE_CSS + PROJECTOR_CSS)


def go_to(index: int) -> None:
    st.query_params["step"] = str(index + 1)


def prefixes_figure(runs, in_store):
    rows = [
        {
            "label": run.label,
            "trainable": run.parameters["trainable"],
            "total": run.parameters["total"],
            "color": palette.color(in_store[run.name]),
        }
        for run in runs
    ]
    return trainable_figure(sorted(rows, key=lambda row: -row["trainable"]))


def attention_figure(runs, in_store):
    run = runs[0]
    text = appkit.per_run(attention.validation_split, run)[0][0]
    doc = appkit.document_attention(run, text)  # the Attention page's cache: computed once for both
    title = f"λ(C) per layer and head · {run.label} · its first validation document"
    return attention_figures.prefix_mass_grid_figure(attention.prefix_mass_grid(doc), title=title)


def kernel_figure(runs, in_store):
    run = runs[0]
    rows = appkit.lambda_rows(run)  # the Kernel page's cache
    return kernel_figures.lambda_figure(
        rows, False, kernel.fixed_alpha(run), kernel.lambda_title(run), kernel.grid_alphas()
    )


def calibration_figure(runs, in_store):
    """Each setting's ECE per epoch as the Calibration page draws it at 10 bins and 200 resamples: one run's, or
    a group's seed mean, named as such."""
    groups = group_runs(runs)
    names = calibration_analysis.display_names([group.runs[0] for group in groups])
    names = {
        group.key: names[group.runs[0].name]
        if len(group.runs) == 1
        else f"{group.label} · mean of seeds {','.join(map(str, group.seeds))}"
        for group in groups
    }
    curves = pd.concat(
        [
            appkit.per_run(calibration_analysis.unit_ece_over_epochs, group, 10, "width", 200, names[group.key])
            for group in groups
        ]
    )
    series = {names[group.key]: palette.unit_series(group.runs, in_store) for group in groups}
    band = "95% bootstrap over 200 resamples of the validation examples"
    if any(len(group.runs) > 1 for group in groups):
        band += "; a mean of seeds: over its seeds and the examples"
    return ece_panels_figure(curves, band, series, 10)


def averaging_figure(runs, in_store):
    layers = appkit.per_run(tiny_heads.head_weights, runs[0], spinner="Reading the adapters' weights…")
    similarities = [tiny_heads.head_similarity(weights) for weights in layers]
    layer = int(np.argmin([tiny_heads.mean_similarity(sim) for sim in similarities]))  # heads most different
    return tiny_figures.similarity_figure(similarities[layer], layer)


def _shift_ece(group: Group):
    """The ECE rows of the Under shift page's table at its defaults (every family, severities 0 to 5, 200
    resamples): each model runs on the noisy test text once, its predictions kept in its run folder for both."""
    settings = group_stats.Settings(n_resamples=200)
    return shift_table(group_runs(group.runs), corruption_grid(), settings, metrics=("ece",)).table


def shift_figure(runs, in_store):
    """ECE against the severity of the noise, a panel per setting (a group of seeds: their mean)."""
    table = appkit.per_run(
        _shift_ece, Group("tour-shift", runs), spinner="Running each model on noisy test text (once: kept in its run)…"
    )
    groups = group_runs(runs)
    names = group_stats.unique_names(groups)
    series = {names[group.key]: palette.unit_series(group.runs, in_store) for group in groups}
    return severity_figure(table, "ece", series, compact=True)


FIGURES = {
    "prefixes": prefixes_figure,
    "attention": attention_figure,
    "kernel": kernel_figure,
    "calibration": calibration_figure,
    "averaging": averaging_figure,
    "shift": shift_figure,
}


def step_figure(key: str, runs, in_store):
    """A step's figure, projector-sized: built once per server for its runs as they are (appkit.shared)."""
    return presentable(FIGURES[key](runs, in_store))


def draw(step: tour.Step, runs, comparison: tour.Comparison | None) -> None:
    """The step's figure from the comparison's runs, or what to train for it, or the error that stopped it."""
    picked = step.pick(comparison.members) if comparison else []
    if not picked:
        where = f"{comparison.name} has" if comparison else "The store has"
        st.info(f"{where} no run for this step yet. {step.missing}")
        return
    try:
        figure = appkit.shared(step_figure, step.key, picked, palette.store_series(runs))
    except PeftvizError as err:
        appkit.show_error(err)
        return
    appkit.chart(figure, f"tour_{step.key}")


asked = st.query_params.get("step", 1)
index = tour.step_index(asked)
step = tour.STEPS[index]
back, heading, forward = st.columns([1, 10, 1], vertical_alignment="center")
back.button(
    "←",
    key="tour_back",
    shortcut="Left",
    disabled=index == 0,
    on_click=go_to,
    args=(index - 1,),
    help="previous step (← key)",
)
forward.button(
    "→",
    key="tour_next",
    shortcut="Right",
    disabled=index == len(tour.STEPS) - 1,
    on_click=go_to,
    args=(index + 1,),
    help="next step (→ key)",
)
heading.title(f"{index + 1} / {len(tour.STEPS)} · {step.title}")
if note := tour.unknown_step(asked):
    st.warning(note)
store_runs = appkit.runs(usable_only=True)
shown = tour.comparison_of(store_runs)
text, drawing = st.columns([2, 3], gap="large")  # side by side: the figure starts under the heading
if shown:
    text.markdown(f"**Runs: {shown.name}**")
text.markdown(step.text)
text.latex(step.equation)
with drawing:
    draw(step, store_runs, shown)
for line in tour.left_out(appkit.runs(), shown):  # under the step, which stays whole on the first screen
    st.caption(line)
st.caption(" · ".join(f"step {i + 1}: {s.title.split(':')[0]}" for i, s in enumerate(tour.STEPS)))
