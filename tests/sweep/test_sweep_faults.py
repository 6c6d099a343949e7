"""What a sweep counts (issue 33): a run that reads back anything but complete is a failure, here and on
Ray, and the Ray sweep's bar lowers "running" as each task finishes.

Smoke runs (tiny-bert built from its config, 120 documents, 2 epochs): a few seconds each; the Ray test
starts a local Ray with 2 CPUs, as tests/sweep/test_sweep.py does."""

import numpy as np
import pytest

from peftviz.run_config import over_seeds, preset_config
from peftviz.store.runs import list_runs
from peftviz.store.writer import RunWriter
from peftviz.sweep import Outcome, Planned, RayOptions, run_sweep
from peftviz.training.progress import finished_line


def counts_seen(seen: list):
    """A sweep callback keeping (done, running, failed) as the sweep's bar gets them."""
    return lambda counts: seen.append((counts.done, counts.running, counts.failed))


def read_back(tmp_path, how: str):
    """A run of one made-up epoch, read back from the store: finished, failed, or stopped (its writer closed)."""
    import torch

    recorded = {"label_names": ["a", "b"], "parameters": {"total": 10, "trainable": 4}}
    writer = RunWriter.create(tmp_path / how, preset_config("smoke", "lora"), recorded)
    probs, labels = np.full((4, 2), 0.5, dtype=np.float32), np.array([0, 1, 0, 1])
    writer.write_epoch({"epoch": 1, "micro_f1": 0.5, "accuracy": 0.5, "ece": 0.0}, probs, labels)
    writer.write_params({"head.weight": torch.ones(2, 4)}, 1)
    if how == "complete":
        writer.write_predictions("test", probs, labels)
        writer.finish({"params_epoch": 1, "test": {"accuracy": 0.5}})
    elif how == "failed":
        writer.fail("training loss is NaN at epoch 2")
    writer.close()
    (run,) = list_runs(tmp_path / how)
    return run


def test_an_outcome_fails_unless_its_run_reads_back_complete(tmp_path):
    planned = Planned(preset_config("smoke", "lora"), "train")
    runs = {how: read_back(tmp_path, how) for how in ("complete", "incomplete", "failed")}
    assert {how: run.status for how, run in runs.items()} == {h: h for h in runs}
    failed = {how: Outcome(planned, run, run.error).failed for how, run in runs.items()}
    assert failed == {"complete": False, "incomplete": True, "failed": True}
    assert Outcome(planned, None, "its worker process died").failed


def test_a_local_sweep_counts_a_run_that_reads_back_incomplete_as_failed(tmp_path, one_thread):
    """The run trains to its end, but its summary is lost before the sweep reads it back (as a store on a
    file system that dropped the write would be): the sweep must not count it among the successes."""

    def lose_the_summary(event):
        if event.phase == "done":  # summary.json is written; the sweep reads the run back after this
            (next((tmp_path / "runs").iterdir()) / "summary.json").unlink()

    seen = []
    (outcome,) = run_sweep(
        [preset_config("smoke", "lora")],
        tmp_path / "runs",
        "local",
        on_progress=counts_seen(seen),
        run_progress=lose_the_summary,
    )
    assert outcome.run is not None and outcome.run.status == "incomplete" and outcome.run.epochs_done == 2
    assert outcome.failed and seen == [(0, 1, 0), (1, 0, 1)]
    assert finished_line(outcome).startswith("lora · seed 0: incomplete (trained, local on ")


@pytest.mark.slow
def test_the_ray_sweep_lowers_running_as_each_task_finishes(tmp_path):
    ray = pytest.importorskip("ray")
    configs = over_seeds([preset_config("smoke", "lora")], [0, 1])
    seen = []
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        outcomes = run_sweep(
            configs,
            tmp_path,
            "ray",
            ray_options=RayOptions(cpus_per_run=1, gpus_per_run=0),
            on_progress=counts_seen(seen),
        )
    finally:
        ray.shutdown()
    assert [outcome.failed for outcome in outcomes] == [False, False]
    assert seen == [(0, 2, 0), (1, 1, 0), (2, 0, 0)]  # both queued, one finished, both finished
