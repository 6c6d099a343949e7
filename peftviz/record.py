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

Every input is checked before anything is written, and a refusal is one short line, a `RecordError`
(a `ConfigError` for the method and peftviz's settings), quoting the bad value briefly:

- `open_run`: name, model, dataset and each label name are text on one line (no control characters,
  line separators or lone surrogates), not blank, of at most 80, 4096 and 1000 characters; the name
  holds a letter or digit (a-z, 0-9), after which its folder is named; label_names a list or tuple
  of at least two distinct names; settings, options and parameters dicts whose keys are text
  (parameter names and other settings words; their values numbers within 2^64, finite floats, short
  text, true/false or null; counts integers in [0, 10^15]); device a torch device of this machine
  (a CUDA index that exists); processes a whole number in [1, 65536]; runs_dir a folder's path that
  can hold a run; and all of it small enough for config.json to be read back (the store reads 1 MB:
  50,000 short class names fit). A refused `open_run` makes no folder.
- `add_epoch`, `add_test`: labels a 1-D integer array (numpy, torch or a list of ints), their range
  checked on the array as given, before any cast, so no uint64 wraps into range; float labels are
  refused, whole ones (2.0) too, never truncated or cast; bools, strings and object arrays too.
  Scores a (N, C) array of real numbers (not bool, complex or objects; no masked values; no ragged
  lists), probs in [0, 1] with rows summing to 1, logits finite of any size (1e308 included);
  values a dict of word -> finite real (Python's or numpy's), not named as a metric of the line;
  test scores only with test labels; labels the same as the first epoch's (the same split, in the
  same order); at most 1000 epochs unless the loop gave `epochs`; an open run.

A refused epoch leaves every byte of the run as it was; the loop may go on. An epoch's cost is O(N C):
50,000 classes and 1,000 examples take seconds (benchmarks/record.py, docs/costs.md).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import fields, replace
from pathlib import Path

import numpy as np

from peftviz.data.checks import MAX_LABEL_CHARS as MAX_CLASS_NAME_CHARS
from peftviz.errors import ConfigError, PeftvizError
from peftviz.methods import EXTERNAL_PREFIX, METHODS
from peftviz.options import breaks_lines, shown
from peftviz.paths import store_dir
from peftviz.run_config import MAX_EPOCHS, MAX_LABEL_CHARS, TrainConfig
from peftviz.store import schema
from peftviz.store.runs import Run, best_epoch_of, load_run
from peftviz.store.writer import RunWriter

__all__ = ["RecordError", "Recorder", "open_run"]

# TrainConfig fields the recorder's own arguments set; the rest may come in `settings`
OWN_ARGUMENTS = ("method", "method_options", "label", "model", "dataset")
MAX_SOURCE_CHARS = 4096  # model, dataset: a hub id or a path (PATH_MAX on Linux)
MAX_PROCESSES = 65536  # processes of one data-parallel run: the largest trainings use some 10^4 GPUs
MAX_ERROR_CHARS = 1000  # the line `fail` stores beside a failed run: a sentence, not a log


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
    _check_text(name, "name", MAX_LABEL_CHARS)
    if not re.search("[a-z0-9]", name.lower()):  # the folder is named after it (`store.writer`: its a-z0-9 runs)
        raise RecordError(f"name must hold a letter or digit (a-z, 0-9), which name its folder; not {shown(name)}")
    for value, argument in ((model, "model"), (dataset, "dataset")):
        _check_text(value, argument, MAX_SOURCE_CHARS)
    settings, options, parameters = _mapping(settings, "settings"), _mapping(options, "options"), _counts(parameters)
    names, root = _label_names(label_names), _runs_dir(runs_dir)
    config, extra = _config(name, method, model, dataset, settings, options)
    given = sorted(set(settings) - set(extra) | {"epochs"})  # epochs: the plan, or the epochs recorded
    recorded = {"by": by, "settings": extra, "given": given}
    record = {
        "label_names": names,
        "parameters": parameters,
        "environment": _environment(device, processes),
        "recorded": recorded,
    }
    try:
        schema.check_record(record)
    except schema.Corrupt as err:
        raise RecordError(str(err).removeprefix("config.json: ")) from None
    _check_config_size(config, record)
    try:
        writer = RunWriter.create(root, config, record)
    except OSError as err:  # a file where the folder should be, no permission: refused before the folder exists
        raise RecordError(f"runs_dir {shown(str(root))} cannot hold a run: {err.strerror or err}") from None
    return Recorder(writer, config, names, planned="epochs" in settings)


def _check_text(value, argument: str, limit: int) -> str:
    """A name that lists and tables show: text of 1 to `limit` characters, on one line."""
    if not isinstance(value, str):
        raise RecordError(f"{argument} must be text, not {shown(value)}")
    if not value.strip() or len(value) > limit:
        raise RecordError(
            f"{argument} must be 1 to {limit} characters (not only spaces), not {len(value)}: {shown(value)}"
        )
    if breaks_lines(value):
        raise RecordError(f"{argument} must be one line of text, without control characters: {shown(value)}")
    return value


def _mapping(value, argument: str) -> dict:
    """settings, options: None or a dict whose keys are text (a copy: the caller's dict is not kept)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise RecordError(f"{argument} must be a dict of name -> value, names as text; not {shown(value)}")
    return dict(value)


def _counts(parameters) -> dict:
    """parameters: name (a word) -> count; the counts are checked with the record (`schema.counts`)."""
    counts = _mapping(parameters, "parameters")
    for key in counts:
        if not schema.SETTING_NAME.fullmatch(key):
            raise RecordError(f"parameters may not be named {shown(key)}: names are words (letters, digits, _ . -)")
    return counts


def _label_names(label_names) -> list:
    """The classes, each one line of text; >= 2 distinct is checked with the record (`schema`)."""
    if not isinstance(label_names, (list, tuple)) or not all(isinstance(name, str) for name in label_names):
        raise RecordError(f"label_names must be a list of strings, not {shown(label_names)}")
    for index, name in enumerate(label_names):
        _check_text(name, f"label_names[{index}]", MAX_CLASS_NAME_CHARS)
    return list(label_names)


def _runs_dir(runs_dir) -> Path:
    """The store: `PEFTVIZ_RUNS` or cache/runs by default, else a folder's path (made if it does not exist)."""
    if runs_dir is None:
        return Path(store_dir())
    text = os.fspath(runs_dir) if isinstance(runs_dir, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text or "\0" in text:
        raise RecordError(f"runs_dir must be a folder's path, not {shown(runs_dir)}")
    return Path(text)


def _check_config_size(config: TrainConfig, record: dict) -> None:
    """config.json as the writer writes it must fit the store's limit, or the run would read back as corrupt."""
    size = len(json.dumps({**config.to_dict(), **record}, indent=2, default=float))  # ASCII: characters are bytes
    limit = schema.JSON_LIMITS["config.json"]
    if size > limit:
        raise RecordError(f"label_names and settings make config.json {size} bytes; the store reads at most {limit}")


def _config(
    name: str, method: str, model: str, dataset: str, settings: dict, options: dict
) -> tuple[TrainConfig, dict]:
    """The run's TrainConfig and the settings peftviz has no field for."""
    if not isinstance(method, str) or not method or len(method) > MAX_LABEL_CHARS:
        raise ConfigError(f"method must be a name of at most {MAX_LABEL_CHARS} characters, not {shown(method)}")
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


def _environment(device, processes) -> dict:
    """What config.json records of where the run was made, as for a run peftviz trains: the device (a torch
    device of this machine, whose name it records) and the number of processes."""
    from peftviz.training.trainer import environment

    if isinstance(processes, bool) or not isinstance(processes, int) or not 1 <= processes <= MAX_PROCESSES:
        raise RecordError(f"processes must be a whole number in [1, {MAX_PROCESSES}], not {shown(processes)}")
    return environment(_device(device), processes)


def _device(device):
    """A torch.device, from one or from what torch.device reads (cpu, cuda, cuda:0), present on this machine."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise RecordError(f"device must be a torch device such as cpu, cuda or cuda:0, not {shown(device)}") from None
    written = device.rpartition(":")[2] if isinstance(device, str) else str(device)  # the index as given
    if written.isdigit() and int(written) != parsed.index:  # torch keeps 8 bits of it: cuda:256 reads as cuda:0
        raise RecordError(f"device {shown(device)} reads as {parsed} in torch, whose CUDA indices stop at 127")
    present = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if parsed.type == "cuda" and (parsed.index or 0) >= present:
        raise RecordError(
            f"device {shown(str(parsed))} is not on this machine ({present} CUDA devices); "
            "give the device the loop trains on"
        )
    return parsed


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
        if not self._planned and epoch > MAX_EPOCHS:
            raise RecordError(f"epoch {epoch}: a run holds at most {MAX_EPOCHS} epochs; open a new run to record more")
        if test_labels is None and (test_probs is not None or test_logits is not None):
            raise RecordError(f"epoch {epoch}, test: test_probs or test_logits given without test_labels")
        values = _values(values, epoch)
        stored, labels, exact = self._split("validation", labels, probs, logits, epoch)
        test = None if test_labels is None else self._split("test", test_labels, test_probs, test_logits, epoch)[:2]
        line = self._metrics_line(epoch, exact, labels, values)
        self._commit(epoch, line, (stored, labels), test)
        return line

    def add_test(self, labels, probs=None, *, logits=None) -> None:
        """Record the test split of the last recorded epoch, where it comes after the epoch (a loop that
        evaluates validation first). RecordError, with nothing written, for any bad input."""
        self._check_open()
        if not self.epochs:
            raise RecordError("no epoch recorded yet: add_test records the test split of the last epoch")
        test = self._split("test", labels, probs, logits, self.epochs)[:2]
        self._add_test(self.epochs, test)

    def _split(self, split: str, labels, probs, logits, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(probs (N, C) float32 as stored, labels (N,) int64, the stored probs in float64) of one split, every
        check passed. The float64 copy is the metrics' input (what they would cast the float32 to), made in
        the array the checks used: at 50,000 classes each fresh (N, C) array costs a noticeable share."""
        where, n_classes = f"epoch {epoch}, {split}", len(self.label_names)
        if (probs is None) == (logits is None):
            raise RecordError(f"{where}: give probs or logits, not {'both' if probs is not None else 'neither'}")
        labels = _labels_array(labels, where, n_classes)
        kind = "probs" if logits is None else "logits"
        scores = _float_array(probs if logits is None else logits, where, kind)
        if scores.ndim != 2 or scores.shape[1] != n_classes or len(scores) != len(labels) or not len(labels):
            raise RecordError(
                f"{where}: {kind} must be (examples, {n_classes}) "
                f"for {len(labels)} labels and {n_classes} label names, not {scores.shape}"
            )
        # the softmax of finite logits is finite, in [0, 1], its rows sum to 1 within C * 1e-16; probs are checked
        problem = schema.predictions_problem(scores, labels, n_classes) if logits is None else _softmax(scores)
        if problem:
            raise RecordError(f"{where}: {problem}")
        first = self._labels.get(split)
        if first is not None and not np.array_equal(first, labels):
            changed = (
                f"{len(labels)} labels, not {len(first)}"
                if len(first) != len(labels)
                else f"{int((first != labels).sum())} of {len(labels)} labels differ"
            )
            raise RecordError(
                f"{where}: {changed} from epoch 1's; record the same split, in the same order, every epoch"
            )
        stored = scores.astype(np.float32)
        np.copyto(scores, stored)  # scores is the recorder's own copy (`_float_array`)
        return stored, labels, scores

    def _metrics_line(self, epoch: int, probs: np.ndarray, labels: np.ndarray, values: dict[str, float]) -> dict:
        from peftviz.training.inference import evaluation_metrics

        metrics = evaluation_metrics(probs, labels, self.config.ece_bins)
        return {"epoch": epoch, **metrics, **values}

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
        line = str(error).strip().splitlines()[0] if str(error).strip() else "failed"
        self.writer.fail(line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 3] + "...")
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


def _values(values, epoch: int) -> dict[str, float]:
    """The epoch's other numbers: name (a word, not a metric's) -> a finite float (Python or numpy reals)."""
    from peftviz.training.inference import EPOCH_METRICS

    if values is None:
        return {}
    if not isinstance(values, dict):
        raise RecordError(f"epoch {epoch}: values must be a dict of name -> number, not {shown(values)}")
    checked, taken = {}, {*EPOCH_METRICS, "n", "epoch"}  # the names of the metrics line's own numbers
    for name, value in values.items():
        if not (isinstance(name, str) and schema.SETTING_NAME.fullmatch(name)) or name in taken:
            raise RecordError(
                f"epoch {epoch}: values may not be named {shown(name)} (a metric peftviz computes, or not a word)"
            )
        number = _finite(value)
        if number is None:
            raise RecordError(f"epoch {epoch}: values[{name!r}] must be a finite number, not {shown(value)}")
        checked[name] = number
    return checked


def _finite(value) -> float | None:
    """A real number (int, float, numpy's; not a bool) as a finite float, else None (NaN, inf, 10**400)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if np.isfinite(number) else None


def _labels_array(labels, where: str, n_classes: int) -> np.ndarray:
    """(N,) int64 class ids. Integer arrays only: floats are refused, whole ones too (2.0), never cast, since a
    float array handed as labels is more often probabilities or a target than ids. The range is checked on
    the array as given, before the cast, so no uint64 wraps into range."""
    array = _numpy(labels, where, "labels")
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise RecordError(
            f"{where}: labels must be a 1-D array of class ids (integers), not {array.dtype} {array.shape}"
        )
    low, high = (array.min(), array.max()) if len(array) else (0, 0)  # no labels: refused with the shapes
    if low < 0 or high >= n_classes:
        raise RecordError(f"{where}: labels must be class ids 0..{n_classes - 1}; found {low} to {high}")
    return array.astype(np.int64)


def _float_array(scores, where: str, kind: str) -> np.ndarray:
    """Scores as a new float64 array: the recorder's own copy, which the softmax and `_split` work in."""
    array = _numpy(scores, where, kind)
    if array.dtype.kind not in "fiu":
        raise RecordError(f"{where}: {kind} must be numbers, not {array.dtype}")
    return array.astype(np.float64)


def _numpy(value, where: str, what: str) -> np.ndarray:
    """numpy from a torch tensor (any device; 16-bit and 8-bit floats through float32, others as they are) or
    anything array-like. RecordError for what has no plain array (ragged lists, meta tensors, masked values)."""
    if np.ma.isMaskedArray(value) and np.ma.count_masked(value):
        raise RecordError(f"{where}: {what} has {np.ma.count_masked(value)} masked values; give them all")
    try:
        if hasattr(value, "detach"):
            value = value.detach()
            value = value.float() if value.is_floating_point() and value.element_size() < 4 else value
            value = value.cpu().numpy()
        return np.asarray(value)
    except (ValueError, TypeError, AttributeError, RuntimeError, NotImplementedError) as err:
        raise RecordError(
            f"{where}: {what} is not an array of numbers ({type(err).__name__}: {shown(str(err))})"
        ) from None


def _softmax(logits: np.ndarray) -> str | None:
    """Turn logits (N, C) into probabilities in place (the array is the recorder's copy); what is wrong, if any."""
    if not np.isfinite(logits).all():
        return f"logits must be finite; {np.count_nonzero(~np.isfinite(logits))} are NaN or inf"
    with np.errstate(over="ignore"):  # a gap beyond float64 (1e308 - -1e308) is -inf: exp gives its 0 exactly
        logits -= logits.max(axis=1, keepdims=True)  # stable: the largest is exp(0) = 1
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=1, keepdims=True)
    return None
