"""The paper's ECE (`peftviz.calibration.paper_ece`) written again from its definition, by plain loops, for the
tests to compare with: no numpy binning (no digitize, no bincount), one example and one bin at a time.

    probabilities cast to float32; c_i = max_k p_ik, h_i = 1[first argmax = y_i]
    edges e_0..e_B = np.linspace(lo, hi, B + 1); example i in bin b when e_b <= c_i < e_{b+1}, c_i = e_B in bin B - 1
    r_b = e_{b+1} ("upper-edge") or e_b + (e_{b+1} - e_b) / 2 ("center")
    ECE = (sum over non-empty b of n_b |acc_b - r_b|^p / N)^(1/p)
"""

from __future__ import annotations

import numpy as np


def top_label_float32(probs, labels) -> list[tuple[float, bool]]:
    """(confidence, correct) per example, from the probabilities cast to float32, first index on ties."""
    out = []
    for row, label in zip(np.asarray(probs, dtype=np.float32), labels):
        best = 0
        for k in range(1, len(row)):
            if row[k] > row[best]:
                best = k
        out.append((float(row[best]), best == int(label)))
    return out


def bin_of(confidence: float, edges: list[float]) -> int:
    if confidence == edges[-1]:
        return len(edges) - 2
    for b in range(len(edges) - 1):
        if edges[b] <= confidence < edges[b + 1]:
            return b
    raise ValueError(f"confidence {confidence} outside [{edges[0]}, {edges[-1]}]")


def reference_paper_ece(probs, labels, n_bins=10, bin_range=(0.0, 1.0), proxy="upper-edge", p=1) -> float:
    edges = [float(e) for e in np.linspace(bin_range[0], bin_range[1], n_bins + 1)]
    members: dict[int, list[bool]] = {}
    for confidence, correct in top_label_float32(probs, labels):
        members.setdefault(bin_of(confidence, edges), []).append(correct)
    total = 0.0
    for b in sorted(members):
        upper, lower = edges[b + 1], edges[b]
        stand_in = upper if proxy == "upper-edge" else lower + (upper - lower) / 2
        accuracy = sum(members[b]) / len(members[b])
        total += len(members[b]) * abs(accuracy - stand_in) ** p
    return (total / len(labels)) ** (1 / p)
