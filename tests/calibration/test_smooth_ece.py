"""Tests for peftviz.smooth_ece: every row against relplot.smECE, value and bandwidth.

relplot is the reference: for each row r, ``relplot.smECE(c[indices[r]], h[indices[r]],
return_width=True)``. Values must agree to 1e-6 (they agree to ~1e-16: the same sums in another
order) and the bandwidths exactly (both are multiples of 2^-10 from the same bisection).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import relplot

from peftviz.calibration import binning, smooth_ece
from peftviz.calibration.smooth_ece import resampled_smooth_ece
from peftviz.calibration.stats import resample_indices
from peftviz.errors import ConfigError
from peftviz.store.runs import list_runs

TOLERANCE = 1e-6
SMALLEST_SIGMA = 2**-9  # the search's smallest computed bandwidth: its last midpoint, 2^-10, is below eps


def relplot_rows(confidence, correct, indices) -> tuple[np.ndarray, np.ndarray]:
    """(smECE (R,), sigma (R,)) from one relplot.smECE call per row."""
    correct = np.asarray(correct, dtype=np.float64)
    pairs = [relplot.smECE(confidence[row], correct[row], return_width=True) for row in indices]
    return np.array([value for value, _ in pairs]), np.array([sigma for _, sigma in pairs])


def assert_matches_relplot(confidence, correct, indices) -> tuple[np.ndarray, np.ndarray]:
    values, sigmas = resampled_smooth_ece(confidence, correct, indices)
    want_values, want_sigmas = relplot_rows(confidence, correct, indices)
    assert values.shape == sigmas.shape == (indices.shape[0],)
    assert np.max(np.abs(values - want_values)) <= TOLERANCE
    assert np.array_equal(sigmas, want_sigmas)
    return values, sigmas


def identity_and_resamples(n_examples: int, n_resamples: int, seed: int = 0) -> np.ndarray:
    """(1 + n_resamples, N): the identity row (no resampling) first, then bootstrap rows."""
    identity = np.arange(n_examples)[None, :]
    return np.vstack([identity, resample_indices(n_examples, n_resamples, seed)])


# ---------------------------------------------------------------- real predictions


def test_every_resample_of_a_stored_runs_test_predictions_equals_relplots(smoke_store):
    run = list_runs(smoke_store)[0]
    probs, labels = run.predictions("test")
    confidence, correct = binning.top_label(probs.astype(np.float64), labels)
    indices = identity_and_resamples(len(labels), 250)
    values, sigmas = assert_matches_relplot(confidence, correct, indices)
    assert len(np.unique(sigmas)) > 1 and np.all(values > 0)  # rows differ: the search went several ways


# ---------------------------------------------------------------- edge cases, one table


@dataclass(frozen=True)
class Case:
    id: str
    confidence: np.ndarray
    correct: np.ndarray
    n_resamples: int = 30

    def __str__(self) -> str:
        return self.id


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _calibrated_by_construction() -> tuple[np.ndarray, np.ndarray]:
    """Confidence k/10 on 10 examples, k of them correct: every residual sum is 0, smECE ~ 1e-17."""
    confidence = np.repeat(np.arange(1, 10) / 10, 10)
    correct = np.concatenate([np.arange(10) < k for k in range(1, 10)])
    return confidence, correct


def _bernoulli(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Calibrated in expectation: h ~ Bernoulli(c), c ~ U(0.2, 1)."""
    rng = _rng(seed)
    confidence = rng.uniform(0.2, 1.0, n)
    return confidence, rng.random(n) < confidence


CASES = [
    Case("all-correct", _rng(1).uniform(0.3, 1.0, 100), np.ones(100, dtype=bool)),
    Case("all-wrong", _rng(2).uniform(0.3, 1.0, 100), np.zeros(100, dtype=bool)),
    Case("single-example", np.array([0.7]), np.array([True])),
    Case("two-examples", np.array([0.2, 0.9]), np.array([False, True])),
    Case("constant-confidence", np.full(50, 0.6), _rng(3).random(50) < 0.5),
    Case("confidence-exactly-0-and-1", np.array([0, 0, 1, 1, 0.5, 1, 0, 1.0]), np.array([0, 1, 1, 0, 1, 1, 0, 1])),
    Case("all-1-and-correct", np.ones(30), np.ones(30, dtype=bool)),
    Case("many-ties", _rng(4).choice([0.25, 0.5, 0.75, 1.0], 300), _rng(5).random(300) < 0.6),
    Case("calibrated-by-construction", *_calibrated_by_construction()),
    Case("bernoulli-n-213", *_bernoulli(213, 6)),
    Case("bernoulli-n-5000", *_bernoulli(5000, 7), n_resamples=4),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_each_row_equals_relplot(case):
    indices = identity_and_resamples(len(case.confidence), case.n_resamples, seed=8)
    assert_matches_relplot(case.confidence, case.correct, indices)


@pytest.mark.parametrize("case_id", ["calibrated-by-construction", "all-1-and-correct"])
def test_perfect_calibration_takes_the_bisection_down_to_eps(case_id):
    """smECE ~ 0 at every bandwidth: the search halves to its end, where E and T are over 5000 points."""
    case = next(c for c in CASES if c.id == case_id)
    values, sigmas = assert_matches_relplot(case.confidence, case.correct, np.arange(len(case.confidence))[None, :])
    assert sigmas[0] == SMALLEST_SIGMA and values[0] < 1e-12
    assert smooth_ece.grid_points(SMALLEST_SIGMA) == 5121 and smooth_ece.mesh_points(SMALLEST_SIGMA) == 5120


@pytest.mark.parametrize("sigma", [1.0, 0.5, 0.05, 0.0123, 3 / 1024, SMALLEST_SIGMA])
def test_the_smoothing_operator_is_relplots_kernel_apply(sigma):
    """w @ A = ReflectedGaussianKernel(sigma).apply(c, w, mesh) for any weights; 3/1024 gives an even grid."""
    from relplot.kernels import ReflectedGaussianKernel

    rng = _rng(14)
    confidence = np.concatenate([rng.uniform(0, 1, 60), [0.0, 1.0, 0.5, 0.5]])
    weights = rng.normal(size=confidence.shape[0])
    mesh = np.linspace(0, 1, smooth_ece.mesh_points(sigma))
    want = ReflectedGaussianKernel(sigma).apply(confidence, weights, mesh)
    got = weights @ smooth_ece.smoothing_operator(confidence, sigma, mesh)
    assert np.max(np.abs(got - want)) <= 1e-12 * np.max(np.abs(want))


def test_rows_in_several_passes_and_the_mesh_in_pieces_give_the_same_values(monkeypatch):
    confidence, correct = _bernoulli(120, 9)
    indices = identity_and_resamples(120, 40)
    whole = resampled_smooth_ece(confidence, correct, indices)
    monkeypatch.setattr(smooth_ece, "_CHUNK_ELEMENTS", 1000)  # 8 rows a pass, ~4 mesh points a piece
    pieces = resampled_smooth_ece(confidence, correct, indices)
    assert np.allclose(whole[0], pieces[0], rtol=0, atol=1e-14) and np.array_equal(whole[1], pieces[1])


def test_a_row_depends_only_on_its_counts():
    confidence, correct = _bernoulli(60, 10)
    row = resample_indices(60, 1, seed=11)
    shuffled = _rng(12).permutation(row[0])[None, :]
    first, second = resampled_smooth_ece(confidence, correct, np.vstack([row, shuffled]))
    assert first[0] == first[1] and second[0] == second[1]  # the same counts: the same numbers


# ---------------------------------------------------------------- input validation


GOOD_CONFIDENCE = np.array([0.2, 0.6, 0.9])
GOOD_CORRECT = np.array([0, 1, 1])
GOOD_INDICES = np.array([[0, 1, 2], [2, 2, 0]])

BAD_INPUTS = [
    ("confidence-2d", np.ones((3, 1)), GOOD_CORRECT, GOOD_INDICES, r"confidence must have shape \(N >= 1,\)"),
    ("confidence-empty", np.array([]), np.array([]), np.zeros((1, 0), int), r"confidence must have shape"),
    ("confidence-above-1", np.array([0.2, 1.5, 0.9]), GOOD_CORRECT, GOOD_INDICES, r"confidence must lie in \[0, 1\]"),
    ("confidence-nan", np.array([0.2, np.nan, 0.9]), GOOD_CORRECT, GOOD_INDICES, r"confidence must lie in \[0, 1\]"),
    ("correct-too-short", GOOD_CONFIDENCE, np.array([0, 1]), GOOD_INDICES, r"correct must have shape \(3,\)"),
    ("correct-not-0-or-1", GOOD_CONFIDENCE, np.array([0, 2, 1]), GOOD_INDICES, r"correct must hold only 0 and 1"),
    ("indices-1d", GOOD_CONFIDENCE, GOOD_CORRECT, np.array([0, 1, 2]), r"indices must have shape \(R >= 1, 3\)"),
    ("indices-no-rows", GOOD_CONFIDENCE, GOOD_CORRECT, np.zeros((0, 3), int), r"indices must have shape"),
    ("indices-wrong-width", GOOD_CONFIDENCE, GOOD_CORRECT, np.zeros((2, 4), int), r"got shape \(2, 4\)"),
    ("indices-float", GOOD_CONFIDENCE, GOOD_CORRECT, GOOD_INDICES * 1.0, r"indices must be integers in \[0, 3\)"),
    ("indices-too-large", GOOD_CONFIDENCE, GOOD_CORRECT, GOOD_INDICES + 1, r"indices must be integers in \[0, 3\)"),
    ("indices-negative", GOOD_CONFIDENCE, GOOD_CORRECT, GOOD_INDICES - 1, r"indices must be integers in \[0, 3\)"),
]


@pytest.mark.parametrize(
    ("confidence", "correct", "indices", "message"), [b[1:] for b in BAD_INPUTS], ids=[b[0] for b in BAD_INPUTS]
)
def test_bad_inputs_raise_a_config_error_that_names_the_problem(confidence, correct, indices, message):
    with pytest.raises(ConfigError, match=message):
        resampled_smooth_ece(confidence, correct, indices)


def test_bool_and_float_correctness_give_the_same_rows():
    confidence, correct = _bernoulli(40, 13)
    indices = identity_and_resamples(40, 5)
    as_bool = resampled_smooth_ece(confidence, correct, indices)
    as_float = resampled_smooth_ece(confidence, correct.astype(np.float64), indices)
    assert np.array_equal(as_bool[0], as_float[0]) and np.array_equal(as_bool[1], as_float[1])
