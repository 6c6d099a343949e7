"""Tests for peftviz.estimators: each estimator against a slow reference, simulations, bootstrap.

Fast (well under a minute on one core) except the coverage measurement marked long, which prints
the coverage of the ECE estimators' intervals:
    .venv/bin/python -m pytest tests/calibration/test_estimators.py -m long -s
"""

import ast
import math
from pathlib import Path

import numpy as np
import pytest
import relplot
from scipy.stats import foldnorm
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import f1_score

from peftviz import calibration as cal
from peftviz.calibration import estimators as est
from peftviz.calibration.stats import resample_indices
from tests.support.paper_ece_reference import reference_paper_ece
from tests.support.selective_reference import selective_metrics

TIGHT = 1e-12
CALIBRATION_METRICS = [m for m in est.ESTIMATORS if m not in ("accuracy", "macro_f1")]


# ---------------------------------------------------------------- data


def softmax(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def random_set(n=120, n_classes=4, seed=0):
    rng = np.random.default_rng(seed)
    return softmax(rng.normal(size=(n, n_classes)) * 2), rng.integers(0, n_classes, n)


def edge_set():
    """Ties, one-hot rows (confidence exactly 1), confidences on bin edges, argmax ties, one label."""
    rows = (
        [[1.0, 0.0, 0.0]] * 5
        + [[0.0, 1.0, 0.0]] * 2
        + [[0.5, 0.3, 0.2]] * 6
        + [[0.2, 0.3, 0.5]] * 4
        + [[0.4, 0.3, 0.3]] * 3
        + [[0.5, 0.5, 0.0]] * 3
        + [[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.6, 0.1, 0.3]]
    )
    probs = np.array(rows)
    return probs, np.zeros(probs.shape[0], dtype=int)


def tiny_set():
    """Fewer examples than bins."""
    return np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]]), np.array([0, 1, 1])


DATASETS = {"random": random_set(), "edge": edge_set(), "tiny": tiny_set()}


def one_label_sample(confidence, correct_prob, n_classes, rng):
    """Rows with predicted class j (uniform), p_j = confidence, the rest shared equally; the label is j
    with probability correct_prob, else uniform over the other classes."""
    n = confidence.shape[0]
    predicted = rng.integers(0, n_classes, n)
    probs = np.repeat(((1 - confidence) / (n_classes - 1))[:, None], n_classes, axis=1)
    probs[np.arange(n), predicted] = confidence
    wrong = (predicted + rng.integers(1, n_classes, n)) % n_classes
    labels = np.where(rng.random(n) < correct_prob, predicted, wrong)
    return probs, labels


def calibrated_sample(n, rng, n_classes=4):
    """Perfectly calibrated, top-label and class-wise: P(correct | c) = c, c ~ U(0.4, 1)."""
    confidence = rng.uniform(0.4, 1.0, n)
    return one_label_sample(confidence, confidence, n_classes, rng)


def miscalibrated_sample(n, rng, n_classes=4):
    """4 classes, top-label overconfident: true P(correct) = q ~ U(0.3, 1), reported confidence sqrt(q).

    Every confidence is above its accuracy, so any binning gives |mean accuracy - mean confidence|
    at large n: this distribution checks convergence, not binning."""
    q = rng.uniform(0.3, 1.0, n)
    return one_label_sample(np.sqrt(q), q, n_classes, rng)


def crossing_sample(n, rng, n_classes=4):
    """4 classes, P(correct | c) = 0.7 + 0.5 (c - 0.7), c ~ U(0.4, 1): under- then overconfident.

    True top-label ECE E|0.5 (c - 0.7)| = 0.075; 0.7 is an edge of both 10-bin schemes, so the
    binned ECEs converge to it exactly."""
    confidence = rng.uniform(0.4, 1.0, n)
    return one_label_sample(confidence, 0.7 + 0.5 * (confidence - 0.7), n_classes, rng)


MISCALIBRATED = {"sqrt": miscalibrated_sample, "crossing": crossing_sample}


# ---------------------------------------------------------------- slow references


def ref_bins(values, hits, n_bins, scheme):
    """[(count, mean value, mean hit)] of the non-empty bins, by explicit loops over examples."""
    n = len(values)
    if scheme == "width":
        members = [[] for _ in range(n_bins)]
        for i, v in enumerate(values):
            for b in range(n_bins):
                if (b / n_bins < v <= (b + 1) / n_bins) or (b == 0 and v == 0):
                    members[b].append(i)
                    break
    else:
        order = sorted(range(n), key=lambda i: values[i])  # Python's sort is stable
        n_groups = min(n_bins, n)
        q, r = divmod(n, n_groups)
        members, start = [], 0
        for g in range(n_groups):
            size = q + 1 if g < r else q
            members.append(order[start : start + size])
            start += size
    return [(len(m), sum(values[i] for i in m) / len(m), sum(float(hits[i]) for i in m) / len(m)) for m in members if m]


def ref_ece(values, hits, n_bins, scheme):
    return sum(n * abs(acc - conf) for n, conf, acc in ref_bins(values, hits, n_bins, scheme)) / len(values)


def top_label(probs, labels):
    confidence = [max(row) for row in probs]
    correct = [int(np.argmax(row) == y) for row, y in zip(probs, labels)]
    return confidence, correct


def ref_debiased_ece(values, hits, n_bins, scheme, draws=200_000, seed=0):
    """Kumar et al.'s normal_debiased_ce (power 1) with seeded draws: 2 * plug-in - mean resampled CE."""
    bins = ref_bins(values, hits, n_bins, scheme)
    weights = np.array([n / len(values) for n, _, _ in bins])
    conf = np.array([c for _, c, _ in bins])
    acc = np.array([a for _, _, a in bins])
    sd = np.sqrt(acc * (1 - acc) / np.array([n for n, _, _ in bins]))
    draws_ = np.random.default_rng(seed).normal(acc, sd, size=(draws, len(bins)))
    return 2 * np.dot(weights, np.abs(acc - conf)) - np.mean(np.abs(draws_ - conf) @ weights)


def ref_debiased_ece_foldnorm(values, hits, n_bins, scheme):
    """The same with scipy's folded-normal mean for E|A - conf|."""
    total = 0.0
    for n, conf, acc in ref_bins(values, hits, n_bins, scheme):
        sd = math.sqrt(acc * (1 - acc) / n)
        expected = foldnorm(abs(acc - conf) / sd, scale=sd).mean() if sd > 0 else abs(acc - conf)
        total += n / len(values) * (2 * abs(acc - conf) - expected)
    return total


def ref_ece_sweep(values, hits):
    """Sweep b = 1, 2, ... over equal-mass bins; stop before the first b with a decreasing accuracy."""
    best = 1
    for b in range(2, len(values) + 1):
        accs = [acc for _, _, acc in ref_bins(values, hits, b, "mass")]
        if any(accs[i] > accs[i + 1] for i in range(len(accs) - 1)):
            break
        best = b
    return ref_ece(values, hits, best, "mass")


def ref_brier_terms(probs, labels):
    """CORP terms with sklearn's isotonic regression per class, summed."""
    rel = res = unc = 0.0
    for k in range(probs.shape[1]):
        outcome = (labels == k).astype(float)
        iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(probs[:, k], outcome)
        fitted = iso.predict(probs[:, k])
        base = outcome.mean()
        bs_p, bs_fit, bs_base = (np.mean((x - outcome) ** 2) for x in (probs[:, k], fitted, base))
        rel, res, unc = rel + bs_p - bs_fit, res + bs_base - bs_fit, unc + bs_base
    return {"brier_reliability": rel, "brier_resolution": res, "brier_uncertainty": unc}


def references(probs, labels, n_bins, scheme):
    """Every estimator, recomputed from its definition or its source library."""
    confidence, correct = top_label(probs, labels)
    n = len(labels)
    classwise = [ref_ece(list(probs[:, k]), labels == k, n_bins, scheme) for k in range(probs.shape[1])]
    refs = {
        "accuracy": sum(correct) / n,
        "macro_f1": f1_score(labels, probs.argmax(axis=1), average="macro"),
        "ece": ref_ece(confidence, correct, n_bins, "width"),
        "ece_mass": ref_ece(confidence, correct, n_bins, "mass"),
        "debiased_ece": ref_debiased_ece_foldnorm(confidence, correct, n_bins, scheme),
        "smooth_ece": relplot.smECE(np.array(confidence), np.array(correct, dtype=float)),
        "ece_sweep": ref_ece_sweep(confidence, correct),
        "classwise_ece": sum(classwise) / len(classwise),
        "mce": max(abs(acc - conf) for _, conf, acc in ref_bins(confidence, correct, n_bins, scheme)),
        "ace": float(np.mean([abs(acc - conf) for _, conf, acc in ref_bins(confidence, correct, n_bins, scheme)])),
        "paper_ece": reference_paper_ece(probs, labels),  # the paper's own bins, whatever n_bins and scheme
        "nll": -sum(math.log(max(probs[i, labels[i]], 1e-12)) for i in range(n)) / n,
        "brier": sum((probs[i, k] - (labels[i] == k)) ** 2 for i in range(n) for k in range(probs.shape[1])) / n,
    }
    return refs | ref_brier_terms(probs, labels) | selective_metrics(probs, labels)


# ---------------------------------------------------------------- 1. against references


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.UndefinedMetricWarning")
@pytest.mark.parametrize("scheme", ["width", "mass"])
@pytest.mark.parametrize("dataset", list(DATASETS))
def test_every_estimator_matches_its_reference(dataset, scheme):
    probs, labels = DATASETS[dataset]
    got = est.point_estimates(probs, labels, n_bins=10, scheme=scheme)
    want = references(probs, labels, 10, scheme)
    assert set(got) == set(est.ESTIMATORS) == set(want)
    for name in est.ESTIMATORS:
        assert got[name] == pytest.approx(want[name], abs=1e-10), name


@pytest.mark.parametrize("scheme", ["width", "mass"])
def test_binned_estimators_equal_calibrations(scheme):
    probs, labels = DATASETS["random"]
    got = est.point_estimates(probs, labels, n_bins=7, scheme=scheme)
    assert got["ece"] == pytest.approx(cal.ece(probs, labels, 7, "width"), abs=TIGHT)
    assert got["ece_mass"] == pytest.approx(cal.ece(probs, labels, 7, "mass"), abs=TIGHT)
    assert got["mce"] == pytest.approx(cal.mce(probs, labels, 7, scheme), abs=TIGHT)
    assert got["classwise_ece"] == pytest.approx(cal.classwise_ece(probs, labels, 7, scheme), abs=TIGHT)
    assert got["nll"] == pytest.approx(cal.nll(probs, labels), abs=TIGHT)
    assert got["brier"] == pytest.approx(cal.brier(probs, labels), abs=TIGHT)
    assert got["accuracy"] == pytest.approx(cal.accuracy(probs, labels), abs=TIGHT)


@pytest.mark.parametrize("dataset", ["random", "edge"])
def test_debiased_ece_matches_kumar_style_draws(dataset):
    probs, labels = DATASETS[dataset]
    confidence, correct = top_label(probs, labels)
    for scheme in ("width", "mass"):
        got = est.ESTIMATORS["debiased_ece"].compute(probs, labels, 5, scheme)
        assert got == pytest.approx(ref_debiased_ece(confidence, correct, 5, scheme), abs=2e-3)


def test_debiased_ece_can_be_negative_and_is_not_clipped():
    rng = np.random.default_rng(1)
    values = [est.ESTIMATORS["debiased_ece"].compute(*calibrated_sample(100, rng)) for _ in range(20)]
    assert min(values) < 0


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.UndefinedMetricWarning")
def test_macro_f1_with_classes_missing_from_labels_or_predictions():
    probs = np.eye(5)[[0, 0, 1, 1, 2, 2]]  # classes 3 and 4 never predicted; class 4 never a label either
    labels = np.array([0, 1, 1, 1, 3, 2])
    want = f1_score(labels, probs.argmax(axis=1), average="macro")
    assert est.ESTIMATORS["macro_f1"].compute(probs, labels) == pytest.approx(want, abs=TIGHT)


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_brier_decomposition_identity(dataset):
    probs, labels = DATASETS[dataset]
    got = est.point_estimates(probs, labels)
    decomposed = got["brier_reliability"] - got["brier_resolution"] + got["brier_uncertainty"]
    assert decomposed == pytest.approx(cal.brier(probs, labels), abs=1e-12)
    assert got["brier_reliability"] >= -1e-12 and got["brier_resolution"] >= -1e-12


def test_ece_sweep_stops_at_the_first_non_monotone_b():
    confidence = np.linspace(0.5, 0.9, 6)
    # sorted correctness 0 1 0 1 1 1: b = 2 (1/3, 1), b = 3 (1/2, 1/2, 1), b = 4 sizes (2, 2, 1, 1)
    # (1/2, 1/2, 1, 1) are monotone; b = 5 sizes (2, 1, 1, 1, 1) gives (1/2, 0, ...): b* = 4
    assert est._sweep_bins(confidence, np.array([0, 1, 0, 1, 1, 1], dtype=bool)) == 4
    assert est._sweep_bins(confidence, np.array([1, 1, 1, 0, 0, 0], dtype=bool)) == 1
    assert est._sweep_bins(confidence, np.array([0, 0, 0, 1, 1, 1], dtype=bool)) == 6
    # 0 1 1 0 1: b = 2 sizes (3, 2) gives (2/3, 1/2), so b* = 1, although b = 3 (1/2, 1/2, 1) is
    # monotone again: the sweep stops at the first violation (Roelofs et al.), not at the largest b
    assert est._sweep_bins(confidence[:5], np.array([0, 1, 1, 0, 1], dtype=bool)) == 1


def test_bootstrap_rows_equal_estimates_on_the_resampled_data():
    for dataset in ("random", "edge"):
        probs, labels = DATASETS[dataset]
        indices = resample_indices(len(labels), 4, seed=3)
        for scheme in ("width", "mass"):
            samples = est.bootstrap_samples(probs, labels, indices, n_bins=6, scheme=scheme)
            for r, row in enumerate(indices):
                want = est.point_estimates(probs[row], labels[row], n_bins=6, scheme=scheme)
                for name in est.ESTIMATORS:
                    assert samples[name][r] == pytest.approx(want[name], abs=1e-12), (dataset, scheme, name)


def test_bootstrap_rows_survive_single_class_resamples():
    probs, labels = DATASETS["random"]
    indices = np.full((2, len(labels)), np.flatnonzero(labels == 2)[0])  # one example repeated: one class
    samples = est.bootstrap_samples(probs, labels, indices)
    assert all(np.all(np.isfinite(v)) for v in samples.values())


# ---------------------------------------------------------------- 2. bias on calibrated predictions


@pytest.mark.slow  # a simulation of 5 s or more
def test_debiased_ece_is_closer_to_zero_on_calibrated_predictions():
    rng = np.random.default_rng(0)
    draws = [est.point_estimates(*calibrated_sample(200, rng)) for _ in range(200)]
    means = {name: float(np.mean([d[name] for d in draws])) for name in est.ESTIMATORS}
    report = "perfectly calibrated, n = 200, 200 draws, mean of each estimator: " + ", ".join(
        f"{name} {value:.4f}" for name, value in means.items()
    )
    print(report)
    assert abs(means["debiased_ece"]) < means["ece"], report


# ---------------------------------------------------------------- 3. convergence on known miscalibration


@pytest.fixture(scope="module", params=list(MISCALIBRATED))
def known(request):
    """A miscalibrated distribution and every estimator on 10^6 of its examples (10 equal-width bins)."""
    sample = MISCALIBRATED[request.param]
    return request.param, sample, est.point_estimates(*sample(1_000_000, np.random.default_rng(1)))


def tolerance_20k(metric, sample):
    """0.01; for NLL 4 standard errors at n = 20,000 if larger (-log of p_y near 0 has a heavy tail)."""
    if metric != "nll":
        return 0.01
    probs, labels = sample(100_000, np.random.default_rng(3))
    losses = -np.log(np.maximum(probs[np.arange(len(labels)), labels], 1e-12))
    return max(0.01, 4 * losses.std() / math.sqrt(20_000))


def test_estimators_converge_on_known_miscalibration(known):
    name, sample, large_n = known
    at_20k = est.point_estimates(*sample(20_000, np.random.default_rng(2)))
    report = ", ".join(f"{m} {at_20k[m]:.4f} vs {large_n[m]:.4f}" for m in est.ESTIMATORS)
    print(f"{name}: n = 20,000 vs n = 10^6: {report}")
    for metric in est.ESTIMATORS:
        assert at_20k[metric] == pytest.approx(large_n[metric], abs=tolerance_20k(metric, sample)), report
    # the binned ECEs' large-n limits are known: E|q - sqrt(q)| for q ~ U(0.3, 1), and 0.075
    true_ece = (2 / 3 * (1 - 0.3**1.5) - 0.5 * (1 - 0.3**2)) / 0.7 if name == "sqrt" else 0.075
    for metric in ("ece", "ece_mass", "debiased_ece", "ece_sweep"):
        assert large_n[metric] == pytest.approx(true_ece, abs=0.003), (metric, report)


# ---------------------------------------------------------------- 4. bootstrap coverage


def test_accuracy_interval_covers_the_true_accuracy():
    rng = np.random.default_rng(0)
    covered = 0
    for draw in range(400):
        probs, labels = calibrated_sample(200, rng)  # true accuracy E[c] = 0.7
        estimate = est.estimate_all(probs, labels, n_resamples=400, seed=draw, metrics=["accuracy"])["accuracy"]
        covered += estimate.low <= 0.7 <= estimate.high
    print(f"accuracy 95% interval coverage: {covered / 400:.3f}")
    assert 0.92 <= covered / 400 <= 0.98


def measure_coverage(known, metrics, n_draws, n=200, n_resamples=200):
    """Fraction of draws whose 95% percentile interval contains the n = 10^6 value; printed."""
    name, sample, large_n = known
    rng = np.random.default_rng(5)
    covered = dict.fromkeys(metrics, 0)
    for draw in range(n_draws):
        estimates = est.estimate_all(*sample(n, rng), n_resamples=n_resamples, seed=draw, metrics=metrics)
        for m in metrics:
            covered[m] += estimates[m].low <= large_n[m] <= estimates[m].high
    rates = {m: covered[m] / n_draws for m in metrics}
    print(f"{name}: 95% interval coverage of the n = 10^6 value (n = {n}, {n_draws} draws, {n_resamples} resamples):")
    print("  " + ", ".join(f"{m} {rates[m]:.3f} (10^6 value {large_n[m]:.4f})" for m in metrics))
    return rates


def test_binned_ece_interval_coverage_is_measured(known):
    rates = measure_coverage(known, ["ece", "debiased_ece"], n_draws=200)
    assert all(0 <= r <= 1 for r in rates.values())  # measured and printed, not asserted


@pytest.mark.long
def test_ece_interval_coverage_measured_slow(known):
    rates = measure_coverage(known, ["ece", "debiased_ece", "smooth_ece"], n_draws=100)
    assert all(0 <= r <= 1 for r in rates.values())


# ---------------------------------------------------------------- 5. estimate_all


def test_estimate_all_is_seeded_and_takes_a_subset():
    probs, labels = DATASETS["random"]
    metrics = ["accuracy", "ece", "brier_reliability"]
    first = est.estimate_all(probs, labels, n_resamples=50, seed=4, metrics=metrics)
    assert list(first) == metrics
    assert first == est.estimate_all(probs, labels, n_resamples=50, seed=4, metrics=metrics)
    assert first != est.estimate_all(probs, labels, n_resamples=50, seed=5, metrics=metrics)
    assert first["ece"].n_resamples == 50 and first["ece"].level == 0.95
    assert first["ece"].value == est.ESTIMATORS["ece"].compute(probs, labels)
    assert all(e.low <= e.high for e in first.values())


def test_estimate_all_all_metrics_on_edge_data():
    probs, labels = DATASETS["edge"]
    estimates = est.estimate_all(probs, labels, n_resamples=20, scheme="mass")
    assert set(estimates) == set(est.ESTIMATORS)
    assert all(np.isfinite([e.value, e.low, e.high]).all() for e in estimates.values())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_resamples": 0}, "n_resamples"),
        ({"level": 1.0}, "level"),
        ({"n_bins": 0}, "n_bins"),
        ({"scheme": "quantile"}, "scheme"),
        ({"metrics": ["ece", "nope"]}, "unknown metrics"),
        ({"metrics": "ece"}, "list of names"),
    ],
)
def test_estimate_all_rejects_bad_arguments(kwargs, message):
    probs, labels = DATASETS["random"]
    with pytest.raises(ValueError, match=message):
        est.estimate_all(probs, labels, **kwargs)


def test_bad_shapes_are_rejected():
    probs, labels = DATASETS["random"]
    with pytest.raises(ValueError, match="labels must have shape"):
        est.estimate_all(probs, labels[:-1])
    with pytest.raises(ValueError, match="2-D"):
        est.point_estimates(probs[:, 0], labels)
    with pytest.raises(ValueError, match="indices must have shape"):
        est.bootstrap_samples(probs, labels, np.zeros((3, 5), dtype=int))
    with pytest.raises(ValueError, match="indices must be integers"):
        est.bootstrap_samples(probs, labels, np.full((2, len(labels)), len(labels)))


# ---------------------------------------------------------------- smooth diagram and import weight


def test_smooth_reliability_is_relplots_seeded_and_restores_the_global_state():
    probs, labels = DATASETS["random"]
    state = np.random.get_state()
    first = est.smooth_reliability(probs, labels, n_resamples=20, seed=1)
    assert all(a is b or np.array_equal(a, b) for a, b in zip(np.random.get_state(), state))
    again = est.smooth_reliability(probs, labels, n_resamples=20, seed=1)
    assert np.array_equal(first.lower, again.lower) and np.array_equal(first.upper, again.upper)
    confidence, correct = top_label(probs, labels)
    assert first.smooth_ece == relplot.smECE(np.array(confidence), np.array(correct, dtype=float))
    assert first.smooth_ece == pytest.approx(est.ESTIMATORS["smooth_ece"].compute(probs, labels), abs=1e-12)
    shapes = {a.shape for a in (first.mesh, first.curve, first.lower, first.upper, first.density)}
    assert shapes == {first.mesh.shape} and np.all(first.lower <= first.upper + 1e-12)


def test_module_imports_only_numpy_and_peftviz_at_top_level():
    # relplot imports matplotlib and seaborn (seconds); scikit-learn and scipy load on first use
    tree = ast.parse(Path(est.__file__).read_text())
    top_level = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = [alias.name for node in top_level for alias in node.names if isinstance(node, ast.Import)] + [
        node.module or "" for node in top_level if isinstance(node, ast.ImportFrom)
    ]
    allowed = {"__future__", "collections", "dataclasses", "functools", "numpy", "peftviz"}
    assert {name.split(".")[0] for name in names} <= allowed


# ---------------------------------------------------------------- 6. a stored run


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.UndefinedMetricWarning")
def test_a_stored_runs_estimates_are_recomputed_from_its_predictions(tmp_path):
    """A run whose stored predictions have tied confidences, confidences of exactly 1 and one class
    present: what the comparison reads back equals every estimator's reference on the loaded arrays."""
    from peftviz.analysis.group_stats import Settings, run_estimates
    from peftviz.run_config import TrainConfig
    from peftviz.store.runs import load_run
    from peftviz.store.writer import RunWriter

    probs, labels = edge_set()
    import torch

    names = [f"class {i}" for i in range(probs.shape[1])]
    writer = RunWriter.create(tmp_path, TrainConfig(method="fine-tuning", label="edge"), {"label_names": names})
    writer.write_epoch({"epoch": 1, "micro_f1": 0.5, "accuracy": 0.5, "ece": 0.1}, probs.astype(np.float32), labels)
    writer.write_params({"head.weight": torch.zeros(1)}, epoch=1)
    writer.close()  # its writer gone: an incomplete run, not one still training
    run = load_run(writer.path)
    assert run.status == "incomplete" and run.epochs_done == 1, run.error
    stored_probs, stored_labels = run.predictions(1)
    assert (stored_probs.max(axis=1) == 1.0).sum() == 7 and set(stored_labels) == {0}
    got = run_estimates(run, Settings(which=1, n_resamples=50), None)
    want = references(stored_probs.astype(np.float64), stored_labels, 10, "width")
    for name in est.ESTIMATORS:
        assert got[name].value == pytest.approx(want[name], abs=1e-10), name
        assert got[name].samples.shape == (50,)


def test_a_smooth_curve_is_supported_only_where_predictions_are():
    """Simulated: every confidence in [0.8, 1], so about one prediction lies within a bandwidth σ of a
    point only from about 0.8 - σ up; below 0.6 there is none for 4σ and more."""
    rng = np.random.default_rng(0)
    n = 500
    top = rng.uniform(0.8, 1.0, n)  # (N,)
    probs = np.column_stack([top, 1 - top])
    labels = (rng.uniform(size=n) > top).astype(int)  # calibrated: right with probability `top`
    diagram = est.smooth_reliability(probs, labels, n_resamples=10)
    supported = diagram.supported()
    assert diagram.n == n and diagram.sigma < 0.05
    assert supported[(diagram.mesh > 0.82) & (diagram.mesh < 0.98)].all()
    assert not supported[diagram.mesh < 0.6].any()
    expected = n * diagram.density * 2 * diagram.sigma  # predictions within one bandwidth of each point
    inside = (diagram.mesh > 0.85) & (diagram.mesh < 0.95)
    assert np.median(expected[inside]) == pytest.approx(n * 2 * diagram.sigma / 0.2, rel=0.1)  # uniform density 5
