"""Conformal prediction sets of stored runs: coverage and mean set size, per run or group of seeds, with intervals.

The sets are `peftviz.calibration.conformal`'s (LAC or randomized APS, split conformal at a miscoverage α).
Which predictions calibrate and which are judged:

* at "test" (`conformal_summary`): q̂ is calibrated on the best epoch's validation predictions and the sets
  are judged on the test predictions, which that epoch's model made (the only epoch with test predictions);
* over epochs (`conformal_over_epochs`): no test predictions, so each epoch's validation predictions are
  split in two fixed halves (`halves`: one seeded permutation, the same for every epoch and run; no
  stratification): q̂ is calibrated on the first half and judged on the second.

A run's interval is the bootstrap of `conformal.conformal_sets`, resampling the calibration and the
evaluation examples together. A group's value is the mean over its seeds, and its interval the two-level
bootstrap (`stats.SeedDraws`, `stats.two_level_interval`): its runs share the split, so every run's draw r
is on the same calibration and evaluation rows. A group of one seed is a run: one code path serves both.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from peftviz.analysis.calibration import finished_epochs
from peftviz.analysis.group_stats import seeds_cell
from peftviz.calibration import conformal, stats
from peftviz.errors import RunError
from peftviz.store.runs import Group, Run

SPLIT_SEED = 0  # the halves of the validation predictions over epochs
MEASURES = ("coverage", "set_size")
SUMMARY_COLUMNS = (
    "run",
    "score",
    "alpha",
    "coverage",
    "coverage_low",
    "coverage_high",
    "set_size",
    "set_size_low",
    "set_size_high",
    "n_calibration",
    "n_evaluated",
    "n_seeds",
    "seeds",
)
EPOCH_COLUMNS = ("run", "epoch", *SUMMARY_COLUMNS[1:])


def as_group(unit: Run | Group) -> Group:
    return unit if isinstance(unit, Group) else Group(unit.name, [unit])


def halves(n_examples: int, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """The calibration and evaluation halves of n validation examples: a seeded permutation cut in two
    (the first ⌊n/2⌋ calibrate)."""
    order = np.random.default_rng([seed, 5]).permutation(n_examples)
    return np.sort(order[: n_examples // 2]), np.sort(order[n_examples // 2 :])


def _at_test(run: Run, alpha: float, score: str, n_resamples: int, seed: int) -> conformal.ConformalSets:
    if run.best_epoch is None:
        raise RunError(f"run {run.name} has no finished epochs")
    cal_probs, cal_labels = run.predictions(run.best_epoch)
    return conformal.conformal_sets(cal_probs, cal_labels, *run.predictions("test"), alpha, score, n_resamples, seed)


def _at_epoch(run: Run, epoch: int, alpha: float, score: str, n_resamples: int, seed: int) -> conformal.ConformalSets:
    probs, labels = run.predictions(epoch)
    calibrate, judge = halves(len(labels))
    return conformal.conformal_sets(
        probs[calibrate], labels[calibrate], probs[judge], labels[judge], alpha, score, n_resamples, seed
    )


def _row(group: Group, found: list[conformal.ConformalSets], level: float, seed: int, name: str) -> dict:
    """One table row: each measure's mean over the seeds and its two-level interval."""
    row = {"run": name or group.label, "score": found[0].score, "alpha": found[0].alpha}
    for measure in MEASURES:
        draws = np.stack([getattr(sets, f"{measure}_draws") for sets in found])  # (S, R)
        unit = stats.SeedDraws(tuple(group.seeds), np.array([getattr(sets, measure) for sets in found]), draws)
        row[measure], row[f"{measure}_low"], row[f"{measure}_high"] = stats.two_level_interval(unit, level, seed)
    row.update(
        n_calibration=found[0].n_calibration,
        n_evaluated=len(found[0].covered),
        n_seeds=len(found),
        seeds=",".join(map(str, group.seeds)),
    )
    return row


def conformal_summary(
    unit: Run | Group,
    alpha: float = 0.1,
    score: str = "lac",
    n_resamples: int = 1000,
    level: float = stats.LEVEL,
    seed: int = 0,
    name: str = "",
) -> pd.DataFrame:
    """One row (columns SUMMARY_COLUMNS): test coverage and mean set size of `unit`, calibrated on its best
    epoch's validation predictions, each with its `level` interval (a group: mean over seeds, two-level)."""
    group = as_group(unit)
    found = [_at_test(run, alpha, score, n_resamples, seed) for run in group.runs]
    return pd.DataFrame([_row(group, found, level, seed, name)], columns=SUMMARY_COLUMNS)


def conformal_over_epochs(
    unit: Run | Group,
    alpha: float = 0.1,
    score: str = "lac",
    n_resamples: int = 200,
    level: float = stats.LEVEL,
    seed: int = 0,
    name: str = "",
) -> pd.DataFrame:
    """One row per epoch every seed finished (columns EPOCH_COLUMNS): coverage and mean set size on the
    second half of that epoch's validation predictions, calibrated on the first (`halves`)."""
    group = as_group(unit)
    common = sorted(set.intersection(*(set(finished_epochs(run)) for run in group.runs)))
    rows = []
    for epoch in common:
        found = [_at_epoch(run, epoch, alpha, score, n_resamples, seed) for run in group.runs]
        rows.append({"epoch": epoch, **_row(group, found, level, seed, name)})
    return pd.DataFrame(rows, columns=EPOCH_COLUMNS)


def summary_cells(table: pd.DataFrame) -> pd.DataFrame:
    """Summary rows as the page shows them: per unit, coverage and mean set size as "value [low, high]"."""

    def cell(measure: str) -> list[str]:
        return [
            f"{v:.3f} [{lo:.3f}, {hi:.3f}]"
            for v, lo, hi in zip(table[measure], table[f"{measure}_low"], table[f"{measure}_high"])
        ]

    seeds = [seeds_cell(text.split(",")) for text in table["seeds"]]  # as every other table names them
    return pd.DataFrame(
        {
            "unit": table["run"],
            "seeds": seeds,
            "test coverage": cell("coverage"),
            "mean set size": cell("set_size"),
            "calibrated on": table["n_calibration"],
            "judged on": table["n_evaluated"],
        }
    )
