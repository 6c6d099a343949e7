"""Each run's estimates, computed once: point values and bootstrap draws, cached in the run folder.

    analysis/estimates/<key>.npz    key (U64): sha256 of what the draws depend on, below
                                    value__<metric> () float64: the estimator on all examples
                                    draws__<metric> (R,) float64: on each resampled example row

The draws of a metric depend on the predictions, on the evaluation, bins, scheme, number of
resamples and resampling seed, and on the code that computes them; the key hashes exactly these
(the predictions by their bytes, the code by `estimators_code`), so a file is never read for other
settings, for predictions rewritten since, or after an estimator's code changed. `level` is not in
the key: an interval is read off the draws at any level. FORMAT is the file's layout, bumped when
the members above change; a change of the code needs no bump. A file holds the metrics computed so
far; asking for others computes only those and writes the file again with all of them (atomic
rename). So a page, a report and the next process share the work.

This module both writes the file and reads it back (`read_estimates`), every member checked: a file
that fails its check (not a regular file, too large, not an npz, another key, a member of another
name, shape or type, a metric without its value or its draws) is ignored and computed again; a
folder that cannot be written (a read-only store) only costs the recomputation.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import re
from pathlib import Path

import numpy as np

from peftviz.analysis.code_identity import code_identity
from peftviz.calibration import estimators
from peftviz.calibration.stats import interval_around, resample_indices
from peftviz.errors import RunError
from peftviz.store import caches, schema
from peftviz.store.runs import Run

ESTIMATES_DIR = "estimates"  # a cache folder of the run folder (`store.caches`)
FORMAT = 1  # the file's layout (its members); the code that computes the values is `estimators_code`
DRAWN_BY = (estimators.__name__,)  # the registry: every estimator, and the modules it calls (binning, stats, ...)
ESTIMATE_MEMBER = re.compile(r"^(value|draws)__([a-z][a-z0-9_]{0,63})$")


@functools.cache
def estimators_code() -> str:
    """The identity of the code that computes the values and draws (`code_identity`): the registry's
    module and every peftviz module it imports (binning, checks, paper_ece, selective, smooth_ece,
    stats, ...), and `_compute`, which draws the resampled rows and calls the registry."""
    return code_identity(DRAWN_BY, extra=inspect.getsource(_compute))


def estimates_key(probs: np.ndarray, labels: np.ndarray, evaluation: str, settings) -> str:
    """sha256 over the predictions' bytes, the settings the draws depend on (not the level) and the
    identity of the code that computes them."""
    made_with = {
        "format": FORMAT,
        "code": estimators_code(),
        "evaluation": evaluation,
        "n_bins": settings.n_bins,
        "scheme": settings.scheme,
        "n_resamples": settings.n_resamples,
        "seed": settings.seed,
    }
    digest = hashlib.sha256(json.dumps(made_with, sort_keys=True).encode())
    for array in (probs, labels):
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _read(path: Path, key: str, n_resamples: int) -> dict[str, tuple[float, np.ndarray]]:
    """The stored metrics of `key`; {} when there is no file or it fails its check."""
    if not os.path.lexists(path):
        return {}
    try:
        return read_estimates(path, key, n_resamples)
    except RunError:
        return {}


def read_estimates(path: Path, key: str, n_resamples: int) -> dict[str, tuple[float, np.ndarray]]:
    """{metric: (value, draws (R,))} of an estimates cache whose key is `key`, every member checked;
    `schema.Corrupt` (a `RunError`) naming the file and the member otherwise."""
    file = f"{caches.ANALYSIS_DIR}/{ESTIMATES_DIR}/{path.name}"
    arrays = caches.read_arrays(path, file)
    stored_key = arrays.pop("key", None)
    if stored_key is None or stored_key.shape != () or str(stored_key) != key:
        raise schema.Corrupt(file, "key does not match the predictions, settings and code")
    metrics = {}
    for name, array in arrays.items():
        match = ESTIMATE_MEMBER.match(name)
        shape = () if match and match[1] == "value" else (n_resamples,)
        if not match or array.shape != shape or array.dtype != np.float64:
            raise schema.Corrupt(file, f"{name} must be float64 of shape {shape}, not {array.dtype} {array.shape}")
        metrics.setdefault(match[2], {})[match[1]] = array
    if any(len(parts) != 2 for parts in metrics.values()):
        raise schema.Corrupt(file, "every metric needs a value and its draws")
    return {metric: (float(parts["value"]), parts["draws"]) for metric, parts in metrics.items()}


def _write(run: Run, name: str, key: str, found: dict[str, tuple[float, np.ndarray]]) -> None:
    arrays = {"key": np.array(key)}
    for metric, (value, draws) in found.items():
        arrays[f"value__{metric}"], arrays[f"draws__{metric}"] = np.float64(value), draws.astype(np.float64)
    caches.write_arrays(run.path, name, arrays)  # not written (a read-only store): computed again next time


def _compute(probs, labels, settings, metrics: list[str]) -> dict[str, tuple[float, np.ndarray]]:
    values = estimators.point_estimates(probs, labels, settings.n_bins, settings.scheme, metrics)
    rows = resample_indices(labels.shape[0], settings.n_resamples, settings.seed)  # the same rows for every run
    draws = estimators.bootstrap_samples(probs, labels, rows, settings.n_bins, settings.scheme, metrics)
    return {metric: (values[metric], draws[metric]) for metric in metrics}


def cached_estimates(run: Run, which: int | str, settings, metrics) -> dict[str, estimators.Estimate]:
    """Every metric of `run`'s predictions at `which` with its interval at `settings.level` and its
    draws (for paired comparisons and groups), read from the run folder where already computed."""
    evaluation = schema.evaluation_name(which)
    probs, labels = run.predictions(which)
    key = estimates_key(probs, labels, evaluation, settings)
    name = f"{ESTIMATES_DIR}/{key[:32]}.npz"
    found = _read(caches.cache_path(run.path, name), key, settings.n_resamples)
    missing = [metric for metric in metrics if metric not in found]
    if missing:
        found |= _compute(probs, labels, settings, missing)
        _write(run, name, key, found)
    return {metric: _estimate(*found[metric], settings) for metric in metrics}


def _estimate(value: float, draws: np.ndarray, settings) -> estimators.Estimate:
    low, high = interval_around(value, draws, settings.level)
    return estimators.Estimate(value, low, high, settings.level, settings.n_resamples, draws)
