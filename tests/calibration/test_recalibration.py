"""Tests for peftviz.recalibration: synthetic miscalibration, parameter recovery, sklearn pin, edge cases."""

import ast
from pathlib import Path

import numpy as np
import pytest

from peftviz import calibration
from peftviz.calibration import metrics, recalibration
from peftviz.calibration.recalibration import RECALIBRATORS, IsotonicCalibration, VectorScaling, recalibrate

NAMES = tuple(RECALIBRATORS)


def softmax(logits):
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def sample_labels(probs, rng):
    """One categorical draw per row (inverse CDF)."""
    return np.minimum((rng.random((probs.shape[0], 1)) > np.cumsum(probs, axis=1)).sum(axis=1), probs.shape[1] - 1)


def over_confident(n, n_classes, rng, scale=3.0, bias=None):
    """Labels drawn from softmax(u); the model reports softmax(scale * u + bias): over-confident, biased."""
    true_logits = rng.normal(scale=1.5, size=(n, n_classes))
    labels = sample_labels(softmax(true_logits), rng)
    bias = np.zeros(n_classes) if bias is None else np.asarray(bias, dtype=np.float64)
    return softmax(scale * true_logits + bias), labels


def random_probs(n, n_classes, rng):
    return softmax(rng.normal(scale=2.0, size=(n, n_classes)))


def assert_probabilities(out, shape):
    assert out.shape == shape
    assert out.dtype == np.float64
    assert np.all(np.isfinite(out))
    assert np.all(out >= 0.0)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-12)


# ---------------------------------------------------------------- registry and API


def test_registry_names_and_descriptions():
    assert NAMES == ("temperature", "vector", "isotonic")
    descriptions = recalibration.describe()
    assert set(descriptions) == set(NAMES)
    assert all(isinstance(text, str) and text and "\n" not in text for text in descriptions.values())


def test_module_imports_no_heavy_library_at_top_level():
    tree = ast.parse(Path(recalibration.__file__).read_text())
    names = [alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module for node in tree.body if isinstance(node, ast.ImportFrom)]
    assert not any(name.split(".")[0] in {"netcal", "scipy", "sklearn", "torch"} for name in names)


@pytest.mark.parametrize("name", NAMES)
def test_recalibrate_equals_fit_then_transform(name):
    rng = np.random.default_rng(1)
    val_probs, val_labels = over_confident(300, 4, rng)
    test_probs, _ = over_confident(200, 4, rng)
    expected = RECALIBRATORS[name].fit(val_probs, val_labels).transform(test_probs)
    out = recalibrate(val_probs, val_labels, test_probs, name)
    np.testing.assert_array_equal(out, expected)
    assert_probabilities(out, test_probs.shape)


# ---------------------------------------------------------------- improvement on held-out data


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", NAMES)
def test_every_recalibrator_improves_test_nll_and_ece(name, seed):
    # true logits x3 (over-confident) plus per-class biases; fit on val, judge on an independent test draw
    rng = np.random.default_rng(seed)
    bias = [1.0, 0.0, 0.0, -1.0, 0.0]
    val_probs, val_labels = over_confident(2000, 5, rng, bias=bias)
    test_probs, test_labels = over_confident(2000, 5, rng, bias=bias)
    out = recalibrate(val_probs, val_labels, test_probs, name)
    assert_probabilities(out, test_probs.shape)
    before_nll, after_nll = calibration.nll(test_probs, test_labels), calibration.nll(out, test_labels)
    before_ece, after_ece = calibration.ece(test_probs, test_labels), calibration.ece(out, test_labels)
    assert before_nll > 1.5 and before_ece > 0.2  # the data really are miscalibrated
    assert after_nll < before_nll - 0.3
    assert after_ece < before_ece / 3


# ---------------------------------------------------------------- temperature


def test_temperature_wraps_calibration_and_keeps_argmax():
    rng = np.random.default_rng(2)
    val_probs, val_labels = over_confident(500, 6, rng)
    test_probs = random_probs(400, 6, rng)
    fitted = RECALIBRATORS["temperature"].fit(val_probs, val_labels)
    assert fitted.temperature == calibration.fit_temperature(val_probs, val_labels)
    out = fitted.transform(test_probs)
    np.testing.assert_array_equal(out, calibration.apply_temperature(test_probs, fitted.temperature))
    np.testing.assert_array_equal(out.argmax(axis=1), test_probs.argmax(axis=1))


# ---------------------------------------------------------------- vector scaling


def test_vector_gradient_matches_finite_differences():
    from scipy.optimize import check_grad

    rng = np.random.default_rng(3)
    probs, labels = over_confident(200, 4, rng)
    logits = metrics.log_probs(probs)
    params = rng.normal(scale=0.5, size=8) + np.r_[np.ones(4), np.zeros(4)]
    error = check_grad(
        lambda p: recalibration._vector_nll_and_grad(p, logits, labels)[0],
        lambda p: recalibration._vector_nll_and_grad(p, logits, labels)[1],
        params,
    )
    assert error < 1e-6


def test_vector_nll_with_equal_weights_is_the_tempered_nll():
    rng = np.random.default_rng(4)
    probs, labels = over_confident(300, 5, rng)
    logits = metrics.log_probs(probs)
    for temperature in (0.5, 1.0, 3.0):
        params = np.r_[np.full(5, 1.0 / temperature), np.zeros(5)]
        nll, _ = recalibration._vector_nll_and_grad(params, logits, labels)
        assert nll == pytest.approx(metrics.tempered_nll(logits, labels, temperature), rel=1e-12)


def test_vector_recovers_known_weights_and_bias():
    # labels drawn from softmax(w* ⊙ log p + b*): the model class contains the truth, so large n recovers it
    rng = np.random.default_rng(5)
    true_w, true_b = np.array([0.3, 0.5, 0.8, 0.4]), np.array([0.5, -0.5, 0.0, 1.0])
    probs = random_probs(40_000, 4, rng)
    labels = sample_labels(softmax(np.log(probs) * true_w + true_b), rng)
    fitted = VectorScaling.fit(probs, labels)
    # tolerances ~4 standard deviations of the estimates over seeds (sd <= 0.015 for w, <= 0.025 for b)
    np.testing.assert_allclose(fitted.weights, true_w, atol=0.06)
    np.testing.assert_allclose(fitted.bias, true_b - true_b.mean(), atol=0.1)  # b only up to a common shift
    assert fitted.bias.mean() == pytest.approx(0.0, abs=1e-12)


def test_vector_fits_inverse_temperature_on_pure_temperature_data():
    # labels from softmax(log p / T): vector scaling should find w = 1/T for every class, b = 0,
    # and, being a superset of temperature scaling, reach at most temperature's validation NLL
    rng = np.random.default_rng(6)
    temperature = 2.5
    probs = random_probs(40_000, 5, rng)
    labels = sample_labels(softmax(np.log(probs) / temperature), rng)
    fitted = VectorScaling.fit(probs, labels)
    np.testing.assert_allclose(fitted.weights, 1.0 / temperature, atol=0.05)  # ~4 sd over seeds
    np.testing.assert_allclose(fitted.bias, 0.0, atol=0.1)
    fitted_t = calibration.fit_temperature(probs, labels)
    assert 1.0 / fitted_t == pytest.approx(fitted.weights.mean(), abs=0.01)
    vector_nll = calibration.nll(fitted.transform(probs), labels)
    temperature_nll = calibration.nll(calibration.apply_temperature(probs, fitted_t), labels)
    assert vector_nll <= temperature_nll + 1e-9


def test_vector_stays_finite_on_separable_validation():
    # every validation argmax correct: sharpening always lowers the NLL, so the unbounded MLE sends w to infinity
    labels = np.array([0, 1, 2, 0, 1, 2])
    probs = np.array([np.roll([0.6, 0.2, 0.2], k) for k in labels])
    fitted = VectorScaling.fit(probs, labels)
    lo, hi = recalibration.VECTOR_WEIGHT_BOUNDS
    assert np.all((fitted.weights >= lo) & (fitted.weights <= hi))
    assert fitted.weights.max() > 10.0  # pushed far towards the bound, yet finite
    assert_probabilities(fitted.transform(random_probs(10, 3, np.random.default_rng(7))), (10, 3))


# ---------------------------------------------------------------- isotonic


def test_isotonic_equals_sklearn_per_class_then_renormalised():
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(8)
    val_probs, val_labels = over_confident(500, 4, rng)
    test_probs = random_probs(300, 4, rng)
    columns = []
    for k in range(4):
        model = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip")
        columns.append(model.fit(val_probs[:, k], val_labels == k).predict(test_probs[:, k]))
    scores = np.column_stack(columns)
    out = IsotonicCalibration.fit(val_probs, val_labels).transform(test_probs)
    np.testing.assert_allclose(out, scores / scores.sum(axis=1, keepdims=True), rtol=1e-12, atol=0)


def test_isotonic_class_scores_are_monotone_in_own_probability():
    rng = np.random.default_rng(9)
    val_probs, val_labels = over_confident(500, 4, rng)
    fitted = IsotonicCalibration.fit(val_probs, val_labels)
    grid = np.linspace(0.0, 1.0, 201)
    for k in range(4):
        probs = np.full((grid.shape[0], 4), 0.0)
        probs[:, k] = grid  # only column k matters for class k's score; rows need not sum to 1
        scores = fitted.class_scores(probs)[:, k]
        assert np.all(np.diff(scores) >= 0.0)
        assert 0.0 <= scores.min() and scores.max() <= 1.0


def test_isotonic_all_zero_row_falls_back_to_uniform():
    # each class: p_k in {0, 0.3} never its label, p_k in {0.7, 1} always -> map is 0 up to 0.3
    val_probs = np.array(
        [np.roll([1.0, 0.0, 0.0, 0.0], k) for k in range(4)] + [np.roll([0.7, 0.3, 0.0, 0.0], k) for k in range(4)]
    )
    val_labels = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    fitted = IsotonicCalibration.fit(val_probs, val_labels)
    test_probs = np.array([[0.25, 0.25, 0.25, 0.25], [0.1, 0.1, 0.8, 0.0]])
    np.testing.assert_array_equal(fitted.class_scores(test_probs)[0], 0.0)
    out = fitted.transform(test_probs)
    np.testing.assert_array_equal(out[0], 0.25)
    assert out[1].argmax() == 2
    assert_probabilities(out, test_probs.shape)


# ---------------------------------------------------------------- edge cases


@pytest.mark.parametrize("name", NAMES)
def test_class_absent_from_validation_gives_finite_rows(name):
    rng = np.random.default_rng(10)
    val_probs, val_labels = over_confident(300, 4, rng)
    keep = val_labels != 3
    test_probs, _ = over_confident(200, 4, rng)
    out = recalibrate(val_probs[keep], val_labels[keep], test_probs, name)
    assert_probabilities(out, test_probs.shape)
    if name == "isotonic":  # constant-0 map: class 3 gets 0, except on rows that fall back to uniform
        uniform = np.all(out == 0.25, axis=1)
        assert uniform.sum() < 10
        np.testing.assert_array_equal(out[~uniform, 3], 0.0)


@pytest.mark.parametrize("name", NAMES)
def test_one_hot_and_tied_probabilities_give_finite_rows(name):
    rng = np.random.default_rng(11)
    labels = rng.integers(0, 3, size=60)
    one_hot = np.eye(3)[rng.integers(0, 3, size=60)]  # exact 0.0 and 1.0, some wrong
    tied = np.round(random_probs(60, 3, rng), 1)
    tied /= tied.sum(axis=1, keepdims=True)
    for val_probs in (one_hot, tied):
        for test_probs in (one_hot, tied, np.full((5, 3), 1.0 / 3.0)):
            out = recalibrate(val_probs, labels, test_probs, name)
            assert_probabilities(out, test_probs.shape)


@pytest.mark.parametrize("name", NAMES)
def test_two_classes_keep_two_columns(name):
    rng = np.random.default_rng(12)
    val_probs, val_labels = over_confident(300, 2, rng)
    test_probs, _ = over_confident(100, 2, rng)
    assert_probabilities(recalibrate(val_probs, val_labels, test_probs, name), (100, 2))


@pytest.mark.parametrize("name", NAMES)
def test_float32_input_gives_float64_output(name):
    rng = np.random.default_rng(13)
    val_probs, val_labels = over_confident(200, 3, rng)
    out = recalibrate(val_probs.astype(np.float32), val_labels, val_probs.astype(np.float32), name)
    assert_probabilities(out, val_probs.shape)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("name", NAMES)
def test_class_count_mismatch_raises(name):
    rng = np.random.default_rng(14)
    val_probs, val_labels = over_confident(50, 3, rng)
    with pytest.raises(ValueError, match="test_probs has 4 classes but val_probs has 3"):
        recalibrate(val_probs, val_labels, random_probs(5, 4, rng), name)
    fitted = RECALIBRATORS[name].fit(val_probs, val_labels)
    with pytest.raises(ValueError, match="probs has 4 classes, but the recalibrator was fitted on 3"):
        fitted.transform(random_probs(5, 4, rng))


def test_bad_inputs_raise_value_errors():
    rng = np.random.default_rng(15)
    val_probs, val_labels = over_confident(20, 3, rng)
    with pytest.raises(ValueError, match="unknown recalibrator 'platt'"):
        recalibrate(val_probs, val_labels, val_probs, "platt")
    with pytest.raises(ValueError, match="labels must have shape"):
        recalibrate(val_probs, val_labels[:-1], val_probs, "vector")
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        recalibrate(val_probs, np.full(20, 3), val_probs, "isotonic")
    with pytest.raises(ValueError, match="probs must be 2-D"):
        recalibrate(val_probs, val_labels, val_probs[0], "temperature")
    with pytest.raises(ValueError, match="NaN or inf"):
        recalibrate(val_probs, val_labels, np.full((2, 3), np.nan), "vector")
