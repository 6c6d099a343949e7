"""Groups of seeds, their summary and pairs tables (`peftviz.analysis.group_stats`), recomputed here from the
stored predictions with scipy, statsmodels and the estimators directly; the `report` command; the group curves
of the Calibration page."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests

from peftviz import calibration
from peftviz.analysis import calibration as analysis
from peftviz.analysis import group_stats
from peftviz.calibration import estimators
from peftviz.cli import main
from peftviz.run_config import over_seeds, parse_seeds
from peftviz.store.runs import Group, group_runs, list_runs
from peftviz.sweep.variants import comparison_configs
from tests.support.helpers import seed_values_and_draws, two_level_by_hand

METRICS = ("accuracy", "ece", "smooth_ece", "brier")
SETTINGS = group_stats.Settings("test", 10, "width", 60, 0)


@pytest.fixture(scope="module")
def groups(seeds_store):
    return group_runs(list_runs(seeds_store))


@pytest.fixture(scope="module")
def result(groups):
    return group_stats.stats_of_groups(groups, SETTINGS, METRICS)


def t_interval(values):
    """The 95% t-interval of a mean, written out: mean ± t_{0.975, n-1} s / √n."""
    values = np.asarray(values, dtype=float)
    half = scipy_stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return values.mean(), values.mean() - half, values.mean() + half


# ---------------------------------------------------------------- seeds and groups


def test_seeds_parse_as_a_count_or_a_list():
    assert parse_seeds("3") == [0, 1, 2] and parse_seeds("0,1,2") == [0, 1, 2] and parse_seeds("5,") == [5]
    for bad in ("0", "x", "1,1", "-1", ""):
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_over_seeds_goes_seed_by_seed_and_keeps_the_data_seed():
    configs = over_seeds(comparison_configs("smoke"), [3, 4])
    assert [c.seed for c in configs] == [3] * 6 + [4] * 6
    assert {c.data_seed for c in configs} == {0}


def test_seed_runs_form_one_group_per_method_evaluated_on_the_same_examples(groups):
    assert len(groups) == 6
    assert all(group.seeds == [0, 1] for group in groups)
    labels = [run.predictions("test")[1] for group in groups for run in group.runs]
    assert all(np.array_equal(labels[0], other) for other in labels[1:])
    validation = [run.predictions(1)[1] for group in groups for run in group.runs]
    assert all(np.array_equal(validation[0], other) for other in validation[1:])


def test_a_different_training_seed_changes_the_run_but_not_the_group(groups):
    group = next(g for g in groups if g.label == "prefix-propagation")
    first, second = (run.predictions("test")[0] for run in group.runs)
    assert not np.array_equal(first, second)
    assert group.runs[0].group_key == group.runs[1].group_key


# ---------------------------------------------------------------- the summary and pairs tables


def values_and_draws(group, metric, n_resamples=60, seed=0, which="test"):
    return seed_values_and_draws(group.runs, metric, which, n_resamples, seed)


def test_summary_is_the_mean_over_seeds_with_the_two_level_bootstrap(groups, result):
    for group in groups:
        for metric in METRICS:
            values, draws = values_and_draws(group, metric)
            assert draws.shape == (2, 60)
            row = result.summary[(result.summary["unit"] == group.label) & (result.summary["metric"] == metric)]
            low, high = np.quantile(two_level_by_hand(draws), [0.025, 0.975])
            assert (row["mean"].item(), row["low"].item(), row["high"].item()) == pytest.approx(
                (values.mean(), low, high), abs=1e-12
            )
            assert row["interval"].item() == "bootstrap over seeds × examples"
            if metric in ("ece", "smooth_ece", "accuracy"):
                assert 0 <= row["low"].item() <= row["high"].item() <= 1


def test_summary_with_t_over_seeds_is_the_t_interval(groups):
    t_result = group_stats.stats_of_groups(groups, replace(SETTINGS, group_interval="t"), ["accuracy", "brier"])
    for group in groups:
        for metric in ("accuracy", "brier"):
            values = [
                estimators.point_estimates(*run.predictions("test"), 10, "width", [metric])[metric]
                for run in group.runs
            ]
            row = t_result.summary[(t_result.summary["unit"] == group.label) & (t_result.summary["metric"] == metric)]
            mean, low, high = t_interval(values)
            assert row["mean"].item() == pytest.approx(mean, abs=1e-12)
            if values[0] != values[1]:
                assert (row["low"].item(), row["high"].item()) == pytest.approx((low, high), abs=1e-12)
            assert row["interval"].item() == "t over seeds"
    assert set(t_result.pairs["test"]) == {"paired t (seeds)"}
    with pytest.raises(ValueError, match="group_interval must be one of bootstrap, t"):
        group_stats.Settings(group_interval="z")


def test_an_estimate_of_the_summary_is_recomputed_from_its_definition(groups, result):
    group = groups[0]
    values = [calibration.ece(*run.predictions("test"), 10) for run in group.runs]
    row = result.summary[(result.summary["unit"] == group.label) & (result.summary["metric"] == "ece")]
    assert row["mean"].item() == pytest.approx(np.mean(values), abs=1e-12)


def test_pairs_are_paired_by_seed_and_holm_adjusted_per_metric(groups, result):
    from rliable.metrics import probability_of_improvement

    pairs = result.pairs
    assert len(pairs) == 15 * len(METRICS)  # 6 methods: 15 pairs
    by_label = {group.label: group for group in groups}
    for metric in ("ece", "brier"):
        rows = pairs[pairs["metric"] == metric]
        for _, row in rows.iterrows():
            (a, draws_a), (b, draws_b) = (
                values_and_draws(by_label[row["a"]], metric),
                values_and_draws(by_label[row["b"]], metric),
            )
            deltas = two_level_by_hand(draws_a) - two_level_by_hand(draws_b)  # same seeds: the same seed rows for both
            estimate = np.mean(a) - np.mean(b)
            assert row["difference"] == pytest.approx(estimate, abs=1e-12)
            assert (row["low"], row["high"]) == pytest.approx(tuple(np.quantile(deltas, [0.025, 0.975])), abs=1e-12)
            p = (1 + np.sum(np.abs(deltas - estimate) >= abs(estimate))) / 61
            assert row["p"] == pytest.approx(p, abs=1e-12)
            assert row["test"] == "two-level bootstrap (seeds paired)"
            lower_is_better = -1.0  # ece and brier: the lower run is the better one
            expected = probability_of_improvement(lower_is_better * a[:, None], lower_is_better * b[:, None])
            assert row["p_better"] == pytest.approx(expected, abs=1e-12)
            assert 0 <= row["p_better_low"] <= row["p_better_high"] <= 1
        finite = rows["p"].notna().to_numpy()
        expected = multipletests(rows["p"].to_numpy()[finite], method="holm")[1]
        assert np.allclose(rows["p_holm"].to_numpy()[finite], expected, atol=1e-12)
        assert list(rows["significant"]) == list(rows["p_holm"] < 0.05)


def test_single_runs_compare_by_the_paired_bootstrap(groups):
    units = [Group(group.runs[0].name, group.runs[:1]) for group in groups[:3]]
    result = group_stats.stats_of_groups(units, SETTINGS, ["ece"])
    assert set(result.pairs["test"]) == {"paired bootstrap"}
    assert result.pairs["p_better"].isna().all()  # one run each: no probability of improvement over seeds
    row = result.summary.iloc[0]
    probs, labels = units[0].runs[0].predictions("test")
    found = estimators.estimate_all(probs, labels, 10, "width", 60, 0.95, 0, ["ece"])["ece"]
    assert (row["mean"], row["low"], row["high"]) == pytest.approx((found.value, found.low, found.high), abs=1e-12)
    assert row["interval"] == "bootstrap over examples"


def test_units_are_chosen_by_key_run_or_label_and_must_share_a_split(seeds_store, groups, tmp_path):
    runs = list_runs(seeds_store)
    assert [g.key for g in group_stats.select_units(runs)] == [g.key for g in groups]
    assert group_stats.select_units(runs, [groups[0].key])[0].seeds == [0, 1]
    assert len(group_stats.select_units(runs, [groups[0].runs[1].name])[0].runs) == 1
    assert group_stats.select_units(runs, ["prefix-tuning"])[0].label == "prefix-tuning"
    with pytest.raises(ValueError, match="no group, run or method named"):
        group_stats.select_units(runs, ["nothing"])
    other = runs[0]
    other.config = replace(other.config, data_seed=7)
    chosen = {run.name for g in group_stats.select_units(runs) for run in g.runs}
    assert other.name not in chosen  # not the common split
    with pytest.raises(ValueError, match="different data"):
        group_stats.select_units(runs, [other.name, runs[1].name])


def test_report_prints_markdown_and_writes_the_same_numbers_as_csv(seeds_store, result, tmp_path, capsys):
    code = main(
        [
            "report",
            "--runs-dir",
            str(seeds_store),
            *[f"--metric={m}" for m in METRICS],
            "--resamples",
            "60",
            "--csv",
            str(tmp_path / "r"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "| unit | seeds | accuracy | ece | smooth_ece | brier |" in out and "| prefix-propagation | 0,1 |" in out
    summary = pd.read_csv(tmp_path / "r-summary.csv")
    pairs = pd.read_csv(tmp_path / "r-pairs.csv")
    assert np.allclose(summary["mean"], result.summary["mean"], atol=1e-12)
    assert np.allclose(pairs["difference"], result.pairs["difference"], atol=1e-12)
    assert main(["report", "--runs-dir", str(seeds_store), "nothing"]) == 1


# ---------------------------------------------------------------- group curves


def test_a_groups_ece_over_epochs_is_the_mean_of_its_seeds_with_the_two_level_bootstrap(groups):
    group = groups[1]
    curve = analysis.group_ece_over_epochs(group, 10, "width", "g", n_resamples=80)
    assert list(curve["epoch"]) == [1, 2]
    for _, row in curve.iterrows():
        values, draws = values_and_draws(group, "ece", n_resamples=80, which=int(row["epoch"]))
        low, high = np.quantile(two_level_by_hand(draws), [0.025, 0.975])
        assert (row["ece"], row["low"], row["high"]) == pytest.approx((values.mean(), low, high), abs=1e-12)
        assert row["members"] == pytest.approx(values, abs=1e-12)
        assert row["low"] >= 0  # the t-interval over these two seeds reached below 0 at epoch 1


def test_a_groups_smooth_curve_is_the_pointwise_mean_of_its_seeds(groups):
    """Two seeds: their mean and each seed's curve, no band (issue 45: t at one degree of freedom is 12.7, and
    the band filled [0, 1] in stripes); from three seeds, the t-interval of the mean."""
    diagrams = [analysis.smooth_diagram(run, 2, 20) for run in groups[1].runs]
    mean = analysis.group_mean_curve(diagrams, seeds=groups[1].seeds)
    stacked = np.stack([d.curve for d in diagrams])
    assert np.allclose(mean.curve, stacked.mean(axis=0)) and np.array_equal(mean.seed_curves, stacked)
    assert not mean.banded and np.isnan(mean.lower).all() and np.isnan(mean.upper).all()
    three = analysis.group_mean_curve([*diagrams, diagrams[0]])
    stacked = np.stack([d.curve for d in [*diagrams, diagrams[0]]])
    half = scipy_stats.t.ppf(0.975, 2) * stacked.std(axis=0, ddof=1) / np.sqrt(3)
    assert (
        three.banded and np.allclose(three.upper - three.curve, half) and np.allclose(three.curve - three.lower, half)
    )


def test_report_on_one_dataset_of_a_store_holding_several(mixed_store, tmp_path, capsys):
    """`report --dataset`: one report per dataset of a comparison over several (the paper's table)."""
    runs = list_runs(mixed_store)
    csv_dataset = next(run.config.dataset for run in runs if run.config.dataset.endswith("topics.csv"))
    on_it = [run for run in runs if run.config.dataset == csv_dataset]
    assert 0 < len(on_it) < len(runs)  # the store holds other datasets too
    argv = [
        "report",
        "--runs-dir",
        str(mixed_store),
        "--dataset",
        csv_dataset,
        "--metric",
        "accuracy",
        "--resamples",
        "20",
        "--csv",
        str(tmp_path / "r"),
    ]
    assert main(argv) == 0
    summary = pd.read_csv(tmp_path / "r-summary.csv")
    assert set(summary["method"]) == {group.label for group in group_runs(on_it)}
    assert main(["report", "--runs-dir", str(mixed_store), "--dataset", "arxiv"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("peftviz: error: no run in the store is on dataset 'arxiv'; its datasets: ")
    assert err.count("\n") == 1 and "bbc-news" in err
