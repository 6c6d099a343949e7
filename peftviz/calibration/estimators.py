"""Point estimates and bootstrap intervals of accuracy and calibration, one registry for all.

Inputs as in `peftviz.calibration.metrics`: ``probs`` (N, C) rows of probabilities, integer ``labels`` (N,).
Top-label view unless said: confidence c_i = max_k p_ik, correct h_i = 1[argmax_k p_ik = y_i].
Binned estimators use calibration's bins (``scheme`` "width" or "mass", ``n_bins``); per non-empty
bin b with n_b examples: conf_b = mean c_i, acc_b = mean h_i, and w_b = n_b / N.

This registry is the one source of every metric: `peftviz.calibration.metrics` (ece, mce, ...) and the
numbers a training run writes per epoch (`peftviz.training.inference.evaluation_metrics`) are its
estimators on the identity resample, and the pages and ``report`` read its point values and intervals.
Its arithmetic is the one those per-epoch numbers always had, so stores trained before and after it
computed them agree to the last bit: a bin's sums add its examples in the row's order (equal-mass bins
too), ECE = sum_b |hits_b - conf_sum_b| / N, a bin's gap = |hits_b - conf_sum_b| / n_b, and macro F1
averages over the present classes only, as sklearn does.

The estimators, by their names in ESTIMATORS
---------------------------------------------
* accuracy = (1/N) sum_i h_i
* macro_f1 = mean over K of F1_k, F1_k = 2 TP_k / (n_pred_k + n_true_k), K = classes present in the
  labels or the predictions (sklearn's ``f1_score(average="macro")``; absent classes are skipped)
* ece = sum_b w_b |acc_b - conf_b| with equal-width bins; ece_mass the same with equal-mass bins
  (Naeini et al. 2015; Guo et al. 2017) -- `calibration.ece`
* debiased_ece = sum_b w_b (2 |acc_b - conf_b| - E|A_b - conf_b|), A_b ~ Normal(acc_b, acc_b(1 - acc_b)/n_b)
  (Kumar, Liang & Ma, NeurIPS 2019, the l1 ``normal_debiased_ce`` of their ``calibration`` package):
  plug-in minus its estimated bias E|A_b - conf_b| - |acc_b - conf_b|. Kumar et al. estimate the
  expectation with 1000 normal draws; here it is the folded-normal mean in closed form,
  E|m + s Z| = s sqrt(2/pi) exp(-m^2 / 2s^2) + m (1 - 2 Phi(-m/s)), the same quantity without seed or
  Monte Carlo noise. It can be negative on well-calibrated data; it is not clipped at 0, because
  clipping adds back a positive bias. In l1 the correction is partial where the true gap is near 0
  (tests: calibrated predictions, n = 200, mean ece 0.056, debiased_ece 0.032). A bin with acc_b in {0, 1} (e.g. a single example) gets s = 0,
  no correction. Their package is not used: it fixes its own bins and randomness (global np.random),
  refuses bins with fewer than 2 examples, and loops in Python.
* smooth_ece = ``relplot.smECE(c, h)`` (Blasiok & Nakkiran 2023): ECE of the kernel-smoothed
  reliability curve at the bandwidth sigma with smECE_sigma = sigma. Computed by `peftviz.calibration.smooth_ece`,
  relplot's discretization and bandwidth search for all resample rows at once (tests: equal to
  relplot's to ~1e-16, the same sigma)
* ece_sweep (Roelofs et al., AISTATS 2022, "ECE_sweep"): the equal-mass ECE at
  b* = max{b in 1..N : for every b' <= b, the b' equal-mass bin accuracies are non-decreasing},
  i.e. sweep b = 1, 2, ... and stop before the first b whose accuracies decrease somewhere. This is
  the paper's definition and its authors' code (caltrain ``em_monotonic_sweep``); it is not the
  largest monotone b overall, which can jump to a huge b after a run of non-monotone ones. Bins are
  calibration's equal-mass bins. Own code: no installed library has it.
* classwise_ece = (1/C) sum_k ECE(p_k, 1[y = k]) (Kull et al. 2019); mce = max_b |acc_b - conf_b|;
  ace = mean of |acc_b - conf_b| over the non-empty bins, unweighted (netcal's ACE, Neumann et al. 2018)
* paper_ece = sum_b (n_b / N) |acc_b - upper_b|: the ECE the prefix-propagation paper's code computes
  (``evaluate.load("jordyvl/ece")`` at its defaults, `peftviz.calibration.paper_ece`): probabilities cast to
  float32, 10 equal-range bins over [0, 1] left-closed, and each bin's upper edge in place of its mean
  confidence. Always those bins, whatever ``n_bins`` and ``scheme``: it is the number to set beside the
  paper's. A calibrated model whose confidences spread evenly scores half a bin width (0.05) on it, not 0.
* nll = -(1/N) sum_i log max(p_i,y_i, 1e-12); brier = (1/N) sum_i sum_k (p_ik - 1[y_i = k])^2
* CORP Brier decomposition (Dimitriadis, Gneiting & Jordan, PNAS 2021), one-vs-rest per class and
  summed over k (the multiclass Brier score is sum_k BS(p_k) with BS(x) = (1/N) sum_i (x_i - o_ik)^2,
  o_ik = 1[y_i = k]): with x_k = the isotonic (PAV) regression of o_k on p_k and o_k-bar its mean,
    brier_reliability = sum_k BS(p_k) - BS(x_k)         (miscalibration, >= 0)
    brier_resolution  = sum_k BS(o_k-bar) - BS(x_k)     (discrimination, >= 0)
    brier_uncertainty = sum_k o_k-bar (1 - o_k-bar)     (labels only)
  so brier = reliability - resolution + uncertainty exactly. The PAV fit is sklearn's
  ``IsotonicRegression`` fit (ties in p_k pooled first, then PAV with the pooled counts as weights);
  it is done here with ``scipy.optimize.isotonic_regression`` on the distinct values weighted by
  the bootstrap counts, because a resample then costs one small PAV instead of a refit on a
  copied array (25x faster; tests check equality with sklearn).
* Selective prediction (`peftviz.calibration.selective`): sorted by confidence, most confident first,
  E_k = the expected errors among the k most confident (ties in confidence spread evenly) and r_k = E_k / k;
  aurc = (1/N) sum_k r_k (Geifman & El-Yaniv 2017); augrc = (1/N^2) sum_k E_k (Traub et al. 2024);
  accuracy_at_80, accuracy_at_90 = 1 - r_k at k = ceil(0.8 N), ceil(0.9 N)

Bootstrap (`peftviz.calibration.stats`): rows of ``resample_indices(N, R, seed)``; every estimator of one run,
and both runs of a paired comparison, see the same rows. The interval is the percentile interval
of the R resampled values, widened to hold the point value on all data where it falls outside
(`stats.interval_around`): near 0, a calibration error's resamples fold noise upward and can all lie
above the value.

References: Naeini, Cooper & Hauskrecht (AAAI 2015); Guo et al. (ICML 2017); Kull et al.
(NeurIPS 2019); Kumar, Liang & Ma (NeurIPS 2019); Roelofs et al. (AISTATS 2022); Blasiok & Nakkiran
(2023, relplot); Dimitriadis, Gneiting & Jordan (PNAS 2021); Efron & Tibshirani (1993).

Example
-------
The registry names every estimator; each entry says how to read it and computes it on all data:

>>> list(ESTIMATORS)[:6]
['accuracy', 'macro_f1', 'ece', 'ece_mass', 'debiased_ece', 'smooth_ece']
>>> len(ESTIMATORS)
20
>>> ESTIMATORS["ece"].heading, ESTIMATORS["ece"].lower_is_better
('ECE (equal width)', True)
>>> round(ESTIMATORS["ece"].compute([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.7, 0.3]], [0, 1, 1, 0]), 4)
0.3
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

# names from the modules (not `from peftviz.calibration import binning`): the package's __init__
# imports metrics, which imports this module
from peftviz.calibration.binning import (
    RowBinTotals,
    mass_group_sizes,
    row_bin_totals,
    row_offsets,
    row_sums,
    top_label,
    width_bin_ids,
    width_edges,
)
from peftviz.calibration.checks import check_binning, check_inputs, check_probs
from peftviz.calibration.paper_ece import resampled_paper_ece
from peftviz.calibration.selective import accuracy_at, augrc, aurc, expected_errors
from peftviz.calibration.stats import LEVEL, check_resampling, interval_around, resample_indices
from peftviz.errors import ConfigError

_CHUNK_ELEMENTS = 2_000_000  # resample rows x N per pass: bounds the work arrays to ~100 MB
PROB_FLOOR = 1e-12  # clip before log: a wrong prediction with p_y = 0 gives NLL ~27.6, not inf


# ---------------------------------------------------------------- per-chunk data


class _Resamples:
    """Resample rows over one prediction set, caching the work that several estimators share."""

    def __init__(self, probs: np.ndarray, labels: np.ndarray, indices: np.ndarray, n_bins: int, scheme: str):
        self.probs, self.labels, self.indices = probs, labels, indices
        self.n_bins, self.scheme = n_bins, scheme
        self.confidence, self.correct = top_label(probs, labels)
        self._totals: dict[str, RowBinTotals] = {}

    @property
    def n_rows(self) -> int:
        return self.indices.shape[0]

    def totals(self, scheme: str) -> RowBinTotals:
        """Top-label bin totals of every row under `scheme` (ece_mass bins by mass whatever `self.scheme`)."""
        if scheme not in self._totals:
            self._totals[scheme] = row_bin_totals(self.confidence, self.correct, self.indices, self.n_bins, scheme)
        return self._totals[scheme]

    @property
    def bin_totals(self) -> RowBinTotals:
        return self.totals(self.scheme)

    @cached_property
    def brier_terms(self) -> dict[str, np.ndarray]:
        return _brier_decomposition(self.probs, self.labels, self.indices)

    @cached_property
    def expected_errors(self) -> np.ndarray:
        """(R, N) expected errors among each row's k most confident (`selective.expected_errors`)."""
        return expected_errors(self.confidence, ~self.correct, self.indices)


# ---------------------------------------------------------------- estimators, one value per row


def _accuracy(s: _Resamples) -> np.ndarray:
    return s.correct[s.indices].mean(axis=1)


def _macro_f1(s: _Resamples) -> np.ndarray:
    """Macro F1 from per-row confusion counts (numpy, not sklearn: it runs on every resample)."""
    n_classes = s.probs.shape[1]
    true_ids = row_offsets(s.n_rows, n_classes, s.labels[s.indices])
    pred_ids = row_offsets(s.n_rows, n_classes, s.probs.argmax(axis=1)[s.indices])
    n_true = row_sums(true_ids, s.n_rows, n_classes)
    n_pred = row_sums(pred_ids, s.n_rows, n_classes)
    true_positives = row_sums(true_ids, s.n_rows, n_classes, s.correct[s.indices].astype(np.float64).ravel())
    present = (n_true + n_pred) > 0
    f1 = 2 * true_positives / np.where(present, n_true + n_pred, 1)
    return _mean_of_used(f1, present)  # over the present classes alone, as sklearn averages


def _mean_of_used(values: np.ndarray, used: np.ndarray) -> np.ndarray:
    """Per row, np.mean(values[row][used[row]]) to the last bit. Zeros summed in would regroup numpy's
    pairwise sum (8 entries or more) and move the last bit, so each row's used entries move to the front,
    in order, and rows with the same count k sum their first k entries together."""
    packed = np.take_along_axis(values, np.argsort(~used, axis=1, kind="stable"), axis=1)
    counts = used.sum(axis=1)
    means = np.empty(values.shape[0])
    for k in np.unique(counts):
        rows = counts == k
        means[rows] = packed[rows, :k].sum(axis=1) / k
    return means


def _binned_ece(scheme: str) -> Callable[[_Resamples], np.ndarray]:
    def resampled(s: _Resamples) -> np.ndarray:
        return s.totals(scheme).eces()

    return resampled


def _bin_gaps(totals: RowBinTotals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """acc_b - conf_b, acc_b and count (empty bins: gap 0, acc 0) per row and bin."""
    count = np.maximum(totals.count, 1)  # empty bins have zero sums, so they give 0, not 0/0
    accuracy = totals.hit_sum / count
    return accuracy - totals.confidence_sum / count, accuracy, totals.count


def _mce(s: _Resamples) -> np.ndarray:
    return s.bin_totals.abs_gaps().max(axis=1)  # an empty bin's 0 never exceeds a non-empty one's gap


def _ace(s: _Resamples) -> np.ndarray:
    return _mean_of_used(s.bin_totals.abs_gaps(), s.bin_totals.count > 0)  # over each row's non-empty bins


def _paper_ece(s: _Resamples) -> np.ndarray:
    return resampled_paper_ece(s.probs, s.labels, s.indices)  # the paper's settings, not s.n_bins, s.scheme


def _folded_normal_mean(mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """E|mean + sd Z| for Z ~ Normal(0, 1); |mean| where sd = 0."""
    from scipy.special import ndtr  # local: keeps `import peftviz.calibration.estimators` light

    spread = sd > 0
    safe_sd = np.where(spread, sd, 1.0)
    folded = safe_sd * np.sqrt(2 / np.pi) * np.exp(-0.5 * (mean / safe_sd) ** 2) + mean * (
        1 - 2 * ndtr(-mean / safe_sd)
    )
    return np.where(spread, folded, np.abs(mean))


def _debiased_ece(s: _Resamples) -> np.ndarray:
    gap, accuracy, count = _bin_gaps(s.bin_totals)
    sd = np.sqrt(accuracy * (1 - accuracy) / np.maximum(count, 1))
    debiased_gap = 2 * np.abs(gap) - _folded_normal_mean(gap, sd)  # |gap| - (E|A - conf| - |gap|)
    return (count * debiased_gap).sum(axis=1) / s.indices.shape[1]


def _smooth_ece(s: _Resamples) -> np.ndarray:
    from peftviz.calibration.smooth_ece import resampled_smooth_ece  # relplot's smECE, every row in one pass

    return resampled_smooth_ece(s.confidence, s.correct, s.indices)[0]


def _sweep_bin_counts(hits_before: np.ndarray) -> np.ndarray:
    """b* of ECE_sweep per row: the last b before the first b whose equal-mass bin accuracies decrease.
    hits_before (R, N + 1): the running count of hits in confidence order, from 0. All rows sweep b
    together; a row leaves the sweep at its first decrease."""
    n_rows, n_examples = hits_before.shape[0], hits_before.shape[1] - 1
    chosen = np.full(n_rows, n_examples)
    sweeping = np.arange(n_rows)
    for n_bins in range(2, n_examples + 1):
        if sweeping.size == 0:
            break
        sizes = mass_group_sizes(n_examples, n_bins)
        ends = np.cumsum(sizes)
        hits = hits_before[sweeping]  # (S, N + 1): integers, exact in float64
        accuracy = (hits[:, ends] - hits[:, ends - sizes]) / sizes  # (S, b)
        falls = np.any(np.diff(accuracy, axis=1) < 0, axis=1)
        chosen[sweeping[falls]] = n_bins - 1
        sweeping = sweeping[~falls]
    return chosen


def _sweep_bins(confidence: np.ndarray, correct: np.ndarray) -> int:
    """b* of ECE_sweep for one set of predictions."""
    sorted_hits = correct[np.argsort(confidence, kind="stable")].astype(np.float64)
    return int(_sweep_bin_counts(np.concatenate([[0.0], np.cumsum(sorted_hits)])[None])[0])


def _ece_sweep(s: _Resamples) -> np.ndarray:
    """Every row's equal-mass ECE at its own b*, from running sums in each row's confidence order."""
    n_examples = s.indices.shape[1]
    order = np.argsort(s.confidence[s.indices], axis=1, kind="stable")
    rows = np.take_along_axis(s.indices, order, axis=1)  # (R, N) each row in confidence order
    start = np.zeros((rows.shape[0], 1))
    hits_before = np.hstack([start, np.cumsum(s.correct[rows], axis=1, dtype=np.float64)])  # (R, N + 1)
    confidence_before = np.hstack([start, np.cumsum(s.confidence[rows], axis=1)])  # (R, N + 1)
    chosen = _sweep_bin_counts(hits_before)  # (R,)
    eces = np.empty(chosen.shape[0])
    for n_bins in np.unique(chosen):
        at = chosen == n_bins
        edges = np.concatenate([[0], np.cumsum(mass_group_sizes(n_examples, int(n_bins)))])  # (b + 1,)
        gaps = np.diff(hits_before[at][:, edges], axis=1) - np.diff(confidence_before[at][:, edges], axis=1)
        eces[at] = np.abs(gaps).sum(axis=1) / n_examples  # sum_b |hits_b - conf_b| / N
    return eces


def _classwise_ece(s: _Resamples) -> np.ndarray:
    """Mean over classes of the one-vs-rest ECE. Classes go in blocks of about _CHUNK_ELEMENTS entries
    (rows x examples x classes) per pass: O(R N C) work in C / block passes, not one pass per class (50,000
    classes took 8 s one by one), and memory bounded whatever C."""
    n_rows, n_examples = s.indices.shape
    n_classes = s.probs.shape[1]
    block = max(1, _CHUNK_ELEMENTS // (n_rows * n_examples))
    per_class = [_one_vs_rest_eces(s, k, min(k + block, n_classes)) for k in range(0, n_classes, block)]
    return np.ascontiguousarray(np.concatenate(per_class, axis=1)).mean(axis=1)  # (R, C) -> (R,): one array per row


def _one_vs_rest_eces(s: _Resamples, first: int, stop: int) -> np.ndarray:
    """(R, K) ECE of p_k against 1[y = k] for classes k in [first, stop), per resample row: sum_b |hits_b -
    conf_sum_b| / N, as `binning.RowBinTotals.eces` for one class (its count sums to N), with the same bits:
    a bin's sums add its examples in the row's order."""
    (n_rows, n_examples), n_block = s.indices.shape, stop - first
    values = s.probs[:, first:stop][s.indices]  # (R, N, K)
    groups, n_used = _block_bin_ids(values, s.n_bins, s.scheme)  # (R, N, K): the bin, then its (row, class, bin)
    groups += (np.arange(n_rows)[:, None, None] * n_block + np.arange(n_block)) * n_used
    shape, size = (n_rows, n_block, n_used), n_rows * n_block * n_used
    confidence_sum = np.bincount(groups.ravel(), weights=values.ravel(), minlength=size).reshape(shape)
    # hits: one per (row, example) whose label is in the block, at its label's column; sums of 1.0, exact
    labels = s.labels[s.indices]  # (R, N)
    row, example = np.nonzero((labels >= first) & (labels < stop))
    hit_groups = groups[row, example, labels[row, example] - first]
    hit_sum = np.bincount(hit_groups, minlength=size).reshape(shape).astype(np.float64)
    return np.abs(hit_sum - confidence_sum).sum(axis=2) / n_examples


def _block_bin_ids(values: np.ndarray, n_bins: int, scheme: str) -> tuple[np.ndarray, int]:
    """Bin of each entry of values (R, N, K), each (row, class) binned over its N examples as
    `binning.row_bin_ids` bins one class (equal-mass bins cut in each row's stable confidence order)."""
    if scheme == "width":  # with many classes most p_k are at most 1/n_bins, in bin 0: search the others only
        bin_ids = np.zeros(values.shape, dtype=np.int64)
        above = values > width_edges(n_bins)[1]
        bin_ids[above] = width_bin_ids(values[above], n_bins)
        return bin_ids, n_bins
    order = np.argsort(values, axis=1, kind="stable")  # (R, N, K)
    sizes = mass_group_sizes(values.shape[1], n_bins)
    bin_ids = np.empty(values.shape, dtype=np.int64)
    np.put_along_axis(
        bin_ids, order, np.broadcast_to(np.repeat(np.arange(sizes.shape[0]), sizes)[:, None], order.shape), axis=1
    )
    return bin_ids, sizes.shape[0]


def _nll(s: _Resamples) -> np.ndarray:
    true_class_prob = s.probs[np.arange(s.labels.shape[0]), s.labels]
    return -np.log(np.maximum(true_class_prob, PROB_FLOOR))[s.indices].mean(axis=1)


def _brier(s: _Resamples) -> np.ndarray:
    """sum_k (p_ik - 1[y_i = k])^2 per example, then each row's mean. The squares are those of p - one_hot,
    element for element (p - 0 is p), each example's summed as one array as before, so the value is the same
    to the last bit; but no (C, C) identity is built (20 GB and minutes at C = 50,000): O(N C), in blocks of
    examples that bound the work array to _CHUNK_ELEMENTS."""
    n_examples, n_classes = s.probs.shape
    per_example = np.empty(n_examples)  # (N,)
    block = max(1, _CHUNK_ELEMENTS // n_classes)
    for start in range(0, n_examples, block):
        rows = slice(start, start + block)
        squared = s.probs[rows] ** 2  # (b, C): (p_ik - 0)^2 off the label
        on_label = (np.arange(squared.shape[0]), s.labels[rows])
        squared[on_label] = (s.probs[rows][on_label] - 1.0) ** 2  # (p_iy - 1)^2 on it
        per_example[rows] = np.sum(squared, axis=1)
    return per_example[s.indices].mean(axis=1)


# ---------------------------------------------------------------- CORP Brier decomposition


def _brier_decomposition(probs, labels, indices) -> dict[str, np.ndarray]:
    """Reliability, resolution and uncertainty per row, summed over the one-vs-rest classes."""
    n_rows, n_examples = indices.shape
    # copies[r, i]: how many times row r holds example i
    copies = row_sums(row_offsets(n_rows, n_examples, indices), n_rows, n_examples)
    terms = {name: np.zeros(n_rows) for name in ("reliability", "resolution", "uncertainty")}
    for k in range(probs.shape[1]):
        for name, value in _corp_terms(probs[:, k], (labels == k).astype(np.float64), copies).items():
            terms[name] += value
    return terms


def _corp_terms(forecast: np.ndarray, outcome: np.ndarray, copies: np.ndarray) -> dict[str, np.ndarray]:
    """CORP terms of one binary problem for every row of example copy counts."""
    n_rows, n_examples = copies.shape
    distinct, group = np.unique(forecast, return_inverse=True)  # ties pooled, as sklearn's fit does
    flat = row_offsets(n_rows, distinct.shape[0], group)
    weight = row_sums(flat, n_rows, distinct.shape[0], copies.ravel().astype(np.float64))
    hits = row_sums(flat, n_rows, distinct.shape[0], (copies * outcome).ravel())
    score = copies @ (forecast - outcome) ** 2 / n_examples  # BS(p_k)
    recalibrated = np.array([_pav_score(w, h) for w, h in zip(weight, hits)]) / n_examples  # BS(x_k)
    base_rate = hits.sum(axis=1) / n_examples
    uncertainty = base_rate * (1 - base_rate)  # BS(o-bar)
    return {
        "reliability": score - recalibrated,
        "resolution": uncertainty - recalibrated,
        "uncertainty": uncertainty,
    }


def _pav_score(weight: np.ndarray, hits: np.ndarray) -> float:
    """N * BS(x) of the PAV fit x to pooled outcomes: sum over groups of w x^2 - 2 x h + h (o^2 = o)."""
    from scipy.optimize import isotonic_regression  # local: keeps the import light

    used = weight > 0
    weight, hits = weight[used], hits[used]
    fitted = isotonic_regression(hits / weight, weights=weight, increasing=True).x
    return float(np.sum(weight * fitted**2 - 2 * fitted * hits + hits))


def _brier_term(name: str) -> Callable[[_Resamples], np.ndarray]:
    def resampled(s: _Resamples) -> np.ndarray:
        return s.brier_terms[name]

    return resampled


# ---------------------------------------------------------------- selective prediction


def _aurc(s: _Resamples) -> np.ndarray:
    return aurc(s.expected_errors)


def _augrc(s: _Resamples) -> np.ndarray:
    return augrc(s.expected_errors)


def _accuracy_at(coverage: float) -> Callable[[_Resamples], np.ndarray]:
    def resampled(s: _Resamples) -> np.ndarray:
        return accuracy_at(s.expected_errors, coverage)

    return resampled


# ---------------------------------------------------------------- registry


@dataclass(frozen=True)
class Estimator:
    """One estimator: ``compute(probs, labels, n_bins, scheme)`` gives its value on all data.

    ``lower_is_better`` is None where neither direction is better (brier_uncertainty depends
    only on the labels). ``resampled`` maps a chunk of resample rows to one value per row.

    Example: labels drawn from known probabilities ``true``, so ``true`` is calibrated. The binned
    ECE of 200 examples still reads 0.06 (its bias); the debiased ECE and ECE sweep read less:

    >>> rng = np.random.default_rng(0)
    >>> true = rng.dirichlet([1, 1, 1], size=200)
    >>> labels = (true.cumsum(axis=1) > rng.random((200, 1))).argmax(axis=1)
    >>> [round(ESTIMATORS[name].compute(true, labels), 4) for name in ("ece", "debiased_ece", "ece_sweep")]
    [0.0611, 0.0355, 0.0389]
    >>> estimator = ESTIMATORS["debiased_ece"]
    >>> estimator.heading, estimator.lower_is_better
    ('Debiased ECE', True)
    >>> ESTIMATORS["brier_uncertainty"].lower_is_better is None  # depends on the labels only
    True
    """

    name: str
    heading: str
    resampled: Callable[[_Resamples], np.ndarray]
    lower_is_better: bool | None
    description: str

    def compute(self, probs, labels, n_bins: int = 10, scheme: str = "width") -> float:
        return point_estimates(probs, labels, n_bins, scheme, metrics=[self.name])[self.name]


def _registry(*estimators: Estimator) -> dict[str, Estimator]:
    return {e.name: e for e in estimators}


ESTIMATORS: dict[str, Estimator] = _registry(
    Estimator("accuracy", "Accuracy", _accuracy, False, "fraction of argmax predictions equal to the label"),
    Estimator("macro_f1", "Macro F1", _macro_f1, False, "mean F1 over classes present in labels or predictions"),
    Estimator("ece", "ECE (equal width)", _binned_ece("width"), True, "binned top-label ECE, equal-width bins"),
    Estimator("ece_mass", "ECE (equal mass)", _binned_ece("mass"), True, "binned top-label ECE, equal-mass bins"),
    Estimator(
        "debiased_ece", "Debiased ECE", _debiased_ece, True, "binned ECE minus its estimated bias (Kumar et al. 2019)"
    ),
    Estimator("smooth_ece", "Smooth ECE", _smooth_ece, True, "ECE of the kernel-smoothed reliability curve (relplot)"),
    Estimator(
        "ece_sweep", "ECE sweep", _ece_sweep, True, "equal-mass ECE at the most bins that stay monotone (Roelofs 2022)"
    ),
    Estimator("classwise_ece", "Classwise ECE", _classwise_ece, True, "mean over classes of the one-vs-rest ECE"),
    Estimator("mce", "MCE", _mce, True, "largest |accuracy - confidence| over non-empty bins"),
    Estimator("ace", "ACE", _ace, True, "mean |accuracy - confidence| over non-empty bins, unweighted"),
    Estimator(
        "paper_ece",
        "Paper's ECE (upper edge)",
        _paper_ece,
        True,
        "ECE as Li et al. (2023) computed it (jordyvl/ece defaults): 10 fixed bins, each bin's upper edge as its "
        "confidence: 0.05 on calibrated, evenly spread confidences",
    ),
    Estimator("nll", "NLL", _nll, True, "mean negative log-likelihood of the true label"),
    Estimator("brier", "Brier", _brier, True, "mean squared distance to the one-hot label, in [0, 2]"),
    Estimator(
        "brier_reliability",
        "Brier reliability",
        _brier_term("reliability"),
        True,
        "miscalibration part of Brier (CORP)",
    ),
    Estimator(
        "brier_resolution", "Brier resolution", _brier_term("resolution"), False, "discrimination part of Brier (CORP)"
    ),
    Estimator(
        "brier_uncertainty", "Brier uncertainty", _brier_term("uncertainty"), None, "label-only part of Brier (CORP)"
    ),
    Estimator("aurc", "AURC", _aurc, True, "area under the risk-coverage curve: mean error rate over coverages"),
    Estimator(
        "augrc",
        "AUGRC",
        _augrc,
        True,
        "area under the generalized risk (answered and wrong) over coverages (Traub 2024)",
    ),
    Estimator(
        "accuracy_at_80", "Accuracy at 80% coverage", _accuracy_at(0.8), False, "accuracy on the 80% most confident"
    ),
    Estimator(
        "accuracy_at_90", "Accuracy at 90% coverage", _accuracy_at(0.9), False, "accuracy on the 90% most confident"
    ),
)


# what a comparison shows unless asked for others: accuracy, then the calibration estimators and proper scores
DEFAULT_METRICS = ("accuracy", "macro_f1", "ece", "smooth_ece", "debiased_ece", "ece_sweep", "nll", "brier")


# ---------------------------------------------------------------- public functions


@dataclass(frozen=True)
class Estimate:
    """Point value on all data and percentile bootstrap interval [low, high] at ``level``, holding the value.

    >>> Estimate(value=0.58, low=0.52, high=0.66, level=0.95, n_resamples=200)  # the draws are not shown
    Estimate(value=0.58, low=0.52, high=0.66, level=0.95, n_resamples=200)
    """

    value: float
    low: float
    high: float
    level: float
    n_resamples: int
    # the bootstrap draws behind [low, high]: two runs' draws on the same rows make a paired comparison
    samples: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)


def _check_metrics(metrics: Sequence[str] | None) -> list[str]:
    if metrics is None:
        return list(ESTIMATORS)
    if isinstance(metrics, str):
        # ValueError, not TypeError: every bad argument in peftviz raises ValueError
        raise ConfigError(f"metrics must be a list of names, not the string {metrics!r}")
    unknown = [m for m in metrics if m not in ESTIMATORS]
    if unknown:
        raise ConfigError(f"unknown metrics {unknown}, expected names from {list(ESTIMATORS)}")
    return list(dict.fromkeys(metrics))


def _check_indices(indices, n_examples: int) -> np.ndarray:
    indices = np.asarray(indices)
    if indices.ndim != 2 or indices.shape[0] < 1 or indices.shape[1] != n_examples:
        raise ConfigError(f"indices must have shape (R >= 1, {n_examples}), got shape {indices.shape}")
    if not np.issubdtype(indices.dtype, np.integer) or indices.min() < 0 or indices.max() >= n_examples:
        raise ConfigError(f"indices must be integers in [0, {n_examples})")
    return indices.astype(np.int64, copy=False)


def bootstrap_samples(
    probs, labels, indices, n_bins: int = 10, scheme: str = "width", metrics: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """Each estimator on every resample: value r is computed on probs[indices[r]], labels[indices[r]].

    >>> probs = [[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.7, 0.3]]  # only the second is wrong
    >>> labels = [0, 1, 1, 0]
    >>> indices = [[0, 1, 2, 3], [1, 1, 2, 3], [0, 0, 2, 3]]  # all data, then two resamples
    >>> bootstrap_samples(probs, labels, indices, metrics=["accuracy", "ece"])  # row 1: (1.2 + 0.3 + 0.2) / 4
    {'accuracy': array([0.75, 0.5 , 1.  ]), 'ece': array([0.3  , 0.425, 0.175])}
    """
    probs, labels = check_inputs(probs, labels)
    check_binning(n_bins, scheme)
    names = _check_metrics(metrics)
    indices = _check_indices(indices, probs.shape[0])
    chunk = max(1, _CHUNK_ELEMENTS // probs.shape[0])
    parts = {name: [] for name in names}
    for start in range(0, indices.shape[0], chunk):
        rows = _Resamples(probs, labels, indices[start : start + chunk], n_bins, scheme)
        for name in names:
            parts[name].append(ESTIMATORS[name].resampled(rows))
    return {name: np.concatenate(parts[name]).astype(np.float64) for name in names}


def point_estimates(
    probs, labels, n_bins: int = 10, scheme: str = "width", metrics: Sequence[str] | None = None
) -> dict[str, float]:
    """Each estimator on all data (the identity resample), as Python floats.

    An overconfident model (``true`` sharpened by a temperature of 0.5) on labels drawn from ``true``;
    the CORP terms add up to the Brier score, reliability - resolution + uncertainty:

    >>> from peftviz.calibration.metrics import apply_temperature
    >>> rng = np.random.default_rng(0)
    >>> true = rng.dirichlet([1, 1, 1], size=200)
    >>> labels = (true.cumsum(axis=1) > rng.random((200, 1))).argmax(axis=1)
    >>> probs = apply_temperature(true, 0.5)
    >>> values = point_estimates(probs, labels, metrics=["accuracy", "ece", "smooth_ece", "nll"])
    >>> {name: round(value, 4) for name, value in values.items()}
    {'accuracy': 0.58, 'ece': 0.1583, 'smooth_ece': 0.1561, 'nll': 0.925}
    >>> brier = point_estimates(probs, labels, metrics=["brier", "brier_reliability", "brier_resolution",
    ...                                                 "brier_uncertainty"])
    >>> {name: round(value, 4) for name, value in brier.items()}
    {'brier': 0.531, 'brier_reliability': 0.0691, 'brier_resolution': 0.203, 'brier_uncertainty': 0.6649}
    >>> round(brier["brier_reliability"] - brier["brier_resolution"] + brier["brier_uncertainty"], 4)
    0.531
    """
    probs = check_probs(probs)
    identity = np.arange(probs.shape[0])[None, :]
    samples = bootstrap_samples(probs, labels, identity, n_bins, scheme, metrics)
    return {name: float(values[0]) for name, values in samples.items()}


def estimate_all(
    probs,
    labels,
    n_bins: int = 10,
    scheme: str = "width",
    n_resamples: int = 1000,
    level: float = LEVEL,
    seed: int = 0,
    metrics: Sequence[str] | None = None,
) -> dict[str, Estimate]:
    """Point value and percentile bootstrap interval of each estimator, on shared resample rows.

    Measured (N = 213, 5 classes, the 14 estimators before ace, 1000 resamples, one core of a loaded 2-core
    machine): 0.48 s, of which smooth_ece 0.28 s (`peftviz.calibration.smooth_ece`, all rows at once; one
    relplot.smECE call per row took 6.4 s on the same rows), the three Brier terms together 0.12 s,
    ece_sweep 0.02 s, the rest 0.06 s.

    >>> from peftviz.calibration.metrics import apply_temperature
    >>> rng = np.random.default_rng(0)
    >>> true = rng.dirichlet([1, 1, 1], size=200)
    >>> labels = (true.cumsum(axis=1) > rng.random((200, 1))).argmax(axis=1)
    >>> probs = apply_temperature(true, 0.5)  # overconfident
    >>> found = estimate_all(probs, labels, n_resamples=200, metrics=["accuracy", "ece", "smooth_ece"])
    >>> found["accuracy"]
    Estimate(value=0.58, low=0.52, high=0.66, level=0.95, n_resamples=200)
    >>> for name, e in found.items():
    ...     print(f"{name:10s} {e.value:.4f} [{e.low:.4f}, {e.high:.4f}] from {e.samples.shape[0]} draws")
    accuracy   0.5800 [0.5200, 0.6600] from 200 draws
    ece        0.1583 [0.1052, 0.2248] from 200 draws
    smooth_ece 0.1561 [0.0922, 0.2131] from 200 draws
    """
    check_resampling(n_resamples, level)
    values = point_estimates(probs, labels, n_bins, scheme, metrics)
    indices = resample_indices(np.asarray(labels).shape[0], n_resamples, seed)
    samples = bootstrap_samples(probs, labels, indices, n_bins, scheme, metrics)
    return {
        name: Estimate(value, *interval_around(value, samples[name], level), level, n_resamples, samples[name])
        for name, value in values.items()
    }


# ---------------------------------------------------------------- smooth reliability diagram


@dataclass(frozen=True)
class SmoothDiagram:
    """relplot's smoothed top-label reliability diagram, sampled on ``mesh`` (confidence axis)."""

    mesh: np.ndarray
    curve: np.ndarray  # smoothed accuracy given confidence (relplot's mu)
    lower: np.ndarray  # 95% bootstrap band of the curve (relplot's, over its resamples)
    upper: np.ndarray
    density: np.ndarray  # kernel density of the confidence on the mesh (a pdf on [0, 1])
    smooth_ece: float
    sigma: float  # kernel bandwidth chosen by smECE
    n: int  # the predictions it was smoothed from

    def supported(self, at_least: float = 1.0) -> np.ndarray:
        """(mesh,) bool: where the curve rests on predictions, about `at_least` of them within one
        bandwidth of the point (n · density · 2σ). Elsewhere the smoother has next to nothing to
        average and its curve means little; relplot fades it there by the same density.

        >>> mesh = np.linspace(0, 1, 5)
        >>> diagram = SmoothDiagram(mesh=mesh, curve=mesh, lower=mesh, upper=mesh, smooth_ece=0.0, sigma=0.05, n=100,
        ...                         density=np.array([0.0, 0.1, 0.2, 1.0, 3.0]))
        >>> diagram.supported()  # 100 * density * 0.1 >= 1 where density >= 0.1
        array([False,  True,  True,  True,  True])
        >>> diagram.supported(at_least=5.0)
        array([False, False, False,  True,  True])
        """
        return self.n * self.density * 2 * self.sigma >= at_least


def smooth_reliability(probs, labels, n_resamples: int = 200, seed: int = 0, band: bool = True) -> SmoothDiagram:
    """relplot's smoothed top-label reliability diagram, its band computed for all resamples at once.

    ``relplot.prepare_rel_diagram`` without its band gives the mesh, the density, smooth ECE and its
    bandwidth σ. relplot's band bags its kernel smoother: it fits it on ``n_resamples`` bootstrap
    samples (sklearn's BaggingRegressor, from the global np.random state), draws the fits' mean as
    the curve and their 2.5% and 97.5% quantiles as the band, ~10 ms a fit. Here the same smoother
    at the same σ (`smooth_ece.smoothing_operator` on the plot mesh: relplot's discretised kernel,
    step for step) on the rows of ``resample_indices(N, n_resamples, seed)``, one matrix product
    for all rows: for example counts m (R, N), fit_r(t) = (m @ (h * A))[r, t] / ((m @ A)[r, t] + 1e-4).
    ``band=False``: the curve is the smoother fitted on all predictions, and lower = upper = curve,
    for callers that band over seeds instead.

    >>> from peftviz.calibration.metrics import apply_temperature
    >>> rng = np.random.default_rng(0)
    >>> true = rng.dirichlet([1, 1, 1], size=200)
    >>> labels = (true.cumsum(axis=1) > rng.random((200, 1))).argmax(axis=1)
    >>> probs = apply_temperature(true, 0.5)  # overconfident
    >>> diagram = smooth_reliability(probs, labels, n_resamples=50)
    >>> round(diagram.smooth_ece, 4), diagram.sigma, diagram.n, diagram.mesh.shape
    (0.1561, 0.15625, 200, (200,))
    >>> at_09 = [float(np.interp(0.9, diagram.mesh, y)) for y in (diagram.lower, diagram.curve, diagram.upper)]
    >>> [round(y, 4) for y in at_09]  # at confidence 0.9 the smoothed accuracy is well below 0.9
    [0.6443, 0.7197, 0.8023]
    >>> plain = smooth_reliability(probs, labels, band=False)
    >>> bool(np.all(plain.lower == plain.curve) and np.all(plain.upper == plain.curve))
    True
    """
    probs, labels = check_inputs(probs, labels)
    check_resampling(n_resamples, LEVEL)
    from relplot import prepare_rel_diagram  # local: imports matplotlib and seaborn

    confidence, correct = top_label(probs, labels)
    out = prepare_rel_diagram(confidence, correct.astype(np.float64), plot_confidence_band=False, report_CE_std=False)
    mesh, sigma = np.asarray(out["mesh"], dtype=np.float64), float(out["sigma"])
    curve = lower = upper = np.asarray(out["mu"], dtype=np.float64)
    if band:
        fits = bootstrap_fits(confidence, correct, sigma, mesh, resample_indices(len(labels), n_resamples, seed))
        curve, (lower, upper) = fits.mean(axis=0), np.quantile(fits, [(1 - LEVEL) / 2, (1 + LEVEL) / 2], axis=0)
    return SmoothDiagram(
        mesh=mesh,
        curve=curve,
        lower=lower,
        upper=upper,
        density=np.asarray(out["density"], dtype=np.float64),
        smooth_ece=float(out["ce"]),
        sigma=sigma,
        n=len(confidence),
    )


def bootstrap_fits(confidence, correct, sigma: float, mesh: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """(R, T) relplot's kernel smoother of correctness at bandwidth σ, fitted on each row of indices
    (R, N) and read on mesh (T,): ``KernelSmoother(ReflectedGaussianKernel(σ)).fit(c[row], h[row]).predict(mesh)``.

    The identity row gives the curve of ``smooth_reliability(..., band=False)`` (relplot's own fit):

    >>> probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.7, 0.3], [0.55, 0.45], [0.95, 0.05]])
    >>> labels = np.array([0, 1, 1, 0, 1, 0])
    >>> plain = smooth_reliability(probs, labels, band=False)
    >>> confidence, correct = probs.max(axis=1), probs.argmax(axis=1) == labels
    >>> rows = np.array([[0, 1, 2, 3, 4, 5], [0, 0, 2, 2, 5, 5]])  # all data, then one resample
    >>> fits = bootstrap_fits(confidence, correct, plain.sigma, plain.mesh, rows)
    >>> fits.shape
    (2, 200)
    >>> bool(np.allclose(fits[0], plain.curve))
    True
    """
    from peftviz.calibration.smooth_ece import DENSITY_FLOOR, example_counts, smoothing_operator

    operator = smoothing_operator(confidence, sigma, mesh)  # (N, T)
    counts = example_counts(indices, len(confidence))  # (R, N)
    hits = counts @ (correct.astype(np.float64)[:, None] * operator)  # (R, T)
    return hits / (counts @ operator + DENSITY_FLOOR)
