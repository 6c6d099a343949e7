"""Uncertainty methods' predictions, computed once: cached in the run folder, read back checked.

    analysis/uncertainty/<method>-<key[:32]>.npz
        key               () str: sha256 of what the predictions depend on, below
        validation        (N_val, C) float32: on the best epoch's validation documents
        test              (N_test, C) float32
        passes            () int64: encoder forward passes per document
        extra_parameters  () int64: numbers stored besides the method's trained parameters
        seconds_per_1000  () float64: measured seconds per 1,000 test documents (NaN: not measured)

The key hashes the method's name and options, the file's FORMAT, the identity of the code that computes
the predictions (`analysis.code_identity` of the method's module and all it imports: the classifier, the
methods, the prediction loop, ...), and, for every run the member is made of (an ensemble: its k runs, in
order; the file lives in the first one's folder), its name, best epoch and the bytes of its stored
best-epoch validation and test predictions, which change whenever its parameters do. So a file is never
read for other options, other runs, retrained runs or changed code.

Every member is checked on every read (`read_member`): a file that is not a regular file, too large, not
an npz, of another key, with a member missing, extra, of another shape or type, not finite, or rows that are
not probabilities, is ignored and computed again. Writes go through `store.caches` (a temporary name, then
a rename: a kill leaves no half-written file under this name); a store that cannot be written only costs
the recomputation.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from peftviz.analysis.code_identity import code_identity
from peftviz.analysis.uncertainty.base import Cost, Member
from peftviz.errors import RunError
from peftviz.store import caches, schema
from peftviz.store.runs import Group, Run

UNCERTAINTY_DIR = "uncertainty"  # a cache folder of the run folder (`store.caches`)
FORMAT = 1  # the file's layout (its members); the code that computes the values is in the key
PROBABILITY_TOLERANCE = 1e-3  # a float32 row of probabilities sums to 1 within this


@functools.cache
def method_code(module: str) -> str:
    """The identity of an uncertainty method's code: its module and every peftviz module it imports."""
    return code_identity((module,))


def run_inputs(run: Run) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """A run's stored best-epoch validation and test predictions: what every uncertainty method starts from."""
    best = run.best_epoch
    if best is None:
        raise RunError(f"run {run.name} has no finished epochs")
    return run.predictions(best), run.predictions("test")


def member_key(method: str, options: dict, module: str, runs: Sequence[Run]) -> str:
    """sha256 over the method, its options, the format, its code, and each run's name, best epoch and predictions."""
    made_with = {"format": FORMAT, "method": method, "options": options, "code": method_code(module)}
    digest = hashlib.sha256(json.dumps(made_with, sort_keys=True, default=str).encode())
    for run in runs:
        digest.update(f"{run.name}|{run.best_epoch}".encode())
        for probs, _ in run_inputs(run):
            digest.update(f"{probs.dtype.str}{probs.shape}".encode())
            digest.update(np.ascontiguousarray(probs).tobytes())
    return digest.hexdigest()


def cache_name(method: str, key: str) -> str:
    return f"{UNCERTAINTY_DIR}/{method}-{key[:32]}.npz"


def read_member(path: Path, key: str, shapes: tuple[tuple, tuple]) -> dict[str, np.ndarray]:
    """The arrays of a cached member whose key is `key` and whose validation and test have `shapes`,
    every member checked; `schema.Corrupt` (a `RunError`) naming the file and the member otherwise."""
    file = f"{caches.ANALYSIS_DIR}/{UNCERTAINTY_DIR}/{path.name}"
    arrays = caches.read_arrays(path, file)
    stored = arrays.get("key")
    if stored is None or stored.shape != () or str(stored) != key:
        raise schema.Corrupt(file, "key does not match the method, its options, the runs and the code")
    expected = {
        "key": ((), None),
        "validation": (shapes[0], np.float32),
        "test": (shapes[1], np.float32),
        "passes": ((), np.int64),
        "extra_parameters": ((), np.int64),
        "seconds_per_1000": ((), np.float64),
    }
    if set(arrays) != set(expected):
        raise schema.Corrupt(file, f"members must be {', '.join(expected)}, not {', '.join(sorted(arrays))}")
    for name, (shape, dtype) in expected.items():
        if dtype is not None and (arrays[name].shape != shape or arrays[name].dtype != dtype):
            raise schema.Corrupt(file, f"{name} must be {np.dtype(dtype)} of shape {shape}")
    for name in ("validation", "test"):
        _check_probabilities(arrays[name], file, name)
    if arrays["passes"] < 1 or arrays["extra_parameters"] < 0 or arrays["seconds_per_1000"] < 0:
        raise schema.Corrupt(file, "passes must be at least 1, extra_parameters and seconds_per_1000 at least 0")
    return arrays


def _check_probabilities(probs: np.ndarray, file: str, name: str) -> None:
    if not np.isfinite(probs).all() or (probs < 0).any():
        raise schema.Corrupt(file, f"{name} holds values that are not probabilities (NaN, inf or negative)")
    if probs.size and np.abs(probs.sum(axis=1) - 1).max() > PROBABILITY_TOLERANCE:
        raise schema.Corrupt(file, f"{name}'s rows do not sum to 1")


def cached_member(
    method: str, options: dict, module: str, runs: Sequence[Run], seed: int, compute: Callable[[], Member]
) -> Member:
    """The member made of `runs` by `method` at `options`, read from the first run's folder where already
    computed, else `compute()`d and written there."""
    (val, _), (test, _) = run_inputs(runs[0])
    key = member_key(method, options, module, runs)
    name = cache_name(method, key)
    path = caches.cache_path(runs[0].path, name)
    if os.path.lexists(path):
        try:
            return _member_of(read_member(path, key, (val.shape, test.shape)), runs, seed)
        except RunError:
            pass  # computed again below, and written anew
    arrays = member_arrays(key, compute())
    caches.write_arrays(runs[0].path, name, arrays)
    return _member_of(arrays, runs, seed)  # as written: the same numbers as read back


def per_run_members(
    method: str,
    settings: dict,
    module: str,
    group: Group,
    make: Callable[[Run], Member],
    progress: Callable[[str], None] | None = None,
    described: str = "",
) -> list[Member]:
    """One member per run of `group`, each `cached_member(method, settings, module, (run,), run.seed, ...)` made
    by `make(run)` where not cached: the loop of every uncertainty method that keeps one member per seed.
    `progress`, where given, hears "`described` · run name" before each run."""
    found = []
    for run in group.runs:
        if progress:
            progress(f"{described} · {run.name}")
        found.append(cached_member(method, settings, module, (run,), run.seed, lambda run=run: make(run)))
    return found


def _member_of(arrays: dict[str, np.ndarray], runs: Sequence[Run], seed: int) -> Member:
    cost = Cost(int(arrays["passes"]), int(arrays["extra_parameters"]), float(arrays["seconds_per_1000"]))
    return Member(tuple(runs), seed, arrays["validation"], arrays["test"], cost)


def member_arrays(key: str, member: Member) -> dict[str, np.ndarray]:
    """What `cached_member` writes: the members `read_member` checks."""
    return {
        "key": np.array(key),
        "validation": member.validation.astype(np.float32),
        "test": member.test.astype(np.float32),
        "passes": np.int64(member.cost.passes),
        "extra_parameters": np.int64(member.cost.extra_parameters),
        "seconds_per_1000": np.float64(member.cost.seconds_per_1000),
    }
