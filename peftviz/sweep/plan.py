"""Sweeps: the many runs of a comparison (methods × seeds × settings), each trained once, here or on Ray.

A sweep is a list of `TrainConfig`s (`config.comparison`, `config.alpha_grid`, `config.over_seeds`).
Before it trains anything, `plan` looks in the store: a configuration that has a complete run is
skipped, one whose run was stopped (incomplete) is resumed from its last finished epoch, and the rest
are trained; `force` trains them all anew, each new run beside one of its configuration recording
that run as `repeat_of` (a group counts one run per seed: `store.runs.group_runs`). A configuration
is known by its group key and seed (`store.runs.group_key`): the same settings, normalised, the same
seed. So running a sweep again trains only what is missing, and an interrupted sweep is finished by
running its command again. The CLI's `train` and the app's jobs (`peftviz.app.worker`) go through it too.

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
may start from an earlier run of the sweep (`PeftMethod.before_training`: tiny-attention's four heads
from the one-head run at the same seed); such a configuration waits for the ones before it at its seed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from peftviz.errors import ConfigError, PeftvizError
from peftviz.store.runs import Run, group_key, list_runs, load_run, original_first
from peftviz.training.config import TrainConfig

ENGINES = ("local", "ray")
Action = Literal["train", "resume", "skip"]


@dataclass(frozen=True)
class Planned:
    """One configuration of a sweep and what the sweep does with it."""

    config: TrainConfig
    action: Action
    run: Path | None = None  # the complete run skipped, or the stopped run resumed
    after: tuple[int, ...] = ()  # indices of the planned configurations it starts from (same seed, before it)
    repeat_of: str | None = None  # trained beside a run of its key and seed (forced): that run's folder name


@dataclass
class Outcome:
    """What became of one planned configuration."""

    planned: Planned
    run: Run | None = None
    error: str = ""
    error_kind: str = ""  # the PeftvizError's class name where the error was one (the app's job shows its kind)

    @property
    def failed(self) -> bool:
        return self.run is None or self.run.status != "complete"


@dataclass(frozen=True)
class RayOptions:
    """How runs go on Ray. address: None starts Ray on this machine; "auto" or "ray://host:port" joins a cluster."""

    address: str | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float | None = None  # None: 1 where the cluster has GPUs, else 0
    retries: int = 3  # a task whose worker dies is tried again this many times


@dataclass
class SweepProgress:
    """Counts of the sweep for one bar: runs done, running, failed, and the time since it started."""

    total: int
    done: int = 0
    running: int = 0  # started, not finished (on Ray: training, or waiting for a worker)
    failed: int = 0
    started: float = field(default_factory=time.monotonic)
    finished: list[Outcome] = field(default_factory=list)


SweepCallback = Callable[[SweepProgress], None]


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
        for key in stored_keys(run.config) if run.config is not None and not run.imported else ():
            found.setdefault(key, []).append(run)
    return [
        _planned(config, sorted(found.get(sweep_key(config), []), key=original_first), force,
                 _prerequisites(configs, index))
        for index, config in enumerate(configs)
    ]  # fmt: skip


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


def _prerequisites(configs: list[TrainConfig], index: int) -> tuple[int, ...]:
    """A method that may start from other runs (`run_links`) waits for the configurations before it at its seed."""
    config = configs[index]
    if not config.method_class.run_links:
        return ()
    return tuple(i for i in range(index) if configs[i].seed == config.seed)


def run_sweep(
    configs: list[TrainConfig],
    runs_dir: Path,
    engine: str = "local",
    force: bool = False,
    ray_options: RayOptions | None = None,
    on_progress: SweepCallback | None = None,
    run_progress=None,
) -> list[Outcome]:
    """Plan the sweep against the store, then train what is missing with `engine`; one Outcome per config.

    A run that fails (or whose worker dies on every retry) is an Outcome with its error; the others go on.
    `run_progress` receives the `Progress` events of runs trained in this process (the local engine)."""
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    runs_dir = Path(runs_dir).resolve()  # Ray's workers may start elsewhere
    planned = plan(configs, runs_dir, force)
    counts = SweepProgress(total=len(planned))
    report = on_progress or (lambda _: None)
    if engine == "local":
        return _run_local(planned, runs_dir, counts, report, run_progress)
    from peftviz.sweep.on_ray import run_on_ray  # ray imports here, only for this engine

    return run_on_ray(planned, runs_dir, ray_options or RayOptions(), counts, report)


def finished(counts: SweepProgress, outcome: Outcome, report: SweepCallback, was_running: bool = True) -> None:
    """Count a finished configuration (one that was running, or a skipped one) and tell the callback."""
    counts.running -= was_running
    counts.done += 1
    counts.failed += outcome.failed
    counts.finished.append(outcome)
    report(counts)


def _run_local(planned, runs_dir, counts, report, run_progress) -> list[Outcome]:
    outcomes: list[Outcome] = []
    data_cache: dict[tuple, object] = {}
    for item in planned:
        counts.running += item.action != "skip"
        report(counts)
        failed_before = [outcomes[i] for i in item.after if outcomes[i].failed]
        try:
            if failed_before:
                raise PeftvizError(
                    f"not trained: {failed_before[0].planned.config.run_title}, which it starts from, failed"
                )
            earlier = [outcomes[i].run for i in item.after]
            run = execute(item, runs_dir, earlier, "local", run_progress, _data(item.config, data_cache))
            outcome = Outcome(item, run, run.error)
        except PeftvizError as err:
            outcome = Outcome(item, None, (str(err) or type(err).__name__).splitlines()[0], type(err).__name__)
        outcomes.append(outcome)
        finished(counts, outcome, report, was_running=item.action != "skip")
    return outcomes


def _data(config: TrainConfig, cache: dict):
    """The sweep's data, loaded once per (dataset, split seed, limit)."""
    from peftviz.data.loading import load_data

    key = (config.dataset, config.data_seed, config.limit)
    if key not in cache:
        cache[key] = load_data(config.dataset, seed=config.data_seed, limit=config.limit)
    return cache[key]


def execute(item: Planned, runs_dir: Path, earlier: list[Run], engine: str, progress=None, data=None) -> Run:
    """Skip, resume or train one planned configuration, in this process; returns its run."""
    if item.action == "skip":
        return load_run(item.run)
    from peftviz.training.trainer import Trainer, resume  # torch and transformers load here

    if item.action == "resume":
        return resume(load_run(item.run), progress, sweep_engine=engine)
    config = item.config.method_class.before_training(item.config, earlier)
    return Trainer(config, runs_dir, progress, sweep_engine=engine, repeat_of=item.repeat_of).run(data)


def retried(item: Planned, runs_dir: Path, since: str) -> Planned:
    """The item as a retry sees it: a run of its configuration that an earlier attempt (started after
    `since`, an ISO time) left incomplete is resumed rather than trained again from epoch 0."""
    if item.action != "train":
        return item
    stopped = [
        run
        for run in list_runs(runs_dir)
        if run.config is not None
        and run.status == "incomplete"
        and run.created >= since
        and sweep_key(item.config) in stored_keys(run.config)
    ]
    return replace(item, action="resume", run=stopped[-1].path) if stopped else item
