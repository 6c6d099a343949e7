"""Conformal prediction sets: the guarantee on simulations with known class probabilities, equality with MAPIE
(simulated and stored predictions, through the analysis functions the Confidence page calls), the bootstrap, and
bad input."""

import os
import warnings

import numpy as np
import pytest

from peftviz.analysis import conformal as analysis
from peftviz.calibration import conformal
from peftviz.errors import ConfigError
from peftviz.store.runs import Group, group_runs, list_runs
from tests.support.mapie_reference import lookup

N_CLASSES = 5


def simulate(rng, shape: tuple[int, ...], concentration: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """True class probabilities (*shape, C) ~ Dirichlet, and labels drawn from them: predictions = truth."""
    probs = rng.dirichlet(np.full(N_CLASSES, concentration), size=shape)
    labels = (probs.cumsum(axis=-1) > rng.random((*shape, 1))).argmax(axis=-1)
    return probs, labels


# ---------------------------------------------------------------- the guarantee, by simulation


def simulated_coverage(
    score: str, alpha: float, randomized: bool = True, draws: int = 2000, n: int = 500
) -> np.ndarray:
    """(draws,) the empirical coverage of `draws` independent calibration sets of n and test sets of n,
    all at once: q̂ per draw from the module's building blocks."""
    rng = np.random.default_rng(17)
    probs, labels = simulate(rng, (draws, 2 * n))  # (D, 2n, C), (D, 2n)
    # not randomized (Romano et al.'s deterministic APS, MAPIE's include_last_label=True): calibrate on the mass up
    # to and with y (U = 1), and put in the set every label up to and with the one whose mass crosses q̂ (U = 0)
    u = rng.random((draws, 2 * n)) if randomized else np.r_[np.ones(n), np.zeros(n)]
    true = conformal.true_label_scores(conformal.label_scores(probs, score, np.broadcast_to(u, labels.shape)), labels)
    q_hat = conformal.threshold(true[:, :n], alpha)  # (D,)
    return (true[:, n:] <= q_hat[:, None] + conformal.TOLERANCE).mean(axis=1)


@pytest.mark.parametrize("score", ["lac", "aps"])
@pytest.mark.parametrize("alpha", [0.1, 0.05])
def test_mean_coverage_over_many_draws_is_within_a_point_of_the_target(score, alpha):
    coverage = simulated_coverage(score, alpha)
    exact = conformal.quantile_rank(500, alpha) / 501  # continuous scores: E coverage = k / (n + 1)
    print(
        f"{score} α = {alpha}: mean coverage {coverage.mean():.4f} over 2000 draws (target {1 - alpha}, "
        f"k/(n+1) = {exact:.4f}), sd {coverage.std():.4f}"
    )
    assert abs(coverage.mean() - (1 - alpha)) <= 0.01
    assert abs(coverage.mean() - exact) <= 4 * coverage.std() / np.sqrt(coverage.size)


def test_aps_without_randomization_over_covers():
    """What the randomization is for: with the label that crosses q̂ always in, coverage sits well above 1 − α."""
    coverage = simulated_coverage("aps", 0.1, randomized=False, draws=400)
    print(f"APS not randomized, α = 0.1: mean coverage {coverage.mean():.4f}")
    assert coverage.mean() > 0.9 + 0.02


# ---------------------------------------------------------------- MAPIE, the reference


def mapie_sets(cal_probs, cal_labels, eval_probs, alpha, score, random_state=0) -> np.ndarray:
    """(N_eval, C) MAPIE's sets; APS randomized, its U drawn by RandomState(random_state) per call."""
    from mapie.classification import SplitConformalClassifier

    n_cal = len(cal_labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = SplitConformalClassifier(
            lookup(np.vstack([cal_probs, eval_probs])),
            confidence_level=1 - alpha,
            conformity_score=score,
            prefit=True,
            random_state=random_state,
        )
        found.conformalize(np.arange(n_cal)[:, None], cal_labels)
        params = {"include_last_label": "randomized"} if score == "aps" else None
        rows = np.arange(n_cal, n_cal + len(eval_probs))[:, None]
        return found.predict_set(rows, conformity_score_params=params)[1][:, :, 0]


def mapie_u(n_examples: int, random_state: int = 0) -> np.ndarray:
    """The U of this module for MAPIE's draw: MAPIE makes a fresh RandomState(seed) per call (check_random_state)
    and keeps the last label when V <= U', the same set as U = 1 - U' here."""
    return 1.0 - np.random.RandomState(random_state).uniform(size=n_examples)


def mapie_numbers(cal_probs, cal_labels, eval_probs, eval_labels, alpha, score) -> tuple[float, float]:
    sets = mapie_sets(cal_probs, cal_labels, eval_probs, alpha, score)
    return float(sets[np.arange(len(eval_labels)), eval_labels].mean()), float(sets.sum(axis=1).mean())


@pytest.mark.parametrize("score", ["lac", "aps"])
@pytest.mark.parametrize("alpha", [0.02, 0.1, 0.3])
def test_the_sets_equal_mapies_on_simulated_predictions(score, alpha):
    rng = np.random.default_rng(3)
    (cal_probs, cal_labels), (eval_probs, eval_labels) = simulate(rng, (300,)), simulate(rng, (213,))
    found = conformal.conformal_sets(
        cal_probs,
        cal_labels,
        eval_probs,
        eval_labels,
        alpha,
        score,
        u_calibration=mapie_u(300),
        u_evaluation=mapie_u(213),
    )
    want = mapie_sets(cal_probs, cal_labels, eval_probs, alpha, score)
    assert np.array_equal(found.sizes, want.sum(axis=1))
    assert np.array_equal(found.covered, want[np.arange(213), eval_labels])
    assert 0 < found.set_size < N_CLASSES  # neither empty nor everything: the threshold is doing something


def stored_units(store) -> list[Group]:
    return group_runs(list_runs(store))


def mapie_at_test(run, alpha, score, u_seed=0) -> tuple[float, float]:
    """MAPIE calibrated on the best epoch's validation predictions, judged on the test predictions."""
    cal_probs, cal_labels = run.predictions(run.best_epoch)
    test_probs, test_labels = run.predictions("test")
    return mapie_numbers(cal_probs, cal_labels, test_probs, test_labels, alpha, score)


@pytest.mark.parametrize("score", ["lac", "aps"])
def test_the_page_numbers_at_test_equal_mapies_on_a_stored_run(seeds_store, score, monkeypatch):
    """The page's table (`conformal_summary`, a run) against MAPIE; APS handed MAPIE's U via `uniforms`."""
    run = list_runs(seeds_store)[0]
    monkeypatch.setattr(conformal, "uniforms", lambda n, seed=0, stream=0: mapie_u(n))
    for alpha in (0.05, 0.1, 0.2):
        row = analysis.conformal_summary(run, alpha, score, n_resamples=50).iloc[0]
        coverage, size = mapie_at_test(run, alpha, score)
        assert (row["coverage"], row["set_size"]) == pytest.approx((coverage, size), abs=1e-12)
        assert row["coverage_low"] <= row["coverage"] <= row["coverage_high"]
        assert row["set_size_low"] <= row["set_size"] <= row["set_size_high"]


@pytest.mark.parametrize("score", ["lac", "aps"])
def test_a_groups_numbers_are_the_mean_of_its_seeds_mapie_numbers(seeds_store, score, monkeypatch):
    monkeypatch.setattr(conformal, "uniforms", lambda n, seed=0, stream=0: mapie_u(n))
    group = next(unit for unit in stored_units(seeds_store) if len(unit.runs) == 2)
    row = analysis.conformal_summary(group, 0.1, score, n_resamples=50).iloc[0]
    per_seed = np.array([mapie_at_test(run, 0.1, score) for run in group.runs])  # (S, 2)
    assert (row["coverage"], row["set_size"]) == pytest.approx(tuple(per_seed.mean(axis=0)), abs=1e-12)
    assert row["n_seeds"] == 2


def test_over_epochs_each_epoch_calibrates_on_one_half_and_judges_the_other(seeds_store, monkeypatch):
    monkeypatch.setattr(conformal, "uniforms", lambda n, seed=0, stream=0: mapie_u(n))
    group = next(unit for unit in stored_units(seeds_store) if len(unit.runs) == 2)
    table = analysis.conformal_over_epochs(group, 0.2, "aps", n_resamples=20)
    epochs = sorted(set.intersection(*({int(m["epoch"]) for m in run.metrics} for run in group.runs)))
    assert table["epoch"].tolist() == epochs
    for _, row in table.iterrows():
        numbers = []
        for run in group.runs:
            probs, labels = run.predictions(int(row["epoch"]))
            calibrate, judge = analysis.halves(len(labels))
            assert not set(calibrate) & set(judge) and len(calibrate) + len(judge) == len(labels)
            numbers.append(mapie_numbers(probs[calibrate], labels[calibrate], probs[judge], labels[judge], 0.2, "aps"))
        assert (row["coverage"], row["set_size"]) == pytest.approx(tuple(np.mean(numbers, axis=0)), abs=1e-12)
        assert row["n_evaluated"] == len(labels) - len(labels) // 2


# ---------------------------------------------------------------- the bootstrap


def test_a_resample_recalibrates_on_its_calibration_row_and_judges_its_evaluation_row():
    """Draw r, recomputed plainly: q̂ from the sorted resampled calibration scores, the same U per example."""
    from peftviz.calibration.stats import resample_indices

    rng = np.random.default_rng(5)
    (cal_probs, cal_labels), (eval_probs, eval_labels) = simulate(rng, (80,)), simulate(rng, (60,))
    found = conformal.conformal_sets(cal_probs, cal_labels, eval_probs, eval_labels, 0.1, "aps", n_resamples=30, seed=4)
    u_cal, u_eval = conformal.uniforms(80, 4, 0), conformal.uniforms(60, 4, 1)
    cal_rows, eval_rows = resample_indices(80, 30, 5), resample_indices(60, 30, 4)
    for r in range(30):
        cal, ev = cal_rows[r], eval_rows[r]
        plain = conformal.conformal_sets(
            cal_probs[cal],
            cal_labels[cal],
            eval_probs[ev],
            eval_labels[ev],
            0.1,
            "aps",
            u_calibration=u_cal[cal],
            u_evaluation=u_eval[ev],
        )
        assert found.coverage_draws[r] == pytest.approx(plain.coverage, abs=1e-12)
        assert found.set_size_draws[r] == pytest.approx(plain.set_size, abs=1e-12)
    assert np.unique(found.coverage_draws).size > 5  # the resamples differ


def test_the_threshold_is_the_ceil_n_plus_one_order_statistic_or_infinite():
    scores = np.array([0.5, 0.1, 0.4, 0.3, 0.2])  # sorted: 0.1 .. 0.5
    assert conformal.threshold(scores, 0.5) == 0.3  # ⌈6 · 0.5⌉ = 3rd smallest
    assert conformal.threshold(scores, 0.2) == 0.5  # ⌈6 · 0.8⌉ = 5th
    assert conformal.threshold(scores, 0.1) == np.inf  # ⌈6 · 0.9⌉ = 6 > 5: every label
    found = conformal.conformal_sets(np.full((5, 3), 1 / 3), np.zeros(5, int), np.eye(3), np.arange(3), 0.1, "lac")
    assert found.sizes.tolist() == [3, 3, 3] and found.coverage == 1.0


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("alpha", [0, 1, -0.1, 1.5, True])
def test_alpha_outside_zero_one_is_refused(alpha):
    probs, labels = np.full((4, 3), 1 / 3), np.zeros(4, int)
    with pytest.raises(ConfigError, match="alpha .* strictly between 0 and 1"):
        conformal.conformal_sets(probs, labels, probs, labels, alpha, "lac")


def test_different_class_counts_an_empty_calibration_set_and_an_unknown_score_are_refused():
    probs, labels = np.full((4, 3), 1 / 3), np.zeros(4, int)
    with pytest.raises(ConfigError, match="same classes: 3 and 2"):
        conformal.conformal_sets(probs, labels, np.full((4, 2), 0.5), labels, 0.1, "lac")
    with pytest.raises(ConfigError, match="calibration set needs .* N >= 1"):
        conformal.conformal_sets(np.empty((0, 3)), np.empty(0, int), probs, labels, 0.1, "lac")
    with pytest.raises(ConfigError, match="unknown conformal score 'raps'"):
        conformal.conformal_sets(probs, labels, probs, labels, 0.1, "raps")


@pytest.mark.long
def test_the_page_numbers_equal_mapies_on_every_run_of_a_quick_store(monkeypatch):
    """On a store of real runs (PEFTVIZ_QUICK_STORE, e.g. `compare --preset quick --seeds 3`): every run's
    test coverage and mean set size as the page shows them, both scores, equal MAPIE's (handed MAPIE's U)."""
    store = os.environ.get("PEFTVIZ_QUICK_STORE")
    if not store:
        pytest.skip("set PEFTVIZ_QUICK_STORE to a store of quick-preset runs")
    runs = [run for run in list_runs(store) if run.status == "complete"]
    monkeypatch.setattr(conformal, "uniforms", lambda n, seed=0, stream=0: mapie_u(n))
    for run in runs:
        for score in ("lac", "aps"):
            shown = analysis.conformal_summary(run, 0.1, score, 10).iloc[0]
            coverage, size = mapie_at_test(run, 0.1, score)[:2]
            assert (shown.coverage, shown.set_size) == pytest.approx((coverage, size), abs=1e-12), (run.name, score)
    assert runs
