"""Tiny-attention heads page: each head's weights, the averaged head, and what averaging changed."""

import streamlit as st

from peftviz.analysis import tiny_heads
from peftviz.app import appkit
from peftviz.errors import PeftvizError
from peftviz.figures import palette
from peftviz.figures import tiny_heads as figures
from peftviz.store.runs import Run

MATRIX_CHOICES = {"all four": tiny_heads.MATRICES} | {tiny_heads.SYMBOLS[m]: (m,) for m in tiny_heads.MATRICES}

appkit.page(
    "Tiny-attention heads",
    "The Tiny-Attention adapter adds M small attention heads of size D to every layer: head m reads the "
    "hidden states through its own W_Q, W_K, W_V (D × H) and writes back through its own output "
    "projection O⁽ᵐ⁾ (H × D), and the adapter adds Σ_m O⁽ᵐ⁾ z̃⁽ᵐ⁾. Parameter averaging (eqs. 5–8) "
    "replaces the heads after training by one head with the mean W_Q, W_K, W_V and output projection "
    "M·Ō = Σ_m O⁽ᵐ⁾, so M heads cost as much as one at inference. That is only close to the trained "
    "model when the heads stayed close to each other, which is why the 4-head adapter starts as perturbed "
    "copies of a trained 1-head one.",
)
st.latex(
    r"\bar W_{Q,K,V} = \frac{1}{M}\sum_{m=1}^{M} W_{Q,K,V}^{(m)}, \qquad"
    r"\sum_{m=1}^{M} O^{(m)}\tilde z_t^{(m)} \;\longrightarrow\; M\bar O\,\tilde z_t"
    r" = \Big(\sum_{m=1}^{M} O^{(m)}\Big)\tilde z_t"
)


def run_weights(run: Run) -> list[tiny_heads.HeadWeights]:
    """Per layer, each head's matrices; read once per run until it changes. Do not mutate."""
    return appkit.per_run(tiny_heads.head_weights, run, spinner="Reading the adapters' weights…")


def show_heads(weights: tiny_heads.HeadWeights, layer: int, matrices: tuple[str, ...]) -> None:
    """The heads' heatmaps, with the averaged head as the last row."""
    averaged = tiny_heads.averaged_head(weights)
    appkit.chart(figures.heads_figure(weights, averaged, matrices, layer), "tiny_heads_matrices")
    st.caption(
        "Each row is one head and the last is the averaged head; x is the hidden dimension, so a dimension "
        "lines up down a column. One colour scale per matrix; hover for values."
    )


def show_similarity(weights: tiny_heads.HeadWeights, layer: int, start: float | None) -> None:
    """The heads' cosine similarity; `start`: the layer's mean cosine when training began, if known."""
    st.subheader("How alike the heads are")
    similarity = tiny_heads.head_similarity(weights)  # (M, M)
    mean = tiny_heads.mean_similarity(similarity)
    appkit.chart(figures.similarity_figure(similarity, layer), "tiny_heads_similarity")
    st.caption(
        "Cosine of each pair of heads' [W_Q; W_K; W_V; O]. Near 1: the heads stayed close and their average "
        "can stand in for them; lower: averaging changes the model more. "
        f"Mean over the pairs in layer {layer + 1}: {mean:.4f}."
    )
    if start is not None:
        moved = "apart" if mean < start else "closer together"
        st.caption(
            f"It started at {start:.4f}, as perturbed copies of the 1-head adapter: training moved them {moved}."
        )


def show_averaging(run: Run) -> None:
    """Validation and test accuracy and ECE, and method parameters, before and after averaging."""
    st.subheader("Before and after averaging")
    try:
        table = tiny_heads.averaging_table(run)
    except PeftvizError as err:
        appkit.show_error(err)
        return
    st.caption(table.note)
    st.dataframe(table.styled(), hide_index=True, key="tiny_heads_averaging_table")
    if table.change_summary():
        st.markdown(table.change_summary())
    in_store = palette.store_series(appkit.runs(usable_only=True))  # colours keyed by method, as on every page
    appkit.chart(figures.averaging_figure(table, in_store[run.name], run.label), "tiny_heads_averaging")


def show_group_averaging(run: Run, runs: list[Run]) -> None:
    """The before/after table over the seeds of the run's setting, when it was trained at several."""
    group = tiny_heads.run_group(run, runs)
    if len(group.runs) < 2:
        return
    st.subheader(f"Before and after averaging, over {len(group.runs)} seeds ({', '.join(map(str, group.seeds))})")
    try:
        table = tiny_heads.group_averaging_table(group)
    except PeftvizError as err:
        appkit.show_error(err)
        return
    st.dataframe(table, hide_index=True, key="tiny_heads_group_table")
    st.caption(
        "mean: over the seeds of this setting; low–high: 95% Student t interval of that mean over the seeds, "
        "cut to the quantity's range (a score to [0, 1], its change to [−1, 1]); "
        "change: each seed's after − before, then averaged. One column per seed: its own value."
    )


all_runs = appkit.runs(usable_only=True)
appkit.not_applicable(all_runs, tiny_heads.applies, "they have no attention heads of their own to average")
candidates = tiny_heads.multi_head_first(all_runs)  # opens on a multi-head run: averaging is what it shows
if not candidates:
    st.info("No runs with attention heads to average in the store yet: train one on the Home or Train page.")
    st.stop()
run = appkit.pick_run(
    "Tiny-attention run",
    candidates,
    key="tiny_heads_run",
    help="Heads and similarity are per run; the members of a group differ in the seed.",
)
try:
    layers = run_weights(run)
except PeftvizError as err:
    appkit.show_error(err)
    st.stop()
left, right = st.columns(2)
layer = left.selectbox(
    "Layer", range(len(layers)), format_func=lambda i: f"layer {i + 1}", key=f"tiny_heads_layer_{len(layers)}"
)
shown = right.radio("Matrices", list(MATRIX_CHOICES), horizontal=True, key="tiny_heads_matrices_choice")
show_heads(layers[layer], layer, MATRIX_CHOICES[shown])
similarity_column, averaging_column = st.columns([2, 3])
with similarity_column:
    starts = appkit.per_run(tiny_heads.starting_similarity, run)  # None when the run did not record its start
    show_similarity(layers[layer], layer, starts[layer] if starts else None)
with averaging_column:
    show_averaging(run)
show_group_averaging(run, candidates)
