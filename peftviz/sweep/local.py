"""The local engine of a sweep: the planned configurations one after another in this process, the data loaded once.

A configuration whose starting run failed is not trained (its Outcome says which); every other one is, whatever
failed before it.
"""

from __future__ import annotations

from pathlib import Path

from peftviz.errors import PeftvizError
from peftviz.run_config import TrainConfig
from peftviz.sweep.execute import Outcome, SweepCallback, SweepProgress, execute, finished
from peftviz.sweep.plan import Planned


def run_local(
    planned: list[Planned], runs_dir: Path, counts: SweepProgress, report: SweepCallback, run_progress=None
) -> list[Outcome]:
    """Every planned configuration in turn; one Outcome each, in order."""
    outcomes: list[Outcome] = []
    data_cache: dict[tuple, object] = {}
    for item in planned:
        counts.running += item.action != "skip"
        report(counts)
        outcome = _one(item, outcomes, runs_dir, run_progress, data_cache)
        outcomes.append(outcome)
        finished(counts, outcome, report, was_running=item.action != "skip")
    return outcomes


def _one(item: Planned, outcomes: list[Outcome], runs_dir: Path, run_progress, data_cache: dict) -> Outcome:
    """One configuration's Outcome: its run, or its error's class and first line."""
    failed_before = [outcomes[i] for i in item.after if outcomes[i].failed]
    try:
        if failed_before:
            raise PeftvizError(
                f"not trained: {failed_before[0].planned.config.run_title}, which it starts from, failed"
            )
        earlier = [outcomes[i].run for i in item.after]
        data = _data(item.config, data_cache) if item.action == "train" else None
        run = execute(item, runs_dir, earlier, "local", run_progress, data)
        return Outcome(item, run, run.error)
    except PeftvizError as err:
        return Outcome(item, None, (str(err) or type(err).__name__).splitlines()[0], type(err).__name__)


def _data(config: TrainConfig, cache: dict):
    """The sweep's data, loaded once per (dataset, split seed, limit)."""
    from peftviz.data.loading import load_data

    key = (config.dataset, config.data_seed, config.limit)
    if key not in cache:
        cache[key] = load_data(config.dataset, seed=config.data_seed, limit=config.limit)
    return cache[key]
