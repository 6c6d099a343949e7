"""A shared server's limit on runs, not only on jobs: one job may hold a whole comparison at ten seeds.

A visitor may have PEFTVIZ_RUNS_PER_VISITOR runs waiting or training (shared default 12), and all
visitors together PEFTVIZ_RUNS_QUEUED (shared default 60), which a visitor who opens another browser
(a new visitor to the server) cannot escape. A refused submission says which limit and the counts.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz.app import jobpanel
from peftviz.app.jobs import JobQueue, QueueFull
from peftviz.app.policy import RUNS_PER_VISITOR, RUNS_QUEUED, ServerPolicy
from peftviz.errors import ConfigError
from peftviz.run_config import METHOD_SETS, preset_config
from peftviz.sweep.variants import comparison_configs
from peftviz.training.progress import Progress
from tests.support.job_helpers import fake_queue, wait_until_idle

ROOT = Path(__file__).resolve().parents[2]
CONFIG = preset_config("smoke")


def runs(first_seed: int, count: int) -> list:
    """`count` runs of one configuration at seeds first_seed, first_seed + 1, …: never one queued twice."""
    return [replace(CONFIG, seed=seed) for seed in range(first_seed, first_seed + count)]


class Hold:
    """A fake trainer that holds every job until released."""

    def __init__(self):
        self.release = threading.Event()

    def __call__(self, job):
        self.release.wait(timeout=60)
        return []


def test_the_run_limits_come_from_the_environment(monkeypatch):
    for name in ("PEFTVIZ_SHARED", "PEFTVIZ_RUNS_PER_VISITOR", "PEFTVIZ_RUNS_QUEUED"):
        monkeypatch.delenv(name, raising=False)
    single = ServerPolicy.from_env()
    assert (single.runs_per_visitor, single.runs_queued) == (None, None)  # the single-user server: no limit
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    shared = ServerPolicy.from_env()
    assert (shared.runs_per_visitor, shared.runs_queued) == (RUNS_PER_VISITOR, RUNS_QUEUED) == (12, 60)
    monkeypatch.setenv("PEFTVIZ_RUNS_PER_VISITOR", "3")
    monkeypatch.setenv("PEFTVIZ_RUNS_QUEUED", "7")
    assert (ServerPolicy.from_env().runs_per_visitor, ServerPolicy.from_env().runs_queued) == (3, 7)
    monkeypatch.setenv("PEFTVIZ_RUNS_QUEUED", "0")
    with pytest.raises(ConfigError, match="PEFTVIZ_RUNS_QUEUED='0': expected a whole number of at least 1"):
        ServerPolicy.from_env()


def test_the_app_queue_takes_the_policys_run_limits(monkeypatch):
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    monkeypatch.setenv("PEFTVIZ_RUNS_PER_VISITOR", "5")
    monkeypatch.setenv("PEFTVIZ_RUNS_QUEUED", "9")
    jobpanel.job_queue.clear()
    try:
        queue = jobpanel.job_queue()
        assert (queue.runs_per_owner, queue.max_runs, queue.per_owner) == (5, 9, 2)
    finally:
        jobpanel.job_queue.clear()


def test_a_visitor_may_hold_only_so_many_runs_and_all_visitors_together_only_so_many():
    hold = Hold()
    queue = JobQueue(max_running=1, max_waiting=100, per_owner=None, train=hold, runs_per_owner=12, max_runs=60)
    first = queue.submit(runs(0, 6), Path("."), owner="a")
    with pytest.raises(QueueFull) as refused:
        queue.submit(runs(100, 7), Path("."), owner="a")
    assert str(refused.value) == (
        "this server trains at most 12 runs per visitor at a time: you have 6 waiting or training and this asks "
        "for 7 more; fewer seeds or methods, or wait for yours to finish"
    )
    queue.submit(runs(100, 6), Path("."), owner="a")  # 12: exactly the limit
    for index, visitor in enumerate("bcde"):  # four more visitors (or one person in four more browsers)
        queue.submit(runs(1000 * (index + 1), 12), Path("."), owner=visitor)
    assert sum(job.runs_left for job in queue.active()) == 60
    with pytest.raises(QueueFull) as refused:
        queue.submit(runs(9000, 1), Path("."), owner="a new browser")
    assert str(refused.value) == (
        "this server holds at most 60 runs waiting or training in all: 60 are, and this asks for 1 more; try "
        "fewer, or again when some have finished"
    )
    assert len(queue.jobs) == 6
    for name in first.names[:2]:  # two runs of the first job end: two places free up, for anyone
        first.record(Progress(name, "done", 1, 1))
    assert (first.runs_left, sum(job.runs_left for job in queue.active())) == (4, 58)
    queue.submit(runs(9000, 2), Path("."), owner="a new browser")
    with pytest.raises(QueueFull, match="60 are, and this asks for 1 more"):
        queue.submit(runs(9100, 1), Path("."), owner="another new browser")
    hold.release.set()
    wait_until_idle(queue)
    assert sum(job.runs_left for job in queue.jobs) == 0  # ended jobs hold no runs


def test_home_refuses_a_comparison_over_the_run_limit_in_one_line(empty_store, monkeypatch):
    """The reported case: "with the baselines" (every method) at 10 seeds on Home was 110 runs in one job; with the
    peft-based methods of issue 34 and MonteCLoRA of issue 47, every method is 280."""
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    hold = Hold()
    queue = fake_queue(monkeypatch, hold, visitor="a", per_owner=2, runs_per_owner=12, max_runs=60)
    at = AppTest.from_file(str(ROOT / "pages/0_home.py"), default_timeout=60).run()
    at.radio(key="home_methods").set_value(METHOD_SETS[1]).run()
    next(n for n in at.number_input if n.label == "Training seeds").set_value(10).run()
    at.button[0].click().run()
    asked = 10 * len(comparison_configs("quick", METHOD_SETS[1]))
    (error,) = at.error
    assert error.value == (
        f"this server trains at most 12 runs per visitor at a time: you have 0 waiting or training and this asks "
        f"for {asked} more; fewer seeds or methods, or wait for yours to finish"
    )
    assert queue.jobs == [] and asked == 280
    for index, visitor in enumerate("bcde"):  # 48 runs of four others, then 6 of this visitor's: 54
        queue.submit(runs(1000 * (index + 1), 12), empty_store, owner=visitor)
    queue.submit(runs(0, 6), empty_store, owner="a")
    monkeypatch.setattr(jobpanel, "visitor", lambda: "a new browser")
    at = AppTest.from_file(str(ROOT / "pages/0_home.py"), default_timeout=60).run()
    next(n for n in at.number_input if n.label == "Training seeds").set_value(2).run()
    at.button[0].click().run()
    papers = 2 * len(comparison_configs("quick"))
    assert [e.value for e in at.error] == [
        (
            f"this server holds at most 60 runs waiting or training in all: 54 are, and this asks for {papers} more; "
            "try fewer, or again when some have finished"
        )
    ]
    assert len(queue.jobs) == 5
    hold.release.set()
    wait_until_idle(queue)
