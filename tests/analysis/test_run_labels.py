"""Pickers name runs by what sets them apart (`run_labels.run_labels`), not by a hash."""

from pathlib import Path

from peftviz.analysis.run_labels import run_labels
from peftviz.run_config import preset_config
from peftviz.store.runs import Run


def run(name: str, created: str = "2026-11-22T10:00:00+0000", **settings) -> Run:
    config = preset_config("smoke", settings.pop("method", "prefix-tuning"), **settings)
    return Run(Path(name), "complete", config, record={"environment": {"created": created}})


def test_runs_of_a_method_are_named_by_the_settings_in_which_they_differ():
    runs = [run("a-1", learning_rate=1e-2), run("a-2", learning_rate=1e-3, epochs=5), run("l-1", method="lora")]
    labels = run_labels(runs)
    assert labels["a-1"] == "prefix-tuning · seed 0 · epochs 2 · lr 0.01"
    assert labels["a-2"] == "prefix-tuning · seed 0 · epochs 5 · lr 0.001"
    assert labels["l-1"] == "lora · seed 0"  # alone of its method: nothing to tell apart


def test_method_options_data_files_and_seeds_are_named():
    runs = [
        run("t-1", method="tiny-attention", method_options={"n_heads": 1}, dataset="/data/x/news.csv"),
        run("t-2", method="tiny-attention", method_options={"n_heads": 4}, dataset="/data/y/other.csv", seed=3),
    ]
    labels = run_labels(runs)
    assert labels["t-1"] == "tiny-attention · seed 0 · dataset news.csv · heads 1"
    assert labels["t-2"] == "tiny-attention · seed 3 · dataset other.csv · heads 4"


def test_runs_alike_in_every_setting_are_named_by_date_then_folder():
    runs = [
        run("p-20261122-aaaaaa"),
        run("p-20261123-bbbbbb", created="2026-11-23T09:30:00+0000"),
        run("p-20261123-cccccc", created="2026-11-23T09:30:00+0000"),
    ]
    labels = run_labels(runs)
    assert labels["p-20261122-aaaaaa"] == "prefix-tuning · seed 0 · 2026-11-22 10:00"
    assert labels["p-20261123-bbbbbb"] == "prefix-tuning · seed 0 · 2026-11-23 09:30 · bbbbbb"
    assert len(set(labels.values())) == 3
