"""Calibration under shift: per unit (a method at N seeds) and shift, each metric with its seed interval; the
spread over corruption families; the differences between methods; conformal coverage. What `report --shift`
prints and the "Under shift" page draws.

A run on a shift is a `ShiftedRun`: the run with its test predictions replaced by those on the shifted
documents (its best epoch's validation stays the clean one, which temperature scaling and the conformal
threshold are fitted on, as a user would). Every estimator, interval and paired test of
`analysis.group_stats` then reads it as any run:

* per unit, shift and metric: the mean over seeds with the two-level bootstrap interval over seeds and
  documents (`stats.two_level_interval`);
* per unit and severity, the mean over the corruption families ("all families"), with the two-level interval
  of that mean: every family's set holds the same documents and every run's draws resample the same rows, so
  the families' mean of the draws is the bootstrap of the mean (`family_means`);
* families' spread per severity (Ovadia et al.'s box plots): the lowest, median and highest family mean;
* between methods, at each severity's mean over the families and at each domain shift: A − B with its
  interval and p-value (`stats.two_level_difference`: seeds paired, documents paired), Holm's correction over
  every pair *and every such set*, per metric;
* conformal coverage of 1 − α sets calibrated on the clean validation (`analysis.conformal`).

Uncertainty methods that need no model run (temperature, ensembles: `needs_params` False) are applied to
the shifted predictions as to the clean ones; the others would rerun the model on every shift and are named
as left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from itertools import combinations

import numpy as np
import pandas as pd

from peftviz.analysis import conformal, group_stats
from peftviz.analysis.shift import DOMAIN
from peftviz.analysis.shift.engines import evaluate_runs
from peftviz.analysis.shift.evaluate import Shifted
from peftviz.analysis.shift.shifts import Shift, shifted_texts
from peftviz.calibration import stats
from peftviz.errors import RunError
from peftviz.store import schema
from peftviz.store.runs import Group, Run

METRICS = ("accuracy", "ece", "nll", "aurc")  # what the page draws against severity (Ovadia et al.'s measures)
COLUMNS = ("method", "uncertainty", "shift", "family", "severity", "n", "seeds", "metric", "mean", "low", "high")
PAIR_COLUMNS = ("shift", "family", "severity", "a", "b", "metric", "difference", "low", "high", "p", "p_holm")
COVERAGE_COLUMNS = ("method", "shift", "family", "severity", "alpha", "coverage", "low", "high", "set_size")
PLAIN = "plain"
ALL = "all families"  # the family of a severity's mean over the corruption families


@dataclass
class ShiftedRun(Run):
    """A run judged on a shift: its "test" predictions are the shifted ones (see the module docstring)."""

    shifted: Shifted | None = field(default=None, repr=False)

    @classmethod
    def of(cls, shifted: Shifted) -> ShiftedRun:
        return cls(**{f.name: getattr(shifted.run, f.name) for f in fields(Run)}, shifted=shifted)

    @property
    def name(self) -> str:
        return f"{self.path.name} · {self.shifted.shift.name}"

    @property
    def has_params(self) -> bool:
        return False  # its predictions are made; what would run the model again runs the clean run

    def predictions(self, which: int | str) -> tuple[np.ndarray, np.ndarray]:
        if schema.evaluation_name(which) == "test":
            return self.shifted.probs, self.shifted.labels
        return Run.predictions(self, which)


def shifted_group(group: Group, shift: Shift, found: dict[str, list[Shifted]], shifts: Sequence[Shift]) -> Group:
    index = list(shifts).index(shift)
    return Group(f"{group.key}@{shift.name}", [ShiftedRun.of(found[run.name][index]) for run in group.runs])


@dataclass(frozen=True)
class ShiftResult:
    settings: group_stats.Settings
    metrics: tuple[str, ...]
    shifts: tuple[Shift, ...]
    table: pd.DataFrame  # COLUMNS: per unit, uncertainty method, shift and metric
    pairs: pd.DataFrame  # PAIR_COLUMNS: between the plain units (see `_pairs`), Holm over all of them, per metric
    coverage: pd.DataFrame  # COVERAGE_COLUMNS
    left_out: list[str]
    seconds_per_1000: dict[str, float]  # shift name -> the mean measured seconds per 1,000 documents of its pass


def _usable(groups: list[Group], shifts: Sequence[Shift]) -> tuple[list[Group], list[str]]:
    """The groups with a model to run where a shifted set needs one; a line per run left out."""
    if all(shift.is_clean for shift in shifts):
        return groups, []
    kept, lines = [], []
    for group in groups:
        runs = [run for run in group.runs if run.has_params]
        if len(runs) < len(group.runs):
            names = ", ".join(run.name for run in group.runs if not run.has_params)
            lines.append(f"{group.label} leaves out {names}: no parameters to run on shifted text (recorded runs)")
        if runs:
            kept.append(Group(group.key, runs, group.repeats))
    return kept, lines


@dataclass(frozen=True)
class Judged:
    """One unit (a method at its seeds, plain or under an uncertainty method) on one shift, with its runs'
    estimates (run name -> metric -> `estimators.Estimate`)."""

    method: str
    uncertainty: str
    shift: Shift
    unit: Group
    estimates: dict

    def draws(self, metric: str) -> stats.SeedDraws:
        return group_stats.seed_draws(self.unit, metric, self.estimates)


def judged(method: str, uncertainty: str, shift: Shift, unit: Group, settings, metrics) -> Judged:
    estimates = {run.name: group_stats.run_estimates(run, settings, metrics) for run in unit.runs}
    return Judged(method, uncertainty, shift, unit, estimates)


def _row(item: Judged, shift_name: str, family: str, draws: stats.SeedDraws, metric: str, settings) -> dict:
    mean, low, high = stats.two_level_interval(draws, settings.level, settings.seed)
    return {
        "method": item.method,
        "uncertainty": item.uncertainty,
        "shift": shift_name,
        "family": family,
        "severity": item.shift.severity,
        "n": len(item.unit.runs),
        "seeds": ",".join(map(str, item.unit.seeds)),
        "metric": metric,
        "mean": mean,
        "low": low,
        "high": high,
    }


def _family(shift: Shift) -> str:
    return "clean" if shift.is_clean else shift.family


def family_means(items: list[Judged], metric: str) -> dict[tuple, tuple[Judged, stats.SeedDraws]]:
    """(method, uncertainty, severity) -> (one of its units, the mean over the corruption families of its seeds'
    values and draws). Every family's set holds the same documents, and every run's draws resample the same rows,
    so the mean of the draws is the bootstrap of the families' mean: its two-level interval is the mean's."""
    by_key: dict[tuple, list[Judged]] = {}
    for item in items:
        if not item.shift.is_clean and item.shift.family != DOMAIN:
            by_key.setdefault((item.method, item.uncertainty, item.shift.severity), []).append(item)
    found = {}
    for key, members in by_key.items():
        draws = [member.draws(metric) for member in members]
        mean = stats.SeedDraws(
            draws[0].seeds, np.mean([d.values for d in draws], axis=0), np.mean([d.draws for d in draws], axis=0)
        )
        found[key] = (members[0], mean)
    return found


def _rows(items: list[Judged], metrics, settings) -> list[dict]:
    rows = [
        _row(item, item.shift.name, _family(item.shift), item.draws(metric), metric, settings)
        for item in items
        for metric in metrics
    ]
    for metric in metrics:
        for (_, _, severity), (item, draws) in family_means(items, metric).items():
            rows.append(_row(item, f"{ALL} {severity}", ALL, draws, metric, settings))
    return rows


def _uncertain_units(unit: Group, requests, progress) -> tuple[list[tuple[str, Group]], list[str]]:
    from peftviz.analysis.uncertainty import registry
    from peftviz.analysis.uncertainty.derived import unit_of

    found, lines = [], []
    for request in requests:
        method = registry.method(request.name)
        if method.needs_params:
            lines.append(f"{request.described} is not evaluated under shift: it would run the model on every set")
            continue
        members = method.members(unit, request.options, progress)
        if members:
            found.append((request.described, unit_of(unit, members, request.described)))
    return found, lines


def _pairs(items: list[Judged], metrics, settings, n_examples: dict[str, int]) -> pd.DataFrame:
    """A − B between the plain units at each severity's mean over the families and at each domain shift;
    Holm over all of them, per metric."""
    plain = [item for item in items if item.uncertainty == PLAIN]
    rows = []
    for metric in metrics:
        sets: dict[tuple, list[tuple[Judged, stats.SeedDraws]]] = {}
        for (_, _, severity), (item, draws) in family_means(plain, metric).items():
            sets.setdefault((f"{ALL} {severity}", ALL, severity), []).append((item, draws))
        for item in plain:
            if item.shift.family == DOMAIN:
                sets.setdefault((item.shift.name, DOMAIN, None), []).append((item, item.draws(metric)))
        for (shift_name, family, severity), members in sets.items():
            for (a, draws_a), (b, draws_b) in combinations(members, 2):
                n = n_examples[a.shift.name]
                diff = stats.two_level_difference(draws_a, draws_b, settings.level, settings.seed, n)
                rows.append(
                    {"shift": shift_name, "family": family, "severity": severity, "a": a.method, "b": b.method}
                    | {"metric": metric, "difference": diff.estimate, "low": diff.low, "high": diff.high}
                    | {"p": diff.p_value}
                )
    pairs = pd.DataFrame(rows, columns=[c for c in PAIR_COLUMNS if c != "p_holm"])
    pairs["p_holm"] = np.nan
    for index in pairs.groupby("metric").groups.values():  # Holm over every pair at every shifted set
        pairs.loc[index, "p_holm"] = stats.holm(pairs.loc[index, "p"].to_numpy())
    pairs["significant"] = pairs["p_holm"] < 1.0 - settings.level
    return pairs[[*PAIR_COLUMNS, "significant"]]


def _coverage(name: str, unit: Group, shift: Shift, alpha: float, settings) -> dict:
    row = conformal.conformal_summary(unit, alpha, n_resamples=settings.n_resamples, seed=settings.seed).iloc[0]
    return {
        "method": name,
        "shift": shift.name,
        "family": shift.family if not shift.is_clean else "clean",
        "severity": shift.severity,
        "alpha": alpha,
        "coverage": row.coverage,
        "low": row.coverage_low,
        "high": row.coverage_high,
        "set_size": row.set_size,
    }


def shift_table(
    groups: list[Group],
    shifts: Sequence[Shift],
    settings: group_stats.Settings,
    metrics=METRICS,
    requests=(),
    alpha: float = 0.1,
    engine: str = "local",
    progress: Callable[[str], None] | None = None,
) -> ShiftResult:
    """Every group on every shift (see the module docstring); the runs evaluated where not cached."""
    metrics = group_stats.check_metrics(metrics)
    if settings.which != "test":
        raise RunError("calibration under shift is judged on the test split (the best epoch's model)")
    groups, lines = _usable(groups, shifts)
    if not groups:
        raise RunError("no run to evaluate under shift: " + "; ".join(lines))
    for shift in shifts:  # another dataset's labels are checked before any model runs: one line for the request
        if shift.family == DOMAIN:
            shifted_texts(groups[0].runs[0], shift)
    found, failed = evaluate_runs([run for group in groups for run in group.runs], shifts, engine, progress)
    lines += [f"run {name} left out: {why}" for name, why in failed.items()]
    groups = [Group(g.key, [r for r in g.runs if r.name in found], g.repeats) for g in groups]
    groups = [group for group in groups if group.runs]
    if not groups:
        raise RunError("no run could be evaluated under shift: " + "; ".join(lines))
    names = group_stats.unique_names(groups)
    items, coverage = [], []
    for shift in shifts:
        for group in groups:
            unit = shifted_group(group, shift, found, shifts)
            items.append(judged(names[group.key], PLAIN, shift, unit, settings, metrics))
            coverage.append(_coverage(names[group.key], unit, shift, alpha, settings))
            extra, missing = _uncertain_units(unit, requests, progress)
            lines += [line for line in missing if line not in lines]
            items += [judged(names[group.key], how, shift, more, settings, metrics) for how, more in extra]
    n_examples = {shift.name: len(found[groups[0].runs[0].name][i].labels) for i, shift in enumerate(shifts)}
    seconds = {
        shift.name: float(np.nanmean([item[i].seconds_per_1000 for item in found.values()]))
        for i, shift in enumerate(shifts)
        if not shift.is_clean
    }
    return ShiftResult(
        settings,
        metrics,
        tuple(shifts),
        pd.DataFrame(_rows(items, metrics, settings), columns=list(COLUMNS)),
        _pairs(items, metrics, settings, n_examples),
        pd.DataFrame(coverage, columns=list(COVERAGE_COLUMNS)),
        lines,
        seconds,
    )


# ---------------------------------------------------------------- the families' spread


def family_spread(table: pd.DataFrame) -> pd.DataFrame:
    """Per method, uncertainty method, severity and metric, over the corruption families: the mean of the
    families' means, and the lowest, median and highest of them (severity 0, one clean set, is its own)."""
    corrupted = table[~table["family"].isin([DOMAIN, ALL])]
    keys = ["method", "uncertainty", "severity", "metric"]
    spread = corrupted.groupby(keys, sort=False)["mean"].agg(
        families="count", mean="mean", lowest="min", median="median", highest="max"
    )
    return spread.reset_index()


# ---------------------------------------------------------------- tables for people


def _spread_cell(row, interval: tuple[float, float] | None = None) -> str:
    cell = f"{row.mean:.3f}" if interval is None else f"{row.mean:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]"
    return cell if row.families <= 1 else f"{cell}, families {row.lowest:.3f}–{row.highest:.3f}"


def wide_table(result: ShiftResult) -> pd.DataFrame:
    """One row per method, uncertainty method and severity (then each domain shift): each metric's mean over the
    corruption families with its interval and the families' range, "mean [low, high], families lowest–highest",
    and the 1 − α coverage's mean and range."""
    from peftviz.calibration import estimators

    table = result.table
    intervals = {
        (row.method, row.uncertainty, row.severity, row.metric): (row.low, row.high)
        for row in table[table["family"].isin([ALL, "clean"])].itertuples()
    }
    spread = family_spread(table)
    coverage = family_spread(
        result.coverage.assign(uncertainty=PLAIN, metric="coverage").rename(columns={"coverage": "mean"})
    )
    seeds = {(row.method, row.uncertainty): row.seeds for row in table.itertuples()}
    alpha = result.coverage["alpha"].iloc[0] if len(result.coverage) else 0.1
    records = {}

    def record(method: str, uncertainty: str, severity) -> dict:
        first = {"method": method, "uncertainty": uncertainty, "seeds": seeds[(method, uncertainty)]}
        return records.setdefault((method, uncertainty, severity), first | {"severity": severity})

    for row in spread.itertuples():
        interval = intervals.get((row.method, row.uncertainty, row.severity, row.metric))
        heading = estimators.ESTIMATORS[row.metric].heading
        record(row.method, row.uncertainty, row.severity)[heading] = _spread_cell(row, interval)
    for row in coverage.itertuples():
        record(row.method, row.uncertainty, row.severity)[f"{1 - alpha:.0%} coverage"] = _spread_cell(row)
    for row in table[table["family"] == DOMAIN].itertuples():
        cell = f"{row.mean:.3f} [{row.low:.3f}, {row.high:.3f}]"
        record(row.method, row.uncertainty, row.shift)[estimators.ESTIMATORS[row.metric].heading] = cell
    methods = list(dict.fromkeys(table["method"]))
    uncertainties = list(dict.fromkeys(table["uncertainty"]))

    def order(key: tuple) -> tuple:
        method, uncertainty, severity = key
        return methods.index(method), uncertainties.index(uncertainty), isinstance(severity, str), str(severity)

    wide = pd.DataFrame([records[key] for key in sorted(records, key=order)])
    if set(wide["uncertainty"]) == {PLAIN}:
        wide = wide.drop(columns="uncertainty")
    return wide.fillna("")


def significant_lines(result: ShiftResult) -> list[str]:
    """A line per difference between methods significant after Holm's correction (see `_pairs`)."""
    found = result.pairs[result.pairs["significant"].astype(bool)]
    lines = [
        f"{row.shift}: {row.a} − {row.b}, {row.metric} {row.difference:+.4f} [{row.low:+.4f}, {row.high:+.4f}], "
        f"p (Holm) {row.p_holm:.3g}"
        for row in found.itertuples()
    ]
    tested = len(result.pairs)
    head = (
        f"{len(lines)} of {tested} differences between methods significant at 5% after Holm's correction (every "
        "pair at each severity's mean over the families and at each domain shift, per metric)"
    )
    per_metric = int(result.pairs.groupby("metric").size().max()) if tested else 0
    floor = per_metric / (result.settings.n_resamples + 1)  # Holm's smallest adjusted p: m · 1 / (R + 1)
    resolution = (
        f"With {result.settings.n_resamples} resamples a p-value is at least 1/{result.settings.n_resamples + 1}, so "
        f"Holm over {per_metric} tests per metric cannot go below {min(floor, 1):.3g}"
        + (f": more than {20 * per_metric} resamples let a difference reach 5%." if floor >= 0.05 else ".")
    )
    return [head + (":" if lines else "."), *lines, *([resolution] if tested else [])]


def method_sentence(result: ShiftResult) -> str:
    s = result.settings
    return (
        "Each model at its best validation epoch, on its test split corrupted at each severity by each family "
        "(severity 0: the test split itself). Cell: the mean over the corruption families of the mean over seeds, "
        f"its {s.level:.0%} two-level bootstrap interval over seeds and documents ({s.n_resamples} resamples, seed "
        f"{s.seed}), and the lowest and highest family's mean; each family's own interval is in the CSV. "
        "Coverage: split-conformal sets calibrated on the clean validation split."
    )


def markdown(result: ShiftResult) -> str:
    from peftviz.tables import format_table

    lines = [method_sentence(result), "", format_table(wide_table(result).to_dict("records")), ""]
    lines += significant_lines(result)
    measured = [value for value in result.seconds_per_1000.values() if np.isfinite(value)]
    if measured:
        lines.append(
            f"Cost on this machine: a model's pass over a shifted set, {np.mean(measured):.2f} s per 1,000 documents "
            f"(the mean over the runs and the {len(measured)} shifted sets; cached: a second report runs nothing)."
        )
    if result.left_out:
        lines += ["", *[f"Left out: {line}." for line in result.left_out]]
    return "\n".join(lines)
