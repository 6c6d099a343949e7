"""peftviz.calibration.stats' seeds × examples bootstrap: coverage on simulated data with a known truth, its
reduction to the paired bootstrap for single runs, its pairing, and the probability of improvement
against rliable's own function.

The simulation. A test split of N examples is drawn once per simulated comparison and read by every
seed (as in peftviz, where every seed of a comparison shares `data_seed`). Example i has a latent
logit z_i ~ N(1, 1.5²) and a uniform v_i, both shared by the seeds. Seed s's model has its own
calibration offset δ_s ~ N(δ₀, τ²) (how overconfident this training run came out) and gives example
i the top-label confidence c_is = ½ + ½ sigmoid(z_i + η ε_is), ε_is ~ N(0, 1) its own noise on the
example; it is right when v_i < c_is − δ_s. So P(right | c) = c − δ_s at every confidence: seed s's
population ECE (any bins) is exactly |δ_s|, and the true mean ECE over seeds is E|δ| =
τ √(2/π) exp(−δ₀²/2τ²) + δ₀ (1 − 2Φ(−δ₀/τ)). The shared v_i make the seeds right and wrong on the
same examples, as real runs are, so the test set's noise is common to all seeds: the spread over
seeds does not show it, and the t-interval over seeds misses it.
"""

import numpy as np
import pytest
from scipy import stats as scipy_stats
from scipy.special import expit

from peftviz.calibration.binning import resampled_eces
from peftviz.calibration.stats import (
    SeedDraws,
    improvement,
    paired_bootstrap_from_samples,
    percentile_interval,
    probability_of_improvement,
    resample_indices,
    seed_rows,
    t_interval,
    two_level_difference,
    two_level_interval,
)

N_EXAMPLES = 1000
N_RESAMPLES = 400
N_DRAWS = 400  # simulated comparisons per setting: coverage's Monte Carlo s.e. is ~1.1% at 95%
OFFSET, OFFSET_SD, NOISE = 0.08, 0.02, 0.3  # δ₀, τ, η


def true_mean_ece(offset: float = OFFSET, sd: float = OFFSET_SD) -> float:
    """E|δ| for δ ~ N(offset, sd²): the folded normal mean."""
    return sd * np.sqrt(2 / np.pi) * np.exp(-(offset**2) / (2 * sd**2)) + offset * (
        1 - 2 * scipy_stats.norm.cdf(-offset / sd)
    )


def simulated_seeds(rng, n_seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """(confidence (S, N), correct (S, N)) of S seeds on one shared test split."""
    z, v = rng.normal(1.0, 1.5, N_EXAMPLES), rng.random(N_EXAMPLES)  # (N,) shared by the seeds
    offsets = rng.normal(OFFSET, OFFSET_SD, (n_seeds, 1))  # (S, 1) each seed's own calibration
    confidence = 0.5 + 0.5 * expit(z + NOISE * rng.normal(size=(n_seeds, N_EXAMPLES)))  # (S, N)
    return confidence, v < confidence - offsets


def one_comparison(rng, n_seeds: int) -> dict[str, tuple[float, float]]:
    """Both intervals of the mean ECE (10 equal-width bins) over S simulated seeds."""
    confidence, correct = simulated_seeds(rng, n_seeds)
    rows = resample_indices(N_EXAMPLES, N_RESAMPLES, int(rng.integers(2**31)))  # one set of rows for every seed
    identity = np.arange(N_EXAMPLES)[None, :]
    values = np.array([resampled_eces(c, h, identity, 10, "width")[0] for c, h in zip(confidence, correct)])
    draws = np.stack([resampled_eces(c, h, rows, 10, "width") for c, h in zip(confidence, correct)])  # (S, R)
    unit = SeedDraws(tuple(range(n_seeds)), values, draws)
    return {
        "two-level bootstrap": two_level_interval(unit, seed=int(rng.integers(2**31)))[1:],
        "t over seeds": t_interval(values)[1:],
    }


def coverage(n_seeds: int, seed: int) -> dict[str, tuple[float, bool]]:
    """Per interval: the share of N_DRAWS comparisons whose interval holds the true mean ECE, and
    whether every one of its intervals stayed inside [0, 1]."""
    rng, truth = np.random.default_rng(seed), true_mean_ece()
    found = [one_comparison(rng, n_seeds) for _ in range(N_DRAWS)]
    return {
        name: (
            float(np.mean([f[name][0] <= truth <= f[name][1] for f in found])),
            all(0 <= f[name][0] and f[name][1] <= 1 for f in found),
        )
        for name in found[0]
    }


@pytest.fixture(scope="module")
def coverages():
    found = {n_seeds: coverage(n_seeds, seed=n_seeds) for n_seeds in (3, 5)}
    print(
        f"\ncoverage of the true mean ECE {true_mean_ece():.4f} over {N_DRAWS} simulated comparisons "
        f"(N = {N_EXAMPLES} shared test examples, {N_RESAMPLES} resamples, nominal 95%):"
    )
    for n_seeds, by_name in found.items():
        print(f"  {n_seeds} seeds: " + "; ".join(f"{name} {share:.1%}" for name, (share, _) in by_name.items()))
    return found


def test_the_simulated_seeds_are_calibrated_as_constructed():
    """The truth the coverage rests on: P(right | c) = c − δ_s, so the binned ECE nears |δ_s| at large N."""
    confidence, correct = simulated_seeds(np.random.default_rng(0), 1)
    big_rng = np.random.default_rng(1)
    z, v = big_rng.normal(1.0, 1.5, 400_000), big_rng.random(400_000)
    c = 0.5 + 0.5 * expit(z + NOISE * big_rng.normal(size=z.shape))
    ece = resampled_eces(c, v < c - 0.08, np.arange(c.size)[None, :], 10, "width")[0]
    assert ece == pytest.approx(0.08, abs=0.003)
    assert confidence.shape == correct.shape == (1, N_EXAMPLES)
    assert true_mean_ece(0.08, 1e-9) == pytest.approx(0.08) and true_mean_ece(0.0, 0.02) == pytest.approx(
        0.016, abs=1e-3
    )


@pytest.mark.slow
def test_two_level_interval_covers_the_true_mean_ece_at_five_seeds(coverages):
    share, inside = coverages[5]["two-level bootstrap"]
    assert 0.92 <= share <= 0.98
    assert inside  # every interval of an ECE stays in [0, 1]


def test_t_interval_misses_the_shared_test_set_noise(coverages):
    """Printed beside the two-level interval's: the t-interval over seeds undercovers, since the
    seeds share their test examples, and it can leave [0, 1]."""
    assert coverages[5]["t over seeds"][0] < coverages[5]["two-level bootstrap"][0]


def test_two_level_interval_at_three_seeds_is_printed_and_stays_in_range(coverages):
    share, inside = coverages[3]["two-level bootstrap"]
    assert inside and 0.85 <= share <= 0.99


# ---------------------------------------------------------------- the construction by hand


def test_group_draws_average_the_resampled_seeds_at_their_own_example_row():
    draws = np.array([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]])  # (S=2, R=3)
    unit = SeedDraws((7, 3), np.array([0.5, 5.0]), draws)
    rows = np.array([[0, 0], [0, 1], [1, 1]])  # (R, S)
    assert unit.group_draws(rows).tolist() == [1.0, 11.0, 30.0]
    assert unit.in_seed_order().seeds == (3, 7) and unit.in_seed_order().draws[0].tolist() == [10.0, 20.0, 30.0]


def test_one_seed_is_the_runs_own_bootstrap():
    """A group of one seed: the interval is the percentile interval of its draws, and two such units
    compare by the paired bootstrap over examples, exactly as two runs did before groups existed."""
    rng = np.random.default_rng(0)
    a, b = rng.random(500), rng.random(500) * 0.9
    run_a, run_b = SeedDraws((0,), np.array([0.4]), a[None]), SeedDraws((1,), np.array([0.35]), b[None])
    assert two_level_interval(run_a)[1:] == percentile_interval(a)
    assert two_level_difference(run_a, run_b, n_examples=80) == paired_bootstrap_from_samples(
        0.4, 0.35, a, b, n_examples=80
    )


def test_matching_seeds_share_their_seed_rows_and_others_do_not():
    """Paired by seed where the seed sets match: a constant shift between the groups then has no spread."""
    rng = np.random.default_rng(1)
    draws = rng.random((4, 300))
    a = SeedDraws((0, 1, 2, 3), draws.mean(axis=1), draws)
    shifted = SeedDraws((3, 2, 1, 0), (draws.mean(axis=1) - 0.1)[::-1], (draws - 0.1)[::-1])  # same seeds, reversed
    paired = two_level_difference(a, shifted)
    assert (
        paired.estimate == pytest.approx(0.1) and paired.low == pytest.approx(0.1) and paired.high == pytest.approx(0.1)
    )
    assert paired.method == "two-level bootstrap (seeds paired)"
    other = SeedDraws((4, 5, 6, 7), shifted.values, shifted.draws)
    independent = two_level_difference(a, other)
    assert independent.method == "two-level bootstrap (seeds independent)" and independent.high - independent.low > 0.05


def test_a_repeated_seed_is_one_more_member_and_pairs_with_its_twin():
    """`group_runs` keeps a comparison trained twice: seeds (0, 0, 1) are three members."""
    draws = np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]])
    unit = SeedDraws((0, 1, 0), draws.mean(axis=1), draws)
    assert unit.in_seed_order().seeds == (0, 0, 1) and two_level_interval(unit)[0] == pytest.approx(0.35)
    assert two_level_difference(unit, unit).method == "two-level bootstrap (seeds paired)"
    with pytest.raises(ValueError, match="one value and one row of draws per seed"):
        SeedDraws((0, 1), np.zeros(3), np.zeros((3, 2)))


def test_seed_rows_repeat_and_streams_differ():
    assert np.array_equal(seed_rows(5, 100, seed=3), seed_rows(5, 100, seed=3))
    assert not np.array_equal(seed_rows(5, 100, seed=3), seed_rows(5, 100, seed=3, stream=1))
    assert seed_rows(5, 100).shape == (100, 5) and seed_rows(5, 100).max() == 4


# ---------------------------------------------------------------- probability of improvement


def test_probability_of_improvement_equals_rliables():
    from rliable.metrics import probability_of_improvement as rliable_poi

    rng = np.random.default_rng(2)
    for n_x, n_y in [(3, 3), (5, 2), (1, 4)]:
        for _ in range(20):
            x, y = rng.integers(0, 4, n_x).astype(float), rng.integers(0, 4, n_y).astype(float)  # ties included
            assert probability_of_improvement(x, y) == pytest.approx(rliable_poi(x[:, None], y[:, None]))


def test_probability_of_improvement_by_hand_and_batched():
    assert probability_of_improvement([2.0, 3.0], [1.0, 3.0]) == 0.625  # 2>1, 2<3, 3>1, 3=3: (1 + 0 + 1 + ½) / 4
    batch = probability_of_improvement(np.array([[2.0, 3.0], [0.0, 0.0]]), np.array([[1.0, 3.0], [1.0, 1.0]]))
    assert batch.tolist() == [0.625, 0.0]


def test_improvement_follows_the_better_direction():
    """ECE: lower is better, so the group with the smaller ECE has P(better) near 1, and its interval
    comes from the same two-level draws."""
    rng = np.random.default_rng(3)
    low_ece = SeedDraws((0, 1, 2), np.array([0.02, 0.03, 0.025]), 0.025 + 0.003 * rng.normal(size=(3, 200)))
    high_ece = SeedDraws((0, 1, 2), np.array([0.08, 0.07, 0.09]), 0.08 + 0.003 * rng.normal(size=(3, 200)))
    assert improvement(low_ece, high_ece, lower_is_better=True) == (1.0, 1.0, 1.0)
    assert improvement(low_ece, high_ece, lower_is_better=False) == (0.0, 0.0, 0.0)
    point, low, high = improvement(high_ece, high_ece, lower_is_better=True)
    assert point == pytest.approx(4.5 / 9) and 0.0 <= low <= point <= high <= 1.0
