"""Training jobs of the app: a queue that runs a configurable number at once, in child processes.

One `JobQueue` per server process (the app keeps it in `st.cache_resource`). A Train press
`submit`s a job; it waits in line until fewer than `max_running` jobs run, then trains in a child
process of its own (`peftviz.worker`: the server's other threads would otherwise change its
dropout masks), followed by a daemon thread of the server, so navigating between pages or
reloading does not stop it. No press is dropped: `submit` queues the job or raises `QueueFull`
saying why not. Run folders are unique and written atomically, so the store stays consistent
whatever runs at once.

Every job has an `owner`: the visitor who submitted it (`jobpanel.visitor`, a browser's identity
that survives a reload). Only its owner sees its settings, progress and errors, and only its
owner (or the server's owner, see `peftviz.policy`) can cancel it; other visitors see that a job
of someone else waits or runs, and their own place in line. Cancelling a waiting job takes it out
of line; cancelling a running one stops its child process, which leaves its run `incomplete`, as
a killed run, so it can be resumed.

A job keeps when each run started and ended, so its progress bars can say how long it has taken
and how long it has left (`Job.timing`).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from peftviz.config import TrainConfig
from peftviz.errors import PeftvizError
from peftviz.exchange.request import ImportRequest
from peftviz.progress import Progress
from peftviz.store.runs import Run
from peftviz.worker import compare_in_process

KEEP_FINISHED = 50  # finished jobs kept for their owners' pages; older ones are forgotten
_ids = itertools.count(1)


class QueueFull(PeftvizError):
    """A job the queue refused; the message says why."""


@dataclass
class Job:
    configs: list[TrainConfig]  # runs to train, in turn
    runs_dir: Path
    owner: str = ""  # the visitor who submitted it
    origin: str = ""  # the page it was submitted from: where its owner sees it once it has ended
    resume: list[Run] = field(default_factory=list)  # incomplete runs to continue, before the configs
    engine: str = "local"  # the configs one after another in the child ("local"), or each a Ray task ("ray")
    imports: list[ImportRequest] = field(default_factory=list)  # models to import, after the configs
    id: int = field(default_factory=lambda: next(_ids))
    status: str = "waiting"  # waiting, running, done, failed, cancelled
    error: str = ""
    progress: dict[str, Progress] = field(default_factory=dict)  # run name -> its latest event
    runs: list[Run] = field(default_factory=list)
    submitted: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    run_started: dict[str, float] = field(default_factory=dict)  # run name -> time of its first event
    run_ended: dict[str, float] = field(default_factory=dict)  # run name -> time of its "done" event
    cancel_requested: bool = False
    stop: Callable[[], None] | None = None  # stops the child process while it runs

    @property
    def active(self) -> bool:
        return self.status in ("waiting", "running")

    @property
    def names(self) -> list[str]:
        """The runs' display names, as their Progress events call them."""
        resumed, trained = [run.config.run_title for run in self.resume], [config.run_title for config in self.configs]
        return resumed + trained + [request.title for request in self.imports]

    def record(self, event: Progress) -> None:
        """Keep a run's latest event, and when it started and ended."""
        now = time.time()
        self.run_started.setdefault(event.run, now)
        if event.phase == "done":
            self.run_ended[event.run] = now
        self.progress[event.run] = event

    def timing(self, name: str | None = None) -> str:
        """Run `name`'s time (or the whole job's: None), "1:05 elapsed, about 2:10 left"; the time left
        assumes what is left goes at the pace so far. Empty before anything has started."""
        if name is None:
            start, end = self.started, self.ended
            fraction = sum(map(self.fraction_done, self.names)) / max(1, len(self.names))
        else:
            start, end, fraction = self.run_started.get(name), self.run_ended.get(name), self.fraction_done(name)
        if start is None:
            return ""
        return elapsed_and_left((end or time.time()) - start, fraction, finished=end is not None)

    def fraction_done(self, name: str) -> float:
        """How far run `name` is, 0 to 1, counting epochs and batches."""
        event = self.progress.get(name)
        if event is None:
            return 0.0
        if event.phase == "done":
            return 1.0
        within = event.batch / event.batches if event.batches else 1.0
        return min(1.0, (event.epoch - 1 + within) / event.epochs)


class JobQueue:
    """Jobs in submission order; at most `max_running` train at once.

    max_waiting: jobs that may wait in all; per_owner: active jobs (waiting or running) a visitor
    may have (None: no limit, the single-user default).
    """

    def __init__(self, max_running: int = 1, max_waiting: int = 20, per_owner: int | None = None, train=None):
        self.max_running, self.max_waiting, self.per_owner = max_running, max_waiting, per_owner
        self._train = train or train_in_process  # tests swap in a fake trainer: train(job) -> runs
        self._lock = threading.Lock()
        self.jobs: list[Job] = []

    def submit(
        self,
        configs: list[TrainConfig],
        runs_dir: Path,
        owner: str = "",
        resume: tuple[Run, ...] = (),
        origin: str = "",
        engine: str = "local",
        imports: tuple[ImportRequest, ...] = (),
    ) -> Job:
        """Queue a job (it starts at once if a place is free); raises QueueFull when it cannot wait.
        resume: incomplete runs it continues first (their own settings), as `train --resume`;
        imports: models to import (`peftviz.exchange`), after the configs."""
        job = Job(list(configs), Path(runs_dir), owner, origin, list(resume), engine, list(imports))
        with self._lock:
            self._check_room(owner)
            self._check_not_queued(job.resume)
            self.jobs.append(job)
            self._forget_old()
        self._dispatch()
        return job

    def _check_room(self, owner: str) -> None:
        if self.per_owner is not None and sum(job.owner == owner for job in self.active()) >= self.per_owner:
            raise QueueFull(
                f"you already have {self.per_owner} job(s) waiting or training; cancel one or wait for it to finish"
            )
        if len(self.waiting()) >= self.max_waiting:
            raise QueueFull(f"{self.max_waiting} jobs are already waiting; try again when one has started")

    def _check_not_queued(self, resume: list[Run]) -> None:
        queued = {run.path for job in self.active() for run in job.resume}
        for run in resume:
            if run.path in queued:
                raise QueueFull(f"run {run.name} is already queued to resume")

    def _forget_old(self) -> None:
        finished = [job for job in self.jobs if not job.active]
        for job in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            self.jobs.remove(job)

    def active(self) -> list[Job]:
        return [job for job in self.jobs if job.active]

    def waiting(self) -> list[Job]:
        return [job for job in self.jobs if job.status == "waiting"]

    def running(self) -> list[Job]:
        return [job for job in self.jobs if job.status == "running"]

    def place(self, job: Job) -> int:
        """0 for a running job; k for the k-th job in line."""
        waiting = self.waiting()
        return waiting.index(job) + 1 if job in waiting else 0

    def owned_by(self, owner: str) -> list[Job]:
        return [job for job in self.jobs if job.owner == owner]

    def find(self, job_id: int) -> Job | None:
        return next((job for job in self.jobs if job.id == job_id), None)

    def cancel(self, job: Job) -> None:
        """Take a waiting job out of line, or stop a running one (its run is left incomplete, resumable)."""
        with self._lock:
            job.cancel_requested = True
            if job.status == "waiting":
                job.status, job.ended = "cancelled", time.time()
            stop = job.stop if job.status == "running" else None
        if stop is not None:
            stop()

    def _dispatch(self) -> None:
        """Start waiting jobs while places are free."""
        with self._lock:
            starting = self.waiting()[: max(0, self.max_running - len(self.running()))]
            for job in starting:
                job.status, job.started = "running", time.time()
        for job in starting:
            threading.Thread(target=self._work, args=(job,), daemon=True, name=f"peftviz-job-{job.id}").start()

    def _work(self, job: Job) -> None:
        try:
            job.runs = self._train(job)
            job.status = "done"
        except Exception as err:  # noqa: BLE001  (a server thread: any failure is shown on the page, not lost)
            job.error = f"{type(err).__name__}: {err}".splitlines()[0]
            job.status = "failed"
        finally:
            if job.cancel_requested and job.status != "done":
                job.status, job.error = "cancelled", ""
            job.ended, job.stop = time.time(), None
            self._dispatch()


def train_in_process(job: Job) -> list[Run]:
    """Train a job's runs in a child process (`peftviz.worker`), stoppable by `JobQueue.cancel`."""

    def stoppable(stop) -> None:
        job.stop = stop
        if job.cancel_requested:  # cancelled between the dispatch and the child's start
            stop()

    resumed = [run.path for run in job.resume]
    return compare_in_process(job.configs, job.runs_dir, job.record, resumed, stoppable, job.engine, job.imports)


def clock(seconds: float) -> str:
    """65 -> "1:05", 3725 -> "1:02:05"."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def elapsed_and_left(elapsed: float, fraction: float, finished: bool = False) -> str:
    """What a progress bar says about time: elapsed, and an estimate of what is left from the pace so
    far (none until 1% is done: the first batches include loading the model)."""
    text = f"{clock(elapsed)} elapsed"
    if finished or fraction >= 1.0:
        return f"took {clock(elapsed)}"
    if fraction < 0.01:
        return text
    return f"{text}, about {clock(elapsed * (1 - fraction) / fraction)} left"
