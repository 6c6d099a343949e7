"""A run's model on shifted test data: its probabilities, computed once, cached in the run folder.

    analysis/shift/<family>-<severity>-<key[:32]>.npz
        key               () str: sha256 of what the predictions depend on, below
        probs             (N, C) float32: the model's probabilities on the shifted documents, in order
        labels            (N,) int64: their labels, ids of the run's label names
        seconds_per_1000  () float64: the pass's measured seconds per 1,000 documents

The key hashes the FORMAT, the shift (family, severity, seed; a domain shift's documents and labels), the
identity of the code that corrupts and predicts (`analysis.code_identity`, with nlpaug's version), and the
run's name, best epoch and stored test predictions (which change whenever its parameters do).

Severity 0 is the run's stored test predictions themselves: no pass, nothing cached. Every other shift of a
run is one file, written atomically (`store.caches`) as soon as it is computed: a kill loses at most the
shift in progress, and the next request computes only what is missing (a second request, nothing). A
damaged file is computed again. `engines.evaluate_runs` runs one run per Ray task where asked, as sweeps do;
each task writes the same files.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from peftviz.analysis.code_identity import code_identity
from peftviz.analysis.shift.shifts import DOMAIN, Shift, shifted_texts, texts_digest
from peftviz.errors import RunError
from peftviz.store import caches, schema
from peftviz.store.runs import Run

SHIFT_DIR = "shift"  # a cache folder of the run folder (`store.caches`)
FORMAT = 1
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Shifted:
    """One run on one shift: probabilities (N, C), labels (N,), and the measured cost of the pass (NaN at
    severity 0, which runs nothing)."""

    run: Run
    shift: Shift
    probs: np.ndarray
    labels: np.ndarray
    seconds_per_1000: float


@functools.cache
def _code() -> str:
    from importlib.metadata import version

    return f"{code_identity((__name__,))}|nlpaug {version('nlpaug')}"


def shift_key(run: Run, shift: Shift) -> str:
    made_with = {"format": FORMAT, "shift": shift.as_dict(), "code": _code()}
    if shift.family == DOMAIN:
        made_with["documents"] = texts_digest(*shifted_texts(run, shift))
    digest = hashlib.sha256(json.dumps(made_with, sort_keys=True).encode())
    probs, _ = run.predictions("test")
    digest.update(f"{run.name}|{run.best_epoch}|{probs.dtype.str}{probs.shape}".encode())
    digest.update(np.ascontiguousarray(probs).tobytes())
    return digest.hexdigest()


def cache_name(shift: Shift, key: str) -> str:
    severity = "" if shift.severity is None else f"-{shift.severity}"
    return f"{SHIFT_DIR}/{shift.family}{severity}-{key[:32]}.npz"


def read_shifted(path: Path, key: str, n_labels: int) -> dict[str, np.ndarray]:
    """The arrays of a cached shift, every member checked; `schema.Corrupt` naming the file otherwise."""
    file = f"{caches.ANALYSIS_DIR}/{SHIFT_DIR}/{path.name}"
    arrays = caches.read_arrays(path, file)
    if set(arrays) != {"key", "probs", "labels", "seconds_per_1000"}:
        raise schema.Corrupt(file, "members must be key, probs, labels, seconds_per_1000")
    if arrays["key"].shape != () or str(arrays["key"]) != key:
        raise schema.Corrupt(file, "key does not match the shift, the run and the code")
    probs, labels, seconds = arrays["probs"], arrays["labels"], arrays["seconds_per_1000"]
    if probs.dtype != np.float32 or probs.ndim != 2 or probs.shape[1] != n_labels or len(probs) < 1:
        raise schema.Corrupt(file, f"probs must be float32 of shape (N, {n_labels})")
    if labels.dtype != np.int64 or labels.shape != (len(probs),) or labels.min() < 0 or labels.max() >= n_labels:
        raise schema.Corrupt(file, f"labels must be {len(probs)} int64 class ids below {n_labels}")
    if not np.isfinite(probs).all() or (probs < 0).any() or np.abs(probs.sum(1) - 1).max() > 1e-3:
        raise schema.Corrupt(file, "probs' rows are not probabilities")
    if seconds.shape != () or seconds.dtype != np.float64 or not seconds >= 0:
        raise schema.Corrupt(file, "seconds_per_1000 must be a float64 of at least 0")
    return arrays


def cached_shift(run: Run, shift: Shift) -> Shifted | None:
    """The run's cached predictions on `shift` (severity 0: its stored ones); None where not computed yet
    or damaged."""
    if shift.is_clean:
        probs, labels = run.predictions("test")
        return Shifted(run, shift, probs, labels, float("nan"))
    key = shift_key(run, shift)
    path = caches.cache_path(run.path, cache_name(shift, key))
    if not os.path.lexists(path):
        return None
    try:
        arrays = read_shifted(path, key, len(run.label_names))
    except RunError:
        return None
    return Shifted(run, shift, arrays["probs"], arrays["labels"], float(arrays["seconds_per_1000"]))


def shifted_loader(run: Run, shift: Shift, tokenizer):
    """The run's documents under `shift`, tokenized and batched as in training, unshuffled."""
    from peftviz.training.inference import make_loader

    texts, labels = shifted_texts(run, shift)
    encoded = tokenizer(list(texts), truncation=True, max_length=run.config.max_length)
    examples = [{"input_ids": ids, "label": y} for ids, y in zip(encoded["input_ids"], labels)]
    return make_loader(examples, run.config.batch_size, tokenizer.pad_token_id)


def _compute(run: Run, shifts: Sequence[Shift], progress: Progress | None) -> list[Shifted]:
    """The run's model on each shift, each written as soon as it is done."""
    from peftviz.analysis.uncertainty.model_runs import per_1000, timed, with_model
    from peftviz.training.inference import predict

    def compute(model, tokenizer, device) -> list[Shifted]:
        found = []
        for shift in shifts:
            if progress:
                progress(f"{run.name} · {shift.name}")
            loader = shifted_loader(run, shift, tokenizer)
            (probs, got), seconds = timed(lambda loader=loader: predict(model, loader, device))
            found.append(Shifted(run, shift, probs, got, per_1000(seconds, len(got))))
            caches.write_arrays(run.path, cache_name(shift, key := shift_key(run, shift)), _arrays(key, found[-1]))
        return found

    return with_model(run, compute)


def _arrays(key: str, shifted: Shifted) -> dict[str, np.ndarray]:
    """What `_compute` writes: the members `read_shifted` checks."""
    return {
        "key": np.array(key),
        "probs": shifted.probs.astype(np.float32),
        "labels": shifted.labels.astype(np.int64),
        "seconds_per_1000": np.float64(shifted.seconds_per_1000),
    }


def evaluate_run(run: Run, shifts: Sequence[Shift], progress: Progress | None = None) -> list[Shifted]:
    """The run on every shift, in order: read where cached, the model run (once) on the rest (a store that
    cannot be written only costs the recomputation next time)."""
    found = {shift: cached_shift(run, shift) for shift in shifts}
    missing = [shift for shift, item in found.items() if item is None]
    if missing:
        if not run.has_params:
            raise RunError(f"run {run.name} has no parameters to run on shifted text (a recorded run)")
        found |= dict(zip(missing, _compute(run, missing, progress)))
    return [found[shift] for shift in shifts]
