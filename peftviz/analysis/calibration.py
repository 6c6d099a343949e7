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
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from peftviz import calibration
from peftviz.calibration import estimators, recalibration, stats
from peftviz.calibration.estimators import SmoothDiagram
from peftviz.data.uploads import dataset_label
from peftviz.errors import ConfigError, RunError
from peftviz.store import schema
from peftviz.store.runs import Group, Run

BIN_COLUMNS = (
    "run",
    "epoch",
    "scheme",
    "bin",
    "lower",
    "upper",
    "count",
    "hits",
    "confidence",
    "accuracy",
    "accuracy_low",
    "accuracy_high",
    "gap",
)
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


def data_split(run: Run) -> tuple:
    """What decides the examples a run was judged on: its dataset, data seed and example limit. Runs alike in
    these were judged on the same examples, so their draws pair (whatever model made the predictions)."""
    return run.config.dataset, run.data_seed, run.config.limit


def split_text(split: tuple) -> str:
    """A data split as tables and left-out lines name it: "bbc-news (data seed 0, limit 120)"."""
    dataset, data_seed, limit = split
    return f"{dataset_label(dataset)} (data seed {data_seed}, limit {limit})"


def unit_text(unit: Group) -> str:
    """A unit in a left-out line: a single run by its folder, as `runs` lists it; a group by its name."""
    return unit.runs[0].name if len(unit.runs) == 1 else unit.name


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


def not_by_default(
    units: list[Group], default: list[str], names: dict[str, str], limit: int, single_runs: bool = False
) -> str | None:
    """One line naming the units a default selection (`default`: their keys) left out, each with why: evaluated
    on other data than the default's (`group_stats.select_units`, `default_selection`), for single runs judged by
    another model or not complete (`default_selection` takes neither), or beyond the default's `limit`; None when
    it left none out. `names`: unit key -> the name the picker shows."""
    shown = [run for unit in units if unit.key in default for run in unit.runs]
    if not shown:
        return None
    splits, evaluations = {data_split(run) for run in shown}, {evaluated_on(run) for run in shown}
    reasons: dict[str, list[str]] = {}
    for unit in units:
        if unit.key not in default:
            why = _why_not_default(unit.runs[0], splits, evaluations if single_runs else None, limit)
            reasons.setdefault(why, []).append(names[unit.key])
    if not reasons:
        return None
    said = "; ".join(f"{why}: {', '.join(listed)}" for why, listed in reasons.items())
    return f"Not chosen by default (add them above): {said}."


def _why_not_default(run: Run, splits: set, evaluations: set | None, limit: int) -> str:
    """Why the default left `run`'s unit out; `evaluations`: the single runs' default (None for groups)."""
    if data_split(run) not in splits:
        return f"evaluated on other data, {split_text(data_split(run))}, so not comparable with the default's"
    if evaluations is None:
        return f"beyond the default's {limit}"
    if evaluated_on(run) not in evaluations:
        return f"judged by another model ({run.config.model})"
    if run.status != "complete":
        return f"not complete ({run.status})"
    return f"beyond the default's {limit}"


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
    """Which runs of the chosen units a comparison at an evaluation can judge, and why it leaves the others out.

    A unit keeps the runs it can judge (a group of three seeds, one still training, is judged on two, and says
    so); a unit none of whose runs can be judged is dropped. Every run left out is named in `left_out`."""

    units: list[Group]  # each chosen unit with the runs whose predictions at `which` read and pass their checks
    waiting: list[Run]  # runs that have not written them yet: test predictions when a run ends, an epoch not reached
    damaged: list[str]  # one line per run whose predictions are damaged: the run, the file, the problem
    which: Which = "test"
    other_data: list[Group] = field(default_factory=list)  # `one_split`: the units judged on another data split
    split: tuple | None = None  # `one_split`: the data split the kept units were judged on

    def waiting_line(self) -> str | None:
        """The runs not written yet, named with their seed and progress, and why: one line (None: no such run)."""
        if not self.waiting:
            return None
        named = ", ".join(f"{run.name} ({_progress(run)})" for run in self.waiting)
        return f"Left out: {named}: {_not_yet_what(self.which)}."

    def other_data_line(self) -> str | None:
        """The units on other data than the compared ones, named with their data, and why: one line (None: none)."""
        if not self.other_data:
            return None
        named = "; ".join(f"{unit_text(unit)}, on {split_text(data_split(unit.runs[0]))}" for unit in self.other_data)
        return (
            f"Left out of the comparison, evaluated on other data: {named}. A comparison pairs runs on the same "
            f"examples, so it compares the chosen runs on {split_text(self.split)} (choose those alone, or with "
            "runs on their data, to compare them)."
        )

    def left_out(self) -> list[str]:
        """Every run left out: the lines of those on other data and not written yet, then one per damaged run."""
        return [line for line in [self.other_data_line(), self.waiting_line(), *self.damaged] if line]

    def notes(self) -> list[str]:
        """The lines a page shows as notes (other data, not written yet); the damaged runs are errors."""
        return [line for line in [self.other_data_line(), self.waiting_line()] if line]

    def nothing_left(self) -> str:
        """Why no unit is left to judge, in one line."""
        if self.damaged:
            return f"no chosen run is left to compare: {len(self.damaged)} have damaged predictions (see above)"
        if isinstance(self.which, int):
            return f"none of the chosen runs has finished epoch {self.which}: choose an earlier epoch"
        return "none of the chosen runs has finished: judge on validation instead"


def judgeable(units: list[Group], which: Which, one_split: bool = False) -> Judgeable:
    """`units` with only the runs whose predictions at `which` can be judged: an evaluation name ("test"),
    or an epoch, which every judged run must have finished (a run with fewer epochs is left out, never
    judged at another epoch under this one's name). `one_split`: for a comparison, which pairs runs on the
    same examples, only the units on the data split most of them share (a tie: the first unit's); the others
    are left out as `other_data`, named by `other_data_line`."""
    found = Judgeable([], [], [], which)
    if one_split and units:
        found.split = Counter(data_split(unit.runs[0]) for unit in units).most_common(1)[0][0]
        found.other_data = [unit for unit in units if data_split(unit.runs[0]) != found.split]
        units = [unit for unit in units if data_split(unit.runs[0]) == found.split]
    for unit in units:
        waiting = [run for run in unit.runs if _not_written_yet(run, which)]
        problems = {run.name: problem for run in unit.runs if run not in waiting and (problem := _damage(run, which))}
        found.waiting += waiting
        found.damaged += problems.values()
        kept = [run for run in unit.runs if run not in waiting and run.name not in problems]
        if kept:
            found.units.append(unit if len(kept) == len(unit.runs) else replace(unit, runs=kept))
    return found


def seeds_at(units: list[Group], epoch: int) -> Judgeable:
    """The units as a figure draws them at `epoch`: a group keeps the seeds that finished it (its mean is of one
    epoch), the others named in `waiting`; a single run stays as it is, drawn at its last epoch up to `epoch`
    (`resolve`), as its page says."""
    groups = judgeable([unit for unit in units if len(unit.runs) > 1], epoch)
    kept = {unit.key: unit for unit in groups.units}
    shown = [
        unit if len(unit.runs) == 1 else kept[unit.key] for unit in units if len(unit.runs) == 1 or unit.key in kept
    ]
    return replace(groups, units=shown)


def groups_left_out(runs: list[Run], groups: list[Group]) -> list[str]:
    """What a table of the groups' test numbers (Home's, `group_stats.group_row`) leaves out of `runs`, one line
    per reason naming the runs, as `report` says it: unreadable runs, runs without a finished epoch (in no group
    yet), and a group's runs without test predictions yet or with damaged ones (`judgeable` at "test")."""
    return unusable_lines(runs) + judgeable(groups, "test").left_out()


def unusable_lines(runs: list[Run]) -> list[str]:
    """The runs no view or comparison can use, one line per reason naming them: unreadable, and without a
    finished epoch (in no group yet)."""
    unreadable = [f"{run.name} ({run.error})" for run in runs if run.status == "corrupt"]
    unstarted = [f"{run.name} ({_progress(run)})" for run in runs if run.status != "corrupt" and not run.metrics]
    lines = [f"Left out, unreadable: {'; '.join(unreadable)}."] if unreadable else []
    return lines + ([f"Left out, no finished epoch yet: {', '.join(unstarted)}."] if unstarted else [])


def _not_written_yet(run: Run, which: Which) -> bool:
    """An epoch the run has not finished, or a named evaluation ("test") of a run that has not ended: it is
    written when the run finishes, so until then its absence is no damage."""
    if isinstance(which, int):
        return which not in finished_epochs(run)
    if run.status == "complete":
        return False
    return not os.path.lexists(run.path / "predictions" / f"{schema.evaluation_name(which)}.npz")


def _progress(run: Run) -> str:
    """A left-out run's state in a few words: "seed 0, training, 1 epoch"."""
    done = len(run.metrics)
    return f"seed {run.seed}, {run.status}, {done} epoch{'' if done == 1 else 's'}"


def _not_yet_what(which: Which) -> str:
    if isinstance(which, int):
        return f"epoch {which} not finished"
    return f"no {which} predictions yet (written when a run finishes)"


def _damage(run: Run, which: Which) -> str | None:
    """The problem with `run`'s predictions at `which`, naming the run and the file; None if they read."""
    try:
        run.predictions(resolve(run, which))
    except RunError as err:
        return str(err).splitlines()[0]
    return None


# ---------------------------------------------------------------- per-bin tables


def reliability_table(
    run: Run, which: Which, n_bins: int = 10, scheme: str = "width", name: str = "", level: float = stats.LEVEL
) -> pd.DataFrame:
    """The per-bin table of `run`'s reliability diagram at `which` (see `resolve`), columns BIN_COLUMNS."""
    shown = resolve(run, which)
    probs, labels = run.predictions(shown)
    return bins_frame(probs, labels, n_bins, scheme, name or run.label, shown, level)


def bins_frame(
    probs, labels, n_bins: int, scheme: str, name: str, which: Which, level: float = stats.LEVEL
) -> pd.DataFrame:
    """calibration.reliability_bins as a DataFrame with each bin's Wilson interval (`wilson_interval`),
    tagged with the run, evaluation and scheme."""
    return _tagged(_bins_table(calibration.reliability_bins(probs, labels, n_bins, scheme), level), name, which, scheme)


def classwise_table(
    run: Run, which: Which, n_bins: int = 10, scheme: str = "width", name: str = "", level: float = stats.LEVEL
) -> pd.DataFrame:
    """The one-vs-rest per-bin tables of `run` at `which` (see `resolve`), one per class, stacked:
    columns CLASSWISE_COLUMNS; `class` is the run's name for the class, or "class k"."""
    shown = resolve(run, which)
    probs, labels = run.predictions(shown)
    return classwise_frame(probs, labels, n_bins, scheme, name or run.label, shown, run.label_names, level)


def classwise_frame(
    probs,
    labels,
    n_bins: int,
    scheme: str,
    name: str,
    which: Which,
    names: list[str] | None = None,
    level: float = stats.LEVEL,
) -> pd.DataFrame:
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


# ---------------------------------------------------------------- a debiased ECE below 0

# what a debiased ECE below 0 means, said wherever one is shown (the estimator: `peftviz.calibration.estimators`)
DEBIASED_BELOW_ZERO = (
    "Debiased ECE is the binned ECE minus an estimate of its upward bias (Kumar et al. 2019), not clipped at 0, as "
    "clipping would add the bias back: below 0 means no miscalibration is detectable beyond the noise of these "
    "examples, not an error below none."
)


def below_zero_note(table: pd.DataFrame) -> str | None:
    """DEBIASED_BELOW_ZERO when a long table of estimates (columns `metric` and `mean` or `value`, `low`, `high`:
    `group_stats.summary_table`, `recalibration_estimates`) holds a debiased ECE or its interval below 0; else None."""
    rows = table[table["metric"] == "debiased_ece"]
    values = rows[[column for column in ("mean", "value", "low", "high") if column in rows]].to_numpy(dtype=float)
    return DEBIASED_BELOW_ZERO if (values < 0).any() else None


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
        found = estimators.estimate_all(
            probs,
            labels,
            settings.n_bins,
            settings.scheme,
            settings.n_resamples,
            settings.level,
            settings.seed,
            metrics,
        )
        rows += [
            {"map": heading, "metric": metric, "value": e.value, "low": e.low, "high": e.high}
            for metric, e in found.items()
        ]
    return pd.DataFrame(rows, columns=["map", "metric", "value", "low", "high"])


def recalibration_wide(table: pd.DataFrame) -> pd.DataFrame:
    """Metric × map, each cell "value [low, high]"."""
    cells = [f"{v:.4f} [{lo:.4f}, {hi:.4f}]" for v, lo, hi in zip(table["value"], table["low"], table["high"])]
    wide = table.assign(cell=cells).pivot(index="metric", columns="map", values="cell")
    wide = wide.reindex(index=table["metric"].unique(), columns=list(RECALIBRATION_NAMES.values()))
    wide.index = [estimators.ESTIMATORS[name].heading for name in wide.index]
    return wide.rename_axis("metric").reset_index()


# ---------------------------------------------------------------- groups of seeds


def group_ece_over_epochs(
    group: Group,
    n_bins: int = 10,
    scheme: str = "width",
    name: str = "",
    n_resamples: int = 200,
    level: float = stats.LEVEL,
) -> pd.DataFrame:
    """One row per epoch that every seed finished: the mean ECE over seeds and its two-level bootstrap
    interval over seeds and validation examples (`stats.two_level_interval`; columns as
    `ece_over_epochs`, plus `n`, `members` (each seed's ECE) and `seeds`, in seed order)."""
    common = sorted(set.intersection(*(set(finished_epochs(run)) for run in group.runs)))
    metric = "ece" if scheme == "width" else "ece_mass"
    rows = []
    for epoch in common:
        found = [
            estimators.estimate_all(*run.predictions(epoch), n_bins, scheme, n_resamples, level, 0, [metric])[metric]
            for run in group.runs
        ]
        unit = stats.SeedDraws.of(group.seeds, found)
        mean, low, high = stats.two_level_interval(unit, level)
        rows.append(
            {
                "run": name or group.label,
                "epoch": epoch,
                "ece": mean,
                "low": low,
                "high": high,
                "n": len(found),
                "members": unit.values.tolist(),
                "seeds": group.seeds,
            }
        )
    return pd.DataFrame(rows, columns=["run", "epoch", "ece", "low", "high", "n", "members", "seeds"])


def short_groups_line(units: list[Group]) -> str | None:
    """One line naming the groups whose ECE per epoch (`group_ece_over_epochs`: the epochs every seed finished)
    stops before some of their seeds' last epoch, with the seeds behind; None when none does."""
    parts = []
    for unit in units:
        done = [set(finished_epochs(run)) for run in unit.runs]
        common, every = set.intersection(*done), set.union(*done)
        if len(unit.runs) > 1 and common != every:
            behind = ", ".join(
                f"{run.name} ({_progress(run)})" for run, epochs in zip(unit.runs, done) if epochs != every
            )
            parts.append(f"{unit_text(unit)} to epoch {max(common, default=0)} (seeds behind: {behind})")
    if not parts:
        return None
    return f"A group's ECE per epoch is drawn at the epochs every seed finished: {'; '.join(parts)}."


def unit_ece_over_epochs(
    unit: Group, n_bins: int = 10, scheme: str = "width", n_resamples: int = 200, name: str = ""
) -> pd.DataFrame:
    """A unit's ECE per epoch, as the Calibration page and the Tour draw it: one run's with its bootstrap over
    the validation examples (`ece_over_epochs`), a group's seed mean with its two-level interval
    (`group_ece_over_epochs`, each seed's ECE in `members`)."""
    if len(unit.runs) == 1:
        return ece_over_epochs(unit.runs[0], n_bins, scheme, n_resamples, name)
    return group_ece_over_epochs(unit, n_bins, scheme, name, n_resamples)


def smooth_diagram(run: Run, which: Which, n_resamples: int = 200, seed: int = 0, band: bool = True) -> SmoothDiagram:
    """relplot's smoothed reliability diagram of `run` at `which` (see `resolve`); band: its bootstrap band."""
    return estimators.smooth_reliability(*run.predictions(resolve(run, which)), n_resamples, seed, band)


# The fewest seeds whose smooth curves get a band. A group's band is the t-interval of its seeds' mean curve,
# t_{0.975, S-1} s / sqrt(S): at two seeds t is 12.7, so the band is ±6.4 times the gap between the two curves,
# and two curves 0.08 apart fill [0, 1] (in stripes, where the gap changes); at three t is 4.3, ±2.5 standard
# deviations. Below this a group shows what it has, its seeds' curves and their mean, and says so.
MIN_BAND_SEEDS = 3


@dataclass(frozen=True)
class GroupDiagram(SmoothDiagram):
    """A group's smoothed reliability diagram: its seeds' mean curve, banded over the seeds when it has
    MIN_BAND_SEEDS or more (`banded`; else lower = upper = NaN), and each seed's own curve."""

    seeds: tuple[int, ...] = ()
    seed_curves: np.ndarray | None = None  # (S, mesh), in the order of `seeds`

    @property
    def banded(self) -> bool:
        return len(self.seeds) >= MIN_BAND_SEEDS


def group_mean_curve(
    diagrams: list[SmoothDiagram], level: float = stats.LEVEL, seeds: list[int] | None = None
) -> SmoothDiagram:
    """The seeds' smoothed curves averaged pointwise, with each seed's curve, and banded by the t-interval of
    that mean from MIN_BAND_SEEDS seeds on (fewer: no band, lower = upper = NaN); the density and smooth ECE
    averaged too (a `GroupDiagram`). One seed: its own curve and bootstrap band. `seeds`: the seeds' numbers
    (default 0, 1, ...)."""
    if len(diagrams) == 1:
        return diagrams[0]
    curves = np.stack([d.curve for d in diagrams])  # (seeds, mesh)
    mean = curves.mean(axis=0)
    half = stats.t_half_width(curves, level) if len(diagrams) >= MIN_BAND_SEEDS else np.full_like(mean, np.nan)
    first = diagrams[0]
    return GroupDiagram(
        mesh=first.mesh,
        curve=mean,
        lower=mean - half,
        upper=mean + half,
        density=np.mean([d.density for d in diagrams], axis=0),
        smooth_ece=float(np.mean([d.smooth_ece for d in diagrams])),
        sigma=first.sigma,
        n=first.n,
        seeds=tuple(seeds if seeds is not None else range(len(diagrams))),
        seed_curves=curves,
    )
