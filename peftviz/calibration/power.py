"""How many seeds, and how many test documents, an answer needs: the power of the two-level comparison.

The model. Two methods A and B are trained at S seeds each and judged on the same N test documents
(seeds and documents crossed, as in `peftviz.calibration.stats`). For one metric, the difference of
their means over seeds is

    Δ̂ = δ + ā + b + c̄,        Var(Δ̂) = σ²_seed / S + (N₀ / N) (σ²_docs + σ²_inter / S)

with δ the true difference; ā the mean over seeds of what a training seed does to the difference
(σ²_seed per seed); b what the test set does to every seed alike (σ²_docs on the pilot's N₀ documents);
c̄ the mean over seeds of each seed's own reaction to the documents, the seed × document interaction
(σ²_inter per seed on N₀ documents). Where A and B share their seeds, ā is the mean of the paired
differences' seed effects (what a seed does to both cancels); where they do not, σ²_seed is the sum of
the two methods' seed variances.

The components, from a pilot comparison's `SeedDraws` (S ≥ 2 seeds; R draws on shared document rows;
`variance_components`). Paired seeds: d_s = v^A_s − v^B_s and d*_sr = D^A_sr − D^B_sr. Then

    W = mean_s var_r d*_s·     = (σ²_docs + σ²_inter)           (each seed's documents' noise)
    M = var_r mean_s d*_s·     = σ²_docs + σ²_inter / S         (the mean's documents' noise)
    σ²_inter = (W − M) S / (S − 1),   σ²_docs = M − σ²_inter / S,   σ²_seed = var_s d_s − σ²_inter

(var_s with S − 1 in the denominator; var_s d_s holds each seed's interaction noise, hence the last
subtraction), each clipped at 0. Unpaired seeds: the same per method, and σ²_docs from the variance
of the difference of the two methods' means over the document rows.

The test being planned for is the one `report` runs: the two-level bootstrap of Δ with the shifted
p-value (`stats.two_level_difference`), at α divided by the number of pairs (Holm's first step, so a
planned design detects the difference whatever the other pairs do; Holm's later steps are less strict).
Its power is integrated by Monte Carlo over experiments (`power`): each draws the seeds' differences
d_s = δ + b + a_s + c_s (the shared test-set part b ~ N(0, k σ²_docs), k = N₀ / N; each seed's own part
~ N(0, σ²_seed + k σ²_inter)) and takes the p-value the bootstrap converges to for them: the chance that
a draw lies |Δ̂| or further from Δ̂, a draw being the mean deviation of a resample of the seeds plus the
documents' normal noise, k (σ²_docs + σ²_inter Σ_s m_s² / S²) for a resample holding seed s m_s times.
Up to `EXACT_SEEDS` seeds every resample of them is enumerated, with its probability; beyond, their
mean is normal with variance s²/S (s² the seeds' variance with 1/S). `report`'s R = 1,000 draws then
count the far ones binomially, and p = (1 + count) / (1 + R) < α' decides. This is the few-seeds
behaviour the bootstrap has: its seed part is too narrow ((S − 1)/S of the variance, only S^S
resamples), so with 3 seeds it rejects more often than a t-test would, false alarms included; the
model plans for the test as it is. Common random numbers make power rise smoothly with S and N;
`recommend` finds the fewest seeds at the pilot's documents (and at 2, 5 and 10 times them), and the
fewest documents at the pilot's seeds, that reach the target. `simulated_power` checks a design
against the real test on simulated seeds × documents (tests/calibration/test_power.py;
docs/statistics.md gives the numbers and the command).

Assumptions, stated in docs/statistics.md too: the difference seen in the pilot is the one to detect
(a pilot's difference is itself noisy; a smaller one needs more); new seeds and documents come from
the same populations; a metric's document noise shrinks as 1/N (exact for means over documents such
as accuracy, NLL and Brier; an approximation for binned and smoothed ECE, whose bias also shrinks
with N); the seeds' effects are roughly normal. No library plans a crossed seeds × documents design
of a bootstrap test (statsmodels' power classes plan one-level t- and z-tests), hence this module.

Example: a difference of 0.01 whose seeds vary by 0.01 (sd) and whose 200 documents add 0.002 (sd)
shared and 0.004 per seed. 3 seeds detect it 43% of the time; 16 seeds on the same documents reach 80%,
and so do 9 seeds on five times the documents, while at 3 seeds no number of documents does:

>>> parts = VarianceComponents(seed=1e-4, docs=4e-6, inter=1.6e-5, n_documents=200, n_seeds=3)
>>> round(power(parts, 0.01, n_seeds=3, n_documents=200, alpha=0.05), 2)
0.43
>>> plan = recommend(parts, 0.01, alpha=0.05)
>>> plan.seeds, plan.documents, plan.seeds_with_more_documents
(16, None, {2: 11, 5: 9, 10: 8})
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from peftviz.calibration.stats import SeedDraws, resample_indices, two_level_difference
from peftviz.errors import ConfigError

TARGET = 0.8  # the power a plan aims for unless told otherwise
ALPHA = 0.05  # the significance level before the correction over pairs
MAX_SEEDS = 1000  # the most seeds a plan looks at; none reaching the target reads "no number of seeds"
REPORT_RESAMPLES = 1000  # the test a plan is for: `report`'s (with 200, p >= 1/201 can never pass 0.05 / 15 pairs)
MAX_DOCUMENTS = 10_000_000
MORE_DOCUMENTS = (1, 2, 5, 10)  # the pilot's documents times these: the seeds a plan gives for each
_MONTE_CARLO = 4_000  # simulated experiments per power value: its Monte Carlo error is under a point at 80%
EXACT_SEEDS = 5  # up to this many seeds every resample of them is enumerated (126 at 5); beyond, normal within 2 points


@dataclass(frozen=True)
class VarianceComponents:
    """The variances of one difference A − B (see the module): per seed, shared by the documents, and
    seed × document, the latter two on the pilot's `n_documents`; `n_seeds` is the pilot's."""

    seed: float
    docs: float
    inter: float
    n_documents: int
    n_seeds: int

    def variance(self, n_seeds: int, n_documents: float) -> float:
        """Var(Δ̂) with `n_seeds` seeds on `n_documents` documents."""
        scale = self.n_documents / n_documents
        return self.seed / n_seeds + scale * (self.docs + self.inter / n_seeds)


@dataclass(frozen=True)
class Plan:
    """What a difference needs: power now, and the fewest seeds (at the pilot's documents) and documents (at
    the pilot's seeds) that reach `target` at `alpha`; None where no number up to the maxima does. Seeds
    cannot average away the documents' shared noise, nor documents the seeds': where neither alone
    reaches, `seeds_with_more_documents` gives the fewest seeds on 2, 5 and 10 times the documents."""

    difference: float
    components: VarianceComponents
    alpha: float
    target: float
    power_now: float
    seeds: int | None
    documents: int | None
    seeds_with_more_documents: dict[int, int | None]  # k -> the fewest seeds on k times the pilot's documents


# ---------------------------------------------------------------- components from a pilot


def _document_parts(draws: np.ndarray) -> tuple[float, float]:
    """(W, M) of (S, R) draws: the mean over seeds of each seed's variance over document rows, and the
    variance over rows of the mean over seeds."""
    return float(np.var(draws, axis=1, ddof=1).mean()), float(np.var(draws.mean(axis=0), ddof=1))


def _interaction(within: float, of_mean: float, n_seeds: int) -> float:
    return max(0.0, (within - of_mean) * n_seeds / (n_seeds - 1))


def variance_components(a: SeedDraws, b: SeedDraws, n_documents: int) -> VarianceComponents:
    """The components of A − B from two units judged on the same `n_documents` (draws on the same rows)."""
    if min(len(a.seeds), len(b.seeds)) < 2:
        raise ConfigError("telling seeds' variance from the documents' needs at least 2 seeds of each method")
    a, b = a.in_seed_order(), b.in_seed_order()
    if a.seeds == b.seeds:
        n_seeds = len(a.seeds)
        within, of_mean = _document_parts(a.draws - b.draws)  # (S, R) paired differences
        inter = _interaction(within, of_mean, n_seeds)
        seed = float(np.var(a.values - b.values, ddof=1)) - inter
        return VarianceComponents(max(0.0, seed), max(0.0, of_mean - inter / n_seeds), inter, n_documents, n_seeds)
    inter_a = _interaction(*_document_parts(a.draws), len(a.seeds))
    inter_b = _interaction(*_document_parts(b.draws), len(b.seeds))
    seed = max(0.0, float(np.var(a.values, ddof=1)) - inter_a) + max(0.0, float(np.var(b.values, ddof=1)) - inter_b)
    of_mean = float(np.var(a.draws.mean(axis=0) - b.draws.mean(axis=0), ddof=1))
    docs = of_mean - inter_a / len(a.seeds) - inter_b / len(b.seeds)
    return VarianceComponents(seed, max(0.0, docs), inter_a + inter_b, n_documents, min(len(a.seeds), len(b.seeds)))


# ---------------------------------------------------------------- power and plans


def _check_plan(difference: float, alpha: float, target: float) -> None:
    if not (0 < alpha < 1 and 0 < target < 1):
        raise ConfigError(f"alpha and the target power must lie in (0, 1), got {alpha} and {target}")
    if not math.isfinite(difference):
        raise ConfigError(f"the difference to detect must be a number, got {difference}")


def _seed_resamples(n_seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """Every way of drawing `n_seeds` seeds with replacement, as counts (C, S), and its probability (C,)."""
    from itertools import combinations_with_replacement
    from math import factorial

    counts = np.array(
        [np.bincount(draw, minlength=n_seeds) for draw in combinations_with_replacement(range(n_seeds), n_seeds)]
    )
    ways = factorial(n_seeds) / np.prod([[factorial(k) for k in row] for row in counts], axis=1)
    return counts, ways / n_seeds**n_seeds


def _far_share(size: np.ndarray, shift: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """P(|shift + sd Z| >= size), elementwise (sd 0: a step)."""
    from scipy.special import ndtr

    safe = np.maximum(sd, 1e-300)
    return ndtr((-size - shift) / safe) + ndtr((shift - size) / safe)


def _p_few_seeds(values: np.ndarray, parts: VarianceComponents, scale: float) -> np.ndarray:
    """(M,) the bootstrap p-value as R → ∞ for experiments whose seeds' differences are `values` (M, S):
    every resample of the seeds, exactly, each with its documents' noise (a seed drawn twice keeps its
    interaction twice)."""
    n_seeds = values.shape[1]
    counts, weight = _seed_resamples(n_seeds)  # (C, S), (C,)
    estimate = values.mean(axis=1, keepdims=True)  # (M, 1)
    shift = (values - estimate) @ counts.T / n_seeds  # (M, C) each resample's mean deviation
    sd = np.sqrt(scale * (parts.docs + parts.inter * (counts**2).sum(axis=1) / n_seeds**2))  # (C,)
    return _far_share(np.abs(estimate), shift, sd[None, :]) @ weight


def _p_many_seeds(
    estimate: np.ndarray, sample_variance: np.ndarray, parts: VarianceComponents, scale: float, n_seeds: int
) -> np.ndarray:
    """(M,) the same for many seeds, where the resampled seeds' mean is normal: variance s²/S (s² with 1/S),
    plus the documents' (a resample holds each seed (2S − 1)/S² times squared, on average)."""
    variance = sample_variance / n_seeds + scale * (parts.docs + parts.inter * (2 * n_seeds - 1) / n_seeds**2)
    return _far_share(np.abs(estimate), np.zeros_like(estimate), np.sqrt(variance))


def power(
    parts: VarianceComponents,
    difference: float,
    n_seeds: int,
    n_documents: float,
    alpha: float,
    n_resamples: int = REPORT_RESAMPLES,
    seed: int = 0,
) -> float:
    """P(`stats.two_level_difference` with `n_resamples` draws calls `difference` significant at `alpha`)
    with `n_seeds` × `n_documents`: Monte Carlo over experiments (seeds' values, the test set's shift)."""
    from scipy.stats import binom

    if n_seeds < 2:
        raise ConfigError(f"a comparison over seeds needs at least 2 seeds, got {n_seeds}")
    scale = parts.n_documents / n_documents
    rng = np.random.default_rng(seed)
    shift = difference + rng.normal(0, math.sqrt(scale * parts.docs), _MONTE_CARLO)  # (M,) δ + the test set's
    per_seed = math.sqrt(parts.seed + scale * parts.inter)  # sd of a seed's own deviation
    if n_seeds <= EXACT_SEEDS:
        values = shift[:, None] + rng.normal(0, per_seed, (_MONTE_CARLO, n_seeds))  # (M, S)
        p_limit = _p_few_seeds(values, parts, scale)
    else:  # the seeds' mean and sample variance, drawn directly (independent for normal seeds)
        estimate = shift + rng.normal(0, per_seed / math.sqrt(n_seeds), _MONTE_CARLO)  # (M,)
        sample_variance = per_seed**2 * rng.chisquare(n_seeds - 1, _MONTE_CARLO) / n_seeds  # (M,) s² with 1/S
        p_limit = _p_many_seeds(estimate, sample_variance, parts, scale, n_seeds)
    # report's p = (1 + #{far draws}) / (1 + R) < alpha: at most this many of the R draws may lie as far
    allowed = math.ceil(alpha * (1 + n_resamples)) - 2
    if allowed < 0:
        return 0.0
    return float(np.mean(binom.cdf(allowed, n_resamples, p_limit)))


def _fewest(reaches, low: int, high: int) -> int | None:
    """The smallest n in [low, high] with reaches(n), for reaches monotone in n; None if not even high."""
    if not reaches(high):
        return None
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if reaches(middle) else (middle + 1, high)
    return low


def recommend(parts: VarianceComponents, difference: float, alpha: float = ALPHA, target: float = TARGET) -> Plan:
    """The fewest seeds on the pilot's documents, and the fewest documents at the pilot's seeds, for `target`."""
    _check_plan(difference, alpha, target)
    now = power(parts, difference, parts.n_seeds, parts.n_documents, alpha)
    if difference == 0:  # nothing to detect: no design reaches any power above α
        return Plan(difference, parts, alpha, target, now, None, None, dict.fromkeys(MORE_DOCUMENTS[1:]))
    documents = _fewest(lambda n: power(parts, difference, parts.n_seeds, n, alpha) >= target, 2, MAX_DOCUMENTS)
    more = {
        factor: _fewest_seeds(parts, difference, factor * parts.n_documents, alpha, target) for factor in MORE_DOCUMENTS
    }
    return Plan(difference, parts, alpha, target, now, more.pop(1), documents, more)


def _fewest_seeds(parts: VarianceComponents, difference: float, n_documents: int, alpha: float, target: float):
    return _fewest(lambda s: power(parts, difference, s, n_documents, alpha) >= target, 2, MAX_SEEDS)


def plan_of(
    a: SeedDraws, b: SeedDraws, n_documents: int, n_pairs: int = 1, alpha: float = ALPHA, target: float = TARGET
) -> Plan:
    """The plan for the difference seen between two units, at `alpha` / `n_pairs` (Holm's first step)."""
    if n_pairs < 1:
        raise ConfigError(f"the number of pairs must be at least 1, got {n_pairs}")
    return recommend(variance_components(a, b, n_documents), a.mean - b.mean, alpha / n_pairs, target)


# ---------------------------------------------------------------- the check by simulation


def simulated_draws(
    parts: VarianceComponents, difference: float, n_seeds: int, counts: np.ndarray, rng: np.random.Generator
) -> tuple[SeedDraws, SeedDraws]:
    """One simulated comparison of A against B (B all zeros): per seed s and document i the difference
    e_si = δ + a_s + b_i + c_si with the variances of `parts` (per document: N₀ times the mean's), and
    both units' bootstrap draws on the document rows whose `counts` (R, N) say how often each holds each document."""
    n_documents = counts.shape[1]
    per_document = math.sqrt(parts.n_documents)  # a mean of N documents has 1/N of a document's variance
    seed_effect = rng.normal(0, math.sqrt(parts.seed), (n_seeds, 1))  # (S, 1)
    shared = rng.normal(0, per_document * math.sqrt(parts.docs), (1, n_documents))  # (1, N)
    inter = rng.normal(0, per_document * math.sqrt(parts.inter), (n_seeds, n_documents))  # (S, N)
    per_seed = difference + seed_effect + shared + inter  # (S, N)
    draws = (counts @ per_seed.T).T / n_documents  # (S, R)
    seeds = tuple(range(n_seeds))
    zeros = SeedDraws(seeds, np.zeros(n_seeds), np.zeros_like(draws))
    return SeedDraws(seeds, per_seed.mean(axis=1), draws), zeros


def simulated_power(
    parts: VarianceComponents,
    difference: float,
    n_seeds: int,
    n_documents: int,
    alpha: float,
    n_experiments: int = 1000,
    n_resamples: int = REPORT_RESAMPLES,
    seed: int = 0,
) -> float:
    """The share of `n_experiments` simulated comparisons (`simulated_draws`) that `stats.two_level_difference`,
    the test `report` runs, calls significant at `alpha`."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng([seed, 7])
    rows = resample_indices(n_documents, n_resamples, seed)  # report's rows: one seed for every comparison
    counts = np.stack([np.bincount(row, minlength=n_documents) for row in rows]).astype(np.float64)  # (R, N)
    found = 0
    with threadpool_limits(1):  # small products: BLAS threads would only wait on each other (8x slower here)
        for _ in range(n_experiments):
            a, b = simulated_draws(parts, difference, n_seeds, counts, rng)
            found += two_level_difference(a, b, seed=seed).p_value < alpha
    return found / n_experiments
