"""Groups of seeds and the comparison table, recomputed here from the stored predictions with scipy,
statsmodels and the estimators directly; the `report` command; the group curves of the Calibration page."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests

from peftviz import calibration, estimators
from peftviz.__main__ import main
from peftviz.analysis import calibration as analysis
from peftviz.analysis import comparison as cmp
from peftviz.config import comparison, over_seeds, parse_seeds
from peftviz.runs import Group, group_runs, list_runs

METRICS = ("accuracy", "ece", "smooth_ece", "brier")
SETTINGS = cmp.Settings("test", 10, "width", 60, 0)


@pytest.fixture(scope="module")
def groups(seeds_store):
    return group_runs(list_runs(seeds_store))


@pytest.fixture(scope="module")
def result(groups):
    return cmp.compare_groups(groups, SETTINGS, METRICS)


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
    configs = over_seeds(comparison("smoke"), [3, 4])
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


# ---------------------------------------------------------------- the comparison table


def test_summary_is_the_mean_over_seeds_with_its_t_interval(groups, result):
    for group in groups:
        for metric in METRICS:
            values = [estimators.point_estimates(*run.predictions("test"), 10, "width", [metric])[metric]
                      for run in group.runs]  # fmt: skip
            row = result.summary[(result.summary["unit"] == group.label) & (result.summary["metric"] == metric)]
            mean, low, high = t_interval(values)
            assert row["mean"].item() == pytest.approx(mean, abs=1e-12)
            if values[0] != values[1]:
                assert row["low"].item() == pytest.approx(low, abs=1e-12)
                assert row["high"].item() == pytest.approx(high, abs=1e-12)
            assert row["interval"].item() == "t over seeds"


def test_an_estimate_of_the_summary_is_recomputed_from_its_definition(groups, result):
    group = groups[0]
    values = [calibration.ece(*run.predictions("test"), 10) for run in group.runs]
    row = result.summary[(result.summary["unit"] == group.label) & (result.summary["metric"] == "ece")]
    assert row["mean"].item() == pytest.approx(np.mean(values), abs=1e-12)


def test_pairs_are_paired_by_seed_and_holm_adjusted_per_metric(groups, result):
    pairs = result.pairs
    assert len(pairs) == 15 * len(METRICS)  # 6 methods: 15 pairs
    by_label = {group.label: group for group in groups}
    for metric in ("ece", "brier"):
        rows = pairs[pairs["metric"] == metric]
        for _, row in rows.iterrows():
            a = [
                estimators.point_estimates(*r.predictions("test"), 10, "width", [metric])[metric]
                for r in by_label[row["a"]].runs
            ]
            b = [
                estimators.point_estimates(*r.predictions("test"), 10, "width", [metric])[metric]
                for r in by_label[row["b"]].runs
            ]
            assert row["difference"] == pytest.approx(np.mean(a) - np.mean(b), abs=1e-12)
            assert row["test"] == "paired t (seeds)"
            if not np.allclose(np.subtract(a, b), np.subtract(a, b)[0]):
                assert row["p"] == pytest.approx(scipy_stats.ttest_rel(a, b).pvalue, abs=1e-12)
        finite = rows["p"].notna().to_numpy()
        expected = multipletests(rows["p"].to_numpy()[finite], method="holm")[1]
        assert np.allclose(rows["p_holm"].to_numpy()[finite], expected, atol=1e-12)
        assert list(rows["significant"]) == list(rows["p_holm"] < 0.05)


def test_single_runs_compare_by_the_paired_bootstrap(groups):
    units = [Group(group.runs[0].name, group.runs[:1]) for group in groups[:3]]
    result = cmp.compare_groups(units, SETTINGS, ["ece"])
    assert set(result.pairs["test"]) == {"paired bootstrap"}
    row = result.summary.iloc[0]
    probs, labels = units[0].runs[0].predictions("test")
    found = estimators.estimate_all(probs, labels, 10, "width", 60, 0.95, 0, ["ece"])["ece"]
    assert (row["mean"], row["low"], row["high"]) == pytest.approx((found.value, found.low, found.high), abs=1e-12)
    assert row["interval"] == "bootstrap over examples"


def test_units_are_chosen_by_key_run_or_label_and_must_share_a_split(seeds_store, groups, tmp_path):
    runs = list_runs(seeds_store)
    assert [g.key for g in cmp.select_units(runs)] == [g.key for g in groups]
    assert cmp.select_units(runs, [groups[0].key])[0].seeds == [0, 1]
    assert len(cmp.select_units(runs, [groups[0].runs[1].name])[0].runs) == 1
    assert cmp.select_units(runs, ["prefix-tuning"])[0].label == "prefix-tuning"
    with pytest.raises(ValueError, match="no group, run or method named"):
        cmp.select_units(runs, ["nothing"])
    other = runs[0]
    other.config = replace(other.config, data_seed=7)
    assert other.name not in {run.name for g in cmp.select_units(runs) for run in g.runs}  # not the common split
    with pytest.raises(ValueError, match="different data"):
        cmp.select_units(runs, [other.name, runs[1].name])


def test_report_prints_markdown_and_writes_the_same_numbers_as_csv(seeds_store, result, tmp_path, capsys):
    code = main(["report", "--runs-dir", str(seeds_store), *[f"--metric={m}" for m in METRICS],
                 "--resamples", "60", "--csv", str(tmp_path / "r")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "| unit | seeds | accuracy | ece | smooth_ece | brier |" in out and "| prefix-propagation | 0,1 |" in out
    summary = pd.read_csv(tmp_path / "r-summary.csv")
    pairs = pd.read_csv(tmp_path / "r-pairs.csv")
    assert np.allclose(summary["mean"], result.summary["mean"], atol=1e-12)
    assert np.allclose(pairs["difference"], result.pairs["difference"], atol=1e-12)
    assert main(["report", "--runs-dir", str(seeds_store), "nothing"]) == 1


# ---------------------------------------------------------------- group curves


def test_a_groups_ece_over_epochs_is_the_mean_of_its_seeds_with_their_t_interval(groups):
    group = groups[1]
    curve = analysis.group_ece_over_epochs(group, 10, "width", "g")
    assert list(curve["epoch"]) == [1, 2]
    for _, row in curve.iterrows():
        values = [calibration.ece(*run.predictions(row["epoch"]), 10) for run in group.runs]
        assert (row["ece"], row["low"], row["high"]) == pytest.approx(t_interval(values), abs=1e-12)
        assert row["members"] == pytest.approx(values, abs=1e-12)


def test_a_groups_smooth_curve_is_the_pointwise_mean_of_its_seeds(groups):
    diagrams = [analysis.smooth_diagram(run, 2, 20) for run in groups[1].runs]
    mean = analysis.group_mean_curve(diagrams)
    stacked = np.stack([d.curve for d in diagrams])
    assert np.allclose(mean.curve, stacked.mean(axis=0))
    half = scipy_stats.t.ppf(0.975, 1) * stacked.std(axis=0, ddof=1) / np.sqrt(2)
    assert np.allclose(mean.upper - mean.curve, half) and np.allclose(mean.curve - mean.lower, half)
