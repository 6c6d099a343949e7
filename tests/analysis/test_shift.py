"""Calibration under shift: the evaluation of stored runs on shifted test sets (exact at severity 0, cached,
resumable after a kill, idempotent, on Ray), domain shifts, the table's statistics, and `report --shift`."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from peftviz.analysis import group_stats
from peftviz.analysis.shift import engines, evaluate, table
from peftviz.analysis.shift.evaluate import cached_shift, evaluate_run
from peftviz.analysis.shift.shifts import Shift, shifted_texts
from peftviz.analysis.uncertainty.comparison import equal_budget
from peftviz.calibration.estimators import point_estimates
from peftviz.calibration.recalibration import recalibrate
from peftviz.errors import DataError
from peftviz.store.runs import group_runs, list_runs
from tests.support.fake_runs import LABELS, write_run
from tests.support.helpers import run_report

SETTINGS = group_stats.Settings(n_resamples=200)
TWO = [Shift("typo", 2), Shift("word-deletion", 4)]


@pytest.fixture
def store(smoke_store, tmp_path) -> Path:
    """A copy of the smoke store without its analysis caches: each test evaluates from nothing."""
    copy = tmp_path / "store"
    shutil.copytree(smoke_store, copy, ignore=shutil.ignore_patterns("analysis"))
    return copy


def a_run(store: Path, label: str = "prefix-tuning"):
    return next(run for run in list_runs(store) if run.label == label)


def cache_files(run) -> list[Path]:
    return sorted((run.path / "analysis" / "shift").glob("*"))


class CountedPredict:
    """`predict` counted, raising KeyboardInterrupt (a kill) on call number `kill_at`."""

    def __init__(self, predict, kill_at: int | None = None):
        self.predict, self.kill_at, self.calls = predict, kill_at, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.kill_at:
            raise KeyboardInterrupt
        return self.predict(*args, **kwargs)


@pytest.fixture
def counted(monkeypatch):
    from peftviz.training import inference

    def install(kill_at=None) -> CountedPredict:
        counter = CountedPredict(inference.predict, kill_at)
        monkeypatch.setattr(inference, "predict", counter)
        return counter

    return install


def test_severity_0_is_the_stored_test_predictions_and_the_model_on_the_clean_text_agrees(store):
    run = a_run(store)
    clean = Shift("typo", 0)
    (found,) = evaluate_run(run, [clean])
    stored, labels = run.predictions("test")
    assert found.probs.tobytes() == stored.tobytes() and np.array_equal(found.labels, labels)
    assert cache_files(run) == []  # nothing run, nothing written
    (again,) = evaluate._compute(run, [clean], None)  # the shift's own path on the unchanged text
    np.testing.assert_allclose(again.probs, stored, atol=1e-6, rtol=0)


def test_a_kill_leaves_whole_files_only_and_the_next_request_finishes_without_redoing_them(store, counted):
    run = a_run(store)
    counter = counted(kill_at=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate_run(run, TWO)
    files = cache_files(run)
    assert [path.name.split("-")[0] for path in files] == ["typo"]  # the first shift, written whole
    assert not list(run.path.rglob("*.tmp*")) and cached_shift(run, TWO[0]) is not None
    counter = counted()
    first = evaluate_run(run, TWO)
    assert counter.calls == 1  # only the shift the kill interrupted
    second = evaluate_run(run, TWO)
    assert counter.calls == 1  # a second request evaluates nothing
    for a, b in zip(first, second, strict=True):
        assert a.probs.tobytes() == b.probs.tobytes() and a.seconds_per_1000 > 0


def test_a_damaged_cache_file_is_computed_again(store, counted):
    run = a_run(store)
    (before,) = evaluate_run(run, TWO[:1])
    (path,) = cache_files(run)
    path.write_bytes(b"not an npz")
    counter = counted()
    (after,) = evaluate_run(run, TWO[:1])
    assert counter.calls == 1 and after.probs.tobytes() == before.probs.tobytes()


def test_corrupted_text_lowers_accuracy_and_raises_nll_of_the_smoke_runs(store):
    run = a_run(store, "fine-tuning")
    clean, worst = evaluate_run(run, [Shift("typo", 0), Shift("keyboard", 5)])
    nll = [-np.log(item.probs[np.arange(len(item.labels)), item.labels] + 1e-12).mean() for item in (clean, worst)]
    assert not np.array_equal(clean.probs, worst.probs) and np.array_equal(clean.labels, worst.labels)
    assert nll[1] != nll[0]


def test_a_domain_shift_reads_another_dataset_by_label_name_and_refuses_other_labels(store, tmp_path):
    run = a_run(store)
    names = run.label_names
    good = tmp_path / "other.csv"
    good.write_text(
        "text,label\n" + "\n".join(f"a story about {n} number {i},{n}" for i in range(3) for n in names[::-1])
    )
    texts, labels = shifted_texts(run, Shift("domain", None, str(good)))
    assert len(texts) == 3 * len(names)  # every document, of every split
    assert all(text.split()[3] == names[label] for text, label in zip(texts, labels, strict=True))
    (found,) = evaluate_run(run, [Shift("domain", None, str(good))])
    assert found.probs.shape == (3 * len(names), len(names))
    bad = tmp_path / "weather.csv"
    bad.write_text("text,label\n" + "\n".join(f"sunny {i},weather\nshares up {i},business" for i in range(3)))
    with pytest.raises(DataError, match="has labels the runs were not trained on \\(weather\\)") as err:
        evaluate_run(run, [Shift("domain", None, str(bad))])
    assert "\n" not in str(err.value)


def test_the_table_at_severity_0_is_the_reports_own_numbers_and_the_families_mean_is_tested_between_methods(
    seeds_store, tmp_path
):
    from peftviz.calibration import stats

    copy = tmp_path / "store"
    shutil.copytree(seeds_store, copy, ignore=shutil.ignore_patterns("analysis"))
    groups = [
        g for g in group_runs(list_runs(copy)) if g.label in ("fine-tuning", "prefix-tuning", "prefix-propagation")
    ]
    assert len(groups) == 3 and all(len(g.runs) == 2 for g in groups)
    shifts = [Shift("typo", 0), Shift("typo", 2), Shift("word-deletion", 2)]
    requests = equal_budget(["temperature", "mc-dropout"], 2)
    result = table.shift_table(groups, shifts, SETTINGS, ("accuracy", "ece"), requests)
    # plain and temperature; per shift, and the families' mean at severity 2; two metrics
    assert len(result.table) == 2 * len(groups) * (len(shifts) + 1) * 2
    assert result.left_out == ["mc-dropout, T = 2 is not evaluated under shift: it would run the model on every set"]
    long = result.table.set_index(["method", "uncertainty", "shift", "metric"])

    # temperature: fitted on the clean validation, applied to the shifted test predictions
    eces = []
    for run in groups[0].runs:
        (shifted,) = evaluate_run(run, [shifts[1]])
        val, val_labels = run.predictions(run.best_epoch)
        scaled = recalibrate(val, val_labels, shifted.probs, "temperature")
        eces.append(point_estimates(scaled, shifted.labels, 10, "width", metrics=["ece"])["ece"])
    assert long.loc[("fine-tuning", "temperature", "typo 2", "ece"), "mean"] == pytest.approx(np.mean(eces), abs=1e-6)

    # severity 0: the report's own numbers of the plain groups
    plain = group_stats.stats_of_groups(groups, SETTINGS, ["accuracy", "ece"]).summary.set_index(["unit", "metric"])
    for group in groups:
        for metric in ("accuracy", "ece"):
            row = long.loc[(group.label, "plain", "clean", metric)]
            assert row["mean"] == pytest.approx(plain.loc[(group.label, metric), "mean"], abs=1e-12)
            assert (row["low"], row["high"]) == pytest.approx(tuple(plain.loc[(group.label, metric), ["low", "high"]]))
            # the families' mean: the mean of the two families' means, its interval around it
            both = [long.loc[(group.label, "plain", name, metric), "mean"] for name in ("typo 2", "word-deletion 2")]
            mean_row = long.loc[(group.label, "plain", "all families 2", metric)]
            assert mean_row["mean"] == pytest.approx(np.mean(both), abs=1e-12)
            assert mean_row["low"] <= mean_row["mean"] <= mean_row["high"]

    pairs = result.pairs
    assert len(pairs) == 3 * 2 and set(pairs["shift"]) == {"all families 2"}  # three pairs, per metric
    for _, rows in pairs.groupby("metric"):
        np.testing.assert_allclose(rows["p_holm"], stats.holm(rows["p"].to_numpy()))
    first = pairs[(pairs["metric"] == "ece")].iloc[0]
    a = long.loc[(first["a"], "plain", "all families 2", "ece"), "mean"]
    b = long.loc[(first["b"], "plain", "all families 2", "ece"), "mean"]
    assert first["difference"] == pytest.approx(a - b, abs=1e-12)
    assert set(result.coverage["severity"]) == {0, 2} and result.coverage["coverage"].between(0, 1).all()


def test_the_families_spread_is_the_lowest_median_and_highest_family_mean():
    rows = [
        {"method": "lora", "uncertainty": "plain", "family": family, "severity": 3, "metric": "ece", "mean": mean}
        for family, mean in (("typo", 0.1), ("keyboard", 0.4), ("ocr", 0.2), ("word-deletion", 0.3))
    ]
    rows.append(
        {"method": "lora", "uncertainty": "plain", "family": "domain", "severity": None, "metric": "ece", "mean": 9}
    )
    (spread,) = table.family_spread(pd.DataFrame(rows)).itertuples()
    assert (spread.families, spread.lowest, spread.median, spread.highest) == (4, 0.1, 0.25, 0.4)
    assert spread.mean == pytest.approx(0.25)


def test_a_run_whose_model_cannot_be_rebuilt_is_left_out_by_name_and_the_others_kept(tmp_path, store):
    write_run(tmp_path / "fake", "lora", 0)  # its parameters are a made-up head: no model rebuilds from them
    (fake,) = group_runs(list_runs(tmp_path / "fake"))
    kept = group_runs(list_runs(store))[:1]
    result = table.shift_table([*kept, fake], TWO[:1], SETTINGS, ("ece",))
    (line,) = result.left_out
    assert line.startswith(f"run {fake.runs[0].name} left out: ") and "\n" not in line
    assert set(result.table["method"]) == {kept[0].label}


def test_recorded_runs_are_named_as_left_out_not_dropped(tmp_path, store):
    write_run(tmp_path / "fake", "lora", 0)  # parameters that rebuild nothing: stands for a run without a model
    groups = group_runs(list_runs(store))[:1]
    recorded = group_runs(list_runs(tmp_path / "fake"))
    recorded[0].runs[0].record["recorded"] = {"by": "test"}
    kept, lines = table._usable(groups + recorded, TWO)
    assert kept == groups and len(lines) == 1 and "no parameters to run on shifted text (recorded runs)" in lines[0]


def test_report_shift_prints_a_row_per_method_and_severity_and_writes_three_csvs(store, tmp_path):
    code, out, err = run_report(
        [
            "fine-tuning",
            "prefix-tuning",
            "--runs-dir",
            str(store),
            "--shift",
            "--shift-families",
            "typo,ocr",
            "--shift-severities",
            "0,3",
            "--resamples",
            "200",
            "--csv",
            str(tmp_path / "r"),
        ]
    )
    assert code == 0, err
    rows = [line for line in out.splitlines() if re.match(r"\| (fine-tuning|prefix-tuning) \|", line)]
    assert len(rows) == 4 and "evaluating" in err
    long = pd.read_csv(tmp_path / "r-shift.csv")
    assert set(long["shift"]) == {"clean", "typo 3", "ocr 3", "all families 3"} and "between methods significant" in out
    assert len(pd.read_csv(tmp_path / "r-shift-pairs.csv")) == len(long["metric"].unique())  # one pair, severity 3
    assert (
        "With 200 resamples a p-value is at least 1/201, so Holm over 1 tests per metric cannot go below 0.00498."
        in out
    )
    assert len(pd.read_csv(tmp_path / "r-shift-coverage.csv")) == 2 * 3


@pytest.fixture
def local_ray():
    """Ray on this machine with 2 CPUs (by this name, the test joins the suite's one "ray" worker group)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


def test_report_shift_evaluates_on_ray_as_locally(store, local_ray):
    runs = [a_run(store)]
    on_ray, failed = engines.evaluate_runs(runs, TWO, engine="ray")
    assert len(cache_files(runs[0])) == 2 and failed == {}
    local = [evaluate._compute(runs[0], TWO, None)]
    for a, b in zip(on_ray[runs[0].name], local[0], strict=True):
        np.testing.assert_allclose(a.probs, b.probs, atol=1e-6, rtol=0)


# ---------------------------------------------------------------- hostile input, in one line


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--shift", "--shift-families", "typo,bogus"], "unknown corruption family 'bogus'"),
        (["--shift", "--shift-severities", "0,6"], "severity must be one of 0, 1, 2, 3, 4, 5"),
        (["--shift", "--shift-severities", "-1"], "severities are whole numbers"),
        (["--shift", "--shift-severities", ""], "severities are whole numbers"),
        (["--shift-families", "typo"], "--shift-families choose what --shift evaluates: add --shift"),
        (["--shift", "--epoch", "1"], "--shift judges the test split"),
        (["--shift", "--metric", "ece", "--metric", "bogus"], "invalid choice: 'bogus'"),
    ],
)
def test_report_shift_refuses_bad_input_in_one_line(tmp_path, argv, says):
    root = tmp_path / "runs"
    write_run(root, "lora", 0)
    code, _out, err = run_report(["--runs-dir", str(root), *argv, "--csv", str(tmp_path / "r")])
    assert code != 0 and says in err, err
    assert len([line for line in err.splitlines() if line.strip()]) <= 2 and not list(tmp_path.glob("r-*"))


def test_report_shift_on_a_dataset_with_other_labels_is_one_line(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "lora", 0)
    other = tmp_path / "other.csv"
    other.write_text("text,label\n" + "\n".join(f"sunny {i},weather\nshares up {i},business" for i in range(3)))
    code, _out, err = run_report(
        ["--runs-dir", str(root), "--shift", "--shift-severities", "0", "--shift-dataset", str(other)]
    )
    assert code != 0 and "has labels the runs were not trained on (weather)" in err, err
    assert err.count("\n") == 1 and ", ".join(LABELS) in err
