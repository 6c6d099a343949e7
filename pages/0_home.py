"""Home: what peftviz is, and the runs in the store."""

import os

import streamlit as st

from peftviz.analysis.calibration import groups_left_out
from peftviz.analysis.group_stats import Settings, group_row
from peftviz.analysis.run_labels import measured_minutes, shown_run_row
from peftviz.app import appkit, jobpanel
from peftviz.methods import describe_methods
from peftviz.paths import store_dir
from peftviz.run_config import METHOD_SETS, PRESETS, over_seeds
from peftviz.store.runs import group_runs
from peftviz.sweep.variants import comparison_configs
from peftviz.training.progress import minutes_span

# the runs table fits a 1280-pixel window with the sidebar open (790 of 818 px): the group key and
# parameter count are left to the groups table and the CLI; the run folder (for `train --resume`)
# comes last, cut with its full name on hover
RUN_COLUMNS = (
    "method",
    "seed",
    "status",
    "epochs",
    "best accuracy",
    "ECE",
    "test accuracy",
    "trainable %",
    "dataset",
    "model",
    "run",
)
RUN_COLUMN_CONFIG = {
    "method": st.column_config.TextColumn(width=130),
    "seed": st.column_config.NumberColumn(width=40),
    "status": st.column_config.TextColumn(width=80),
    "epochs": st.column_config.TextColumn(width=50),
    "best accuracy": st.column_config.TextColumn("val acc", width=60, help="best epoch's validation accuracy"),
    "ECE": st.column_config.TextColumn("val ECE", width=60, help="best epoch's validation ECE"),
    "test accuracy": st.column_config.TextColumn("test acc", width=60, help="the best epoch's model on the test split"),
    "trainable %": st.column_config.NumberColumn("trainable %", format="%.2f", width=85),
    "dataset": st.column_config.TextColumn(width=80),
    "model": st.column_config.TextColumn(width=70),
    "run": st.column_config.TextColumn("run folder", width=75),
}
# the groups table fits the same 818 px (805): a long dataset path or model name is cut, its full text on hover;
# the seeds column holds "one run: seed 0" whole
GROUP_COLUMN_CONFIG = {
    "group": st.column_config.TextColumn(width=70),
    "method": st.column_config.TextColumn(width=120),
    "dataset": st.column_config.TextColumn(width=75),
    "model": st.column_config.TextColumn(width=70),
    "seeds": st.column_config.TextColumn(width=105),
    "complete": st.column_config.NumberColumn(width=65),
    "test accuracy": st.column_config.TextColumn(width=150),
    "test ECE": st.column_config.TextColumn(width=150),
}
RESUME = ".venv/bin/peftviz train --resume RUN"  # as the README names the console command
REPORT = Settings()  # the groups table's numbers: `report`'s at its defaults
# the quick comparison's method sets (`compare --methods`), as the radio names them
SET_LABELS = {
    "paper": "the papers' methods",
    "all": "every method",
    "peft": "those built on Hugging Face peft",
    "long-documents": "the long-document table's four",
}


def status_note(runs) -> str:
    """What the statuses mean, for those the table shows: training (a live writer) is not incomplete."""
    statuses = {run.status for run in runs}
    notes = []
    if "training" in statuses:
        notes.append("Training runs are being written now; their finished epochs load.")
    if "incomplete" in statuses:
        resumable = any(run.status == "incomplete" and run.trained_here for run in runs)
        notes.append(
            "Incomplete runs were stopped (their writer is gone); their finished epochs load"
            + (f", and `{RESUME}` continues one trained here." if resumable else ".")
        )
    return " ".join(notes)


def quick_time_note(runs) -> str:
    """How long a quick run takes: measured on this store's finished quick runs when there are any,
    else the figure measured for the docs (docs/results.md), with the machine it was measured on."""
    settings = {name: PRESETS["quick"][name] for name in ("model", "limit", "max_length", "epochs", "batch_size")}
    found = measured_minutes(runs, settings)
    if not found:
        return (
            "Measured at 1.6 to 2.5 minutes per run on 2 CPU cores (the quick comparison in docs/results.md); no quick run has "
            f"finished in this store yet to time this one ({os.cpu_count()} CPU cores)."
        )
    minutes = sorted(m for m, _ in found)
    where = sorted({w for _, w in found})
    return (
        f"{minutes_span(minutes[0], minutes[-1])} minutes per run ({len(found)} quick run(s) of this store, "
        f"trained on {'; '.join(where)}), plus loading."
    )


where = "the store" if jobpanel.policy().shared else f"`{store_dir()}`"  # a shared server keeps its paths
appkit.page(
    "peftviz",
    "peftviz shows how parameter-efficient tuning changes a transformer text classifier. "
    f"It trains, or loads from {where}, classifiers tuned with the methods of two papers (Prefix-Propagation with "
    "its kernel form, and the Tiny-Attention adapter), the methods they improve on, and the baselines people use, "
    "among them the tuners of Hugging Face peft (listed at the bottom; the Train page takes any peft tuner by its "
    "type). The pages then show how well calibrated each method is, epoch by epoch, and where "
    "its attention goes.",
)

runs = appkit.runs()
st.subheader("Runs")
if runs:
    st.dataframe(
        [shown_run_row(run) for run in runs],  # scores as text: a missing one says why, not None
        hide_index=True,
        width="stretch",
        column_order=RUN_COLUMNS,
        column_config=RUN_COLUMN_CONFIG,
    )
    st.caption(f"{len(runs)} run(s) in {where}. {status_note(runs)}")
    groups = group_runs(runs)
    if any(len(group.runs) > 1 for group in groups):
        st.subheader("Groups of seeds")
        with st.spinner("Estimating each group's test numbers with their intervals…"):
            rows = [appkit.per_run(group_row, group) for group in groups]  # cached until a run changes
        st.dataframe(rows, hide_index=True, width="stretch", column_config=GROUP_COLUMN_CONFIG)
        st.caption(
            "Runs that differ only in the training seed. Test accuracy and ECE of the best epoch's models, "
            "as `report` gives them at its defaults and the Calibration page at the same settings: the mean "
            "over the seeds that finished (complete) [95% interval from the two-level bootstrap over seeds "
            f"and test documents, {REPORT.n_resamples:,} resamples, seed {REPORT.seed}, {REPORT.n_bins} "
            "equal-width bins; one run: over its test documents]. The Calibration page compares the groups "
            "with significance tests."
        )
        for line in appkit.shared(groups_left_out, runs, groups):  # one line per reason, naming the runs
            st.caption(line)
else:
    st.info(f"No runs in {where} yet.")

with st.expander("Train the quick comparison", expanded=not runs):
    method_set = st.radio(
        "Methods",
        METHOD_SETS,
        format_func=lambda name: SET_LABELS.get(name, name),
        horizontal=True,
        key="home_methods",
        help="the sets of `python -m peftviz compare --methods`",
    )
    configs = comparison_configs("quick", method_set)
    quick = PRESETS["quick"]
    st.markdown(
        f"{len(configs)} runs on the offline MiniLM and bbc-news ({quick['limit']:,} training documents, "
        f"{quick['max_length']} tokens, {quick['epochs']} epochs): {', '.join(config.name for config in configs)}. "
        + quick_time_note(runs)
    )
    n_seeds = int(
        st.number_input(
            "Training seeds",
            1,
            10,
            1,
            help="each method once per seed (0, 1, …) on the same split; with two or more "
            "seeds the Calibration page shows each method's mean with an interval and which differences are significant",
        )
    )
    engine = jobpanel.engine_choice()
    if st.button("Train the quick comparison", type="primary"):
        jobpanel.submit(over_seeds(configs, list(range(n_seeds))), engine=engine)
jobpanel.job_panel()

with st.expander("The methods"):
    st.dataframe(describe_methods(), hide_index=True, width="stretch")
