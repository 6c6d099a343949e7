"""A terminal progress bar drawn from the trainer's Progress events."""

from __future__ import annotations

from tqdm.auto import tqdm


class TerminalProgress:
    """One tqdm bar per run and epoch, with the running loss; a line per finished run."""

    def __init__(self):
        self.bar = None

    def __call__(self, event) -> None:
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
