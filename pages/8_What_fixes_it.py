"""What fixes it: each method as trained and after each uncertainty method (temperature scaling, seed ensembles,
MC dropout, Laplace) at one budget of forward passes, with intervals, the paired difference and the cost; and
seed ensembles by size. The numbers of `report --uncertainty` at the same settings."""

import pandas as pd
import streamlit as st

from peftviz.analysis import calibration, group_stats
from peftviz.analysis.group_stats import RESAMPLE_CHOICES
from peftviz.analysis.uncertainty import MAX_PASSES, NAMES, comparison, registry
from peftviz.app import appkit
from peftviz.calibration.estimators import ESTIMATORS
from peftviz.errors import PeftvizError, RunError
from peftviz.figures.uncertainty import ensemble_size_figure, uncertainty_figure
from peftviz.store.runs import Group

MAX_DEFAULT_UNITS = 6
DEFAULT_METHODS = ("temperature", "ensemble")  # from the stored predictions: no model runs


def loaded(names) -> dict:
    """The uncertainty methods that load here, name -> class (one whose module is missing is not offered)."""
    found = {}
    for name in names:
        try:
            found[name] = registry.method(name)
        except ImportError:
            continue
    return found


METHODS = loaded(NAMES)

appkit.page(
    "What fixes it",
    "The Calibration page shows how far a method's confidence is off. This page asks what fixes it, and at "
    "what cost: each method **as trained** (*plain*) and after each uncertainty method, each with its 95% "
    "interval over seeds and test documents and its paired difference to the plain method.\n\n"
    + "\n".join(f"- **{name}**: {cls.title}" for name, cls in METHODS.items())
    + "\n\nAt **one budget** of *P* forward passes per document, so that none wins by computing more: an "
    "ensemble of *P* seeds, MC dropout with *T = P* passes, Laplace's Monte Carlo predictive with *P* samples; "
    "temperature scaling costs one pass. The cost columns say what each number cost on this machine.",
)

chosen = appkit.choose_units("fixes", MAX_DEFAULT_UNITS)
names = st.multiselect(  # a row of its own: four methods' tags fit on one line
    "Uncertainty methods",
    list(METHODS),
    default=[name for name in DEFAULT_METHODS if name in METHODS],
    key="fixes_methods",
    help="Temperature scaling and ensembles read the stored predictions; MC dropout and Laplace run each "
    "model (once: their predictions are kept in the run folder).",
)
passes_column, average_column, laplace_column, resamples_column = st.columns([1, 2, 2, 2])
passes = int(
    passes_column.number_input(
        "Passes P",
        min_value=1,
        max_value=MAX_PASSES,
        value=3,
        step=1,
        key="fixes_passes",
        help="The budget every method gets: forward passes per document.",
    )
)
average = average_column.radio(
    "Ensembles average",
    ["probabilities", "logits"],
    horizontal=True,
    key="fixes_average",
    help="What an ensemble averages: its members' probabilities, or their logits (then softmax).",
)
predictive = "probit"  # `report --laplace-predictive`'s default
if "laplace" in names:
    predictive = laplace_column.radio(
        "Laplace's predictive",
        ["probit", "mc"],
        horizontal=True,
        key="fixes_laplace_predictive",
        help="The probit approximation (one pass) or Monte Carlo over P samples of the logits.",
    )
n_resamples = resamples_column.radio(
    "Bootstrap resamples",
    RESAMPLE_CHOICES,
    horizontal=True,
    key="fixes_resamples",
    help="Resamples of the seeds and the test documents behind every interval; seeded, so numbers repeat.",
)


def requests_of(names: tuple, passes: int, average: str, predictive: str) -> list:
    return comparison.equal_budget(names, passes, average, {"predictive": predictive})


def one_per_method(units: list[Group], unit_names: dict) -> list[Group]:
    """The units, one per method name (the table names its rows by method): a later unit of a name already
    compared is left out, named in a line."""
    kept, dropped = {}, []
    for unit in units:
        if unit.label in kept:
            dropped.append(unit)
        else:
            kept[unit.label] = unit
    if dropped:
        st.caption(
            f"Left out: {', '.join(unit_names[unit.key] for unit in dropped)}. The table names its rows by method "
            "and another of the chosen units has that method: choose one unit per method (groups of seeds put a "
            "method's seeds in one unit)."
        )
    return list(kept.values())


def warm(unit: Group, name: str, passes: int, average: str, predictive: str) -> str | None:
    """One run's model-based work, done once (its predictions are kept on disk): its plain pass timed and, for
    `name`, its members computed. A PeftvizError's line, else None; the comparison names what it leaves out."""
    try:
        if name == comparison.PLAIN:
            comparison.stored_member(unit.runs[0])
        else:
            request = requests_of((name,), passes, average, predictive)[0]
            registry.method(name).members(unit, request.options)
    except PeftvizError as err:
        return str(err)
    return None


def run_the_models(units: list[Group], names: tuple, passes: int, average: str, predictive: str) -> None:
    """Every model this comparison runs, run once per run and setting (`appkit.per_run`), under a progress bar."""
    steps = [
        (run, name)
        for name in (comparison.PLAIN, *[name for name in names if METHODS[name].needs_params])
        for unit in units
        for run in unit.runs
        if run.has_params
    ]
    if not steps:
        return

    def text(done: int, step: tuple) -> str:
        run, name = step
        what = "timing the plain pass" if name == comparison.PLAIN else name
        return f"Running the models: {what} · {run.name} ({done + 1} of {len(steps)})"

    appkit.stepped(
        steps,
        text,
        lambda step: appkit.per_run(warm, Group(step[0].name, [step[0]]), step[1], passes, average, predictive),
    )


def compared(units: list[Group], names: tuple, passes: int, average: str, predictive: str, n_resamples: int):
    """The comparison, as `report --uncertainty` makes it (built once per server: `appkit.shared`)."""
    settings = group_stats.Settings(n_resamples=n_resamples)
    return comparison.compare_uncertainty(units, requests_of(names, passes, average, predictive), settings)


def ensemble_curves(groups: list[Group], metric: str, average: str, n_resamples: int) -> pd.DataFrame:
    settings = group_stats.Settings(n_resamples=n_resamples)
    return pd.concat([comparison.ensemble_curve(group, settings, metric, average) for group in groups])


def report_command(names: tuple, passes: int, average: str, predictive: str, n_resamples: int) -> str:
    flags = f"--uncertainty {','.join(names)} --passes {passes}"
    flags += " --ensemble-average logits" if average == "logits" else ""
    flags += " --laplace-predictive mc" if predictive == "mc" and "laplace" in names else ""
    return f"`report {flags} --resamples {n_resamples}`"


# the comparison's wide table in three tabs, each narrow enough to read without scrolling
TABLE_PARTS = ("Each metric", "Δ to the plain method", "Cost")
COST_COLUMNS = ["passes", "extra parameters", "s / 1,000 docs"]


def table_parts(wide: pd.DataFrame) -> list[pd.DataFrame]:
    """`comparison.wide_table`'s columns in TABLE_PARTS' order: each metric's cell (with the seeds), its
    difference to the plain method, the cost; each part led by the method and the uncertainty method."""
    rows = ["method", "uncertainty"]
    differences = [column for column in wide.columns if column.startswith("Δ ")]
    values = [column for column in wide.columns if column not in {*rows, *differences, *COST_COLUMNS}]
    changed = wide["uncertainty"] != comparison.PLAIN  # the plain method has no difference to itself
    return [wide[rows + values], wide.loc[changed, rows + differences], wide[rows + COST_COLUMNS]]


def heading(metric: str) -> str:
    return ESTIMATORS[metric].heading


def what_fixes_it(chosen: appkit.Chosen, names: tuple, passes: int, average: str, predictive: str, n_resamples: int):
    judging = calibration.judgeable(chosen.units, "test", one_split=True)  # paired on one split's test documents
    appkit.show_left_out(judging)
    try:
        if not judging.units:
            raise RunError(judging.nothing_left())
        units = one_per_method(judging.units, chosen.names)
        run_the_models(units, names, passes, average, predictive)
        with st.spinner("Comparing…"):
            result = appkit.shared(compared, units, names, passes, average, predictive, n_resamples)
    except PeftvizError as err:
        appkit.show_error(err)
        return
    for tab, part in zip(st.tabs(list(TABLE_PARTS)), table_parts(comparison.wide_table(result))):
        tab.table(part, border="horizontal", hide_index=True)
    for line in result.left_out:
        st.caption(f"Left out: {line}.")
    st.caption(
        comparison.method_sentence(result)
        + f" These are the numbers of {report_command(names, passes, average, predictive, n_resamples)} "
        "on the same groups."
    )
    series = {unit.label: chosen.series[chosen.names[unit.key]] for unit in units}
    metric = st.selectbox("Metric", list(result.metrics), format_func=heading, key="fixes_metric")
    figure = appkit.shared(uncertainty_figure, result.table, metric, series)
    appkit.chart(figure, "what-fixes-it", data=result.table[result.table["metric"] == metric])

    st.subheader("Ensembles by size")
    groups = [unit for unit in units if len(unit.runs) >= 2]
    if not groups:
        st.caption(
            "No chosen group has two seeds or more, so there is no ensemble to grow: train a method at several "
            "seeds (`compare --seeds 3`) and choose it as a group of seeds."
        )
        return
    try:
        curves = appkit.shared(ensemble_curves, groups, metric, average, n_resamples)
    except PeftvizError as err:
        appkit.show_error(err)
        return
    appkit.chart(appkit.shared(ensemble_size_figure, curves, metric, series), "ensemble-size", data=curves)
    st.caption(
        f"{heading(metric)} of ensembles of k seeds ({average} averaged), k = 1 being the seeds as trained: a group "
        "of N seeds makes ⌊N / k⌋ disjoint ensembles of k, and the interval is over them and the test documents "
        f"({n_resamples:,} resamples, seed 0). Where k leaves one ensemble only, the interval is over the test "
        "documents alone."
    )


if not names:
    st.info("Pick at least one uncertainty method.")
    st.stop()
what_fixes_it(chosen, tuple(names), passes, average, predictive, n_resamples)
