"""A job's progress text on a fake clock: the clock stops when a job ends, however it ends; the time left
comes from measured training steps and evaluations, and is not guessed before they are measured."""

from pathlib import Path

import pytest

from peftviz.app.jobs import Job, left_text
from peftviz.sweep.variants import comparison_configs
from peftviz.training.progress import MEASURED_STEPS, Pace, Progress


def running_job(runs: int = 1) -> Job:
    job = Job(comparison_configs("smoke")[:runs], Path("."))
    job.status, job.started = "running", 0.0
    return job


def train_epoch(
    job: Job, name: str, epoch: int, start: float, step_s: float, batches: int = 10, epochs: int = 3
) -> float:
    """Events of one epoch's steps, `step_s` apart from `start`; returns the time of the last."""
    for batch in range(1, batches + 1):
        job.record(Progress(name, "train", epoch, epochs, batch, batches), now=start + batch * step_s)
    return start + batches * step_s


def test_no_estimate_before_the_first_steps_are_timed():
    """The first event comes after loading the model: a pace that counts it was far off (0:10 elapsed,
    9:54 left, for a run of 1:14)."""
    job = running_job()
    name = job.names[0]
    job.record(Progress(name, "train", 1, 3, 1, 10), now=10.0)  # after loading and a first step: 10 s
    assert job.timing(name, now=10.0) == "0:00 elapsed, estimating…"  # a run's clock starts at its first event
    assert job.timing(now=10.0) == "0:10 elapsed, estimating…"  # the job's when it started
    for batch in range(2, MEASURED_STEPS + 1):
        job.record(Progress(name, "train", 1, 3, batch, 10), now=10.0 + 0.5 * (batch - 1))
    assert job.time_left(name) is None  # MEASURED_STEPS - 1 steps timed
    assert job.timing(now=12.0) == "0:12 elapsed, estimating…"


def test_the_time_left_counts_the_steps_left_at_the_measured_pace():
    job = running_job()
    name = job.names[0]
    job.record(Progress(name, "train", 1, 3, 1, 10), now=10.0)
    for batch in range(2, 8):  # 6 steps of 0.5 s timed
        job.record(Progress(name, "train", 1, 3, batch, 10), now=10.0 + 0.5 * (batch - 1))
    left, measured = job.time_left(name)
    assert left == pytest.approx((3 + 20) * 0.5) and not measured  # 3 steps of this epoch, 2 epochs
    assert job.timing(name, now=13.0) == "0:03 elapsed, at least 0:12 left"  # no evaluation timed yet


def test_evaluations_count_once_one_is_timed():
    job = running_job()
    name = job.names[0]
    end = train_epoch(job, name, 1, 0.0, 1.0)
    job.record(Progress(name, "evaluate", 1, 3), now=end)
    train_epoch(job, name, 2, end + 4.0 - 1.0, 1.0)  # 4 s to the first step: 3 s of evaluation, then one step
    assert job.paces[name].evaluation_seconds == [pytest.approx(3.0)]
    left, measured = job.time_left(name)
    # epoch 2's steps are done; epoch 3's 10 steps, and 3 evaluations (epochs 2, 3 and the test split) left
    assert measured and left == pytest.approx(10 * 1.0 + 3 * 3.0)
    assert job.timing(name, now=23.0) == "0:22 elapsed, about 0:19 left"  # from its first event, at 1 s


@pytest.mark.parametrize("status", ["cancelled", "failed"])
def test_a_stopped_job_stops_its_clock(status):
    """A cancelled job kept counting: "epoch 1/3, evaluate · 1:06:34 elapsed, about 2:13:07 left" 45 minutes on."""
    job = running_job()
    name = job.names[0]
    end = train_epoch(job, name, 1, 0.0, 1.0)
    job.record(Progress(name, "evaluate", 1, 3), now=end)
    job.status, job.ended = status, 67.0
    assert job.timing(name, now=67.0 + 45 * 60) == "stopped after 1:06"  # from its first event, at 1 s
    assert job.timing(now=67.0 + 45 * 60) == "stopped after 1:07"


def test_a_finished_job_says_what_it_took():
    job = running_job()
    name = job.names[0]
    train_epoch(job, name, 1, 0.0, 1.0, epochs=1)
    job.record(Progress(name, "done", 1, 1), now=15.0)
    job.status, job.ended = "done", 16.0
    assert job.timing(name, now=500.0) == "took 0:14" and job.timing(now=500.0) == "took 0:16"


def test_a_jobs_runs_not_started_take_as_long_as_those_that_ended():
    job = running_job(runs=3)
    first, second, _ = job.names
    job.record(Progress(first, "train", 1, 1, 1, 10), now=5.0)
    job.record(Progress(first, "done", 1, 1), now=65.0)  # took 60 s
    job.record(Progress(second, "train", 1, 1, 1, 10), now=70.0)
    for batch in range(2, 8):
        job.record(Progress(second, "train", 1, 1, batch, 10), now=70.0 + 2 * (batch - 1))
    left, measured = job.time_left(now=82.0)
    assert left == pytest.approx(3 * 2.0 + 60.0) and not measured  # the third run as long as the first
    assert job.timing(now=82.0) == "1:22 elapsed, at least 1:06 left"


def test_before_any_run_ends_the_others_are_taken_as_long_as_the_running_one():
    job = running_job(runs=2)
    first = job.names[0]
    end = train_epoch(job, first, 1, 10.0, 1.0, epochs=2)  # loaded at 10 s, steps of 1 s
    job.record(Progress(first, "evaluate", 1, 2), now=end)
    job.record(Progress(first, "train", 2, 2, 1, 10), now=end + 3.0)  # 2 s of evaluation
    left, measured = job.time_left(first)
    assert measured and left == pytest.approx(9 * 1.0 + 2 * 2.0)
    total = (end + 3.0 - job.run_started[first]) + left  # its whole length, as estimated now
    assert job.time_left(now=end + 3.0)[0] == pytest.approx(left + total)


def test_a_skipped_run_is_not_timed():
    from peftviz.training.progress import SKIPPED

    job = running_job()
    name = job.names[0]
    job.record(Progress(name, SKIPPED, 2, 2), now=3.0)
    assert job.timing(name, now=10.0) == ""


def test_the_pace_leaves_out_loading_and_evaluation():
    pace = Pace()
    pace.observe(Progress("r", "train", 1, 2, 1, 4), 100.0)  # after 100 s of loading
    pace.observe(Progress("r", "train", 1, 2, 3, 4), 102.0)  # 2 steps in 2 s: events may skip batches
    assert (pace.steps, pace.step_seconds, pace.seconds_per_step) == (2, 2.0, 1.0)
    pace.observe(Progress("r", "evaluate", 1, 2), 103.0)
    pace.observe(Progress("r", "train", 2, 2, 1, 4), 110.0)
    assert pace.steps == 2 and pace.evaluation_seconds == [6.0]  # 7 s less the step it ends with


@pytest.mark.parametrize(
    "left, text",
    [(None, "estimating…"), ((130.0, True), "about 2:10 left"), ((130.0, False), "at least 2:10 left")],
)
def test_what_a_bar_says_of_the_time_left(left, text):
    assert left_text(left) == text


@pytest.mark.parametrize("low, high, text", [(1.6, 2.5, "1.6 to 2.5"), (27.2, 27.2, "27.2"), (27.21, 27.24, "27.2")])
def test_a_range_of_minutes_whose_ends_read_the_same_is_one_number(low, high, text):
    from peftviz.training.progress import minutes_span

    assert minutes_span(low, high) == text
