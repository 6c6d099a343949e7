"""Selective prediction (`peftviz.calibration.selective`, the registry's aurc, augrc, accuracy_at_80/90, and
`peftviz.analysis.selective`'s curves) against plain loops (`tests.support.selective_reference`), brute force
over tie-breaks, closed forms and a worked example, on simulated and stored predictions."""

import ast
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from peftviz.analysis import selective as analysis
from peftviz.analysis.group_stats import Settings, run_estimates
from peftviz.calibration import estimators as est
from peftviz.calibration import selective, stats
from peftviz.errors import ConfigError
from peftviz.store.runs import Group, group_runs, list_runs
from tests.calibration.test_estimators import edge_set, random_set
from tests.support import selective_reference as ref

TIGHT = 1e-12
NAMES = ("aurc", "augrc", "accuracy_at_80", "accuracy_at_90")


def one_hot_set(n=60, n_classes=3, seed=1):
    """Every row one-hot (confidence exactly 1.0, as a fine-tuned model's often is): one tied block."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_classes, n)
    return np.eye(n_classes)[rng.integers(0, n_classes, n)], labels


def rounded_set(n=200, seed=2):
    """Confidences rounded to 0.05: blocks of ties of every size, some mixing right and wrong."""
    rng = np.random.default_rng(seed)
    top = np.round(rng.uniform(0.5, 1.0, n) / 0.05) * 0.05
    probs = np.stack([top, 1 - top], axis=1)
    labels = (rng.random(n) > top).astype(int)  # right with probability = confidence
    return probs, labels


SETS = {
    "no ties": random_set(n=213, n_classes=5),
    "edge": edge_set(),
    "one-hot": one_hot_set(),
    "rounded": rounded_set(),
}


def expected_by_permutations(confidence, errors) -> np.ndarray:
    """E_k as the mean, over every order of the examples, of the errors among the first k after a stable
    sort by confidence: ties broken by every permutation equally often."""
    n = len(confidence)
    total = np.zeros(n)
    orders = list(itertools.permutations(range(n)))
    for order in orders:
        ranked = sorted(order, key=lambda i: -confidence[i])  # stable: the permutation breaks the ties
        total += np.cumsum([errors[i] for i in ranked])
    return total / len(orders)


# ---------------------------------------------------------------- against the plain references


@pytest.mark.parametrize("name", list(SETS))
def test_every_selective_estimator_equals_the_plain_loop(name):
    probs, labels = SETS[name]
    got = est.point_estimates(probs, labels, metrics=list(NAMES))
    want = ref.selective_metrics(probs, labels)
    for metric in NAMES:
        assert got[metric] == pytest.approx(want[metric], abs=TIGHT, rel=0), (name, metric)


@pytest.mark.parametrize("seed", range(6))
def test_the_tie_rule_is_the_mean_over_every_tie_break(seed):
    rng = np.random.default_rng(seed)
    confidence = rng.choice([0.5, 0.7, 1.0], size=7)  # ties everywhere
    errors = rng.random(7) < 0.4
    got = selective.expected_errors(confidence, errors, np.arange(7)[None])[0]
    assert np.allclose(got, expected_by_permutations(confidence.tolist(), errors.tolist()), rtol=0, atol=TIGHT)
    assert np.allclose(got, ref.expected_errors(confidence.tolist(), errors.astype(int).tolist()), rtol=0, atol=TIGHT)


@pytest.mark.parametrize("name", list(SETS))
def test_every_bootstrap_row_equals_the_plain_loop_on_its_resample(name):
    probs, labels = SETS[name]
    rows = stats.resample_indices(len(labels), 25, seed=3)
    draws = est.bootstrap_samples(probs, labels, rows, metrics=list(NAMES))
    for r, row in enumerate(rows):
        want = ref.selective_metrics(probs[row], labels[row])
        for metric in NAMES:
            assert draws[metric][r] == pytest.approx(want[metric], abs=TIGHT, rel=0), (name, r, metric)


def test_a_stored_runs_selective_estimates_equal_the_plain_loop(smoke_store):
    """Through the comparison's own path (`run_estimates`, cached in the run folder): value and every draw."""
    run = next(run for run in list_runs(smoke_store) if run.status == "complete")
    probs, labels = run.predictions("test")
    got = run_estimates(run, Settings(which="test", n_resamples=20), NAMES)
    want = ref.selective_metrics(probs, labels)
    rows = stats.resample_indices(len(labels), 20, seed=0)  # the rows every run's draws are on
    for metric in NAMES:
        assert got[metric].value == pytest.approx(want[metric], abs=TIGHT, rel=0), metric
        drawn = [ref.selective_metrics(probs[row], labels[row])[metric] for row in rows]
        assert np.allclose(got[metric].samples, drawn, rtol=0, atol=TIGHT), metric


# ---------------------------------------------------------------- known values


def test_a_worked_example():
    """Confidences 0.9, 0.8 (wrong), 0.8, 0.7, 0.6 (wrong): E = 0, 0.5, 1, 1, 2 (the tied pair's one
    error spread over its two places); r = E_k / k = 0, 1/4, 1/3, 1/4, 2/5, so AURC = (0 + 0.25 + 0.3333 +
    0.25 + 0.4) / 5 = 37/150; AUGRC = (0 + 0.5 + 1 + 1 + 2) / 25 = 0.18. At 80% coverage the 4 most
    confident hold 1 error: accuracy 3/4; at 90%, k = ceil(4.5) = 5: accuracy 3/5."""
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.2, 0.8], [0.7, 0.3], [0.6, 0.4]])
    labels = np.array([0, 1, 1, 0, 1])
    got = est.point_estimates(probs, labels, metrics=list(NAMES))
    assert got == pytest.approx(
        {"aurc": 37 / 150, "augrc": 0.18, "accuracy_at_80": 0.75, "accuracy_at_90": 0.6}, abs=TIGHT, rel=0
    )


@pytest.mark.parametrize("n, m", [(10, 3), (213, 40), (50, 50)])
def test_a_perfect_ranking_has_the_closed_form(n, m):
    """All m errors least confident: E_k = max(0, k - (n - m)), AURC = (1/n) sum_{k > n-m} (k - n + m) / k,
    AUGRC = m (m + 1) / 2n^2."""
    confidence = np.linspace(1.0, 0.51, n)  # distinct, falling, class 0 always the argmax
    labels = np.zeros(n, dtype=int)
    labels[n - m :] = 1  # the m least confident are wrong
    probs = np.stack([confidence, 1 - confidence], axis=1)
    got = est.point_estimates(probs, labels, metrics=["aurc", "augrc"])
    closed = sum((k - n + m) / k for k in range(n - m + 1, n + 1)) / n
    assert got["aurc"] == pytest.approx(closed, abs=TIGHT, rel=0)
    assert got["augrc"] == pytest.approx(m * (m + 1) / (2 * n**2), abs=TIGHT, rel=0)


def test_all_correct_gives_zero_and_all_wrong_gives_one():
    probs, _ = SETS["rounded"]
    right = probs.argmax(axis=1)
    perfect = {"aurc": 0.0, "augrc": 0.0, "accuracy_at_80": 1.0, "accuracy_at_90": 1.0}
    assert est.point_estimates(probs, right, metrics=list(NAMES)) == perfect
    wrong = est.point_estimates(probs, 1 - right, metrics=list(NAMES))
    assert wrong["aurc"] == pytest.approx(1.0, abs=TIGHT) and wrong["augrc"] == pytest.approx(
        (len(right) + 1) / (2 * len(right)), abs=TIGHT
    )
    assert wrong["accuracy_at_80"] == 0.0


def test_ties_are_not_broken_by_the_storage_order():
    """A block of 40 predictions of confidence 1.0, 10 wrong: storing the wrong ones first or last
    gives one value (argsort order would differ by far)."""
    probs = np.vstack([np.tile([1.0, 0.0], (40, 1)), np.tile([0.6, 0.4], (20, 1))])
    labels = np.zeros(60, dtype=int)
    labels[:10] = 1
    first = est.point_estimates(probs, labels, metrics=["aurc"])["aurc"]
    last = est.point_estimates(probs, np.roll(labels, 30), metrics=["aurc"])["aurc"]  # wrong ones at 30..39
    closed = (40 * 0.25 + sum(10 / k for k in range(41, 61))) / 60  # r_k = 1/4 in the block, then 10 / k
    assert first == pytest.approx(closed, abs=TIGHT, rel=0) and last == pytest.approx(closed, abs=TIGHT, rel=0)
    ranked = np.cumsum(labels[:40]) / np.arange(1, 41)  # sort order: the 10 wrong answered first
    assert abs((ranked.sum() + sum(10 / k for k in range(41, 61))) / 60 - closed) > 0.05


@pytest.mark.parametrize(
    "coverage, n, k",
    [(0.8, 200, 160), (0.8, 213, 171), (0.07, 100, 7), (0.56, 200, 112), (0.9, 213, 192), (0.01, 50, 1), (1.0, 7, 7)],
)
def test_coverage_counts_guard_against_float_error(coverage, n, k):
    assert 0.07 * 100 > 7 and 0.56 * 200 > 112  # the float error the guard is for: ceil would answer 8, 113
    assert int(selective.answered(coverage, n)) == k == ref.answered(coverage, n)


@pytest.mark.parametrize("coverage", [0.0, -0.1, 1.5, float("nan")])
def test_a_coverage_outside_zero_one_is_refused(coverage):
    with pytest.raises(ConfigError, match="coverage must lie in"):
        selective.answered(coverage, 10)


# ---------------------------------------------------------------- the references' quadratures


def test_fd_shifts_trapezoid_is_augrc_less_half_a_step_of_the_error_rate():
    """fd-shifts' AUGRC: generalized risk at each distinct confidence threshold plus (0, 0), trapezoid
    between them (its rule, by a plain loop here). Equal to AUGRC - e / 2N, ties or none."""
    for probs, labels in SETS.values():
        confidence, errors = ref.confidences_and_errors(probs, labels)
        n = len(errors)
        points = [(0.0, 0.0)]
        for level in sorted(set(confidence), reverse=True):
            answered = [e for c, e in zip(confidence, errors) if c >= level]
            points.append((len(answered) / n, sum(answered) / n))
        trapezoid = sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in itertools.pairwise(points))
        augrc = est.point_estimates(probs, labels, metrics=["augrc"])["augrc"]
        assert trapezoid == pytest.approx(augrc - sum(errors) / n / (2 * n), abs=TIGHT, rel=0)


def test_torch_uncertainty_normalised_trapezoid_without_ties():
    """TorchUncertainty 0.13: trapezoid of r over k/N, k = 1..N, divided by 1 - 1/N (sort order breaks ties,
    so compare where there are none)."""
    probs, labels = SETS["no ties"]
    confidence, errors = ref.confidences_and_errors(probs, labels)
    assert len(set(confidence)) == len(confidence)
    ranked = [e for _, e in sorted(zip(confidence, errors), key=lambda pair: -pair[0])]
    n = len(ranked)
    risk = [sum(ranked[:k]) / k for k in range(1, n + 1)]
    theirs = sum((risk[k] + risk[k + 1]) / 2 / n for k in range(n - 1)) / (1 - 1 / n)
    aurc = est.point_estimates(probs, labels, metrics=["aurc"])["aurc"]
    assert theirs == pytest.approx((aurc - (risk[0] + risk[-1]) / (2 * n)) / (1 - 1 / n), abs=TIGHT, rel=0)


# ---------------------------------------------------------------- curves of stored runs


def test_a_runs_curve_and_band_equal_the_plain_loop(smoke_store):
    run = next(run for run in list_runs(smoke_store) if run.status == "complete")
    probs, labels = run.predictions("test")
    table = analysis.risk_coverage_table(Group(run.name, [run]), "test", n_resamples=40, seed=0, name="one")
    assert list(table.columns) == list(analysis.TABLE_COLUMNS) and len(table) == 100 and set(table["n"]) == {1}
    rows = stats.resample_indices(len(labels), 40, seed=0)
    for coverage, risk, low, high in table[["coverage", "risk", "low", "high"]].to_numpy()[::9]:
        k = ref.answered(round(coverage, 2), len(labels))

        def risk_of(p, y, k=k):
            return ref.expected_errors(*ref.confidences_and_errors(p, y))[k - 1] / k

        assert risk == pytest.approx(risk_of(probs, labels), abs=TIGHT)
        want = stats.interval_around(risk, [risk_of(probs[row], labels[row]) for row in rows])
        assert (low, high) == pytest.approx(want, abs=TIGHT)


def test_a_groups_band_is_the_two_level_interval_at_every_point(seeds_store):
    group = next(g for g in group_runs(list_runs(seeds_store)) if len(g.runs) == 2)
    table = analysis.risk_coverage_table(group, "test", n_resamples=30, seed=0)
    coverages = selective.coverage_grid()
    per_run = [analysis.run_risks(run, "test", coverages, 30, 0) for run in group.runs]
    for g in (0, 49, 79, 99):
        unit = stats.SeedDraws(
            tuple(group.seeds), np.array([v[g] for v, _ in per_run]), np.stack([d[:, g] for _, d in per_run])
        )
        want = stats.two_level_interval(unit, stats.LEVEL, 0)
        got = table.iloc[g][["risk", "low", "high"]].to_numpy(dtype=float)
        assert np.allclose(got, want, rtol=0, atol=TIGHT), g
    assert set(table["n"]) == {2} and (table["low"] <= table["risk"]).all() and (table["risk"] <= table["high"]).all()
    error_rates = [
        np.mean(probs.argmax(axis=1) != labels) for probs, labels in (run.predictions("test") for run in group.runs)
    ]
    assert table["risk"].iloc[-1] == pytest.approx(np.mean(error_rates), abs=TIGHT)  # coverage 1: the error rate


def test_module_imports_only_numpy_and_peftviz_at_top_level():
    tree = ast.parse(Path(selective.__file__).read_text())
    top_level = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = [alias.name for node in top_level if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module or "" for node in top_level if isinstance(node, ast.ImportFrom)]
    assert {name.split(".")[0] for name in names} <= {"__future__", "math", "numpy", "peftviz"}
    assert math.isfinite(selective.COVERAGE_GUARD)
