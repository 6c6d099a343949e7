"""The Home and Train pages, with Streamlit's AppTest."""

from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from peftviz import METHODS
from peftviz.app import jobpanel
from tests.support.job_helpers import fake_queue, wait_until_idle

ROOT = Path(__file__).resolve().parents[2]


def open_page(path: str) -> AppTest:
    return AppTest.from_file(str(ROOT / path), default_timeout=60).run()


def test_home_lists_the_runs_of_the_store(app_store):
    at = open_page("pages/0_home.py")
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert len(table) == 9 and set(table["status"]) == {"complete"}
    assert {"prefix-propagation", "tiny-attention 4H averaged", "kernel α=0.01"} <= set(table["method"])
    assert table["trainable %"].between(0, 100).all()


def test_home_describes_every_method(empty_store):
    at = open_page("pages/0_home.py")
    table = at.dataframe[0].value
    assert list(table["method"]) == list(METHODS)
    assert table.loc[table["method"] == "prefix-propagation", "options"].item().startswith("prefix_length=8")


def test_home_on_an_empty_store_offers_the_quick_comparison(empty_store):
    at = open_page("pages/0_home.py")
    assert not at.exception
    assert "No runs" in at.info[0].value
    assert at.button[0].label == "Train the quick comparison"


def test_home_marks_corrupt_and_incomplete_runs(app_store, tmp_path, monkeypatch):
    import shutil

    store = tmp_path / "runs"
    shutil.copytree(app_store, store)
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    (store / "zz-corrupt").mkdir()
    (store / "zz-corrupt" / "config.json").write_text("{oops")
    incomplete = next(store.glob("prefix-tuning-*"))
    (incomplete / "summary.json").unlink()
    at = open_page("pages/0_home.py")
    assert not at.exception
    status = dict(zip(at.dataframe[0].value["run"], at.dataframe[0].value["status"]))
    assert status["zz-corrupt"].startswith("corrupt: config.json: is not JSON")
    assert status[incomplete.name] == "incomplete"


def test_train_page_shows_bad_input_in_one_sentence(empty_store, tmp_path):
    at = open_page("pages/1_Train.py")
    assert not at.exception
    at.radio[0].set_value("local path").run()
    at.text_input[0].set_value(str(tmp_path / "missing.csv")).run()
    at.button[0].click().run()
    assert not at.exception
    assert len(at.error) == 1 and "does not exist" in at.error[0].value and "\n" not in at.error[0].value


@pytest.mark.slow
def test_train_page_trains_a_smoke_run_in_the_background(empty_store):
    at = open_page("pages/1_Train.py")
    at.selectbox[0].set_value("smoke").run()  # preset
    at.selectbox[1].set_value("prefix-tuning").run()  # method
    assert at.text_input[0].value == "tiny-bert"
    assert any(n.label == "prefix_length" and n.value == 8 for n in at.number_input)  # method options form
    at.button[0].click().run()
    assert not at.exception and not at.error
    queue = jobpanel.job_queue()
    wait_until_idle(queue)
    job = queue.jobs[-1]
    assert job.status == "done", job.error
    (run,) = job.runs
    assert run.status == "complete" and run.config.method == "prefix-tuning" and run.path.parent == empty_store


def test_home_lists_groups_of_seeds_with_their_mean_and_interval(app_seeds_store):
    from peftviz.store.runs import group_runs, list_runs
    from tests.support.helpers import seed_values_and_draws, two_level_by_hand

    at = open_page("pages/0_home.py")
    assert not at.exception and not at.error
    runs_table, groups_table = at.dataframe[0].value, at.dataframe[1].value
    assert len(runs_table) == 12 and sorted(set(runs_table["seed"])) == [0, 1]
    assert len(groups_table) == 6 and set(groups_table["seeds"]) == {"0,1"}
    group = next(g for g in group_runs(list_runs()) if g.label == "prefix-tuning")
    row = groups_table[groups_table["group"] == group.key].iloc[0]
    for column, metric in (("test accuracy", "accuracy"), ("test ECE", "ece")):  # report's two-level bootstrap
        values, draws = seed_values_and_draws(group.runs, metric, "test", n_resamples=1000)
        low, high = np.quantile(two_level_by_hand(draws), [0.025, 0.975])
        mean = values.mean()
        assert row[column] == f"{mean:.4f} [{min(low, mean):.4f}, {max(high, mean):.4f}]", column


def test_home_trains_the_quick_comparison_at_the_chosen_number_of_seeds(empty_store, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = open_page("pages/0_home.py")
    at.number_input[0].set_value(3).run()
    at.button[0].click().run()
    assert not at.exception
    (configs,) = [job.configs for job in queue.jobs]
    assert len(configs) == 18 and [c.seed for c in configs] == [0] * 6 + [1] * 6 + [2] * 6
    assert {c.data_seed for c in configs} == {0}


def test_train_page_trains_one_run_per_seed(empty_store, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = open_page("pages/1_Train.py")
    at.selectbox[0].set_value("smoke").run()
    next(n for n in at.number_input if n.label == "First training seed").set_value(4).run()
    next(n for n in at.number_input if n.label == "Number of seeds").set_value(2).run()
    at.button[0].click().run()
    assert not at.exception and not at.error
    (configs,) = [job.configs for job in queue.jobs]
    assert [c.seed for c in configs] == [4, 5] and {c.data_seed for c in configs} == {0}


@pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 trains where CUDA is")
def test_train_page_refuses_fp16_on_a_cpu_in_one_sentence(empty_store, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = open_page("pages/1_Train.py")
    at.selectbox[0].set_value("smoke").run()
    next(box for box in at.selectbox if box.label == "Precision").set_value("fp16").run()
    at.button[0].click().run()
    assert not at.exception
    assert len(at.error) == 1 and "fp16 needs a CUDA GPU" in at.error[0].value and "\n" not in at.error[0].value
    assert not queue.jobs


@pytest.mark.parametrize("value", [0.0, -1.0, 1000.0])
def test_a_refused_learning_rate_blocks_train_with_one_sentence(empty_store, monkeypatch, value):
    queue = fake_queue(monkeypatch)
    at = open_page("pages/1_Train.py")
    at.selectbox[0].set_value("smoke").run()
    next(n for n in at.number_input if n.label == "Learning rate").set_value(value).run()
    at.button[0].click().run()
    assert not at.exception and not queue.jobs
    (error,) = at.error
    assert error.value.startswith(f"learning_rate must be in (0, 10], not {value:g}") and "\n" not in error.value


def test_home_tells_a_run_in_training_from_a_stopped_one(app_store, tmp_path, monkeypatch):
    import shutil

    from peftviz.store.writer import WriterLock

    store = tmp_path / "runs"
    shutil.copytree(app_store, store)
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    live, stopped = sorted(store.glob("prefix-*"))[:2]
    for run in (live, stopped):
        (run / "summary.json").unlink()
    lock = WriterLock(live)  # this process writes `live`, as a training job would
    try:
        at = open_page("pages/0_home.py")
        status = dict(zip(at.dataframe[0].value["run"], at.dataframe[0].value["status"]))
        caption = at.caption[0].value
    finally:
        lock.release()
    assert (status[live.name], status[stopped.name]) == ("training", "incomplete")
    assert "Training runs are being written now" in caption and "Incomplete runs were stopped" in caption


def test_home_times_the_quick_comparison_honestly(app_store):
    at = open_page("pages/0_home.py")
    text = next(m.value for m in at.markdown if "runs on the offline MiniLM" in m.value)
    assert (
        "no quick run has finished in this store" in text
        and "2 CPU cores (the quick comparison in docs/results.md)" in text
    )


def finished_job(monkeypatch, owner: str, origin: str = ""):
    """A job of `owner` that has finished (training faked); this page's visitor is "me"."""
    from peftviz.sweep.variants import comparison_configs

    queue = fake_queue(monkeypatch)
    job = queue.submit(comparison_configs("smoke")[:1], Path("."), owner=owner, origin=origin)
    wait_until_idle(queue)
    return job


def test_a_finished_job_shows_only_on_the_page_that_started_it(empty_store, monkeypatch):
    job = finished_job(monkeypatch, "me", origin="another page")
    assert not open_page("pages/1_Train.py").get("progress")
    job.origin = ""  # a job that names no page shows wherever a panel is
    assert open_page("pages/1_Train.py").get("progress")


def test_a_finished_job_shows_only_to_the_visitor_who_started_it(empty_store, monkeypatch):
    """A new tab's refused Train showed the previous visitor's finished job under its error, as if it had run."""
    job = finished_job(monkeypatch, "another visitor")
    at = open_page("pages/1_Train.py")
    next(n for n in at.number_input if n.label == "Learning rate").set_value(-1.0).run()
    at.button[0].click().run()
    assert "learning_rate" in at.error[0].value and not at.get("progress")  # refused, and no one else's job
    job.owner = "me"
    assert open_page("pages/1_Train.py").get("progress")


def test_progress_bars_say_the_time_taken_and_left():
    """The estimates themselves, on a fake clock: tests/training/test_progress_estimates.py."""
    from peftviz.app.jobs import Job, clock
    from peftviz.sweep.variants import comparison_configs
    from peftviz.training.progress import Progress

    assert (clock(65), clock(3725)) == ("1:05", "1:02:05")
    job = Job(comparison_configs("smoke")[:1], Path("."))
    name = job.names[0]
    assert job.timing(name) == ""
    assert job.timing() == ""  # waiting: nothing to time yet
    job.status, job.started = "running", 100.0
    job.record(Progress(name, "train", 1, 2, 5, 10), now=100.0)
    assert job.timing(name, now=101.0) == "0:01 elapsed, estimating…" and "elapsed" in job.timing(now=101.0)


def test_home_can_train_the_comparison_on_ray_and_a_shared_server_cannot(empty_store, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = open_page("pages/0_home.py")
    choice = next(radio for radio in at.radio if radio.label == "Train on")
    assert choice.value == "local" and choice.options == list(jobpanel.ENGINE_LABELS.values())
    choice.set_value("ray").run()
    at.button[0].click().run()
    wait_until_idle(queue)
    assert [job.engine for job in queue.jobs] == ["ray"]
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    shared = open_page("pages/0_home.py")
    assert [radio.label for radio in shared.radio if radio.label == "Train on"] == []


# ------------------------------------------------------------------- the sweep's outcomes on the page


def panel_lines(at: AppTest) -> list[str]:
    """The job panel's list of what became of each run: "- name: word" lines of its markdown."""
    return [line for block in at.markdown for line in block.value.splitlines() if line.startswith("- ")]


@pytest.mark.slow
def test_a_comparison_pressed_again_skips_its_complete_runs_and_the_panel_says_so(empty_store, monkeypatch):
    """Trains: two one-epoch smoke runs (two seeds) in the job's child process, through the sweep; the same settings
    pressed again train nothing and the panel lists both runs as skipped."""
    from peftviz.store.runs import list_runs

    queue = fake_queue(monkeypatch, train=None)  # the real child process, on the local engine
    at = open_page("pages/1_Train.py")
    at.selectbox[0].set_value("smoke").run()
    next(n for n in at.number_input if n.label == "Epochs").set_value(1).run()
    next(n for n in at.number_input if n.label == "Number of seeds").set_value(2).run()
    at.button[0].click().run()
    wait_until_idle(queue, 180)
    first = queue.jobs[-1]
    assert first.status == "done", first.error
    assert [outcome.word for outcome in first.outcomes] == ["new", "new"]
    made = sorted(run.name for run in list_runs(empty_store))
    assert len(made) == 2

    at.button[0].click().run()  # the same settings, pressed again once the first job has ended
    wait_until_idle(queue, 180)
    again = queue.jobs[-1]
    assert again is not first and again.status == "done", again.error
    assert [(outcome.action, outcome.failed) for outcome in again.outcomes] == [("skip", False)] * 2
    assert sorted(run.name for run in list_runs(empty_store)) == made  # nothing trained anew
    assert sorted(run.path.name for run in again.runs) == made
    shown = open_page("pages/1_Train.py")
    titles = [config.run_title for config in again.configs]
    assert panel_lines(shown)[-2:] == [f"- {title}: skipped (already complete)" for title in titles]
    assert any("2 run(s), done (" in block.value and block.value.endswith("): 2 skipped") for block in shown.markdown)


@pytest.mark.slow
def test_a_comparison_with_a_failing_run_finishes_the_others_and_lists_the_failure(empty_store, tmp_path, monkeypatch):
    """Trains: two one-epoch smoke runs in the job's child process; the run between them names a model folder that
    does not exist, fails when it loads, and the sweep goes on to the third."""
    from peftviz.run_config import preset_config
    from peftviz.store.runs import list_runs

    queue = fake_queue(monkeypatch, train=None)
    methods = list(METHODS)
    good = [preset_config("smoke", method, epochs=1) for method in methods[:2]]
    broken = preset_config("smoke", methods[2], epochs=1, model=str(tmp_path / "no-such-model"))
    job = queue.submit([good[0], broken, good[1]], empty_store, owner="me")
    wait_until_idle(queue, 180)
    assert job.status == "failed"
    assert [outcome.word.split(":")[0] for outcome in job.outcomes] == ["new", "failed", "new"]
    failure = job.outcomes[1].error
    assert "no-such-model" in failure and "\n" not in failure
    assert job.error == f"ModelLoadError: 1 of 3 runs failed; {broken.run_title}: {failure}"
    stored = {run.config.method: run.status for run in list_runs(empty_store)}
    assert stored == {methods[0]: "complete", methods[1]: "complete"}  # the run after the failure was trained too

    shown = open_page("pages/1_Train.py")
    assert panel_lines(shown) == [
        f"- {good[0].run_title}: new",
        f"- {broken.run_title}: failed: {failure}",
        f"- {good[1].run_title}: new",
    ]
    assert [error.value for error in shown.error] == [f"Training stopped: {job.error}"]
    assert any(block.value.endswith("3 run(s), failed: 2 new, 1 failed") for block in shown.markdown)
    assert not shown.exception


def test_train_page_takes_a_preset_s_settings_for_the_chosen_dataset(empty_store, monkeypatch):
    """paper-long trains Hyperpartisan for 20 epochs (Table 5), the other datasets for 10."""
    fake_queue(monkeypatch)
    at = open_page("pages/1_Train.py")
    at.selectbox[0].set_value("paper-long").run()

    def epochs() -> int:
        return next(n for n in at.number_input if n.label == "Epochs").value

    assert not at.exception and not at.error
    for name, expected in [("arxiv", 10), ("hyperpartisan", 20), ("20newsgroups", 10), ("hyperpartisan", 20)]:
        next(box for box in at.selectbox if box.label == "Dataset").set_value(name).run()
        assert epochs() == expected, name
