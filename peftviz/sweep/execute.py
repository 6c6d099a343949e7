"""One planned configuration of a sweep, skipped, resumed or trained in this process; what became of it; the counts.

Both engines use it: the local engine for every configuration in turn (`sweep.local`), the Ray engine in each
task (`sweep.on_ray`). Torch and the trainer load only when a run is trained or resumed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from peftviz.store.runs import Run, list_runs, load_run
from peftviz.sweep.plan import Planned, stored_keys, sweep_key
from peftviz.sweep.variants import check_start_inside, with_start


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


def finished(counts: SweepProgress, outcome: Outcome, report: SweepCallback, was_running: bool = True) -> None:
    """Count a finished configuration (one that was running, or a skipped one) and tell the callback."""
    counts.running -= was_running
    counts.done += 1
    counts.failed += outcome.failed
    counts.finished.append(outcome)
    report(counts)


def execute(item: Planned, runs_dir: Path, earlier: list[Run], engine: str, progress=None, data=None) -> Run:
    """Skip, resume or train one planned configuration, in this process; returns its run. `earlier`: the runs of
    the configurations it waits for (`item.after`), whose parameters it starts from."""
    if item.action == "skip":
        return load_run(item.run)
    if item.action == "resume":
        return resume_run(load_run(item.run), progress, engine)
    from peftviz.training.trainer import Trainer  # torch and transformers load here

    config = with_start(item.config, earlier[-1] if earlier else None)
    return Trainer(config, runs_dir, progress, sweep_engine=engine, repeat_of=item.repeat_of).run(data)


def resume_run(run: Run, progress=None, engine: str = "local") -> Run:
    """Continue a stopped run (`trainer.resume`), once its starting run's file is known to lie inside its store."""
    check_start_inside(run)
    from peftviz.training.trainer import resume  # torch and transformers load here

    return resume(run, progress, sweep_engine=engine)


def retried(item: Planned, runs_dir: Path, since: str) -> Planned:
    """The item as a retry sees it: a run of its configuration that an earlier attempt (started after
    `since`, an ISO time) left incomplete is resumed rather than trained again from epoch 0."""
    if item.action != "train":
        return item
    stopped = [
        run
        for run in list_runs(runs_dir)
        if run.trained_here
        and run.status == "incomplete"
        and run.created >= since
        and sweep_key(item.config) in stored_keys(run.config)
    ]
    return replace(item, action="resume", run=stopped[-1].path) if stopped else item
