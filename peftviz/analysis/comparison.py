"""Comparing methods: each method's value with its interval, and which differences are real.

Units. A *group* is the runs of one setting at several training seeds (`runs.group_runs`); a run
named on its own is a group of one. Every unit is judged on the same predictions:

* ``which="test"`` (the default): the best validation epoch's model on the test split. The best
  epoch was chosen on validation, so validation numbers at that epoch are optimistic; test is not.
* ``which=<epoch>``: that epoch's validation predictions (a run with fewer epochs uses its last).

Per unit and metric (`summary_table`):

* one run: its value and the percentile-bootstrap interval over resampled examples;
* several seeds: the mean over seeds and the Student-t interval of that mean. The seeds share one
  split (`data_seed`), so this interval holds the training randomness, not the examples'.

Per pair of units and metric (`pairwise_table`):

* two single runs on the same examples: the paired bootstrap of the difference, with the same
  resampled examples for both runs (`stats.paired_bootstrap_from_samples`);
* two groups: the difference of the means over seeds, paired by seed (paired t) when the seeds
  match and Welch's t otherwise (`stats.group_difference`).

Holm's step-down correction runs over all pairs of units, separately for each metric: each metric
is its own question ("is A better calibrated than B by smooth ECE?"), asked of every pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd

from peftviz import estimators, stats
from peftviz.analysis.calibration import resolve
from peftviz.errors import ConfigError
from peftviz.runs import Group, Run, RunError, group_runs
from peftviz.tables import format_table

# the Calibration page's choice of resamples: 200 gives a readable band in seconds; 1000 is the report's precision
RESAMPLE_CHOICES = (200, 1000)
SUMMARY_COLUMNS = ("unit", "method", "n", "seeds", "metric", "mean", "low", "high", "interval")
PAIR_COLUMNS = ("a", "b", "metric", "difference", "low", "high", "p", "p_holm", "significant", "test", "n")


@dataclass(frozen=True)
class Settings:
    """How every estimate of a comparison is made; part of every cache key."""

    which: int | str = "test"
    n_bins: int = 10
    scheme: str = "width"
    n_resamples: int = 1000
    seed: int = 0
    level: float = stats.LEVEL


def check_metrics(metrics) -> tuple[str, ...]:
    metrics = tuple(metrics or estimators.DEFAULT_METRICS)
    unknown = [name for name in metrics if name not in estimators.ESTIMATORS]
    if unknown:
        raise ConfigError(f"unknown metric(s) {', '.join(unknown)}; choose from {', '.join(estimators.ESTIMATORS)}")
    return metrics


def predictions(run: Run, which: int | str) -> tuple[np.ndarray, np.ndarray]:
    """The predictions a comparison judges: "test", or an epoch's validation (the last one if fewer)."""
    return run.predictions(resolve(run, which))


def run_estimates(run: Run, settings: Settings, metrics) -> dict[str, estimators.Estimate]:
    """Every metric of one run with its bootstrap interval (and draws, for paired comparisons)."""
    probs, labels = predictions(run, settings.which)
    return estimators.estimate_all(
        probs, labels, settings.n_bins, settings.scheme, settings.n_resamples, settings.level, settings.seed, metrics
    )


def unique_names(groups: list[Group]) -> dict[str, str]:
    """Group key -> label, with the key appended where two groups share a label."""
    counts = pd.Series([group.label for group in groups]).value_counts()
    return {group.key: group.label if counts[group.label] == 1 else f"{group.label} · {group.key}" for group in groups}


# ---------------------------------------------------------------- one row per unit and metric


def _summary_row(name: str, group: Group, metric: str, estimates: list[dict], level: float) -> dict:
    values = np.array([estimate[metric].value for estimate in estimates])
    row = {"unit": name, "method": group.label, "n": len(values), "seeds": ",".join(map(str, group.seeds))}
    if len(values) == 1:
        only = estimates[0][metric]
        return row | {"metric": metric, "mean": only.value, "low": only.low, "high": only.high,
                      "interval": "bootstrap over examples"}  # fmt: skip
    mean, low, high = stats.t_interval(values, level)
    return row | {"metric": metric, "mean": mean, "low": low, "high": high, "interval": "t over seeds"}


def summary_table(groups: list[Group], estimates: dict[str, dict], metrics, level: float = stats.LEVEL) -> pd.DataFrame:
    """Long table, columns SUMMARY_COLUMNS: per unit and metric its mean and interval.

    `estimates` maps run name -> `run_estimates` of that run.
    """
    names = unique_names(groups)
    rows = [
        _summary_row(names[group.key], group, metric, [estimates[run.name] for run in group.runs], level)
        for group in groups
        for metric in metrics
    ]
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


# ---------------------------------------------------------------- one row per pair of units and metric


def _check_same_examples(a: Run, b: Run, settings: Settings) -> int:
    """The number of examples two runs were judged on; RunError unless they are the same examples."""
    labels_a, labels_b = predictions(a, settings.which)[1], predictions(b, settings.which)[1]
    if labels_a.shape != labels_b.shape or not np.all(labels_a == labels_b):
        raise RunError(f"runs {a.name} and {b.name} were not evaluated on the same examples")
    return len(labels_a)


def _differences(a: Group, b: Group, metrics, estimates: dict[str, dict], settings: Settings) -> list[stats.Difference]:
    """A − B for each metric: paired bootstrap for two single runs, t-tests over seeds for groups."""
    if len(a.runs) == 1 and len(b.runs) == 1:
        run_a, run_b = a.runs[0], b.runs[0]
        n_examples = _check_same_examples(run_a, run_b, settings)
        pairs = [(estimates[run_a.name][metric], estimates[run_b.name][metric]) for metric in metrics]
        return [stats.paired_bootstrap_from_samples(ea.value, eb.value, ea.samples, eb.samples, settings.level,
                                                    n_examples) for ea, eb in pairs]  # fmt: skip
    return [
        stats.group_difference([estimates[run.name][metric].value for run in a.runs],
                               [estimates[run.name][metric].value for run in b.runs], a.seeds, b.seeds, settings.level)
        for metric in metrics
    ]  # fmt: skip


def pairwise_table(groups: list[Group], estimates: dict[str, dict], metrics, settings: Settings) -> pd.DataFrame:
    """Long table, columns PAIR_COLUMNS: A − B per pair and metric, Holm-adjusted within each metric."""
    names = unique_names(groups)
    rows = []
    for a, b in combinations(groups, 2):
        for metric, diff in zip(metrics, _differences(a, b, metrics, estimates, settings)):
            rows.append({"a": names[a.key], "b": names[b.key], "metric": metric, "difference": diff.estimate,
                         "low": diff.low, "high": diff.high, "p": diff.p_value, "test": diff.method, "n": diff.n})  # fmt: skip
    table = pd.DataFrame(rows, columns=[c for c in PAIR_COLUMNS if c not in ("p_holm", "significant")])
    table["p_holm"] = np.nan
    for metric, rows_of_metric in table.groupby("metric").groups.items():
        table.loc[rows_of_metric, "p_holm"] = stats.holm(table.loc[rows_of_metric, "p"].to_numpy())
    table["significant"] = table["p_holm"] < 1.0 - settings.level
    return table[list(PAIR_COLUMNS)]


# ---------------------------------------------------------------- the whole comparison


@dataclass(frozen=True)
class Comparison:
    """What `report` prints and the Calibration page shows: units, their summary and their pairs."""

    settings: Settings
    metrics: tuple[str, ...]
    summary: pd.DataFrame  # SUMMARY_COLUMNS
    pairs: pd.DataFrame  # PAIR_COLUMNS


def compare_groups(groups: list[Group], settings: Settings, metrics=None, progress=None) -> Comparison:
    """Estimate every run of every group once, then summarise and compare. progress(done, total) if given."""
    metrics = check_metrics(metrics)
    if not groups:
        raise ConfigError("nothing to compare: no runs or groups with finished epochs")
    runs = [run for group in groups for run in group.runs]
    estimates = {}
    for done, run in enumerate(runs):
        estimates[run.name] = run_estimates(run, settings, metrics)
        if progress:
            progress(done + 1, len(runs))
    return compare_estimates(groups, estimates, settings, metrics)


def compare_estimates(groups: list[Group], estimates: dict[str, dict], settings: Settings, metrics) -> Comparison:
    """The comparison of groups whose runs' `run_estimates` are at hand (run name -> estimates)."""
    metrics = check_metrics(metrics)
    summary = summary_table(groups, estimates, metrics, settings.level)
    return Comparison(settings, metrics, summary, pairwise_table(groups, estimates, metrics, settings))


# ---------------------------------------------------------------- tables for people


def _interval_cell(mean: float, low: float, high: float) -> str:
    if np.isnan(low):
        return f"{mean:.4f}"
    return f"{mean:.4f} [{low:.4f}, {high:.4f}]"


def wide_summary(comparison: Comparison) -> pd.DataFrame:
    """Unit × metric, each cell "mean [low, high]"; rows in the order of the units."""
    table = comparison.summary
    cells = table.assign(
        cell=[_interval_cell(m, lo, hi) for m, lo, hi in zip(table["mean"], table["low"], table["high"])]
    )
    wide = cells.pivot(index="unit", columns="metric", values="cell").reindex(table["unit"].unique())
    seeds = table.drop_duplicates("unit").set_index("unit")["seeds"]
    wide.insert(0, "seeds", seeds)
    return wide[["seeds", *comparison.metrics]].reset_index()


def wide_pairs(comparison: Comparison) -> pd.DataFrame:
    """Pair × metric, each cell the difference A − B, starred where significant after Holm."""
    pairs = comparison.pairs
    cells = [f"{d:+.4f}{' *' if s else ''}" for d, s in zip(pairs["difference"], pairs["significant"])]
    table = pairs.assign(pair=pairs["a"] + " − " + pairs["b"], cell=cells)
    wide = table.pivot(index="pair", columns="metric", values="cell").reindex(table["pair"].unique())
    return wide[list(comparison.metrics)].reset_index()


def markdown(comparison: Comparison) -> str:
    """The comparison as two markdown tables and a sentence on how they were made."""
    s = comparison.settings
    where = "test split (best validation epoch)" if s.which == "test" else f"validation, epoch {s.which}"
    how = (
        f"Predictions: {where}. Intervals: {s.level:.0%}; one run: percentile bootstrap over {s.n_resamples} "
        f"resamples of the examples (seed {s.seed}); several seeds: t-interval of the mean over seeds. "
        f"Binned estimators: {s.n_bins} equal-{'width' if s.scheme == 'width' else 'mass'} bins."
    )
    lines = [
        how,
        "",
        format_table(wide_summary(comparison).to_dict("records")),
    ]
    if not comparison.pairs.empty:
        legend = (
            "Differences A − B; * = significant at 5% after Holm's correction over the pairs, per metric "
            "(paired bootstrap for single runs on the same examples; paired-by-seed t or Welch t for groups)."
        )
        lines += [
            "",
            legend,
            "",
            format_table(wide_pairs(comparison).to_dict("records")),
        ]
    return "\n".join(lines)


# ---------------------------------------------------------------- choosing what to compare


def _one_data_split(groups: list[Group]) -> None:
    """Every unit must be judged on the same examples: same dataset, data seed and limit."""
    splits = {(run.config.dataset, run.data_seed, run.config.limit) for g in groups for run in g.runs}
    if len(splits) > 1:
        shown = "; ".join(f"{d} (data seed {s}, limit {n})" for d, s, n in sorted(splits, key=str))
        raise ConfigError(f"these runs were evaluated on different data, so they cannot be compared: {shown}")


def select_units(runs: list[Run], names: list[str] | None = None) -> list[Group]:
    """The units `report` compares. Each name is a group key, a run folder name (a unit of its own)
    or a method label (its groups). No names: every group of the store's most common data split."""
    groups = group_runs(runs)
    if not names:
        if not groups:
            return []
        split_of = {g.key: (g.runs[0].config.dataset, g.runs[0].data_seed, g.runs[0].config.limit) for g in groups}
        common = pd.Series(list(split_of.values())).value_counts().index[0]
        chosen = [g for g in groups if split_of[g.key] == common]
    else:
        chosen = [unit for name in names for unit in _units_named(name, groups)]
    _one_data_split(chosen)
    return chosen


def _units_named(name: str, groups: list[Group]) -> list[Group]:
    by_key = [g for g in groups if g.key == name]
    by_run = [Group(run.name, [run]) for g in groups for run in g.runs if run.name == name]
    by_label = [g for g in groups if g.label == name]
    found = by_key or by_run or by_label
    if not found:
        raise ConfigError(f"no group, run or method named {name!r} with finished epochs in the store")
    return found
