"""Datasets uploaded through the app, stored under names peftviz makes from their content.

The browser's file name is never used as a path (it may be `../../x.csv` or `/etc/x.csv`): an
upload is stored as `cache/uploads/<sha256 of its bytes, 16 hex digits><.csv or .jsonl>`. The same
content is stored once; different content never replaces a file a run was trained on.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePath

from peftviz.errors import DataError
from peftviz.files import MB, write_bytes_atomic
from peftviz.paths import uploads_dir

UPLOAD_SUFFIXES = (".csv", ".jsonl")
UPLOAD_LIMIT = 512 * MB  # as a data file read from disk


def upload_path(name: str, content: bytes) -> Path:
    """Where an upload of this name and content is stored: the name gives only its format."""
    suffix = PurePath(name.replace("\\", "/")).suffix.lower()
    if suffix not in UPLOAD_SUFFIXES:
        raise DataError(f"upload {name!r} is not a .csv or .jsonl file")
    return uploads_dir() / f"{hashlib.sha256(content).hexdigest()[:16]}{suffix}"


def store_upload(name: str, content: bytes) -> Path:
    """Store an uploaded file by its content (once); returns its path under cache/uploads/."""
    if len(content) > UPLOAD_LIMIT:
        raise DataError(f"upload {name!r} is {len(content) / MB:.0f} MB; the limit is {UPLOAD_LIMIT // MB} MB")
    path = upload_path(name, content)
    if not (path.is_file() and not path.is_symlink() and path.stat().st_size == len(content)):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, content)
    return path
