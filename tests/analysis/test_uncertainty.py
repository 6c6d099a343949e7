"""The uncertainty methods' layer: ensembles from stored predictions, temperature, MC dropout, the cache, the
comparison's statistics, and `report --uncertainty`'s hostile input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peftviz.analysis import group_stats
from peftviz.analysis.uncertainty import cache, comparison, ensemble, model_runs, registry
from peftviz.analysis.uncertainty.ensemble import Ensemble, EnsembleOptions, combine
from peftviz.analysis.uncertainty.mc_dropout import MCDropout, MCDropoutOptions
from peftviz.analysis.uncertainty.temperature import Temperature, TemperatureOptions
from peftviz.errors import ConfigError
from peftviz.run_config import preset_config
from peftviz.store.runs import group_runs, list_runs
from peftviz.store.writer import RunWriter
from tests.support.fake_runs import write_run

SETTINGS = group_stats.Settings(n_resamples=200)


@pytest.fixture
def untimed(monkeypatch):
    """Fake runs' parameters rebuild no model: their passes are not timed (NaN), as for a recorded run."""
    monkeypatch.setattr(model_runs, "plain_seconds", lambda run: float("nan"))


def fake_groups(root, seeds=(0, 1, 2), methods=("lora",)):
    for method in methods:
        for seed in seeds:
            write_run(root, method, seed)
    return group_runs(list_runs(root))


# ---------------------------------------------------------------- ensembles


def test_an_ensemble_of_one_is_each_runs_own_predictions_exactly(tmp_path, untimed):
    (group,) = fake_groups(tmp_path)
    for average in ("probabilities", "logits"):
        members = Ensemble.members(group, EnsembleOptions(size=1, average=average))
        for member, run in zip(members, group.runs, strict=True):
            assert member.test.tobytes() == run.predictions("test")[0].tobytes()
            assert member.validation.tobytes() == run.predictions(run.best_epoch)[0].tobytes()


def test_averaging_logits_is_the_softmax_of_the_mean_logits():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, size=(4, 50, 5))  # (k, N, C)
    probs = [np.exp(z) / np.exp(z).sum(axis=1, keepdims=True) for z in logits]
    mean = logits.mean(axis=0)
    expected = np.exp(mean) / np.exp(mean).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(combine(probs, "logits"), expected, atol=1e-6)
    np.testing.assert_allclose(combine(probs, "probabilities"), np.mean(probs, axis=0), atol=1e-6)


def test_a_group_makes_disjoint_ensembles_and_names_the_seeds_left_over(tmp_path, untimed):
    groups = fake_groups(tmp_path, seeds=(0, 1, 2, 3, 4))
    members = Ensemble.members(groups[0], EnsembleOptions(size=2))
    assert [[run.seed for run in m.runs] for m in members] == [[0, 1], [2, 3]]
    assert [m.cost.passes for m in members] == [2, 2]
    assert [m.cost.extra_parameters for m in members] == [4, 4]  # the other member's 4 trained parameters
    result = comparison.compare_uncertainty(groups, comparison.equal_budget(["ensemble"], 2), SETTINGS)
    assert any("leaves out seed 4: ensembles are disjoint" in line for line in result.left_out)


# ---------------------------------------------------------------- a simulated truth


def _softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)


def write_simulated(root, seeds=(0, 1, 2), n=600, n_classes=3, sharpen=3.0, noise=1.0):
    import torch

    """Documents whose true class probabilities q are known; each seed's model sees logits log q + its own noise,
    sharpened by `sharpen`: overconfident, and wrong in its own way. Temperature should undo the sharpening, and
    averaging the seeds should cancel part of their noise."""
    truth = np.random.default_rng(100)
    q = {split: _softmax(truth.normal(0, 1.5, size=(n, n_classes))) for split in ("validation", "test")}
    labels = {split: np.array([truth.choice(n_classes, p=row) for row in q[split]]) for split in q}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        probs = {s: _softmax(sharpen * (np.log(q[s]) + rng.normal(0, noise, size=q[s].shape))) for s in q}
        config = preset_config("smoke", "lora", seed=seed, epochs=1)
        record = {"label_names": ["a", "b", "c"], "parameters": {"trainable": 10}, "environment": {"created": "x"}}
        writer = RunWriter.create(root, config, record)
        writer.write_epoch(
            {"epoch": 1, "micro_f1": 0.5, "accuracy": 0.5, "ece": 0.1, "seconds": 1.0},
            probs["validation"].astype(np.float32),
            labels["validation"],
        )
        writer.write_params({"head.weight": torch.zeros(1)}, 1)  # no model: nothing to time
        writer.write_predictions("test", probs["test"].astype(np.float32), labels["test"])
        writer.finish({"params_epoch": 1, "test": {"accuracy": 0.5, "ece": 0.1}})
    return group_runs(list_runs(root))


def test_on_a_simulated_overconfident_model_temperature_and_ensembles_lower_ece_and_nll(tmp_path, untimed):
    groups = write_simulated(tmp_path)
    requests = comparison.equal_budget(["temperature", "ensemble"], 3)
    result = comparison.compare_uncertainty(groups, requests, SETTINGS, ["ece", "nll"])
    table = result.table.set_index(["uncertainty", "metric"])
    for metric in ("ece", "nll"):
        plain = table.loc[("plain", metric), "mean"]
        for uncertainty in ("temperature", "ensemble of 3 (probabilities)"):
            row = table.loc[(uncertainty, metric)]
            assert row["mean"] < plain, (uncertainty, metric)
            assert row["difference"] == pytest.approx(row["mean"] - plain)
            assert row["difference_high"] < 0, (uncertainty, metric)  # the interval excludes no change
    assert table.loc[("temperature", "ece"), "passes"] == 1
    assert table.loc[("ensemble of 3 (probabilities)", "ece"), "passes"] == 3


# ---------------------------------------------------------------- the cache


def test_a_second_request_computes_nothing_and_a_damaged_file_is_computed_again(tmp_path, untimed, monkeypatch):
    groups = fake_groups(tmp_path)
    calls = []
    real = ensemble.ensemble_member
    monkeypatch.setattr(ensemble, "ensemble_member", lambda runs, average: calls.append(1) or real(runs, average))
    first = Ensemble.members(groups[0], EnsembleOptions(size=3))
    assert len(calls) == 1
    again = Ensemble.members(groups[0], EnsembleOptions(size=3))
    assert len(calls) == 1 and again[0].test.tobytes() == first[0].test.tobytes()
    (path,) = (groups[0].runs[0].path / "analysis" / "uncertainty").glob("ensemble-*.npz")
    path.write_bytes(b"not an npz")
    Ensemble.members(groups[0], EnsembleOptions(size=3))
    assert len(calls) == 2
    assert cache.read_member(
        path,
        cache.member_key("ensemble", {"size": 3, "average": "probabilities"}, ensemble.__name__, groups[0].runs),
        (first[0].validation.shape, first[0].test.shape),
    )


def test_a_kill_while_writing_leaves_no_file_under_the_cache_name(tmp_path, untimed, monkeypatch):
    from peftviz import files

    groups = fake_groups(tmp_path)

    def killed(path, arrays):
        (path.parent / f".{path.name}.tmp-killed").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr("peftviz.store.caches.write_npz_atomic", killed)
    with pytest.raises(KeyboardInterrupt):
        Ensemble.members(groups[0], EnsembleOptions(size=3))
    folder = groups[0].runs[0].path / "analysis" / "uncertainty"
    assert not list(folder.glob("ensemble-*.npz"))
    monkeypatch.setattr("peftviz.store.caches.write_npz_atomic", files.write_npz_atomic)
    (_member,) = Ensemble.members(groups[0], EnsembleOptions(size=3))
    assert len(list(folder.glob("ensemble-*.npz"))) == 1


def test_other_options_or_changed_predictions_never_read_a_cached_member(tmp_path, untimed):
    groups = fake_groups(tmp_path)
    runs = groups[0].runs
    key = cache.member_key("ensemble", {"size": 3, "average": "probabilities"}, ensemble.__name__, runs)
    assert key != cache.member_key("ensemble", {"size": 3, "average": "logits"}, ensemble.__name__, runs)
    assert key != cache.member_key("ensemble", {"size": 3, "average": "probabilities"}, ensemble.__name__, runs[::-1])


# ---------------------------------------------------------------- MC dropout on trained runs


def _without_dropout(load):
    def loaded(run, device="auto", **kwargs):
        model, tokenizer = load(run, device, **kwargs)
        for module in model.modules():
            if isinstance(module, __import__("torch").nn.Dropout):
                module.p = 0.0
        return model, tokenizer

    return loaded


def test_mc_dropout_with_dropout_0_equals_the_runs_own_predictions(seeds_store, tmp_path, monkeypatch):
    import shutil

    store = tmp_path / "store"
    shutil.copytree(seeds_store, store, ignore=shutil.ignore_patterns("analysis"))
    group = next(g for g in group_runs(list_runs(store)) if g.label == "prefix-tuning")
    on = MCDropout.members(group, MCDropoutOptions(passes=3, seed=0))
    again = MCDropout.members(group, MCDropoutOptions(passes=3, seed=0))
    other = MCDropout.members(group, MCDropoutOptions(passes=3, seed=1))
    for a, b, c, run in zip(on, again, other, group.runs, strict=True):
        stored = run.predictions("test")[0]
        assert a.test.tobytes() == b.test.tobytes()  # seeded masks: the same predictions
        assert np.abs(a.test - c.test).max() > 1e-4  # other masks: other predictions
        assert np.abs(a.test - stored).max() > 1e-4  # dropout on: not the deterministic pass
        assert a.cost.passes == 3 and a.cost.extra_parameters == 0 and a.cost.seconds_per_1000 > 0
    monkeypatch.setattr(model_runs, "load_trained", _without_dropout(model_runs.load_trained))
    off = MCDropout.members(group, MCDropoutOptions(passes=3, seed=2))
    for member, run in zip(off, group.runs, strict=True):
        np.testing.assert_allclose(member.test, run.predictions("test")[0], atol=1e-6, rtol=0)
        np.testing.assert_allclose(member.validation, run.predictions(run.best_epoch)[0], atol=1e-6, rtol=0)


def test_temperature_members_are_the_calibration_pages_map(tmp_path, untimed):
    from peftviz.calibration.recalibration import recalibrate

    groups = write_simulated(tmp_path, seeds=(0,))
    (member,) = Temperature.members(groups[0], TemperatureOptions())
    run = groups[0].runs[0]
    val, val_labels = run.predictions(run.best_epoch)
    np.testing.assert_allclose(member.test, recalibrate(val, val_labels, run.predictions("test")[0], "temperature"))


# ---------------------------------------------------------------- what cannot be used is named


def test_runs_without_parameters_are_named_where_a_model_must_run(recorded_store):
    groups = group_stats.choose(list_runs(recorded_store)).units
    requests = comparison.equal_budget(["mc-dropout", "temperature"], 2)
    result = comparison.compare_uncertainty(groups[:1], requests, SETTINGS, ["ece"])
    assert any("no parameters to run" in line for line in result.left_out)
    assert set(result.table["uncertainty"]) == {"plain", "temperature"}
    assert result.table["seconds_per_1000"].isna().all()  # nothing of a recorded run can be timed


def test_a_group_of_one_seed_is_named_where_the_ensemble_needs_more(tmp_path, untimed):
    groups = fake_groups(tmp_path, seeds=(0,))
    result = comparison.compare_uncertainty(groups, comparison.equal_budget(["ensemble"], 3), SETTINGS, ["ece"])
    assert result.left_out == [
        (f"ensemble of 3 (probabilities) of {groups[0].name} left out: an ensemble of 3 needs 3 seeds, the group has 1")
    ]
    assert list(result.table["uncertainty"].unique()) == ["plain"]


# ---------------------------------------------------------------- hostile input


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.text(max_size=30), st.integers(), st.none(), st.floats()))
def test_any_uncertainty_list_is_parsed_or_refused_in_one_line(text):
    try:
        names = registry.parse_names(text)
    except ConfigError as err:
        assert "\n" not in str(err) and "--uncertainty" in str(err)
    else:
        assert names and set(names) <= set(registry.CLASSES) and len(set(names)) == len(names)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([EnsembleOptions, MCDropoutOptions]),
    st.dictionaries(
        st.sampled_from(["size", "average", "passes", "seed", "other"]),
        st.one_of(st.integers(-10, 10**7), st.floats(allow_nan=True), st.booleans(), st.text(max_size=8)),
        max_size=3,
    ),
)
def test_uncertainty_options_take_sound_values_or_refuse_in_one_line(options_class, values):
    try:
        options = options_class.from_dict(values)
    except ConfigError as err:
        assert "\n" not in str(err)
    else:
        for name, value in values.items():
            assert getattr(options, name) == value and not isinstance(value, bool) or name == "average"


REFUSALS = [
    (["--uncertainty", "bayes"], "unknown method 'bayes'"),
    (["--uncertainty", ""], "--uncertainty takes comma-separated names"),
    (["--uncertainty", "ensemble,ensemble"], "names ensemble more than once"),
    (["--uncertainty", "ensemble", "--passes", "0"], "--passes takes a whole number from 1 to 1000, not '0'"),
    (["--uncertainty", "ensemble", "--passes", "2.5"], "--passes takes a whole number from 1 to 1000, not '2.5'"),
    (["--uncertainty", "ensemble", "--passes", "10000"], "--passes takes a whole number from 1 to 1000"),
    (["--uncertainty", "temperature", "--epoch", "1"], "--uncertainty judges the test split"),
    (["--uncertainty", "temperature", "--ensemble-average", "median"], "invalid choice: 'median'"),
]


@pytest.mark.parametrize(("argv", "says"), REFUSALS)
def test_report_uncertainty_refuses_bad_input_in_one_line(tmp_path, capsys, untimed, argv, says):
    from peftviz.cli import main

    fake_groups(tmp_path / "runs")
    try:
        status = main(["report", "--runs-dir", str(tmp_path / "runs"), "--csv", str(tmp_path / "r"), *argv])
    except SystemExit as exit:  # argparse's refusals
        status = exit.code
    err = capsys.readouterr().err.strip().splitlines()
    assert status != 0
    assert says in err[-1] and "Traceback" not in "\n".join(err)


def test_report_uncertainty_prints_one_row_per_method_and_uncertainty_method(tmp_path, capsys, untimed):
    from peftviz.cli import main

    fake_groups(tmp_path / "runs", methods=("lora", "prefix-tuning"))
    argv = ["report", "--runs-dir", str(tmp_path / "runs"), "--csv", str(tmp_path / "r"), "--resamples", "200"]
    assert main([*argv, "--uncertainty", "ensemble,temperature", "--passes", "3"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| lora", "| prefix-tuning"))]
    assert [row.split(" | ")[1] for row in rows] == [
        "plain",
        "ensemble of 3 (probabilities)",
        "temperature",
    ] * 2  # as asked
    assert all("not measured" in row for row in rows)
    written = (tmp_path / "r-uncertainty.csv").read_text().splitlines()
    assert len(written) == 1 + 2 * 3 * 5  # two methods, three rows each, five metrics
