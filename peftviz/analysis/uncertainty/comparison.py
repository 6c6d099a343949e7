"""What fixes it: each method before and after each uncertainty method, with intervals, paired
differences and costs. What `report --uncertainty` prints and the "What fixes it" page shows.

For every group (a method at N seeds) and every requested uncertainty method, the method's members
(`base.Member`) form a unit (`derived.unit_of`) that `analysis.group_stats` summarises exactly as it
does a group: per metric, the mean over the unit's members with the two-level bootstrap interval over
members and test documents. Against the plain method, the difference (after − before) with its
interval and p-value (`stats.two_level_difference`): members paired with the plain runs of the same
seeds (temperature, MC dropout, Laplace, an ensemble of one), independent otherwise (ensembles of
k > 1), test documents always paired. Holm's correction runs over every (method, uncertainty method)
row, per metric. The plain method's row compares with nothing.

The runs an uncertainty method cannot use are named, never dropped in silence: a run without parameters
where a model must run (recorded runs), a group too small for the ensemble, the seeds an ensemble leaves
over.

Cost columns (the mean over the unit's members): encoder forward passes per document, extra parameters,
and measured seconds per 1,000 test documents on this machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from peftviz.analysis import group_stats
from peftviz.analysis.uncertainty import METRICS, registry
from peftviz.analysis.uncertainty.base import Member
from peftviz.analysis.uncertainty.derived import unit_of
from peftviz.analysis.uncertainty.ensemble import EnsembleOptions, left_over
from peftviz.analysis.uncertainty.model_runs import stored_member
from peftviz.calibration import estimators, stats
from peftviz.errors import RunError
from peftviz.options import Options
from peftviz.store.runs import Group
from peftviz.tables import format_table

PLAIN = "plain"
COLUMNS = (
    "method",
    "uncertainty",
    "n",
    "seeds",
    "metric",
    "mean",
    "low",
    "high",
    "difference",
    "difference_low",
    "difference_high",
    "p",
    "p_holm",
    "significant",
    "passes",
    "extra_parameters",
    "seconds_per_1000",
)


@dataclass(frozen=True)
class Request:
    """One uncertainty method at its options."""

    name: str
    options: Options

    @property
    def described(self) -> str:
        return registry.method(self.name).describe(self.options)


def equal_budget(names, passes: int, average: str = "probabilities", laplace: dict | None = None) -> list[Request]:
    """The methods `names` at one budget of `passes` forward passes: an ensemble of `passes` seeds, MC dropout
    at T = `passes`, Laplace with `passes` samples where its predictive samples; temperature has one pass."""
    options = {
        "temperature": {},
        "ensemble": {"size": passes, "average": average},
        "mc-dropout": {"passes": passes},
        "laplace": dict(laplace or {}),
    }
    if options["laplace"].get("predictive") == "mc":  # the probit predictive draws nothing: its key stays one
        options["laplace"]["samples"] = passes
    return [Request(name, registry.method(name).options_class(**options[name])) for name in names]


@dataclass(frozen=True)
class UncertaintyResult:
    settings: group_stats.Settings
    metrics: tuple[str, ...]
    table: pd.DataFrame  # COLUMNS, one row per method, uncertainty method and metric
    left_out: list[str]  # one line per run or group an uncertainty method could not use, and why
    n_examples: int


def _members(group: Group, request: Request, progress) -> tuple[list[Member], list[str]]:
    """The request's members of `group`, and a line for each run it leaves out."""
    method = registry.method(request.name)
    runs, lines = group.runs, []
    if method.needs_params:
        without = [run.name for run in runs if not run.has_params]
        runs = [run for run in runs if run.has_params]
        if without:
            lines.append(f"{request.described} leaves out {', '.join(without)}: no parameters to run (recorded runs)")
    if not runs:
        return [], lines
    members = method.members(Group(group.key, runs, group.repeats), request.options, progress)
    if request.name == "ensemble" and (unused := left_over(Group(group.key, runs), request.options.size)):
        names = ", ".join(f"seed {run.seed}" for run in unused)
        lines.append(f"{request.described} of {group.name} leaves out {names}: ensembles are disjoint")
    return members, lines


def _cost_columns(members: list[Member]) -> dict:
    return {
        "passes": float(np.mean([m.cost.passes for m in members])),
        "extra_parameters": float(np.mean([m.cost.extra_parameters for m in members])),
        "seconds_per_1000": float(np.mean([m.cost.seconds_per_1000 for m in members])),
    }


def _unit_rows(name: str, unit: Group, plain: Group | None, uncertainty: str, members, settings, metrics) -> list[dict]:
    """One row per metric: the unit's mean and interval, its difference to `plain`, and its cost."""
    estimates = {run.name: group_stats.run_estimates(run, settings, metrics) for run in [*unit.runs]}
    if plain is not None:
        estimates |= {run.name: group_stats.run_estimates(run, settings, metrics) for run in plain.runs}
    n_examples = len(unit.runs[0].predictions("test")[1])
    rows = []
    for metric in metrics:
        draws = group_stats.seed_draws(unit, metric, estimates)
        mean, low, high = stats.two_level_interval(draws, settings.level, settings.seed)
        row = {
            "method": name,
            "uncertainty": uncertainty,
            "n": len(unit.runs),
            "seeds": ",".join(map(str, unit.seeds)),
            "metric": metric,
            "mean": mean,
            "low": low,
            "high": high,
        }
        row |= dict.fromkeys(("difference", "difference_low", "difference_high", "p"), np.nan)
        if plain is not None:
            before = group_stats.seed_draws(plain, metric, estimates)
            diff = stats.two_level_difference(draws, before, settings.level, settings.seed, n_examples)
            row |= {
                "difference": diff.estimate,
                "difference_low": diff.low,
                "difference_high": diff.high,
                "p": diff.p_value,
            }
        rows.append(row | _cost_columns(members))
    return rows


def _group_rows(
    name: str, group: Group, requests: list[Request], settings, metrics, progress
) -> tuple[list[dict], list[str]]:
    plain_members = [stored_member(run) for run in group.runs]
    rows = _unit_rows(name, group, None, PLAIN, plain_members, settings, metrics)
    lines = []
    for request in requests:
        try:
            members, left = _members(group, request, progress)
        except RunError as err:
            lines.append(f"{request.described} of {group.name} left out: {err}")
            continue
        lines += left
        if members:
            unit = unit_of(group, members, request.described)
            used = {run.name for member in members for run in member.runs}
            plain = Group(group.key, [run for run in group.runs if run.name in used])
            rows += _unit_rows(name, unit, plain, request.described, members, settings, metrics)
    return rows, lines


def compare_uncertainty(
    groups: list[Group],
    requests: list[Request],
    settings: group_stats.Settings,
    metrics=METRICS,
    progress: Callable[[str], None] | None = None,
) -> UncertaintyResult:
    """Every group as trained and under every requested uncertainty method (see the module)."""
    metrics = group_stats.check_metrics(metrics)
    if settings.which != "test":
        raise RunError("uncertainty methods are judged on the test split (their best epoch's model)")
    n_examples = group_stats.same_examples(groups, settings)
    rows, lines, names = [], [], group_stats.unique_names(groups)  # two units of one method keep their rows apart
    for group in groups:
        found, left = _group_rows(names[group.key], group, requests, settings, metrics, progress)
        rows += found
        lines += left
    table = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in ("p_holm", "significant")])
    table["p_holm"] = np.nan
    for index in table.groupby("metric").groups.values():
        tested = table.loc[index, "p"].notna()
        index = tested[tested].index
        if len(index):
            table.loc[index, "p_holm"] = stats.holm(table.loc[index, "p"].to_numpy())
    table["significant"] = table["p_holm"] < 1.0 - settings.level
    return UncertaintyResult(settings, metrics, table[list(COLUMNS)], lines, n_examples)


# ---------------------------------------------------------------- tables for people


def _cell(mean: float, low: float, high: float) -> str:
    return f"{mean:.4f}" if np.isnan(low) else f"{mean:.4f} [{low:.4f}, {high:.4f}]"


def _difference_cell(row) -> str:
    if np.isnan(row.difference):
        return ""
    star = " *" if row.significant else ""
    return f"{row.difference:+.4f} [{row.difference_low:+.4f}, {row.difference_high:+.4f}]{star}"


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _seconds(value: float) -> str:
    return "not measured" if np.isnan(value) else f"{value:.2f}"


def wide_table(result: UncertaintyResult) -> pd.DataFrame:
    """One row per method and uncertainty method: each metric "mean [low, high]", its difference to the
    plain method "Δ [low, high]" (* significant after Holm), then the cost columns."""
    records = []
    for (method, uncertainty), rows in result.table.groupby(["method", "uncertainty"], sort=False):
        first = rows.iloc[0]
        record = {"method": method, "uncertainty": uncertainty, "seeds": first.seeds}
        for row in rows.itertuples():
            heading = estimators.ESTIMATORS[row.metric].heading
            record[heading] = _cell(row.mean, row.low, row.high)
            record[f"Δ {heading}"] = _difference_cell(row)
        record |= {
            "passes": _count(first.passes),
            "extra parameters": _count(first.extra_parameters),
            "s / 1,000 docs": _seconds(first.seconds_per_1000),
        }
        records.append(record)
    return pd.DataFrame(records)


def method_sentence(result: UncertaintyResult) -> str:
    s = result.settings
    return (
        f"Test split ({result.n_examples} documents), each model at its best validation epoch. Each cell: the mean "
        f"over a unit's members (seeds; ensembles: disjoint ensembles) with its {s.level:.0%} two-level bootstrap "
        f"interval ({s.n_resamples} resamples, seed {s.seed}). Δ: after − before, the plain method's same seeds "
        "paired (ensembles of more than one: independent), * = significant at 5% after Holm's correction over "
        "the rows, per metric. Cost: encoder passes per document, parameters stored besides the method's own, "
        "and seconds per 1,000 test documents measured on this machine."
    )


def markdown(result: UncertaintyResult) -> str:
    lines = [method_sentence(result), "", format_table(wide_table(result).to_dict("records"))]
    if result.left_out:
        lines += ["", *[f"Left out: {line}." for line in result.left_out]]
    return "\n".join(lines)


# ---------------------------------------------------------------- ensemble size


def ensemble_curve(group: Group, settings, metric: str = "ece", average: str = "probabilities") -> pd.DataFrame:
    """The metric of ensembles of k = 1 … N of the group's seeds: columns k, ensembles, mean, low, high
    (the two-level interval over the disjoint ensembles of k and the test documents)."""
    rows = []
    for size in range(1, len(group.runs) + 1):
        options = EnsembleOptions(size=size, average=average)
        members = registry.method("ensemble").members(group, options)
        unit = unit_of(group, members, registry.method("ensemble").describe(options))
        estimates = {run.name: group_stats.run_estimates(run, settings, [metric]) for run in unit.runs}
        mean, low, high = stats.two_level_interval(
            group_stats.seed_draws(unit, metric, estimates), settings.level, settings.seed
        )
        rows.append(
            {"method": group.label, "k": size, "ensembles": len(members), "mean": mean, "low": low, "high": high}
        )
    return pd.DataFrame(rows, columns=["method", "k", "ensembles", "mean", "low", "high"])
