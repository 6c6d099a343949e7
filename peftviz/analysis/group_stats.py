"""Groups of seeds side by side: each group's value with its interval, and which differences are real.

What `report` prints, the Calibration page's tables and the groups table of `runs` and Home.

Units. A *group* is the runs of one setting at several training seeds (`runs.group_runs`); a run
named on its own is a group of one. Every unit is judged on the same predictions:

* ``which="test"`` (the default): the best validation epoch's model on the test split. The best
  epoch was chosen on validation, so validation numbers at that epoch are optimistic; test is not.
* ``which=<epoch>``: that epoch's validation predictions; a run that has not finished it is left out, and said
  so (`choose`), never judged at another epoch under this one's name.

Every run's estimates come from `analysis.estimates` (computed once, cached in the run folder):
its point value and its draws on the resampled example rows, the same rows for every
run (one split, one resampling seed).

Per unit and metric (`summary_table`): the mean over its seeds and, by default
(``group_interval="bootstrap"``), the two-level bootstrap interval over seeds and test examples
(`stats.two_level_interval`); for one run that is the percentile bootstrap over the examples.
``group_interval="t"`` gives the Student-t interval over seeds instead, which leaves out the test
set's noise (the seeds share it) and can leave the metric's range; it stays for comparison.

Per pair of units and metric (`pairwise_table`): the difference A − B of the means, its interval
and p-value from the same draws (`stats.two_level_difference`: seeds paired where both units have
the same seeds, the examples always; two single runs: the paired bootstrap over examples), and for
two groups of at least two seeds the probability of improvement P(A better than B) with its
interval (`stats.improvement`). With ``group_interval="t"`` groups use the t-tests of
`stats.group_difference`.

Holm's step-down correction runs over all pairs of units, separately for each metric: each metric
is its own question ("is A better calibrated than B by smooth ECE?"), asked of every pair.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from itertools import combinations
from typing import Literal

import numpy as np
import pandas as pd

from peftviz.analysis.calibration import (
    below_zero_note,
    data_split,
    finished_epochs,
    has_predictions,
    judgeable,
    resolve,
    unusable_lines,
)
from peftviz.analysis.calibration import split_text as _split_text
from peftviz.analysis.estimates import cached_estimates
from peftviz.analysis.run_labels import (
    NOT_YET,
)  # a group none of whose runs has finished: test predictions come at the end
from peftviz.calibration import estimators, stats
from peftviz.data.uploads import dataset_label
from peftviz.errors import ConfigError, RunError
from peftviz.options import Bounds, check_bound, check_type, shown
from peftviz.run_config import MAX_ECE_BINS
from peftviz.store import schema
from peftviz.store.runs import Group, Run, group_runs
from peftviz.tables import format_table

# the Calibration page's choice of resamples: 200 gives a readable band in seconds; 1000 is the report's precision
RESAMPLE_CHOICES = (200, 1000)
SUMMARY_COLUMNS = ("unit", "method", "n", "seeds", "metric", "mean", "low", "high", "interval")
PAIR_COLUMNS = (
    "a",
    "b",
    "metric",
    "difference",
    "low",
    "high",
    "p",
    "p_holm",
    "significant",
    "test",
    "n",
    "p_better",
    "p_better_low",
    "p_better_high",
)
GROUP_INTERVALS = {"bootstrap": "two-level bootstrap over seeds and examples", "t": "t-interval over seeds"}


# the most resamples an interval takes: the draws are an (R, N) table of example indices, 10^5 x 10^4 test
# documents already 8 GB; 1000 give a 95% interval's ends to about 1% of its width
MAX_RESAMPLES = 100_000
# what each setting takes: a bad value from the command line or a caller is one ConfigError line, before any work
SETTING_BOUNDS = {
    "which": Bounds(at_least=1),  # an epoch; or the name of a stored evaluation ("test")
    "n_bins": Bounds(at_least=1, at_most=MAX_ECE_BINS),
    "n_resamples": Bounds(at_least=1, at_most=MAX_RESAMPLES),
    "seed": Bounds(at_least=0),  # numpy's generators take no negative seed
    "level": Bounds(above=0, below=1),
}


@dataclass(frozen=True)
class Settings:
    """How every estimate of the groups is made; part of every cache key. Checked on construction
    (`SETTING_BOUNDS`, the choices), so a bad value is one ConfigError line before any work."""

    which: int | str = "test"
    n_bins: int = 10
    scheme: Literal["width", "mass"] = "width"
    n_resamples: int = 1000
    seed: int = 0
    level: float = stats.LEVEL
    group_interval: Literal["bootstrap", "t"] = "bootstrap"  # how groups of seeds get their intervals

    def __post_init__(self):
        hints = typing.get_type_hints(Settings)
        for f in fields(self):
            value = getattr(self, f.name)
            name = "epoch" if f.name == "which" and isinstance(value, int) else f.name
            check_type(name, value, hints[f.name])
            if f.name in SETTING_BOUNDS and not isinstance(value, str):
                check_bound(name, value, SETTING_BOUNDS[f.name])
        if isinstance(self.which, str):
            schema.check_evaluation_name(self.which)


def check_metrics(metrics) -> tuple[str, ...]:
    metrics = tuple(metrics or estimators.DEFAULT_METRICS)
    unknown = [name for name in metrics if name not in estimators.ESTIMATORS]
    if unknown:
        raise ConfigError(f"unknown metric(s) {', '.join(unknown)}; choose from {', '.join(estimators.ESTIMATORS)}")
    return metrics


def predictions(run: Run, which: int | str) -> tuple[np.ndarray, np.ndarray]:
    """The predictions the groups are judged on: "test", or an epoch's validation (the last one if fewer)."""
    return run.predictions(resolve(run, which))


def run_estimates(run: Run, settings: Settings, metrics) -> dict[str, estimators.Estimate]:
    """Each metric (None: all) of one run with its bootstrap interval and draws (cached in the run folder)."""
    return cached_estimates(run, resolve(run, settings.which), settings, list(metrics or estimators.ESTIMATORS))


def unique_names(groups: list[Group]) -> dict[str, str]:
    """Group key -> label, with the key appended where two groups share a label."""
    counts = pd.Series([group.label for group in groups]).value_counts()
    return {group.key: group.label if counts[group.label] == 1 else f"{group.label} · {group.key}" for group in groups}


# ---------------------------------------------------------------- one row per unit and metric


def seed_draws(group: Group, metric: str, estimates: dict[str, dict]) -> stats.SeedDraws:
    """One metric of a unit: its seeds, their point values (S,) and their draws (S, R)."""
    return stats.SeedDraws.of(group.seeds, [estimates[run.name][metric] for run in group.runs])


def _summary_row(name: str, group: Group, metric: str, estimates: dict[str, dict], settings: Settings) -> dict:
    unit = seed_draws(group, metric, estimates)
    row = {"unit": name, "method": group.label, "n": len(unit.seeds), "seeds": ",".join(map(str, group.seeds))}
    if settings.group_interval == "t" and len(unit.seeds) > 1:
        interval, how = stats.t_interval(unit.values, settings.level), "t over seeds"
    else:  # one seed: the run's bootstrap over examples
        interval = stats.two_level_interval(unit, settings.level, settings.seed)
        how = "bootstrap over examples" if len(unit.seeds) == 1 else "bootstrap over seeds × examples"
    return row | {"metric": metric, "mean": interval[0], "low": interval[1], "high": interval[2], "interval": how}


def summary_table(groups: list[Group], estimates: dict[str, dict], metrics, settings: Settings) -> pd.DataFrame:
    """Long table, columns SUMMARY_COLUMNS: per unit and metric its mean and interval.

    `estimates` maps run name -> `run_estimates` of that run.
    """
    names = unique_names(groups)
    rows = [
        _summary_row(names[group.key], group, metric, estimates, settings) for group in groups for metric in metrics
    ]
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


# ---------------------------------------------------------------- one row per pair of units and metric


def same_examples(groups: list[Group], settings: Settings) -> int:
    """The number of examples every run was judged on; RunError unless all judged the same examples
    (their draws are then on the same resampled rows, which pairing and the groups' bootstrap need)."""
    runs = [run for group in groups for run in group.runs]
    first = predictions(runs[0], settings.which)[1]
    for run in runs[1:]:
        labels = predictions(run, settings.which)[1]
        if labels.shape != first.shape or not np.all(labels == first):
            raise RunError(f"runs {runs[0].name} and {run.name} were not evaluated on the same examples")
    return len(first)


def _pair_row(a: stats.SeedDraws, b: stats.SeedDraws, metric: str, settings: Settings, n_examples: int) -> dict:
    """A − B with its interval and p-value, and P(A better than B) where both have two seeds or more."""
    if settings.group_interval == "t" and max(len(a.seeds), len(b.seeds)) > 1:
        diff = stats.group_difference(a.values, b.values, a.seeds, b.seeds, settings.level)
    else:
        diff = stats.two_level_difference(a, b, settings.level, settings.seed, n_examples)
    row = {
        "difference": diff.estimate,
        "low": diff.low,
        "high": diff.high,
        "p": diff.p_value,
        "test": diff.method,
        "n": diff.n,
        "p_better": np.nan,
        "p_better_low": np.nan,
        "p_better_high": np.nan,
    }
    lower_is_better = estimators.ESTIMATORS[metric].lower_is_better
    if min(len(a.seeds), len(b.seeds)) >= 2 and lower_is_better is not None:
        better = stats.improvement(a, b, lower_is_better, settings.level, settings.seed)
        row |= dict(zip(("p_better", "p_better_low", "p_better_high"), better))
    return row


def pairwise_table(
    groups: list[Group], estimates: dict[str, dict], metrics, settings: Settings, n_examples: int = 0
) -> pd.DataFrame:
    """Long table, columns PAIR_COLUMNS: A − B per pair and metric, Holm-adjusted within each metric.
    `n_examples`: what the tests' rows report as n (`same_examples`)."""
    names = unique_names(groups)
    rows = [
        {"a": names[a.key], "b": names[b.key], "metric": metric}
        | _pair_row(seed_draws(a, metric, estimates), seed_draws(b, metric, estimates), metric, settings, n_examples)
        for a, b in combinations(groups, 2)
        for metric in metrics
    ]
    table = pd.DataFrame(rows, columns=[c for c in PAIR_COLUMNS if c not in ("p_holm", "significant")])
    table["p_holm"] = np.nan
    for rows_of_metric in table.groupby("metric").groups.values():
        table.loc[rows_of_metric, "p_holm"] = stats.holm(table.loc[rows_of_metric, "p"].to_numpy())
    table["significant"] = table["p_holm"] < 1.0 - settings.level
    return table[list(PAIR_COLUMNS)]


# ---------------------------------------------------------------- the groups' statistics


@dataclass(frozen=True)
class GroupStats:
    """What `report` prints and the Calibration page shows: units, their summary and their pairs."""

    settings: Settings
    metrics: tuple[str, ...]
    summary: pd.DataFrame  # SUMMARY_COLUMNS
    pairs: pd.DataFrame  # PAIR_COLUMNS
    n_examples: int  # the test (or validation) examples every run was judged on


def stats_of_groups(groups: list[Group], settings: Settings, metrics=None, progress=None) -> GroupStats:
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
    return stats_of_estimates(groups, estimates, settings, metrics)


def stats_of_estimates(groups: list[Group], estimates: dict[str, dict], settings: Settings, metrics) -> GroupStats:
    """The statistics of groups whose runs' `run_estimates` are at hand (run name -> estimates)."""
    metrics = check_metrics(metrics)
    _one_data_split(groups)  # different data: say which, before checking the examples one by one
    n_examples = same_examples(groups, settings)
    summary = summary_table(groups, estimates, metrics, settings)
    pairs = pairwise_table(groups, estimates, metrics, settings, n_examples)
    return GroupStats(settings, metrics, summary, pairs, n_examples)


# ---------------------------------------------------------------- tables for people


def _interval_cell(mean: float, low: float, high: float) -> str:
    if np.isnan(low):
        return f"{mean:.4f}"
    return f"{mean:.4f} [{low:.4f}, {high:.4f}]"


def seeds_cell(seeds: list[int]) -> str:
    """A unit's seeds in a table: "0,1,2"; one run says so, "one run: seed 0", rather than a bare "0"
    that reads as a count of seeds."""
    return f"one run: seed {seeds[0]}" if len(seeds) == 1 else ",".join(map(str, seeds))


def wide_summary(result: GroupStats) -> pd.DataFrame:
    """Unit × metric, each cell "mean [low, high]"; rows in the order of the units."""
    table = result.summary
    cells = table.assign(
        cell=[_interval_cell(m, lo, hi) for m, lo, hi in zip(table["mean"], table["low"], table["high"])]
    )
    wide = cells.pivot(index="unit", columns="metric", values="cell").reindex(table["unit"].unique())
    seeds = table.drop_duplicates("unit").set_index("unit")["seeds"]
    wide.insert(0, "seeds", [seeds_cell(text.split(",")) for text in seeds])
    return wide[["seeds", *result.metrics]].reset_index()


def _pair_grid(result: GroupStats, joiner: str, cells: list[str]) -> pd.DataFrame:
    """Pair × metric: one cell per row of the pairs table, the pair named "A<joiner>B"."""
    pairs = result.pairs
    table = pairs.assign(pair=pairs["a"] + joiner + pairs["b"], cell=cells)
    wide = table.pivot(index="pair", columns="metric", values="cell").reindex(table["pair"].unique())
    return wide[list(result.metrics)].reset_index()


def wide_pairs(result: GroupStats) -> pd.DataFrame:
    """Pair × metric, each cell the difference A − B, starred where significant after Holm."""
    pairs = result.pairs
    cells = [f"{d:+.4f}{' *' if s else ''}" for d, s in zip(pairs["difference"], pairs["significant"])]
    return _pair_grid(result, " − ", cells)


def wide_improvement(result: GroupStats) -> pd.DataFrame:
    """Pair × metric, each cell P(A better than B) [low, high]; empty where a unit has one seed."""
    pairs = result.pairs
    cells = [
        "" if np.isnan(p) else f"{p:.2f} [{lo:.2f}, {hi:.2f}]"
        for p, lo, hi in zip(pairs["p_better"], pairs["p_better_low"], pairs["p_better_high"])
    ]
    return _pair_grid(result, " vs ", cells)


def method_sentence(result: GroupStats) -> str:
    """How the numbers were made, in one paragraph."""
    s = result.settings
    where = "test split (best validation epoch)" if s.which == "test" else f"validation, epoch {s.which}"
    groups = (
        "two-level bootstrap: seeds and test examples resampled together"
        if s.group_interval == "bootstrap"
        else "t-interval over seeds (test-set noise left out)"
    )
    return (
        f"Predictions: {where}. Intervals: {s.level:.0%}, from {s.n_resamples} resamples (seed {s.seed}); "
        f"one run: percentile bootstrap over the examples; several seeds: {groups}. "
        f"Binned estimators: {s.n_bins} equal-{'width' if s.scheme == 'width' else 'mass'} bins"
        + (" (paper_ece: the paper's own 10 equal-width bins)." if "paper_ece" in result.metrics else ".")
    )


def _verdict(row) -> str:
    """One significant difference as a sentence: which unit is higher, by how much, how sure."""
    heading = estimators.ESTIMATORS[row.metric].heading
    sign = 1.0 if row.difference > 0 else -1.0
    larger, smaller = (row.a, row.b) if sign > 0 else (row.b, row.a)
    low, high = sorted([sign * row.low, sign * row.high])  # the interval of larger − smaller
    sentence = (
        f"{heading}: {larger} is higher than {smaller} by {abs(row.difference):.4f} "
        f"[{low:.4f}, {high:.4f}]; Holm p = {row.p_holm:.3g}"
    )
    if not np.isnan(row.p_better):
        sentence += f"; P({row.a} better) = {row.p_better:.2f} [{row.p_better_low:.2f}, {row.p_better_high:.2f}]"
    return sentence + "."


def plain_words(result: GroupStats) -> list[str]:
    """Which differences are real, as sentences: what they rest on, each significant difference after
    Holm, and the metrics with none."""
    seeds = result.summary.drop_duplicates("unit").set_index("unit")["n"]
    rest_on = ", ".join(f"{unit} {n} seed{'s' if n > 1 else ''}" for unit, n in seeds.items())
    lines = [f"These rest on {result.n_examples} test documents shared by every run, and on {rest_on}."]
    pairs = result.pairs
    for metric in result.metrics:
        real = pairs[(pairs["metric"] == metric) & pairs["significant"]]
        heading = estimators.ESTIMATORS[metric].heading
        if real.empty:
            count = int((pairs["metric"] == metric).sum())
            lines.append(f"{heading}: no difference is larger than chance ({count} pair{'' if count == 1 else 's'}).")
        lines += [_verdict(row) for row in real.itertuples()]
    return lines


def markdown(result: GroupStats) -> str:
    """The statistics as two markdown tables, a sentence on how they were made, and in plain words."""
    lines = [method_sentence(result), "", format_table(wide_summary(result).to_dict("records"))]
    if note := below_zero_note(result.summary):  # a debiased ECE below 0 is explained where it is shown
        lines += ["", note]
    if not result.pairs.empty:
        legend = (
            "Differences A − B; * = significant at 5% after Holm's correction over the pairs, per metric; "
            "P(A better) = the chance a run of A beats a run of B (groups of two seeds or more)."
        )
        lines += ["", legend, "", format_table(wide_pairs(result).to_dict("records"))]
        if result.pairs["p_better"].notna().any():
            lines += [
                "",
                "P(A better than B) [interval]:",
                "",
                format_table(wide_improvement(result).to_dict("records")),
            ]
        lines += ["", "In plain words:", "", *[f"- {line}" for line in plain_words(result)]]
    return "\n".join(lines)


# ---------------------------------------------------------------- the groups table of `runs` and Home

GROUP_ROW_METRICS = {"accuracy": "test accuracy", "ece": "test ECE"}  # metric -> its column, as `report` gives it


def group_row(group: Group, settings: Settings = Settings()) -> dict:
    """One row of the groups table (`runs`, Home): the group's seeds, then its test accuracy and ECE as
    `report` gives them with `settings` (its defaults: report's), "mean [95% interval]" over the runs that
    have test predictions ("complete" counts them), from the same cached estimates; "not yet" before any."""
    first = group.runs[0].config
    finished = [run for run in group.runs if has_predictions(run, "test")]
    row = {
        "group": group.key,
        "method": group.label,
        "dataset": dataset_label(first.dataset),
        "model": first.model,
        "seeds": seeds_cell(group.seeds),
        "complete": len(finished),
    }
    if group.repeats:  # runs at a seed the group already has (`group_runs`): named, never counted
        row["repeats not counted"] = ", ".join(run.name for run in group.repeats)
    if not finished:
        return row | dict.fromkeys(GROUP_ROW_METRICS.values(), NOT_YET)
    metrics = tuple(GROUP_ROW_METRICS)
    estimates = {run.name: run_estimates(run, settings, metrics) for run in finished}
    summary = summary_table([Group(group.key, finished)], estimates, metrics, settings)
    return row | {GROUP_ROW_METRICS[r.metric]: _interval_cell(r.mean, r.low, r.high) for r in summary.itertuples()}


# ---------------------------------------------------------------- choosing the groups


_split_of = data_split  # what decides the examples a run was judged on: its dataset, data seed and limit


def _one_data_split(groups: list[Group]) -> None:
    """Every unit must be judged on the same examples: same dataset, data seed and limit."""
    splits = {_split_of(run) for g in groups for run in g.runs}
    if len(splits) > 1:
        listed = "; ".join(_split_text(split) for split in sorted(splits, key=str))
        raise ConfigError(f"these runs were evaluated on different data, so they cannot be compared: {listed}")


def runs_on(runs: list[Run], dataset: str) -> list[Run]:
    """The readable runs trained on `dataset` (its name or path as the run records it, or as tables show it):
    `report --dataset`, one dataset of a comparison over several. One line naming the store's datasets if none is."""
    if not isinstance(dataset, str) or not dataset.strip():
        raise ConfigError(f"--dataset takes a dataset's name or path, not {shown(dataset)}")
    readable = [run for run in runs if run.config is not None]
    chosen = [run for run in readable if dataset in (run.config.dataset, dataset_label(run.config.dataset))]
    if not chosen:
        known = ", ".join(sorted({dataset_label(run.config.dataset) for run in readable})) or "none"
        raise ConfigError(f"no run in the store is on dataset {shown(dataset)}; its datasets: {known}")
    return chosen


def select_units(runs: list[Run], names: list[str] | None = None) -> list[Group]:
    """The units `report` compares. Each name is a group key, a run folder name (a unit of its own)
    or a method label (its groups); a unit named twice counts once. No names: every group of the store's
    most common data split."""
    groups = group_runs(runs)
    if not names:
        if not groups:
            return []
        common = pd.Series([_split_of(g.runs[0]) for g in groups]).value_counts().index[0]
        chosen = [g for g in groups if _split_of(g.runs[0]) == common]
    else:
        named = [unit for name in names for unit in _units_named(name, groups)]
        chosen = list({unit.key: unit for unit in named}.values())
    _one_data_split(chosen)
    return chosen


def _units_named(name: str, groups: list[Group]) -> list[Group]:
    by_key = [g for g in groups if g.key == name]
    by_run = [Group(run.name, [run]) for g in groups for run in [*g.runs, *g.repeats] if run.name == name]
    by_label = [g for g in groups if g.label == name]
    found = by_key or by_run or by_label
    if not found:
        raise ConfigError(f"no group, run or method named {shown(name)} with finished epochs in the store")
    return found


# ---------------------------------------------------------------- what a comparison rests on, and what it leaves out


@dataclass(frozen=True)
class Selection:
    """The units a comparison judges, each with only the runs it can judge, and one line per reason it left
    runs out, naming them: nothing is left out in silence."""

    units: list[Group]
    left_out: list[str]


def choose(
    runs: list[Run], names: list[str] | None = None, dataset: str | None = None, which: int | str = "test"
) -> Selection:
    """What `report` compares (`select_units` of the runs on `dataset`), judged at `which`, with a line for
    every run it leaves out: unreadable, without a finished epoch, a repeat of a seed, evaluated on other data
    (no names given), or without predictions at `which` yet (`analysis.calibration.judgeable`). An epoch no
    chosen run has finished is refused."""
    unreadable = [run for run in runs if run.config is None]  # on no dataset anyone can tell: named whatever asked
    if dataset is not None:
        runs = runs_on(runs, dataset)
    lines = unusable_lines(unreadable + [run for run in runs if run.config is not None])
    units = select_units(runs, names)
    if not units:
        raise ConfigError("nothing to compare: no runs or groups with finished epochs")
    lines += [] if names else _other_split_lines(runs, units)
    lines += _repeat_lines(units)
    check_epoch(units, which)
    judging = judgeable(units, which)
    if not judging.units:
        raise RunError(judging.nothing_left())
    return Selection(judging.units, lines + judging.left_out())


def check_epoch(units: list[Group], which: int | str) -> None:
    """An epoch (`report --epoch`) must be one the chosen runs finished: 1 up to the most any of them did."""
    if isinstance(which, str):
        return
    last = max(max(finished_epochs(run), default=0) for unit in units for run in unit.runs)
    if not 1 <= which <= last:
        raise ConfigError(f"epoch {which} is not one the chosen runs finished: they have epochs 1 to {last}")


def _other_split_lines(runs: list[Run], chosen: list[Group]) -> list[str]:
    """The groups on other data than the chosen ones, one line per data split, named as `runs` lists them."""
    keys = {unit.key for unit in chosen}
    others: dict[tuple, list[str]] = {}
    for group in group_runs(runs):
        if group.key not in keys:
            others.setdefault(_split_of(group.runs[0]), []).append(group.name)
    how = "compare them with `report --dataset` or by name"
    return [
        f"Left out, evaluated on other data, {_split_text(split)}: {'; '.join(names)} ({how})."
        for split, names in others.items()
    ]


def _repeat_lines(units: list[Group]) -> list[str]:
    """Runs at a seed their group already has (`group_runs`): named, never counted."""
    repeats = [f"{run.name} (seed {run.seed} of {unit.name})" for unit in units for run in unit.repeats]
    return [f"Not counted, a repeat of a seed its group has: {', '.join(repeats)}."] if repeats else []
