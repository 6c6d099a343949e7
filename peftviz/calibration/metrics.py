"""Calibration metrics for multi-class classifiers, from predicted probabilities.

One source: every scalar here (`accuracy` ... `nll`, `summary`) is the estimator of that name in
`peftviz.calibration.estimators.ESTIMATORS` on all data (the identity resample), so these numbers, the
ones a training run writes per epoch and the ones the pages show are computed by one piece of code.
``ece(..., scheme="mass")`` is the registry's ``ece_mass``. The per-bin tables and temperature scaling
are this module's own.

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
to [eps, 1 - eps]. ``tests/calibration/test_calibration.py`` pins both the agreement and the differences.

Example
-------
Four predictions, three of them right; with 10 equal-width bins each sits alone in its bin, so the
gaps are 0.1 (0.9, right), 0.6 (0.6, wrong), 0.2 (0.8, right) and 0.3 (0.7, right):

>>> probs = [[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.7, 0.3]]
>>> labels = [0, 1, 1, 0]
>>> {name: round(value, 4) for name, value in summary(probs, labels).items()}
{'accuracy': 0.75, 'ece': 0.3, 'mce': 0.6, 'ace': 0.3, 'classwise_ece': 0.3, 'brier': 0.25, 'nll': 0.4004}
"""

from __future__ import annotations

import numpy as np

from peftviz.calibration.binning import bins_of, top_label
from peftviz.calibration.checks import SCHEMES, check_binning, check_inputs, check_probs
from peftviz.calibration.estimators import PROB_FLOOR, point_estimates
from peftviz.errors import ConfigError

# `summary`'s names, each the registry's estimator of that name; "ece" bins as `scheme` says
SUMMARY = ("accuracy", "ece", "mce", "ace", "classwise_ece", "brier", "nll")
ECE_OF_SCHEME = {"width": "ece", "mass": "ece_mass"}  # the registry's name of each scheme's top-label ECE
LOG_TEMPERATURE_BOUNDS = (-5.0, 5.0)  # T in [0.0067, 148]: far beyond any sane fitted temperature
__all__ = [
    "SCHEMES",
    "accuracy",
    "ace",
    "apply_temperature",
    "brier",
    "classwise_ece",
    "ece",
    "fit_temperature",
    "mce",
    "nll",
    "one_vs_rest_bins",
    "reliability_bins",
    "summary",
]


# ---------------------------------------------------------------- metrics


def _point(name: str, probs, labels, n_bins: int = 10, scheme: str = "width") -> float:
    """The registry's estimator `name` on all data: the one computation behind these numbers."""
    return point_estimates(probs, labels, n_bins, scheme, metrics=[name])[name]


def accuracy(probs, labels) -> float:
    """Fraction of examples whose argmax prediction equals the label.

    >>> accuracy([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8]], [0, 1, 1])  # the second is wrong
    0.6666666666666666
    """
    return _point("accuracy", probs, labels)


def ece(probs, labels, n_bins: int = 10, scheme: str = "width") -> float:
    """Top-label expected calibration error: sum_b (n_b / N) |acc_b - conf_b| (registry: "ece", or "ece_mass").

    >>> probs = [[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.7, 0.3]]  # confidences 0.9, 0.6, 0.8, 0.7
    >>> labels = [0, 1, 1, 0]  # the 0.6 prediction is wrong
    >>> round(ece(probs, labels), 4)  # one example a bin: (0.1 + 0.6 + 0.2 + 0.3) / 4
    0.3
    >>> round(ece(probs, labels, n_bins=2), 4)  # one bin (0.5, 1]: mean confidence 0.75 = accuracy
    0.0
    >>> round(ece(probs, labels, n_bins=2, scheme="mass"), 4)  # {0.6, 0.7}: |0.5 - 0.65|, {0.8, 0.9}: |1 - 0.85|
    0.15
    """
    check_binning(n_bins, scheme)
    return _point(ECE_OF_SCHEME[scheme], probs, labels, n_bins, scheme)


def mce(probs, labels, n_bins: int = 10, scheme: str = "width") -> float:
    """Maximum calibration error: the largest |acc_b - conf_b| over non-empty bins.

    >>> round(mce([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.7, 0.3]], [0, 1, 1, 0]), 4)  # the wrong 0.6, alone
    0.6
    """
    return _point("mce", probs, labels, n_bins, scheme)


def ace(probs, labels, n_bins: int = 10, scheme: str = "width") -> float:
    """Average calibration error: unweighted mean of |acc_b - conf_b| over non-empty bins.

    >>> probs = [[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.7, 0.3]]
    >>> round(ace(probs, [0, 1, 1, 0], n_bins=5), 4)  # bins of 1, 2 and 1 examples: (0.6 + 0.25 + 0.1) / 3
    0.3167
    """
    return _point("ace", probs, labels, n_bins, scheme)


def classwise_ece(probs, labels, n_bins: int = 10, scheme: str = "width") -> float:
    """Mean over classes k of the ECE of "label == k" against confidence p_k (Kull et al. 2019).

    >>> probs = [[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.7, 0.3]]
    >>> round(classwise_ece(probs, [0, 1, 1, 0], n_bins=2), 4)  # both classes: |1 - 0.8| / 4 + |0 - 0.2| / 4
    0.1
    """
    return _point("classwise_ece", probs, labels, n_bins, scheme)


def brier(probs, labels) -> float:
    """Multi-class Brier score: mean over examples of sum_k (p_k - 1[y = k])^2, in [0, 2].

    >>> round(brier([[0.9, 0.1], [0.6, 0.4]], [0, 1]), 4)  # (0.01 + 0.01 + 0.36 + 0.36) / 2
    0.37
    """
    return _point("brier", probs, labels)


def nll(probs, labels) -> float:
    """Mean negative log-likelihood of the true label, with p_y clipped to >= 1e-12.

    >>> round(nll([[0.5, 0.5], [0.25, 0.75]], [0, 1]), 4)  # (log 2 + log 4/3) / 2
    0.4904
    >>> round(nll([[0.0, 1.0]], [0]), 4)  # -log 1e-12: large, not inf
    27.631
    """
    return _point("nll", probs, labels)


def reliability_bins(probs, labels, n_bins: int = 10, scheme: str = "width") -> dict[str, np.ndarray]:
    """Per-bin table of a top-label reliability diagram, one row per bin, empty bins included.

    Keys: "lower", "upper" (edges), "count" (int), "hits" (int, correct predictions), "confidence"
    (mean top-label confidence), "accuracy" (hits / count), "gap" (accuracy - confidence). Empty bins
    have count 0 and NaN means.

    >>> bins = reliability_bins([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.7, 0.3]], [0, 1, 1, 0], n_bins=5)
    >>> bins["upper"]
    array([0.2, 0.4, 0.6, 0.8, 1. ])
    >>> bins["count"], bins["hits"]
    (array([0, 0, 1, 2, 1]), array([0, 0, 0, 2, 1]))
    >>> np.round(bins["gap"], 4)  # accuracy - confidence: 0 - 0.6, 1 - 0.75, 1 - 0.9
    array([  nan,   nan, -0.6 ,  0.25,  0.1 ])
    """
    probs, labels = check_inputs(probs, labels)
    check_binning(n_bins, scheme)
    return bins_of(*top_label(probs, labels), n_bins, scheme)


def one_vs_rest_bins(probs, labels, n_bins: int = 10, scheme: str = "width") -> list[dict[str, np.ndarray]]:
    """Per class k, the per-bin table of the binary problem "label == k" with confidence p_k, binned
    with the same scheme on p_k (the bins behind `classwise_ece`). Keys as `reliability_bins`:
    "confidence" is the bin's mean p_k, "hits" the examples of class k in it, "accuracy" their fraction.

    >>> per_class = one_vs_rest_bins([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.7, 0.3]], [0, 1, 1, 0], n_bins=2)
    >>> per_class[1]["count"], per_class[1]["hits"]  # p_1 = 0.1, 0.4, 0.3 in (0, 0.5]; 0.8 in (0.5, 1]
    (array([3, 1]), array([1, 1]))
    >>> np.round(per_class[1]["confidence"], 4)
    array([0.2667, 0.8   ])
    """
    probs, labels = check_inputs(probs, labels)
    check_binning(n_bins, scheme)
    return [bins_of(probs[:, k], labels == k, n_bins, scheme) for k in range(probs.shape[1])]


def summary(probs, labels, n_bins: int = 10, scheme: str = "width") -> dict[str, float]:
    """All scalar metrics at once, as Python floats.

    >>> {name: round(value, 4) for name, value in summary([[0.9, 0.1], [0.6, 0.4]], [0, 1]).items()}
    {'accuracy': 0.5, 'ece': 0.35, 'mce': 0.6, 'ace': 0.35, 'classwise_ece': 0.35, 'brier': 0.37, 'nll': 0.5108}
    """
    check_binning(n_bins, scheme)
    names = {name: ECE_OF_SCHEME[scheme] if name == "ece" else name for name in SUMMARY}
    values = point_estimates(probs, labels, n_bins, scheme, metrics=list(names.values()))
    return {name: values[estimator] for name, estimator in names.items()}


# ---------------------------------------------------------------- temperature scaling


def log_probs(probs: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(probs, PROB_FLOOR))


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))  # shift so exp never overflows
    return shifted / shifted.sum(axis=1, keepdims=True)


def tempered_nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
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

    Example: labels drawn from known probabilities ``true``, and a model that is overconfident
    by a temperature of 0.5 (``apply_temperature(true, 0.5)``); the fit recovers T close to 2:

    >>> rng = np.random.default_rng(0)
    >>> true = rng.dirichlet([1, 1, 1], size=200)
    >>> labels = (true.cumsum(axis=1) > rng.random((200, 1))).argmax(axis=1)
    >>> probs = apply_temperature(true, 0.5)
    >>> temperature = fit_temperature(probs, labels)
    >>> round(temperature, 4)
    1.9264
    >>> round(ece(probs, labels), 4), round(ece(apply_temperature(probs, temperature), labels), 4)
    (0.1583, 0.0669)
    >>> round(nll(probs, labels), 4), round(nll(apply_temperature(probs, temperature), labels), 4)
    (0.925, 0.8316)
    """
    from scipy.optimize import minimize_scalar  # local: keeps `import peftviz.calibration.metrics` light

    probs, labels = check_inputs(probs, labels)
    logits = log_probs(probs)
    result = minimize_scalar(
        lambda log_t: tempered_nll(logits, labels, float(np.exp(log_t))),
        bounds=LOG_TEMPERATURE_BOUNDS,
        method="bounded",
        options={"xatol": 1e-6},
    )
    return float(np.exp(result.x))


def apply_temperature(probs, temperature: float) -> np.ndarray:
    """softmax(log(clip(probs, 1e-12)) / T); rows sum to 1. T > 1 softens, T < 1 sharpens.

    >>> np.round(apply_temperature([[0.9, 0.1]], 2.0), 4)  # sqrt(0.9) : sqrt(0.1) = 3 : 1
    array([[0.75, 0.25]])
    >>> np.round(apply_temperature([[0.75, 0.25]], 0.5), 4)  # 0.75^2 : 0.25^2 = 9 : 1
    array([[0.9, 0.1]])
    """
    probs = check_probs(probs)
    if not np.isfinite(temperature) or temperature <= 0:
        raise ConfigError(f"temperature must be a finite number > 0, got {temperature}")
    return softmax(log_probs(probs) / temperature)
