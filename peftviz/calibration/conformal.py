"""Split conformal prediction sets: a set of labels per example that holds the true label with a stated probability.

Inputs as in `peftviz.calibration.metrics`: ``probs`` (N, C) rows of probabilities, integer ``labels`` (N,).
A *score* s(x, k) says how badly label k conforms to the prediction; the set of an example is every label
whose score is at most a threshold q̂ learnt on a calibration set of n examples (Vovk et al. 2005; Lei et al.
2018 for the split form; Angelopoulos & Bates 2023 for an introduction):

    q̂ = the ⌈(n + 1)(1 − α)⌉-th smallest of the calibration scores s(x_i, y_i)   (q̂ = ∞ if that exceeds n)
    C(x) = {k : s(x, k) ≤ q̂}

Guarantee: if the calibration and evaluation examples are exchangeable (e.g. drawn i.i.d. from one
distribution), P(y ∈ C(x)) ≥ 1 − α, and with continuous scores (no ties) also ≤ 1 − α + 1/(n + 1). It holds
on average over calibration sets, whatever the model; a bad model pays with larger sets, not less coverage.

The two scores (`SCORES`):

* LAC, "least ambiguous set-valued classifier" (Sadinle, Lei & Wasserman, JASA 2019): s(x, k) = 1 − p_k,
  so C(x) = {k : p_k ≥ 1 − q̂}: every label above one probability threshold. The smallest sets on average,
  but the same threshold for easy and hard examples.
* APS, "adaptive prediction sets" (Romano, Sesia & Candès, NeurIPS 2020), randomized as in the paper:
  with the labels sorted by decreasing probability and U ~ Uniform(0, 1) drawn once per example,
  s(x, k, U) = Σ_{j ranked above k} p_j + U · p_k. The set adds labels in decreasing probability while
  their cumulative mass stays ≤ q̂, the last one with a probability that makes the mass exactly q̂ on
  average. Without U (the last label always in) the scores jump, ties at q̂ always count as covered and
  APS over-covers (more than 1 − α + 1/(n + 1)); the randomization is what gives coverage ≈ 1 − α
  (tests/calibration/test_conformal.py measures it; docs/confidence.md gives the numbers). A randomized
  set can be empty: that example is counted as not covered, with size 0.

Per evaluation example: covered = 1[y ∈ C(x)] and size = |C(x)|; per run: the empirical coverage (their
mean) and the mean set size (`conformal_sets`).

Intervals (`conformal_sets(n_resamples=R)`): draw r resamples BOTH sets of examples, the calibration rows
with `stats.resample_indices(n_cal, R, seed + 1)` and the evaluation rows with `resample_indices(n_eval,
R, seed)` (the rows every estimator of that split uses), recomputes q̂_r on its calibration row and
averages coverage and size over its evaluation row, so the interval holds both sources of noise: which
examples calibrated, and which were judged. The point values are on all data. U is drawn once per example
(`uniforms`, seeded), not per resample: a resample is the same examples with the same U.

MAPIE (1.6.0, `SplitConformalClassifier(conformity_score="lac" | "aps", prefit=True)`, the field's
library) implements both scores; its randomized APS draws U with `sklearn.utils.check_random_state`, which
for an int seed makes a fresh `RandomState(seed)` per call, so calibration and prediction draw U from the
same stream's start, and it keeps the last label when V = (cumulative mass − q̂) / p_last ≤ U' — the same
set as here with U = 1 − U' (its calibration score, mass up to and with y minus U' p_y, is this one).
It is not called at runtime: it conformalizes one estimator on one calibration set per call, so R
resamples are R fits and predictions of a wrapped estimator, and it draws U anew per call, so a resample
could not keep each example's U. Here all resamples are a few array operations on the (N, C) score
matrix (benchmarks/conformal.py, 213 × 5 predictions calibrating and 213 judged, 1000 resamples: MAPIE
2.3 s (LAC) and 4.3 s (APS), this code 24 ms: 98× and 187×).
tests/calibration/test_conformal.py checks this code equal to MAPIE's sets (handed MAPIE's U), on
simulated and on stored predictions. MAPIE's tolerance is kept: a label whose score is within
`TOLERANCE` of q̂ is in the set, so float rounding in the sums does not drop it.

numpy only at import time.

Example: three calibration examples whose true label had probability 0.9, 0.8, 0.6 (scores 0.1, 0.2, 0.4);
at α = 0.25, q̂ is the ⌈4 · 0.75⌉ = 3rd smallest score, 0.4, so a set is every label with p ≥ 0.6
(the second evaluation example's set is empty):

>>> calibration = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
>>> found = conformal_sets(calibration, np.array([0, 1, 0]), np.array([[0.7, 0.3], [0.5, 0.5]]), np.array([0, 1]),
...                        alpha=0.25, score="lac")
>>> round(found.threshold, 4), found.sizes.tolist(), found.covered.tolist(), found.coverage, found.set_size
(0.4, [1, 0], [True, False], 0.5, 0.5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from peftviz.calibration import stats
from peftviz.errors import ConfigError

SCORES = {"lac": "LAC (threshold)", "aps": "APS (adaptive, randomized)"}
TOLERANCE = 1e-8  # MAPIE's EPSILON: a score this close to q̂ counts as at most q̂
U_STREAM = 3  # the seed stream of the per-example U (apart from the resample rows' streams)


def check_alpha(alpha: float) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha (the miscoverage rate) must lie strictly between 0 and 1, got {alpha!r}")


def check_score(score: str) -> None:
    if score not in SCORES:
        raise ConfigError(f"unknown conformal score {score!r}; choose one of {', '.join(SCORES)}")


def uniforms(n_examples: int, seed: int = 0, stream: int = 0) -> np.ndarray:
    """(n_examples,) the APS randomization U, one per example, seeded (`stream` keeps two splits apart)."""
    return np.random.default_rng([seed, U_STREAM, stream]).random(n_examples)


def label_scores(probs: np.ndarray, score: str, u: np.ndarray | None = None) -> np.ndarray:
    """(..., C) s(x, k) of every label k of every example: 1 − p_k (LAC), or Σ_{j above k} p_j + U p_k (APS;
    `u` (...,) one U per example, required). Labels of equal probability are ranked as MAPIE ranks them."""
    check_score(score)
    if score == "lac":
        return 1.0 - probs
    if u is None or np.shape(u) != probs.shape[:-1]:
        raise ConfigError(f"APS needs one U per example, shape {probs.shape[:-1]}, got {np.shape(u)}")
    order = np.flip(np.argsort(probs, axis=-1), axis=-1)  # decreasing probability, as MAPIE sorts
    sorted_probs = np.take_along_axis(probs, order, axis=-1)
    above_sorted = np.cumsum(sorted_probs, axis=-1) - sorted_probs  # (..., C) mass ranked above each
    above = np.empty_like(above_sorted)
    np.put_along_axis(above, order, above_sorted, axis=-1)
    return above + np.asarray(u)[..., None] * probs


def true_label_scores(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(...,) s(x_i, y_i): each example's score at its true label."""
    return np.take_along_axis(scores, labels[..., None], axis=-1)[..., 0]


def quantile_rank(n_calibration: int, alpha: float) -> int:
    """k = ⌈(n + 1)(1 − α)⌉, the rank of q̂ among the n calibration scores (k > n: q̂ = ∞)."""
    return math.ceil((n_calibration + 1) * (1.0 - alpha))  # in floats, as MAPIE rounds it


def threshold(calibration_scores: np.ndarray, alpha: float) -> np.ndarray:
    """(...) q̂ of each row of calibration scores (..., n): its k-th smallest (`quantile_rank`), or ∞."""
    n = calibration_scores.shape[-1]
    rank = quantile_rank(n, alpha)
    if rank > n:
        return np.full(calibration_scores.shape[:-1], np.inf)
    return np.partition(calibration_scores, rank - 1, axis=-1)[..., rank - 1]


@dataclass(frozen=True)
class ConformalSets:
    """Split conformal sets of one evaluation set: per example covered and size, their means, and draws."""

    score: str
    alpha: float
    threshold: float  # q̂ on all calibration examples
    covered: np.ndarray  # (N_eval,) bool: y in the set
    sizes: np.ndarray  # (N_eval,) int: the set's size
    coverage_draws: np.ndarray  # (R,) coverage of each resample (empty without resamples)
    set_size_draws: np.ndarray  # (R,) mean set size of each resample
    n_calibration: int

    @property
    def coverage(self) -> float:
        return float(self.covered.mean())

    @property
    def set_size(self) -> float:
        return float(self.sizes.mean())


def _check_split(probs, labels, name: str) -> tuple[np.ndarray, np.ndarray]:
    probs, labels = np.asarray(probs, dtype=np.float64), np.asarray(labels)
    if probs.ndim != 2 or probs.shape[0] == 0:
        raise ConfigError(f"the {name} set needs probabilities of shape (N, C) with N >= 1, got {probs.shape}")
    if labels.shape != (probs.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise ConfigError(f"the {name} labels must be {probs.shape[0]} integers, got {labels.dtype} {labels.shape}")
    if labels.min() < 0 or labels.max() >= probs.shape[1]:
        raise ConfigError(f"the {name} labels must lie in 0..{probs.shape[1] - 1}")
    return probs, labels


def conformal_sets(
    cal_probs,
    cal_labels,
    eval_probs,
    eval_labels,
    alpha: float,
    score: str,
    n_resamples: int = 0,
    seed: int = 0,
    u_calibration=None,
    u_evaluation=None,
) -> ConformalSets:
    """Calibrate q̂ on (cal_probs, cal_labels), judge the sets on (eval_probs, eval_labels) at `alpha`.

    APS's U: `u_calibration` (n_cal,) and `u_evaluation` (N_eval,), else `uniforms(n, seed, 0 | 1)`.
    With n_resamples = R > 0, R draws of coverage and size resampling both sets (see the module).
    """
    check_alpha(alpha)
    check_score(score)
    cal_probs, cal_labels = _check_split(cal_probs, cal_labels, "calibration")
    eval_probs, eval_labels = _check_split(eval_probs, eval_labels, "evaluation")
    if cal_probs.shape[1] != eval_probs.shape[1]:
        raise ConfigError(
            f"calibration and evaluation must have the same classes: {cal_probs.shape[1]} and "
            f"{eval_probs.shape[1]} columns of probabilities"
        )
    n_cal, n_eval = len(cal_labels), len(eval_labels)
    u_cal = uniforms(n_cal, seed, 0) if u_calibration is None else np.asarray(u_calibration, dtype=np.float64)
    u_eval = uniforms(n_eval, seed, 1) if u_evaluation is None else np.asarray(u_evaluation, dtype=np.float64)
    cal_true = true_label_scores(label_scores(cal_probs, score, u_cal), cal_labels)  # (n_cal,)
    eval_scores = label_scores(eval_probs, score, u_eval)  # (N_eval, C)
    eval_true = true_label_scores(eval_scores, eval_labels)  # (N_eval,)
    q_hat = float(threshold(cal_true, alpha))
    coverage_draws = set_size_draws = np.empty(0)
    if n_resamples:
        cal_rows = stats.resample_indices(n_cal, n_resamples, seed + 1)  # (R, n_cal)
        eval_rows = stats.resample_indices(n_eval, n_resamples, seed)  # (R, N_eval)
        q_draws = threshold(cal_true[cal_rows], alpha)[:, None] + TOLERANCE  # (R, 1)
        coverage_draws = (eval_true[eval_rows] <= q_draws).mean(axis=1)
        in_sets = eval_scores[eval_rows] <= q_draws[:, :, None]  # (R, N_eval, C)
        set_size_draws = in_sets.sum(axis=2).mean(axis=1)
    return ConformalSets(
        score,
        float(alpha),
        q_hat,
        eval_true <= q_hat + TOLERANCE,
        (eval_scores <= q_hat + TOLERANCE).sum(axis=1),
        coverage_draws,
        set_size_draws,
        n_cal,
    )
