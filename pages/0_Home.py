"""Home: what peftviz is, and the runs in the store."""

import streamlit as st

from peftviz import appkit
from peftviz.config import METHOD_SETS, PRESETS, comparison, over_seeds
from peftviz.methods import describe_methods
from peftviz.runs import group_row, group_runs, run_row, store_dir

appkit.page(
    "peftviz",
    "peftviz shows how parameter-efficient tuning changes a transformer text classifier. "
    "It trains, or loads from `cache/`, classifiers tuned with the methods of two papers (Prefix-Propagation with "
    "its kernel form, and the Tiny-Attention adapter), the methods they improve on, and the baselines people use "
    "(listed at the bottom). The pages then show how well calibrated each method is, epoch by epoch, and where "
    "its attention goes.",
)

runs = appkit.runs()
st.subheader("Runs")
if runs:
    st.dataframe(
        [run_row(run) for run in runs],
        hide_index=True,
        width="stretch",
        column_config={
            "best accuracy": st.column_config.NumberColumn(format="%.3f"),
            "ECE": st.column_config.NumberColumn(format="%.3f"),
            "test accuracy": st.column_config.NumberColumn(format="%.3f"),
            "trainable %": st.column_config.NumberColumn(format="%.2f"),
        },
    )
    st.caption(f"{len(runs)} run(s) in `{store_dir()}`. Incomplete runs were stopped; their finished epochs load.")
    groups = group_runs(runs)
    if any(len(group.runs) > 1 for group in groups):
        st.subheader("Groups of seeds")
        st.dataframe([group_row(group) for group in groups], hide_index=True, width="stretch")
        st.caption("Runs that differ only in the training seed. Best-epoch validation numbers: mean over the seeds "
                   "[95% t-interval]. The Calibration page compares the groups with significance tests.")  # fmt: skip
else:
    st.info(f"No runs in `{store_dir()}` yet.")

with st.expander("Train the quick comparison", expanded=not runs):
    with_baselines = st.toggle("With the baselines", help="the papers' methods, or those and the baselines too")
    configs = comparison("quick", METHOD_SETS[1] if with_baselines else METHOD_SETS[0])
    quick = PRESETS["quick"]
    st.markdown(
        f"{len(configs)} runs on the offline MiniLM and bbc-news ({quick['limit']:,} training documents, "
        f"{quick['max_length']} tokens, {quick['epochs']} epochs): {', '.join(config.name for config in configs)}. "
        "About 2 minutes per run on 2 CPU cores (1.6 to 2.5 measured)."
    )
    n_seeds = int(st.number_input(
        "Training seeds", 1, 10, 1, help="each method once per seed (0, 1, …) on the same split; with two or more "
        "seeds the Calibration page shows each method's mean with an interval and which differences are significant",
    ))  # fmt: skip
    if st.button("Train the quick comparison", type="primary", disabled=appkit.training_now()):
        appkit.job_manager().start(over_seeds(configs, list(range(n_seeds))), store_dir())
appkit.job_panel()

with st.expander("The methods"):
    st.dataframe(describe_methods(), hide_index=True, width="stretch")
