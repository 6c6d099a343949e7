"""Calibration: reliability diagrams (binned and smooth), ECE over epochs, a comparison table with
intervals and significance, and recalibration; for single runs or for groups of seeds."""

import pandas as pd
import streamlit as st

from peftviz.analysis import calibration as analysis
from peftviz.analysis import group_stats, power
from peftviz.app import appkit
from peftviz.calibration import estimators
from peftviz.errors import PeftvizError, RunError
from peftviz.figures import calibration as figures
from peftviz.store.runs import Group

MAX_DEFAULT_UNITS = 6

appkit.page(
    "Calibration",
    "A classifier is *calibrated* when its confidence matches its accuracy: of the predictions made "
    "with 80% confidence, 80% should be right. A **reliability diagram** sorts the predictions into "
    "confidence bins and plots each bin's accuracy against its mean confidence; a calibrated model "
    "sits on the diagonal. The **expected calibration error** summarises the diagram as the gap "
    "weighted by how many predictions each bin holds: "
    r"$\mathrm{ECE} = \sum_b \frac{n_b}{N}\,\lvert \mathrm{acc}(b) - \mathrm{conf}(b) \rvert$. "
    "Binned ECE depends on the bins and is biased upwards on few examples, so the page also shows the "
    "smooth ECE (Błasiok & Nakkiran 2024), a debiased ECE and ECE-sweep, each with a 95% interval, "
    "and says which differences between methods are larger than chance.",
)


def ece_figure(units: list[Group], labels: list[str], n_bins, scheme, n_resamples, band: str, epoch: int, series):
    """The units' ECE over epochs (`analysis.unit_ece_over_epochs`, cached per unit) in one figure."""
    curves = pd.concat(
        [
            appkit.per_run(analysis.unit_ece_over_epochs, unit, n_bins, scheme, n_resamples, label)
            for unit, label in zip(units, labels)
        ]
    )
    return figures.ece_over_epochs_figure(curves, scheme, n_bins, band, epoch, series)


def headed(wide: pd.DataFrame) -> pd.DataFrame:
    """A wide table with the metrics' headings as column names, for a static table: its cells and
    headings wrap, so eight metrics' intervals fit the page's width instead of scrolling."""
    return wide.rename(columns={name: e.heading for name, e in estimators.ESTIMATORS.items()})


def tables_shown(units: list[Group], settings: group_stats.Settings, metrics: tuple) -> dict:
    """Every run estimated once (cached per run), with a progress bar while new ones compute; then the
    groups' statistics and the tables the page shows of them, once per server (`build_tables`)."""
    members = [run for unit in units for run in unit.runs]
    appkit.stepped(
        members,
        lambda done, _: f"Estimating every metric with its interval: run {done + 1} of {len(members)}",
        lambda run: appkit.per_run(group_stats.run_estimates, run, settings, metrics),
    )
    return appkit.shared(build_tables, units, settings, metrics)


def build_tables(units: list[Group], settings: group_stats.Settings, metrics: tuple) -> dict:
    """The groups' statistics and the tables the page shows of them (pairs and P(A better): only when
    there are some)."""
    estimates = {
        run.name: appkit.per_run(group_stats.run_estimates, run, settings, metrics)
        for unit in units
        for run in unit.runs
    }
    stats = group_stats.stats_of_estimates(units, estimates, settings, metrics)
    pairs = not stats.pairs.empty
    return {
        "stats": stats,
        "summary": headed(group_stats.wide_summary(stats)),
        "pairs": headed(group_stats.wide_pairs(stats)) if pairs else None,
        "improvement": headed(group_stats.wide_improvement(stats))
        if pairs and stats.pairs["p_better"].notna().any()
        else None,
        "words": "\n".join(f"- {line}" for line in group_stats.plain_words(stats)) if pairs else "",
    }


def smooth_figure(units: list[Group], labels: list[str], epoch: int, n_resamples: int, title: str, band: str, series):
    """Each unit's smoothed reliability curve (a group: its seeds' mean and curves, banded over the seeds from
    `analysis.MIN_BAND_SEEDS` on) in one figure."""
    curves = {  # a group is banded over its seeds, so its runs need no bootstrap band of their own
        label: analysis.group_mean_curve(
            [
                appkit.per_run(analysis.smooth_diagram, run, epoch, n_resamples, 0, len(unit.runs) == 1)
                for run in unit.runs
            ],
            seeds=unit.seeds,
        )
        for unit, label in zip(units, labels)
    }
    return figures.smooth_reliability_figure(curves, title, band, series)


def plan_panel(judged: list[Group], settings: group_stats.Settings, metric: str, heading: str) -> None:
    """Beside the differences: how many seeds, or test documents, each would need to be detected."""
    st.markdown(f"**How many seeds an answer needs** ({heading})")
    if sum(len(unit.runs) >= 2 for unit in judged) < 2:
        st.caption(
            "Planning needs two groups of two seeds or more: one run cannot tell the seeds' variance from "
            "the test set's."
        )
        return
    table = appkit.shared(power.power_table, judged, settings, (metric,))
    st.table(power.panel_table(table, metric), border="horizontal", hide_index=True)
    st.caption(
        f"For each pair: the power this comparison had to detect the difference seen, and the fewest seeds on "
        f"these documents, or documents at these seeds, that detect it with 80% power at 0.05 over the "
        f"{len(table)} pairs in `report`'s test (1,000 resamples), if the difference seen is the true one and "
        "the seeds' and documents' variances stay as the two-level bootstrap separates them here; with 200 "
        "resamples those are rougher (docs/statistics.md)."
    )


# ---------------------------------------------------------------- what to show
chosen = appkit.choose_units("calibration", MAX_DEFAULT_UNITS)
units, names, series, as_groups, runs = chosen.units, chosen.names, chosen.series, chosen.as_groups, chosen.runs

left, middle, right, far = st.columns(4)
scheme = left.radio(
    "Bins",
    list(analysis.SCHEME_NAMES),
    format_func=analysis.SCHEME_NAMES.get,
    horizontal=True,
    key="calibration_scheme",
)
n_bins = middle.slider("Number of bins", 5, 30, 10, key="calibration_bins")
max_epoch = max(max(analysis.finished_epochs(run)) for run in runs)
epoch = right.slider("Epoch", 1, max_epoch, max_epoch, key="calibration_epoch") if max_epoch > 1 else 1
right.caption("Runs with fewer finished epochs show their last one.")
n_resamples = far.radio(
    "Bootstrap resamples",
    group_stats.RESAMPLE_CHOICES,
    horizontal=True,
    help="Resamples of the examples behind every interval; seeded, so numbers repeat.",
    key="calibration_resamples",
)


# ---------------------------------------------------------------- diagrams
st.subheader("Reliability diagrams")
CLASSWISE = "classwise (one-vs-rest)"


def bins_table(compute, run):
    """compute(run, epoch, n_bins, scheme, name): a per-bin table; None, the error shown, if unreadable."""
    try:
        return appkit.per_run(compute, run, epoch, n_bins, scheme, names[run.name])
    except PeftvizError as err:
        appkit.show_error(err)
        return None


def top_label_diagrams(runs):
    """Each run's top-label diagram with its bins' Wilson intervals, in rows of three."""
    cells = [cell for _ in range(0, len(runs), 3) for cell in st.columns(3)]
    for run, cell in zip(runs, cells):
        with cell:
            table = bins_table(analysis.reliability_table, run)
            if table is not None:
                appkit.chart(appkit.shared(figures.reliability_figure, table), f"reliability-{run.name}", data=table)
                st.caption(f"{figures.caption(table)}. {figures.interval_note()}")


def classwise_diagrams(runs):
    """Each run's one-vs-rest diagrams, a panel per class, the page's width each; CSV: the long table."""
    for run in runs:
        table = bins_table(analysis.classwise_table, run)
        if table is not None:
            appkit.chart(appkit.shared(figures.classwise_figure, table), f"classwise-{run.name}", data=table)
    st.caption(
        "For each class k, every prediction's probability of k (p_k), binned as chosen above, against "
        "whether the example is of class k (Kull et al. 2019). The classwise ECE is the mean of the classes' "
        "ECEs. Whiskers: 95% Wilson interval of the fraction of class k in each bin (n_b predictions)."
    )


if not as_groups:
    diagram = st.radio(
        "Diagram",
        ["top-label", CLASSWISE],
        horizontal=True,
        key="calibration_diagram",
        help="Top-label: each prediction's confidence against whether it is right. Classwise: "
        "one diagram per class k, p_k against whether the example is of class k.",
    )
    (classwise_diagrams if diagram == CLASSWISE else top_label_diagrams)(runs)
band = f"95% bootstrap over {n_resamples} resamples of the examples"  # a run's; the figure says a group's
title = f"Smooth reliability diagram (relplot) · epoch {epoch} validation"
at_epoch = analysis.seeds_at(units, epoch)  # a group's mean is of the seeds that finished this epoch
appkit.show_left_out(at_epoch)
try:
    if not at_epoch.units:
        raise RunError(at_epoch.nothing_left())
    with st.spinner("Smoothing the reliability curves…"):
        smooth = appkit.shared(
            smooth_figure,
            at_epoch.units,
            [names[u.key] for u in at_epoch.units],
            epoch,
            n_resamples,
            title,
            band,
            series,
        )
except PeftvizError as err:
    appkit.show_error(err)
else:
    appkit.chart(smooth, "smooth-reliability")
    few = analysis.MIN_BAND_SEEDS
    st.caption(
        "Kernel-smoothed accuracy against confidence, with the bandwidth that relplot's smooth ECE "
        "chooses: no bins to choose. The curve is drawn where about one prediction or more lies within one "
        "bandwidth; where a run made no predictions there is nothing to smooth."
        + (
            f" A group of fewer than {few} seeds has no band: the t-interval of two seeds' mean is ±6.4 times "
            "their curves' gap (t at one degree of freedom is 12.7), too few seeds for a band, so its seeds' "
            "curves are drawn instead."
            if any(1 < len(u.runs) < few for u in at_epoch.units)
            else ""
        )
    )

st.subheader("ECE over epochs")
drawn = []
for unit in units:
    try:
        appkit.per_run(analysis.unit_ece_over_epochs, unit, n_bins, scheme, n_resamples, names[unit.key])
        drawn.append(unit)
    except PeftvizError as err:
        appkit.show_error(err)
if drawn:
    band = (
        "95% bootstrap over seeds and validation examples (dotted: each seed)"
        if as_groups
        else f"95% percentile bootstrap over {n_resamples} resamples of the validation examples"
    )
    figure = appkit.shared(
        ece_figure, drawn, [names[u.key] for u in drawn], n_bins, scheme, n_resamples, band, epoch, series
    )
    appkit.chart(figure, "ece-over-epochs")
    if line := analysis.short_groups_line(drawn):  # an epoch only some seeds finished is not drawn
        st.caption(line)

# ---------------------------------------------------------------- comparison
st.subheader("Comparison")
split = st.radio(
    "Judge on",
    ["test (best epoch)", "validation (chosen epoch)"],
    horizontal=True,
    help="The best epoch is chosen on validation, so its validation numbers are optimistic.",
    key="calibration_split",
)
metrics = st.multiselect(
    "Metrics",
    list(estimators.ESTIMATORS),
    default=list(estimators.DEFAULT_METRICS),
    format_func=lambda name: estimators.ESTIMATORS[name].heading,
    key="calibration_metrics",
    help="None chosen: the defaults.",
) or list(estimators.DEFAULT_METRICS)
settings = group_stats.Settings("test" if split.startswith("test") else epoch, n_bins, scheme, n_resamples)
judging = analysis.judgeable(units, settings.which, one_split=True)
judged = judging.units
appkit.show_left_out(judging)  # runs on other data, not written yet or damaged: one line per reason
try:
    if not judged:
        raise RunError(judging.nothing_left())
    shown = tables_shown(judged, settings, tuple(metrics))
except PeftvizError as err:
    appkit.show_error(err)
else:
    stats = shown["stats"]
    st.table(shown["summary"], border="horizontal", hide_index=True)
    st.caption(
        f"Each cell: value [95% interval, from {n_resamples:,} bootstrap resamples, seed 0]. One run: "
        "bootstrap over the examples. Several seeds: mean over seeds, with a bootstrap that resamples the "
        "seeds and the test examples together, so the interval holds both the training randomness and the "
        f"test set's own noise. {appkit.report_note(settings)}"
        + (f" {note}" if (note := analysis.below_zero_note(stats.summary)) else "")
    )
    if shown["pairs"] is not None:
        st.table(shown["pairs"], border="horizontal", hide_index=True)
        st.caption(
            "Differences A − B; * marks a difference significant at 5% after Holm's correction over the "
            "pairs, per metric. Single runs: paired bootstrap on the same examples; groups: the same "
            "bootstrap over seeds and examples, seeds paired where both groups have the same ones."
        )
        if shown["improvement"] is not None:
            st.table(shown["improvement"], border="horizontal", hide_index=True)
            st.caption(
                "P(A better than B): the chance that a run of A beats a run of B on the metric (Agarwal et "
                "al. 2021), with its 95% interval over the same resamples. 0.5: no better than a coin."
            )
        st.markdown(shown["words"])
        metric = st.selectbox(
            "Differences in",
            stats.metrics,
            format_func=lambda n: estimators.ESTIMATORS[n].heading,
            key="calibration_difference_metric",
        )
        heading = estimators.ESTIMATORS[metric].heading
        appkit.chart(appkit.shared(figures.differences_figure, stats.pairs, metric, heading, series), "differences")
        plan_panel(judged, settings, metric, heading)
    for name, table in (("summary", stats.summary), ("pairs", stats.pairs)):
        st.download_button(
            f"Download the {name} (CSV)",
            lambda table=table: table.to_csv(index=False),
            file_name=f"comparison-{name}.csv",
            mime="text/csv",
            on_click="ignore",
            key=f"comparison-{name}-csv",
        )

# ---------------------------------------------------------------- recalibration
st.subheader("Recalibration")
with_test = [run for run in runs if analysis.has_predictions(run, "test")]
if with_test:
    run_names = analysis.display_names(with_test)
    run = st.selectbox("Run", with_test, format_func=lambda r: run_names[r.name], key="recalibration_run")
    settings = group_stats.Settings("test", n_bins, scheme, n_resamples)
    try:
        table = appkit.per_run(analysis.recalibration_estimates, run, settings, tuple(metrics))
        method = st.radio(
            "Diagram",
            list(analysis.RECALIBRATION_NAMES)[1:],
            horizontal=True,
            format_func=analysis.RECALIBRATION_NAMES.get,
            key="recalibration_map",
        )
        result = appkit.per_run(analysis.recalibration_bins, run, method, n_bins, scheme)
    except PeftvizError as err:
        appkit.show_error(err)
    else:
        st.dataframe(appkit.shared(analysis.recalibration_wide, table), hide_index=True, key="recalibration-table")
        if note := analysis.below_zero_note(table):
            st.caption(note)
        appkit.chart(appkit.shared(figures.recalibration_figure, result), "recalibration")
        st.caption(
            f"Each map is fitted on the validation predictions of epoch {result.fitted_on_epoch}, the best epoch, "
            "and judged on that epoch's test predictions. Temperature scaling divides every log-probability by one "
            "T; vector scaling learns a weight and a bias per class; isotonic regression maps each class's "
            "probability through a monotone step function, then renormalises."
        )
else:
    st.info("None of the chosen runs has test predictions: they are written when a run finishes.")
