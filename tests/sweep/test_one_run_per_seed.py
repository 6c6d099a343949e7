"""One run per configuration and seed (issue 32): the same settings however given have one group key, training
them again skips or resumes unless forced, a forced repeat is marked and never counted as a seed, a group's
seeds are distinct on any store, and a double click queues one job.

The stores here are planted with RunWriter (made-up predictions, no training) except where a test says it
trains: smoke runs (tiny-bert built from its config, 120 documents), in the app's child process or the CLI."""

from __future__ import annotations

import csv
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from peftviz.app.jobs import AlreadyQueued, JobQueue
from peftviz.cli import build_parser, configs_of, main
from peftviz.methods import DEFAULT_METHOD, METHODS
from peftviz.run_config import TrainConfig, preset_config
from peftviz.store.runs import group_key, group_runs, list_runs
from peftviz.store.writer import RunWriter
from peftviz.sweep.plan import plan
from peftviz.sweep.variants import comparison_configs
from peftviz.training.progress import SKIPPED
from tests.support.job_helpers import Gate, fake_queue, wait_until_idle

pytestmark = pytest.mark.slow  # trains in child processes or on the shipped MiniLM (left out of the fast tier)

ROOT = Path(__file__).resolve().parents[2]
TRAIN_PAGE = str(ROOT / "pages" / "1_Train.py")
LABELS = ["business", "sport", "tech"]


def plant(root: Path, config: TrainConfig, created: str, finish: bool = True, **record) -> Path:
    """A run folder of `config` written by RunWriter with made-up predictions: two epochs, complete unless
    `finish` is False (then one epoch, incomplete). `created` orders the store; `record` adds to config.json."""
    import torch

    environment = {"created": created}
    recorded = {"label_names": LABELS, "parameters": {"total": 10, "trainable": 4}, "environment": environment}
    writer = RunWriter.create(root, config, recorded | record)
    rng = np.random.default_rng(config.seed)
    labels = np.random.default_rng(0).integers(0, 3, size=40)  # every run evaluated on the same examples
    epochs = (1, 2) if finish else (1,)
    for epoch in epochs:
        probs = rng.dirichlet(np.ones(3), size=40).astype(np.float32)
        writer.write_epoch(
            {"epoch": epoch, "micro_f1": 0.3 * epoch, "accuracy": 0.3 * epoch, "ece": 0.1}, probs, labels
        )
        writer.write_params({"head.weight": torch.ones(3, 4)}, epoch)
    if finish:
        writer.write_predictions("test", probs, labels)
        writer.finish({"params_epoch": 2, "test": {"accuracy": 0.5, "ece": 0.1}})
    writer.close()
    return writer.path


# ---------------------------------------------------------------- one key for one configuration


def page_config(monkeypatch, method: str) -> TrainConfig:
    """The config the Train page submits for `method` under the smoke preset, every setting left as shown."""
    queue = fake_queue(monkeypatch)
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()
    at.selectbox[0].set_value("smoke").run()
    at.selectbox[1].set_value(method).run()
    at.button[0].click().run()
    assert not at.exception and not at.error, at.exception or [e.value for e in at.error]
    (config,) = queue.jobs[-1].configs
    return config


@pytest.mark.parametrize("method", list(METHODS))
def test_the_train_page_and_the_cli_give_one_configuration_one_key(empty_store, monkeypatch, method):
    page = page_config(monkeypatch, method)
    cli = configs_of(build_parser().parse_args(["train", "--preset", "smoke", "--method", method]))[0]
    every_option = METHODS[method].config_class().to_dict()
    assert page.method_options == every_option and cli.method_options == {}  # the page gives every option, the CLI none
    assert group_key(page) == group_key(cli)
    assert page.key_settings == cli.key_settings  # every other setting too, not only the options


def test_an_option_changed_from_its_default_changes_the_key():
    default = preset_config("smoke", "prefix-propagation")
    given = replace(default, method_options={"prefix_length": 8})  # the default, given
    changed = replace(default, method_options={"prefix_length": 16})
    assert group_key(given) == group_key(default) != group_key(changed)


def test_an_integer_given_for_a_float_setting_is_the_same_setting():
    as_float = preset_config("smoke", "lora", max_grad_norm=1.0, method_options={"lora_dropout": 0.0})
    as_int = preset_config("smoke", "lora", max_grad_norm=1, method_options={"lora_dropout": 0})
    assert json.dumps(as_float.to_dict()) != json.dumps(as_int.to_dict())  # JSON writes them apart
    assert group_key(as_float) == group_key(as_int)


def test_old_runs_stored_with_and_without_default_options_group_together(tmp_path):
    """An existing store, nothing rewritten: a CLI run (`{}`) and a Train-page run (defaults) at seeds 0 and 1."""
    cli = preset_config("smoke", "prefix-propagation", seed=0)
    page = preset_config("smoke", "prefix-propagation", seed=1, method_options=cli.method_config.to_dict())
    plant(tmp_path, cli, "2026-11-20T10:00:00")
    plant(tmp_path, page, "2026-11-20T11:00:00")
    before = {p.name: (p / "config.json").read_bytes() for p in tmp_path.iterdir()}
    (group,) = group_runs(list_runs(tmp_path))
    assert group.seeds == [0, 1] and group.repeats == []
    assert [item.action for item in plan([replace(cli, seed=1), replace(page, seed=0)], tmp_path)] == ["skip"] * 2
    assert {p.name: (p / "config.json").read_bytes() for p in tmp_path.iterdir()} == before


# ---------------------------------------------------------------- a group's seeds are distinct


@pytest.fixture
def duplicates_store(tmp_path) -> Path:
    """Seed 7 three times (an old store's repeats, unmarked; the second the earliest complete), seed 8 once."""
    config = preset_config("smoke", "prefix-propagation", seed=7)
    store = tmp_path / "runs"
    plant(store, config, "2026-11-20T09:00:00", finish=False)  # stopped, then trained again from scratch
    plant(store, config, "2026-11-20T10:00:00")
    plant(store, config, "2026-11-20T11:00:00")
    plant(store, replace(config, seed=8), "2026-11-20T12:00:00")
    return store


def test_a_group_counts_one_run_per_seed_the_earliest_complete(duplicates_store):
    runs = list_runs(duplicates_store)  # oldest first
    (group,) = group_runs(runs)
    assert group.seeds == [7, 8] and group.name.endswith(f"· 2 seeds · {group.key}")
    assert [run.name for run in group.runs] == [runs[1].name, runs[3].name]  # the earliest complete run of seed 7
    assert sorted(run.name for run in group.repeats) == sorted([runs[0].name, runs[2].name])


def test_report_and_runs_never_count_a_repeat_as_a_seed(duplicates_store, tmp_path, capsys):
    assert main(["runs", "--runs-dir", str(duplicates_store)]) == 0
    groups_table = capsys.readouterr().out.split("Groups (runs that differ only in the training seed)")[1]
    assert "| 7,8 |" in groups_table and "7,7" not in groups_table
    (group,) = group_runs(list_runs(duplicates_store))
    assert "repeats not counted" in groups_table and all(run.name in groups_table for run in group.repeats)
    assert main(["report", "--resamples", "50", "--csv", str(tmp_path / "r"), "--runs-dir", str(duplicates_store)]) == 0
    report = capsys.readouterr().out
    assert "3 seeds" not in report and "7,7" not in report
    rows = list(csv.DictReader((tmp_path / "r-summary.csv").open()))
    assert {(row["n"], row["seeds"]) for row in rows} == {("2", "7,8")}


def test_a_forced_repeat_is_marked_listed_and_not_counted(tmp_path, capsys):
    config = preset_config("smoke", "prefix-propagation", seed=7)
    original = plant(tmp_path, config, "2026-11-20T10:00:00")
    (forced,) = plan([config], tmp_path, force=True)
    assert (forced.action, forced.repeat_of) == ("train", original.name)
    repeat = plant(tmp_path, config, "2026-11-20T11:00:00", repeat_of=forced.repeat_of)
    runs = {run.name: run for run in list_runs(tmp_path)}
    assert runs[repeat.name].status == "complete" and runs[repeat.name].repeat_of == original.name
    (group,) = group_runs(list(runs.values()))
    assert [run.name for run in group.runs] == [original.name] and [r.name for r in group.repeats] == [repeat.name]
    assert main(["runs", "--runs-dir", str(tmp_path)]) == 0
    listing = capsys.readouterr().out
    assert f"| {original.name} |" in next(
        line for line in listing.splitlines() if line.startswith(f"| {repeat.name} |")
    )
    assert [item.action for item in plan([config], tmp_path)] == ["skip"]  # not forced: the original stands


# ---------------------------------------------------------------- a double click queues one job


def test_the_queue_takes_the_same_runs_once_while_they_wait_or_train(tmp_path):
    gate = Gate()
    queue = JobQueue(max_running=1, train=gate)
    configs = comparison_configs("smoke")[:2]
    first = queue.submit(configs, tmp_path, owner="a")
    with pytest.raises(AlreadyQueued, match=f"your job {first.id} is training") as again:
        queue.submit(list(reversed(configs)), tmp_path, owner="a")  # the same runs, in another order
    assert again.value.job is first
    with pytest.raises(AlreadyQueued, match="a job from another browser or visitor is training"):
        queue.submit(configs, tmp_path, owner="b")
    other_seed = queue.submit([replace(c, seed=1) for c in configs], tmp_path, owner="a")
    forced = queue.submit(configs, tmp_path, owner="a", force=True)  # asks for something else: new runs
    assert [job.id for job in queue.jobs] == [first.id, other_seed.id, forced.id]
    gate.release.set()
    wait_until_idle(queue)
    assert queue.submit(configs, tmp_path, owner="a").id not in (first.id, other_seed.id, forced.id)  # ended: anew
    wait_until_idle(queue)


def test_a_double_click_on_train_queues_one_job(empty_store, monkeypatch):
    gate = Gate()
    queue = fake_queue(monkeypatch, gate)
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()
    at.selectbox[0].set_value("smoke").run()
    at.button[0].click().run()
    at.button[0].click().run()  # while the first job trains
    assert not at.exception and not at.error
    assert len(queue.jobs) == 1 and len(queue.jobs[0].configs) == 1
    expected = f"Already queued: your job {queue.jobs[0].id} is training with the same settings and seeds"
    assert [info.value for info in at.info if "Already queued" in info.value] == [f"{expected}; it stores these runs"]
    at.checkbox(key="train_anew").check().run()
    at.button[0].click().run()  # train anew: a different request
    assert len(queue.jobs) == 2 and queue.jobs[1].force and not queue.jobs[0].force
    gate.release.set()
    wait_until_idle(queue)


# ---------------------------------------------------------------- training again: skip, resume, force


def wait_for(condition, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.05)
    assert condition()


def test_a_second_press_resumes_a_cancelled_run_then_skips_it_and_force_repeats_it(empty_store, monkeypatch):
    """Trains: the app's real job path (child process, `sweep`), one smoke run at seed 0 and a forced repeat."""
    queue = fake_queue(monkeypatch, train=None)
    configs = [preset_config("smoke", epochs=3)]
    title = configs[0].run_title
    job = queue.submit(configs, empty_store, owner="me")
    wait_for(lambda: any(event.epoch == 2 for event in job.progress.values()))  # epoch 1 is stored
    queue.cancel(job)
    wait_until_idle(queue)
    (stopped,) = list_runs(empty_store)
    kept = (stopped.path / "metrics.jsonl").read_text().splitlines()
    assert job.status == "cancelled" and stopped.status == "incomplete" and len(kept) >= 1

    again = queue.submit(configs, empty_store, owner="me")  # Train pressed again: resumed, not trained anew
    wait_until_idle(queue, 180)
    (run,) = list_runs(empty_store)
    assert again.status == "done" and run.path == stopped.path and run.status == "complete"
    assert (run.path / "metrics.jsonl").read_text().splitlines()[: len(kept)] == kept
    assert [a["from_epoch"] for a in run.record["attempts"]] == [0, len(kept)]

    third = queue.submit(configs, empty_store, owner="me")  # complete: skipped
    wait_until_idle(queue, 120)
    assert third.status == "done" and [r.path for r in third.runs] == [run.path]
    assert third.progress[title].phase == SKIPPED and third.fraction_done(title) == 1.0
    assert len(list_runs(empty_store)) == 1

    forced = queue.submit(configs, empty_store, owner="me", force=True)
    wait_until_idle(queue, 180)
    assert forced.status == "done", forced.error
    (repeat,) = [r for r in list_runs(empty_store) if r.path != run.path]
    assert repeat.status == "complete" and repeat.repeat_of == run.name
    (group,) = group_runs(list_runs(empty_store))
    assert group.seeds == [0] and [r.name for r in group.runs] == [run.name] and group.repeats == [repeat]


def test_compare_after_the_train_page_trains_nothing_new(empty_store, monkeypatch, capsys):
    """Trains: one smoke run of the default method from the Train page (child process); `compare` then skips it."""
    queue = fake_queue(monkeypatch, train=None)
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()
    at.selectbox[0].set_value("smoke").run()
    at.button[0].click().run()
    assert not at.exception and not at.error
    wait_until_idle(queue, 180)
    assert queue.jobs[0].status == "done", queue.jobs[0].error
    (made,) = list_runs(empty_store)
    assert made.config.method_options  # stored at their defaults, as the page gives them
    argv = ["compare", "--preset", "smoke", "--methods", DEFAULT_METHOD, "--runs-dir", str(empty_store)]
    assert main(argv) == 0
    assert "1 run(s) (1 already complete) in" in capsys.readouterr().out
    assert [run.name for run in list_runs(empty_store)] == [made.name]


def test_cli_train_skips_a_complete_run_and_force_trains_a_marked_repeat(tmp_path, capsys):
    """Trains: two one-epoch smoke runs in this process."""
    argv = ["train", "--preset", "smoke", "--epochs", "1", "--runs-dir", str(tmp_path)]
    assert main(argv) == 0
    (first,) = list_runs(tmp_path)
    assert f"new run {first.name}" in capsys.readouterr().out
    assert main(argv) == 0
    assert f"run {first.name} already holds these settings and seed" in capsys.readouterr().out
    assert len(list_runs(tmp_path)) == 1
    assert main([*argv, "--force"]) == 0
    (repeat,) = [run for run in list_runs(tmp_path) if run.name != first.name]
    assert f"a repeat of run {first.name}: not counted as a seed" in capsys.readouterr().out
    assert repeat.repeat_of == first.name and repeat.record["repeat_of"] == first.name
    (group,) = group_runs(list_runs(tmp_path))
    assert group.seeds == [0] and group.repeats == [repeat]
