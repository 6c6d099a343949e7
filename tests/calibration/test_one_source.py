"""One source per metric (issue 33): the numbers a training run writes per epoch, `calibration.metrics` and
the pages' numbers are all the estimator registry's (`calibration.estimators.ESTIMATORS`) on the identity
resample.

- every name a run writes per epoch equals its registry estimator on the same predictions, bit for bit;
- the registry's point values keep the arithmetic the per-epoch numbers had before the registry computed
  them (a reference written out here, with its summation order), so stores trained before and after agree;
- a planted change to a registry estimator changes `calibration.metrics` and what a real training run
  writes into metrics.jsonl.
"""

import dataclasses

import numpy as np
import pytest
from sklearn.metrics import f1_score

from peftviz.calibration import estimators as est
from peftviz.calibration import metrics
from peftviz.training.inference import EPOCH_METRICS, evaluation_metrics

SHIFT = 0.125  # a planted offset, far above rounding (1e-15)


def softmax_float32(logits: np.ndarray) -> np.ndarray:
    """Probabilities as `inference.predict` hands them to the trainer: float32 rows."""
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)


def prediction_sets() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(33)
    probs = softmax_float32(rng.normal(size=(213, 5)) * 2)
    drawn = (probs.cumsum(axis=1) > rng.random((213, 1))).argmax(axis=1)  # labels drawn from probs: gaps of both signs
    sets = {"five classes": (probs, drawn)}
    # 12 classes, five absent from labels and predictions, between the others: macro F1 averages the present
    # ones only (summing the absent ones' zeros in regroups numpy's pairwise sum: on this seed, found by
    # search, that moves the last bit)
    present, absent_rng = np.array([1, 2, 3, 4, 7, 9, 11]), np.random.default_rng(3)
    logits = absent_rng.normal(size=(300, 12)) * 3
    logits[:, np.setdiff1d(np.arange(12), present)] -= 20
    sets["absent classes"] = (softmax_float32(logits), absent_rng.choice(present, 300))
    # tied confidences, probabilities of exactly 1 and 0, one class in the labels
    tied = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.2, 0.7, 0.1], [0.2, 0.7, 0.1], [0.0, 0.0, 1.0]] * 9)
    sets["ties and ones"] = (tied.astype(np.float32), np.zeros(45, dtype=np.int64))
    sharpened = softmax_float32(rng.normal(size=(150, 4)) * 4).astype(np.float64) ** 1.3  # float64, as imported
    sets["float64"] = (sharpened / sharpened.sum(axis=1, keepdims=True), rng.integers(0, 4, 150))
    return sets


SETS = prediction_sets()


# ---------------------------------------------------------------- 1. every per-epoch number is the registry's


@pytest.mark.parametrize("n_bins", [10, 15])
@pytest.mark.parametrize("name", list(SETS))
def test_every_metric_written_per_epoch_is_the_registrys_value(name, n_bins):
    probs, labels = SETS[name]
    record = evaluation_metrics(probs, labels, n_bins)
    assert list(record) == [*EPOCH_METRICS, "n"] and record["n"] == len(labels)
    for written, estimator in EPOCH_METRICS.items():
        assert record[written] == est.ESTIMATORS[estimator].compute(probs, labels, n_bins), written
    # the pages' path: estimate_all's point values (its bootstrap rows do not touch them)
    shown = est.estimate_all(probs, labels, n_bins, n_resamples=20, metrics=sorted(set(EPOCH_METRICS.values())))
    assert all(record[written] == shown[estimator].value for written, estimator in EPOCH_METRICS.items())
    # micro and macro F1 were sklearn's before the registry wrote them: still equal to the last bit
    predicted = probs.argmax(axis=1)
    assert record["micro_f1"] == f1_score(labels, predicted, average="micro")
    assert record["macro_f1"] == f1_score(labels, predicted, average="macro")


@pytest.mark.parametrize("scheme", ["width", "mass"])
def test_metrics_summary_is_the_registry_under_its_names(scheme):
    probs, labels = SETS["five classes"]
    values = est.point_estimates(probs, labels, 7, scheme)
    ece_name, other_name = {"width": ("ece", "ece_mass"), "mass": ("ece_mass", "ece")}[scheme]
    expected = {name: values[ece_name if name == "ece" else name] for name in metrics.SUMMARY}
    assert metrics.summary(probs, labels, 7, scheme) == expected
    assert metrics.ece(probs, labels, 7, scheme) == values[ece_name] != values[other_name]  # the scheme picks it


# ---------------------------------------------------------------- 2. the per-epoch arithmetic is kept


def reference_bin_sums(values, hits, n_bins: int, scheme: str):
    """Per bin: count, sum of values, sum of hits, each added in example order (np.bincount), as the
    per-epoch numbers were computed before the registry computed them."""
    if scheme == "width":
        ids = np.clip(np.searchsorted(np.arange(n_bins + 1) / n_bins, values, side="left") - 1, 0, n_bins - 1)
        used = n_bins
    else:
        used = min(n_bins, len(values))
        ids = np.empty(len(values), dtype=np.int64)
        ids[np.argsort(values, kind="stable")] = np.concatenate(
            [np.full(len(g), b) for b, g in enumerate(np.array_split(np.arange(len(values)), used))]
        )
    sums = [np.bincount(ids, weights=w, minlength=used) for w in (None, values, hits.astype(np.float64))]
    return sums[0], sums[1], sums[2]


def reference_summary(probs, labels, n_bins: int, scheme: str) -> dict[str, float]:
    """The pre-registry formulas of `calibration.metrics`, operation for operation (so, bit for bit)."""
    probs, labels = np.asarray(probs, dtype=np.float64), np.asarray(labels)
    confidence, correct = probs.max(axis=1), probs.argmax(axis=1) == labels
    count, confidence_sum, hit_sum = reference_bin_sums(confidence, correct, n_bins, scheme)
    full = count > 0
    gaps = np.abs(hit_sum[full] - confidence_sum[full]) / count[full]
    per_class = []
    for k in range(probs.shape[1]):
        n_k, conf_k, hits_k = reference_bin_sums(probs[:, k], labels == k, n_bins, scheme)
        per_class.append(float(np.abs(hits_k - conf_k).sum() / n_k.sum()))
    true_class = probs[np.arange(len(labels)), labels]
    return {
        "accuracy": float(np.mean(probs.argmax(axis=1) == labels)),
        "ece": float(np.abs(hit_sum - confidence_sum).sum() / count.sum()),
        "mce": float(gaps.max()),
        "ace": float(gaps.mean()),
        "classwise_ece": float(np.mean(per_class)),
        "brier": float(np.mean(np.sum((probs - np.eye(probs.shape[1])[labels]) ** 2, axis=1))),
        "nll": float(np.mean(-np.log(np.maximum(true_class, 1e-12)))),
    }


@pytest.mark.parametrize("scheme", ["width", "mass"])
@pytest.mark.parametrize("name", list(SETS))
def test_registry_point_values_keep_the_per_epoch_arithmetic(name, scheme):
    probs, labels = SETS[name]
    for n_bins in (3, 10, 15):
        assert metrics.summary(probs, labels, n_bins, scheme) == reference_summary(probs, labels, n_bins, scheme)


def test_bootstrap_rows_sum_each_resample_in_its_own_order():
    """A resample row's ECE, MCE and ACE equal the point values on the resampled arrays, bit for bit: the
    equal-mass bins of a row add its examples in the row's order, as the identity row does."""
    probs, labels = SETS["float64"]
    rows = np.random.default_rng(4).integers(0, len(labels), size=(12, len(labels)))
    for scheme in ("width", "mass"):
        drawn = est.bootstrap_samples(probs, labels, rows, 10, scheme, metrics=["ece", "ece_mass", "mce", "ace"])
        for r, row in enumerate(rows):
            again = est.point_estimates(probs[row], labels[row], 10, scheme, metrics=list(drawn))
            assert {name: values[r] for name, values in drawn.items()} == again


# ---------------------------------------------------------------- 3. a planted change reaches every number


def shifted(name: str) -> est.Estimator:
    real = est.ESTIMATORS[name]
    return dataclasses.replace(real, resampled=lambda s: real.resampled(s) + SHIFT)


@pytest.mark.parametrize("name", metrics.SUMMARY)
def test_a_planted_registry_change_moves_calibration_metrics(name, monkeypatch):
    probs, labels = SETS["five classes"]
    before = metrics.summary(probs, labels)
    monkeypatch.setitem(est.ESTIMATORS, name, shifted(name))
    after = metrics.summary(probs, labels)
    assert after[name] - before[name] == pytest.approx(SHIFT, abs=1e-15)
    assert getattr(metrics, name)(probs, labels) == after[name]
    assert {k: v for k, v in after.items() if k != name} == {k: v for k, v in before.items() if k != name}


def test_a_planted_registry_ece_changes_the_ece_a_training_run_writes(tmp_path, monkeypatch, one_thread):
    """A real (tiny, random BERT) training run with the registry's ECE shifted by 0.125 writes, for every
    epoch, the true ECE of its stored predictions plus 0.125 into metrics.jsonl; accuracy stays true."""
    from peftviz.run_config import preset_config
    from peftviz.store.runs import list_runs
    from peftviz.training.trainer import train

    monkeypatch.setitem(est.ESTIMATORS, "ece", shifted("ece"))
    train(preset_config("smoke", "bitfit", epochs=2, limit=60), tmp_path)
    monkeypatch.undo()
    (run,) = list_runs(tmp_path)
    assert run.status == "complete" and [line["epoch"] for line in run.metrics] == [1, 2]
    for line in run.metrics:
        probs, labels = run.predictions(line["epoch"])
        true_ece = est.ESTIMATORS["ece"].compute(probs, labels, run.config.ece_bins)
        assert line["ece"] - true_ece == pytest.approx(SHIFT, abs=1e-15)
        assert line["accuracy"] == est.ESTIMATORS["accuracy"].compute(probs, labels)
