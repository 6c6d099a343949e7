"""Record a run from any training loop into the run store, so that every page and `report` read its
calibration epoch by epoch like a run peftviz trained.

    from peftviz.record import open_run

    with open_run("my-lora", method="lora", model="bert-base-uncased", dataset="sst2",
                  label_names=["negative", "positive"], settings={"learning_rate": 2e-4}) as run:
        for epoch in range(3):
            train_one_epoch()
            run.add_epoch(val_labels, logits=val_logits)          # or probs=; test_labels/test_logits too
    # closed: the run lists as complete, with 3 epochs

The run folder is the store's own (`store.runs`): written by `RunWriter`, every file atomically, with
the writer's lock held while the run is open, so it lists as "training", and as "incomplete" (its
recorded epochs shown) if the process dies before `close`. An epoch's files go in the order the
store reads them: validation predictions, test predictions, then the metrics line that commits the
epoch. Its metrics are the trainer's (`training.inference.evaluation_metrics`): one source per metric.

What a run holds: config.json, a `TrainConfig` (the method if peftviz has it, with its options
checked, else `external:<method>`; the settings peftviz knows, such as learning_rate and seed) and
`recorded`: who recorded it, the loop's other settings, and which of the TrainConfig's settings the
loop gave (`given`): the others keep peftviz's defaults, which describe nothing of the run, and no
label or table names them. No parameters: pages that rebuild the
model (attention, α, tiny-attention heads) and `export` leave recorded runs out.

Every input is checked before anything is written, and a refusal is one `RecordError` line: wrong
shapes, NaN or inf, probabilities outside [0, 1] or rows that do not sum to 1, labels out of range,
labels that differ from the first epoch's (another split, or another order), a closed run. A
refused epoch leaves the run as it was; the loop may go on.
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import numpy as np

from peftviz.errors import ConfigError, PeftvizError
from peftviz.methods import EXTERNAL_PREFIX, METHODS
from peftviz.paths import store_dir
from peftviz.store import schema
from peftviz.store.runs import Run, best_epoch_of, load_run
from peftviz.store.writer import RunWriter
from peftviz.training.config import TrainConfig

__all__ = ["RecordError", "Recorder", "open_run"]

# TrainConfig fields the recorder's own arguments set; the rest may come in `settings`
OWN_ARGUMENTS = ("method", "method_options", "label", "model", "dataset")


class RecordError(PeftvizError, ValueError):
    """Something handed to a recorder that the store must not hold; nothing of it was written."""


def open_run(
    name: str,
    *,
    method: str,
    model: str,
    dataset: str,
    label_names: list[str],
    settings: dict | None = None,
    options: dict | None = None,
    parameters: dict[str, int] | None = None,
    runs_dir: Path | str | None = None,
    device: str = "cpu",
    processes: int = 1,
    by: str = "recorder",
) -> Recorder:
    """Open a run in the store (`runs_dir`, default `PEFTVIZ_RUNS` or cache/runs) and return its recorder.

    name: the run's label in every list. method: a peftviz method (`lora`, `peft:<TYPE>`), whose
    `options` are then checked as its own, or any other name, stored as `external:<method>`. model,
    dataset: what the run describes (names, not loaded). label_names: the classes, in the order of
    the probabilities' columns. settings: the loop's settings; those peftviz has (learning_rate,
    epochs, seed, batch_size, ...) are checked as peftviz's, the rest kept as given (numbers, text,
    true/false). parameters: counts such as {"trainable": ..., "total": ...}. device, processes: where it trained.
    Raises ConfigError/RecordError (one line) before any folder exists."""
    config, extra = _config(name, method, model, dataset, dict(settings or {}), dict(options or {}))
    names = list(label_names) if isinstance(label_names, (list, tuple)) else label_names  # checked with the record
    given = sorted(set(settings or {}) - set(extra) | {"epochs"})  # epochs: the plan, or the epochs recorded
    recorded = {"by": by, "settings": extra, "given": given}
    record = {"label_names": names, "parameters": dict(parameters or {}), "environment": _environment(device, processes),
              "recorded": recorded}  # fmt: skip
    try:
        schema.check_record(record)
    except schema.Corrupt as err:
        raise RecordError(str(err).removeprefix("config.json: ")) from None
    writer = RunWriter.create(Path(runs_dir or store_dir()), config, record)
    return Recorder(writer, config, names, planned="epochs" in (settings or {}))


def _config(
    name: str, method: str, model: str, dataset: str, settings: dict, options: dict
) -> tuple[TrainConfig, dict]:
    """The run's TrainConfig and the settings peftviz has no field for."""
    if not isinstance(method, str) or not method:
        raise ConfigError(f"method must be a name, not {method!r}")
    # registered, peft:<TYPE> or external:<name> (checked as such, never prefixed twice); else the loop's own
    if method not in METHODS and not method.startswith(EXTERNAL_PREFIX):
        method = f"{EXTERNAL_PREFIX}{method}"
    if method.startswith(EXTERNAL_PREFIX) and options:
        raise ConfigError(f"{method} is not a peftviz method: its options go in settings, not options")
    known = {f.name for f in fields(TrainConfig)} - set(OWN_ARGUMENTS)
    given = {key: value for key, value in settings.items() if key in known}
    extra = {key: value for key, value in settings.items() if key not in known}
    if any(key in OWN_ARGUMENTS for key in extra):
        raise ConfigError(
            f"settings may not set {', '.join(k for k in extra if k in OWN_ARGUMENTS)}: open_run names them"
        )
    given.setdefault("epochs", 1)  # no plan given: the epochs recorded (`Recorder` counts them up)
    config = TrainConfig(method=method, method_options=options, label=name, model=model, dataset=dataset, **given)
    try:
        schema.check_recorded_settings(extra, "settings", "settings")
    except schema.Corrupt as err:
        raise ConfigError(str(err).removeprefix("settings: ")) from None
    return config, extra


def _environment(device: str, processes: int) -> dict:
    """What config.json records of where the run was made, as for a run peftviz trains."""
    import torch

    from peftviz.training.trainer import environment

    return environment(torch.device(device), processes)


class Recorder:
    """An open run: `add_epoch` per validation evaluation, then `close` (or `fail`). A context manager
    closes it on leaving; an exception leaves it incomplete (its recorded epochs kept), as a killed loop."""

    def __init__(self, writer: RunWriter, config: TrainConfig, label_names: list[str], planned: bool):
        self.writer, self.config, self.label_names = writer, config, label_names
        self._planned = planned  # the loop said how many epochs it trains; else config.epochs counts up
        self._labels: dict[str, np.ndarray] = {}  # split -> the first epoch's labels: every epoch's must match
        self._best_test: tuple[np.ndarray, np.ndarray] | None = None
        self.last_validation: tuple[np.ndarray, np.ndarray] | None = (
            None  # (probs, labels) as the last epoch stored them
        )
        self._closed = False

    @property
    def path(self) -> Path:
        return self.writer.path

    @property
    def epochs(self) -> int:
        """Epochs recorded so far."""
        return len(self.writer.metrics)

    @property
    def closed(self) -> bool:
        return self._closed

    def add_epoch(
        self,
        labels,
        probs=None,
        *,
        logits=None,
        test_labels=None,
        test_probs=None,
        test_logits=None,
        values: dict | None = None,
    ) -> dict:
        """Record one validation evaluation: labels (N,) and probs (N, C) or logits (N, C), numpy or torch;
        the test split's alike where there is one; values: other numbers of the epoch (train_loss, step).
        Returns the metrics line written. RecordError, with nothing written, for any bad input."""
        self._check_open()
        epoch = self.epochs + 1
        validation = self._split("validation", labels, probs, logits, epoch)
        test = None if test_labels is None else self._split("test", test_labels, test_probs, test_logits, epoch)
        line = self._metrics_line(epoch, validation, values)
        self._commit(epoch, line, validation, test)
        return line

    def add_test(self, labels, probs=None, *, logits=None) -> None:
        """Record the test split of the last recorded epoch, where it comes after the epoch (a loop that
        evaluates validation first). RecordError, with nothing written, for any bad input."""
        self._check_open()
        if not self.epochs:
            raise RecordError("no epoch recorded yet: add_test records the test split of the last epoch")
        test = self._split("test", labels, probs, logits, self.epochs)
        self._add_test(self.epochs, test)

    def _split(self, split: str, labels, probs, logits, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(probs (N, C) float32, labels (N,) int64) of one split, every check passed."""
        if (probs is None) == (logits is None):
            raise RecordError(
                f"epoch {epoch}, {split}: give probs or logits, not {'both' if probs is not None else 'neither'}"
            )
        labels = _labels_array(labels, f"epoch {epoch}, {split}")
        scores = _float_array(probs if probs is not None else logits, f"epoch {epoch}, {split}")
        where, n_classes = f"epoch {epoch}, {split}", len(self.label_names)
        if scores.ndim != 2 or scores.shape[1] != n_classes or len(scores) != len(labels) or not len(labels):
            raise RecordError(f"{where}: {'probs' if logits is None else 'logits'} must be (examples, {n_classes}) "
                              f"for {len(labels)} labels and {n_classes} label names, not {scores.shape}")  # fmt: skip
        if logits is not None:
            scores = _softmax(scores, where)
        problem = schema.predictions_problem(scores, labels, n_classes)
        if problem:
            raise RecordError(f"{where}: {problem}")
        first = self._labels.get(split)
        if first is not None and not np.array_equal(first, labels):
            changed = f"{len(labels)} labels, not {len(first)}" if len(first) != len(labels) else \
                f"{int((first != labels).sum())} of {len(labels)} labels differ"  # fmt: skip
            raise RecordError(
                f"{where}: {changed} from epoch 1's; record the same split, in the same order, every epoch"
            )
        return scores.astype(np.float32), labels

    def _metrics_line(self, epoch: int, validation, values: dict | None) -> dict:
        from peftviz.training.inference import evaluation_metrics

        metrics = evaluation_metrics(*validation, self.config.ece_bins)
        values = dict(values or {})
        for name, value in values.items():
            if (
                not (isinstance(name, str) and schema.SETTING_NAME.fullmatch(name))
                or name in metrics
                or name == "epoch"
            ):
                raise RecordError(
                    f"epoch {epoch}: values may not be named {name!r} (a metric peftviz computes, or not a word)"
                )
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise RecordError(f"epoch {epoch}: values[{name!r}] must be a finite number, not {value!r}")
        return {"epoch": epoch, **metrics, **{name: float(value) for name, value in values.items()}}

    def _commit(self, epoch: int, line: dict, validation, test) -> None:
        """Files in the store's order: test predictions, then the epoch (its predictions, then its line)."""
        if not self._planned and epoch > self.config.epochs:
            self._set_epochs(epoch)
        if test is not None:
            self.writer.write_predictions(f"epoch_{epoch}_test", *test)
        self.writer.write_epoch(line, *validation)
        self.last_validation = validation
        self._labels.setdefault("validation", validation[1])
        if test is not None:
            self._add_test(epoch, test, written=True)

    def _add_test(self, epoch: int, test, written: bool = False) -> None:
        if not written:
            self.writer.write_predictions(f"epoch_{epoch}_test", *test)
        self._labels.setdefault("test", test[1])
        if best_epoch_of(self.writer.metrics) == epoch:  # the test split of the best epoch: the run's test
            self._best_test = test

    def _set_epochs(self, epochs: int) -> None:
        self.config = replace(self.config, epochs=epochs)
        self.writer.update_config({"epochs": epochs})

    def close(self) -> Run:
        """The run ends complete: summary.json with the test metrics of the best epoch (highest validation
        accuracy, the first of ties, as the trainer picks it). Returns the run as the store reads it."""
        self._check_open()
        if not self.epochs:
            return self.fail("closed before any epoch was recorded")
        summary = {}
        if self._best_test is not None:
            from peftviz.training.inference import evaluation_metrics

            self.writer.write_predictions("test", *self._best_test)
            summary["test"] = evaluation_metrics(*self._best_test, self.config.ece_bins)
        self.writer.finish(summary)
        self._closed = True
        return load_run(self.path)

    def fail(self, error: str) -> Run:
        """The run ends failed (say, the loss became NaN), with `error` shown beside it; its epochs are kept."""
        self._check_open()
        self.writer.fail(str(error).splitlines()[0] if str(error).strip() else "failed")
        self._closed = True
        return load_run(self.path)

    def abandon(self) -> None:
        """Stop writing without a summary: the run lists as incomplete, as if the process had been killed."""
        if not self._closed:
            self.writer.close()
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RecordError(f"run {self.path.name} is closed; open a new run to record more")

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            if not self._closed:
                self.close()
        else:
            self.abandon()


def _labels_array(labels, where: str) -> np.ndarray:
    array = _numpy(labels)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise RecordError(
            f"{where}: labels must be a 1-D array of class ids (integers), not {array.dtype} {array.shape}"
        )
    return array.astype(np.int64)


def _float_array(scores, where: str) -> np.ndarray:
    array = _numpy(scores)
    if array.dtype.kind not in "fiu":
        raise RecordError(f"{where}: scores must be numbers, not {array.dtype}")
    return array.astype(np.float64)


def _numpy(value) -> np.ndarray:
    """numpy from a torch tensor (any device or dtype; bf16 through float32) or anything array-like."""
    if hasattr(value, "detach"):
        value = value.detach()
        value = value.float() if value.is_floating_point() else value
        value = value.cpu().numpy()
    return np.asarray(value)


def _softmax(logits: np.ndarray, where: str) -> np.ndarray:
    if not np.isfinite(logits).all():
        raise RecordError(f"{where}: logits must be finite; {np.count_nonzero(~np.isfinite(logits))} are NaN or inf")
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))  # (N, C), stable
    return shifted / shifted.sum(axis=1, keepdims=True)
