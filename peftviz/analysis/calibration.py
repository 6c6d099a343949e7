"""What the Calibration page computes from stored runs: per-bin tables, ECE curves, temperature scaling.

Everything here reads predictions through `Run.predictions` and calls `peftviz.calibration.metrics` for
the numbers, so the page shows exactly what the metrics in the run store mean. Results are
pandas DataFrames of plain numbers (cheap to cache, easy to test and to export).

A per-bin table has one row per bin, empty bins included (count 0, NaN means), with the columns
`BIN_COLUMNS`: per bin b, its edges, n_b predictions, k_b of them right (`hits`), the mean
confidence, the accuracy k_b / n_b and that accuracy's 95% Wilson interval (`accuracy_low`,
`accuracy_high`; `wilson_interval`), and the gap. A classwise (one-vs-rest) table stacks one per-bin
table per class k, p_k binned against the outcome 1[y = k], with a `class` column
(`CLASSWISE_COLUMNS`). A diagram's CSV download is its table.

Epochs: an `int` asks for that epoch's validation predictions; a run that finished fewer epochs
uses its last one (so runs of different lengths can share one epoch slider). A `str` names
another stored evaluation, e.g. "test".
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from peftviz import calibration
from peftviz.calibration import estimators, recalibration, stats
from peftviz.calibration.estimators import SmoothDiagram
from peftviz.errors import ConfigError, RunError
from peftviz.store import schema
from peftviz.store.runs import Group, Run

BIN_COLUMNS = ("run", "epoch", "scheme", "bin", "lower", "upper", "count", "hits", "confidence", "accuracy",
               "accuracy_low", "accuracy_high", "gap")  # fmt: skip
CLASSWISE_COLUMNS = (*BIN_COLUMNS[:3], "class", *BIN_COLUMNS[3:])  # one-vs-rest: a per-bin table per class
SCHEME_NAMES = {"width": "equal-width", "mass": "equal-mass"}

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


def evaluated_on(run: Run) -> tuple:
    """What decides the examples a run was judged on, and the model that judged them: its dataset,
    split seed, example limit and model. Runs alike in these compare paired on the same examples."""
    return run.config.dataset, run.data_seed, run.config.limit, run.config.model


def default_selection(runs: list[Run], limit: int = 6) -> list[Run]:
    """The newest `limit` complete runs evaluated as the newest complete run was (`evaluated_on`: its data,
    split and model), in store order; all usable runs are the pool if none is complete. So the default
    selection compares on the same examples, and holds the store's most recent work."""
    pool = sorted([run for run in runs if run.status == "complete"] or runs, key=lambda run: (run.created, run.name))
    if not pool:
        return []
    alike = [run for run in pool if evaluated_on(run) == evaluated_on(pool[-1])]
    newest = {run.path for run in alike[-limit:]}  # by folder: a Run compares field by field, metrics and all
    return [run for run in runs if run.path in newest]


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


@dataclass
class Judgeable:
    """Which units a comparison at an evaluation can judge, and why it cannot judge the others."""

    units: list[Group]  # every run's predictions read and pass their checks
    unfinished: list[Group]  # a run has not written them yet: test predictions come when it finishes
    damaged: list[str]  # one line per run whose predictions are damaged: the run, the file, the problem

    def nothing_left(self) -> str:
        """Why no unit is left to judge, in one line."""
        if self.damaged:
            return f"no chosen run is left to compare: {len(self.damaged)} have damaged predictions (see above)"
        return "none of the chosen runs has finished: judge on validation instead"


def judgeable(units: list[Group], which: Which) -> Judgeable:
    """`units` split by whether every run's predictions at `which` (see `resolve`) can be judged."""
    found = Judgeable([], [], [])
    for unit in units:
        waiting = [run for run in unit.runs if _not_written_yet(run, which)]
        problems = [problem for run in unit.runs if run not in waiting and (problem := _damage(run, which))]
        found.damaged += problems
        if waiting:
            found.unfinished.append(unit)
        elif not problems:
            found.units.append(unit)
    return found


def _not_written_yet(run: Run, which: Which) -> bool:
    """A named evaluation ("test") is written when the run finishes: until then its absence is no damage."""
    if not isinstance(which, str) or run.status == "complete":
        return False
    return not os.path.lexists(run.path / "predictions" / f"{schema.evaluation_name(which)}.npz")


def _damage(run: Run, which: Which) -> str | None:
    """The problem with `run`'s predictions at `which`, naming the run and the file; None if they read."""
    try:
        run.predictions(resolve(run, which))
    except RunError as err:
        return str(err).splitlines()[0]
    return None


# ---------------------------------------------------------------- per-bin tables


def reliability_table(run: Run, which: Which, n_bins: int = 10, scheme: str = "width", name: str = "",
                      level: float = stats.LEVEL) -> pd.DataFrame:  # fmt: skip
    """The per-bin table of `run`'s reliability diagram at `which` (see `resolve`), columns BIN_COLUMNS."""
    shown = resolve(run, which)
    probs, labels = run.predictions(shown)
    return bins_frame(probs, labels, n_bins, scheme, name or run.label, shown, level)


def bins_frame(probs, labels, n_bins: int, scheme: str, name: str, which: Which,
               level: float = stats.LEVEL) -> pd.DataFrame:  # fmt: skip
    """calibration.reliability_bins as a DataFrame with each bin's Wilson interval (`wilson_interval`),
    tagged with the run, evaluation and scheme."""
    return _tagged(_bins_table(calibration.reliability_bins(probs, labels, n_bins, scheme), level), name, which, scheme)


def classwise_table(run: Run, which: Which, n_bins: int = 10, scheme: str = "width", name: str = "",
                    level: float = stats.LEVEL) -> pd.DataFrame:  # fmt: skip
    """The one-vs-rest per-bin tables of `run` at `which` (see `resolve`), one per class, stacked:
    columns CLASSWISE_COLUMNS; `class` is the run's name for the class, or "class k"."""
    shown = resolve(run, which)
    probs, labels = run.predictions(shown)
    return classwise_frame(probs, labels, n_bins, scheme, name or run.label, shown, run.label_names, level)


def classwise_frame(probs, labels, n_bins: int, scheme: str, name: str, which: Which,
                    names: list[str] | None = None, level: float = stats.LEVEL) -> pd.DataFrame:  # fmt: skip
    """Per class k, p_k binned against the outcome 1[y = k] (calibration.one_vs_rest_bins), each bin
    with its Wilson interval: class k's tables one under the other, labelled names[k] (or "class k"
    when `names` does not name every class)."""
    per_class = calibration.one_vs_rest_bins(probs, labels, n_bins, scheme)
    names = names if names and len(names) == len(per_class) else [f"class {k}" for k in range(len(per_class))]
    frames = [_bins_table(bins, level).assign(**{"class": label}) for bins, label in zip(per_class, names)]
    return _tagged(pd.concat(frames, ignore_index=True), name, which, scheme)


def _bins_table(bins: dict[str, np.ndarray], level: float) -> pd.DataFrame:
    """A per-bin dict of `peftviz.calibration.metrics` as a DataFrame: its bins numbered, with each bin's
    accuracy interval (accuracy_low, accuracy_high)."""
    table = pd.DataFrame(bins)
    table.insert(0, "bin", np.arange(len(table)))
    table["accuracy_low"], table["accuracy_high"] = wilson_interval(table["hits"], table["count"], level)
    return table


def _tagged(table: pd.DataFrame, name: str, which: Which, scheme: str) -> pd.DataFrame:
    """`table` with the run, evaluation and scheme in front: columns BIN_COLUMNS, or CLASSWISE_COLUMNS
    for a table with a class column."""
    table = table.assign(run=name, epoch=which, scheme=scheme)
    return table[[column for column in CLASSWISE_COLUMNS if column in table]]


def wilson_interval(hits, counts, level: float = stats.LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The Wilson score interval of each proportion p̂ = k / n (k = hits, n = counts); NaN where n = 0.

    With z the (1 + level) / 2 quantile of the standard normal (1.96 at 95%), the bounds are

        (p̂ + z²/2n ± z √(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n)

    (Wilson 1927): inside [0, 1], and not of width 0 at p̂ = 0 or 1 as the normal interval is. Computed
    by statsmodels' `proportion_confint(k, n, alpha=1 - level, method="wilson")`.
    """
    from statsmodels.stats.proportion import proportion_confint  # local: keeps this module's import light

    stats.check_level(level)
    hits, counts = np.asarray(hits, dtype=np.float64), np.asarray(counts, dtype=np.float64)
    low, high = np.full(counts.shape, np.nan), np.full(counts.shape, np.nan)
    filled = counts > 0
    if filled.any():
        low[filled], high[filled] = proportion_confint(hits[filled], counts[filled], alpha=1 - level, method="wilson")
    return low, high


def table_ece(table: pd.DataFrame) -> float:
    """ECE = Σ_b (n_b / N) |acc_b − conf_b|, from a per-bin table (empty bins contribute nothing)."""
    counts = table["count"].to_numpy()
    weighted_gaps = counts * np.nan_to_num(np.abs(table["gap"].to_numpy()))
    return float(weighted_gaps.sum() / counts.sum())


# ---------------------------------------------------------------- ECE over epochs


def ece_over_epochs(
    run: Run, n_bins: int = 10, scheme: str = "width", n_resamples: int = 200, name: str = ""
) -> pd.DataFrame:
    """One row per finished epoch: run, epoch, ece and its 95% percentile-bootstrap interval low, high."""
    rows = []
    for epoch in finished_epochs(run):
        probs, labels = run.predictions(epoch)
        metric = "ece" if scheme == "width" else "ece_mass"
        found = estimators.estimate_all(probs, labels, n_bins, scheme, n_resamples, metrics=[metric])[metric]
        rows.append(
            {"run": name or run.label, "epoch": epoch, "ece": found.value, "low": found.low, "high": found.high}
        )
    return pd.DataFrame(rows, columns=["run", "epoch", "ece", "low", "high"])


# ---------------------------------------------------------------- recalibration

# the maps of `peftviz.calibration.recalibration`, after the predictions as trained
RECALIBRATION_NAMES = {
    "none": "as trained",
    "temperature": "temperature scaling",
    "vector": "vector scaling",
    "isotonic": "isotonic regression",
}


@dataclass(frozen=True)
class Recalibration:
    """A map fitted on validation and judged on test: the only honest way round."""

    method: str  # a key of RECALIBRATION_NAMES
    label: str  # what the title says: "T = 1.3", "vector scaling", ...
    fitted_on_epoch: int  # the best epoch: the one whose model made the test predictions
    n_validation: int
    before: dict[str, float]  # calibration.summary on test, as trained
    after: dict[str, float]  # calibration.summary on test, recalibrated
    before_bins: pd.DataFrame
    after_bins: pd.DataFrame
    temperature: float | None = None  # temperature scaling's T


def _validation_and_test(run: Run) -> tuple[int, tuple, tuple]:
    """The best epoch, its validation predictions and the test predictions its model made."""
    best = run.best_epoch
    if best is None:
        raise RunError(f"run {run.name} has no finished epochs")
    return best, run.predictions(best), run.predictions("test")


def _fit_map(method: str, val_probs, val_labels):
    """The recalibration map `method` fitted on validation; None for "none" (the predictions as trained)."""
    if method == "none":
        return None
    if method not in recalibration.RECALIBRATORS:
        raise ConfigError(f"unknown recalibration {method!r}; choose one of {', '.join(RECALIBRATION_NAMES)}")
    return recalibration.RECALIBRATORS[method].fit(val_probs, val_labels)


def recalibration_bins(run: Run, method: str, n_bins: int = 10, scheme: str = "width", name: str = "") -> Recalibration:
    """Fit `method` on the best epoch's validation predictions; test metrics and bins before and after.

    The stored test predictions come from the best epoch's model, so the map is fitted on that same
    epoch. Raises RunError for a run without test predictions (e.g. one that did not finish).
    """
    best, (val_probs, val_labels), (before, labels) = _validation_and_test(run)
    fitted = _fit_map(method, val_probs, val_labels)
    after = before if fitted is None else fitted.transform(before)
    temperature = getattr(fitted, "temperature", None)
    label = f"T = {temperature:.3g}" if temperature is not None else RECALIBRATION_NAMES[method]
    name = name or run.label
    return Recalibration(
        method=method,
        label=label,
        fitted_on_epoch=best,
        n_validation=len(val_labels),
        before=calibration.summary(before, labels, n_bins, scheme),
        after=calibration.summary(after, labels, n_bins, scheme),
        before_bins=bins_frame(before, labels, n_bins, scheme, name, "test"),
        after_bins=bins_frame(after, labels, n_bins, scheme, f"{name} ({label})", "test"),
        temperature=temperature,
    )


def recalibration_estimates(run: Run, settings, metrics) -> pd.DataFrame:
    """Every estimator with its bootstrap interval on test, as trained and after each map.

    Long table, columns map, metric, value, low, high. `settings` is a group_stats.Settings (its
    `which` is ignored: recalibration is always judged on test). All maps share one set of
    resampled test examples, so their intervals are paired.
    """
    _, (val_probs, val_labels), (test_probs, labels) = _validation_and_test(run)
    rows = []
    for method, heading in RECALIBRATION_NAMES.items():
        fitted = _fit_map(method, val_probs, val_labels)
        probs = test_probs if fitted is None else fitted.transform(test_probs)
        found = estimators.estimate_all(probs, labels, settings.n_bins, settings.scheme, settings.n_resamples,
                                        settings.level, settings.seed, metrics)  # fmt: skip
        rows += [{"map": heading, "metric": metric, "value": e.value, "low": e.low, "high": e.high}
                 for metric, e in found.items()]  # fmt: skip
    return pd.DataFrame(rows, columns=["map", "metric", "value", "low", "high"])


def recalibration_wide(table: pd.DataFrame) -> pd.DataFrame:
    """Metric × map, each cell "value [low, high]"."""
    cells = [f"{v:.4f} [{lo:.4f}, {hi:.4f}]" for v, lo, hi in zip(table["value"], table["low"], table["high"])]
    wide = table.assign(cell=cells).pivot(index="metric", columns="map", values="cell")
    wide = wide.reindex(index=table["metric"].unique(), columns=list(RECALIBRATION_NAMES.values()))
    wide.index = [estimators.ESTIMATORS[name].heading for name in wide.index]
    return wide.rename_axis("metric").reset_index()


# ---------------------------------------------------------------- groups of seeds


def group_ece_over_epochs(group: Group, n_bins: int = 10, scheme: str = "width", name: str = "",
                          n_resamples: int = 200, level: float = stats.LEVEL) -> pd.DataFrame:  # fmt: skip
    """One row per epoch that every seed finished: the mean ECE over seeds and its two-level bootstrap
    interval over seeds and validation examples (`stats.two_level_interval`; columns as
    `ece_over_epochs`, plus `n`, `members` (each seed's ECE) and `seeds`, in seed order)."""
    common = sorted(set.intersection(*(set(finished_epochs(run)) for run in group.runs)))
    metric = "ece" if scheme == "width" else "ece_mass"
    rows = []
    for epoch in common:
        found = [estimators.estimate_all(*run.predictions(epoch), n_bins, scheme, n_resamples, level, 0, [metric])[metric]
                 for run in group.runs]  # fmt: skip
        unit = stats.SeedDraws.of(group.seeds, found)
        mean, low, high = stats.two_level_interval(unit, level)
        rows.append({"run": name or group.label, "epoch": epoch, "ece": mean, "low": low, "high": high,
                     "n": len(found), "members": unit.values.tolist(), "seeds": group.seeds})  # fmt: skip
    return pd.DataFrame(rows, columns=["run", "epoch", "ece", "low", "high", "n", "members", "seeds"])


def smooth_diagram(run: Run, which: Which, n_resamples: int = 200, seed: int = 0, band: bool = True) -> SmoothDiagram:
    """relplot's smoothed reliability diagram of `run` at `which` (see `resolve`); band: its bootstrap band."""
    return estimators.smooth_reliability(*run.predictions(resolve(run, which)), n_resamples, seed, band)


def group_mean_curve(diagrams: list[SmoothDiagram], level: float = stats.LEVEL) -> SmoothDiagram:
    """The seeds' smoothed curves averaged pointwise, banded by the t-interval of that mean; the density
    and smooth ECE averaged too. One seed: its own curve and bootstrap band."""
    if len(diagrams) == 1:
        return diagrams[0]
    curves = np.stack([d.curve for d in diagrams])  # (seeds, mesh)
    mean = curves.mean(axis=0)
    half = stats.t_half_width(curves, level)  # (mesh,)
    return replace(diagrams[0], curve=mean, lower=mean - half, upper=mean + half,
                   density=np.mean([d.density for d in diagrams], axis=0),
                   smooth_ece=float(np.mean([d.smooth_ece for d in diagrams])))  # fmt: skip
