"""Input checks shared by the calibration metrics, estimators and recalibration maps.

``probs`` (N, C): rows of probabilities, finite, at least one example and one class; ``labels`` (N,):
integer class indices in [0, C) (floats holding whole numbers are accepted). Each check returns the
inputs as float64 / int64 arrays or raises `ConfigError` with a sentence saying what is wrong.

>>> check_inputs([[0.9, 0.1]], [1.0])
(array([[0.9, 0.1]]), array([1]))
>>> check_inputs([[0.9, 0.1]], [2])
Traceback (most recent call last):
...
peftviz.errors.ConfigError: labels must lie in [0, 2), got values from 2 to 2
"""

from __future__ import annotations

import numpy as np

from peftviz.errors import ConfigError

SCHEMES = ("width", "mass")  # equal-width and equal-mass bins (see `peftviz.calibration.binning`)


def check_probs(probs) -> np.ndarray:
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 2:
        raise ConfigError(f"probs must be 2-D with shape (N, C), got shape {probs.shape}")
    if probs.shape[0] == 0 or probs.shape[1] == 0:
        raise ConfigError(f"empty input: probs has shape {probs.shape}, need at least one example and one class")
    if not np.all(np.isfinite(probs)):
        raise ConfigError("probs contains NaN or inf")
    return probs


def check_inputs(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    probs = check_probs(probs)
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != probs.shape[0]:
        raise ConfigError(f"labels must have shape ({probs.shape[0]},) to match probs, got shape {labels.shape}")
    labels = as_integer_labels(labels)
    n_classes = probs.shape[1]
    if labels.min() < 0 or labels.max() >= n_classes:
        raise ConfigError(f"labels must lie in [0, {n_classes}), got values from {labels.min()} to {labels.max()}")
    return probs, labels


def as_integer_labels(labels: np.ndarray) -> np.ndarray:
    # Float labels holding whole numbers (e.g. from a float tensor) are accepted; 1.5 is not a class.
    if np.issubdtype(labels.dtype, np.integer):
        return labels.astype(np.int64)
    if np.issubdtype(labels.dtype, np.floating) and np.all(np.isfinite(labels)) and np.all(labels == np.round(labels)):
        return labels.astype(np.int64)
    raise ConfigError(f"labels must be integer class indices, got dtype {labels.dtype}")


def check_binning(n_bins: int, scheme: str) -> None:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)):
        raise ConfigError(f"n_bins must be an int, got {type(n_bins).__name__}")
    if n_bins < 1:
        raise ConfigError(f"n_bins must be >= 1, got {n_bins}")
    if scheme not in SCHEMES:
        raise ConfigError(f"unknown scheme {scheme!r}, expected one of {SCHEMES}")
