"""Where a trained classifier's attention goes on one validation document, and how much of it the prefixes take."""

import streamlit as st

from peftviz.analysis import attention as analysis
from peftviz.analysis.run_labels import data_changed
from peftviz.app import appkit
from peftviz.errors import DataError, PeftvizError
from peftviz.figures import attention as figures

CONTEXT = 32  # key tokens shown either side of the query window

appkit.page(
    "Attention",
    "With prefix methods every query also attends to learned prefix keys. Its softmax mass on them is "
    r"$\lambda(C) = \sum_{k \in P} e^{q \cdot k/\sqrt{d}} \,/\, \sum_{k} e^{q \cdot k/\sqrt{d}}$ "
    "(Li et al. 2023, eq. 6): how much of the token's new state comes from the prefixes. "
    "The grid averages λ(C) over one document's tokens for every layer and head; below it, one head's weights "
    "for a window of tokens and, where the prefixes are positions of their own, what those positions read.",
)


def first_words(text: str, n: int = 10) -> str:
    words = text.split()
    return " ".join(words[:n]) + (" …" if len(words) > n else "")


# what the page draws of the run's attention on a text, built once per server (appkit.shared): the
# recorded attention comes from appkit.document_attention's cache
def mass_figures(run, text: str) -> tuple:
    doc = appkit.document_attention(run, text)
    grid = figures.prefix_mass_grid_figure(analysis.prefix_mass_grid(doc))
    return grid, figures.prefix_mass_profile_figure(analysis.prefix_mass_profile(doc))


def token_figure(run, text: str, layer: int, head: int, start: int, rows: int):
    doc = appkit.document_attention(run, text)
    matrix, row_labels, col_labels = analysis.token_window(doc, layer, head, start, rows, CONTEXT)
    title = f"tokens {start}–{start + len(row_labels) - 1} and their neighbours"  # the figure names layer and head
    return figures.token_heatmap_figure(matrix, row_labels, col_labels, doc.n_prefix_keys, title, layer, head)


def prefix_rows_view(run, text: str, layer: int, head: int) -> tuple:
    rows = analysis.prefix_rows(appkit.document_attention(run, text), layer, head)
    return figures.prefix_rows_figure(rows, layer=layer, head=head), analysis.top_tokens_table(rows)


# runs with prefix keys first: they are what this page is about; it opens on the newest of them. Recorded
# runs (trained by another loop) hold no parameters to rebuild the model from
usable = appkit.runs(usable_only=True)
rebuildable = [run for run in usable if run.has_params]
appkit.recorded_left_out(usable)
by_prefix_first = sorted(rebuildable, key=lambda run: not run.method_class.prefix_keys)
newest = max(by_prefix_first, key=lambda run: (bool(run.method_class.prefix_keys), run.created), default=None)
run = appkit.pick_run("Run", by_prefix_first, key="attention_run", default=newest)
if run is None:
    st.stop()
config = run.config
if changed := data_changed(run):  # the documents below come from the data as it is now
    st.warning(changed)
try:
    model, tokenizer = appkit.trained_model(run)
    texts, labels = appkit.per_run(analysis.validation_split, run)
    if not texts:
        raise DataError(f"the validation split of {config.dataset} is empty")
    names = run.label_names or [str(i) for i in range(model.num_labels)]
    if st.radio("Document", ["from the validation split", "your own text"], horizontal=True) == "your own text":
        text, gold = st.text_area("Text", height=120, placeholder="Paste a document"), None
        if not text.strip():
            st.info("Paste a text to see where the model's attention goes on it.")
            st.stop()
    else:
        index = st.selectbox(
            "Validation document", range(len(texts)), format_func=lambda i: f"{i} · {first_words(texts[i])}"
        )
        text, gold = texts[index], names[labels[index]]
    doc = appkit.document_attention(run, text)
except PeftvizError as err:
    appkit.show_error(err)
    st.stop()

predicted = int(doc.probs.argmax())
st.caption(
    f"{doc.n_tokens} tokens (max_length {config.max_length}) · gold: {gold or 'unknown'} · "
    f"predicted: {names[predicted]} ({doc.probs[predicted]:.2f}) · {doc.n_prefix_keys} prefix keys"
)
if doc.local_window:
    st.caption(
        f"Longformer: a token reads the global tokens (prefix positions and the first token) and the "
        f"{doc.local_window} tokens on either side of it; weights outside that window are 0."
    )
if run.method_class.attention_note:
    st.caption(run.method_class.attention_note)
appkit.side_by_side(analysis.kernel_explanation(run) or ())  # a kernel run: λ(C) beside α
if doc.n_prefix_keys:
    left, right = st.columns(2)
    grid, profile = appkit.shared(mass_figures, run, text)
    appkit.chart(grid, "grid", left)
    appkit.chart(profile, "profile", right)
else:
    st.info(
        f"{run.label} has no prefix keys: queries read only the text, so λ(C) does not apply. Below, the "
        "encoder's attention."
    )

cols = st.columns(4)
layer = cols[0].selectbox("Layer", range(doc.n_layers), format_func=lambda i: f"layer {i + 1}")
head = cols[1].selectbox("Head", range(doc.n_heads), format_func=lambda i: f"head {i + 1}")
start = cols[2].slider("Window start (query token)", 0, doc.n_tokens - 1, 0)
rows = cols[3].slider("Rows", 1, min(analysis.MAX_ROWS, doc.n_tokens), min(32, doc.n_tokens))

appkit.chart(appkit.shared(token_figure, run, text, layer, head, start, rows), "tokens")

if doc.n_prefix_queries:
    prefix_figure, top_tokens = appkit.shared(prefix_rows_view, run, text, layer, head)
    appkit.chart(prefix_figure, "prefix_rows")
    st.dataframe(top_tokens, hide_index=True)
