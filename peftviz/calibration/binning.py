"""Binning shared by the calibration metrics and their estimators: which bin each example falls in,
and the per-bin sums every binned metric is computed from.

The two schemes (``SCHEMES``) are defined in `peftviz.calibration.metrics`' docstring: ``"width"``,
right-closed equal-width bins over [0, 1]; ``"mass"``, consecutive groups of nearly equal size in
confidence order. Inputs here are already checked (`peftviz.calibration.checks`).

>>> width_bin_ids(np.array([0.0, 0.1, 0.5, 1.0]), 10)
array([0, 0, 4, 9])
>>> mass_group_sizes(10, 3)
array([4, 3, 3])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peftviz.calibration.checks import check_binning, check_inputs


def top_label(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-label confidence and whether the argmax prediction is correct, per example."""
    return probs.max(axis=1), probs.argmax(axis=1) == labels


def width_edges(n_bins: int) -> np.ndarray:
    # b / n is correctly rounded, unlike linspace's b * (1 / n): 3/10 -> 0.3, not 0.30000000000000004
    return np.arange(n_bins + 1) / n_bins


def width_bin_ids(confidence: np.ndarray, n_bins: int) -> np.ndarray:
    # side="left" finds i with edges[i-1] < conf <= edges[i]: right-closed bins; 0 -> index 0 -> clipped to bin 0
    ids = np.searchsorted(width_edges(n_bins), confidence, side="left") - 1
    return np.clip(ids, 0, n_bins - 1)


def mass_group_sizes(n_examples: int, n_bins: int) -> np.ndarray:
    """Sizes of np.array_split(range(n_examples), min(n_bins, n_examples))."""
    n_groups = min(n_bins, n_examples)
    sizes = np.full(n_groups, n_examples // n_groups)
    sizes[: n_examples % n_groups] += 1
    return sizes


def mass_bin_ids(confidence: np.ndarray, n_bins: int) -> np.ndarray:
    order = np.argsort(confidence, kind="stable")
    sizes = mass_group_sizes(confidence.shape[0], n_bins)
    bin_ids = np.empty(confidence.shape[0], dtype=np.int64)
    bin_ids[order] = np.repeat(np.arange(sizes.shape[0]), sizes)
    return bin_ids


def bin_ids_of(confidence: np.ndarray, n_bins: int, scheme: str) -> tuple[np.ndarray, int]:
    """Bin index per example and the number of bins actually used."""
    if scheme == "width":
        return width_bin_ids(confidence, n_bins), n_bins
    return mass_bin_ids(confidence, n_bins), min(n_bins, confidence.shape[0])


@dataclass(frozen=True)
class BinTotals:
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


def bin_totals(confidence: np.ndarray, hits: np.ndarray, n_bins: int, scheme: str) -> BinTotals:
    bin_ids, n_used = bin_ids_of(confidence, n_bins, scheme)
    return BinTotals(
        count=np.bincount(bin_ids, minlength=n_used),
        confidence_sum=np.bincount(bin_ids, weights=confidence, minlength=n_used),
        hit_sum=np.bincount(bin_ids, weights=hits.astype(np.float64), minlength=n_used),
    )


def ece_from_totals(totals: BinTotals) -> float:
    # (n_b / N) |acc_b - conf_b| = |hits_b - conf_sum_b| / N: no per-bin division needed
    return float(np.abs(totals.hit_sum - totals.confidence_sum).sum() / totals.count.sum())


def top_label_totals(probs, labels, n_bins: int, scheme: str) -> BinTotals:
    probs, labels = check_inputs(probs, labels)
    check_binning(n_bins, scheme)
    confidence, correct = top_label(probs, labels)
    return bin_totals(confidence, correct, n_bins, scheme)


def bins_of(confidence: np.ndarray, hits: np.ndarray, n_bins: int, scheme: str) -> dict[str, np.ndarray]:
    """The per-bin table of confidences and their 0/1 outcomes (see `reliability_bins`)."""
    totals = bin_totals(confidence, hits, n_bins, scheme)
    lower, upper = bin_edges(confidence, n_bins, scheme)
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


def bin_edges(confidence: np.ndarray, n_bins: int, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    if scheme == "width":
        edges = width_edges(n_bins)
        return edges[:-1], edges[1:]
    groups = np.array_split(np.sort(confidence, kind="stable"), min(n_bins, confidence.shape[0]))
    return np.array([g[0] for g in groups]), np.array([g[-1] for g in groups])


# ---------------------------------------------------------------- bootstrap


def resampled_eces(
    confidence: np.ndarray, correct: np.ndarray, resample_idx: np.ndarray, n_bins: int, scheme: str
) -> np.ndarray:
    """ECE of each resample (one row of indices each), all at once with one flat bincount."""
    n_resamples, n_examples = resample_idx.shape
    signed_gap = correct.astype(np.float64) - confidence  # per example: hit - conf
    if scheme == "width":
        bin_ids = width_bin_ids(confidence, n_bins)[resample_idx]
        n_used = n_bins
    else:
        # equal-mass bins are re-cut on every resample: sort each row, then position -> group
        row_order = np.argsort(confidence[resample_idx], axis=1, kind="stable")
        resample_idx = np.take_along_axis(resample_idx, row_order, axis=1)
        sizes = mass_group_sizes(n_examples, n_bins)
        n_used = sizes.shape[0]
        bin_ids = np.broadcast_to(np.repeat(np.arange(n_used), sizes), resample_idx.shape)
    flat_ids = (np.arange(n_resamples)[:, None] * n_used + bin_ids).ravel()
    gap_sums = np.bincount(flat_ids, weights=signed_gap[resample_idx].ravel(), minlength=n_resamples * n_used)
    return np.abs(gap_sums.reshape(n_resamples, n_used)).sum(axis=1) / n_examples
