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


def bin_totals(confidence: np.ndarray, hits: np.ndarray, n_bins: int, scheme: str) -> BinTotals:
    bin_ids, n_used = bin_ids_of(confidence, n_bins, scheme)
    return BinTotals(
        count=np.bincount(bin_ids, minlength=n_used),
        confidence_sum=np.bincount(bin_ids, weights=confidence, minlength=n_used),
        hit_sum=np.bincount(bin_ids, weights=hits.astype(np.float64), minlength=n_used),
    )


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


@dataclass(frozen=True)
class RowBinTotals:
    """Per resample row (axis 0) and bin (axis 1): example count, confidence sum, hit sum."""

    count: np.ndarray
    confidence_sum: np.ndarray
    hit_sum: np.ndarray

    def eces(self) -> np.ndarray:
        """ECE per row: sum_b (n_b / N) |acc_b - conf_b| = sum_b |hits_b - conf_sum_b| / N, no per-bin division."""
        return np.abs(self.hit_sum - self.confidence_sum).sum(axis=1) / self.count.sum(axis=1)

    def abs_gaps(self) -> np.ndarray:
        """|acc_b - conf_b| = |hits_b - conf_sum_b| / n_b per row and bin; 0 in an empty bin (sums of 0)."""
        return np.abs(self.hit_sum - self.confidence_sum) / np.maximum(self.count, 1)


def row_offsets(n_rows: int, n_groups: int, group_ids: np.ndarray) -> np.ndarray:
    """Flat ids r * n_groups + group, so one bincount totals every row at once."""
    return (np.arange(n_rows)[:, None] * n_groups + group_ids).ravel()


def row_sums(flat_ids: np.ndarray, n_rows: int, n_groups: int, weights=None) -> np.ndarray:
    return np.bincount(flat_ids, weights=weights, minlength=n_rows * n_groups).reshape(n_rows, n_groups)


def row_bin_ids(values: np.ndarray, indices: np.ndarray, n_bins: int, scheme: str) -> tuple[np.ndarray, int]:
    """Bin of each entry of indices (R, N), and the number of bins; equal-mass bins are re-cut per row.

    The ids stay in each row's own order, so a row's sums add its examples in the order `bin_totals`
    adds them: the identity row gives `bin_totals`' sums bit for bit."""
    if scheme == "width":
        return width_bin_ids(values, n_bins)[indices], n_bins
    order = np.argsort(values[indices], axis=1, kind="stable")
    sizes = mass_group_sizes(indices.shape[1], n_bins)
    bin_ids = np.empty(indices.shape, dtype=np.int64)
    np.put_along_axis(bin_ids, order, np.broadcast_to(np.repeat(np.arange(sizes.shape[0]), sizes), order.shape), axis=1)
    return bin_ids, sizes.shape[0]


def row_bin_totals(values: np.ndarray, hits: np.ndarray, indices: np.ndarray, n_bins: int, scheme: str) -> RowBinTotals:
    """Bin totals of every resample row (one row of indices each), all rows in one flat bincount each."""
    n_rows = indices.shape[0]
    bin_ids, n_used = row_bin_ids(values, indices, n_bins, scheme)
    flat = row_offsets(n_rows, n_used, bin_ids)
    return RowBinTotals(
        count=row_sums(flat, n_rows, n_used),
        confidence_sum=row_sums(flat, n_rows, n_used, values[indices].ravel()),
        hit_sum=row_sums(flat, n_rows, n_used, hits[indices].astype(np.float64).ravel()),
    )


def resampled_eces(
    confidence: np.ndarray, correct: np.ndarray, resample_idx: np.ndarray, n_bins: int, scheme: str
) -> np.ndarray:
    """ECE of each resample (one row of indices each), all at once."""
    return row_bin_totals(confidence, correct, resample_idx, n_bins, scheme).eces()
