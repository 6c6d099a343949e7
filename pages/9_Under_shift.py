"""Under shift: each method's calibration on its test split corrupted by four kinds of noise at severities 0 to 5,
with intervals, the families' spread, the differences between methods and conformal coverage; what the noise looks
like; where a prefix method's attention goes. The numbers of `report --shift` at the same settings."""

import contextlib
from dataclasses import replace

import pandas as pd
import streamlit as st

from peftviz.analysis import calibration, group_stats
from peftviz.analysis.group_stats import RESAMPLE_CHOICES
from peftviz.analysis.shift import FAMILIES, SEVERITIES, SHARES
from peftviz.analysis.shift import attention as shift_attention
from peftviz.analysis.shift.corruptions import changed_share, corrupt_text
from peftviz.analysis.shift.evaluate import cached_shift, evaluate_run
from peftviz.analysis.shift.shifts import Shift, corruption_grid, shifted_texts
from peftviz.analysis.shift.table import METRICS, method_sentence, shift_table, significant_lines, wide_table
from peftviz.app import appkit
from peftviz.calibration.estimators import ESTIMATORS
from peftviz.errors import PeftvizError, RunError
from peftviz.figures.shift import (
    attention_shift_figure,
    coverage_figure,
    coverage_rows,
    severity_figure,
    severity_rows,
)
from peftviz.store.runs import Group

MAX_DEFAULT_UNITS = 6
DEFAULT_METRICS = ("ece", "accuracy")  # the two; NLL and AURC on request
ALPHA = 0.1  # `report --shift`'s: the coverage of 90% sets
EXAMPLE_SEVERITIES = (0, 1, 3, 5)
EXAMPLE_WORDS = 60
FAMILY_TEXT = {  # what each family does to a chosen word (`analysis.shift.corruptions`)
    "typo": "two adjacent characters swap",
    "keyboard": "one character becomes a key next to it",
    "ocr": "one character becomes one that OCR confuses it with",
    "word-deletion": "the word is deleted",
}

appkit.page(
    "Under shift",
    "Does a method's calibration hold when the text moves away from what it was trained on? Each chosen method's "
    "model, at its best validation epoch, runs again on its test split with noise in it (Ovadia et al., NeurIPS "
    "2019), four kinds of it:\n\n"
    + "\n".join(f"- **{family}**: {text};" for family, text in FAMILY_TEXT.items())
    + "\n\nat **severities** 1 to 5, which corrupt "
    + ", ".join(f"{share:.0%}" for share in SHARES)
    + " of each document's words; severity 0 is the test split itself. Every number has its 95% interval over "
    "seeds and test documents, and the differences between methods are tested at every shifted set. The models "
    "run once, under a progress bar: their predictions are kept in the run folders (`analysis/shift/`).",
)


def severity_name(severity: int) -> str:
    return "0 (clean)" if severity == 0 else f"{severity} ({SHARES[severity - 1]:.0%} of words)"


def heading(metric: str) -> str:
    return ESTIMATORS[metric].heading


def severity_tag(severity: int) -> str:
    """A severity as the picker shows it: short, so the six fit one line."""
    return "0 · clean" if severity == 0 else f"{severity} · {SHARES[severity - 1]:.0%}"


chosen = appkit.choose_units("shift", MAX_DEFAULT_UNITS)
families_column, resamples_column = st.columns([3, 1])  # each picker wide enough for all of its tags on one line
families = families_column.multiselect(
    "Corruption families",
    FAMILIES,
    default=list(FAMILIES),
    key="shift_families",
    help="The kinds of noise; the figures draw the mean over them and their spread.",
)
n_resamples = resamples_column.radio(
    "Bootstrap resamples",
    [*RESAMPLE_CHOICES, 10_000],  # Holm over many methods × severities needs p-values below 1 / 1,001
    horizontal=True,
    key="shift_resamples",
    help="Resamples of the seeds and the test documents behind every interval; seeded, so numbers repeat. A "
    "p-value is at least 1 / (resamples + 1): with many methods and severities, Holm's correction needs 10,000.",
)
severities = st.multiselect(
    "Severities (the share of each document's words corrupted)",
    SEVERITIES,
    default=list(SEVERITIES),
    format_func=severity_tag,
    key="shift_severities",
    help="0 is the test split itself (the stored predictions: no model runs); 1 to 5 corrupt more of each "
    "document's words.",
)


def run_the_models(units: list[Group], shifts: list[Shift]) -> None:
    """Every run's model on every shifted set it has no predictions for yet, under a progress bar (each set is kept
    in the run folder as soon as it is done). A run whose model cannot run is left to `shift_table`, which leaves
    it out and names it."""
    todo = [
        (run, missing)
        for unit in units
        for run in unit.runs
        if run.has_params and (missing := [shift for shift in shifts if cached_shift(run, shift) is None])
    ]
    if not todo:
        return
    total, done = sum(len(missing) for _, missing in todo), 0
    bar = st.progress(0.0)

    def progress(what: str) -> None:
        nonlocal done
        bar.progress(done / total, text=f"Running the models on shifted text: {what} ({done + 1} of {total})")
        done += 1

    for at, (run, missing) in enumerate(todo):
        with contextlib.suppress(PeftvizError):  # named by `shift_table`'s left-out lines
            evaluate_run(run, missing, progress)
        done = sum(len(missing) for _, missing in todo[: at + 1])
    bar.empty()


def shifted(units: list[Group], families: tuple, severities: tuple, n_resamples: int):
    """The table of `report --shift` at these settings (built once per server: `appkit.shared`), the models'
    predictions read back from the run folders."""
    settings = group_stats.Settings(n_resamples=n_resamples)
    return shift_table(units, corruption_grid(families, severities), settings, alpha=ALPHA)


def by_severity(wide: pd.DataFrame, column: str) -> pd.DataFrame:
    """One column of `wide_table` as a method × severity table: a row per method (and uncertainty method), a
    column per severity, the cells as `report --shift` prints them."""
    keys = [key for key in ("method", "uncertainty", "seeds") if key in wide]
    rows: dict[tuple, dict] = {}
    for record in wide.to_dict("records"):
        row = rows.setdefault(tuple(record[key] for key in keys), {key: record[key] for key in keys})
        row[severity_name(record["severity"])] = record[column]
    return pd.DataFrame(list(rows.values())).fillna("")


def report_command(families: tuple, severities: tuple, n_resamples: int) -> str:
    flags = "--shift"
    flags += f" --shift-families {','.join(families)}" if tuple(families) != FAMILIES else ""
    flags += f" --shift-severities {','.join(map(str, severities))}" if tuple(severities) != SEVERITIES else ""
    return f"`report {flags} --resamples {n_resamples}`"


def noise_example(run, families: tuple) -> None:
    """One test document at severities 0, 1, 3 and 5 of a chosen family, as the models read it."""
    family_column, document_column = st.columns([3, 2])
    family = family_column.selectbox("Family", families, key="shift_example_family")
    texts, _ = shifted_texts(run, Shift(family, 0))
    index = int(
        document_column.number_input(
            "Test document", min_value=0, max_value=len(texts) - 1, value=0, step=1, key="shift_example_document"
        )
    )
    text = texts[index]
    rows = []
    for severity in EXAMPLE_SEVERITIES:
        noisy = corrupt_text(text, family, severity, 0, index)
        words = noisy.split()
        rows.append(
            {
                "severity": severity_name(severity),
                "words changed": f"{changed_share(text, noisy, family):.0%} of {len(text.split())}",
                f"its first {EXAMPLE_WORDS} words": " ".join(words[:EXAMPLE_WORDS])
                + (" …" if len(words) > EXAMPLE_WORDS else ""),
            }
        )
    st.table(pd.DataFrame(rows), border="horizontal", hide_index=True)
    st.caption(
        f"Test document {index} of {len(texts)} at these severities ({family}: {FAMILY_TEXT[family]} in each "
        "chosen word; seed 0). A word too short for the family is never chosen, so "
        "a document's share can fall below the severity's. The models read its first "
        f"{run.config.max_length} tokens."
    )


def measure_attention(unit: Group, shifts: list[Shift]) -> None:
    """The unit's prefix mass on every shifted set, computed where not kept in the run folders yet, under a
    progress bar shown only while something runs."""
    bar, done, total = None, 0, len(unit.runs) * len(shifts)

    def progress(what: str) -> None:
        nonlocal bar, done
        bar = bar or st.progress(0.0)
        bar.progress(min(done / total, 1.0), text=f"Measuring the attention on the prefix: {what}")
        done += 1

    for run in unit.runs:
        shift_attention.prefix_mass(run, shifts, progress)
    if bar is not None:
        bar.empty()


def attention_rows(unit: Group, families: tuple, severities: tuple) -> pd.DataFrame:
    return shift_attention.attention_table(unit.runs, corruption_grid(families, severities))


def attention_section(units: list[Group], names: dict, families: tuple, severities: tuple) -> None:
    st.subheader("Where the prefix's attention goes")
    candidates = [
        replace(unit, runs=runs)
        for unit in units
        if (runs := [run for run in unit.runs if run.has_params and shift_attention.has_prefix(run)])
    ]
    if not candidates:
        st.caption(
            "Not drawn: no chosen method has prefix keys whose attention could be measured (prefix-style methods "
            "with parameters in the store)."
        )
        return
    listed = {unit.key: unit for unit in candidates}
    key = st.selectbox("Method with prefix keys", list(listed), format_func=names.get, key="shift_attention_unit")
    unit = listed[key]
    try:
        measure_attention(unit, corruption_grid(families, severities))
        rows = appkit.shared(attention_rows, unit, families, severities)
    except PeftvizError as err:
        appkit.show_error(err)
        return
    figure = appkit.shared(attention_shift_figure, rows, names[unit.key])
    appkit.chart(figure, "shift-attention", data=rows)
    st.caption(
        "Per test document: the share of its tokens' attention on the prefix (λ(C), averaged over layers, heads and "
        "tokens) against the model's confidence, right answers and wrong ones apart; a group's seeds and the "
        "corruption families pooled at each severity."
    )


def under_shift(chosen: appkit.Chosen, families: tuple, severities: tuple, n_resamples: int) -> None:
    judging = calibration.judgeable(chosen.units, "test", one_split=True)  # paired on one split's test documents
    appkit.show_left_out(judging)
    try:
        if not judging.units:
            raise RunError(judging.nothing_left())
        units = judging.units
        run_the_models(units, corruption_grid(families, severities))
        with st.spinner("Comparing…"):
            result = appkit.shared(shifted, units, families, severities, n_resamples)
    except PeftvizError as err:
        appkit.show_error(err)
        return
    wide = wide_table(result)
    columns = [column for column in wide.columns if column not in ("method", "uncertainty", "seeds", "severity")]
    for tab, column in zip(st.tabs(columns), columns):
        tab.table(by_severity(wide, column), border="horizontal", hide_index=True)
    st.caption(
        method_sentence(result)
        + f" These are the numbers of {report_command(families, severities, n_resamples)} on the same groups."
    )
    if result.pairs.empty:
        st.caption("No differences between methods to test: that takes two methods and a severity above 0.")
    else:  # the count, each significant difference (in an expander: there may be many), what the resamples allow
        found = int(result.pairs["significant"].astype(bool).sum())
        said = significant_lines(result)
        head, lines, rest = said[0], said[1 : 1 + found], said[1 + found :]
        st.caption(" ".join([head.removesuffix(":") + ("." if found else ""), *rest]))
        if lines:
            with st.expander(f"The {found} significant difference{'s' if found != 1 else ''}"):
                st.markdown("\n".join(f"- {line}" for line in lines))
    for line in result.left_out:
        st.caption(f"Left out: {line}.")

    names = group_stats.unique_names(units)
    series = {}
    for unit in units:  # by the names the table may give the unit: its label, or its label and key
        drawn = chosen.series[chosen.names[unit.key]]
        series |= {unit.label: drawn, f"{unit.label} · {unit.key}": drawn}
    st.subheader("Against severity")
    metrics = st.multiselect(
        "Metrics drawn", list(METRICS), default=list(DEFAULT_METRICS), format_func=heading, key="shift_metrics"
    )
    for metric in metrics:
        figure = appkit.shared(severity_figure, result.table, metric, series)
        appkit.chart(figure, f"shift-{metric}", data=severity_rows(result.table, metric))
    st.subheader("Conformal coverage")
    appkit.chart(
        appkit.shared(coverage_figure, result.coverage, series), "shift-coverage", data=coverage_rows(result.coverage)
    )
    st.subheader("What the noise looks like")
    example = next((run for unit in units for run in unit.runs if run.has_params), None)
    try:
        if example is None:
            raise RunError("no chosen run has parameters, and so none a test split was corrupted for")
        noise_example(example, families)
    except PeftvizError as err:
        appkit.show_error(err)
    attention_section(units, names, families, severities)


if not families or not severities:
    st.info("Pick at least one corruption family and one severity.")
    st.stop()
under_shift(chosen, tuple(families), tuple(sorted(severities)), n_resamples)
