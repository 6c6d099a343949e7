"""Calibration of a classifier's predicted probabilities: metrics, their estimators, statistics and recalibration.

    metrics        ECE, MCE, ACE, classwise ECE, Brier, NLL (the registry's estimators on all data),
                   reliability bins, temperature scaling
    checks         the input checks every function here applies (probabilities, labels, binning)
    binning        equal-width and equal-mass bins and their per-bin sums, shared by the metrics and estimators
    smooth_ece     smooth ECE (Błasiok & Nakkiran 2024) of many bootstrap resamples at once
    estimators     every metric, once: one registry (`ESTIMATORS`), point estimates and bootstrap intervals
    stats          resampling, intervals and significance over examples and seeds
    recalibration  maps fitted on validation predictions, applied to test predictions
    paper_ece      the prefix-propagation paper's ECE (jordyvl/ece's defaults: upper-edge bin confidence)
    selective      selective prediction: risk–coverage curves, AURC, AUGRC, accuracy at a coverage
    conformal      split conformal prediction sets (LAC, APS): coverage and set size with bootstrap draws
    power          how many seeds and test documents a difference needs: the two-level test's power

None of them imports torch. The metrics are handed on here, so ``from peftviz import calibration``
then ``calibration.ece(probs, labels)`` works; everything else is imported from its module.

>>> from peftviz import calibration
>>> calibration.ece([[0.9, 0.1], [0.6, 0.4]], [0, 1])
0.35
"""

from peftviz.calibration.checks import SCHEMES
from peftviz.calibration.metrics import (
    accuracy,
    ace,
    apply_temperature,
    brier,
    classwise_ece,
    ece,
    fit_temperature,
    mce,
    nll,
    one_vs_rest_bins,
    reliability_bins,
    summary,
)

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
