"""estimators.smooth_reliability: relplot's diagram, its bootstrap band computed for all resamples at
once; every resample's fit checked against relplot's own kernel smoother on that resample."""

import numpy as np
import pytest
from relplot import prepare_rel_diagram
from relplot.estimators import KernelSmoother
from relplot.kernels import ReflectedGaussianKernel

from peftviz.calibration import estimators
from peftviz.calibration.binning import top_label
from peftviz.calibration.stats import resample_indices


def predictions(n: int, seed: int, sharpness: float = 0.3):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(5, sharpness), size=n)
    labels = np.where(rng.random(n) < probs.max(axis=1), probs.argmax(axis=1), rng.integers(0, 5, n))
    return probs, labels


@pytest.mark.parametrize(("n", "seed", "sharpness"), [(213, 0, 0.3), (40, 1, 0.1), (1000, 2, 2.0)])
def test_each_bootstrap_fit_is_relplots_kernel_smoother_on_that_resample(n, seed, sharpness):
    probs, labels = predictions(n, seed, sharpness)
    diagram = estimators.smooth_reliability(probs, labels, n_resamples=60, seed=seed)
    confidence, correct = top_label(probs, labels)
    rows = resample_indices(n, 60, seed)
    fits = estimators.bootstrap_fits(confidence, correct, diagram.sigma, diagram.mesh, rows)
    for row, fit in zip(rows, fits):
        smoother = KernelSmoother(ReflectedGaussianKernel(diagram.sigma))
        expected = smoother.fit(confidence[row][:, None], correct[row].astype(float)).predict(diagram.mesh[:, None])
        assert np.abs(fit - expected).max() < 1e-9
    assert np.allclose(diagram.curve, fits.mean(axis=0), atol=1e-12)  # relplot draws the bags' mean
    assert np.allclose(diagram.lower, np.quantile(fits, 0.025, axis=0), atol=1e-12)
    assert np.allclose(diagram.upper, np.quantile(fits, 0.975, axis=0), atol=1e-12)


def test_without_a_band_the_curve_is_relplots_fit_on_all_predictions():
    probs, labels = predictions(213, 3)
    diagram = estimators.smooth_reliability(probs, labels, band=False)
    confidence, correct = top_label(probs, labels)
    out = prepare_rel_diagram(confidence, correct.astype(float), plot_confidence_band=False, report_CE_std=False)
    assert np.array_equal(diagram.curve, out["mu"]) and np.array_equal(diagram.density, out["density"])
    assert np.array_equal(diagram.lower, diagram.curve) and np.array_equal(diagram.upper, diagram.curve)
    assert diagram.smooth_ece == out["ce"] and diagram.sigma == out["sigma"]


def test_the_band_is_seeded_and_leaves_the_global_random_state_alone():
    probs, labels = predictions(100, 4)
    state = np.random.get_state()
    first = estimators.smooth_reliability(probs, labels, n_resamples=30, seed=5)
    assert all(a is b or np.array_equal(a, b) for a, b in zip(np.random.get_state(), state))
    assert np.array_equal(first.upper, estimators.smooth_reliability(probs, labels, n_resamples=30, seed=5).upper)
    assert not np.array_equal(first.upper, estimators.smooth_reliability(probs, labels, n_resamples=30, seed=6).upper)
