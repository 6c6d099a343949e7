"""Tests written against faults planted by hand in the statistics, each of which every other test let pass:

* recalibration fitted on the test predictions instead of the best epoch's validation predictions;
* a stored npz whose probabilities are finite but outside [0, 1], or whose rows do not sum to 1;
* the paired difference of two single runs computed B − A while labelled A − B.

Each test builds run folders with RunWriter from predictions made by hand (no training), so the right
numbers are known independently of the code under test.
"""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from peftviz import calibration
from peftviz.analysis import calibration as analysis
from peftviz.analysis import group_stats
from peftviz.calibration.recalibration import RECALIBRATORS
from peftviz.errors import RunError
from peftviz.run_config import TrainConfig
from peftviz.store.runs import Group, Run, load_run
from peftviz.store.writer import RunWriter

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION_PAGE = str(ROOT / "pages/2_Calibration.py")
LABELS = ["w", "x", "y", "z"]


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def write_run(root: Path, label: str, epochs: list[tuple[np.ndarray, np.ndarray]], test, label_names) -> Run:
    """A complete run whose epoch e (1, 2, ...) holds epochs[e - 1] as its validation predictions and
    `test` as the best epoch's test predictions; the last epoch is the best (highest micro-F1)."""
    import torch

    config = TrainConfig(method="fine-tuning", label=label)
    recorded = {"label_names": label_names, "parameters": {"total": 10, "trainable": 4}, "environment": {}}
    writer = RunWriter.create(root, config, recorded)
    for epoch, (probs, labels) in enumerate(epochs, start=1):
        record = {
            "epoch": epoch,
            "micro_f1": 0.1 * epoch,
            "accuracy": calibration.accuracy(probs, labels),
            "ece": calibration.ece(probs, labels),
        }
        writer.write_epoch(record, probs.astype(np.float32), labels)
        writer.write_params({"head.weight": torch.zeros(len(label_names), 2)}, epoch)
    writer.write_predictions("test", test[0].astype(np.float32), test[1])
    writer.finish({"params_epoch": len(epochs), "test": {"accuracy": calibration.accuracy(*test)}})
    run = load_run(writer.path)
    assert run.status == "complete" and run.best_epoch == len(epochs), run.error
    return run


# ---------------------------------------------------------------- 1. recalibration is fitted on validation


def scaled_draw(n: int, scale: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """Labels drawn from softmax(u); the predictions softmax(scale · u): the best temperature is `scale`."""
    logits = rng.normal(scale=1.5, size=(n, len(LABELS)))
    truth = softmax(logits)
    labels = np.minimum((rng.random((n, 1)) > np.cumsum(truth, axis=1)).sum(axis=1), len(LABELS) - 1)
    return softmax(scale * logits), labels


@pytest.fixture(scope="module")
def recalibration_run(tmp_path_factory) -> Run:
    """Validation over-confident (best T ≈ 2), test under-confident (best T ≈ 0.5): a map fitted on
    test is far from the one fitted on validation. Epoch 1 (not the best) is different again."""
    rng = np.random.default_rng(0)
    first, best, test = scaled_draw(1500, 4.0, rng), scaled_draw(1500, 2.0, rng), scaled_draw(1500, 0.5, rng)
    return write_run(tmp_path_factory.mktemp("recalibration"), "recalibrated", [first, best], test, LABELS)


def maps_fitted_on(probs, labels) -> dict:
    return {method: RECALIBRATORS[method].fit(probs, labels) for method in RECALIBRATORS}


def test_recalibration_bins_fit_the_map_on_the_best_epochs_validation_not_on_test(recalibration_run):
    run = recalibration_run
    (val_probs, val_labels), (test_probs, test_labels) = run.predictions(2), run.predictions("test")
    on_validation, on_test = maps_fitted_on(val_probs, val_labels), maps_fitted_on(test_probs, test_labels)
    assert on_validation["temperature"].temperature > 1.5 and on_test["temperature"].temperature < 0.7  # they differ
    for method in RECALIBRATORS:
        result = analysis.recalibration_bins(run, method, 10, "width")
        assert (result.fitted_on_epoch, result.n_validation) == (2, len(val_labels))
        expected = calibration.summary(on_validation[method].transform(test_probs), test_labels, 10, "width")
        wrong = calibration.summary(on_test[method].transform(test_probs), test_labels, 10, "width")
        assert abs(expected["nll"] - wrong["nll"]) > 0.01  # the data tell the two fits apart
        assert result.after == pytest.approx(expected, abs=1e-12), f"{method}: not the map fitted on validation"
        assert result.before == pytest.approx(calibration.summary(test_probs, test_labels, 10, "width"), abs=1e-12)
    temperature = analysis.recalibration_bins(run, "temperature").temperature
    assert temperature == pytest.approx(on_validation["temperature"].temperature, rel=1e-9)
    assert abs(temperature - on_test["temperature"].temperature) > 1.0


def test_recalibration_estimates_judge_the_validation_fitted_map_on_test(recalibration_run):
    run = recalibration_run
    (val_probs, val_labels), (test_probs, test_labels) = run.predictions(2), run.predictions("test")
    on_validation, on_test = maps_fitted_on(val_probs, val_labels), maps_fitted_on(test_probs, test_labels)
    table = analysis.recalibration_estimates(run, group_stats.Settings(n_resamples=20), ["nll", "ece"])
    assert list(table["map"]) == [heading for heading in analysis.RECALIBRATION_NAMES.values() for _ in range(2)]
    for method, heading in analysis.RECALIBRATION_NAMES.items():
        rows = table[table["map"] == heading].set_index("metric")
        fitted = on_validation.get(method)
        probs = test_probs if fitted is None else fitted.transform(test_probs)
        assert rows.loc["nll", "value"] == pytest.approx(calibration.nll(probs, test_labels), abs=1e-12), heading
        assert rows.loc["ece", "value"] == pytest.approx(calibration.ece(probs, test_labels), abs=1e-12), heading
        if fitted is not None:
            wrong = calibration.nll(on_test[method].transform(test_probs), test_labels)
            assert abs(rows.loc["nll", "value"] - wrong) > 0.01


# ---------------------------------------------------------------- 2. stored probabilities are probabilities


def npz_bytes(probs: np.ndarray, labels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, probs=probs, labels=labels)
    return buffer.getvalue()


def bad_probs(kind: str, n: int) -> np.ndarray:
    """Finite probabilities that are not a distribution: outside [0, 1] (rows still sum to 1), or
    inside [0, 1] with rows that do not sum to 1."""
    rows = {"out-of-range": [1.2, -0.3, 0.05, 0.05], "unnormalised": [0.5, 0.5, 0.5, 0.0]}[kind]
    return np.tile(np.array(rows, np.float32), (n, 1))


BAD_PROBS_ERRORS = {  # what Run.predictions says, after "run <name>: predictions/epoch_2.npz: "
    "out-of-range": r"probs must be probabilities in \[0, 1\]",
    "unnormalised": r"each row of probs must sum to 1; 40 of 40 rows do not \(row 0 sums to 1\.5\)",
}


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory) -> Run:
    """A complete two-epoch run over LABELS, 40 examples, best epoch 2."""
    rng = np.random.default_rng(1)
    draws = [scaled_draw(40, 1.0, rng) for _ in range(3)]
    return write_run(tmp_path_factory.mktemp("plain"), "plain", draws[:2], draws[2], LABELS)


def damaged_copy(run: Run, store: Path, kind: str) -> Run:
    folder = shutil.copytree(run.path, store / run.name)
    labels = run.predictions(2)[1]
    (folder / "predictions" / "epoch_2.npz").write_bytes(npz_bytes(bad_probs(kind, len(labels)), labels))
    return load_run(folder)


@pytest.mark.parametrize("kind", sorted(BAD_PROBS_ERRORS))
def test_stored_probabilities_that_are_no_distribution_are_refused_with_file_and_epoch_named(plain_run, tmp_path, kind):
    run = damaged_copy(plain_run, tmp_path, kind)
    assert run.status == "complete"  # values are checked when read, not when listed
    with pytest.raises(RunError, match=rf"^run {run.name}: predictions/epoch_2.npz: {BAD_PROBS_ERRORS[kind]}"):
        run.predictions(2)
    assert run.predictions(1)[0].shape == (40, 4) and run.predictions("test")[0].shape == (40, 4)


@pytest.mark.parametrize("kind", sorted(BAD_PROBS_ERRORS))
def test_calibration_page_names_stored_probabilities_that_are_no_distribution(plain_run, tmp_path, monkeypatch, kind):
    store = tmp_path / "runs"
    run = damaged_copy(plain_run, store, kind)
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    at = AppTest.from_file(CALIBRATION_PAGE, default_timeout=120).run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    assert at.error, "the page showed no error for a corrupt predictions file"
    pattern = rf"run {run.name}: predictions/epoch_2.npz: {BAD_PROBS_ERRORS[kind]}"
    for element in at.error:  # every section that reads epoch 2 says why it cannot, in one line
        assert "\n" not in element.value and re.search(pattern, element.value), element.value


# ---------------------------------------------------------------- 3. the difference of two runs is A − B


def predictions_of(labels: np.ndarray, right: float, confidence: float, rng) -> np.ndarray:
    """Rows that put `confidence` on the predicted class, which is the label for a share `right` of them."""
    n, n_classes = len(labels), len(LABELS)
    predicted = np.where(rng.random(n) < right, labels, (labels + rng.integers(1, n_classes, n)) % n_classes)
    probs = np.full((n, n_classes), (1.0 - confidence) / (n_classes - 1))
    probs[np.arange(n), predicted] = confidence
    return probs


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Run, Run]:
    """On the same 400 test examples: A right 90% of the time at confidence 0.9 (accurate, calibrated),
    B right 55% of the time at confidence 0.95 (less accurate, over-confident)."""
    rng = np.random.default_rng(2)
    labels = rng.integers(0, len(LABELS), 400)
    store = tmp_path_factory.mktemp("pair")
    runs = []
    for label, right, confidence in (("A accurate", 0.9, 0.9), ("B overconfident", 0.55, 0.95)):
        test = (predictions_of(labels, right, confidence, rng), labels)
        runs.append(write_run(store, label, [test], test, LABELS))
    return runs[0], runs[1]


@pytest.mark.parametrize("order", ["AB", "BA"])
def test_the_paired_difference_of_two_single_runs_is_a_minus_b(two_runs, order):
    a, b = two_runs if order == "AB" else two_runs[::-1]
    units = [Group(a.name, [a]), Group(b.name, [b])]
    result = group_stats.stats_of_groups(units, group_stats.Settings("test", 10, "width", 200, 0), ["accuracy", "ece"])
    assert len(result.pairs) == 2
    (probs_a, labels), (probs_b, _) = a.predictions("test"), b.predictions("test")
    expected = {
        "accuracy": calibration.accuracy(probs_a, labels) - calibration.accuracy(probs_b, labels),  # higher is better
        "ece": calibration.ece(probs_a, labels, 10) - calibration.ece(probs_b, labels, 10),  # lower is better
    }
    sign = 1 if order == "AB" else -1
    assert sign * expected["accuracy"] > 0.25 and sign * expected["ece"] < -0.2  # A is better on both
    for _, row in result.pairs.iterrows():
        assert (row["a"], row["b"]) == (a.label, b.label)
        assert row["difference"] == pytest.approx(expected[row["metric"]], abs=1e-12), row["metric"]
        assert row["low"] < row["difference"] < row["high"], row.to_dict()
        assert np.sign(row["low"]) == np.sign(row["high"]) == np.sign(row["difference"]), row.to_dict()
