"""Risk–coverage curves of stored runs and groups of seeds, with their bootstrap bands.

A curve is read on a fixed grid of coverages kappa = 0.01, 0.02, ..., 1.00 (`selective.coverage_grid`):
at each, the selective risk r(kappa) = E_k / k with k = ceil(kappa N), the expected error rate among
the k most confident predictions (ties spread evenly, `peftviz.calibration.selective`). A fixed grid,
not the N points k/N, so that runs judged on different N and groups of seeds share the x values.

* One run: r(kappa) on all its predictions, and the percentile band of r over the bootstrap rows
  `stats.resample_indices(N, R, seed)` (widened to hold the value, `stats.interval_around`).
* A group of seeds: the mean of its runs' r(kappa), and the two-level band of `stats`: every run's
  draws on the same example rows, draw r the mean over resampled seeds `stats.seed_rows` at
  example row r (`SeedDraws.group_draws`, at each grid point). The band holds the seeds'
  differences and the test set's noise, as every group interval does.

`which`: "test" (the best validation epoch's model on the test split) or an epoch's validation
predictions (a run with fewer epochs uses its last; `analysis.calibration.resolve`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from peftviz.analysis import group_stats
from peftviz.analysis.group_stats import predictions
from peftviz.calibration import selective, stats
from peftviz.calibration.binning import top_label
from peftviz.calibration.checks import check_inputs
from peftviz.calibration.estimators import ESTIMATORS
from peftviz.store.runs import Group, Run

TABLE_COLUMNS = ("run", "coverage", "risk", "low", "high", "n")
CHUNK_ELEMENTS = 2_000_000  # resample rows x N per pass, as the estimators bound their work arrays


def risk_draws(probs, labels, coverages: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """(R, G) selective risk at each coverage (G,) on each resample row of indices (R, N)."""
    probs, labels = check_inputs(probs, labels)
    confidence, correct = top_label(probs, labels)
    chunk = max(1, CHUNK_ELEMENTS // labels.shape[0])
    parts = [
        selective.risk_at(selective.expected_errors(confidence, ~correct, indices[start : start + chunk]), coverages)
        for start in range(0, indices.shape[0], chunk)
    ]
    return np.concatenate(parts)


def run_risks(run: Run, which, coverages: np.ndarray, n_resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One run's risk on all its predictions (G,) and on every resample row (R, G)."""
    probs, labels = predictions(run, which)
    identity = np.arange(labels.shape[0])[None, :]
    rows = stats.resample_indices(labels.shape[0], n_resamples, seed)
    return risk_draws(probs, labels, coverages, identity)[0], risk_draws(probs, labels, coverages, rows)


def group_band(values: np.ndarray, draws: np.ndarray, level: float, seed: int) -> tuple[np.ndarray, ...]:
    """(mean, low, high), each (G,), of seeds' values (S, G) and draws (S, R, G): `stats.two_level_interval`
    at every grid point, every point on the same seed rows (one seed)."""
    seeds = tuple(range(values.shape[0]))
    bounds = [
        stats.two_level_interval(stats.SeedDraws(seeds, values[:, g], draws[:, :, g]), level, seed)
        for g in range(values.shape[1])
    ]
    mean, low, high = (np.array(side) for side in zip(*bounds))
    return mean, low, high


def risk_coverage_table(
    unit: Group,
    which="test",
    n_resamples: int = 1000,
    level: float = stats.LEVEL,
    seed: int = 0,
    name: str | None = None,
    n_points: int = 100,
) -> pd.DataFrame:
    """Columns TABLE_COLUMNS, one row per grid coverage: the unit's risk (a group: its seeds' mean),
    its band [low, high] at `level`, and n, the number of seeds. `name` fills the run column (default:
    the group's label)."""
    stats.check_resampling(n_resamples, level)
    coverages = selective.coverage_grid(n_points)
    group_stats.same_examples([unit], group_stats.Settings(which))  # the two-level bootstrap pairs them
    found = [run_risks(run, which, coverages, n_resamples, seed) for run in unit.runs]
    values = np.stack([value for value, _ in found])  # (S, G)
    draws = np.stack([run_draws for _, run_draws in found])  # (S, R, G)
    risk, low, high = group_band(values, draws, level, seed)
    return pd.DataFrame(
        {"run": name or unit.label, "coverage": coverages, "risk": risk, "low": low, "high": high, "n": len(unit.runs)}
    )[list(TABLE_COLUMNS)]


SELECTIVE_METRICS = ("aurc", "augrc", "accuracy_at_80", "accuracy_at_90")


def settings(which="test", n_resamples: int = 1000) -> group_stats.Settings:
    """How the selective table's cells are made: `report`'s defaults but for `which` and the resamples."""
    return group_stats.Settings(which, n_resamples=n_resamples)


def summary_table(units: list[Group], which="test", n_resamples: int = 1000) -> pd.DataFrame:
    """Unit × the selective estimators (`SELECTIVE_METRICS`), each cell "value [low, high]" as the Calibration
    page's comparison gives it and `report --metric aurc ...` with `settings(which, n_resamples)`, headed by the
    estimators' headings."""
    result = group_stats.stats_of_groups(units, settings(which, n_resamples), SELECTIVE_METRICS)
    return group_stats.wide_summary(result).rename(
        columns={name: ESTIMATORS[name].heading for name in SELECTIVE_METRICS}
    )
