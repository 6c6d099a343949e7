"""Progress of training, as events: the `Progress` record the trainer sends, and a terminal bar drawn from them.

The trainer (`peftviz.train`) calls a `ProgressCallback` with one `Progress` per batch, evaluation and
finished run; the CLI draws them with `TerminalProgress`, the app's job queue (`peftviz.jobs`) keeps the
latest for its bars, and a training child process (`peftviz.worker`) sends them to its parent as JSON
lines. This module imports no torch and no tqdm at import time, so the app can use it without the trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Progress:
    run: str  # the run's display name
    phase: str  # "train", "evaluate" or "done"
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
