"""The ECE of the prefix-propagation paper: the estimator its code calls, with that code's settings.

Where it comes from
-------------------
The paper's code (github.com/MonliH/prefix-propagation, commit cea3805237d425ca9141f89fb95b8024124edf20,
``tasks/arxiv/dataset.py``, ``ArxivDataset.compute_metrics``) computes its ECE with a Hugging Face
``evaluate`` module called with no keyword arguments, so at that module's defaults::

    self.ece_metric = evaluate.load("jordyvl/ece")
    real_logits = torch.nn.functional.softmax(torch.tensor(_preds).float(), dim=1)
    result["ece"] = self.ece_metric.compute(references=p.label_ids, predictions=real_logits)["ECE"]

``tasks/hyperpartisan/dataset.py`` and ``tasks/newsgroups/dataset.py`` load the same module and carry the
same call, commented out. ``jordyvl/ece`` is a Hugging Face Space, not a PyPI package, and its ``ece.py``
could not be read here (no hub access). What was read of it:

* its metric card, README.md of huggingface.co/spaces/jordyvl/ece: at revisions
  c890236ef1bd2a91c28bd56d1009a6d29049d9a1 and efa98d85694b14460f46104ca20cae0f0775f323 a description only
  (top-1 ECE, a binned estimator, the L^p equation below); at 6a391137d19239a8fb8571124a2190e3887a1e98 and
  on main (whose README blame names commits 2ff3652 to 9d4511f) one worked example,
  ``compute(references=[0, 1, 2], predictions=[[0.6, 0.2, 0.2], [0, 0.95, 0.05], [0.7, 0.1, 0.2]])``
  -> ``{'ECE': 0.1333333333333334}``, and on main example code that casts predictions to float32;
* its author's thesis (J. Van Landeghem, printed page 27: assets/txts/pg_0059.txt of the Space
  jordyvl/ask_my_thesis, revision 62d0d52e321804aa7ae7233c19cb028a076cf5da) names the knobs: p norm,
  number of bins, scheme (equal-range, equal-mass), bin range, and the "proxy used as bin accuracy
  (e.g., center, upper-edge)";
* other callers pass ``n_bins``, ``scheme="equal-mass"``, ``bin_range=[0, 1]``, ``proxy="upper-edge"``,
  ``p=1`` (github.com/Jordy-VL/DUDEeval ``evaluate_submission.py`` at 8bd6deac0f9747e344338e3850f02bf76744d888;
  github.com/Jordy-VL/calibration-primer ``src/metrics.py`` at 248a4ee175a7431bf19c623c6479172129e7cc2d).

The defaults below (10 equal-range bins over [0, 1], upper-edge proxy, p = 1, float32 input) are the
ones that reproduce the worked example, and no other reading tried does (numbers from
``tests/calibration/test_paper_ece.py``, which checks each):

=====================================================  ===================
float32 probabilities, the bin's upper edge            0.1333333333333334
float32, the bin's center or its mean confidence       0.1167
float64 probabilities, upper edge                      0.3667
=====================================================  ===================

Definition (defaults)
---------------------
Probabilities are cast to float32 first, as ``evaluate``'s features cast them (and as the paper's
``softmax(...).float()`` already were). Top label: c_i = max_k p_ik, h_i = 1[argmax_k p_ik = y_i].
Edges e_0..e_B = ``np.linspace(lo, hi, B + 1)`` (B = ``n_bins``, [lo, hi] = ``bin_range``); example i
goes to bin b with e_b <= c_i < e_{b+1} (``np.digitize(c, e) - 1``: left-closed bins), and c_i = hi to
the last bin. Per non-empty bin, n_b examples, acc_b = (1/n_b) sum_{i in b} h_i, and the bin's
confidence is a fixed number r_b, not its examples' mean confidence:

    r_b = e_{b+1} (proxy "upper-edge", the default)   or   (e_b + e_{b+1}) / 2 (proxy "center")

    paper ECE = ( sum_b n_b |acc_b - r_b|^p / N )^(1/p)

(weights n_b, one division by N, as ``np.average(gaps, weights=counts)`` computes it: that gives the
card's 0.1333333333333334 to the last bit, where sum_b (n_b / N) |...| gives 0.13333333333333336). The
1/p root follows the card's equation ECE_p^p = E|...|^p; only p = 1, the paper's, is checked against an
example.

Why the float32 cast matters on the worked example: float32(0.6) = 0.6000000238 lies above the
edge ``linspace(0, 1, 11)[6]`` = 0.6000000000000001, so the first and third predictions share bin
[0.6, 0.7) (one right, one wrong: acc 0.5, r 0.7000000000000001); 0.95 is alone in [0.9, 1] (right, r 1):
ECE = (2 |0.5 - 0.7000000000000001| + 1 |1 - 1|) / 3 = 0.1333333333333334; with edges b / 10 (0.7) it
would end 0.1333333333333333, so the card's last digit also singles out linspace's edges. In float64, 0.6
falls below that edge, alone in [0.5, 0.6) (right, r 0.6000000000000001), and 0.7 below 0.7000000000000001,
alone in [0.6, 0.7) (wrong): ECE = (|1 - 0.6| + |0 - 0.7| + |1 - 1|) / 3 = 0.3667.

What the upper edge does
------------------------
Standard binned ECE compares acc_b with the bin's mean confidence. With the upper edge, a perfectly
calibrated model whose confidences spread evenly inside each bin scores |mean - upper| = half a bin
width: about 0.05 with 10 bins, however many examples, where the standard ECE tends to 0. In general
E[paper ECE] = E[r(c) - c] for calibrated predictions (while every acc_b < r_b). An overconfident
model (acc below confidence) is scored higher than by the standard ECE, an underconfident one lower:
tests/calibration/test_paper_ece.py measures all three cases against their known truth.

Not implemented: ``scheme="equal-mass"`` (its edges in ece.py could not be read, and the paper's call
does not use it), ``p = inf``, and ``detail=True``.

Example
-------
The card's worked example:

>>> paper_ece([[0.6, 0.2, 0.2], [0, 0.95, 0.05], [0.7, 0.1, 0.2]], [0, 1, 2])
0.1333333333333334
>>> round(paper_ece([[0.6, 0.2, 0.2], [0, 0.95, 0.05], [0.7, 0.1, 0.2]], [0, 1, 2], proxy="center"), 4)
0.1167
"""

from __future__ import annotations

import math

import numpy as np

# names from the modules, not the package: the package's __init__ imports estimators, which imports this
from peftviz.calibration.binning import row_offsets, row_sums
from peftviz.calibration.checks import check_inputs
from peftviz.errors import ConfigError

PAPER_SCHEMES = ("equal-range",)  # "equal-mass" is ece.py's other scheme, not implemented (module docstring)
PROXIES = ("upper-edge", "center")


# ---------------------------------------------------------------- validate


def check_settings(n_bins: int, bin_range, scheme: str, proxy: str, p) -> tuple[float, float]:
    """The settings checked, or a ConfigError that says which is wrong; returns bin_range as (lo, hi)."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ConfigError(f"n_bins must be an int >= 1, got {n_bins!r}")
    if scheme not in PAPER_SCHEMES:
        raise ConfigError(f"scheme {scheme!r} is not implemented for the paper's ECE, expected one of {PAPER_SCHEMES}")
    if proxy not in PROXIES:
        raise ConfigError(f"unknown proxy {proxy!r}, expected one of {PROXIES}")
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) or not 1 <= p < math.inf:
        raise ConfigError(f"p must be a finite number >= 1, got {p!r}")
    try:
        lo, hi = (float(edge) for edge in bin_range)
    except (TypeError, ValueError):
        raise ConfigError(f"bin_range must be two numbers (lo, hi), got {bin_range!r}") from None
    if not 0.0 <= lo < hi <= 1.0:
        raise ConfigError(f"bin_range must satisfy 0 <= lo < hi <= 1, got ({lo}, {hi})")
    return lo, hi


def float32_top_label(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    """Top-label confidence (N,) and correctness (N,) of the probabilities cast to float32, as the
    paper's metric saw them (its features hold float32); argmax ties go to the lowest class."""
    probs, labels = check_inputs(probs, labels)
    single = probs.astype(np.float32)  # (N, C)
    return single.max(axis=1).astype(np.float64), single.argmax(axis=1) == labels


def bin_ids(confidence: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each confidence: e_b <= c < e_{b+1}, c = e_B in the last bin; outside the range, ConfigError."""
    outside = (confidence < edges[0]) | (confidence > edges[-1])
    if outside.any():
        raise ConfigError(
            f"{int(outside.sum())} confidences lie outside bin_range [{edges[0]}, {edges[-1]}], "
            f"e.g. {float(confidence[outside][0])!r}"
        )
    return np.minimum(np.digitize(confidence, edges) - 1, edges.shape[0] - 2)  # (N,)


def bin_proxies(edges: np.ndarray, proxy: str) -> np.ndarray:
    """r_b, the number each bin's accuracy is compared with: its upper edge or its center. (B,)"""
    return edges[1:] if proxy == "upper-edge" else edges[:-1] + np.diff(edges) / 2


# ---------------------------------------------------------------- accumulate


def row_bin_counts(ids: np.ndarray, correct: np.ndarray, indices: np.ndarray, n_bins: int):
    """Examples and hits per resample row and bin, (R, B) each; row r holds the examples indices[r]."""
    n_rows = indices.shape[0]
    flat = row_offsets(n_rows, n_bins, ids[indices])
    count = row_sums(flat, n_rows, n_bins)
    hits = row_sums(flat, n_rows, n_bins, correct[indices].astype(np.float64).ravel())
    return count, hits


# ---------------------------------------------------------------- compute


def eces_from_counts(count: np.ndarray, hits: np.ndarray, proxies: np.ndarray, p) -> np.ndarray:
    """(sum_b n_b |acc_b - r_b|^p / N)^(1/p) per row, from (R, B) counts and hits and (B,) proxies."""
    accuracy = hits / np.maximum(count, 1)  # empty bins: 0, weighted by n_b = 0 below
    weighted = count * np.abs(accuracy - proxies) ** p  # (R, B)
    eces = weighted.sum(axis=1) / count.sum(axis=1)  # weights n_b, divided once by N, as np.average does
    return eces if p == 1 else eces ** (1 / p)


def resampled_paper_ece(
    probs,
    labels,
    indices,
    n_bins: int = 10,
    bin_range=(0.0, 1.0),
    scheme: str = "equal-range",
    proxy: str = "upper-edge",
    p=1,
) -> np.ndarray:
    """The paper's ECE of each resample row, (R,): row r is computed on probs[indices[r]], labels[indices[r]].

    >>> probs = [[0.6, 0.2, 0.2], [0, 0.95, 0.05], [0.7, 0.1, 0.2]]
    >>> resampled_paper_ece(probs, [0, 1, 2], np.array([[0, 1, 2], [0, 0, 1], [2, 2, 2]]))
    array([0.13333333, 0.2       , 0.7       ])
    """
    lo, hi = check_settings(n_bins, bin_range, scheme, proxy, p)
    confidence, correct = float32_top_label(probs, labels)
    edges = np.linspace(lo, hi, n_bins + 1)  # (B + 1,) linspace's edges, as ece.py's: 0.6000000000000001
    count, hits = row_bin_counts(bin_ids(confidence, edges), correct, np.asarray(indices), n_bins)
    return eces_from_counts(count, hits, bin_proxies(edges, proxy), p)


def paper_ece(
    probs,
    labels,
    n_bins: int = 10,
    bin_range=(0.0, 1.0),
    scheme: str = "equal-range",
    proxy: str = "upper-edge",
    p=1,
) -> float:
    """ECE as ``evaluate.load("jordyvl/ece").compute(references=labels, predictions=probs)["ECE"]`` gives it
    at its defaults (module docstring); the keyword arguments are that module's.

    Confidences spread evenly and calibrated (right with probability c): half a bin width, 0.05, in
    expectation (this draw is one standard error, about 0.003, below it), where the standard ECE is near 0:

    >>> from peftviz.calibration.metrics import ece
    >>> rng = np.random.default_rng(0)
    >>> top = rng.uniform(0.5, 1.0, 20_000)
    >>> probs, labels = np.column_stack([top, 1 - top]), (rng.uniform(size=20_000) > top).astype(int)
    >>> round(paper_ece(probs, labels), 3), round(ece(probs, labels), 3)
    (0.047, 0.005)
    """
    probs, labels = check_inputs(probs, labels)
    identity = np.arange(labels.shape[0])[None, :]  # (1, N)
    return float(resampled_paper_ece(probs, labels, identity, n_bins, bin_range, scheme, proxy, p)[0])
