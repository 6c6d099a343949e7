"""Selective prediction: the risk–coverage curve and its areas, for every bootstrap resample row at once.

A selective classifier answers the predictions it is most confident of and abstains on the rest.
Inputs as in `peftviz.calibration.estimators`: confidence c_i = max_k p_ik and error
e_i = 1[argmax_k p_ik != y_i] of N examples, and resample rows ``indices`` (R, N) (the identity row
[0, 1, ..., N-1] is "all data"). Per row, sort by confidence, most confident first:

* E_k = the expected number of errors among the k most confident (k = 1..N), ties in confidence
  broken at random *in expectation*. Within a block of B tied confidences holding e_B errors, with
  A examples above the block and k inside it (A < k <= A + B):

      E_k = (errors above the block) + (k - A) e_B / B

  i.e. a tied block's errors are spread evenly over its places. Without ties E_k is the running
  count of errors. Ties are common: a fine-tuned model's float32 confidences saturate (38 of
  prefix-tuning's 213 test confidences in the quick comparison repeat another's; one-hot rows give
  exactly 1.0). Breaking them by sort order would make the value depend on the order the examples
  were stored in: 40 predictions tied at 1.0 holding 10 errors, then 20 right ones, give AURC 0.234 by this rule, and 0.458 or 0.092 with the errors
  sorted first or last in the block (tests).
* Selective risk at coverage k/N: r_k = E_k / k (the error rate among the answered).
* AURC = (1/N) sum_{k=1..N} r_k (Geifman & El-Yaniv, NeurIPS 2017): the area under the
  risk–coverage curve, a right Riemann sum at the N coverages k/N.
* AUGRC = (1/N) sum_k (k/N) r_k = (1/N^2) sum_k E_k (Traub et al., "Overcoming common flaws in the
  evaluation of selective classification systems", NeurIPS 2024): the area under the *generalized*
  risk P(answered and wrong) = E_k / N. It weights every coverage by how many are answered, so the
  few most confident predictions (whose r_k is noise over 1 or 2 examples) barely count.
* Accuracy at coverage kappa = 1 - E_k / k with k = ceil(kappa N - 1e-9): the accuracy on the kappa N
  most confident (the guard: 0.07 * 100 is 7.000000000000001 in floats, and must answer 7, not 8).

Both areas lie in [0, 1]; all correct gives 0. A perfect ranking (all m errors least confident)
gives E_k = max(0, k - (N - m)), so AURC = (1/N) sum_{k > N-m} (k - N + m) / k and AUGRC = m(m+1) / (2N^2).

How this differs from the references, and why:

* TorchUncertainty 0.13 (``torch_uncertainty.metrics.classification.AURC``/``AUGRC``): the same r_k, but
  ties follow ``argsort`` order (arbitrary), the area is a trapezoid over k = 1..N,
  (1/N) (sum_k r_k - (r_1 + r_N)/2), and it is divided by 1 - 1/N "as if its support was [0, 1]".
  Without ties, theirs = (AURC - (r_1 + r_N) / 2N) / (1 - 1/N), and AUGRC's (AUGRC - (E_1 + E_N) / 2N^2)
  / (1 - 1/N) (tests check the first); on the quick comparison's runs (N = 213) they differ from ours
  by 1e-4. Not used: it needs torch and torchmetrics for a sum, takes one set of predictions at a
  time, and its tie rule makes the value depend on the storage order.
* fd-shifts (Traub et al.'s ``RiskCoverageStats.augrc``): points only where the confidence changes,
  plus (0, 0), and the trapezoid between them. Within a tied block E_k is linear in k, so its
  trapezoid is exactly (1/N) sum_k (E_{k-1} + E_k) / 2N = AUGRC - e/(2N), e the error rate:
  the same expected-tie rule, a different quadrature (tests check the relation). Not used: it
  loops over the examples in Python, one set of predictions at a time; here R = 1000 resamples of
  N = 213 take 0.04 s for all four estimators.
* Here: the right sum (1/N) sum_k, the Geifman & El-Yaniv and Traub et al. definitions, with no
  renormalisation, so AUGRC equals the exact expectation over random tie-breaks of the empirical
  P(answered and wrong) averaged over the N coverages.

numpy only (the estimators' rule, `peftviz.calibration.estimators`, which wraps these as ``aurc``,
``augrc``, ``accuracy_at_80``, ``accuracy_at_90``).

Example: five predictions, two wrong (marked x); confidences 0.9, 0.8 (x), 0.8, 0.7, 0.6 (x).
E = 0, 0.5, 1, 1, 2 (the tied pair at 0.8 holds one error, spread over its two places), so
r = 0, 0.25, 1/3, 0.25, 0.4; AURC = 1.2333 / 5 = 0.24667 and AUGRC = 4.5 / 25 = 0.18:

>>> confidence = np.array([0.9, 0.8, 0.8, 0.7, 0.6])
>>> errors = np.array([0, 1, 0, 0, 1], dtype=bool)
>>> expected = expected_errors(confidence, errors, np.arange(5)[None])
>>> expected
array([[0. , 0.5, 1. , 1. , 2. ]])
>>> round(float(aurc(expected)[0]), 5), round(float(augrc(expected)[0]), 5)
(0.24667, 0.18)
>>> accuracy_at(expected, 0.8)  # the 4 most confident: 1 error
array([0.75])
"""

from __future__ import annotations

import math

import numpy as np

from peftviz.errors import ConfigError

COVERAGE_GUARD = 1e-9  # ceil(kappa N - guard): kappa N that lands a rounding error above an integer stays it


def expected_errors(confidence: np.ndarray, errors: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """(R, N) E_k for k = 1..N of each resample row: expected errors among its k most confident, ties
    spread evenly (see the module). confidence (N,) float, errors (N,) bool, indices (R, N) int."""
    row_confidence = confidence[indices]  # (R, N)
    order = np.argsort(-row_confidence, axis=1, kind="stable")  # most confident first
    ranked = np.take_along_axis(row_confidence, order, axis=1)  # (R, N)
    ranked_errors = np.take_along_axis(errors[indices].astype(np.float64), order, axis=1)  # (R, N)
    n_rows, n = ranked.shape
    before = np.zeros((n_rows, n + 1))
    np.cumsum(ranked_errors, axis=1, out=before[:, 1:])  # (R, N + 1) errors among the first j
    starts, ends = _tie_blocks(ranked)  # (R, N) each place's block [start, end)
    block_errors = np.take_along_axis(before, ends, axis=1) - np.take_along_axis(before, starts, axis=1)
    places = np.arange(1, n + 1)  # k
    return np.take_along_axis(before, starts, axis=1) + (places - starts) * block_errors / (ends - starts)


def _tie_blocks(ranked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R, N) each place's tied block in a row sorted descending: the first place of the block, and one
    past its last."""
    n_rows, n = ranked.shape
    places = np.broadcast_to(np.arange(n), (n_rows, n))
    new_block = np.ones((n_rows, n), dtype=bool)
    new_block[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
    starts = np.maximum.accumulate(np.where(new_block, places, 0), axis=1)
    block_ends = np.ones((n_rows, n), dtype=bool)  # the block's last place
    block_ends[:, :-1] = new_block[:, 1:]
    ends = np.minimum.accumulate(np.where(block_ends, places + 1, n)[:, ::-1], axis=1)[:, ::-1]
    return starts, ends


def aurc(expected: np.ndarray) -> np.ndarray:
    """(R,) AURC = (1/N) sum_k E_k / k of expected errors (R, N)."""
    return (expected / np.arange(1, expected.shape[1] + 1)).mean(axis=1)


def augrc(expected: np.ndarray) -> np.ndarray:
    """(R,) AUGRC = (1/N^2) sum_k E_k of expected errors (R, N)."""
    return expected.sum(axis=1) / expected.shape[1] ** 2


def answered(coverage, n: int) -> np.ndarray:
    """k = ceil(coverage N), at least 1: how many of N predictions a coverage answers (array or scalar).

    >>> [int(answered(coverage, n)) for coverage, n in [(0.8, 200), (0.8, 213), (0.01, 50)]]
    [160, 171, 1]
    """
    coverage = np.asarray(coverage, dtype=np.float64)
    if np.any(~np.isfinite(coverage)) or np.any((coverage <= 0) | (coverage > 1)):
        raise ConfigError(f"coverage must lie in (0, 1], got {coverage.tolist()}")
    return np.maximum(np.ceil(coverage * n - COVERAGE_GUARD), 1).astype(np.int64)


def risk_at(expected: np.ndarray, coverage) -> np.ndarray:
    """(R,) or (R, G): selective risk E_k / k at k = ceil(coverage N), for one coverage or a grid (G,)."""
    k = answered(coverage, expected.shape[1])
    return expected[:, k - 1] / k


def accuracy_at(expected: np.ndarray, coverage: float) -> np.ndarray:
    """(R,) accuracy among the ceil(coverage N) most confident: 1 - selective risk."""
    return 1.0 - risk_at(expected, coverage)


def coverage_grid(n_points: int = 100) -> np.ndarray:
    """(n_points,) coverages 1/n_points, 2/n_points, ..., 1: where a risk–coverage curve is read.

    >>> coverage_grid(4)
    array([0.25, 0.5 , 0.75, 1.  ])
    """
    if n_points < 1 or math.floor(n_points) != n_points:
        raise ConfigError(f"n_points must be an integer >= 1, got {n_points}")
    return np.arange(1, n_points + 1) / n_points
