"""Training jobs of the app: a queue that runs a configurable number at once, in child processes.

One `JobQueue` per server process (the app keeps it in `st.cache_resource`). A Train press
`submit`s a job; it waits in line until fewer than `max_running` jobs run, then trains in a child
process of its own (`peftviz.app.worker`: the server's other threads would otherwise change its
dropout masks), followed by a daemon thread of the server, so navigating between pages or
reloading does not stop it. No press is dropped: `submit` queues the job or raises `QueueFull`
saying why not. Run folders are unique and written atomically, so the store stays consistent
whatever runs at once.

Every job has an `owner`: the visitor who submitted it (`jobpanel.visitor`, a browser's identity
that survives a reload). Only its owner sees its settings, progress and errors, and only its
owner (or the server's owner, see `peftviz.app.policy`) can cancel it; other visitors see that a job
of someone else waits or runs, and their own place in line. Cancelling a waiting job takes it out
of line; cancelling a running one stops its child process, which leaves its run `incomplete`, as
a killed run, so it can be resumed.

A job keeps when each run started and ended, so its progress bars can say how long it has taken
and how long it has left (`Job.timing`), and what became of each run (`Job.outcomes`): new, skipped
(already complete), resumed, or failed with its error's first line. The child trains through the
sweep (`peftviz.sweep`), on either engine, so a failed run does not stop the others: the job then
ends "failed", saying how many failed, with the other runs done and listed.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from peftviz.app.worker import RunOutcome, sweep_in_child
from peftviz.errors import PeftvizError
from peftviz.exchange.request import ImportRequest
from peftviz.run_config import TrainConfig
from peftviz.store.runs import Run, group_key
from peftviz.training.progress import ENDED, SKIPPED, Pace, Progress

KEEP_FINISHED = 50  # finished jobs kept for their owners' pages; older ones are forgotten
_ids = itertools.count(1)


class QueueFull(PeftvizError):
    """A job the queue refused; the message says why."""


class NotYours(PeftvizError):
    """A cancel refused: the job is another visitor's, and the one asking may cancel only their own."""


class AlreadyQueued(QueueFull):
    """A job refused because an active job trains the same runs (`job`: that one; `own`: the same visitor's)."""

    def __init__(self, job: Job, own: bool):
        doing = "waits in line" if job.status == "waiting" else "is training"
        whose = f"your job {job.id}" if own else "a job from another browser or visitor"
        super().__init__(f"Already queued: {whose} {doing} with the same settings and seeds; it stores these runs")
        self.job, self.own = job, own


@dataclass
class Job:
    configs: list[TrainConfig]  # runs to train, in turn
    runs_dir: Path
    owner: str = ""  # the visitor who submitted it
    origin: str = ""  # the page it was submitted from: where its owner sees it once it has ended
    resume: list[Run] = field(default_factory=list)  # incomplete runs to continue, before the configs
    engine: str = "local"  # the configs one after another in the child ("local"), or each a Ray task ("ray")
    imports: list[ImportRequest] = field(default_factory=list)  # models to import, after the configs
    force: bool = False  # train the configs anew even where the store has their runs (`peftviz.sweep.plan`)
    id: int = field(default_factory=lambda: next(_ids))
    status: str = "waiting"  # waiting, running, done, failed, cancelled
    error: str = ""
    progress: dict[str, Progress] = field(default_factory=dict)  # run name -> its latest event
    runs: list[Run] = field(default_factory=list)
    outcomes: list[RunOutcome] = field(default_factory=list)  # each run's, in the order they ended
    submitted: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    run_started: dict[str, float] = field(default_factory=dict)  # run name -> time of its first event
    run_ended: dict[str, float] = field(default_factory=dict)  # run name -> time of its "done" event
    paces: dict[str, Pace] = field(default_factory=dict)  # run name -> its steps and evaluations, timed
    cancel_requested: bool = False
    stop: Callable[[], None] | None = None  # stops the child process while it runs

    @property
    def active(self) -> bool:
        return self.status in ("waiting", "running")

    def outcome_counts(self) -> str:
        """ "2 new, 4 skipped, 1 failed": how many runs ended each way so far (empty before any did)."""
        counts: dict[str, int] = {}
        for outcome in self.outcomes:
            counts[outcome.kind] = counts.get(outcome.kind, 0) + 1
        return ", ".join(f"{count} {word}" for word, count in counts.items())

    def trains_the_same(self, other: Job) -> bool:
        """Whether both jobs train the same configurations (group key and seed, as `peftviz.sweep.plan` knows them)
        into one store, both forced or neither."""
        same_runs = _sweep_keys(self.configs) == _sweep_keys(other.configs)
        return same_runs and (self.runs_dir, self.force) == (other.runs_dir, other.force)

    @property
    def names(self) -> list[str]:
        """The runs' display names, as their Progress events call them."""
        resumed, trained = [run.config.run_title for run in self.resume], [config.run_title for config in self.configs]
        return resumed + trained + [request.title for request in self.imports]

    @property
    def runs_left(self) -> int:
        """Runs of the job not yet ended: all of them while it waits; none once it has ended."""
        return len(self.names) - len(self.run_ended) if self.active else 0

    def record(self, event: Progress, now: float | None = None) -> None:
        """Keep a run's latest event, when it started and ended, and the times of its steps (`Pace`)."""
        now = time.time() if now is None else now
        self.run_started.setdefault(event.run, now)
        if event.phase in ENDED:
            self.run_ended[event.run] = now
        self.progress[event.run] = event
        self.paces.setdefault(event.run, Pace()).observe(event, now)

    def timing(self, name: str | None = None, now: float | None = None) -> str:
        """Run `name`'s time (or the whole job's: None): "1:05 elapsed, about 2:10 left" while it trains, the
        time left from its measured steps and evaluations (`time_left`); "took 3:15" once done, "stopped after
        1:06" once cancelled or failed: the clock stops at the end. Empty before anything has started."""
        now = time.time() if now is None else now
        if name is None:
            start, end, ended_well = self.started, self.ended, self.status == "done"
        else:
            if self.progress.get(name) and self.progress[name].phase == SKIPPED:
                return ""  # not trained: nothing was timed
            start, end = self.run_started.get(name), self.run_ended.get(name)
            ended_well = end is not None
            end = end or (None if self.active else self.ended)  # a cancelled or failed job's run stopped with it
        if start is None:
            return ""
        if end is not None:
            return f"{'took' if ended_well else 'stopped after'} {clock(end - start)}"
        return f"{clock(now - start)} elapsed, {left_text(self.time_left(name, now))}"

    def time_left(self, name: str | None = None, now: float | None = None) -> tuple[float, bool] | None:
        """(seconds, whether every part was measured) left of run `name` or of the whole job; None until its
        running run has timed MEASURED_STEPS steps. A run not yet started is taken to last as long as the
        job's runs that ended so far (or, before any did, as the running one is estimated to)."""
        now = time.time() if now is None else now
        if name is not None:
            return self.paces[name].seconds_left() if name in self.paces and name not in self.run_ended else None
        running = {n: self.time_left(n) for n in self.names if n in self.run_started and n not in self.run_ended}
        if None in running.values():
            return None
        waiting = len(self.names) - len(running) - len(self.run_ended)
        per_run = self._seconds_per_run(running, now) if waiting else 0.0
        if per_run is None:
            return None
        left = sum(seconds for seconds, _ in running.values()) + waiting * per_run
        return left, all(measured for _, measured in running.values())

    def _seconds_per_run(self, running: dict[str, tuple[float, bool]], now: float) -> float | None:
        """How long a run of this job takes: the mean of those that ended (trained, not skipped); before any
        has, the running runs' whole length as estimated now (`running`: name -> its time left); else None."""
        took = [
            self.run_ended[n] - self.run_started[n]
            for n in self.run_ended
            if n in self.run_started and self.progress[n].phase != SKIPPED
        ]
        if not took:
            took = [now - self.run_started[n] + left for n, (left, _) in running.items()]
        return sum(took) / len(took) if took else None

    def fraction_done(self, name: str) -> float:
        """How far run `name` is, 0 to 1, counting epochs and batches."""
        event = self.progress.get(name)
        if event is None:
            return 0.0
        if event.phase in ENDED:
            return 1.0
        within = event.batch / event.batches if event.batches else 1.0
        return min(1.0, (event.epoch - 1 + within) / event.epochs)


class JobQueue:
    """Jobs in submission order; at most `max_running` train at once.

    max_waiting: jobs that may wait in all; per_owner: active jobs (waiting or running) a visitor
    may have (None: no limit, the single-user default). runs_per_owner and max_runs: runs not yet
    ended (`Job.runs_left`) that a visitor's active jobs, and all active jobs, may hold (None: no limit):
    one job may hold a whole comparison at ten seeds.
    """

    def __init__(
        self,
        max_running: int = 1,
        max_waiting: int = 20,
        per_owner: int | None = None,
        train=None,
        runs_per_owner: int | None = None,
        max_runs: int | None = None,
    ):
        self.max_running, self.max_waiting, self.per_owner = max_running, max_waiting, per_owner
        self.runs_per_owner, self.max_runs = runs_per_owner, max_runs
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
        force: bool = False,
    ) -> Job:
        """Queue a job (it starts at once if a place is free); raises QueueFull when it cannot wait.
        resume: incomplete runs it continues first (their own settings), as `train --resume`;
        imports: models to import (`peftviz.exchange`), after the configs."""
        job = Job(list(configs), Path(runs_dir), owner, origin, list(resume), engine, list(imports), force)
        with self._lock:
            self._check_room(owner)
            self._check_runs(job)
            self._check_not_queued(job.resume)
            self._check_not_the_same(job)
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

    def _check_runs(self, job: Job) -> None:
        """The run limits: a visitor's runs waiting or training, and everyone's (which a new browser cannot escape)."""
        asked, active = job.runs_left, self.active()
        mine = sum(other.runs_left for other in active if other.owner == job.owner)
        if self.runs_per_owner is not None and mine + asked > self.runs_per_owner:
            raise QueueFull(
                f"this server trains at most {self.runs_per_owner} runs per visitor at a time: you have {mine} waiting "
                f"or training and this asks for {asked} more; fewer seeds or methods, or wait for yours to finish"
            )
        everyone = sum(other.runs_left for other in active)
        if self.max_runs is not None and everyone + asked > self.max_runs:
            raise QueueFull(
                f"this server holds at most {self.max_runs} runs waiting or training in all: {everyone} are, and this "
                f"asks for {asked} more; try fewer, or again when some have finished"
            )

    def _check_not_queued(self, resume: list[Run]) -> None:
        queued = {run.path for job in self.active() for run in job.resume}
        for run in resume:
            if run.path in queued:
                raise QueueFull(f"run {run.name} is already queued to resume")

    def _check_not_the_same(self, job: Job) -> None:
        """A job that trains the same runs as an active one (a double click) is not queued twice."""
        same = [other for other in self.active() if job.configs and other.trains_the_same(job)]
        if same:
            raise AlreadyQueued(same[0], own=same[0].owner == job.owner)

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

    def cancel(self, job: Job, by: str | None = None, any_job: bool = False) -> None:
        """Take a waiting job out of line, or stop a running one (its run is left incomplete, resumable).

        by: the visitor asking (None: the server itself, a test or a command). A visitor may cancel only their
        own jobs unless `any_job` (the server's owner; every visitor of a single-user server): another's is
        refused with NotYours, whatever the page drew, so a replayed or forged click cancels nothing."""
        if by is not None and by != job.owner and not any_job:
            raise NotYours(f"job {job.id} is another visitor's: only they, or the server's owner, may cancel it")
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


def _sweep_keys(configs: list[TrainConfig]) -> set[tuple[str, int]]:
    return {(group_key(config), config.seed) for config in configs}


def train_in_process(job: Job) -> list[Run]:
    """Train a job's runs in a child process (`peftviz.app.worker`), stoppable by `JobQueue.cancel`."""

    def stoppable(stop) -> None:
        job.stop = stop
        if job.cancel_requested:  # cancelled between the dispatch and the child's start
            stop()

    resumed = [run.path for run in job.resume]
    return sweep_in_child(
        job.configs,
        job.runs_dir,
        job.record,
        resumed,
        stoppable,
        job.engine,
        job.imports,
        job.force,
        told=job.outcomes.append,
    )


def clock(seconds: float) -> str:
    """65 -> "1:05", 3725 -> "1:02:05"."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def left_text(left: tuple[float, bool] | None) -> str:
    """ "about 2:10 left"; "at least 2:10 left" while no evaluation has been timed (steps only); "estimating…"
    before anything is measured (the first steps include loading the model: a pace from them was 8× off)."""
    if left is None:
        return "estimating…"
    seconds, measured = left
    return f"{'about' if measured else 'at least'} {clock(seconds)} left"
