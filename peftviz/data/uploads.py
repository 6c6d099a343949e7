"""Datasets uploaded through the app, stored under names peftviz makes from their content.

The browser's file name is never used as a path (it may be `../../x.csv` or `/etc/x.csv`): an
upload is stored in the run store's hidden `.uploads/` folder (`paths.uploads_dir`) as
`<the first 16 hex digits of its bytes' SHA-256><.csv or .jsonl>`. The same content is stored
once; different content never replaces a file a run was trained on. What is wrong with an upload is
said of the file the user chose (`as_uploaded`), not of the name peftviz stored it under, and pages
and tables name a run's uploaded data by the name it was first uploaded under (`dataset_label`), kept
beside it in `<stored name>.name` (only its last part, never used as a path).

A run records the SHA-256 of the data it read (`data_sha256`), whatever its source (an upload, a
local file or folder, the built-in corpus), so a page can say when the data under that name has
changed since (`peftviz.analysis.run_labels.data_changed`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import stat
from pathlib import Path, PurePath

from peftviz.errors import DataError
from peftviz.files import MB, FileProblem, read_text, write_bytes_atomic
from peftviz.paths import uploads_dir

UPLOAD_SUFFIXES = (".csv", ".jsonl")
UPLOAD_LIMIT = 512 * MB  # as a data file read from disk
UPLOAD_NAME = re.compile(r"[0-9a-f]{16}\.(csv|jsonl)")  # upload_path's names
NAME_SUFFIX = ".name"  # beside an upload: the name it was uploaded under
MAX_NAME_CHARS = 255  # a file name's length on common file systems; a longer "name" is cut


def upload_path(name: str, content: bytes) -> Path:
    """Where an upload of this name and content is stored: the name gives only its format."""
    suffix = PurePath(name.replace("\\", "/")).suffix.lower()
    if suffix not in UPLOAD_SUFFIXES:
        raise DataError(f"upload {name!r} is not a .csv or .jsonl file")
    return uploads_dir() / f"{hashlib.sha256(content).hexdigest()[:16]}{suffix}"


def store_upload(name: str, content: bytes, limit: int = UPLOAD_LIMIT) -> Path:
    """Store an uploaded file by its content (once); returns its path in `uploads_dir()`.
    limit: the largest upload in bytes (a shared server's is smaller: `peftviz.app.policy`)."""
    if len(content) > limit:
        raise DataError(f"upload {name!r} is {len(content) / MB:.1f} MB; the limit is {limit / MB:g} MB")
    path = upload_path(name, content)
    if not (path.is_file() and not path.is_symlink() and path.stat().st_size == len(content)):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, content)
    name_file = path.with_name(path.name + NAME_SUFFIX)
    if not name_file.exists():  # the first name it came under: a run trained on it keeps its label
        write_bytes_atomic(name_file, _last_part(name)[:MAX_NAME_CHARS].encode())
    return path


def _last_part(name: str) -> str:
    """The browser's file name without any folders ("../../x.csv" -> "x.csv", "C:\\x.csv" -> "x.csv")."""
    return PurePath(name.replace("\\", "/")).name


def dataset_label(spec: str) -> str:
    """How pages and tables name a dataset: an upload by the name it was uploaded under ("my reviews.csv
    (uploaded)"), anything else as given. An upload without its name file reads as its stored name."""
    path = PurePath(spec)
    if path.parent.name != ".uploads" or not UPLOAD_NAME.fullmatch(path.name):
        return spec
    try:
        name = read_text(Path(spec + NAME_SUFFIX), MAX_NAME_CHARS * 4, follow_symlinks=False).strip()
    except (OSError, FileProblem):  # gone, or not a plain text file: its stored name
        return spec
    return f"{name} (uploaded)" if name else spec


def as_uploaded(message: str, stored: Path, name: str) -> str:
    """A message about the stored upload, said of the file the user uploaded: its name for the path."""
    return message.replace(str(stored), repr(_last_part(name)))


def data_sha256(spec: str) -> str | None:
    """The SHA-256 of the data a dataset spec reads: a file's bytes; for a folder of class sub-folders
    (and the built-in corpus), its .txt files' paths and bytes in sorted order. None for a hub name
    or a path that cannot be read: nothing to compare later."""
    from peftviz.data.builtin import BUILTIN, bbc_folder  # `datasets` loads here, not on import
    from peftviz.data.hub import HUB_DATASETS

    if spec in HUB_DATASETS:
        return None
    if spec == BUILTIN:
        return _builtin_sha256(str(bbc_folder()))
    path = Path(spec).expanduser()
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            return _folder_sha256(path)
        return _file_sha256(path, info) if stat.S_ISREG(info.st_mode) else None
    except (OSError, DataError):
        return None


@functools.lru_cache(maxsize=1)
def _builtin_sha256(folder: str) -> str:
    """The corpus ships inside a package: hashed once per process."""
    return _folder_sha256(Path(folder))


# a file hashed again only when its size or modification time changed: pages ask on every rerun
@functools.lru_cache(maxsize=256)
def _cached_file_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_sha256(path: Path, info: os.stat_result) -> str:
    return _cached_file_sha256(str(path), info.st_size, info.st_mtime_ns)


def _folder_sha256(folder: Path) -> str:
    """The class sub-folders' .txt files, listed by the loader's own functions, so the hash covers
    exactly the files a run reads."""
    from peftviz.data.folders import class_folders, text_files

    digest = hashlib.sha256()
    for class_dir in class_folders(folder):
        for path in text_files(class_dir):
            digest.update(f"{path.relative_to(folder).as_posix()}\n".encode())
            digest.update(bytes.fromhex(_file_sha256(path, path.stat())))
    return digest.hexdigest()
