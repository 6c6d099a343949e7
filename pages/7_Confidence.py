"""Confidence: what people do with it. Selective prediction (risk–coverage curves, AURC, AUGRC, accuracy
at 80% and 90% coverage) and conformal prediction sets (LAC and APS), for single runs or groups of seeds."""

import pandas as pd
import streamlit as st

from peftviz.analysis import calibration, selective
from peftviz.analysis.conformal import conformal_over_epochs, conformal_summary, summary_cells
from peftviz.analysis.group_stats import RESAMPLE_CHOICES
from peftviz.app import appkit
from peftviz.calibration.conformal import SCORES
from peftviz.calibration.stats import LEVEL
from peftviz.errors import PeftvizError, RunError
from peftviz.figures.conformal import conformal_epochs_figure
from peftviz.figures.selective import risk_coverage_figure

MAX_DEFAULT_UNITS = 6

appkit.page(
    "Confidence",
    "Calibration matters because people act on confidence. **Selective prediction** answers only the "
    "predictions it is most confident of and abstains on the rest: the *risk–coverage curve* gives the "
    "error rate among the answered fraction (the coverage), and its area (AURC, AUGRC) sums it up, lower "
    "being better. A **conformal prediction set** holds every label the model cannot rule out at a chosen "
    r"error rate $\alpha$: calibrated on the validation split, it contains the true label of at least "
    r"$1 - \alpha$ of the test documents, and its size is what that guarantee costs.",
)

chosen = appkit.choose_units("confidence", MAX_DEFAULT_UNITS)
n_resamples = st.radio(
    "Bootstrap resamples",
    RESAMPLE_CHOICES,
    horizontal=True,
    key="confidence_resamples",
    help="Resamples of the examples behind every interval; seeded, so numbers repeat.",
)

# ---------------------------------------------------------------- selective prediction
st.subheader("Selective prediction")


def selective_section(chosen: appkit.Chosen, n_resamples: int) -> None:
    """The risk–coverage curves and the selective estimators of the chosen units."""
    split = st.radio(
        "Judge on",
        ["test (best epoch)", "validation (last epoch)"],
        horizontal=True,
        key="selective_split",
        help="The best epoch is chosen on validation, so its validation numbers are optimistic.",
    )
    last = max(max(calibration.finished_epochs(run)) for run in chosen.runs)
    which = "test" if split.startswith("test") else last
    judging = calibration.judgeable(chosen.units, which, one_split=True)  # its table compares on one split
    appkit.show_left_out(judging)
    try:
        if not judging.units:
            raise RunError(judging.nothing_left())
        curves = pd.concat(
            [
                appkit.per_run(
                    selective.risk_coverage_table, unit, which, n_resamples, LEVEL, 0, chosen.names[unit.key]
                )
                for unit in judging.units
            ]
        )
        band = "95% bootstrap over seeds × examples" if chosen.as_groups else "95% bootstrap over the examples"
        figure = appkit.shared(risk_coverage_figure, curves, chosen.series, band)
        table = appkit.shared(selective.summary_table, judging.units, which, n_resamples)
    except PeftvizError as err:
        appkit.show_error(err)
        return
    appkit.chart(figure, "risk-coverage", data=curves)
    st.table(table, border="horizontal", hide_index=True)
    settings = selective.settings(which, n_resamples)
    st.caption(
        f"Each cell: value [95% interval, from {n_resamples:,} bootstrap resamples, seed {settings.seed}], as "
        "on the Calibration page: one run, a bootstrap over the examples; several seeds, their mean with a "
        "bootstrap over seeds and examples together. AURC and AUGRC: lower is better; accuracy at 80% "
        "coverage: on the 80% most confident predictions, ties in confidence shared. "
        + appkit.report_note(settings, selective.SELECTIVE_METRICS)
    )


selective_section(chosen, n_resamples)

# ---------------------------------------------------------------- conformal prediction sets
st.subheader("Conformal prediction sets")


def conformal_epochs(units: list, names: dict, alpha: float, score: str, n_resamples: int, series: dict):
    """The over-epochs table of every unit (cached per unit) and its figure."""
    table = pd.concat(
        [
            appkit.per_run(conformal_over_epochs, unit, alpha, score, n_resamples, LEVEL, 0, names[unit.key])
            for unit in units
        ]
    )
    return table, conformal_epochs_figure(table, alpha, series)


def conformal_section(chosen: appkit.Chosen, n_resamples: int) -> None:
    """Test coverage and mean set size per unit at a chosen α and score, and both over epochs."""
    alpha = st.selectbox("α, the miscoverage allowed", (0.01, 0.05, 0.1, 0.2), index=2, key="conformal_alpha")
    score = st.radio(
        "Score",
        list(SCORES),
        format_func=SCORES.get,
        horizontal=True,
        key="conformal_score",
        help="LAC: every label above one probability threshold. APS: labels in decreasing probability "
        "until their mass reaches the threshold, the last one at random (Romano et al. 2020).",
    )
    judging = calibration.judgeable(chosen.units, "test")
    appkit.show_left_out(judging)
    try:
        if not judging.units:
            raise RunError(judging.nothing_left())
        summary = pd.concat(
            [
                appkit.per_run(conformal_summary, unit, alpha, score, n_resamples, LEVEL, 0, chosen.names[unit.key])
                for unit in judging.units
            ]
        )
        table, figure = appkit.shared(
            conformal_epochs, chosen.units, chosen.names, alpha, score, n_resamples, chosen.series
        )
    except PeftvizError as err:
        appkit.show_error(err)
        return
    st.table(summary_cells(summary), border="horizontal", hide_index=True)
    appkit.chart(figure, "conformal-epochs", data=table)
    st.caption(
        f"Calibrated on the best epoch's validation predictions, judged on its test predictions: on "
        f"exchangeable documents a set holds the true label at least {1 - alpha:.0%} of the time, on average "
        "over calibration sets. Over epochs, each epoch's validation predictions are cut in two fixed halves, "
        f"one calibrating, the other judged. Intervals: 95% bootstrap over {n_resamples:,} resamples (seed 0) "
        "of the calibrating and the judged documents together (several seeds: over seeds too)."
    )


conformal_section(chosen, n_resamples)
