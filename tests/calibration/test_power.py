"""How many seeds an answer needs (peftviz.calibration.power, peftviz.analysis.power, `report --power`).

The estimator of the variance components is checked on simulated pilots whose components are known; the
plans are checked by running the real test (`stats.two_level_difference`) on simulated seeds × documents at the
recommended design: the achieved power must lie within 5 points of the target (benchmarks/power_simulation.py
prints the same table for docs/statistics.md).
"""

import numpy as np
import pandas as pd
import pytest

from peftviz.analysis import group_stats
from peftviz.analysis import power as power_analysis
from peftviz.calibration import power
from peftviz.calibration.stats import SeedDraws, resample_indices
from peftviz.cli import main
from peftviz.errors import ConfigError
from peftviz.store.runs import list_runs

SEEDS_VARY = power.VarianceComponents(seed=1e-4, docs=4e-6, inter=1.6e-5, n_documents=200, n_seeds=3)
DOCUMENTS_VARY = power.VarianceComponents(seed=2e-6, docs=4e-5, inter=1e-5, n_documents=213, n_seeds=3)
BOTH_VARY = power.VarianceComponents(seed=4e-5, docs=1e-5, inter=2e-5, n_documents=213, n_seeds=3)


def pilot(rng, seed_sd, docs_sd, inter_sd, n_seeds, n_documents, rows, difference=0.0):
    """A simulated pilot, written out plainly: per seed s and document i the difference
    δ + a_s + b_i + c_si (per-document sds, so a mean over N documents has sd / √N), A's draws the mean
    over each bootstrap row's documents, B all zeros."""
    a = rng.normal(0, seed_sd, n_seeds)
    b = rng.normal(0, docs_sd, n_documents)
    c = rng.normal(0, inter_sd, (n_seeds, n_documents))
    per_document = difference + a[:, None] + b[None, :] + c  # (S, N)
    draws = np.stack([per_document[:, row].mean(axis=1) for row in rows], axis=1)  # (S, R)
    seeds = tuple(range(n_seeds))
    return (
        SeedDraws(seeds, per_document.mean(axis=1), draws),
        SeedDraws(seeds, np.zeros(n_seeds), np.zeros_like(draws)),
    )


def test_the_components_average_to_their_known_values_over_simulated_pilots():
    rng = np.random.default_rng(0)
    n_documents, rows = 200, resample_indices(200, 300, seed=0)
    # per document: docs sd 0.06 and interaction sd 0.08 -> on 200 documents 1.8e-5 and 3.2e-5; seeds 1e-4
    found = [
        power.variance_components(*pilot(rng, 0.01, 0.06, 0.08, 4, n_documents, rows), n_documents) for _ in range(300)
    ]
    means = {name: np.mean([getattr(f, name) for f in found]) for name in ("seed", "docs", "inter")}
    assert means["inter"] == pytest.approx(0.08**2 / 200, rel=0.05)
    assert means["docs"] == pytest.approx(0.06**2 / 200, rel=0.15)  # one test set per pilot: a noisy part
    assert means["seed"] == pytest.approx(1e-4, rel=0.15)
    assert found[0].n_documents == 200 and found[0].n_seeds == 4


def test_unpaired_seeds_add_both_methods_seed_variances():
    rng = np.random.default_rng(1)
    rows = resample_indices(100, 200, seed=0)
    a, _ = pilot(rng, 0.01, 0.0, 0.0, 3, 100, rows)
    b, _ = pilot(rng, 0.02, 0.0, 0.0, 3, 100, rows)
    b = SeedDraws((5, 6, 7), b.values, b.draws)  # other seeds: nothing pairs
    parts = power.variance_components(a, b, 100)
    assert parts.seed == pytest.approx(np.var(a.values, ddof=1) + np.var(b.values, ddof=1))
    assert parts.docs == pytest.approx(0, abs=1e-30) and parts.inter == pytest.approx(0, abs=1e-30)


@pytest.mark.parametrize(
    "parts, alpha, design",
    [
        (SEEDS_VARY, 0.05, "seeds"),
        (SEEDS_VARY, 0.05, "5x"),
        (DOCUMENTS_VARY, 0.05 / 15, "documents"),
        (BOTH_VARY, 0.05 / 15, "5x"),
    ],
)
def test_the_recommended_design_reaches_the_target_power_in_the_real_test(parts, alpha, design):
    plan = power.recommend(parts, 0.01, alpha)
    seeds, documents = {
        "seeds": (plan.seeds, parts.n_documents),
        "documents": (parts.n_seeds, plan.documents),
        "5x": (plan.seeds_with_more_documents[5], 5 * parts.n_documents),
    }[design]
    achieved = power.simulated_power(parts, 0.01, seeds, documents, alpha, n_experiments=1000)
    print(f"{design}: {seeds} seeds × {documents} documents, achieved power {achieved:.3f}")
    assert abs(achieved - power.TARGET) <= 0.05


def test_at_the_pilot_the_model_predicts_the_real_tests_power():
    for parts, alpha in ((SEEDS_VARY, 0.05), (BOTH_VARY, 0.05 / 15)):
        predicted = power.power(parts, 0.01, 3, parts.n_documents, alpha)
        achieved = power.simulated_power(parts, 0.01, 3, parts.n_documents, alpha, n_experiments=1000)
        assert abs(predicted - achieved) < 0.04, (predicted, achieved)


def test_no_number_of_seeds_averages_away_the_test_sets_own_noise():
    # the documents' shared part alone, sd 0.0063 against a difference of 0.01 at α 0.0033: under 80% forever
    plan = power.recommend(DOCUMENTS_VARY, 0.01, 0.05 / 15)
    assert plan.seeds is None and plan.documents is not None
    assert power.power(DOCUMENTS_VARY, 0.01, power.MAX_SEEDS, 213, 0.05 / 15) < 0.8


def test_power_rises_with_seeds_and_documents_and_the_plan_is_the_fewest():
    plan = power.recommend(SEEDS_VARY, 0.01, 0.05)
    assert power.power(SEEDS_VARY, 0.01, plan.seeds, 200, 0.05) >= 0.8
    assert power.power(SEEDS_VARY, 0.01, plan.seeds - 1, 200, 0.05) < 0.8
    values = [power.power(SEEDS_VARY, 0.01, s, 200, 0.05) for s in (3, 6, 12, 24)]
    assert values == sorted(values)


def test_no_difference_has_nothing_to_plan_and_bad_settings_say_so():
    plan = power.recommend(SEEDS_VARY, 0.0, 0.05)
    assert plan.seeds is None and plan.documents is None
    # with 3 seeds the bootstrap's seed part is too narrow: at no difference it rejects 11% of the time, not 5%,
    # and the model says so as the real test does
    false_alarms = power.simulated_power(SEEDS_VARY, 0.0, 3, 200, 0.05, n_experiments=1000)
    assert plan.power_now == pytest.approx(false_alarms, abs=0.02) and plan.power_now > 0.09
    with pytest.raises(ConfigError, match="alpha and the target power"):
        power.recommend(SEEDS_VARY, 0.01, alpha=1.5)
    one = SeedDraws((0,), np.zeros(1), np.zeros((1, 10)))
    with pytest.raises(ConfigError, match="at least 2 seeds"):
        power.variance_components(one, one, 10)


def test_the_sentence_reads_the_plan():
    row = pd.Series(
        {
            "a": "prefix-propagation",
            "b": "prefix-tuning",
            "metric": "smooth_ece",
            "difference": -0.0097,
            "seeds_now": 3,
            "documents_now": 213,
            "power_now": 0.21,
            "seeds_needed": 14,
            "documents_needed": 2_345,
            "seeds_at_2x": 9,
            "seeds_at_5x": 5,
            "seeds_at_10x": 4,
        }
    )
    sentence = power_analysis.power_sentence(row)
    assert sentence == (
        "To tell prefix-propagation from prefix-tuning on Smooth ECE at the difference seen here (-0.0097; power now "
        "21% at 3 seeds): about 14 seeds on these 213 documents, or about 2,400 documents at 3 seeds."
    )
    neither = power_analysis.power_sentence(row.copy().replace({14: pd.NA, 2_345: pd.NA}))
    assert (
        "no number of seeds on these 213 documents, or no number of documents at 3 seeds; both together: "
        "about 9 seeds on 426 documents" in neither
    )


def test_report_power_plans_every_pair_of_a_store_of_seed_groups(seeds_store, tmp_path, capsys):
    assert (
        main(
            [
                "report",
                "--power",
                "--metric",
                "accuracy",
                "--metric",
                "ece",
                "--runs-dir",
                str(seeds_store),
                "--csv",
                str(tmp_path / "r"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    table = pd.read_csv(tmp_path / "r-power.csv")
    assert len(table) == 15 * 2  # six groups of two seeds: 15 pairs, two metrics
    assert set(table["alpha_per_pair"].round(6)) == {round(0.05 / 15, 6)}
    planned = [line for line in out.splitlines() if line.startswith("- To tell ")]
    assert len(planned) == 30
    groups = group_stats.select_units(list_runs(seeds_store))
    again = power_analysis.power_table(groups, group_stats.Settings(), ["ece"])
    np.testing.assert_allclose(again["difference"], table.loc[table["metric"] == "ece", "difference"], atol=1e-12)


def test_a_power_target_outside_0_1_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--power", "--power-target", "2"])
    assert "--power-target takes a power between 0 and 1 (0.8), not '2'" in capsys.readouterr().err
