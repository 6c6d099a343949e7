"""Sweeps: the many runs of a comparison (methods × seeds × settings), each trained once, here or on Ray.

A sweep is a list of `TrainConfig`s (`sweep.variants.comparison_configs`, `run_config.alpha_grid`,
`run_config.over_seeds`), run by `peftviz.sweep.run_sweep`; this module plans it.
Before it trains anything, `plan` looks in the store: a configuration that has a complete run is
skipped, one whose run was stopped (incomplete) is resumed from its last finished epoch, and the rest
are trained; `force` trains them all anew, each new run beside one of its configuration recording
that run as `repeat_of` (a group counts one run per seed: `store.runs.group_runs`). A configuration
is known by its group key and seed (`store.runs.group_key`): the same settings, normalised, the same
seed. So running a sweep again trains only what is missing, and an interrupted sweep is finished by
running its command again. The CLI's `train` and `compare`, and the app's jobs (`peftviz.app.worker`), local or
on Ray, go through it: a run that fails is reported (`execute.Outcome`) and the others go on.

Engines (`ENGINES`):

- ``local``: the runs one after another in this process, the data loaded once;
- ``ray``: each run one Ray task with its own resources (`RayOptions`). Without an address Ray starts
  on this machine; with ``auto`` or ``ray://host:port`` it joins a running cluster, whose nodes need
  the same requirements and the run store on a shared file system. A task whose worker process dies
  is retried, and the retry resumes the run the dead worker left incomplete, not from epoch 0.

Ray, not a scheduler of our own: it places tasks by their CPU and GPU needs, retries tasks whose
worker died, and runs the same code on one machine or a cluster; it is imported only for that engine.

The store stays the one sink: each run writes its own folder (`store.writer`), which is safe for
concurrent writers and kills; a run's config.json records each attempt's engine and node. A method
may declare that a variant starts from another variant's run (`PeftMethod.starts_from`: tiny-attention's four
heads from the one-head run at the same seed); such a configuration waits for that one (`Planned.after`,
resolved by `sweep.variants.start_index`), which fills in the starting run's parameters when it trains.

Modules: `plan` (this: what to do with each configuration), `execute` (one configuration in this process, the
outcomes and counts), `local` and `on_ray` (the engines), `variants` (comparisons and starting runs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from peftviz.run_config import TrainConfig
from peftviz.store.runs import Run, group_key, list_runs, original_first
from peftviz.store.schema import ENGINES  # noqa: F401  (the engines a sweep runs on, named where they are stored)
from peftviz.sweep.variants import start_index

Action = Literal["train", "resume", "skip"]


@dataclass(frozen=True)
class Planned:
    """One configuration of a sweep and what the sweep does with it."""

    config: TrainConfig
    action: Action
    run: Path | None = None  # the complete run skipped, or the stopped run resumed
    after: tuple[int, ...] = ()  # indices of the planned configurations it starts from (same seed, before it)
    repeat_of: str | None = None  # trained beside a run of its key and seed (forced): that run's folder name


def sweep_key(config: TrainConfig) -> tuple[str, int]:
    return group_key(config), config.seed


def stored_keys(config: TrainConfig) -> set[tuple[str, int]]:
    """The keys a stored run answers to: its own, and that of its settings with precision "auto", which a run
    records as what "auto" became where it trained (fp32 on a CPU, bf16 on most GPUs)."""
    return {sweep_key(config), sweep_key(replace(config, precision="auto"))}


def plan(configs: list[TrainConfig], runs_dir: Path, force: bool = False) -> list[Planned]:
    """What the sweep does with each configuration, given the store (see the module docstring)."""
    found: dict[tuple[str, int], list[Run]] = {}
    for run in list_runs(runs_dir):
        for key in stored_keys(run.config) if run.trained_here else ():
            found.setdefault(key, []).append(run)
    return [
        _planned(config, sorted(found.get(sweep_key(config), []), key=original_first), force, _after(configs, index))
        for index, config in enumerate(configs)
    ]


def _planned(config: TrainConfig, runs: list[Run], force: bool, after: tuple[int, ...]) -> Planned:
    """Skip the run that stands for the configuration (the one its group counts, `original_first`),
    else resume the stopped one furthest along, else train; forced, always train. A run trained beside
    a complete, stopped or live one of its key and seed records it (`repeat_of`): the group counts one."""
    standing = [run for run in runs if run.status in ("complete", "incomplete", "training")]
    repeat_of = standing[0].name if standing else None
    if force:
        return Planned(config, "train", None, after, repeat_of)
    if standing and standing[0].status == "complete":
        return Planned(config, "skip", standing[0].path, after)
    stopped = [run for run in standing if run.status == "incomplete"]
    if stopped:
        return Planned(config, "resume", stopped[0].path, after)
    return Planned(config, "train", None, after, repeat_of)


def _after(configs: list[TrainConfig], index: int) -> tuple[int, ...]:
    """The configuration a run starts from (a method's declared start: `sweep.variants`), which it waits for."""
    start = start_index(configs, index)
    return () if start is None else (start,)
