"""Selective prediction (`peftviz.calibration.selective`) written again from its definition, by plain loops,
for the tests to compare with: no numpy sorting, cumulative sums or block arithmetic.

    c_i = max_k p_ik, e_i = 1[first argmax != y_i]
    the distinct confidences from the highest down; within a block of B tied confidences holding e_B
    errors, after A examples above it: E_{A+j} = (errors above) + j e_B / B, j = 1..B
    AURC = (1/N) sum_k E_k / k;  AUGRC = (1/N^2) sum_k E_k;  accuracy at kappa = 1 - E_k / k, k = ceil(kappa N)
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def confidences_and_errors(probs, labels) -> tuple[list[float], list[int]]:
    """(c_i, e_i) per example, the first index winning an argmax tie."""
    confidence, errors = [], []
    for row, label in zip(np.asarray(probs, dtype=np.float64).tolist(), np.asarray(labels).tolist()):
        best = 0
        for k in range(1, len(row)):
            if row[k] > row[best]:
                best = k
        confidence.append(row[best])
        errors.append(int(best != label))
    return confidence, errors


def expected_errors(confidence: list[float], errors: list[int]) -> list[float]:
    """E_1..E_N: one tied block at a time, from the most confident down."""
    out, errors_above = [], 0
    for level in sorted(set(confidence), reverse=True):
        block = [e for c, e in zip(confidence, errors) if c == level]
        block_errors = sum(block)
        for j in range(1, len(block) + 1):
            out.append(errors_above + j * block_errors / len(block))
        errors_above += block_errors
    return out


def answered(coverage: float, n: int) -> int:
    """ceil(coverage N) in exact arithmetic on the coverage as written (0.8 -> 4/5), at least 1."""
    return max(1, math.ceil(Fraction(str(coverage)) * n))


def selective_metrics(probs, labels) -> dict[str, float]:
    """aurc, augrc, accuracy_at_80 and accuracy_at_90 of one set of predictions."""
    expected = expected_errors(*confidences_and_errors(probs, labels))
    n = len(expected)
    k80, k90 = answered(0.8, n), answered(0.9, n)
    return {
        "aurc": sum(expected[k - 1] / k for k in range(1, n + 1)) / n,
        "augrc": sum(expected) / n**2,
        "accuracy_at_80": 1 - expected[k80 - 1] / k80,
        "accuracy_at_90": 1 - expected[k90 - 1] / k90,
    }
