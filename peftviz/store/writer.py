"""Writing a run folder: `RunWriter` as training goes, and the `WriterLock` that says a process writes it.

Every file is written to a temporary name, flushed and renamed into place (`files.atomic_write`); the
folder itself is built under a temporary name and renamed into the store with its config.json. An
epoch's files go in the order its reader needs them (`store.runs`), so a kill at any moment leaves a
run that is complete or incomplete, never one that lies. The format is `store.schema`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import stat
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

try:
    import fcntl
except ImportError:  # Windows: only the heartbeat tells a live writer
    fcntl = None

from peftviz.files import atomic_write, temporary_name, write_npz_atomic
from peftviz.run_config import TrainConfig
from peftviz.store import schema
from peftviz.store.schema import COMPLETE, FAILED, LOCK_FILE, PARAMS_FILE, RESUME_FILE

if TYPE_CHECKING:
    from torch import Tensor

# a writer on another host cannot be asked through the lock: it is alive while it touches the file
HEARTBEAT_S, HEARTBEAT_STALE_S = 30.0, 180.0


def _write_json(path: Path, value) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(value, indent=2, default=float)))


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

    def add_attempt(self, attempt: dict) -> None:
        """A resumed run says so: config.json gains the attempt (engine, node, the epoch it continues from)."""
        record = schema.read_json(self.path / "config.json", "config.json", schema.JSON_LIMITS["config.json"])
        self.update_config({"attempts": [*record.get("attempts", []), attempt]})

    def update_config(self, changes: dict) -> None:
        """config.json with `changes` (settings or record fields) written over it, atomically."""
        record = schema.read_json(self.path / "config.json", "config.json", schema.JSON_LIMITS["config.json"])
        _write_json(self.path / "config.json", {**record, **changes})

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
        write_npz_atomic(
            self.path / "predictions" / f"{schema.check_evaluation_name(name)}.npz", {"probs": probs, "labels": labels}
        )

    def write_params(self, state: dict[str, Tensor], epoch: int) -> None:
        """The best epoch's trainable parameters, tagged with the epoch they belong to."""
        _write_safetensors(self.path / PARAMS_FILE, state, {"epoch": str(epoch)})

    def write_resume(self, tensors: dict[str, Tensor], metadata: dict[str, str]) -> None:
        """The training state at the end of an epoch (metadata["epoch"]), for `train --resume`."""
        _write_safetensors(self.path / RESUME_FILE, tensors, metadata)

    def finish(self, summary: dict) -> None:
        """summary.json last; then the resume state, which a complete run no longer needs."""
        _write_json(self.path / "summary.json", {"status": COMPLETE, **summary})
        (self.path / RESUME_FILE).unlink(missing_ok=True)
        self.close()

    def fail(self, error: str, summary: dict | None = None) -> None:
        _write_json(self.path / "summary.json", {"status": FAILED, "error": error, **(summary or {})})
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

    def add_attempt(self, attempt: dict) -> None:
        pass

    def update_config(self, changes: dict) -> None:
        pass

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
