"""Analysis caches: what a page computes from a run once, kept inside the run folder under analysis/.

    analysis/alpha_sweep.json       the α sweeps (`analysis.kernel`)
    analysis/estimates/<key>.npz    point estimates and bootstrap draws (`analysis.estimates`)

A cache is never a result: a file that is missing, fails its check or was computed by other code is
computed again, and written anew. Each cache's format is defined, and checked on every read, by the
analysis module that computes and writes it (with `store.schema`'s checks); the store never reads
one. Writes go the store's way, to a temporary name and renamed into place, and never through a
link out of the store; a store this process cannot write (read-only, full) only costs the
recomputation, so a write says whether it happened rather than raising.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from peftviz.files import FileProblem, atomic_write, check_regular, write_npz_atomic
from peftviz.store import schema

ANALYSIS_DIR = "analysis"


def cache_path(run_folder: Path, name: str | Path) -> Path:
    """Where the cache `name` (e.g. "alpha_sweep.json", "estimates/<key>.npz") of a run lives."""
    return Path(run_folder) / ANALYSIS_DIR / name


def write_json(run_folder: Path, name: str | Path, value) -> bool:
    """Store a JSON cache; False when it could not be written (then it is computed again next time)."""
    text = json.dumps(value, indent=2)
    return _write(run_folder, name, lambda path: atomic_write(path, lambda tmp: tmp.write_text(text)))


def write_arrays(run_folder: Path, name: str | Path, arrays: dict[str, np.ndarray]) -> bool:
    """Store an npz cache of plain arrays (read back with allow_pickle=False); False when not written."""
    return _write(run_folder, name, lambda path: write_npz_atomic(path, arrays))


def _write(run_folder: Path, name: str | Path, write: Callable[[Path], None]) -> bool:
    path = cache_path(run_folder, name)
    if _through_link(Path(run_folder), path):
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError:
        return False
    return True


def _through_link(run_folder: Path, path: Path) -> bool:
    """Whether the run folder, or a folder between it and `path`, is a symbolic link (out of the store)."""
    folder = path.parent
    while folder != run_folder:
        if folder.is_symlink():
            return True
        folder = folder.parent
    return run_folder.is_symlink()


def read_arrays(path: Path, file: str) -> dict[str, np.ndarray]:
    """Every array of an npz cache (allow_pickle=False), the file first checked to be a regular file within
    `schema.ANALYSIS_LIMIT`; `schema.Corrupt` naming `file` otherwise. What its members must be, its reader checks."""
    try:
        check_regular(path, schema.ANALYSIS_LIMIT, follow_symlinks=False)
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except FileProblem as problem:
        raise schema.Corrupt(file, f"the file {problem}") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise schema.Corrupt(file, f"the file is not an npz archive ({str(err)[:60]})") from None
