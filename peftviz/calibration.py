"""Calibration metrics for multi-class classifiers, from predicted probabilities.

Inputs everywhere: ``probs`` of shape (N, C), each row a probability vector (rows are
assumed to sum to 1; this is not checked, so softmax outputs in float32 are fine), and
integer ``labels`` of shape (N,) with values in [0, C).

Definitions
-----------
Top-label view: the prediction is ``argmax_k p_k`` (ties go to the lowest class index,
as ``np.argmax`` does) and its confidence is ``max_k p_k``; an example is correct when the
prediction equals the label.

Binning (``scheme``, one of ``SCHEMES``):

* ``"width"``: ``n_bins`` equal-width bins over [0, 1]. Bin b covers the right-closed
  interval (b/n, (b+1)/n], except that a confidence of exactly 0 goes to the first bin.
  So 0.1 with 10 bins lands in bin 0, 0.5 in bin 4 and 1.0 in bin 9. Edges are the
  doubles nearest to b/n and membership is decided by comparing against those edges,
  so every confidence in bin b satisfies lower < conf <= upper.
* ``"mass"``: sort the examples by confidence (stable sort) and split the sorted order into
  ``min(n_bins, N)`` consecutive groups of nearly equal size (``np.array_split``: sizes
  differ by at most one, larger groups first). Tied confidences may straddle two groups.
  A group's reported edges are the min and max confidence inside it.

Per bin b with n_b > 0 examples: conf_b = mean confidence, acc_b = fraction correct,
gap_b = acc_b - conf_b.

* ECE = sum_b (n_b / N) |gap_b|  (Naeini et al. 2015; Guo et al. 2017)
* MCE = max over non-empty bins of |gap_b|
* ACE = unweighted mean of |gap_b| over non-empty bins  (netcal's definition, Neumann et al. 2018)
* classwise ECE = mean over classes k of the ECE of the binary problem "label == k" with
  confidence p_k, binned with the same scheme on p_k (Kull et al. 2019)
* Brier = mean over examples of sum_k (p_k - 1[y = k])^2, in [0, 2]
* NLL = mean of -log max(p_y, 1e-12), so a confident wrong 0 gives a large finite number
* temperature scaling (Guo et al. 2017): probs -> softmax(log(max(p, 1e-12)) / T)

netcal 1.4.0 (``netcal.metrics.ECE/MCE/ACE``) is *not* used for the numbers, though it
matches to 1e-12 on ordinary multi-class data. It differs on edge cases: its bins are
left-closed [b/n, (b+1)/n) (np.histogramdd), so a confidence exactly on an inner edge lands
one bin higher; with <= 2 distinct labels it switches to binary mode (RuntimeError for C > 2,
positive-class p[:, 1] instead of top-label confidence for C = 2); and it clips confidences
to [eps, 1 - eps]. ``tests/test_calibration.py`` pins both the agreement and the differences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peftviz.errors import ConfigError

SCHEMES = ("width", "mass")
PROB_FLOOR = 1e-12  # clip before log: a wrong prediction with p_y = 0 gives NLL ~27.6, not inf
LOG_TEMPERATURE_BOUNDS = (-5.0, 5.0)  # T in [0.0067, 148]: far beyond any sane fitted temperature


# ---------------------------------------------------------------- validation


def _check_probs(probs) -> np.ndarray:
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 2:
        raise ConfigError(f"probs must be 2-D with shape (N, C), got shape {probs.shape}")
    if probs.shape[0] == 0 or probs.shape[1] == 0:
        raise ConfigError(f"empty input: probs has shape {probs.shape}, need at least one example and one class")
    if not np.all(np.isfinite(probs)):
        raise ConfigError("probs contains NaN or inf")
    return probs


def _check_inputs(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    probs = _check_probs(probs)
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != probs.shape[0]:
        raise ConfigError(f"labels must have shape ({probs.shape[0]},) to match probs, got shape {labels.shape}")
    labels = _as_integer_labels(labels)
    n_classes = probs.shape[1]
    if labels.min() < 0 or labels.max() >= n_classes:
        raise ConfigError(f"labels must lie in [0, {n_classes}), got values from {labels.min()} to {labels.max()}")
    return probs, labels


def _as_integer_labels(labels: np.ndarray) -> np.ndarray:
    # Float labels holding whole numbers (e.g. from a float tensor) are accepted; 1.5 is not a class.
    if np.issubdtype(labels.dtype, np.integer):
        return labels.astype(np.int64)
    if np.issubdtype(labels.dtype, np.floating) and np.all(np.isfinite(labels)) and np.all(labels == np.round(labels)):
        return labels.astype(np.int64)
    raise ConfigError(f"labels must be integer class indices, got dtype {labels.dtype}")


def _check_binning(n_bins: int, scheme: str) -> None:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)):
        raise ConfigError(f"n_bins must be an int, got {type(n_bins).__name__}")
    if n_bins < 1:
        raise ConfigError(f"n_bins must be >= 1, got {n_bins}")
    if scheme not in SCHEMES:
        raise ConfigError(f"unknown scheme {scheme!r}, expected one of {SCHEMES}")


# ---------------------------------------------------------------- binning


def _top_label(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-label confidence and whether the argmax prediction is correct, per example."""
    return probs.max(axis=1), probs.argmax(axis=1) == labels


def _width_edges(n_bins: int) -> np.ndarray:
    # b / n is correctly rounded, unlike linspace's b * (1 / n): 3/10 -> 0.3, not 0.30000000000000004
    return np.arange(n_bins + 1) / n_bins


def _width_bin_ids(confidence: np.ndarray, n_bins: int) -> np.ndarray:
    # side="left" finds i with edges[i-1] < conf <= edges[i]: right-closed bins; 0 -> index 0 -> clipped to bin 0
    ids = np.searchsorted(_width_edges(n_bins), confidence, side="left") - 1
    return np.clip(ids, 0, n_bins - 1)


def _mass_group_sizes(n_examples: int, n_bins: int) -> np.ndarray:
    """Sizes of np.array_split(range(n_examples), min(n_bins, n_examples))."""
    n_groups = min(n_bins, n_examples)
    sizes = np.full(n_groups, n_examples // n_groups)
    sizes[: n_examples % n_groups] += 1
    return sizes


def _mass_bin_ids(confidence: np.ndarray, n_bins: int) -> np.ndarray:
    order = np.argsort(confidence, kind="stable")
    sizes = _mass_group_sizes(confidence.shape[0], n_bins)
    bin_ids = np.empty(confidence.shape[0], dtype=np.int64)
    bin_ids[order] = np.repeat(np.arange(sizes.shape[0]), sizes)
    return bin_ids


def _bin_ids(confidence: np.ndarray, n_bins: int, scheme: str) -> tuple[np.ndarray, int]:
    """Bin index per example and the number of bins actually used."""
    if scheme == "width":
        return _width_bin_ids(confidence, n_bins), n_bins
    return _mass_bin_ids(confidence, n_bins), min(n_bins, confidence.shape[0])


@dataclass(frozen=True)
class _BinTotals:
    """Per-bin sums; means are derived so empty bins never divide by zero unasked."""

    count: np.ndarray  # int, examples per bin
    confidence_sum: np.ndarray
    hit_sum: np.ndarray  # number of correct (or positive) examples

    @property
    def nonempty(self) -> np.ndarray:
        return self.count > 0

    def abs_gaps(self) -> np.ndarray:
        """|acc_b - conf_b| for the non-empty bins only."""
        n = self.count[self.nonempty]
        return np.abs(self.hit_sum[self.nonempty] - self.confidence_sum[self.nonempty]) / n


def _bin_totals(confidence: np.ndarray, hits: np.ndarray, n_bins: int, scheme: str) -> _BinTotals:
    bin_ids, n_used = _bin_ids(confidence, n_bins, scheme)
    return _BinTotals(
        count=np.bincount(bin_ids, minlength=n_used),
        confidence_sum=np.bincount(bin_ids, weights=confidence, minlength=n_used),
        hit_sum=np.bincount(bin_ids, weights=hits.astype(np.float64), minlength=n_used),
    )


def _ece_from_totals(totals: _BinTotals) -> float:
    # (n_b / N) |acc_b - conf_b| = |hits_b - conf_sum_b| / N: no per-bin division needed
    return float(np.abs(totals.hit_sum - totals.confidence_sum).sum() / totals.count.sum())


def _top_label_totals(probs, labels, n_bins: int, scheme: str) -> _BinTotals:
    probs, labels = _check_inputs(probs, labels)
    _check_binning(n_bins, scheme)
    confidence, correct = _top_label(probs, labels)
    return _bin_totals(confidence, correct, n_bins, scheme)


# ---------------------------------------------------------------- metrics


def accuracy(probs, labels) -> float:
    """Fraction of examples whose argmax prediction equals the label."""
    probs, labels = _check_inputs(probs, labels)
    return float(np.mean(probs.argmax(axis=1) == labels))


def ece(probs, labels, n_bins: int = 10, scheme: str = "width") -> float:
    """Top-label expected calibration error: sum_b (n_b / N) |acc_b - conf_b|."""
    return _ece_from_totals(_top_label_totals(probs, labels, n_bins, scheme))


def mce(probs, labels, n_bins: int = 10, scheme: str = "width") -> float:
    """Maximum calibration error: the largest |acc_b - conf_b| over non-empty bins."""
    return float(_top_label_totals(probs, labels, n_bins, scheme).abs_gaps().max())


def ace(probs, labels, n_bins: int = 10, scheme: str = "width") -> float:
    """Average calibration error: unweighted mean of |acc_b - conf_b| over non-empty bins."""
    return float(_top_label_totals(probs, labels, n_bins, scheme).abs_gaps().mean())


def classwise_ece(probs, labels, n_bins: int = 10, scheme: str = "width") -> float:
    """Mean over classes k of the ECE of "label == k" against confidence p_k (Kull et al. 2019)."""
    probs, labels = _check_inputs(probs, labels)
    _check_binning(n_bins, scheme)
    per_class = [_ece_from_totals(_bin_totals(probs[:, k], labels == k, n_bins, scheme)) for k in range(probs.shape[1])]
    return float(np.mean(per_class))


def brier(probs, labels) -> float:
    """Multi-class Brier score: mean over examples of sum_k (p_k - 1[y = k])^2, in [0, 2]."""
    probs, labels = _check_inputs(probs, labels)
    one_hot = np.eye(probs.shape[1])[labels]
    return float(np.mean(np.sum((probs - one_hot) ** 2, axis=1)))


def nll(probs, labels) -> float:
    """Mean negative log-likelihood of the true label, with p_y clipped to >= 1e-12."""
    probs, labels = _check_inputs(probs, labels)
    true_class_prob = probs[np.arange(labels.shape[0]), labels]
    return float(np.mean(-np.log(np.maximum(true_class_prob, PROB_FLOOR))))


def reliability_bins(probs, labels, n_bins: int = 10, scheme: str = "width") -> dict[str, np.ndarray]:
    """Per-bin table of a top-label reliability diagram, one row per bin, empty bins included.

    Keys: "lower", "upper" (edges), "count" (int), "hits" (int, correct predictions), "confidence"
    (mean top-label confidence), "accuracy" (hits / count), "gap" (accuracy - confidence). Empty bins
    have count 0 and NaN means.
    """
    probs, labels = _check_inputs(probs, labels)
    _check_binning(n_bins, scheme)
    return _bins_of(*_top_label(probs, labels), n_bins, scheme)


def one_vs_rest_bins(probs, labels, n_bins: int = 10, scheme: str = "width") -> list[dict[str, np.ndarray]]:
    """Per class k, the per-bin table of the binary problem "label == k" with confidence p_k, binned
    with the same scheme on p_k (the bins behind `classwise_ece`). Keys as `reliability_bins`:
    "confidence" is the bin's mean p_k, "hits" the examples of class k in it, "accuracy" their fraction."""
    probs, labels = _check_inputs(probs, labels)
    _check_binning(n_bins, scheme)
    return [_bins_of(probs[:, k], labels == k, n_bins, scheme) for k in range(probs.shape[1])]


def _bins_of(confidence: np.ndarray, hits: np.ndarray, n_bins: int, scheme: str) -> dict[str, np.ndarray]:
    """The per-bin table of confidences and their 0/1 outcomes (see `reliability_bins`)."""
    totals = _bin_totals(confidence, hits, n_bins, scheme)
    lower, upper = _bin_edges(confidence, n_bins, scheme)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0/0 -> NaN marks an empty bin
        mean_confidence = totals.confidence_sum / totals.count
        bin_accuracy = totals.hit_sum / totals.count
    return {
        "lower": lower,
        "upper": upper,
        "count": totals.count.astype(np.int64),
        "hits": np.rint(totals.hit_sum).astype(np.int64),  # sums of 1.0s: whole numbers already
        "confidence": mean_confidence,
        "accuracy": bin_accuracy,
        "gap": bin_accuracy - mean_confidence,
    }


def _bin_edges(confidence: np.ndarray, n_bins: int, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    if scheme == "width":
        edges = _width_edges(n_bins)
        return edges[:-1], edges[1:]
    groups = np.array_split(np.sort(confidence, kind="stable"), min(n_bins, confidence.shape[0]))
    return np.array([g[0] for g in groups]), np.array([g[-1] for g in groups])


def summary(probs, labels, n_bins: int = 10, scheme: str = "width") -> dict[str, float]:
    """All scalar metrics at once, as Python floats."""
    return {
        "accuracy": accuracy(probs, labels),
        "ece": ece(probs, labels, n_bins, scheme),
        "mce": mce(probs, labels, n_bins, scheme),
        "ace": ace(probs, labels, n_bins, scheme),
        "classwise_ece": classwise_ece(probs, labels, n_bins, scheme),
        "brier": brier(probs, labels),
        "nll": nll(probs, labels),
    }


# ---------------------------------------------------------------- bootstrap


def _resampled_eces(
    confidence: np.ndarray, correct: np.ndarray, resample_idx: np.ndarray, n_bins: int, scheme: str
) -> np.ndarray:
    """ECE of each resample (one row of indices each), all at once with one flat bincount."""
    n_resamples, n_examples = resample_idx.shape
    signed_gap = correct.astype(np.float64) - confidence  # per example: hit - conf
    if scheme == "width":
        bin_ids = _width_bin_ids(confidence, n_bins)[resample_idx]
        n_used = n_bins
    else:
        # equal-mass bins are re-cut on every resample: sort each row, then position -> group
        row_order = np.argsort(confidence[resample_idx], axis=1, kind="stable")
        resample_idx = np.take_along_axis(resample_idx, row_order, axis=1)
        sizes = _mass_group_sizes(n_examples, n_bins)
        n_used = sizes.shape[0]
        bin_ids = np.broadcast_to(np.repeat(np.arange(n_used), sizes), resample_idx.shape)
    flat_ids = (np.arange(n_resamples)[:, None] * n_used + bin_ids).ravel()
    gap_sums = np.bincount(flat_ids, weights=signed_gap[resample_idx].ravel(), minlength=n_resamples * n_used)
    return np.abs(gap_sums.reshape(n_resamples, n_used)).sum(axis=1) / n_examples


# ---------------------------------------------------------------- temperature scaling


def _log_probs(probs: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(probs, PROB_FLOOR))


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))  # shift so exp never overflows
    return shifted / shifted.sum(axis=1, keepdims=True)


def _tempered_nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    scaled = logits / temperature
    top = scaled.max(axis=1)
    log_normaliser = top + np.log(np.exp(scaled - top[:, None]).sum(axis=1))
    return float(np.mean(log_normaliser - scaled[np.arange(labels.shape[0]), labels]))


def fit_temperature(probs, labels) -> float:
    """Temperature T > 0 minimising the NLL of softmax(log(probs) / T) (Guo et al. 2017).

    Searches log T on a bounded interval with Brent's method: the NLL is convex in 1/T,
    hence unimodal in log T, so the bounded scalar search finds the global minimum. When
    every prediction is one-hot correct the NLL falls towards 0 as T -> 0 and any small T
    (where the NLL is already 0 to machine precision) is returned.
    """
    from scipy.optimize import minimize_scalar  # local: keeps `import peftviz.calibration` light

    probs, labels = _check_inputs(probs, labels)
    logits = _log_probs(probs)
    result = minimize_scalar(
        lambda log_t: _tempered_nll(logits, labels, float(np.exp(log_t))),
        bounds=LOG_TEMPERATURE_BOUNDS,
        method="bounded",
        options={"xatol": 1e-6},
    )
    return float(np.exp(result.x))


def apply_temperature(probs, temperature: float) -> np.ndarray:
    """softmax(log(clip(probs, 1e-12)) / T); rows sum to 1. T > 1 softens, T < 1 sharpens."""
    probs = _check_probs(probs)
    if not np.isfinite(temperature) or temperature <= 0:
        raise ConfigError(f"temperature must be a finite number > 0, got {temperature}")
    return _softmax(_log_probs(probs) / temperature)
