"""Tests for peftviz.calibration: hand-computed values, edge cases, invariants, netcal cross-check."""

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from peftviz import calibration as cal
from peftviz.calibration import binning
from peftviz.calibration.estimators import estimate_all

TIGHT = 1e-12

# Five examples, three classes, worked through by hand below (10 equal-width bins, right-closed).
#   row                 label  pred  conf  correct  bin
#   [0.9, 0.05, 0.05]   0      0     0.9   yes      8 = (0.8, 0.9]
#   [0.8, 0.1,  0.1 ]   1      0     0.8   no       7 = (0.7, 0.8]
#   [0.1, 0.85, 0.05]   1      1     0.85  yes      8
#   [0.3, 0.3,  0.4 ]   0      2     0.4   no       3 = (0.3, 0.4]
#   [0.5, 0.25, 0.25]   0      0     0.5   yes      4 = (0.4, 0.5]
HAND_PROBS = np.array(
    [
        [0.9, 0.05, 0.05],
        [0.8, 0.1, 0.1],
        [0.1, 0.85, 0.05],
        [0.3, 0.3, 0.4],
        [0.5, 0.25, 0.25],
    ]
)
HAND_LABELS = np.array([0, 1, 1, 0, 0])


def softmax(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def sample_labels(probs, rng):
    """One label per row drawn from that row's distribution (inverse CDF, vectorised)."""
    u = rng.random(probs.shape[0])[:, None]
    return np.minimum((u > np.cumsum(probs, axis=1)).sum(axis=1), probs.shape[1] - 1)


def overconfident_model(n, n_classes=4, sharpen=3.0, seed=0):
    """Labels drawn from softmax(z), reported probs softmax(sharpen * z): calibrated at T = sharpen."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, n_classes)) * 1.5
    labels = sample_labels(softmax(logits), rng)
    return softmax(logits * sharpen), labels


def random_probs(n, n_classes, seed=0):
    rng = np.random.default_rng(seed)
    probs = softmax(rng.normal(size=(n, n_classes)) * 2)
    return probs, rng.integers(0, n_classes, n)


# ---------------------------------------------------------------- hand-computed values


def test_hand_computed_top_label_metrics():
    # bin 3: {0.4 wrong}          |0 - 0.4|   = 0.4
    # bin 4: {0.5 right}          |1 - 0.5|   = 0.5
    # bin 7: {0.8 wrong}          |0 - 0.8|   = 0.8
    # bin 8: {0.9, 0.85 right}    |1 - 0.875| = 0.125
    # ECE = (0.4 + 0.5 + 0.8 + 2 * 0.125) / 5 = 0.39
    # MCE = 0.8;  ACE = (0.4 + 0.5 + 0.8 + 0.125) / 4 = 0.45625;  accuracy = 3/5
    assert cal.ece(HAND_PROBS, HAND_LABELS) == pytest.approx(0.39, abs=TIGHT)
    assert cal.mce(HAND_PROBS, HAND_LABELS) == pytest.approx(0.8, abs=TIGHT)
    assert cal.ace(HAND_PROBS, HAND_LABELS) == pytest.approx(0.45625, abs=TIGHT)
    assert cal.accuracy(HAND_PROBS, HAND_LABELS) == pytest.approx(0.6, abs=TIGHT)


def test_hand_computed_brier_and_nll():
    # Brier per row, sum_k (p_k - onehot_k)^2:
    #   0.1^2 + 0.05^2 + 0.05^2 = 0.015;   0.8^2 + 0.9^2 + 0.1^2 = 1.46;   0.1^2 + 0.15^2 + 0.05^2 = 0.035
    #   0.7^2 + 0.3^2 + 0.4^2 = 0.74;      0.5^2 + 0.25^2 + 0.25^2 = 0.375      -> mean 2.625 / 5 = 0.525
    # NLL = -(ln 0.9 + ln 0.1 + ln 0.85 + ln 0.3 + ln 0.5) / 5 = 0.8935169046...
    assert cal.brier(HAND_PROBS, HAND_LABELS) == pytest.approx(0.525, abs=TIGHT)
    assert cal.nll(HAND_PROBS, HAND_LABELS) == pytest.approx(0.8935169046071056, abs=TIGHT)


def test_hand_computed_classwise_ece():
    # class 0: p = [.9 .8 .1 .3 .5], hit = [1 0 0 1 1]; one example per bin:
    #          .1 + .8 + .1 + .7 + .5 = 2.2 -> 0.44
    # class 1: p = [.05 .1 .85 .3 .25], hit = [0 1 1 0 0]
    #          bin 0 = {.05, .1} (0.1 is in (0, 0.1]): |1 - .15| = .85;  bin 8 = {.85}: .15;
    #          bin 2 = {.3, .25}: |0 - .55| = .55                          -> 1.55 / 5 = 0.31
    # class 2: p = [.05 .1 .05 .4 .25], hit = 0 everywhere
    #          bin 0: .2;  bin 2: .25;  bin 3: .4                        -> 0.85 / 5 = 0.17
    # mean = (0.44 + 0.31 + 0.17) / 3 = 0.92 / 3
    assert cal.classwise_ece(HAND_PROBS, HAND_LABELS) == pytest.approx(0.92 / 3, abs=TIGHT)


def test_hand_computed_equal_mass():
    # sorted conf: .4 (no) .5 (yes) .8 (no) | .85 (yes) .9 (yes); array_split of 5 into 2 -> sizes 3, 2
    # group 0: |1/3 - 1.7/3| = 0.7/3;  group 1: |1 - 0.875| = 0.125
    # ECE = 3/5 * 0.7/3 + 2/5 * 0.125 = 0.14 + 0.05 = 0.19;  MCE = 0.7/3;  ACE = (0.7/3 + 0.125) / 2
    assert cal.ece(HAND_PROBS, HAND_LABELS, n_bins=2, scheme="mass") == pytest.approx(0.19, abs=TIGHT)
    assert cal.mce(HAND_PROBS, HAND_LABELS, n_bins=2, scheme="mass") == pytest.approx(0.7 / 3, abs=TIGHT)
    assert cal.ace(HAND_PROBS, HAND_LABELS, n_bins=2, scheme="mass") == pytest.approx((0.7 / 3 + 0.125) / 2, abs=TIGHT)
    table = cal.reliability_bins(HAND_PROBS, HAND_LABELS, n_bins=2, scheme="mass")
    np.testing.assert_array_equal(table["count"], [3, 2])
    np.testing.assert_allclose(table["lower"], [0.4, 0.85], atol=TIGHT)
    np.testing.assert_allclose(table["upper"], [0.8, 0.9], atol=TIGHT)
    np.testing.assert_allclose(table["accuracy"], [1 / 3, 1.0], atol=TIGHT)
    np.testing.assert_allclose(table["confidence"], [1.7 / 3, 0.875], atol=TIGHT)


def test_hand_computed_reliability_table():
    table = cal.reliability_bins(HAND_PROBS, HAND_LABELS)
    np.testing.assert_allclose(table["lower"], np.arange(10) / 10, atol=TIGHT)
    np.testing.assert_allclose(table["upper"], np.arange(1, 11) / 10, atol=TIGHT)
    np.testing.assert_array_equal(table["count"], [0, 0, 0, 1, 1, 0, 0, 1, 2, 0])
    assert table["count"].dtype.kind == "i"
    filled = table["count"] > 0
    np.testing.assert_allclose(table["confidence"][filled], [0.4, 0.5, 0.8, 0.875], atol=TIGHT)
    np.testing.assert_allclose(table["accuracy"][filled], [0.0, 1.0, 0.0, 1.0], atol=TIGHT)
    np.testing.assert_allclose(table["gap"][filled], [-0.4, 0.5, -0.8, 0.125], atol=TIGHT)
    np.testing.assert_array_equal(table["hits"], [0, 0, 0, 0, 1, 0, 0, 0, 2, 0])
    assert table["hits"].dtype.kind == "i"
    for key in ("confidence", "accuracy", "gap"):
        assert np.all(np.isnan(table[key][~filled])), key


def test_argmax_ties_go_to_the_lowest_class():
    probs = np.array([[0.5, 0.5, 0.0]])
    assert cal.accuracy(probs, [0]) == 1.0
    assert cal.accuracy(probs, [1]) == 0.0


# ---------------------------------------------------------------- confidences of exactly 0 and 1, bin edges


def test_one_hot_correct_is_perfect():
    labels = np.array([0, 1, 2, 1])
    probs = np.eye(3)[labels]
    metrics = cal.summary(probs, labels)
    assert metrics == pytest.approx(
        {"accuracy": 1.0, "ece": 0.0, "mce": 0.0, "ace": 0.0, "classwise_ece": 0.0, "brier": 0.0, "nll": 0.0},
        abs=TIGHT,
    )


def test_one_hot_wrong_is_worst():
    labels = np.array([0, 1, 2])
    probs = np.eye(3)[(labels + 1) % 3]  # predict 1, 2, 0 with certainty
    # classwise, class 0: p0 = [0, 0, 1], hit = [1, 0, 0]; bin 0 = {0, 0}: |1 - 0| = 1; bin 9 = {1}: |0 - 1| = 1
    #   -> 2/3, the same for every class by symmetry. NLL = -ln(1e-12) because p_y = 0 is clipped.
    assert cal.ece(probs, labels) == pytest.approx(1.0, abs=TIGHT)
    assert cal.mce(probs, labels) == pytest.approx(1.0, abs=TIGHT)
    assert cal.ace(probs, labels) == pytest.approx(1.0, abs=TIGHT)
    assert cal.brier(probs, labels) == pytest.approx(2.0, abs=TIGHT)
    assert cal.classwise_ece(probs, labels) == pytest.approx(2 / 3, abs=TIGHT)
    assert cal.nll(probs, labels) == pytest.approx(-math.log(1e-12), abs=1e-9)
    assert np.isfinite(cal.nll(probs, labels))


@pytest.mark.parametrize(
    ("confidence", "n_bins", "expected_bin"),
    [
        (0.0, 10, 0),  # zero joins the first bin rather than falling off the left end
        (0.1, 10, 0),  # right-closed: (0, 0.1]
        (0.5, 10, 4),  # (0.4, 0.5]
        (0.7, 10, 6),
        (1.0, 10, 9),  # one is in the last bin, not an 11th
        (1 / 3, 3, 0),
        (0.5, 1, 0),
        (0.30000000000000004, 10, 3),  # just above the double nearest 0.3
    ],
)
def test_width_bin_of_exact_edge_confidences(confidence, n_bins, expected_bin):
    assert binning.width_bin_ids(np.array([confidence]), n_bins)[0] == expected_bin


@pytest.mark.parametrize(("n_classes", "expected_bin"), [(10, 0), (2, 4), (1, 9)])
def test_reliability_bins_place_uniform_rows_on_edges(n_classes, expected_bin):
    # a uniform row over C classes has confidence exactly 1/C: 0.1, 0.5, 1.0
    probs = np.full((3, n_classes), 1.0 / n_classes)
    counts = cal.reliability_bins(probs, [0, 0, 0])["count"]
    assert counts[expected_bin] == 3 and counts.sum() == 3


def test_confidence_exactly_zero_in_classwise_bins():
    # class 1 has p = 0 everywhere and never occurs: bin 0 holds all, gap 0
    probs = np.array([[0.8, 0.0, 0.2], [0.3, 0.0, 0.7]])
    labels = np.array([0, 2])
    # class 0: .8 -> bin 7 hit 1: .2; .3 -> bin 2 hit 0: .3  -> .25
    # class 2: .2 -> bin 1 hit 0: .2; .7 -> bin 6 hit 1: .3  -> .25;   class 1: 0   -> mean 0.5 / 3
    assert cal.classwise_ece(probs, labels) == pytest.approx(0.5 / 3, abs=TIGHT)


# ---------------------------------------------------------------- calibrated data and bin invariants


def perfectly_calibrated():
    """10 rows at confidence 0.7 with 7 correct, 10 rows at 0.4 with 4 correct."""
    high = np.tile([0.7, 0.15, 0.15], (10, 1))
    low = np.tile([0.4, 0.3, 0.3], (10, 1))
    labels = np.r_[[0] * 7 + [1] * 3, [0] * 4 + [2] * 6]
    return np.vstack([high, low]), labels


@pytest.mark.parametrize(("n_bins", "scheme"), [(10, "width"), (1, "width"), (3, "width"), (2, "mass"), (1, "mass")])
def test_perfectly_calibrated_has_zero_error(n_bins, scheme):
    probs, labels = perfectly_calibrated()
    for metric in (cal.ece, cal.mce, cal.ace):
        assert metric(probs, labels, n_bins=n_bins, scheme=scheme) == pytest.approx(0.0, abs=TIGHT)


def test_equal_mass_bins_have_equal_counts():
    probs, labels = random_probs(100, 5)
    np.testing.assert_array_equal(cal.reliability_bins(probs, labels, n_bins=10, scheme="mass")["count"], [10] * 10)
    probs, labels = random_probs(103, 5)
    counts = cal.reliability_bins(probs, labels, n_bins=10, scheme="mass")["count"]
    np.testing.assert_array_equal(counts, [11, 11, 11] + [10] * 7)


def test_equal_mass_with_fewer_examples_than_bins_uses_one_bin_each():
    table = cal.reliability_bins(HAND_PROBS, HAND_LABELS, n_bins=10, scheme="mass")
    np.testing.assert_array_equal(table["count"], [1] * 5)
    np.testing.assert_allclose(table["lower"], table["upper"])
    # one example per bin: ECE = mean |correct - conf| = (.4 + .5 + .8 + .15 + .1) / 5
    assert cal.ece(HAND_PROBS, HAND_LABELS, n_bins=10, scheme="mass") == pytest.approx(0.39, abs=TIGHT)


@pytest.mark.parametrize("scheme", cal.SCHEMES)
@pytest.mark.parametrize("n_bins", [1, 7, 15])
def test_reliability_table_is_consistent_with_metrics(scheme, n_bins):
    probs, labels = random_probs(300, 4, seed=n_bins)
    table = cal.reliability_bins(probs, labels, n_bins=n_bins, scheme=scheme)
    assert set(table) == {"lower", "upper", "count", "hits", "confidence", "accuracy", "gap"}
    assert table["count"].sum() == len(labels)
    filled = table["count"] > 0
    assert table["hits"].sum() == np.sum(probs.argmax(axis=1) == labels)
    np.testing.assert_allclose(table["hits"][filled] / table["count"][filled], table["accuracy"][filled], atol=TIGHT)
    np.testing.assert_allclose(table["gap"][filled], (table["accuracy"] - table["confidence"])[filled], atol=TIGHT)
    assert np.all(table["lower"] <= table["upper"])
    assert np.all(table["confidence"][filled] >= table["lower"][filled] - TIGHT)
    assert np.all(table["confidence"][filled] <= table["upper"][filled] + TIGHT)
    weights = table["count"][filled] / len(labels)
    abs_gap = np.abs(table["gap"][filled])
    assert cal.ece(probs, labels, n_bins, scheme) == pytest.approx(np.sum(weights * abs_gap), abs=TIGHT)
    assert cal.mce(probs, labels, n_bins, scheme) == pytest.approx(abs_gap.max(), abs=TIGHT)
    assert cal.ace(probs, labels, n_bins, scheme) == pytest.approx(abs_gap.mean(), abs=TIGHT)


def test_ece_is_between_ace_bounds_and_mce():
    probs, labels = random_probs(400, 3, seed=3)
    for scheme in cal.SCHEMES:
        assert 0.0 <= cal.ece(probs, labels, scheme=scheme) <= cal.mce(probs, labels, scheme=scheme) + TIGHT
        assert 0.0 <= cal.ace(probs, labels, scheme=scheme) <= cal.mce(probs, labels, scheme=scheme) + TIGHT


def test_single_bin_ece_is_mean_confidence_minus_accuracy():
    probs, labels = random_probs(200, 6, seed=4)
    expected = abs(probs.max(axis=1).mean() - cal.accuracy(probs, labels))
    for scheme in cal.SCHEMES:
        assert cal.ece(probs, labels, n_bins=1, scheme=scheme) == pytest.approx(expected, abs=TIGHT)


def test_accepts_lists_float32_and_whole_float_labels():
    expected = cal.ece(HAND_PROBS, HAND_LABELS)
    assert cal.ece(HAND_PROBS.tolist(), HAND_LABELS.tolist()) == pytest.approx(expected, abs=TIGHT)
    assert cal.ece(HAND_PROBS, HAND_LABELS.astype(float)) == pytest.approx(expected, abs=TIGHT)
    # float32 off the bin edges gives the float64 answer; on an edge it need not, because
    # float32(0.8) = 0.800000012 > 0.8 really belongs to the next bin (0.8, 0.9]
    probs, labels = random_probs(200, 4, seed=10)
    assert cal.ece(probs.astype(np.float32), labels) == pytest.approx(cal.ece(probs, labels), abs=1e-6)
    assert cal.ece(HAND_PROBS.astype(np.float32), HAND_LABELS) != pytest.approx(expected, abs=1e-6)


def test_summary_matches_the_individual_metrics():
    probs, labels = random_probs(150, 4, seed=5)
    metrics = cal.summary(probs, labels, n_bins=8, scheme="mass")
    assert list(metrics) == ["accuracy", "ece", "mce", "ace", "classwise_ece", "brier", "nll"]
    assert all(type(value) is float for value in metrics.values())
    assert metrics["ece"] == cal.ece(probs, labels, 8, "mass")
    assert metrics["classwise_ece"] == cal.classwise_ece(probs, labels, 8, "mass")
    assert metrics["brier"] == cal.brier(probs, labels)
    assert metrics["nll"] == cal.nll(probs, labels)


# ---------------------------------------------------------------- bootstrap


@pytest.mark.parametrize("scheme", cal.SCHEMES)
def test_vectorised_resampled_eces_match_a_loop(scheme):
    probs, labels = random_probs(120, 3, seed=6)
    resample_idx = np.random.default_rng(1).integers(0, 120, size=(15, 120))
    confidence, correct = binning.top_label(probs, labels)
    vectorised = binning.resampled_eces(confidence, correct, resample_idx, 10, scheme)
    looped = [cal.ece(probs[idx], labels[idx], 10, scheme) for idx in resample_idx]
    np.testing.assert_allclose(vectorised, looped, atol=TIGHT)


def ece_interval(probs, labels, scheme="width", **options):
    """The ECE interval as every page and report computes it: estimators.estimate_all."""
    metric = "ece" if scheme == "width" else "ece_mass"
    found = estimate_all(probs, labels, scheme=scheme, metrics=[metric], **options)[metric]
    return found.low, found.high


@pytest.mark.parametrize("scheme", cal.SCHEMES)
def test_ece_interval_contains_point_and_narrows_with_n(scheme):
    # a clearly overconfident model: ECE ~0.2, far from the 0 floor where the upward bias of ECE dominates
    small_probs, small_labels = overconfident_model(300, seed=1)
    large_probs, large_labels = overconfident_model(6000, seed=2)
    low, high = ece_interval(small_probs, small_labels, scheme, n_resamples=400)
    assert low <= cal.ece(small_probs, small_labels, scheme=scheme) <= high
    large_low, large_high = ece_interval(large_probs, large_labels, scheme, n_resamples=400)
    assert large_low <= cal.ece(large_probs, large_labels, scheme=scheme) <= large_high
    assert (large_high - large_low) < 0.5 * (high - low)  # ~sqrt(20) narrower in theory


def test_ece_interval_is_seeded_and_level_widens():
    probs, labels = overconfident_model(500, seed=3)
    assert ece_interval(probs, labels, n_resamples=200, seed=7) == ece_interval(probs, labels, n_resamples=200, seed=7)
    assert ece_interval(probs, labels, n_resamples=200, seed=7) != ece_interval(probs, labels, n_resamples=200, seed=8)
    low90, high90 = ece_interval(probs, labels, n_resamples=500, level=0.9)
    low99, high99 = ece_interval(probs, labels, n_resamples=500, level=0.99)
    assert low99 <= low90 < high90 <= high99


# ---------------------------------------------------------------- temperature scaling


@pytest.mark.parametrize("seed", [0, 1])
def test_fit_temperature_recovers_known_temperature(seed):
    probs, labels = overconfident_model(5000, sharpen=3.0, seed=seed)
    assert cal.fit_temperature(probs, labels) == pytest.approx(3.0, rel=0.1)


def test_fit_temperature_recovers_underconfidence():
    probs, labels = overconfident_model(5000, sharpen=0.5, seed=5)
    assert cal.fit_temperature(probs, labels) == pytest.approx(0.5, rel=0.1)


def test_temperature_scaling_reduces_nll_and_ece_of_overconfident_model():
    probs, labels = overconfident_model(3000, sharpen=3.0, seed=6)
    temperature = cal.fit_temperature(probs, labels)
    scaled = cal.apply_temperature(probs, temperature)
    assert cal.nll(scaled, labels) < cal.nll(probs, labels) - 0.1
    assert cal.ece(scaled, labels) < 0.5 * cal.ece(probs, labels)
    # fitted T minimises NLL: nudging it either way does not help
    for nudged in (temperature * 0.9, temperature * 1.1):
        assert cal.nll(cal.apply_temperature(probs, nudged), labels) >= cal.nll(scaled, labels)
    # temperature scaling never changes the argmax
    np.testing.assert_array_equal(scaled.argmax(axis=1), probs.argmax(axis=1))


def test_apply_temperature_one_is_identity():
    probs, _ = random_probs(50, 5, seed=7)
    np.testing.assert_allclose(cal.apply_temperature(probs, 1.0), probs, rtol=1e-12, atol=1e-15)


def test_apply_temperature_rows_sum_to_one_and_soften():
    probs, _ = random_probs(50, 5, seed=8)
    for temperature in (0.25, 2.0, 50.0):
        scaled = cal.apply_temperature(probs, temperature)
        np.testing.assert_allclose(scaled.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(cal.apply_temperature(probs, 2.0).max(axis=1) < probs.max(axis=1))
    assert np.all(cal.apply_temperature(probs, 0.5).max(axis=1) > probs.max(axis=1))
    # zeros are clipped to 1e-12 before the log, so a one-hot row stays finite
    assert np.all(np.isfinite(cal.apply_temperature(np.eye(3), 2.0)))


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan"), float("inf")])
def test_apply_temperature_rejects_bad_temperature(temperature):
    with pytest.raises(ValueError, match="temperature"):
        cal.apply_temperature(HAND_PROBS, temperature)


# ---------------------------------------------------------------- validation


BAD_INPUTS = {
    "probs 1-D": (np.array([0.5, 0.5]), np.array([0, 1]), {}, "2-D"),
    "probs 3-D": (np.ones((2, 2, 2)) / 2, np.array([0, 1]), {}, "2-D"),
    "label count": (HAND_PROBS, HAND_LABELS[:4], {}, r"labels must have shape \(5,\)"),
    "labels 2-D": (HAND_PROBS, HAND_LABELS[:, None], {}, r"labels must have shape \(5,\)"),
    "label too big": (HAND_PROBS, np.array([0, 1, 3, 0, 0]), {}, r"\[0, 3\)"),
    "label negative": (HAND_PROBS, np.array([0, -1, 2, 0, 0]), {}, r"\[0, 3\)"),
    "label fractional": (HAND_PROBS, np.array([0, 1.5, 2, 0, 0]), {}, "integer"),
    "nan": (np.where(HAND_PROBS == 0.9, np.nan, HAND_PROBS), HAND_LABELS, {}, "NaN or inf"),
    "inf": (np.where(HAND_PROBS == 0.9, np.inf, HAND_PROBS), HAND_LABELS, {}, "NaN or inf"),
    "no examples": (np.zeros((0, 3)), np.zeros(0, dtype=int), {}, "empty"),
    "no classes": (np.zeros((2, 0)), np.zeros(2, dtype=int), {}, "empty"),
    "no bins": (HAND_PROBS, HAND_LABELS, {"n_bins": 0}, "n_bins must be >= 1"),
    "float bins": (HAND_PROBS, HAND_LABELS, {"n_bins": 2.5}, "n_bins must be an int"),
    "scheme": (HAND_PROBS, HAND_LABELS, {"scheme": "quantile"}, "unknown scheme 'quantile'"),
}
BINNED = [cal.ece, cal.mce, cal.ace, cal.classwise_ece, cal.reliability_bins, cal.one_vs_rest_bins, cal.summary]
UNBINNED = [cal.accuracy, cal.brier, cal.nll, cal.fit_temperature]


BAD_INPUT_CALLS = [
    pytest.param(metric, case, id=f"{metric.__name__}-{case}")
    for metric in BINNED + UNBINNED
    for case, (_, _, binning, _) in BAD_INPUTS.items()
    if metric in BINNED or not binning  # binning options only go to binned metrics
]


@pytest.mark.parametrize(("metric", "case"), BAD_INPUT_CALLS)
def test_bad_inputs_raise_value_error(metric, case):
    probs, labels, binning, message = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=message):
        metric(probs, labels, **binning)


@pytest.mark.parametrize("case", ["probs 1-D", "nan", "no examples"])
def test_apply_temperature_validates_probs(case):
    probs, _, _, message = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=message):
        cal.apply_temperature(probs, 1.0)


def test_error_messages_are_one_line():
    for case, (probs, labels, bins, _) in BAD_INPUTS.items():
        with pytest.raises(ValueError) as caught:
            cal.ece(probs, labels, **bins)
        assert "\n" not in str(caught.value), case


# ---------------------------------------------------------------- netcal


def test_module_does_not_import_netcal_or_scipy_at_top_level():
    # `import netcal` costs ~4 s (gpytorch, pyro); it must never run on `import peftviz.calibration.metrics`
    tree = ast.parse(Path(cal.__file__).read_text())
    top_level = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = [alias.name for node in top_level for alias in node.names] + [
        node.module or "" for node in top_level if isinstance(node, ast.ImportFrom)
    ]
    assert not any(name.split(".")[0] in {"netcal", "scipy", "torch"} for name in names)


@pytest.mark.parametrize("n_bins", [1, 5, 10, 15])
@pytest.mark.parametrize("n_classes", [3, 10])
def test_netcal_agrees_on_random_multiclass_data(n_classes, n_bins):
    # Agreement holds only for >= 3 distinct labels and no confidence exactly on an inner
    # bin edge; see test_netcal_differs_on_edges_and_binary_input for where it breaks.
    metrics = pytest.importorskip("netcal.metrics")
    probs, labels = random_probs(500, n_classes, seed=n_bins)
    assert cal.ece(probs, labels, n_bins) == pytest.approx(metrics.ECE(bins=n_bins).measure(probs, labels), abs=TIGHT)
    assert cal.mce(probs, labels, n_bins) == pytest.approx(metrics.MCE(bins=n_bins).measure(probs, labels), abs=TIGHT)
    assert cal.ace(probs, labels, n_bins) == pytest.approx(metrics.ACE(bins=n_bins).measure(probs, labels), abs=TIGHT)


def test_netcal_differs_on_edges_and_binary_input():
    """Why peftviz does not delegate to netcal 1.4.0 even for equal-width bins."""
    metrics = pytest.importorskip("netcal.metrics")
    # 1. netcal bins are left-closed [b/n, (b+1)/n) (np.histogramdd), ours right-closed per the spec:
    #    conf 0.5 x3 (1 right) and 0.6 (right). Ours: (0.4,0.5] gap 1/6, (0.5,0.6] gap .4 -> 3/4/6 + .4/4 = 0.225.
    #    netcal puts all four in [0.5, 0.6): |0.5 - 0.525| = 0.025.
    probs = np.array([[0.5, 0.3, 0.2], [0.5, 0.2, 0.3], [0.1, 0.5, 0.4], [0.2, 0.2, 0.6]])
    labels = np.array([0, 1, 2, 2])
    assert cal.ece(probs, labels) == pytest.approx(0.225, abs=TIGHT)
    assert metrics.ECE(bins=10).measure(probs, labels) == pytest.approx(0.025, abs=TIGHT)
    # 2. with <= 2 distinct labels netcal switches to binary mode: errors for C > 2 ...
    with pytest.raises(RuntimeError):
        metrics.ECE(bins=10).measure(probs, np.array([0, 1, 1, 0]))
    # ... and for C = 2 it bins p[:, 1] (positive class), not the top-label confidence
    binary_probs, binary_labels = random_probs(500, 2, seed=9)
    assert cal.mce(binary_probs, binary_labels) != pytest.approx(
        metrics.MCE(bins=10).measure(binary_probs, binary_labels), abs=1e-3
    )
    # 3. netcal clips confidences to [eps, 1 - eps]: one-hot correct gives 2.2e-16, ours exactly 0
    one_hot_labels = np.array([0, 1, 2])
    assert cal.ece(np.eye(3), one_hot_labels) == 0.0
    assert 0.0 < metrics.ECE(bins=10).measure(np.eye(3), one_hot_labels) < TIGHT


# ---------------------------------------------------------------- per-bin intervals and one-vs-rest tables


def bins_by_hand(score, n_bins, scheme):
    """Each example's bin, apart from peftviz: right-closed (b/n, (b+1)/n] with 0 in bin 0, or the
    consecutive groups of the stable sort (np.array_split)."""
    ids = np.full(len(score), -1)
    if scheme == "width":
        edges = [b / n_bins for b in range(n_bins + 1)]
        for b in range(n_bins):
            ids[(score > edges[b]) & (score <= edges[b + 1])] = b
        ids[score == 0] = 0
    else:
        for b, members in enumerate(np.array_split(np.argsort(score, kind="stable"), min(n_bins, len(score)))):
            ids[members] = b
    assert (ids >= 0).all()
    return ids


def scipy_wilson(hits, count, level=0.95):
    from scipy.stats import binomtest

    interval = binomtest(int(hits), int(count)).proportion_ci(confidence_level=level, method="wilson")
    return interval.low, interval.high


@pytest.mark.parametrize("level", [0.95, 0.8])
@pytest.mark.parametrize("scheme", ["width", "mass"])
def test_each_bins_accuracy_interval_is_the_wilson_interval_of_its_hits(scheme, level):
    from peftviz.analysis import calibration as analysis

    probs, labels = overconfident_model(400, seed=3)
    table = analysis.bins_frame(probs, labels, 15, scheme, "r", 1, level)
    assert list(table.columns) == list(analysis.BIN_COLUMNS)
    confidence, correct = probs.max(axis=1), probs.argmax(axis=1) == labels
    ids = bins_by_hand(confidence, 15, scheme)
    for b, row in table.iterrows():
        n, k = int((ids == b).sum()), int(correct[ids == b].sum())
        assert (row["count"], row["hits"]) == (n, k)
        if n == 0:
            assert np.isnan(row["accuracy_low"]) and np.isnan(row["accuracy_high"])
            continue
        assert (row["accuracy_low"], row["accuracy_high"]) == pytest.approx(scipy_wilson(k, n, level), abs=TIGHT)
        assert 0 <= row["accuracy_low"] <= row["accuracy"] <= row["accuracy_high"] <= 1
    if scheme == "width":  # confidences of 4 classes are >= 0.25: the first bins are empty
        assert (table["count"] == 0).sum() >= 3


def test_wilson_interval_follows_its_equation_and_stays_in_0_1_at_the_ends():
    from peftviz.analysis.calibration import wilson_interval

    low, high = wilson_interval([3, 0, 7, 1, 0], [10, 7, 7, 1, 0])
    z, p, n = 1.959963984540054, 0.3, 10
    centre, half = p + z**2 / (2 * n), z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    assert (low[0], high[0]) == pytest.approx(((centre - half) / (1 + z**2 / n), (centre + half) / (1 + z**2 / n)))
    # no hit, or all hits: the interval still has width (the normal interval's would be 0)
    assert low[1] == pytest.approx(0, abs=TIGHT) and high[1] == pytest.approx(scipy_wilson(0, 7)[1], abs=TIGHT)
    assert high[2] == pytest.approx(1, abs=TIGHT) and low[2] == pytest.approx(scipy_wilson(7, 7)[0], abs=TIGHT)
    assert high[1] > 0.3 and low[2] < 0.7
    assert low[3] == pytest.approx(scipy_wilson(1, 1)[0], abs=TIGHT) and high[3] == pytest.approx(1, abs=TIGHT)
    assert np.isnan(low[4]) and np.isnan(high[4])
    assert np.all((low[:4] >= 0) & (high[:4] <= 1))
    with pytest.raises(ValueError, match="level"):
        wilson_interval([1], [2], level=95)


@pytest.mark.parametrize("scheme", ["width", "mass"])
def test_classwise_tables_hold_each_bins_share_of_its_class(scheme):
    from peftviz.analysis import calibration as analysis

    probs, labels = random_probs(300, 4, seed=5)
    names = ["ant", "bee", "cat", "dog"]
    table = analysis.classwise_frame(probs, labels, 8, scheme, "r", "test", names)
    assert list(table.columns) == list(analysis.CLASSWISE_COLUMNS) and list(table["class"].unique()) == names
    for k, name in enumerate(names):
        rows = table[table["class"] == name].reset_index(drop=True)
        assert rows["count"].sum() == 300 and rows["hits"].sum() == (labels == k).sum()
        ids = bins_by_hand(probs[:, k], 8, scheme)
        for b, row in rows.iterrows():
            members = ids == b
            assert row["count"] == members.sum()
            if not members.any():
                assert np.isnan(row["accuracy"]) and np.isnan(row["accuracy_high"])
                continue
            assert row["accuracy"] == pytest.approx(np.mean(labels[members] == k), abs=TIGHT)
            assert row["confidence"] == pytest.approx(np.mean(probs[members, k]), abs=TIGHT)
            expected = scipy_wilson((labels[members] == k).sum(), members.sum())
            assert (row["accuracy_low"], row["accuracy_high"]) == pytest.approx(expected, abs=TIGHT)
    per_class_ece = [analysis.table_ece(table[table["class"] == name]) for name in names]
    assert np.mean(per_class_ece) == pytest.approx(cal.classwise_ece(probs, labels, 8, scheme), abs=TIGHT)


def test_classes_a_run_did_not_name_are_numbered():
    from peftviz.analysis import calibration as analysis

    probs, labels = random_probs(50, 3, seed=1)
    for names in (None, [], ["only", "two"]):
        table = analysis.classwise_frame(probs, labels, 5, "width", "r", 1, names)
        assert list(table["class"].unique()) == ["class 0", "class 1", "class 2"]
