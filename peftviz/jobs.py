"""Training jobs that run in the background of the app.

One `JobManager` per server process (the app keeps it in `st.cache_resource`), so every browser
tab sees the same job. Only one job trains at a time: a second request while one runs gets the
running job back instead of starting another. The job runs in a daemon thread, so navigating
between pages does not stop it. Run folders are unique and written atomically, so the store
stays consistent whatever the tabs do.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from peftviz.config import TrainConfig
from peftviz.runs import Run
from peftviz.train import Progress, compare


@dataclass
class Job:
    configs: list[TrainConfig]
    runs_dir: Path
    status: str = "running"  # running, done, failed
    error: str = ""
    progress: dict[str, Progress] = field(default_factory=dict)  # run name -> its latest event
    runs: list[Run] = field(default_factory=list)
    started: float = field(default_factory=time.time)

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

    def start(self, configs: list[TrainConfig], runs_dir: Path) -> Job:
        """Start training `configs` in turn, unless a job is running: then return that one."""
        with self._lock:
            if self.current is not None and self.current.status == "running":
                return self.current
            job = Job(list(configs), Path(runs_dir))
            self.current = job
        threading.Thread(target=self._work, args=(job,), daemon=True, name="peftviz-training").start()
        return job

    @staticmethod
    def _work(job: Job) -> None:
        def record(event: Progress) -> None:
            job.progress[event.run] = event

        try:
            job.runs = compare(job.configs, job.runs_dir, record)
            job.status = "done"
        except Exception as err:  # noqa: BLE001  (a server thread: any failure is shown on the page, not lost)
            job.error = f"{type(err).__name__}: {err}".splitlines()[0]
            job.status = "failed"
