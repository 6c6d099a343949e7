"""Training jobs that run in the background of the app.

One `JobManager` per server process (the app keeps it in `st.cache_resource`), so every browser
tab sees the same job. Only one job trains at a time: a second request while one runs gets the
running job back instead of starting another. A daemon thread of the server follows the job,
which trains in a child process of its own (`peftviz.worker`: the server's other threads would
otherwise change its dropout masks), so navigating between pages does not stop it. Run folders are unique and written atomically, so the store
stays consistent whatever the tabs do.

A job keeps when each run started and ended, so its progress bars can say how long it has taken
and how long it has left (`Job.timing`). It also keeps the page and the browser session that started
it (`origin`, `session`), so a finished job's bars show there only: not on a page that trains
something else, nor in another visitor's tab, where they would pass for that visitor's own job.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from peftviz.config import TrainConfig
from peftviz.runs import Run
from peftviz.train import Progress
from peftviz.worker import compare_in_process


@dataclass
class Job:
    configs: list[TrainConfig]
    runs_dir: Path
    status: str = "running"  # running, done, failed
    error: str = ""
    progress: dict[str, Progress] = field(default_factory=dict)  # run name -> its latest event
    runs: list[Run] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    origin: str = ""  # the page that started it (appkit's page id)
    session: str = ""  # the browser session that started it (Streamlit's session id)
    run_started: dict[str, float] = field(default_factory=dict)  # run name -> time of its first event
    run_ended: dict[str, float] = field(default_factory=dict)  # run name -> time of its "done" event
    ended: float | None = None

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

    @property
    def names(self) -> list[str]:
        return [config.run_title for config in self.configs]

    def fraction_done(self, name: str) -> float:
        """How far run `name` is, 0 to 1, counting epochs and batches."""
        event = self.progress.get(name)
        if event is None:
            return 0.0
        if event.phase == "done":
            return 1.0
        within = event.batch / event.batches if event.batches else 1.0
        return min(1.0, (event.epoch - 1 + within) / event.epochs)


class JobManager:
    def __init__(self):
        self._lock = threading.Lock()
        self.current: Job | None = None

    def start(self, configs: list[TrainConfig], runs_dir: Path, origin: str = "", session: str = "") -> Job:
        """Start training `configs` in turn, unless a job is running: then return that one."""
        with self._lock:
            if self.current is not None and self.current.status == "running":
                return self.current
            job = Job(list(configs), Path(runs_dir), origin=origin, session=session)
            self.current = job
        threading.Thread(target=self._work, args=(job,), daemon=True, name="peftviz-training").start()
        return job

    @staticmethod
    def _work(job: Job) -> None:
        try:
            job.runs = compare_in_process(job.configs, job.runs_dir, job.record)  # own generator: see worker
            job.status = "done"
        except Exception as err:  # noqa: BLE001  (a server thread: any failure is shown on the page, not lost)
            job.error = f"{type(err).__name__}: {err}".splitlines()[0]
            job.status = "failed"
        finally:
            job.ended = time.time()


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
