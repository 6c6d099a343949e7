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
sees half a file or a folder without settings. An epoch shows only once all its files are in
place (see `RunWriter`): a run killed at any moment lists as "incomplete" with its finished epochs,
and a run whose writer is alive as "training" (see `writer_alive`).
Every read is checked against the schema (`peftviz.schema`); a folder that violates it lists as
"corrupt" with the file and field named. Nothing is read with pickle: JSON, npz with
allow_pickle=False, and safetensors.

A run's config reads back as a `TrainConfig` (`Run.config`); what the run recorded besides its
settings is in `Run.record`. This module imports no torch: listing runs stays light.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import stat
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

try:
    import fcntl
except ImportError:  # Windows: only the heartbeat tells a live writer
    fcntl = None

from peftviz import schema
from peftviz.config import TrainConfig
from peftviz.errors import PeftvizError, RunError
from peftviz.files import atomic_write, remove_stale_temporaries, temporary_name
from peftviz.paths import store_dir

if TYPE_CHECKING:
    from torch import Tensor

STATUSES = ("complete", "training", "incomplete", "failed", "corrupt")
PARAMS_FILE, RESUME_FILE, LOCK_FILE = "params.safetensors", "resume.safetensors", "writer.lock"
# a writer on another host cannot be asked through the lock: it is alive while it touches the file
HEARTBEAT_S, HEARTBEAT_STALE_S = 30.0, 180.0
# a writer may finish an epoch while a reader reads its files one by one: what disagrees then is read again
READ_ATTEMPTS = 3
__all__ = ["Group", "Run", "RunError", "RunWriter", "atomic_write", "group_runs", "list_runs", "load_run", "store_dir"]


def _write_json(path: Path, value) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(value, indent=2, default=float)))


def _write_npz(path: Path, probs: np.ndarray, labels: np.ndarray) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a path
            np.savez(f, probs=probs, labels=labels)

    atomic_write(path, write)


def _write_safetensors(path: Path, tensors: dict[str, Tensor], metadata: dict[str, str]) -> None:
    from safetensors.torch import save_file

    tensors = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


class WriterLock:
    """Says a process is writing this run, in a form that ends with the process, even on SIGKILL: an
    flock held on writer.lock, which the kernel drops with the process. The file also names the pid
    and host, and its mtime is touched every HEARTBEAT_S, for readers on another host (a network
    file system may not share the lock). Taken before the folder is renamed into the store, so no
    reader sees a new run without it."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / LOCK_FILE
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        if fcntl is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)  # blocking: a reader holds its test lock for microseconds
        os.ftruncate(self._fd, 0)
        os.write(
            self._fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}).encode()
        )
        self._stop = threading.Event()
        threading.Thread(target=self._beat, daemon=True, name="peftviz-heartbeat").start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError, TypeError):  # TypeError: released meanwhile (fd None)
                os.utime(self._fd)

    def moved(self, folder: Path) -> None:
        """The folder was renamed (into the store): the lock (held on the open file) stays."""
        self.path = Path(folder) / LOCK_FILE

    def release(self) -> None:
        """Remove the file, then drop the lock; the run's own files say how it ended."""
        if self._fd is None:
            return
        self._stop.set()
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None


def writer_alive(folder: Path) -> bool:
    """Whether a process is writing the run folder now: its writer.lock is locked (same host), or
    touched within HEARTBEAT_STALE_S (a writer on another host). Never raises: a missing, odd or
    unreadable file means no writer."""
    try:
        fd = os.open(Path(folder) / LOCK_FILE, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return False
        host = _lock_host(os.read(fd, 4096))
        if fcntl is None or host not in (None, socket.gethostname()):
            return time.time() - info.st_mtime < HEARTBEAT_STALE_S
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released when fd closes
        except BlockingIOError:
            return True
        return False
    except OSError:
        return False
    finally:
        os.close(fd)


def _lock_host(content: bytes) -> str | None:
    """The host a writer.lock names; None when it names none (being written, or damaged)."""
    try:
        host = json.loads(content).get("host")
    except (ValueError, AttributeError):
        return None
    return host if isinstance(host, str) else None


class RunWriter:
    """Writes one run folder as training goes.

    An epoch is written in the order its reader needs: predictions, the metrics line, the state to
    resume from, and (if it is the new best) the parameters, whose metadata names the epoch. A
    reader shows an epoch only once all of these are in place (`_committed_epochs`), so a kill at
    any moment leaves a run that is complete or incomplete, never one that lies. While it writes,
    it holds the run's `WriterLock`: the run lists as "training"; `close` (or the process's end) drops it.
    """

    takes_lock = True

    def __init__(self, path: Path, metrics: list[dict] | None = None, lock: WriterLock | None = None):
        self.path = path
        self.metrics: list[dict] = list(metrics or [])
        self._lock = lock or (WriterLock(path) if self.takes_lock else None)

    @classmethod
    def create(cls, root: Path, config: TrainConfig, recorded: dict) -> RunWriter:
        """A new run folder with config.json (the settings and `recorded`: label names, parameters,
        environment), built under a temporary name and renamed into the store whole."""
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        name = f"{_slug(config.name)}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        building = temporary_name(root / name)
        (building / "predictions").mkdir(parents=True)
        lock = WriterLock(building) if cls.takes_lock else None
        _write_json(building / "config.json", {**config.to_dict(), **recorded})
        os.replace(building, root / name)
        if lock:
            lock.moved(root / name)
        return cls(root / name, lock=lock)

    def write_epoch(self, record: dict, probs: np.ndarray, labels: np.ndarray) -> None:
        """Predictions first, then the metrics line: a listed epoch always has its predictions."""
        self.write_predictions(f"epoch_{record['epoch']}", probs, labels)
        self.metrics.append(record)
        self._write_metrics()

    def _write_metrics(self) -> None:
        lines = "".join(json.dumps(m, default=float) + "\n" for m in self.metrics)
        atomic_write(self.path / "metrics.jsonl", lambda tmp: tmp.write_text(lines))

    def keep_epochs(self, epochs: int) -> None:
        """Drop the metrics lines after `epochs` (a resumed run trains them again)."""
        self.metrics = self.metrics[:epochs]
        self._write_metrics()

    def write_predictions(self, name: str, probs: np.ndarray, labels: np.ndarray) -> None:
        _write_npz(self.path / "predictions" / f"{schema.check_evaluation_name(name)}.npz", probs, labels)

    def write_params(self, state: dict[str, Tensor], epoch: int) -> None:
        """The best epoch's trainable parameters, tagged with the epoch they belong to."""
        _write_safetensors(self.path / PARAMS_FILE, state, {"epoch": str(epoch)})

    def write_resume(self, tensors: dict[str, Tensor], metadata: dict[str, str]) -> None:
        """The training state at the end of an epoch (metadata["epoch"]), for `train --resume`."""
        _write_safetensors(self.path / RESUME_FILE, tensors, metadata)

    def finish(self, summary: dict) -> None:
        """summary.json last; then the resume state, which a complete run no longer needs."""
        _write_json(self.path / "summary.json", {"status": "complete", **summary})
        (self.path / RESUME_FILE).unlink(missing_ok=True)
        self.close()

    def fail(self, error: str, summary: dict | None = None) -> None:
        _write_json(self.path / "summary.json", {"status": "failed", "error": error, **(summary or {})})
        self.close()

    def close(self) -> None:
        """Stop saying "training": the run ended, or its writer gives up (an error: incomplete)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None


class FollowerWriter(RunWriter):
    """The run as a process other than the main one of a data-parallel launch keeps it: the metrics
    in memory (every process computes the same, from predictions gathered from all), no files."""

    takes_lock = False

    def _write_metrics(self) -> None:
        pass

    def write_predictions(self, name: str, probs: np.ndarray, labels: np.ndarray) -> None:
        pass

    def write_params(self, state: dict[str, Tensor], epoch: int) -> None:
        pass

    def write_resume(self, tensors: dict[str, Tensor], metadata: dict[str, str]) -> None:
        pass

    def finish(self, summary: dict) -> None:
        pass

    def fail(self, error: str, summary: dict | None = None) -> None:
        pass


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
    def group_key(self) -> str:
        """Equal for runs whose settings differ only in the training seed (see `group_runs`)."""
        return group_key(self.config)

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
    """config.json's settings as a TrainConfig and its record checked; Corrupt names the setting."""
    try:
        config = TrainConfig.from_stored(record)
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
    has_params = os.path.lexists(path / PARAMS_FILE)
    if has_params:
        run.params_epoch = schema.stored_epoch(schema.safetensors_header(path / PARAMS_FILE, PARAMS_FILE), PARAMS_FILE)
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


# ---------------------------------------------------------------- what pages say about runs


def data_changed(run: Run) -> str | None:
    """One sentence when the data under the run's dataset name is no longer what the run trained on
    (its recorded `data_sha256`), so a page showing its documents says they come from the data as
    it is now. None when it is the same, or the run recorded no hash (older runs, hub data)."""
    recorded = run.record.get("data_sha256")
    if not recorded or run.config is None:
        return None
    from peftviz.uploads import data_sha256  # reads the data's files; `datasets` loads here

    now = data_sha256(run.config.dataset)
    if now == recorded:
        return None
    if now is None:
        return f"The data run {run.name} trained on ({run.config.dataset}) can no longer be read."
    return (f"The data at {run.config.dataset} has changed since run {run.name} trained on it: the documents "
            "shown come from the data as it is now.")  # fmt: skip


SHORT_NAMES = {"learning_rate": "lr", "n_heads": "heads", "max_length": "length", "batch_size": "batch", "data_seed": "split seed",
               "effective_batch_size": "effective batch", "gradient_checkpointing": "checkpointing"}  # fmt: skip


def _label_settings(config: TrainConfig) -> dict:
    """The settings a picker may name: the run's and its method's (not links to other runs)."""
    values = {k: v for k, v in config.to_dict().items() if k not in ("method", "label", "method_options", "seed")}
    links = config.method_class.run_links
    values.update({k: v for k, v in config.method_config.to_dict().items() if k not in links})  # defaults filled in
    return values


def _shown_setting(name: str, value) -> str:
    if isinstance(value, float):
        value = f"{value:g}"
    elif isinstance(value, str) and ("/" in value or os.sep in value):
        value = Path(value).name  # a data file or model folder: its name
    return f"{SHORT_NAMES.get(name, name.replace('_', ' '))} {value}"


def run_labels(runs: list[Run]) -> dict[str, str]:
    """Picker labels, run folder name -> label: the method's label and seed, then the settings in
    which the run differs from other runs of that label (lr, epochs, heads, data...); runs that
    still read alike get their date, then their folder's hash. Names what differs, not a hash."""
    by_label: dict[str, list[Run]] = {}
    for run in runs:
        by_label.setdefault(run.label, []).append(run)
    labels = {}
    for label, members in by_label.items():
        settings = {run.name: _label_settings(run.config) if run.config else {} for run in members}
        names = list(dict.fromkeys(name for values in settings.values() for name in values))
        differing = [n for n in names if len({json.dumps(s.get(n), default=str) for s in settings.values()}) > 1]
        for run in members:
            parts = [label, f"seed {run.seed}", *(_shown_setting(n, settings[run.name].get(n)) for n in differing)]
            labels[run.name] = " · ".join(parts)
    for tie_breaker in (lambda run: run.created[:16].replace("T", " "), lambda run: run.name[-6:]):
        _break_ties(runs, labels, tie_breaker)
    return labels


def _break_ties(runs: list[Run], labels: dict[str, str], extra) -> None:
    seen: dict[str, int] = {}
    for run in runs:
        seen[labels[run.name]] = seen.get(labels[run.name], 0) + 1
    for run in runs:
        if seen[labels[run.name]] > 1 and extra(run):
            labels[run.name] = f"{labels[run.name]} · {extra(run)}"


def measured_minutes(runs: list[Run], settings: dict) -> list[tuple[float, str]]:
    """(minutes, where) of each complete run trained with `settings` (TrainConfig fields, e.g. a
    preset's): its epochs' recorded wall time, and the device and threads it ran on. What a page
    can honestly say a run of these settings takes, here or on the machine that trained the store."""
    found = []
    for run in runs:
        if run.status != "complete" or run.config is None:
            continue
        if any(getattr(run.config, name, None) != value for name, value in settings.items()):
            continue
        environment = run.record.get("environment") or {}
        where = f"{environment.get('device_name') or environment.get('device', '?')}, " \
                f"{environment.get('torch_threads', '?')} threads"  # fmt: skip
        found.append((sum(m.get("seconds", 0.0) for m in run.metrics) / 60, where))
    return found
