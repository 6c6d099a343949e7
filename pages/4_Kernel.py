"""Kernel page: λ(C) of a prefix-propagation run, and what fixing it to α does (eq. 3)."""

import streamlit as st

from peftviz.analysis import attention, kernel
from peftviz.app import appkit, jobpanel
from peftviz.errors import PeftvizError
from peftviz.figures import kernel as figures
from peftviz.figures import palette
from peftviz.store.runs import Run

appkit.page(
    "Kernel",
    "Prefix-propagation's attention splits into two separately normalised terms: one over the "
    "sequence keys and one over the prefix keys. In plain softmax attention the prefix term is "
    "weighted by λ(C), the share of a query's attention that goes to the prefixes, and the softmax "
    "decides it query by query. The kernel form fixes that weight to a constant α instead.",
)
st.latex(
    r"H = \mathrm{Kern}(\mathrm{cat}(P,C)W_q,\ CW_k,\ CW_v)"
    r" + \alpha\,\mathrm{Kern}(\mathrm{cat}(P,C)W_q,\ PW_k,\ PW_v)"
)


def show_lambda(run: Run) -> None:
    st.subheader("λ(C): the share of attention on the prefixes")
    per_head = st.toggle("One box per head", key="kernel_per_head")
    try:
        rows = appkit.lambda_rows(run)
        alpha = kernel.fixed_alpha(run)
    except PeftvizError as err:
        appkit.show_error(err)
        return
    appkit.chart(
        figures.lambda_figure(rows, per_head, alpha, kernel.lambda_title(run), kernel.grid_alphas()), "kernel_lambda"
    )
    st.caption(
        f"Every text token of the first {kernel.N_LAMBDA_DOCS} validation documents, per layer: box from the "
        "25th to the 75th percentile, whiskers at the 5th and 95th. The same λ(C) (eq. 6) as the Attention page's "
        "grid, which averages one document's tokens per head: its numbers differ from these by what that "
        f"document's tokens differ from all {kernel.N_LAMBDA_DOCS} documents' tokens."
    )
    appkit.side_by_side(attention.lambda_and_alpha(alpha))  # λ(C) beside α


def sweep_rows(run: Run) -> list[dict] | None:
    """The run's α sweep: from its folder if stored, else computed behind a button."""
    rows = kernel.cached_alpha_sweep(run)
    if rows is not None:
        return rows
    damaged = kernel.damaged_sweep(run)
    if damaged:
        st.warning(f"The stored α sweep was left out, damaged: {damaged}. Evaluating again replaces it.")
    st.caption(
        "Evaluates this run's trained parameters on its validation split under every α of the paper's grid and "
        "under the exact λ(C): about half a minute for MiniLM on 2 CPU cores. The result is kept in the run folder."
    )
    if not st.button("Evaluate under the α grid", key="kernel_sweep"):
        return None
    bar = st.progress(0.0, text="Loading the model…")

    def report(done: int, total: int, what: str) -> None:
        bar.progress(done / total, text=f"Evaluating under {what} ({done + 1}/{total})" if done < total else "Done")

    try:
        return kernel.alpha_sweep(run, progress=report)
    except PeftvizError as err:
        appkit.show_error(err)
        return None
    finally:
        bar.empty()


def show_alpha(run: Run | None, runs: list[Run]) -> None:
    st.subheader("Accuracy and ECE against α")
    sweep = sweep_rows(run) if run is not None else None
    trained = kernel.trained_alpha_groups(runs)
    if not sweep and not trained:
        st.info("No α results yet: evaluate a run under the α grid, or train kernel runs at the grid below.")
        return
    in_store = palette.store_series(runs)  # colours keyed by method, the same on every page
    label, run_series = (run.label, in_store.get(run.name)) if run else ("", None)
    figure = figures.alpha_figure(sweep, trained, label, run_series, in_store)
    appkit.chart(figure, "kernel_alpha")
    exact = kernel.exact_row(sweep or [])
    if exact and kernel.alpha_free(run):
        stored = run.best_metrics.get("accuracy", float("nan"))
        st.caption(
            f"The dashed line, exact λ(C), is the run itself: accuracy {exact['accuracy']:.4f} "
            f"(stored at its best epoch: {stored:.4f})."
        )
    if trained:
        st.caption("Diamonds: kernel runs of the store, each at the α it was trained with (best validation epoch).")
    if any(row["n"] > 1 for row in trained):
        st.caption(
            "Where an α was trained at several seeds, its diamond is the mean over the seeds with a 95% "
            "t-interval over them as the error bar, and each seed is a small dot."
        )


def show_training() -> None:
    st.subheader("Train kernel runs at the paper's α grid")
    st.caption(
        f"Trains the kernel form at α ∈ {{{', '.join(f'{a:g}' for a in kernel.grid_alphas())}}} "
        "with the quick preset (MiniLM, bbc-news), one after another in the background: about 10 minutes "
        "on 2 CPU cores."
    )
    if st.button("Train at the α grid", key="kernel_train_grid"):
        jobpanel.submit(kernel.grid_configs())
    jobpanel.job_panel()


all_runs = appkit.runs(usable_only=True)
appkit.not_applicable(all_runs, kernel.sweepable, "λ(C) and α weigh the prefix term of the attention, which they lack")
picked = appkit.pick_run("Run", kernel.propagation_runs(all_runs), key="kernel_run")
if picked is not None:
    show_lambda(picked)
show_alpha(picked, all_runs)
show_training()
