"""Reading files that may be hostile and writing files that survive a kill. Imports nothing of peftviz.

Reading: `read_bytes` opens without blocking (a FIFO would otherwise wait forever for a writer),
accepts only regular files (not a FIFO, a device such as /dev/zero, or a folder), optionally
refuses symbolic links, and checks the size before reading a byte. `check_regular` does the same
checks for files that a library reads itself (safetensors, npz).

Writing: `atomic_write` writes a temporary file next to the target, flushes it to disk, renames it
over the target and flushes the folder, so after a kill (or a power cut, where the platform
offers fsync) a reader sees the old file or the new one, never a part. Temporary names carry the
writer's process id, so `remove_stale_temporaries` can tell a dead writer's leftovers from a live
writer's file in progress.
"""

from __future__ import annotations

import os
import re
import stat
import time
import uuid
from collections.abc import Callable
from pathlib import Path

MB = 1 << 20
TEMP_PATTERN = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")
STALE_AFTER_S = 24 * 3600  # a temporary file older than this is stale whoever wrote it (another host)


class FileProblem(ValueError):
    """A file that cannot be read safely; the message says why, without the file's name."""


def _describe_kind(mode: int) -> str:
    kinds = {stat.S_ISFIFO: "a FIFO", stat.S_ISCHR: "a device", stat.S_ISBLK: "a device", stat.S_ISDIR: "a folder"}
    kinds |= {stat.S_ISSOCK: "a socket", stat.S_ISLNK: "a symbolic link"}
    return next((text for test, text in kinds.items() if test(mode)), "not a regular file")


def _size_text(size: int) -> str:
    return f"{size / MB:.1f} MB" if size >= MB else f"{size} bytes"


def check_regular(path: Path, limit: int, follow_symlinks: bool = True) -> int:
    """The size of `path`, if it is a regular file of at most `limit` bytes; else FileProblem."""
    try:
        info = os.stat(path, follow_symlinks=follow_symlinks)
    except FileNotFoundError:
        raise FileProblem("does not exist") from None
    except OSError as err:
        raise FileProblem(f"cannot be read ({err.strerror})") from None
    return _checked_size(info, limit)


def _checked_size(info: os.stat_result, limit: int) -> int:
    if not stat.S_ISREG(info.st_mode):
        raise FileProblem(f"is {_describe_kind(info.st_mode)}, not a regular file")
    if info.st_size > limit:
        raise FileProblem(f"is {_size_text(info.st_size)}; the limit is {_size_text(limit)}")
    return info.st_size


def read_bytes(path: Path, limit: int, follow_symlinks: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; FileProblem for anything else.

    O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; O_NOFOLLOW (when
    `follow_symlinks` is False): a link is refused, not followed out of the folder.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
        if os.path.islink(path):  # platforms without O_NOFOLLOW
            raise FileProblem("is a symbolic link, not a regular file")
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise FileProblem("does not exist") from None
    except OSError as err:  # ELOOP: a link under O_NOFOLLOW
        reason = (
            "is a symbolic link, not a regular file" if os.path.islink(path) else f"cannot be read ({err.strerror})"
        )
        raise FileProblem(reason) from None
    try:
        _checked_size(os.fstat(fd), limit)
    except FileProblem:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)  # the file may have grown since fstat
    if len(data) > limit:
        raise FileProblem(f"is over the limit of {_size_text(limit)}")
    return data


def read_text(path: Path, limit: int, follow_symlinks: bool = True, encoding: str = "utf-8") -> str:
    """`read_bytes` decoded; FileProblem names the first byte that is not `encoding`."""
    try:
        return read_bytes(path, limit, follow_symlinks).decode(encoding)
    except UnicodeDecodeError as err:
        raise FileProblem(f"is not {encoding.upper()} text (byte {err.start})") from None


# ---------------------------------------------------------------------------------------------
# writing


def _fsync_folder(folder: Path) -> None:
    """Make a rename durable; folders cannot be opened for fsync on every platform (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temporary_name(path: Path) -> Path:
    """`.<name>.<pid>-<random>.tmp` next to `path`: hidden, and owned by this process."""
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through `write(tmp_path)`, flush to disk, rename over `path`: readers see the old or the new file."""
    path = Path(path)
    tmp = temporary_name(path)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_folder(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    atomic_write(path, lambda tmp: tmp.write_bytes(data))


def write_npz_atomic(path: Path, arrays: dict) -> None:
    """Plain arrays as an npz file (read back with allow_pickle=False), written as `atomic_write` writes."""
    import numpy as np  # here: the readers of this module need no numpy

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as file:  # a file object: np.savez would append ".npz" to a path
            np.savez(file, **arrays)

    atomic_write(path, write)


def _writer_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def is_stale_temporary(path: Path, now: float | None = None) -> bool:
    """A temporary file or folder of ours whose writer is dead, or that is older than STALE_AFTER_S."""
    match = TEMP_PATTERN.match(path.name)
    if not match:
        return False
    try:
        age = (now or time.time()) - path.lstat().st_mtime
    except OSError:
        return False
    return age > STALE_AFTER_S or not _writer_alive(int(match["pid"]))


def remove_stale_temporaries(folder: Path, depth: int = 2) -> list[Path]:
    """Remove dead writers' temporary files and folders under `folder` (to `depth` levels); returns them."""
    import shutil

    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        path = Path(entry.path)
        if is_stale_temporary(path):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
        elif depth > 1 and entry.is_dir(follow_symlinks=False):
            removed += remove_stale_temporaries(path, depth - 1)
    return removed
