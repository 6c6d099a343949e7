"""Counting what the pages build, for the tests that show a second reader's session draws the first's
figures and tables from `appkit.shared` instead of building them again."""

import functools
import shutil
from collections import Counter
from pathlib import Path


def count_calls(monkeypatch, module, *names: str) -> Counter:
    """Replace module.<name> for each name by a wrapper that counts its calls; returns the counts by name.
    The wrapper keeps the function's name, so `appkit.shared` keys it apart from the others."""
    calls = Counter()

    def counted(name, original):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)

        return wrapper

    for name in names:
        monkeypatch.setattr(module, name, counted(name, getattr(module, name)))
    return calls


def private_store(store: Path, folder: Path, monkeypatch) -> Path:
    """A copy of `store` the app is pointed at: its runs' folders are new, so nothing of theirs is cached
    yet in this test process (the caches outlive a test), whatever ran before."""
    copy = folder / "runs"
    shutil.copytree(store, copy)
    monkeypatch.setenv("PEFTVIZ_RUNS", str(copy))
    return copy
