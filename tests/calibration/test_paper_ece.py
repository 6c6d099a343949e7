"""Tests for peftviz.calibration.paper_ece: the ECE the prefix-propagation paper's code computes
(``evaluate.load("jordyvl/ece")`` at its defaults), and its registry entry ``paper_ece``.

1. the metric card's worked example, and the readings of ece.py that do not reproduce it
2. equal to a plain-loop implementation (tests/support/paper_ece_reference.py) on simulated predictions
   with ties on bin edges and confidences of exactly 1, and on the stored predictions of recorded runs
3. simulations with a known truth: calibrated, overconfident and underconfident predictions
4. the registry's bootstrap rows against the function on the resampled data; ``report --metric paper_ece``
5. bad input: one line, a ConfigError

The simulations print what they measured: ``pytest tests/calibration/test_paper_ece.py -k known -s``.
"""

import math

import numpy as np
import pytest

from peftviz.calibration import estimators as est
from peftviz.calibration.metrics import ece
from peftviz.calibration.paper_ece import paper_ece
from peftviz.calibration.stats import resample_indices
from peftviz.errors import ConfigError
from tests.support.paper_ece_reference import reference_paper_ece

TIGHT = 1e-12
CARD_PROBS = [[0.6, 0.2, 0.2], [0, 0.95, 0.05], [0.7, 0.1, 0.2]]  # the card's example (README of jordyvl/ece)
CARD_LABELS = [0, 1, 2]
CARD_ECE = 0.1333333333333334


# ---------------------------------------------------------------- 1. the worked example


def binned_by_hand(probs, labels, dtype, stand_in) -> float:
    """sum_b n_b |acc_b - stand_in(b)| / N over linspace(0, 1, 11)'s left-closed bins, by loops."""
    edges = np.linspace(0, 1, 11)
    rows = np.asarray(probs, dtype=dtype)
    members = {}
    for row, label in zip(rows, labels):
        confidence = float(row.max())
        b = min(int(np.searchsorted(edges, confidence, side="right")) - 1, 9)
        members.setdefault(b, []).append((confidence, int(row.argmax()) == label))
    total = sum(len(m) * abs(sum(h for _, h in m) / len(m) - stand_in(edges, b, m)) for b, m in sorted(members.items()))
    return total / len(labels)


READINGS = {  # reading of ece.py: (dtype, the bin's stand-in confidence, its ECE on the card's example)
    "float32, upper edge": (np.float32, lambda e, b, m: e[b + 1], CARD_ECE),
    "float32, center": (np.float32, lambda e, b, m: (e[b] + e[b + 1]) / 2, 0.11666666666666677),
    "float32, mean confidence": (np.float32, lambda e, b, m: sum(c for c, _ in m) / len(m), 0.11666667461395264),
    "float64, upper edge": (np.float64, lambda e, b, m: e[b + 1], 0.36666666666666664),
}


def test_the_cards_worked_example():
    assert paper_ece(CARD_PROBS, CARD_LABELS) == pytest.approx(CARD_ECE, abs=TIGHT)
    # to the last bit, with linspace's edges (upper edge 0.7000000000000001); b / 10 edges would give 0.1333333333333333
    assert paper_ece(CARD_PROBS, CARD_LABELS) == CARD_ECE
    assert est.ESTIMATORS["paper_ece"].compute(CARD_PROBS, CARD_LABELS) == CARD_ECE


@pytest.mark.parametrize("reading", list(READINGS))
def test_only_float32_with_the_upper_edge_reproduces_the_card(reading):
    dtype, stand_in, want = READINGS[reading]
    got = binned_by_hand(CARD_PROBS, CARD_LABELS, dtype, stand_in)
    assert got == pytest.approx(want, abs=TIGHT)
    assert (abs(got - CARD_ECE) < TIGHT) == (reading == "float32, upper edge")


# ---------------------------------------------------------------- 2. against the plain-loop reference


def simulated(seed: int, n_classes: int, n: int = 300):
    """Softmax predictions with labels drawn from them, then rows whose float32 confidence is exactly 0.25, 0.5,
    0.75 or 1 (on an edge of 4 bins; 0.5 and 1 on edges of 10) and a two-way argmax tie."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, n_classes)) * rng.uniform(0.5, 4, size=(n, 1))
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)  # (n, C)
    labels = (probs.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    edge_rows = []
    for top in (0.25, 0.5, 0.75, 1.0):
        if top >= 1 / n_classes:
            for _ in range(5):
                row = np.full(n_classes, (1 - top) / (n_classes - 1))
                row[rng.integers(n_classes)] = top
                edge_rows.append(row)
    tie = np.zeros(n_classes)
    tie[[0, 1]] = 0.5
    edge_rows += [tie] * 3
    extra = np.array(edge_rows)
    return np.vstack([probs, extra]), np.concatenate([labels, rng.integers(0, n_classes, len(extra))])


SETTINGS = [  # keyword arguments of paper_ece
    {},
    {"n_bins": 4},
    {"n_bins": 7, "proxy": "center"},
    {"n_bins": 15, "p": 2},
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "paper")
@pytest.mark.parametrize("n_classes", [2, 11, 20])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_the_loop_reference_on_simulated_predictions(seed, n_classes, settings):
    probs, labels = simulated(seed, n_classes)
    confidence = probs.astype(np.float32).max(axis=1)
    assert (confidence == 1.0).sum() >= 5 and (confidence == 0.5).sum() >= 3  # the edge cases are there
    got = paper_ece(probs, labels, **settings)
    assert got == pytest.approx(reference_paper_ece(probs, labels, **settings), abs=TIGHT)


def test_a_bin_range_narrower_than_0_1():
    probs, labels = simulated(3, 2)  # binary: every confidence in [0.5, 1]
    got = paper_ece(probs, labels, n_bins=5, bin_range=(0.5, 1.0))
    assert got == pytest.approx(reference_paper_ece(probs, labels, n_bins=5, bin_range=(0.5, 1.0)), abs=TIGHT)


def test_equals_the_loop_reference_on_stored_predictions(recorded_store):
    """The recorded runs' stored test predictions (a Trainer's LoRA, a loop's own method at seeds 0 and 1), and
    what the comparison reads back from the store for them."""
    from peftviz.analysis.group_stats import Settings, run_estimates
    from peftviz.store.runs import list_runs

    runs = list_runs(recorded_store)
    assert len(runs) == 3
    for run in runs:
        probs, labels = run.predictions("test")
        want = reference_paper_ece(probs, labels)
        assert paper_ece(probs, labels) == pytest.approx(want, abs=TIGHT), run.name
        got = run_estimates(run, Settings(n_resamples=50), ["paper_ece"])["paper_ece"]
        assert got.value == pytest.approx(want, abs=TIGHT) and got.samples.shape == (50,), run.name


def test_report_gives_it_an_interval_and_paired_differences(recorded_store, tmp_path):
    """`report --metric paper_ece --metric ece`: each unit's mean over its seeds is the reference's, and the
    pair's difference is the difference of those means."""
    import pandas as pd

    from peftviz.cli import main
    from peftviz.store.runs import list_runs

    prefix = tmp_path / "r"
    metrics = ["--metric", "paper_ece", "--metric", "ece"]
    assert (
        main(["report", *metrics, "--csv", str(prefix), "--runs-dir", str(recorded_store), "--resamples", "200"]) == 0
    )
    summary = pd.read_csv(f"{prefix}-summary.csv")
    pairs = pd.read_csv(f"{prefix}-pairs.csv")
    by_unit = {}
    for run in list_runs(recorded_store):
        by_unit.setdefault(run.label, []).append(reference_paper_ece(*run.predictions("test")))
    means = {unit: float(np.mean(values)) for unit, values in by_unit.items()}
    rows = summary[summary.metric == "paper_ece"]
    assert len(rows) == 2 and set(summary.metric) == {"paper_ece", "ece"}
    for row in rows.itertuples():
        assert row.mean == pytest.approx(means[row.unit], abs=TIGHT)
        assert row.low <= row.mean <= row.high
    (pair,) = pairs[pairs.metric == "paper_ece"].itertuples()
    assert pair.difference == pytest.approx(means[pair.a] - means[pair.b], abs=TIGHT)
    assert pair.low <= pair.difference <= pair.high


# ---------------------------------------------------------------- 3. known truth


def binary_sample(n, low, high, shift, rng):
    """Confidence c ~ U(low, high) on class 0; the prediction is right with probability c + shift."""
    top = rng.uniform(low, high, n)  # (n,)
    right = rng.uniform(size=n) < top + shift
    return np.column_stack([top, 1 - top]), np.where(right, 0, 1)


# name: (low, high, shift, the standard ECE's limit, the paper ECE's limit). With c uniform within each
# 0.1-wide bin, a bin's mean confidence is its center, 0.05 below its upper edge; every bin's accuracy is
# center + shift, so the standard ECE tends to |shift| and the paper's to |0.05 - shift|.
KNOWN = {
    "calibrated": (0.5, 1.0, 0.0, 0.0, 0.05),
    "overconfident by 0.04": (0.5, 0.9, -0.04, 0.04, 0.09),
    "underconfident by 0.04": (0.5, 0.9, 0.04, 0.04, 0.01),
}


def standard_error(terms: np.ndarray) -> float:
    """Of the mean of per-example terms. While every bin's gap keeps its sign, each ECE is |mean of its terms|:
    r(c_i) - h_i for the paper's, c_i - h_i for the standard one. Here 40,000 to 50,000 examples fall in a bin,
    so a bin's accuracy has a standard deviation of 0.0025 or less: 4 of them from flipping the smallest
    gap, 0.01 (the standard ECE's gaps at 0 do flip: its tolerance adds their bias)."""
    return float(terms.std() / math.sqrt(terms.shape[0]))


@pytest.mark.parametrize("case", list(KNOWN))
def test_known_truth_upper_edge_adds_half_a_bin(case):
    low, high, shift, standard_limit, paper_limit = KNOWN[case]
    n = 200_000
    probs, labels = binary_sample(n, low, high, shift, np.random.default_rng(0))
    got_paper, got_standard = paper_ece(probs, labels), ece(probs, labels)
    confidence = probs.max(axis=1)
    right = (probs.argmax(axis=1) == labels).astype(np.float64)
    upper = (np.floor(confidence * 10) + 1) / 10  # r(c); off by one bin only within float error of an edge
    paper_tolerance = 4 * standard_error(upper - right)
    # the standard ECE at 0 folds its noise up: its bias, about sqrt(2/pi) sqrt(0.19 / 40,000) = 0.002 a bin
    standard_tolerance = 4 * standard_error(confidence - right) + (0.003 if standard_limit == 0 else 0)
    print(
        f"{case}, n = {n:,}: paper ECE {got_paper:.4f} (limit {paper_limit}, ±{paper_tolerance:.4f}), "
        f"standard ECE {got_standard:.4f} (limit {standard_limit}, ±{standard_tolerance:.4f})"
    )
    assert got_paper == pytest.approx(paper_limit, abs=paper_tolerance)
    assert got_standard == pytest.approx(standard_limit, abs=standard_tolerance)


def test_known_truth_calibrated_multiclass_scores_its_mean_distance_to_the_upper_edges():
    """Labels drawn from Dirichlet probabilities (calibrated): E[paper ECE | c] = mean_i (r(c_i) - c_i), the
    distance from each confidence to its bin's upper edge, with standard error sqrt(sum c_i (1 - c_i)) / N."""
    n = 100_000
    rng = np.random.default_rng(1)
    probs = rng.dirichlet([1, 1, 1, 1], size=n)  # (n, 4)
    labels = (probs.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    confidence = probs.astype(np.float32).max(axis=1).astype(np.float64)
    # r(c) by floor(10 c): off linspace's bin only within an ulp of an edge, a few 1e-6 on the mean at most
    upper = np.array([min(math.floor(c * 10), 9) + 1 for c in confidence]) / 10
    truth = float(np.mean(upper - confidence))
    tolerance = 4 * math.sqrt(np.sum(confidence * (1 - confidence))) / n
    got = paper_ece(probs, labels)
    print(f"Dirichlet(1, 1, 1, 1), n = {n:,}: paper ECE {got:.4f}, E[r(c) - c] = {truth:.4f} ± {tolerance:.4f}")
    assert got == pytest.approx(truth, abs=tolerance)
    assert 0.045 < truth < 0.055 and ece(probs, labels) < 0.01


# ---------------------------------------------------------------- 4. the registry's estimator


def test_bootstrap_rows_equal_the_function_on_the_resampled_data():
    probs, labels = simulated(4, 11)
    indices = resample_indices(len(labels), 20, seed=5)
    for n_bins, scheme in ((10, "width"), (6, "mass")):  # the paper's bins whatever report's
        rows = est.bootstrap_samples(probs, labels, indices, n_bins=n_bins, scheme=scheme, metrics=["paper_ece"])
        want = [paper_ece(probs[row], labels[row]) for row in indices]
        np.testing.assert_allclose(rows["paper_ece"], want, rtol=0, atol=TIGHT)
        point = est.point_estimates(probs, labels, n_bins=n_bins, scheme=scheme, metrics=["paper_ece"])
        assert point["paper_ece"] == paper_ece(probs, labels)


def test_it_is_registered_beside_the_others_but_not_shown_by_default():
    entry = est.ESTIMATORS["paper_ece"]
    assert entry.lower_is_better is True and "upper edge" in entry.heading
    assert "paper_ece" not in est.DEFAULT_METRICS


# ---------------------------------------------------------------- 5. bad input


BAD = [  # (probs, labels, keyword arguments, the message's start)
    ([0.6, 0.4], [0], {}, "probs must be 2-D"),
    ([[0.6, 0.4]], [2], {}, "labels must lie in [0, 2)"),
    ([[0.6, float("nan")]], [0], {}, "probs contains NaN or inf"),
    (CARD_PROBS, CARD_LABELS, {"n_bins": 0}, "n_bins must be an int >= 1"),
    (CARD_PROBS, CARD_LABELS, {"n_bins": 2.5}, "n_bins must be an int >= 1"),
    (CARD_PROBS, CARD_LABELS, {"scheme": "equal-mass"}, "scheme 'equal-mass' is not implemented"),
    (CARD_PROBS, CARD_LABELS, {"proxy": "mean"}, "unknown proxy 'mean'"),
    (CARD_PROBS, CARD_LABELS, {"p": 0.5}, "p must be a finite number >= 1"),
    (CARD_PROBS, CARD_LABELS, {"p": math.inf}, "p must be a finite number >= 1"),
    (CARD_PROBS, CARD_LABELS, {"bin_range": (0.5, 0.2)}, "bin_range must satisfy 0 <= lo < hi <= 1"),
    (CARD_PROBS, CARD_LABELS, {"bin_range": (0.0,)}, "bin_range must be two numbers"),
    (CARD_PROBS, CARD_LABELS, {"bin_range": None}, "bin_range must be two numbers"),
    (CARD_PROBS, CARD_LABELS, {"bin_range": (0.65, 1.0)}, "1 confidences lie outside bin_range [0.65, 1.0]"),
    ([[1.5, -0.5]], [0], {}, "1 confidences lie outside bin_range [0.0, 1.0], e.g. 1.5"),
]


@pytest.mark.parametrize("probs, labels, kwargs, message", BAD, ids=[case[3][:30] for case in BAD])
def test_bad_input_is_one_line(probs, labels, kwargs, message):
    with pytest.raises(ConfigError) as caught:
        paper_ece(probs, labels, **kwargs)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
