"""A training queue whose trainer is faked, for the pages' tests: what was submitted, without training."""

import threading
import time

from peftviz.app import jobpanel
from peftviz.app.jobs import JobQueue


def fake_queue(monkeypatch, train=lambda job: [], visitor: str | None = "me", **limits) -> JobQueue:
    """Swap the server's queue for a fresh one training with `train(job)`; the visitor is `visitor`
    (None: Streamlit's own, the session in AppTest)."""
    queue = JobQueue(train=train, **limits)
    monkeypatch.setattr(jobpanel, "job_queue", lambda: queue)
    if visitor is not None:
        monkeypatch.setattr(jobpanel, "visitor", lambda: visitor)
    return queue


def wait_until_idle(queue: JobQueue, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while queue.active() and time.time() < deadline:
        time.sleep(0.05)
    assert not queue.active(), [(job.id, job.status) for job in queue.active()]


class Gate:
    """A fake trainer that holds each job until released, and notes the order jobs started in."""

    def __init__(self):
        self.started, self.release = [], threading.Event()

    def __call__(self, job):
        self.started.append(job.id)
        self.release.wait(timeout=30)
        return []
