"""Resampling and significance: the statistics behind every interval and every "is it real?".

Resampling examples (the nonparametric bootstrap, Efron & Tibshirani 1993):

* `resample_indices(N, R, seed)`: an (R, N) array, row r the indices of the r-th resample drawn with
  replacement. Every estimator of one set of predictions, and both runs of a paired comparison, use
  the same rows, so their bootstrap distributions are paired by construction.
* `percentile_interval(samples, level)`: the (1 - level)/2 and (1 + level)/2 quantiles.
* `interval_around(value, samples, level)`: that interval, widened to hold the value on all data
  where the draws lie beyond it: what every estimate's interval is (a calibration error near 0).

Comparing (each returns a `Difference`: estimate A - B, interval, two-sided p-value, method, n):

* `paired_bootstrap(metric, probs_a, probs_b, labels)`: two runs on the same examples, resampled
  jointly; shifted-bootstrap p-value. `paired_bootstrap_from_samples` does the same from draws already
  taken on shared resample rows.
* `group_difference(values_a, values_b, seeds_a, seeds_b)`: a metric over seeds; paired t-test when
  the seeds match, Welch's t-test otherwise. `t_interval(values)`: the t interval of one group's mean.
* `holm(p_values)`: Holm's step-down adjustment for a family of comparisons.

Seeds × examples (the two-level bootstrap of a group, `SeedDraws`):

Every run of a comparison is scored on the same test examples (one split, `data_seed`), and its
metric is bootstrapped on the same example rows (`resample_indices` with one seed), so run s gives
a point value v_s and draws D[s, r] = metric(run s on example row r). The seeds and the examples
are *crossed*, not nested: the same documents are read by every seed. A group's mean over seeds
m = (1/S) Σ_s v_s has two sources of error, the seeds that happened to be trained and the documents
that happened to be in the test split (Bouthillier et al., MLSys 2021). Draw r resamples both at
once (Owen 2007, "the pigeonhole bootstrap" of a crossed design):

    m*_r = (1/S) Σ_k D[K_rk, r],   K_rk ~ Uniform{1..S} with replacement (`seed_rows`)

and the interval is the percentile interval of m* (holding m: `interval_around`). Every draw is a mean of values of the metric, so
the interval stays inside the metric's range (ECE in [0, 1]; debiased ECE, whose values may be
negative, excepted). Two groups' difference uses the same example rows, and the same seed rows K
where their seed sets match (paired by seed), independent K otherwise (`two_level_difference`);
the p-value is the shifted bootstrap's, as for two runs. A group of one seed is a run: K is all
zeros and m* is that run's example bootstrap, so one code path serves runs and groups.
Owen shows the pigeonhole bootstrap is mildly conservative (it counts the seed × example
interaction twice); with few seeds the seed part is too narrow (a bootstrap of S values has
variance (S-1)/S of the sample's). tests/calibration/test_stats.py measures the coverage on simulated data
with a known truth; docs/statistics.md gives the numbers.

Probability of improvement (Agarwal et al., NeurIPS 2021, `rliable`): P(A better than B) =
(1/(S_a S_b)) Σ_i Σ_j ( 1[a_i ≻ b_j] + ½ 1[a_i = b_j] ), the chance that a run of A beats a run of
B, ≻ the metric's better direction (`probability_of_improvement`); its interval is the percentile
interval over the same two-level draws. rliable defines it so but is not called: its interval
resamples runs only (not the test examples), and its statistic runs scipy's Mann-Whitney once per
draw, where here all draws are one array operation; tests check equality with rliable's function.

numpy only at import time (scipy is imported inside functions): `import peftviz.calibration.stats`
stays light.

Example: a 95% bootstrap interval of a mean, by hand from the two building blocks.

>>> values = np.arange(10.0)  # mean 4.5
>>> rows = resample_indices(10, 1000, seed=0)  # (1000, 10)
>>> low, high = percentile_interval(values[rows].mean(axis=1))
>>> round(low, 2), round(high, 2)
(2.7, 6.4)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from peftviz.errors import ConfigError

LEVEL = 0.95  # every interval in peftviz is a 95% interval unless the caller says otherwise


def check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ConfigError(f"level must lie strictly between 0 and 1, got {level}")


def check_resampling(n_resamples: int, level: float) -> None:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ConfigError(f"n_resamples must be an int >= 1, got {n_resamples!r}")
    if not 0.0 < level < 1.0:
        raise ConfigError(f"level must lie strictly between 0 and 1, got {level}")


def resample_indices(n_examples: int, n_resamples: int, seed: int = 0) -> np.ndarray:
    """(n_resamples, n_examples) int64 indices, each row a resample with replacement; seeded.

    >>> resample_indices(5, 3, seed=0)
    array([[4, 3, 2, 1, 1],
           [0, 0, 0, 0, 4],
           [3, 4, 2, 3, 4]])
    >>> bool(np.array_equal(resample_indices(5, 3, seed=0), resample_indices(5, 3, seed=0)))  # same seed, same rows
    True
    """
    check_resampling(n_resamples, LEVEL)
    if n_examples < 1:
        raise ConfigError(f"cannot resample {n_examples} examples")
    return np.random.default_rng(seed).integers(0, n_examples, size=(n_resamples, n_examples))


def percentile_interval(samples, level: float = LEVEL) -> tuple[float, float]:
    """The central `level` interval of a bootstrap distribution (NaN draws are ignored).

    >>> [round(x, 4) for x in percentile_interval(np.arange(101), level=0.9)]  # the 5th and 95th percentiles
    [5.0, 95.0]
    >>> percentile_interval([1.0, np.nan, 3.0], level=0.5)
    (1.5, 2.5)
    """
    samples = np.asarray(samples, dtype=np.float64)
    samples = samples[np.isfinite(samples)]
    if samples.size == 0:
        return float("nan"), float("nan")
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(samples, [tail, 1.0 - tail])
    return float(low), float(high)


def interval_around(value: float, samples, level: float = LEVEL) -> tuple[float, float]:
    """`percentile_interval` of the draws, widened to hold `value`, the estimate on all data, where more
    than (1 - level)/2 of the draws lie on one side of it.

    That happens to a calibration error near 0. ECE is an absolute gap, and a resample adds noise that
    the absolute value folds upward: with every confidence in one narrow bin, the smooth ECE is
    |mean confidence - accuracy|, and resamples of an observed gap of 0.0025 gave gaps of 0.0024 to
    0.128, the 2.5th percentile 0.0026. The bootstrap fails at a parameter's boundary (Andrews,
    Econometrica 2000): the draws say how large the error may be, not that it is larger than
    measured. Widening only ever adds, so coverage cannot fall; the value and its interval come from
    the same predictions, and every interval holds its value and stays in the metric's range.

    >>> [round(x, 4) for x in interval_around(0.0025, [0.0026, 0.01, 0.05, 0.128], level=0.5)]
    [0.0025, 0.0695]
    >>> interval_around(2.0, [1.0, 2.0, 3.0], level=0.5)  # inside: the percentile interval
    (1.5, 2.5)
    """
    low, high = percentile_interval(samples, level)
    if np.isnan(low) or not np.isfinite(value):
        return low, high
    return min(low, float(value)), max(high, float(value))


# ---------------------------------------------------------------- comparing two runs or two groups


@dataclass(frozen=True)
class Difference:
    """metric(A) - metric(B) with its `level` interval and two-sided p-value.

    `method` names the test ("paired bootstrap", "paired t (seeds)", "Welch t", or why there is none);
    `n` is the number of examples (bootstrap; 0 when the caller did not say), of paired seeds (paired t)
    or of values in both groups together (Welch t).

    >>> Difference(estimate=0.25, low=0.02, high=0.5, p_value=0.8, method="paired bootstrap", n=4)
    Difference(estimate=0.25, low=0.02, high=0.5, p_value=0.8, method='paired bootstrap', n=4)
    """

    estimate: float
    low: float
    high: float
    p_value: float
    method: str
    n: int


def paired_bootstrap(
    metric, probs_a, probs_b, labels, n_resamples: int = 1000, level: float = LEVEL, seed: int = 0
) -> Difference:
    """Paired bootstrap of Δ = metric(A) - metric(B) for two runs scored on the same examples.

    Row r of `resample_indices(N, R, seed)` picks the same examples for both runs:
    Δ*_r = metric(A[idx_r], y[idx_r]) - metric(B[idx_r], y[idx_r]). Resampling the examples jointly keeps
    the per-example correlation between A and B, which is what makes the paired test far more sensitive
    than comparing two separate intervals. Interval and p-value: `paired_bootstrap_from_samples`.
    `metric(probs, labels) -> float`, e.g. `peftviz.calibration.metrics.ece`.

    Example: an overconfident model A (``true`` sharpened by a temperature of 0.5) against B = ``true``,
    the probabilities the labels were drawn from. A's ECE is higher; temperature keeps the argmax, so
    the accuracies are equal on every resample:

    >>> from peftviz.calibration.metrics import accuracy, apply_temperature, ece
    >>> rng = np.random.default_rng(0)
    >>> true = rng.dirichlet([1, 1, 1], size=200)
    >>> labels = (true.cumsum(axis=1) > rng.random((200, 1))).argmax(axis=1)
    >>> overconfident = apply_temperature(true, 0.5)
    >>> d = paired_bootstrap(ece, overconfident, true, labels, n_resamples=200)
    >>> print(f"{d.estimate:.4f} [{d.low:.4f}, {d.high:.4f}] p = {d.p_value:.4f} ({d.method}, n = {d.n})")
    0.0972 [0.0135, 0.1293] p = 0.0149 (paired bootstrap, n = 200)
    >>> d = paired_bootstrap(accuracy, overconfident, true, labels, n_resamples=200)
    >>> d.estimate, d.low, d.high, d.p_value
    (0.0, 0.0, 0.0, 1.0)
    """
    probs_a, probs_b, labels = np.asarray(probs_a), np.asarray(probs_b), np.asarray(labels)
    if probs_a.ndim == 0 or probs_a.shape != probs_b.shape:
        raise ConfigError(f"runs must score the same examples: probs shapes {probs_a.shape} and {probs_b.shape} differ")
    if labels.shape != (probs_a.shape[0],):
        raise ConfigError(f"labels must have shape ({probs_a.shape[0]},) to match both runs, got {labels.shape}")
    check_resampling(n_resamples, level)
    indices = resample_indices(labels.shape[0], n_resamples, seed)
    samples_a = np.array([metric(probs_a[idx], labels[idx]) for idx in indices], dtype=np.float64)
    samples_b = np.array([metric(probs_b[idx], labels[idx]) for idx in indices], dtype=np.float64)
    return paired_bootstrap_from_samples(
        metric(probs_a, labels), metric(probs_b, labels), samples_a, samples_b, level, n_examples=labels.shape[0]
    )


def paired_bootstrap_from_samples(
    estimate_a: float, estimate_b: float, samples_a, samples_b, level: float = LEVEL, n_examples: int = 0
) -> Difference:
    """Interval and p-value of Δ = A - B from bootstrap draws of both, taken on the same resample rows.

    Δ̂ = estimate_a - estimate_b and Δ*_r = samples_a[r] - samples_b[r] (pairs with a NaN draw are dropped).
    Interval: the percentile interval of Δ*. Two-sided p-value, shifted (null-centred) bootstrap:

        p = (1 + #{r : |Δ*_r - Δ̂| >= |Δ̂|}) / (1 + R)

    Why: the bootstrap draws Δ* - Δ̂ stand in for the sampling error Δ̂ - Δ (the bootstrap principle).
    Under H0: Δ = 0 the observed Δ̂ *is* that error, so its null distribution is approximated by the draws
    shifted to mean zero, Δ* - Δ̂ (Efron & Tibshirani 1993, §16.4: shift the data, or equivalently the
    statistic, so that the null holds). p is the share of null draws at least as far from 0 as Δ̂. It is the
    two-sided form of the paired bootstrap test in NLP (Koehn 2004; Berg-Kirkpatrick et al. 2012 count
    Δ*_r > 2Δ̂, i.e. Δ*_r - Δ̂ > Δ̂). The +1 in numerator and denominator counts the observed statistic as
    one of the draws, so a finite R never reports p = 0 (Davison & Hinkley 1997, §4.2; Phipson & Smyth
    2010). Shifting by Δ̂ rather than by mean(Δ*) assumes the bootstrap bias of Δ is small; for two biased
    estimators such as two ECEs on the same examples the biases largely cancel. The percentile interval
    and p < 1 - level can disagree near the boundary (different tails).

    Known limit (tests/calibration/test_stats.py): ECE sums |gap_b|, which is not smooth where a bin's gap is near 0.
    There the bootstrap overstates the spread of Δ̂ and the test is conservative: with n = 500 and runs
    near calibration about 1-1.5% of same-distribution pairs reach p < 0.05, against ~3% for clearly
    overconfident runs and ~5% for accuracy, or at n = 5000.

    Example: Δ̂ = 0.25 and Δ* = 0.25, 0.5, 0, 0.5; three of the four shifted draws lie 0.25 or more
    from 0, so p = (1 + 3) / (1 + 4):

    >>> d = paired_bootstrap_from_samples(0.75, 0.5, [0.75, 1.0, 0.5, 0.75], [0.5, 0.5, 0.5, 0.25])
    >>> d.estimate, d.p_value, d.method
    (0.25, 0.8, 'paired bootstrap')
    >>> round(d.low, 4), round(d.high, 4)
    (0.0188, 0.5)
    """
    samples_a, samples_b = np.asarray(samples_a, dtype=np.float64), np.asarray(samples_b, dtype=np.float64)
    if samples_a.ndim != 1 or samples_a.shape != samples_b.shape or samples_a.size == 0:
        raise ConfigError(
            f"need two 1-D arrays of draws of equal length, got shapes {samples_a.shape}, {samples_b.shape}"
        )
    check_resampling(samples_a.size, level)
    estimate = float(estimate_a) - float(estimate_b)
    deltas = samples_a - samples_b
    deltas = deltas[np.isfinite(deltas)]
    low, high = percentile_interval(deltas, level)
    if deltas.size == 0 or not np.isfinite(estimate):
        p_value = float("nan")
    else:
        p_value = float((1 + np.count_nonzero(np.abs(deltas - estimate) >= abs(estimate))) / (1 + deltas.size))
    return Difference(estimate, low, high, p_value, "paired bootstrap", int(n_examples))


# ---------------------------------------------------------------- across seeds


def _check_values(values, name: str) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ConfigError(f"{name} must be a non-empty 1-D sequence, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ConfigError(f"{name} contains NaN or inf")
    return values


def t_interval(values, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): Student t interval of the mean of n values (e.g. one metric over seeds).

        mean ± t_{(1+level)/2, n-1} · s / √n,  s the sample standard deviation (ddof = 1).

    With one value there is no spread to estimate: (v, nan, nan).

    >>> mean, low, high = t_interval([1.0, 2.0, 3.0])  # s = 1, t_{0.975, 2} = 4.3027: 2 ± 4.3027 / √3
    >>> mean, round(low, 4), round(high, 4)
    (2.0, -0.4841, 4.4841)
    >>> t_interval([0.8])
    (0.8, nan, nan)
    """
    values = _check_values(values, "values")
    check_level(level)
    mean = float(values.mean())
    if values.size < 2:
        return mean, float("nan"), float("nan")
    half = float(t_half_width(values, level))
    return mean, mean - half, mean + half


def t_half_width(values: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """t_{(1+level)/2, n-1} · s / √n over axis 0 of (n, ...) values with n >= 2: one half-width per column.

    >>> np.round(t_half_width(np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])), 4)
    array([ 2.4841, 24.8414])
    """
    from scipy import stats as scipy_stats

    n = values.shape[0]
    return scipy_stats.t.ppf((1.0 + level) / 2.0, n - 1) * values.std(axis=0, ddof=1) / np.sqrt(n)


def _by_seed(values: np.ndarray, seeds, name: str) -> dict:
    seeds = list(np.asarray(seeds).tolist())
    if len(seeds) != values.size or len(set(seeds)) != len(seeds):
        raise ConfigError(f"{name}: need one distinct seed per value, got seeds {seeds} for {values.size} values")
    return dict(zip(seeds, values.tolist()))


def group_difference(values_a, values_b, seeds_a=None, seeds_b=None, level: float = LEVEL) -> Difference:
    """Δ = mean(A) - mean(B) over seeds, with a t-test and its `level` t-interval.

    * Paired t ("paired t (seeds)"), when both groups give seeds and the seed sets match (>= 2 seeds):
      d_s = a_s - b_s per seed, Δ = mean(d), interval mean(d) ± t_{(1+level)/2, n-1} · s_d / √n, p from
      `scipy.stats.ttest_rel` on the values ordered by seed. Pairing removes the seed-to-seed variation
      the two groups share (same data order, same initialisation seed).
    * Welch t ("Welch t") otherwise: Δ ± t_{(1+level)/2, ν} · se, se² = s_a²/n_a + s_b²/n_b,
      ν = se⁴ / ((s_a²/n_a)²/(n_a-1) + (s_b²/n_b)²/(n_b-1)) (Welch-Satterthwaite), p from
      `scipy.stats.ttest_ind(equal_var=False)`.
    * Fewer than 2 values in a group: the estimate only, with NaN interval and p-value.
    0 lies outside the interval exactly when p < 1 - level (same t statistic, same degrees of freedom).

    Three seeds of A and of B; every seed gains 0.01 or 0.02, so the paired test sees it, Welch's does not:

    >>> a, b = [0.80, 0.82, 0.81], [0.78, 0.80, 0.80]
    >>> d = group_difference(a, b, seeds_a=[1, 2, 3], seeds_b=[1, 2, 3])
    >>> d.method, d.n, round(d.estimate, 4), round(d.low, 4), round(d.high, 4), round(d.p_value, 4)
    ('paired t (seeds)', 3, 0.0167, 0.0023, 0.031, 0.0377)
    >>> d = group_difference(a, b)  # no seeds: Welch t
    >>> d.method, d.n, round(d.low, 4), round(d.high, 4), round(d.p_value, 4)
    ('Welch t', 6, -0.008, 0.0414, 0.1332)
    >>> group_difference([0.8], b).method
    'no test: fewer than 2 values in a group (1 and 3)'
    """
    from scipy import stats as scipy_stats

    a, b = _check_values(values_a, "values_a"), _check_values(values_b, "values_b")
    check_level(level)
    by_seed_a = _by_seed(a, seeds_a, "seeds_a") if seeds_a is not None else None
    by_seed_b = _by_seed(b, seeds_b, "seeds_b") if seeds_b is not None else None
    estimate = float(a.mean() - b.mean())
    if by_seed_a is not None and by_seed_b is not None and by_seed_a.keys() == by_seed_b.keys() and a.size >= 2:
        order = sorted(by_seed_a)
        a, b = np.array([by_seed_a[s] for s in order]), np.array([by_seed_b[s] for s in order])
        _, low, high = t_interval(a - b, level)
        p_value = float(scipy_stats.ttest_rel(a, b).pvalue)
        return Difference(estimate, low, high, p_value, "paired t (seeds)", int(a.size))
    if min(a.size, b.size) < 2:
        why = f"no test: fewer than 2 values in a group ({a.size} and {b.size})"
        return Difference(estimate, float("nan"), float("nan"), float("nan"), why, int(a.size + b.size))
    result = scipy_stats.ttest_ind(a, b, equal_var=False)
    se = np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    half = scipy_stats.t.ppf((1.0 + level) / 2.0, result.df) * se
    low, high = float(estimate - half), float(estimate + half)
    return Difference(estimate, low, high, float(result.pvalue), "Welch t", int(a.size + b.size))


# ---------------------------------------------------------------- many comparisons


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjustment (Holm 1979), controlling the family-wise error rate.

    With the m finite p-values sorted p_(1) <= ... <= p_(m):
        p̃_(i) = min(1, max_{j <= i} (m - j + 1) p_(j)).
    NaNs (comparisons with no test) are passed through and do not count towards m.
    Own three lines, tested against statsmodels' ``multipletests(method="holm")``: that function
    runs ``gc.collect()`` on every Holm call (0.1 s and more with a large heap; a comparison makes
    one call per metric) and its module takes seconds to import.

    >>> np.round(holm([0.01, 0.04, 0.03, np.nan]), 4)  # 3 x 0.01, max(3 x 0.01, 2 x 0.03), then max(0.06, 1 x 0.04)
    array([0.03, 0.06, 0.06,  nan])
    """
    p_values = np.asarray(p_values, dtype=np.float64)
    if p_values.ndim != 1:
        raise ConfigError(f"p_values must be 1-D, got shape {p_values.shape}")
    tested = ~np.isnan(p_values)
    finite = p_values[tested]
    if np.any((finite < 0) | (finite > 1)):
        raise ConfigError(f"p-values must lie in [0, 1], got {finite.min()} to {finite.max()}")
    order = np.argsort(finite, kind="stable")
    stepped = np.maximum.accumulate(finite[order] * np.arange(finite.size, 0, -1))  # (m - j + 1) p_(j), running max
    adjusted = p_values.copy()
    adjusted[np.flatnonzero(tested)[order]] = np.minimum(stepped, 1.0)
    return adjusted


# ---------------------------------------------------------------- seeds × examples


def seed_rows(n_seeds: int, n_resamples: int, seed: int = 0, stream: int = 0) -> np.ndarray:
    """(R, S) int64: row r holds the seed positions 0..S-1 of resample r, drawn with replacement.

    Seeded apart from the example rows (its own stream), so a group's draws repeat; `stream` gives
    a second group independent rows where the two groups' seeds do not match.

    >>> rows = seed_rows(3, 4, seed=0)
    >>> rows.shape, bool(rows.min() >= 0 and rows.max() <= 2)
    ((4, 3), True)
    >>> bool(np.array_equal(rows, seed_rows(3, 4, seed=0, stream=1)))  # another stream, other rows
    False
    """
    return np.random.default_rng([seed, 1, stream]).integers(0, n_seeds, size=(n_resamples, n_seeds))


@dataclass(frozen=True)
class SeedDraws:
    """One metric of one unit (a run, or a group of seeds): its seeds, their point values (S,) and
    their bootstrap draws (S, R), every seed's on the same example rows.

    A single run is a group of one seed: its two-level interval is the percentile interval of its draws.

    >>> run = SeedDraws(seeds=(0,), values=np.array([0.8]), draws=np.array([[0.7, 0.8, 0.9]]))
    >>> mean, low, high = two_level_interval(run, level=0.5)
    >>> round(mean, 4), round(low, 4), round(high, 4)
    (0.8, 0.75, 0.85)
    >>> [round(x, 4) for x in percentile_interval([0.7, 0.8, 0.9], level=0.5)]
    [0.75, 0.85]
    >>> SeedDraws(seeds=(2, 0, 1), values=np.zeros(3), draws=np.zeros((3, 5))).in_seed_order().seeds
    (0, 1, 2)
    """

    seeds: tuple[int, ...]
    values: np.ndarray  # (S,)
    draws: np.ndarray  # (S, R)

    def __post_init__(self):
        # a seed may repeat (the same comparison trained twice: `runs.group_runs` keeps both)
        if len(self.seeds) != len(self.values) or self.draws.ndim != 2 or self.draws.shape[0] != len(self.values):
            raise ConfigError(
                f"need one value and one row of draws per seed, got seeds {list(self.seeds)}, "
                f"{len(self.values)} values, draws {self.draws.shape}"
            )

    @classmethod
    def of(cls, seeds, estimates) -> SeedDraws:
        """From one `estimators.Estimate` per seed (its value and its draws, `samples`)."""
        return cls(tuple(seeds), np.array([e.value for e in estimates]), np.stack([e.samples for e in estimates]))

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    def in_seed_order(self) -> SeedDraws:
        order = np.argsort(self.seeds, kind="stable")
        return SeedDraws(tuple(self.seeds[i] for i in order), self.values[order], self.draws[order])

    def resampled(self, rows: np.ndarray) -> np.ndarray:
        """(R, S) the values of the seeds of `rows` (R, S), each at its own example row r."""
        return self.draws[rows, np.arange(self.draws.shape[1])[:, None]]

    def group_draws(self, rows: np.ndarray) -> np.ndarray:
        """(R,) m*_r: the mean over the resampled seeds of their draws at example row r."""
        return self.resampled(rows).mean(axis=1)


def two_level_interval(unit: SeedDraws, level: float = LEVEL, seed: int = 0) -> tuple[float, float, float]:
    """(mean over seeds, low, high): the percentile interval of the two-level draws m*, holding the mean
    (`interval_around`).

    Three seeds, each bootstrapped on the same 200 example rows (the rows shift all seeds alike here):

    >>> rng = np.random.default_rng(0)
    >>> values = np.array([0.80, 0.82, 0.81])
    >>> group = SeedDraws(seeds=(0, 1, 2), values=values, draws=values[:, None] + rng.normal(0, 0.02, 200))
    >>> [round(x, 4) for x in two_level_interval(group)]
    [0.81, 0.7727, 0.8481]
    """
    check_level(level)
    rows = seed_rows(len(unit.seeds), unit.draws.shape[1], seed)
    return (unit.mean, *interval_around(unit.mean, unit.group_draws(rows), level))


def paired_seed_rows(a: SeedDraws, b: SeedDraws, seed: int = 0) -> tuple[SeedDraws, SeedDraws, np.ndarray, np.ndarray]:
    """Both units in seed order with their seed rows: shared where the seed sets match, else independent."""
    a, b = a.in_seed_order(), b.in_seed_order()
    n_resamples = a.draws.shape[1]
    if b.draws.shape[1] != n_resamples:
        raise ConfigError(f"both units need the same resamples, got {n_resamples} and {b.draws.shape[1]}")
    rows_a = seed_rows(len(a.seeds), n_resamples, seed)
    rows_b = rows_a if a.seeds == b.seeds else seed_rows(len(b.seeds), n_resamples, seed, stream=1)
    return a, b, rows_a, rows_b


def two_level_difference(
    a: SeedDraws, b: SeedDraws, level: float = LEVEL, seed: int = 0, n_examples: int = 0
) -> Difference:
    """Δ = mean(A) − mean(B) over seeds, its interval and p-value from the two-level draws (see the module).

    Two groups trained on the same seeds; the example rows shift both alike, so the difference only
    varies with the resampled seeds (per seed 0.02, 0.02, 0.01):

    >>> rng = np.random.default_rng(0)
    >>> shift = rng.normal(0, 0.02, 200)  # what example row r does to every run
    >>> values_a, values_b = np.array([0.80, 0.82, 0.81]), np.array([0.78, 0.80, 0.80])
    >>> a = SeedDraws(seeds=(0, 1, 2), values=values_a, draws=values_a[:, None] + shift)
    >>> b = SeedDraws(seeds=(0, 1, 2), values=values_b, draws=values_b[:, None] + shift)
    >>> d = two_level_difference(a, b)
    >>> d.method, round(d.estimate, 4), round(d.low, 4), round(d.high, 4), round(d.p_value, 4)
    ('two-level bootstrap (seeds paired)', 0.0167, 0.01, 0.02, 0.005)
    """
    a, b, rows_a, rows_b = paired_seed_rows(a, b, seed)
    found = paired_bootstrap_from_samples(
        a.mean, b.mean, a.group_draws(rows_a), b.group_draws(rows_b), level, n_examples
    )
    if len(a.seeds) == len(b.seeds) == 1:
        return found  # two runs: the paired bootstrap over examples
    paired = "seeds paired" if a.seeds == b.seeds else "seeds independent"
    return replace(found, method=f"two-level bootstrap ({paired})")


def probability_of_improvement(x, y) -> np.ndarray:
    """P(X > Y) = mean over pairs (i, j) of 1[x_i > y_j] + ½ 1[x_i = y_j]; x (..., m), y (..., n) -> (...).

    >>> float(probability_of_improvement([3, 4], [1, 3]))  # 3 > 1, 3 = 3 (½), 4 > 1, 4 > 3: 3.5 / 4
    0.875
    """
    x, y = np.asarray(x, dtype=np.float64)[..., :, None], np.asarray(y, dtype=np.float64)[..., None, :]
    return ((x > y) + 0.5 * (x == y)).mean(axis=(-2, -1))


def improvement(
    a: SeedDraws, b: SeedDraws, lower_is_better: bool, level: float = LEVEL, seed: int = 0
) -> tuple[float, float, float]:
    """(P(A better than B), low, high): the probability of improvement over seeds and its percentile
    interval over the two-level draws (the seed rows of `two_level_difference`).

    An ECE-like metric (lower is better) of three seeds each; A's 0.10 and 0.09 beat all of B's,
    its 0.12 beats two of them, so P = 8/9; a draw of seed 1 three times (0.12 against 0.11) gives 0:

    >>> rng = np.random.default_rng(0)
    >>> shift = rng.normal(0, 0.01, 200)  # what example row r does to every run
    >>> values_a, values_b = np.array([0.10, 0.12, 0.09]), np.array([0.15, 0.11, 0.14])
    >>> a = SeedDraws(seeds=(0, 1, 2), values=values_a, draws=values_a[:, None] + shift)
    >>> b = SeedDraws(seeds=(0, 1, 2), values=values_b, draws=values_b[:, None] + shift)
    >>> [round(x, 4) for x in improvement(a, b, lower_is_better=True)]
    [0.8889, 0.0, 1.0]
    """
    sign = -1.0 if lower_is_better else 1.0  # "better" is "greater" after the sign
    a, b, rows_a, rows_b = paired_seed_rows(a, b, seed)
    point = float(probability_of_improvement(sign * a.values, sign * b.values))
    draws = probability_of_improvement(sign * a.resampled(rows_a), sign * b.resampled(rows_b))  # (R,)
    return (point, *percentile_interval(draws, level))
