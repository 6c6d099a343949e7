"""Two groups are paired by seed only where their seed sets are equal (issue 33), not where their
seed counts are: {0, 1, 2} against {3, 4, 5} are independent draws of seeds.

Both groups here have the same three point values (0.70, 0.80, 0.90) and the same draws, so any
difference between them comes from which seeds a resample picks. Paired (the same seed rows K for
both) every draw of A − B is 0; independent, the two resampled means differ by up to ±0.2, and the
95% interval of their difference is about ±2·√(2·σ²/3) ≈ ±0.13 (σ² = 0.02/3, the values' variance)."""

import numpy as np
import pytest

from peftviz.calibration.stats import SeedDraws, improvement, two_level_difference

VALUES = np.array([0.70, 0.80, 0.90])


def group(seeds: tuple[int, ...]) -> SeedDraws:
    shift = np.random.default_rng(0).normal(0, 0.01, 400)  # what example row r does to every run
    return SeedDraws(seeds=seeds, values=VALUES, draws=VALUES[:, None] + shift)


def test_groups_with_the_same_seeds_are_paired_and_their_difference_is_exactly_zero():
    d = two_level_difference(group((0, 1, 2)), group((0, 1, 2)))
    assert d.method == "two-level bootstrap (seeds paired)"
    assert (d.estimate, d.low, d.high) == (0.0, 0.0, 0.0)
    assert improvement(group((0, 1, 2)), group((0, 1, 2)), lower_is_better=True) == (0.5, 0.5, 0.5)


@pytest.mark.parametrize("seeds_b", [(3, 4, 5), (1, 2, 3)])
def test_groups_with_as_many_but_other_seeds_are_resampled_independently(seeds_b):
    d = two_level_difference(group((0, 1, 2)), group(seeds_b))
    assert d.method == "two-level bootstrap (seeds independent)"
    assert d.estimate == 0.0 and d.high == pytest.approx(-d.low)
    assert 0.1 <= d.high <= 0.2, d  # the seeds' spread, not the 0 that pairing unequal seeds would give
    point, low, high = improvement(group((0, 1, 2)), group(seeds_b), lower_is_better=True)
    assert point == 0.5 and low <= 0.1 and high >= 0.9
