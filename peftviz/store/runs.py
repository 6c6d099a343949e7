"""The run store: one folder per training run under cache/runs/.

    config.json                 the TrainConfig, label names, parameter counts and the environment; written first
    metrics.jsonl               one JSON object per finished epoch
    predictions/epoch_<N>.npz   validation `probs` (examples × classes, float32) and `labels` (int64)
    predictions/<name>.npz      other evaluations: "test" (best epoch on test), "averaged" (heads averaged)
    params.safetensors          trained parameters of the best epoch so far (method and head; all for
                                fine-tuning); its metadata names the epoch
    resume.safetensors          the training state at the end of the last epoch (`train --resume`);
                                removed when the run completes
    summary.json                written last: status "complete" or "failed", params_epoch, test metrics
    writer.lock                 while a process writes the run: its pid and host, locked (flock) by it
                                and touched every HEARTBEAT_S; removed when the run ends

A run folder is created under a temporary name and renamed into the store with its config.json,
and every file is written to a temporary name, flushed and renamed into place, so a reader never
sees half a file or a folder without settings (`store.writer`). An epoch shows only once all its
files are in place: a run killed at any moment lists as "incomplete" with its finished epochs, and
a run whose writer is alive as "training" (`writer_alive`). Every read is checked against the
schema (`store.schema`); a folder that violates it lists as "corrupt" with the file and field
named. Nothing is read with pickle: JSON, npz with allow_pickle=False, and safetensors.

A run's config reads back as a `TrainConfig` (`Run.config`); what the run recorded besides its
settings is in `Run.record`. This module imports no torch: listing runs stays light.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from peftviz.errors import PeftvizError, RunError
from peftviz.files import remove_stale_temporaries
from peftviz.paths import store_dir
from peftviz.run_config import TrainConfig
from peftviz.store import schema
from peftviz.store.migrations import stored_config
from peftviz.store.schema import PARAMS_FILE
from peftviz.store.writer import writer_alive

if TYPE_CHECKING:
    from torch import Tensor

# a writer may finish an epoch while a reader reads its files one by one: what disagrees then is read again
READ_ATTEMPTS = 3


@dataclass
class Run:
    """A run folder as read back. `status` is one of `schema.STATUSES`; `error` says why for failed/corrupt.

    config: the run's settings (None only for a corrupt folder); record: config.json as stored, with
    what the run recorded besides its settings (label names, parameter counts, environment).
    """

    path: Path
    status: str
    config: TrainConfig | None = None
    metrics: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    error: str = ""
    record: dict = field(default_factory=dict)
    params_epoch: int | None = None  # the epoch params.safetensors holds (None: not recorded)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def label(self) -> str:
        return self.config.name if self.config else "?"

    @property
    def seed(self) -> int:
        return self.config.seed if self.config else 0

    @property
    def data_seed(self) -> int:
        """The seed of the run's split (runs from before `data_seed` existed read back with their seed)."""
        return self.config.data_seed if self.config else 0

    @property
    def method_class(self):
        return self.config.method_class

    @property
    def method_config(self):
        return self.config.method_config

    @property
    def label_names(self) -> list[str]:
        return list(self.record.get("label_names") or [])

    @property
    def parameters(self) -> dict:
        """Parameter counts as recorded at the start: backbone, method, head, total, trainable."""
        return dict(self.record.get("parameters") or {})

    @property
    def created(self) -> str:
        environment = self.record.get("environment")
        return str(environment.get("created", "")) if isinstance(environment, dict) else ""

    @property
    def imported(self) -> dict | None:
        """Where an evaluation-only run's model came from (`peftviz.exchange`); None for a run peftviz trained."""
        return self.record.get("imported")

    @property
    def recorded(self) -> dict | None:
        """A run another training loop trained and recorded (`peftviz.record`): {"by", "settings", "given"}; None else.
        It holds predictions, no parameters: what needs the model leaves it out (`has_params`)."""
        return self.record.get("recorded")

    @property
    def trained_here(self) -> bool:
        """Whether peftviz trained the run (a sweep may skip or resume it), not imported or recorded from elsewhere."""
        return self.config is not None and not self.imported and not self.recorded

    @property
    def has_params(self) -> bool:
        """Whether the run holds trained parameters: what rebuilding its model (attention, α, export) needs."""
        return self.config is not None and not self.recorded and os.path.lexists(self.params_path)

    @property
    def repeat_of(self) -> str | None:
        """The run folder this run repeats (same settings and seed, trained anew with force); None for others."""
        return self.record.get("repeat_of")

    @property
    def group_key(self) -> str:
        """Equal for runs whose settings differ only in the training seed (see `group_runs`); imported
        runs group with imported runs only, recorded runs with runs recorded alike."""
        return group_key(self.config, imported=bool(self.imported), recorded=self.recorded)

    @property
    def params_path(self) -> Path:
        return self.path / PARAMS_FILE

    @property
    def epochs_done(self) -> int:
        return len(self.metrics)

    @property
    def best_epoch(self) -> int | None:
        """The epoch with the highest validation micro-F1 (the first of ties), from the metrics."""
        return best_epoch_of(self.metrics)

    @property
    def best_metrics(self) -> dict:
        best = self.best_epoch
        return next((m for m in self.metrics if m["epoch"] == best), {})

    def predictions(self, which: int | str) -> tuple[np.ndarray, np.ndarray]:
        """(probs (N, C) float, labels (N,) int) of an epoch number or a named evaluation, checked."""
        name = schema.evaluation_name(which)
        try:
            return schema.read_predictions(self.path / "predictions" / f"{name}.npz", len(self.label_names))
        except RunError as err:
            raise RunError(f"run {self.name}: {err}") from None

    def params(self) -> dict[str, Tensor]:
        """The best epoch's trainable parameters; RunError if they belong to another epoch."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        if self.params_epoch is not None and self.params_epoch != self.best_epoch:
            raise RunError(f"run {self.name}: {PARAMS_FILE} holds epoch {self.params_epoch}, not {self.best_epoch}")
        try:
            schema.safetensors_header(self.params_path, PARAMS_FILE)
            return load_file(str(self.params_path))
        except (OSError, SafetensorError, RunError) as err:
            raise RunError(f"run {self.name}: cannot read {PARAMS_FILE}: {err}") from None


# ---------------------------------------------------------------- groups of seeds


def group_key(config: TrainConfig, imported: bool = False, recorded: dict | None = None) -> str:
    """A short hash of every setting but the training seed and the method's links to other runs (the
    one-head run a four-head tiny-attention run starts from is another run at each seed), of whether
    the run was imported (evaluated, not trained, with these settings), and of what recorded it and the
    settings it recorded besides peftviz's (a run another training loop trained: `peftviz.record`).

    The settings are normalised (`TrainConfig.key_settings`): a method option at its default is the
    same configuration whether it was stored (the Train page) or left out (the CLI). The key is
    computed when a run is read, so the runs of an existing store regroup by it; nothing is rewritten."""
    settings = config.key_settings
    if imported:
        settings["imported"] = True
    if recorded:
        settings["recorded"] = recorded
    del settings["seed"]
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


@dataclass
class Group:
    """Runs that differ only in the training seed, ordered by seed, one run per seed: one method under one
    setting. `repeats`: the group's other runs at a seed it already has (`group_runs`), not counted as seeds."""

    key: str
    runs: list[Run]
    repeats: list[Run] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.runs[0].label

    @property
    def seeds(self) -> list[int]:
        return [run.seed for run in self.runs]

    @property
    def name(self) -> str:
        """`label · N seeds · key`: unique in the store, readable in a picker."""
        count = f"{len(self.runs)} seed" + ("s" if len(self.runs) != 1 else "")
        return f"{self.label} · {count} · {self.key}"


def group_runs(runs: list[Run]) -> list[Group]:
    """Usable runs (not corrupt, at least one finished epoch) grouped by `group_key`, in store order.

    A group's seeds are distinct: of several runs with the same key and seed (a forced repeat, or a
    store from before repeats were marked), the group counts the one `original_first` puts first and
    keeps the others as `repeats`, which no mean, interval or seed count includes.
    """
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if run.status != "corrupt" and run.metrics:
            groups.setdefault(run.group_key, []).append(run)
    return [_one_per_seed(key, members) for key, members in groups.items()]


def _one_per_seed(key: str, members: list[Run]) -> Group:
    by_seed: dict[int, list[Run]] = {}
    for run in sorted(members, key=original_first):
        by_seed.setdefault(run.seed, []).append(run)
    kept = [found[0] for _, found in sorted(by_seed.items())]
    repeats = [run for _, found in sorted(by_seed.items()) for run in found[1:]]
    return Group(key, kept, repeats)


def original_first(run: Run) -> tuple:
    """The order in which runs of one configuration and seed stand for it: complete before anything else
    (a run stopped and then trained again from scratch has one finished result), unmarked before a
    marked repeat, then the furthest along, then the earliest: the run that was there first, so the
    numbers a group showed do not change when a repeat is trained."""
    return (run.status != "complete", run.repeat_of is not None, -run.epochs_done, run.created, run.name)


def load_run(path: Path) -> Run:
    """Read a run folder, checking it against the schema. Never raises for a bad folder: it comes
    back with status "corrupt" and `error` = `<file>: <field> <problem>`."""
    path = Path(path)
    if path.is_symlink():
        return Run(path, "corrupt", error="the run folder is a symbolic link; the store holds only real folders")
    record = {}
    try:
        record = schema.read_json(path / "config.json", "config.json", schema.JSON_LIMITS["config.json"])
        config = _stored_config(record)
    except RunError as err:  # a listing still sorts and names the run by what of its record reads
        return Run(path, "corrupt", error=str(err), record=schema.readable_record(record))
    for _ in range(READ_ATTEMPTS):
        seen, run = run_signature(path), Run(path, "incomplete", config, record=record)
        try:
            _read_progress(run)
            return run
        except RunError as err:
            error = str(err)
            if run_signature(path) == seen:  # nothing was written while we read: the folder itself is wrong
                break
    return Run(path, "corrupt", config, error=error, record=record)


def refreshed(run: Run) -> Run:
    """The run with its status as of now: a listing kept while its writer lived says "training";
    once the writer is gone (killed: no file of the run changes), it is "incomplete"."""
    if run.status == "training" and not writer_alive(run.path):
        return replace(run, status="incomplete")
    return run


def _stored_config(record) -> TrainConfig:
    """config.json's settings as a TrainConfig (records of earlier versions migrated: `store.migrations`) and
    its record checked; Corrupt names the setting."""
    try:
        config = stored_config(record)
    except PeftvizError as err:
        raise schema.Corrupt("config.json", str(err)) from None
    except (ValueError, TypeError) as err:  # a setting of a type no check foresaw
        raise schema.Corrupt("config.json", f"{type(err).__name__}: {err}") from None
    schema.check_record(record)
    return config


def _read_progress(run: Run) -> None:
    """Metrics, summary and parameters into `run`: the committed epochs only (see RunWriter)."""
    path, limits = run.path, schema.JSON_LIMITS
    lines = read_metrics_lines(path)
    if os.path.lexists(path / "summary.json"):
        run.summary = schema.check_summary(
            schema.read_json(path / "summary.json", "summary.json", limits["summary.json"])
        )
    if run.recorded:  # another loop trained it: no parameters; its metrics line commits an epoch
        run.metrics = lines
    else:
        has_params = os.path.lexists(path / PARAMS_FILE)
        if has_params:
            header = schema.safetensors_header(path / PARAMS_FILE, PARAMS_FILE)
            run.params_epoch = schema.stored_epoch(header, PARAMS_FILE)
        run.metrics = _committed_epochs(lines, run.params_epoch, has_params)
    if run.summary:
        _check_finished(run, lines)
    n_classes, sizes = len(run.label_names), set()
    for line in run.metrics:
        sizes.add(schema.predictions_header(path / "predictions" / f"epoch_{line['epoch']}.npz", n_classes))
    if len(sizes) > 1:
        raise schema.Corrupt("predictions", f"epochs hold different numbers of examples: {sorted(sizes)}")
    run.status = run.summary.get("status") or ("training" if writer_alive(path) else "incomplete")
    run.error = run.summary.get("error", "")


def read_metrics_lines(path: Path) -> list[dict]:
    """Every metrics line of a run folder, committed or not (what a resumed writer starts from)."""
    file = Path(path) / "metrics.jsonl"
    if not os.path.lexists(file):
        return []
    return schema.check_metrics(schema.read_json_lines(file, "metrics.jsonl", schema.JSON_LIMITS["metrics.jsonl"]))


def best_epoch_of(lines: list[dict]) -> int | None:
    """The epoch with the highest validation micro-F1, the first of ties (as the trainer keeps it)."""
    return max(lines, key=lambda m: (m["micro_f1"], -m["epoch"]))["epoch"] if lines else None


def _committed_epochs(lines: list[dict], params_epoch: int | None, has_params: bool) -> list[dict]:
    """The epochs whose predictions, metrics line and (if the best) parameters are all in place.

    The writer puts the parameters last, so a kill can leave one metrics line whose new best
    parameters never arrived: that line is not shown. Anything else that disagrees is corrupt.
    """
    if not has_params:  # the first epoch is always a new best: no parameters, no committed epoch
        if len(lines) > 1:
            raise schema.Corrupt(PARAMS_FILE, f"the file is missing, but {len(lines)} epochs finished")
        return []
    if params_epoch is None:  # a run from before the parameters recorded their epoch
        return lines
    if best_epoch_of(lines) == params_epoch:
        return lines
    if best_epoch_of(lines[:-1]) == params_epoch:
        return lines[:-1]
    raise schema.Corrupt(PARAMS_FILE, f"metadata epoch is {params_epoch}, not the best epoch {best_epoch_of(lines)}")


def _check_finished(run: Run, lines: list[dict]) -> None:
    """A summary is written after the last epoch: every epoch committed, the parameters its own."""
    stated = run.summary.get("params_epoch")
    if run.summary["status"] == "complete" and len(run.metrics) != len(lines):
        raise schema.Corrupt("summary.json", "status is complete, but the last epoch's parameters are missing")
    if stated is not None and run.params_epoch is not None and stated != run.params_epoch:
        raise schema.Corrupt(
            "summary.json", f"params_epoch is {stated}, but {PARAMS_FILE} holds epoch {run.params_epoch}"
        )


def run_signature(folder: Path) -> tuple:
    """Changes whenever the run finishes an epoch or its parameters change: a cache key for the app."""
    files = [folder / name for name in ("config.json", "metrics.jsonl", "summary.json", PARAMS_FILE)]
    return (folder.name, *(_mtime(f) for f in files))


def _mtime(path: Path) -> int:
    try:
        return path.lstat().st_mtime_ns
    except OSError:
        return 0


def store_signature(root: Path | None = None) -> tuple:
    """Changes whenever a run is added, removed, or finishes an epoch: a cache key for the app."""
    return tuple(run_signature(folder) for folder in _run_folders(root))


def _run_folders(root: Path | None) -> list[Path]:
    """The store's run folders (and links posing as folders, which `load_run` refuses), sorted by name."""
    root = Path(root or store_dir())
    try:
        entries = sorted(os.scandir(root), key=lambda entry: entry.name)
    except OSError:
        return []
    return [Path(e.path) for e in entries if not e.name.startswith(".") and (e.is_dir() or e.is_symlink())]


_cleaned: set[str] = set()


def open_store(root: Path | None = None) -> Path:
    """The store folder, with dead writers' temporary files removed once per process."""
    root = Path(root or store_dir())
    if str(root) not in _cleaned:
        remove_stale_temporaries(root, depth=3)  # the store, run folders, predictions/
        _cleaned.add(str(root))
    return root


def list_runs(root: Path | None = None) -> list[Run]:
    """Every run folder under `root` (default: `store_dir()`), oldest first."""
    runs = [load_run(folder) for folder in _run_folders(open_store(root))]
    return sorted(runs, key=lambda run: (run.created, run.name))
