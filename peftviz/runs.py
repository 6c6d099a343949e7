"""The run store: one folder per training run under cache/runs/.

    config.json                 the TrainConfig, label names, parameter counts and the environment; written first
    metrics.jsonl               one JSON object per finished epoch
    predictions/epoch_<N>.npz   validation `probs` (examples × classes, float32) and `labels` (int64)
    predictions/<name>.npz      other evaluations: "test" (best epoch on test), "averaged" (heads averaged)
    params.safetensors          trained parameters of the best epoch so far (method and head; all for fine-tuning)
    summary.json                written last: status "complete" or "failed", best epoch, test metrics

Every file is written to a temporary name and renamed into place, so a reader never sees half a
file. A run killed mid-way has no summary.json: it lists as "incomplete" and its finished epochs
load. Nothing is read with pickle: JSON, npz with allow_pickle=False, and safetensors.

A run's config reads back as a `TrainConfig` (`Run.config`); what the run recorded besides its
settings is in `Run.record`. This module imports no torch: listing runs stays light.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from peftviz.config import TrainConfig
from peftviz.errors import PeftvizError, RunError
from peftviz.paths import store_dir

if TYPE_CHECKING:
    from torch import Tensor

STATUSES = ("complete", "incomplete", "failed", "corrupt")
__all__ = ["Group", "Run", "RunError", "RunWriter", "atomic_write", "group_runs", "list_runs", "load_run", "store_dir"]


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through `write(tmp_path)`, then rename over `path`: readers see the old or the new file."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_json(path: Path, value) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(value, indent=2, default=float)))


def _write_npz(path: Path, probs: np.ndarray, labels: np.ndarray) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a path
            np.savez(f, probs=probs, labels=labels)

    atomic_write(path, write)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


class RunWriter:
    """Writes one run folder as training goes."""

    def __init__(self, path: Path):
        self.path = path
        self.metrics: list[dict] = []

    @classmethod
    def create(cls, root: Path, config: TrainConfig, recorded: dict) -> RunWriter:
        """A new run folder; config.json holds the settings and `recorded` (label names, parameters, environment)."""
        name = f"{_slug(config.name)}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        path = Path(root) / name
        (path / "predictions").mkdir(parents=True)
        _write_json(path / "config.json", {**config.to_dict(), **recorded})
        return cls(path)

    def write_epoch(self, record: dict, probs: np.ndarray, labels: np.ndarray) -> None:
        """Predictions first, then the metrics line: a listed epoch always has its predictions."""
        self.write_predictions(f"epoch_{record['epoch']}", probs, labels)
        self.metrics.append(record)
        lines = "".join(json.dumps(m, default=float) + "\n" for m in self.metrics)
        atomic_write(self.path / "metrics.jsonl", lambda tmp: tmp.write_text(lines))

    def write_predictions(self, name: str, probs: np.ndarray, labels: np.ndarray) -> None:
        _write_npz(self.path / "predictions" / f"{name}.npz", probs, labels)

    def write_params(self, state: dict[str, Tensor]) -> None:
        from safetensors.torch import save_file

        tensors = {name: t.detach().cpu().contiguous() for name, t in state.items()}
        atomic_write(self.path / "params.safetensors", lambda tmp: save_file(tensors, str(tmp)))

    def finish(self, summary: dict) -> None:
        _write_json(self.path / "summary.json", {"status": "complete", **summary})

    def fail(self, error: str, summary: dict | None = None) -> None:
        _write_json(self.path / "summary.json", {"status": "failed", "error": error, **(summary or {})})


@dataclass
class Run:
    """A run folder as read back. `status` is one of STATUSES; `error` says why for failed/corrupt.

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
    def group_key(self) -> str:
        """Equal for runs whose settings differ only in the training seed (see `group_runs`)."""
        return group_key(self.config)

    @property
    def params_path(self) -> Path:
        return self.path / "params.safetensors"

    @property
    def epochs_done(self) -> int:
        return len(self.metrics)

    @property
    def best_epoch(self) -> int | None:
        """The epoch with the highest validation micro-F1 (the first of ties), from the metrics."""
        if not self.metrics:
            return None
        return max(self.metrics, key=lambda m: (m["micro_f1"], -m["epoch"]))["epoch"]

    @property
    def best_metrics(self) -> dict:
        best = self.best_epoch
        return next((m for m in self.metrics if m["epoch"] == best), {})

    def predictions(self, which: int | str) -> tuple[np.ndarray, np.ndarray]:
        """(probs (N, C) float, labels (N,) int) of an epoch number or a named evaluation."""
        name = f"epoch_{which}" if isinstance(which, int) else which
        path = self.path / "predictions" / f"{name}.npz"
        try:
            with np.load(path, allow_pickle=False) as npz:
                probs, labels = npz["probs"], npz["labels"]
        except (OSError, KeyError, ValueError) as err:
            raise RunError(f"run {self.name}: cannot read predictions {name}: {err}") from err
        if probs.ndim != 2 or labels.shape != (probs.shape[0],):
            raise RunError(f"run {self.name}: predictions {name} have shapes {probs.shape} and {labels.shape}")
        return probs, labels

    def params(self) -> dict[str, Tensor]:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(self.params_path))
        except (OSError, SafetensorError) as err:
            raise RunError(f"run {self.name}: cannot read params.safetensors: {err}") from err


# ---------------------------------------------------------------- groups of seeds


def group_key(config: TrainConfig) -> str:
    """A short hash of every setting but the training seed and the method's links to other runs (the
    one-head run a four-head tiny-attention run starts from is another run at each seed)."""
    settings = config.to_dict()
    del settings["seed"]
    links = config.method_class.run_links
    settings["method_options"] = {k: v for k, v in config.method_options.items() if k not in links}
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


@dataclass
class Group:
    """Runs that differ only in the training seed, ordered by seed: one method under one setting."""

    key: str
    runs: list[Run]

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

    Two runs with the same key and the same seed (the same comparison trained twice) both stay in
    the group: the seed list then shows the repeat.
    """
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if run.status != "corrupt" and run.metrics:
            groups.setdefault(run.group_key, []).append(run)
    return [Group(key, sorted(members, key=lambda run: run.seed)) for key, members in groups.items()]


def group_row(group: Group) -> dict:
    """One row of the groups table: the group's best-epoch validation numbers as mean [95% t-interval]."""
    from peftviz.stats import t_interval

    def mean_interval(key: str) -> str:
        values = [run.best_metrics[key] for run in group.runs if key in run.best_metrics]
        if not values:
            return "–"
        mean, low, high = t_interval(values)
        return f"{mean:.4f}" if len(values) < 2 else f"{mean:.4f} [{low:.4f}, {high:.4f}]"

    first = group.runs[0].config
    return {
        "group": group.key,
        "method": group.label,
        "dataset": first.dataset,
        "model": first.model,
        "seeds": ",".join(map(str, group.seeds)),
        "complete": sum(run.status == "complete" for run in group.runs),
        "best val accuracy": mean_interval("accuracy"),
        "val ECE": mean_interval("ece"),
    }


def _read_json(path: Path):
    return json.loads(path.read_text())


def load_run(path: Path) -> Run:
    """Read a run folder. Never raises for a bad folder: it comes back with status "corrupt"."""
    path = Path(path)
    run = Run(path, "incomplete")
    try:
        run.record = _read_json(path / "config.json")
        run.config = TrainConfig.from_stored(run.record)
    except (OSError, ValueError) as err:
        record = run.record if isinstance(run.record, dict) else {}
        kind = "" if isinstance(err, PeftvizError) else f"{type(err).__name__}: "  # a bad setting names itself
        return Run(path, "corrupt", error=f"config.json: {kind}{err}".splitlines()[0], record=record)
    try:
        metrics_file = path / "metrics.jsonl"
        if metrics_file.exists():
            run.metrics = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
        if (path / "summary.json").exists():
            run.summary = _read_json(path / "summary.json")
    except (OSError, ValueError) as err:
        return Run(path, "corrupt", run.config, run.metrics, error=f"{type(err).__name__}: {err}".splitlines()[0],
                   record=run.record)  # fmt: skip
    missing = [
        m.get("epoch") for m in run.metrics if not (path / "predictions" / f"epoch_{m.get('epoch')}.npz").exists()
    ]
    if missing:
        return Run(path, "corrupt", run.config, run.metrics, error=f"predictions missing for epoch(s) {missing}",
                   record=run.record)  # fmt: skip
    run.status = run.summary.get("status", "incomplete")
    run.error = run.summary.get("error", "")
    return run


def run_signature(folder: Path) -> tuple:
    """Changes whenever the run finishes an epoch or its parameters change: a cache key for the app."""
    files = [folder / name for name in ("config.json", "metrics.jsonl", "summary.json", "params.safetensors")]
    return (folder.name, *(f.stat().st_mtime_ns if f.exists() else 0 for f in files))


def store_signature(root: Path | None = None) -> tuple:
    """Changes whenever a run is added, removed, or finishes an epoch: a cache key for the app."""
    root = Path(root or store_dir())
    if not root.is_dir():
        return ()
    return tuple(run_signature(folder) for folder in sorted(p for p in root.iterdir() if p.is_dir()))


def list_runs(root: Path | None = None) -> list[Run]:
    """Every run folder under `root` (default: `store_dir()`), oldest first."""
    root = Path(root or store_dir())
    if not root.is_dir():
        return []
    folders = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    runs = [load_run(p) for p in folders]
    return sorted(runs, key=lambda run: (run.created, run.name))


def run_row(run: Run) -> dict:
    """One row of the runs table: what the CLI's `runs` and the app's home page show."""
    config, best = run.config, run.best_metrics
    params = run.parameters
    trainable = params.get("trainable")
    return {
        "run": run.name,
        "method": run.label,
        "seed": run.seed,
        "group": run.group_key if run.status != "corrupt" else None,
        "status": run.status if not run.error else f"{run.status}: {run.error}",
        "dataset": config.dataset if config else "?",
        "model": config.model if config else "?",
        "epochs": f"{run.epochs_done}/{config.epochs if config else '?'}",
        "best accuracy": best.get("accuracy"),
        "ECE": best.get("ece"),
        "test accuracy": run.summary.get("test", {}).get("accuracy"),
        "trainable": trainable,
        "trainable %": 100 * trainable / params["total"] if trainable and params.get("total") else None,
    }
