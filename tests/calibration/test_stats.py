"""peftviz.calibration.stats: the paired bootstrap test (false-positive rate, power), t intervals, seed tests, Holm.

The simulations score two "runs" on the same n = 500 binary examples. Example i has a latent logit
z_i ~ N(1, 1.5²) and label y_i ~ Bernoulli(sigmoid(z_i)); a run predicts p_i = sigmoid(T (z_i + 0.8 ε_i)),
ε_i ~ N(0, 1) fresh per run. The noise alone makes a run overconfident and T > 1 sharpens it further
without moving the argmax, so T changes calibration and not accuracy. Two runs with the same T are
exchangeable: the population difference of any metric is 0, and a 5%-level test should reject ~5% of pairs.

The bootstrap draws are vectorised (`resampled_eces`, one row of `resample_indices` per draw, shared by
both runs) and fed to `paired_bootstrap_from_samples`, the same code `paired_bootstrap` ends in;
`test_paired_bootstrap_equals_vectorised_draws` checks that the two give identical results.
"""

from dataclasses import FrozenInstanceError
from functools import cache

import numpy as np
import pytest
from scipy import stats as scipy_stats

from peftviz.calibration.binning import resampled_eces
from peftviz.calibration.metrics import accuracy, brier, ece
from peftviz.calibration.stats import (
    Difference,
    group_difference,
    holm,
    paired_bootstrap,
    paired_bootstrap_from_samples,
    resample_indices,
    t_interval,
)

N_EXAMPLES = 500
N_RESAMPLES = 300
NOISE = 0.8
T_SHARED = 1.4  # both runs under H0: population top-label ECE 0.090 (10 equal-width bins)
T_MISCALIBRATED = 2.1  # run B in the power study: population ECE 0.140, 0.050 above T_SHARED
T_NEAR_CALIBRATED = 1.0  # population ECE 0.041: gaps comparable to their noise at n = 500
ALPHA = 0.05
H0_PAIRS = 1200  # the rejection rate under H0 is ~3% here: 1200 pairs put its Monte Carlo s.e. at 0.5%


def _examples(rng, n):
    z = rng.normal(1.0, 1.5, n)
    return z, (rng.random(n) < 1.0 / (1.0 + np.exp(-z))).astype(np.int64)


def _run(rng, z, temperature):
    p = 1.0 / (1.0 + np.exp(-temperature * (z + NOISE * rng.normal(size=z.shape))))
    return np.stack([1.0 - p, p], axis=1)


def _draws(probs, labels, indices):
    """Bootstrap draws of ECE (10 width bins) and accuracy on the rows of `indices`, vectorised."""
    confidence, correct = probs.max(axis=1), probs.argmax(axis=1) == labels
    return {
        "ece": resampled_eces(confidence, correct, indices, 10, "width"),
        "accuracy": correct[indices].mean(axis=1),
    }


@cache
def _rejection_rates(temperature_a, temperature_b, n_pairs, seed):
    """Share of simulated pairs with p < ALPHA, per metric, for runs at the two temperatures."""
    rng = np.random.default_rng(seed)
    rejected = {"ece": 0, "accuracy": 0}
    for pair in range(n_pairs):
        z, labels = _examples(rng, N_EXAMPLES)
        probs_a, probs_b = _run(rng, z, temperature_a), _run(rng, z, temperature_b)
        indices = resample_indices(N_EXAMPLES, N_RESAMPLES, seed=pair)
        draws_a, draws_b = _draws(probs_a, labels, indices), _draws(probs_b, labels, indices)
        for name, metric in (("ece", ece), ("accuracy", accuracy)):
            diff = paired_bootstrap_from_samples(
                metric(probs_a, labels), metric(probs_b, labels), draws_a[name], draws_b[name]
            )
            rejected[name] += diff.p_value < ALPHA
    return {name: count / n_pairs for name, count in rejected.items()}


# ---------------------------------------------------------------- paired bootstrap


def test_paired_bootstrap_equals_vectorised_draws():
    rng = np.random.default_rng(7)
    z, labels = _examples(rng, 300)
    probs_a, probs_b = _run(rng, z, 1.0), _run(rng, z, 1.6)
    indices = resample_indices(300, 200, seed=3)
    draws_a, draws_b = _draws(probs_a, labels, indices), _draws(probs_b, labels, indices)
    for name, metric in (("ece", ece), ("accuracy", accuracy)):
        diff = paired_bootstrap(metric, probs_a, probs_b, labels, n_resamples=200, seed=3)
        again = paired_bootstrap_from_samples(
            metric(probs_a, labels), metric(probs_b, labels), draws_a[name], draws_b[name], n_examples=300
        )
        assert diff.method == "paired bootstrap" and diff.n == 300
        assert diff.estimate == pytest.approx(metric(probs_a, labels) - metric(probs_b, labels), abs=1e-15)
        np.testing.assert_allclose(
            [diff.low, diff.high, diff.p_value], [again.low, again.high, again.p_value], rtol=0, atol=1e-12
        )
        assert diff.low <= diff.high and 1 / 201 <= diff.p_value <= 1.0


def test_paired_bootstrap_p_value_by_hand():
    # Δ̂ = 0.3; null-centred draws Δ* - Δ̂ = [-0.3, 0.1, 0.5, -0.1, 0.3]: three have |.| >= 0.3 -> p = 4/6
    diff = paired_bootstrap_from_samples(0.5, 0.2, [0.2, 0.6, 1.0, 0.4, 0.8], [0.2, 0.2, 0.2, 0.2, 0.2])
    assert diff.estimate == pytest.approx(0.3)
    assert diff.p_value == pytest.approx(4 / 6)
    assert (diff.low, diff.high) == pytest.approx(tuple(np.quantile([0.0, 0.4, 0.8, 0.2, 0.6], [0.025, 0.975])))
    # identical runs: Δ̂ = 0, every draw counts, p = 1
    assert paired_bootstrap(brier, np.eye(3)[[0, 1, 2, 1]], np.eye(3)[[0, 1, 2, 1]], [0, 1, 1, 1]).p_value == 1.0


@pytest.mark.slow  # a simulation of 5 s or more
def test_false_positive_rate_same_distribution():
    """Must-show: pairs of exchangeable runs are declared different at p < 0.05 in 2-9% of pairs."""
    n_pairs = H0_PAIRS
    rates = _rejection_rates(T_SHARED, T_SHARED, n_pairs, 1)
    print(
        f"\nfalse-positive rate at alpha={ALPHA}, n={N_EXAMPLES}, R={N_RESAMPLES}, {n_pairs} pairs, "
        f"population ECE 0.090: ECE {rates['ece']:.3f}, accuracy {rates['accuracy']:.3f}"
    )
    assert 0.02 <= rates["ece"] <= 0.09
    assert 0.02 <= rates["accuracy"] <= 0.09


def test_false_positive_rate_near_calibrated_is_conservative():
    """Runs closer to calibrated: ECE's |gap| is non-smooth near a zero gap, the bootstrap overstates the
    spread of Δ̂ and the test is conservative (1-1.5% of pairs at n = 500). Still a valid test."""
    n_pairs = 400
    rates = _rejection_rates(T_NEAR_CALIBRATED, T_NEAR_CALIBRATED, n_pairs, 2)
    print(
        f"\nfalse-positive rate, near-calibrated runs (population ECE 0.041), n={N_EXAMPLES}, "
        f"R={N_RESAMPLES}, {n_pairs} pairs: ECE {rates['ece']:.3f}, accuracy {rates['accuracy']:.3f}"
    )
    assert rates["ece"] <= 0.09
    assert 0.02 <= rates["accuracy"] <= 0.09


def test_power_construction_has_population_ece_difference_005():
    rng = np.random.default_rng(123)
    z, labels = _examples(rng, 2_000_000)
    ece_a, ece_b = ece(_run(rng, z, T_SHARED), labels), ece(_run(rng, z, T_MISCALIBRATED), labels)
    print(f"\npopulation ECE (2e6 examples): A {ece_a:.4f}, B {ece_b:.4f}, difference {ece_b - ece_a:.4f}")
    assert ece_b - ece_a == pytest.approx(0.05, abs=0.005)


@pytest.mark.slow  # a simulation of 5 s or more
def test_power_against_ece_difference_005():
    n_pairs = 400
    power = _rejection_rates(T_SHARED, T_MISCALIBRATED, n_pairs, 3)["ece"]
    false_positive = _rejection_rates(T_SHARED, T_SHARED, H0_PAIRS, 1)["ece"]
    print(
        f"\npower against an ECE difference of 0.05 at alpha={ALPHA}, n={N_EXAMPLES}, R={N_RESAMPLES}, "
        f"{n_pairs} pairs: {power:.3f} (false-positive rate {false_positive:.3f})"
    )
    assert power > false_positive


# ---------------------------------------------------------------- across seeds


def test_t_interval_matches_scipy_and_single_value():
    values = [0.81, 0.84, 0.79, 0.86]
    mean, low, high = t_interval(values, level=0.9)
    expected = scipy_stats.t.interval(0.9, 3, loc=np.mean(values), scale=scipy_stats.sem(values))
    assert mean == pytest.approx(np.mean(values)) and (low, high) == pytest.approx(expected)
    mean, low, high = t_interval([0.5])
    assert mean == 0.5 and np.isnan(low) and np.isnan(high)


def test_t_interval_coverage():
    rng = np.random.default_rng(11)
    samples = rng.normal(1.3, 2.0, size=(2000, 3))
    covered = [low <= 1.3 <= high for _, low, high in map(t_interval, samples)]
    coverage = float(np.mean(covered))
    print(f"\nt interval coverage, 2000 draws of 3 normal values: {coverage:.4f}")
    assert coverage == pytest.approx(0.95, abs=0.025)


def test_group_difference_paired_when_seeds_match():
    a, b = np.array([0.80, 0.83, 0.78, 0.85]), np.array([0.79, 0.80, 0.77, 0.82])
    seeds = [0, 1, 2, 3]
    order = [2, 0, 3, 1]  # B's values arrive in another seed order; pairing must follow the seeds
    diff = group_difference(a, b[order], seeds_a=seeds, seeds_b=[seeds[i] for i in order])
    reference = scipy_stats.ttest_rel(a, b)
    assert diff.method == "paired t (seeds)" and diff.n == 4
    assert diff.estimate == pytest.approx(np.mean(a - b))
    assert diff.p_value == pytest.approx(reference.pvalue)
    assert (diff.low, diff.high) == pytest.approx(tuple(reference.confidence_interval(0.95)))


@pytest.mark.parametrize(
    "seeds_a, seeds_b",
    [(None, None), ([0, 1, 2, 3], None), ([0, 1, 2, 3], [0, 1, 2, 4]), ([0, 1, 2, 3], [0, 1, 2])],
)
def test_group_difference_welch_otherwise(seeds_a, seeds_b):
    a = np.array([0.80, 0.83, 0.78, 0.85])
    b = np.array([0.79, 0.70, 0.77, 0.82])[: len(seeds_b) if seeds_b is not None else 4]
    diff = group_difference(a, b, seeds_a=seeds_a, seeds_b=seeds_b)
    reference = scipy_stats.ttest_ind(a, b, equal_var=False)
    assert diff.method == "Welch t" and diff.n == a.size + b.size
    assert diff.estimate == pytest.approx(a.mean() - b.mean())
    assert diff.p_value == pytest.approx(reference.pvalue)
    assert (diff.low, diff.high) == pytest.approx(tuple(reference.confidence_interval(0.95)))


def test_group_difference_too_few_values():
    diff = group_difference([0.8], [0.7, 0.75, 0.72])
    assert diff.estimate == pytest.approx(0.8 - np.mean([0.7, 0.75, 0.72]))
    assert np.isnan(diff.p_value) and np.isnan(diff.low) and np.isnan(diff.high)
    assert "fewer than 2" in diff.method
    assert np.isnan(group_difference([0.8], [0.7], seeds_a=[0], seeds_b=[0]).p_value)


def test_group_difference_interval_agrees_with_p_value():
    rng = np.random.default_rng(5)
    for trial in range(300):
        a, b = rng.normal(0.0, 1.0, 4), rng.normal(1.0, 1.0, 4)
        seeds = [0, 1, 2, 3] if trial % 2 else None
        diff = group_difference(a, b, seeds_a=seeds, seeds_b=seeds)
        assert (not diff.low <= 0.0 <= diff.high) == (diff.p_value < 0.05), diff


# ---------------------------------------------------------------- Holm


def test_holm_by_hand_and_nan_passthrough():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4·0.005, 3·0.01, 2·0.03, max(1·0.04, 0.06)
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    adjusted = holm([0.01, np.nan, 0.04, 0.03, 0.005])
    assert np.isnan(adjusted[1])
    np.testing.assert_allclose(adjusted[[0, 2, 3, 4]], [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm([0.5, 0.6]), [1.0, 1.0])  # capped at 1
    assert holm([]).shape == (0,) and np.isnan(holm([np.nan])).all()


@pytest.mark.slow
def test_holm_equals_statsmodels_on_random_families_with_ties():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(0)
    for size in (1, 2, 7, 55):
        for _ in range(20):
            p = np.round(rng.random(size) ** 3, 3)  # rounded: ties, and values near 0
            np.testing.assert_allclose(holm(p), multipletests(p, method="holm")[1], atol=1e-15)


# ---------------------------------------------------------------- errors


def test_clear_value_errors():
    probs = np.full((4, 2), 0.5)
    with pytest.raises(ValueError, match="labels must have shape"):
        paired_bootstrap(accuracy, probs, probs, [0, 1, 0])
    with pytest.raises(ValueError, match="same examples"):
        paired_bootstrap(accuracy, probs, probs[:3], [0, 1, 0, 1])
    with pytest.raises(ValueError, match="n_resamples"):
        paired_bootstrap(accuracy, probs, probs, [0, 1, 0, 1], n_resamples=0)
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap(accuracy, probs, probs, [0, 1, 0, 1], level=95)
    with pytest.raises(ValueError, match="equal length"):
        paired_bootstrap_from_samples(0.1, 0.2, [0.1, 0.2], [0.1])
    with pytest.raises(ValueError, match="distinct seed"):
        group_difference([0.1, 0.2], [0.1, 0.2], seeds_a=[0, 0], seeds_b=[0, 1])
    with pytest.raises(ValueError, match="non-empty"):
        t_interval([])
    with pytest.raises(ValueError, match="NaN"):
        group_difference([0.1, np.nan], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([0.2, 1.5])


def test_difference_is_frozen():
    diff = Difference(0.1, 0.0, 0.2, 0.03, "paired bootstrap", 500)
    with pytest.raises(FrozenInstanceError):
        diff.estimate = 0.0
