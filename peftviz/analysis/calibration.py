"""What the Calibration page computes from stored runs: per-bin tables, ECE curves, temperature scaling.

Everything here reads predictions through `Run.predictions` and calls `peftviz.calibration` for
the numbers, so the page shows exactly what the metrics in the run store mean. Results are
pandas DataFrames of plain numbers (cheap to cache, easy to test and to export).

A per-bin table has one row per bin, empty bins included (count 0, NaN means), with the columns
`BIN_COLUMNS`; the same rows, concatenated over runs, are the page's CSV download.

Epochs: an `int` asks for that epoch's validation predictions; a run that finished fewer epochs
uses its last one (so runs of different lengths can share one epoch slider). A `str` names
another stored evaluation, e.g. "test".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from peftviz import calibration
from peftviz.runs import Run, RunError

BIN_COLUMNS = ("run", "epoch", "scheme", "bin", "lower", "upper", "count", "confidence", "accuracy", "gap")
SCHEME_NAMES = {"width": "equal-width", "mass": "equal-mass"}
METRIC_NAMES = {  # calibration.summary's keys -> column headings
    "accuracy": "accuracy",
    "ece": "ECE",
    "mce": "MCE",
    "ace": "ACE",
    "classwise_ece": "classwise ECE",
    "brier": "Brier",
    "nll": "NLL",
}

Which = int | str  # an epoch number or the name of a stored evaluation ("test", "averaged", ...)


# ---------------------------------------------------------------- choosing runs and epochs


def display_names(runs: list[Run]) -> dict[str, str]:
    """Run name -> a short, unique legend label: the run's label, its status when not complete,
    and the end of its folder name when two runs share a label."""
    label_counts = Counter(run.label for run in runs)
    names = {}
    for run in runs:
        name = run.label if label_counts[run.label] == 1 else f"{run.label} · {run.name[-6:]}"
        names[run.name] = name if run.status == "complete" else f"{name} ({run.status})"
    return names


def default_selection(runs: list[Run], limit: int = 6) -> list[Run]:
    """The complete runs of the most common dataset, at most `limit` (all usable runs if none is complete)."""
    pool = [run for run in runs if run.status == "complete"] or runs
    if not pool:
        return []
    dataset, _ = Counter(run.config.get("dataset") for run in pool).most_common(1)[0]
    return [run for run in pool if run.config.get("dataset") == dataset][:limit]


def finished_epochs(run: Run) -> list[int]:
    return [int(m["epoch"]) for m in run.metrics]


def resolve(run: Run, which: Which) -> Which:
    """The evaluation actually shown: the latest finished epoch <= `which`, else the first one."""
    if isinstance(which, str):
        return which
    epochs = finished_epochs(run)
    if not epochs:
        raise RunError(f"run {run.name} has no finished epochs")
    earlier = [epoch for epoch in epochs if epoch <= which]
    return max(earlier) if earlier else min(epochs)


def has_predictions(run: Run, which: Which) -> bool:
    try:
        run.predictions(which)
    except RunError:
        return False
    return True


# ---------------------------------------------------------------- per-bin tables


def reliability_table(run: Run, which: Which, n_bins: int = 10, scheme: str = "width", name: str = "") -> pd.DataFrame:
    """The per-bin table of `run`'s reliability diagram at `which` (see `resolve`), columns BIN_COLUMNS."""
    shown = resolve(run, which)
    probs, labels = run.predictions(shown)
    return bins_frame(probs, labels, n_bins, scheme, name or run.label, shown)


def bins_frame(probs, labels, n_bins: int, scheme: str, name: str, which: Which) -> pd.DataFrame:
    """calibration.reliability_bins as a DataFrame, tagged with the run, evaluation and scheme."""
    bins = calibration.reliability_bins(probs, labels, n_bins, scheme)
    table = pd.DataFrame(bins)
    table.insert(0, "bin", np.arange(len(table)))
    table.insert(0, "scheme", scheme)
    table.insert(0, "epoch", which)
    table.insert(0, "run", name)
    return table[list(BIN_COLUMNS)]


def table_ece(table: pd.DataFrame) -> float:
    """ECE = Σ_b (n_b / N) |acc_b − conf_b|, from a per-bin table (empty bins contribute nothing)."""
    counts = table["count"].to_numpy()
    weighted_gaps = counts * np.nan_to_num(np.abs(table["gap"].to_numpy()))
    return float(weighted_gaps.sum() / counts.sum())


def bins_csv(tables: list[pd.DataFrame]) -> str:
    """The per-bin tables as one CSV text, header `BIN_COLUMNS`."""
    if not tables:
        return ",".join(BIN_COLUMNS) + "\n"
    return pd.concat(tables, ignore_index=True).to_csv(index=False)


# ---------------------------------------------------------------- ECE over epochs


def ece_over_epochs(
    run: Run, n_bins: int = 10, scheme: str = "width", n_resamples: int = 200, name: str = ""
) -> pd.DataFrame:
    """One row per finished epoch: run, epoch, ece and its 95% percentile-bootstrap interval low, high."""
    rows = []
    for epoch in finished_epochs(run):
        probs, labels = run.predictions(epoch)
        low, high = calibration.ece_bootstrap(probs, labels, n_bins, scheme, n_resamples)
        ece = calibration.ece(probs, labels, n_bins, scheme)
        rows.append({"run": name or run.label, "epoch": epoch, "ece": ece, "low": low, "high": high})
    return pd.DataFrame(rows, columns=["run", "epoch", "ece", "low", "high"])


# ---------------------------------------------------------------- metrics table


def metrics_row(run: Run, which: Which, n_bins: int = 10, scheme: str = "width", name: str = "") -> dict:
    """Every scalar calibration metric of `run` at `which`, under the column headings METRIC_NAMES."""
    shown = resolve(run, which)
    probs, labels = run.predictions(shown)
    values = calibration.summary(probs, labels, n_bins, scheme)
    row = {"run": name or run.label, "epoch": shown, "N": int(labels.shape[0])}
    return row | {heading: values[key] for key, heading in METRIC_NAMES.items()}


def metrics_table(runs: list[Run], which: Which, n_bins: int = 10, scheme: str = "width", names=None) -> pd.DataFrame:
    """One metrics_row per run; `names` maps run name -> display name (default: run labels)."""
    names = names or {}
    rows = [metrics_row(run, which, n_bins, scheme, names.get(run.name, "")) for run in runs]
    return pd.DataFrame(rows, columns=["run", "epoch", "N", *METRIC_NAMES.values()])


# ---------------------------------------------------------------- temperature scaling


@dataclass(frozen=True)
class TemperatureScaling:
    """A temperature fitted on validation and judged on test: the only honest way round."""

    temperature: float
    fitted_on_epoch: int  # the best epoch: the one whose model made the test predictions
    n_validation: int
    before: dict[str, float]  # calibration.summary on test, T = 1
    after: dict[str, float]  # calibration.summary on test, fitted T
    before_bins: pd.DataFrame
    after_bins: pd.DataFrame

    def comparison(self) -> pd.DataFrame:
        """Metric rows, columns "before" and "after": the page's small table."""
        return pd.DataFrame(
            {"before": [self.before[k] for k in METRIC_NAMES], "after": [self.after[k] for k in METRIC_NAMES]},
            index=list(METRIC_NAMES.values()),
        )


def temperature_scaling(run: Run, n_bins: int = 10, scheme: str = "width", name: str = "") -> TemperatureScaling:
    """Fit T on the best epoch's validation predictions; compare test metrics and bins before and after.

    The stored test predictions come from the best epoch's model, so T is fitted on that same
    epoch. Raises RunError for a run without test predictions (e.g. one that did not finish).
    """
    best = run.best_epoch
    if best is None:
        raise RunError(f"run {run.name} has no finished epochs")
    val_probs, val_labels = run.predictions(best)
    test_probs, test_labels = run.predictions("test")
    temperature = calibration.fit_temperature(val_probs, val_labels)
    scaled = calibration.apply_temperature(test_probs, temperature)
    name = name or run.label
    return TemperatureScaling(
        temperature=temperature,
        fitted_on_epoch=best,
        n_validation=int(val_labels.shape[0]),
        before=calibration.summary(test_probs, test_labels, n_bins, scheme),
        after=calibration.summary(scaled, test_labels, n_bins, scheme),
        before_bins=bins_frame(test_probs, test_labels, n_bins, scheme, name, "test"),
        after_bins=bins_frame(scaled, test_labels, n_bins, scheme, f"{name} (T={temperature:.3g})", "test"),
    )
