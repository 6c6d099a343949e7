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
