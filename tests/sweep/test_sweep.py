"""Sweeps (`peftviz.sweep.plan`): idempotent on the store, resumable, and the same runs on Ray as here.

The Ray tests start a local Ray with 2 CPUs (no GPU), as a laptop or CI would, and train smoke runs
(tiny-bert built from its config, 120 documents): a few seconds each, plus Ray's start."""

import json
import os
import signal
import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from peftviz.errors import PeftvizError
from peftviz.run_config import comparison_methods, over_seeds
from peftviz.store.runs import list_runs
from peftviz.sweep import RayOptions, plan, run_sweep
from peftviz.sweep.variants import comparison_configs
from peftviz.training.progress import finished_line

ray = pytest.importorskip("ray")

METHODS = "prefix-tuning,lora"


def sweep_configs(seeds=(0, 1), **overrides) -> list:
    return over_seeds(comparison_configs("smoke", comparison_methods(METHODS), **overrides), list(seeds))


def predictions(run) -> dict[str, bytes]:
    """Every stored predictions file of a run, by name, as bytes of its arrays."""
    found = {}
    for file in sorted((run.path / "predictions").glob("*.npz")):
        with np.load(file, allow_pickle=False) as stored:
            found[file.stem] = stored["probs"].tobytes() + stored["labels"].tobytes()
    return found


def by_title(runs) -> dict:
    return {run.config.run_title: run for run in runs}


@pytest.fixture(scope="module")
def local_ray():
    """Ray on this machine with 2 CPUs: 2 runs at once, one thread each (Ray sets a task's threads to its CPUs)."""
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.mark.slow
def test_four_runs_on_ray_are_bit_identical_to_the_same_runs_trained_here(local_ray, one_thread, tmp_path):
    configs = sweep_configs()
    on_ray = run_sweep(configs, tmp_path / "ray", "ray", ray_options=RayOptions(cpus_per_run=1, gpus_per_run=0))
    here = run_sweep(configs, tmp_path / "local", "local")
    ray_runs, local_runs = by_title(list_runs(tmp_path / "ray")), by_title(list_runs(tmp_path / "local"))
    assert len(ray_runs) == len(local_runs) == 4 and not any(outcome.failed for outcome in on_ray + here)
    assert {run.status for run in [*ray_runs.values(), *local_runs.values()]} == {"complete"}
    for title, run in ray_runs.items():
        assert predictions(run) == predictions(local_runs[title]) and len(predictions(run)) == 3  # 2 epochs, test
        assert (
            run.record["attempts"][0]["engine"] == "ray"
            and local_runs[title].record["attempts"][0]["engine"] == "local"
        )


@pytest.mark.slow
def test_peft_tuners_on_ray_are_bit_identical_to_the_same_runs_trained_here(local_ray, one_thread, tmp_path):
    """AdaLoRA (its rank allocator steps with the training loop) and VeRA (shared state on peft's tuner) in a Ray
    worker: the same predictions as in this process."""
    configs = over_seeds(comparison_configs("smoke", ["adalora", "vera"]), [0])
    on_ray = run_sweep(configs, tmp_path / "ray", "ray", ray_options=RayOptions(cpus_per_run=1, gpus_per_run=0))
    here = run_sweep(configs, tmp_path / "local", "local")
    ray_runs, local_runs = by_title(list_runs(tmp_path / "ray")), by_title(list_runs(tmp_path / "local"))
    assert len(ray_runs) == 2 and not any(outcome.failed for outcome in on_ray + here)
    for title, run in ray_runs.items():
        assert predictions(run) == predictions(local_runs[title]) and len(predictions(run)) == 3
    (title,) = [title for title, run in ray_runs.items() if run.config.method == "adalora"]
    assert ray_runs[title].summary["method"] == local_runs[title].summary["method"]  # the same final ranks


def kill_writer_after_first_epoch(store, killed: dict, stop: threading.Event) -> None:
    """Watch the store; SIGKILL the process writing the first run that has finished epoch 1 (its metrics
    line and resume state written) but not epoch 2. The pid is the one its writer.lock names: a Ray worker."""
    while not stop.is_set() and not killed:
        for folder in store.glob("*/"):
            lines = (folder / "metrics.jsonl").read_text().splitlines() if (folder / "metrics.jsonl").exists() else []
            if len(lines) == 1 and (folder / "resume.safetensors").exists() and (folder / "writer.lock").exists():
                try:
                    pid = json.loads((folder / "writer.lock").read_text())["pid"]
                except (OSError, ValueError, KeyError):
                    continue  # being written
                killed.update(folder=folder, pid=pid, first_epoch=lines[0])
                os.kill(pid, signal.SIGKILL)
                return
        time.sleep(0.005)


@pytest.mark.slow
def test_a_killed_worker_s_run_is_resumed_not_restarted(local_ray, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    configs = sweep_configs(seeds=(0,), epochs=4, limit=400)  # epochs long enough to be caught between
    killed, stop = {}, threading.Event()
    watcher = threading.Thread(target=kill_writer_after_first_epoch, args=(store, killed, stop), daemon=True)
    watcher.start()
    try:
        outcomes = run_sweep(configs, store, "ray", ray_options=RayOptions(cpus_per_run=1, gpus_per_run=0, retries=2))
    finally:
        stop.set()
        watcher.join()
    assert killed, "no run was caught between epochs"
    assert killed["pid"] != os.getpid() and not any(outcome.failed for outcome in outcomes)
    runs = list_runs(store)
    assert [run.status for run in runs] == ["complete", "complete"]  # nothing corrupt, no second folder
    resumed = next(run for run in runs if run.path == killed["folder"])
    attempts = resumed.record["attempts"]
    assert [a["engine"] for a in attempts] == ["ray", "ray"] and attempts[1]["from_epoch"] >= 1
    assert (resumed.path / "metrics.jsonl").read_text().splitlines()[0] == killed["first_epoch"]  # epoch 1 kept
    assert resumed.epochs_done == 4


def test_running_a_finished_sweep_again_trains_nothing(tmp_path):
    configs = sweep_configs()
    run_sweep(configs, tmp_path, "local")
    before = sorted(p.name for p in tmp_path.iterdir())
    again = run_sweep(configs, tmp_path, "local")
    assert [outcome.planned.action for outcome in again] == ["skip"] * 4
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert [outcome.run.path.name for outcome in again] == before_order(configs, tmp_path)
    forced = run_sweep(configs[:1], tmp_path, "local", force=True)  # --force trains anew
    assert forced[0].planned.action == "train" and len(list(tmp_path.iterdir())) == 5


def before_order(configs, store) -> list[str]:
    """The folder of each config's complete run, in the sweep's order."""
    runs = by_title(list_runs(store))
    return [runs[config.run_title].path.name for config in configs]


class Interrupt(Exception):
    pass


def test_running_an_interrupted_sweep_again_trains_only_what_is_missing(tmp_path):
    configs = sweep_configs()  # prefix-tuning 0, lora 0, prefix-tuning 1, lora 1
    run_sweep(configs[:1], tmp_path, "local")  # the first finished before the interruption

    def stop_after_first_epoch(event):
        if event.phase == "evaluate" and event.epoch == 2:  # epoch 1 is stored; epoch 2 trained, not stored
            raise Interrupt  # as a Ctrl-C would

    with pytest.raises(Interrupt):
        run_sweep(configs[1:2], tmp_path, "local", run_progress=stop_after_first_epoch)
    statuses = sorted(run.status for run in list_runs(tmp_path))
    assert statuses == ["complete", "incomplete"]
    assert [item.action for item in plan(configs, tmp_path)] == ["skip", "resume", "train", "train"]
    outcomes = run_sweep(configs, tmp_path, "local")
    assert [o.planned.action for o in outcomes] == ["skip", "resume", "train", "train"]
    runs = list_runs(tmp_path)
    assert len(runs) == 4 and {run.status for run in runs} == {"complete"}
    resumed = outcomes[1].run
    assert [a["from_epoch"] for a in resumed.record["attempts"]] == [0, 1] and resumed.epochs_done == 2


@pytest.fixture
def lora_fails(monkeypatch):
    """Every lora run of a sweep fails with a two-line error (as a NaN loss would); the others train. Undo: call it."""
    import peftviz.sweep.local as sweep  # the local engine's own name for it

    real = sweep.execute

    def fail_lora(item, *args, **kwargs):
        if item.config.method == "lora":
            raise PeftvizError("training loss is NaN at epoch 1\nmore detail")
        return real(item, *args, **kwargs)

    monkeypatch.setattr(sweep, "execute", fail_lora)
    return lambda: monkeypatch.setattr(sweep, "execute", real)


def test_a_failing_run_is_listed_with_its_error_and_the_others_go_on(tmp_path, lora_fails):
    configs = sweep_configs(seeds=(0,))
    seen = []  # (done, running, failed) as the sweep's bar gets them
    outcomes = run_sweep(configs, tmp_path, "local", on_progress=lambda c: seen.append((c.done, c.running, c.failed)))
    assert [o.failed for o in outcomes] == [False, True]
    assert outcomes[1].error == "training loss is NaN at epoch 1"
    assert seen == [(0, 1, 0), (1, 0, 0), (1, 1, 0), (2, 0, 1)]
    lines = [finished_line(outcome) for outcome in outcomes]
    assert lines[0].startswith("prefix-tuning · seed 0: complete (trained, local on ") and "2/2 epochs" in lines[0]
    assert lines[1] == "lora · seed 0: failed: training loss is NaN at epoch 1"


def test_a_stored_run_matches_its_configuration_with_precision_auto(tmp_path):
    """A run records what "auto" became (fp32 here); the sweep still knows it as the same configuration."""
    configs = sweep_configs(seeds=(0,))[:1]
    run_sweep(configs, tmp_path, "local")
    assert list_runs(tmp_path)[0].config.precision == "fp32" and configs[0].precision == "auto"
    assert [item.action for item in plan(configs, tmp_path)] == ["skip"]
    assert [item.action for item in plan([replace(configs[0], learning_rate=5e-3)], tmp_path)] == ["train"]


@pytest.mark.slow  # starts a local Ray cluster
def test_the_app_s_job_on_ray_reports_each_run_queued_then_done(local_ray, tmp_path):
    """What the Home page's job panel follows when the comparison trains on Ray (the worker child's side)."""
    from peftviz.app.worker import sweep_here

    configs = sweep_configs(seeds=(0,))
    events, told = [], []
    runs = [outcome.run for outcome in sweep_here(configs, tmp_path, events.append, "ray", told=told.append)]
    assert sorted((outcome.run, outcome.word) for outcome in told) == sorted(
        (title, "new") for title in [c.run_title for c in configs]
    )
    titles = [config.run_title for config in configs]
    assert [(e.run, e.phase) for e in events[:2]] == [(title, "queued on Ray") for title in titles]
    assert sorted((e.run, e.phase) for e in events[2:]) == sorted((title, "done") for title in titles)
    assert [run.status for run in runs] == ["complete", "complete"]
    assert {run.record["attempts"][0]["engine"] for run in runs} == {"ray"}


def test_the_command_line_lists_what_failed_and_exits_with_how_many(tmp_path, lora_fails, capsys):
    from peftviz.cli import main

    argv = ["compare", "--preset", "smoke", "--methods", METHODS, "--seeds", "2", "--runs-dir", str(tmp_path)]
    assert main(argv) == 2  # lora at seeds 0 and 1
    captured = capsys.readouterr()
    # one line per distinct error, naming the runs it stopped
    assert "failed: lora · seed 0, lora · seed 1: training loss is NaN at epoch 1\n" in captured.err
    assert "4 run(s) (4 new) in" in captured.out and "2 failed" in captured.out
    lora_fails()  # undone: lora trains now
    assert main(argv) == 0  # again: the two complete runs are skipped, the two failed ones trained
    assert "4 run(s) (2 new, 2 already complete)" in capsys.readouterr().out


def test_runs_stopped_by_one_error_are_one_line_naming_the_first_three():
    """The paper's table offline: 12 runs per dataset that is not available here, one line each dataset."""
    from types import SimpleNamespace

    from peftviz.cli.sweeps import failure_lines

    def failed(title: str, error: str):
        return SimpleNamespace(error=error, planned=SimpleNamespace(config=SimpleNamespace(run_title=title)))

    outcomes = [failed(f"arxiv run {i}", "cannot load 'arxiv'") for i in range(12)]
    outcomes.insert(5, failed("a run", "training loss is NaN at epoch 1"))
    assert failure_lines(outcomes) == [
        "failed: arxiv run 0, arxiv run 1, arxiv run 2 and 9 more: cannot load 'arxiv'",
        "failed: a run: training loss is NaN at epoch 1",
    ]
