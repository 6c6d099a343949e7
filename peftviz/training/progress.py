"""Progress of training, as events: the `Progress` record the trainer sends, and a terminal bar drawn from them.

The trainer (`peftviz.training.trainer`) calls a `ProgressCallback` with one `Progress` per batch, evaluation and
finished run; the CLI draws them with `TerminalProgress`, the app's job queue (`peftviz.app.jobs`) keeps the
latest for its bars, and a training child process (`peftviz.app.worker`) sends them to its parent as JSON
lines. This module imports no torch and no tqdm at import time, so the app can use it without the trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

SKIPPED = "already complete"  # the phase of a run a sweep skipped: the store holds it complete (`peftviz.sweep.plan`)
ENDED = ("done", SKIPPED)  # the phases after which a run sends no more events


@dataclass
class Progress:
    run: str  # the run's display name
    phase: str  # "train", "evaluate" or "done"; SKIPPED for a run not trained again
    epoch: int
    epochs: int
    batch: int = 0  # batches done in this epoch
    batches: int = 0  # batches per epoch
    loss: float | None = None  # running mean training loss of this epoch


ProgressCallback = Callable[[Progress], None]


class TerminalProgress:
    """One tqdm bar per run and epoch, with the running loss; a line per finished run."""

    def __init__(self):
        self.bar = None

    def __call__(self, event: Progress) -> None:
        from tqdm.auto import tqdm  # here: importing this module stays light

        if event.phase == "train":
            if self.bar is None:
                self.bar = tqdm(
                    total=event.batches, desc=f"{event.run} epoch {event.epoch}/{event.epochs}", leave=False
                )
            self.bar.n = event.batch
            self.bar.set_postfix(loss=f"{event.loss:.3f}", refresh=False)
            self.bar.refresh()
        elif self.bar is not None:
            self.bar.close()
            self.bar = None
        if event.phase == "done":
            tqdm.write(f"{event.run}: done")


class TerminalSweep:
    """One bar over a sweep (runs done of all; running, failed; time left) and a line per finished run."""

    def __init__(self):
        self.bar = None
        self.shown = 0  # finished runs already given their line

    def __call__(self, counts) -> None:  # a `sweep.SweepProgress`
        from tqdm.auto import tqdm  # here: importing this module stays light

        if self.bar is None:
            self.bar = tqdm(total=counts.total, desc="sweep", unit="run", position=0)
        for outcome in counts.finished[self.shown :]:
            self.bar.write(finished_line(outcome))
        self.shown = len(counts.finished)
        self.bar.n = counts.done
        self.bar.set_postfix(running=counts.running, failed=counts.failed, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def finished_line(outcome) -> str:
    """`<run title>: <status> …` for one finished configuration of a sweep (a `sweep.Outcome`)."""
    title = outcome.planned.config.run_title
    if outcome.run is None:
        return f"{title}: failed: {outcome.error}"
    run, verb = (
        outcome.run,
        {"skip": "already complete", "resume": "resumed", "train": "trained"}[outcome.planned.action],
    )
    attempts = run.record.get("attempts") or [{}]
    where = f"{attempts[-1].get('engine', '?')} on {attempts[-1].get('node', '?')}"
    accuracy = run.best_metrics.get("accuracy")
    result = f", best val accuracy {accuracy:.3f}" if accuracy is not None else ""
    return f"{title}: {run.status} ({verb}, {where}, {run.epochs_done}/{run.config.epochs} epochs{result})"


# ---------------------------------------------------------------- time left, from measured steps

MEASURED_STEPS = 5  # training steps timed before a run's time left is estimated


@dataclass
class Pace:
    """What a run's events measured of its speed, as they arrived (times in seconds, from any clock):
    the time of its training steps (between two events of one epoch, so loading the model and data and
    evaluating are left out) and of its evaluations (from an "evaluate" event to the next epoch's first
    step, less that step)."""

    step_seconds: float = 0.0  # summed over the steps timed
    steps: int = 0  # training steps timed
    evaluation_seconds: list[float] = field(default_factory=list)  # one per evaluation timed
    batches: int = 0  # training steps per epoch, from the latest train event ("evaluate" events carry none)
    last: Progress | None = None
    last_at: float = 0.0

    def observe(self, event: Progress, now: float) -> None:
        """Take one event received at `now`."""
        last = self.last
        if last is not None and event.phase == "train":
            if last.phase == "train" and last.epoch == event.epoch and event.batch > last.batch:
                self.step_seconds += now - self.last_at
                self.steps += event.batch - last.batch
            elif last.phase == "evaluate":  # the evaluation, then this epoch's first step(s)
                self.evaluation_seconds.append(max(0.0, now - self.last_at - self.seconds_per_step * event.batch))
        if event.phase == "train":
            self.batches = event.batches
        self.last, self.last_at = event, now

    @property
    def seconds_per_step(self) -> float:
        return self.step_seconds / self.steps if self.steps else 0.0

    def seconds_left(self) -> tuple[float, bool] | None:
        """(seconds left, whether evaluations are counted in them) from the latest event; None until
        MEASURED_STEPS steps are timed. Without a timed evaluation the seconds are a lower bound."""
        event = self.last
        if event is None or event.phase not in ("train", "evaluate") or self.steps < MEASURED_STEPS:
            return None
        done_in_epoch = event.batch if event.phase == "train" else self.batches
        steps_left = (event.epochs - event.epoch + 1) * self.batches - done_in_epoch
        evaluations_left = event.epochs - event.epoch + 2  # this epoch's on, and the test split's at the end
        measured = bool(self.evaluation_seconds)
        evaluation = sum(self.evaluation_seconds) / len(self.evaluation_seconds) if measured else 0.0
        return steps_left * self.seconds_per_step + evaluations_left * evaluation, measured


def minutes_span(low: float, high: float) -> str:
    """ "1.6 to 2.5" minutes, or one number where both ends read the same ("27.2", not "27.2 to 27.2")."""
    low_text, high_text = f"{low:.1f}", f"{high:.1f}"
    return low_text if low_text == high_text else f"{low_text} to {high_text}"
