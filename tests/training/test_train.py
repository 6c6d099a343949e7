"""Training, the run store and the CLI, on the smoke preset (a tiny random BERT, seconds)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from peftviz import calibration
from peftviz.cli import main
from peftviz.run_config import preset_config
from peftviz.store.runs import list_runs, load_run
from peftviz.sweep.variants import comparison_configs
from peftviz.training.inference import load_trained, make_loader, predict, run_data, tokenize
from peftviz.training.trainer import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """The smoke comparison: every method, one store, trained once for the module."""
    store = tmp_path_factory.mktemp("runs")
    from tests.support.sweeps import trained

    events = []
    runs = trained(comparison_configs("smoke"), store, events.append)
    return store, runs, events


def test_compare_writes_one_complete_run_per_method(smoke_runs):
    store, runs, _ = smoke_runs
    assert [run.label for run in runs] == [
        "fine-tuning",
        "prefix-tuning",
        "prefix-propagation",
        "kernel-prefix-propagation",
        "tiny-attention 1H",
        "tiny-attention 4H averaged",
    ]
    listed = list_runs(store)
    assert sorted(r.name for r in listed) == sorted(r.name for r in runs)
    for run in listed:
        assert run.status == "complete", (run.name, run.error)
        assert [m["epoch"] for m in run.metrics] == [1, 2]
        for key in ("epoch", "accuracy", "ece", "nll", "brier", "train_loss", "micro_f1", "macro_f1"):
            assert all(np.isfinite(m[key]) for m in run.metrics), key
        config = json.loads((run.path / "config.json").read_text())
        assert config["environment"]["packages"]["torch"] == torch.__version__
        assert config["seed"] == 0 and config["dataset"] == "bbc-news" and config["method"] in run.label
        assert run.params_path.stat().st_size > 0
        assert "accuracy" in run.summary["test"]


def test_stored_ece_equals_ece_recomputed_from_stored_predictions(smoke_runs):
    _, runs, _ = smoke_runs
    for run in runs:
        for record in run.metrics:
            path = run.path / "predictions" / f"epoch_{record['epoch']}.npz"
            with np.load(path, allow_pickle=False) as npz:
                probs, labels = npz["probs"], npz["labels"]
            assert probs.dtype.kind == "f" and labels.dtype.kind == "i" and probs.shape == (len(labels), 5)
            assert record["ece"] == calibration.ece(probs, labels, n_bins=run.config.ece_bins)
            assert record["accuracy"] == calibration.accuracy(probs, labels)


def test_four_heads_start_from_the_one_head_run_and_report_averaging(smoke_runs):
    _, runs, _ = smoke_runs
    one_head, four_heads = runs[-2], runs[-1]
    assert four_heads.config.method_options["init_from"] == str(one_head.params_path)
    averaged = four_heads.summary["averaged"]
    assert averaged["parameters"]["method"] == one_head.parameters["method"]
    assert four_heads.parameters["method"] == 4 * one_head.parameters["method"]
    probs, _ = four_heads.predictions("averaged")
    assert probs.shape[1] == 5 and 0 <= averaged["validation"]["ece"] <= 1


def test_progress_events_cover_every_batch_and_epoch(smoke_runs):
    _, runs, events = smoke_runs
    done = [e for e in events if e.phase == "done"]
    assert [e.run for e in done] == [f"{run.label} · seed 0" for run in runs]
    train_events = [e for e in events if e.phase == "train" and e.run == "fine-tuning · seed 0" and e.epoch == 1]
    assert [e.batch for e in train_events] == list(range(1, train_events[0].batches + 1))


def test_rebuilt_model_reproduces_the_stored_predictions(smoke_runs):
    _, runs, _ = smoke_runs
    for run in runs[:5]:  # the averaged run's params are its four heads before averaging
        model, tokenizer = load_trained(run, device="cpu")
        examples = tokenize(run_data(run).splits["validation"], tokenizer, run.config.max_length)
        probs, labels = predict(model, make_loader(examples, 8, tokenizer.pad_token_id), torch.device("cpu"))
        stored_probs, stored_labels = run.predictions(run.best_epoch)
        np.testing.assert_array_equal(labels, stored_labels)
        np.testing.assert_allclose(probs, stored_probs, atol=1e-5)


def test_non_finite_loss_stops_the_run_and_keeps_finished_epochs(tmp_path, monkeypatch):
    import peftviz.training.trainer as train_module

    real = train_module.F.cross_entropy
    calls = {"n": 0}

    def poisoned(logits, labels):
        calls["n"] += 1
        return real(logits, labels) * (float("nan") if calls["n"] > 15 else 1.0)  # 15 batches = epoch 1

    monkeypatch.setattr(train_module.F, "cross_entropy", poisoned)
    config = preset_config("smoke", "prefix-tuning", epochs=3)
    with pytest.raises(train_module.TrainingError, match="loss became nan in epoch 2"):
        train(config, tmp_path)
    (run,) = list_runs(tmp_path)
    assert run.status == "failed" and "keeping the 1 finished epoch" in run.error
    assert [m["epoch"] for m in run.metrics] == [1]
    assert run.predictions(1)[0].shape[0] == run.metrics[0]["n"]


@pytest.mark.slow  # trains on the shipped MiniLM in a child process, then kills it
def test_a_killed_run_lists_as_incomplete_and_loads_its_finished_epochs(tmp_path):
    command = [
        sys.executable,
        "-m",
        "peftviz",
        "train",
        "--preset",
        "smoke",
        "--method",
        "prefix-propagation",
        "--epochs",
        "200",
        "--runs-dir",
        str(tmp_path),
    ]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        # an epoch is finished once its parameters (the last of its files, epoch 1 being a new best) are in place
        while time.time() < deadline and not list(tmp_path.glob("*/params.safetensors")):
            time.sleep(0.05)
        assert list(tmp_path.glob("*/params.safetensors")), "no epoch finished in time"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    (run,) = list_runs(tmp_path)
    assert run.status == "incomplete" and run.epochs_done >= 1
    probs, labels = run.predictions(1)
    assert run.metrics[0]["ece"] == calibration.ece(probs, labels, n_bins=10)


def test_corrupt_run_folders_are_listed_as_corrupt(tmp_path, smoke_runs):
    _, runs, _ = smoke_runs
    broken_config = tmp_path / "broken-config"
    broken_config.mkdir()
    (broken_config / "config.json").write_text("{not json")
    missing_npz = tmp_path / "missing-npz"
    missing_npz.mkdir()
    (missing_npz / "config.json").write_text(json.dumps({"method": "prefix-tuning", "model": "tiny-bert"}))
    (missing_npz / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "micro_f1": 0.5}) + "\n")
    for name, config in {"no-method": {}, "bad-option": {"method": "prefix-tuning", "pooling": "max"}}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    statuses = {run.name: (run.status, run.error) for run in list_runs(tmp_path)}
    assert statuses["no-method"] == ("corrupt", "config.json: the run names no method")
    assert statuses["bad-option"] == ("corrupt", "config.json: pooling must be one of cls, mean, not 'max'")
    assert statuses["broken-config"] == (
        "corrupt",
        "config.json: is not JSON (Expecting property name enclosed in double quotes, line 1)",
    )
    assert statuses["missing-npz"] == ("corrupt", "config.json: label_names must be a list of strings, not null")
    bad_params = runs[0].path.parent / "copy-with-bad-params"
    shutil.copytree(runs[0].path, bad_params)
    try:
        (bad_params / "params.safetensors").write_bytes(b"garbage")
        bad_params_run = load_run(bad_params)
    finally:
        shutil.rmtree(bad_params)
    assert bad_params_run.status == "corrupt"
    assert bad_params_run.error == "params.safetensors: the file has no valid safetensors header"


def one_line_error(capsys, argv) -> str:
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse
        code = exit.code
    err = capsys.readouterr().err.strip()
    assert code != 0 and err and "\n" not in err, err
    return err


def test_cli_errors_are_one_line(tmp_path, capsys):
    csv = tmp_path / "no_label.csv"
    csv.write_text("text,category\nhello,a\nworld,b\n")
    one_class = tmp_path / "one_class"
    (one_class / "only").mkdir(parents=True)
    (one_class / "only" / "a.txt").write_text("some text")
    base = ["train", "--preset", "smoke", "--runs-dir", str(tmp_path / "runs")]
    assert "no 'label' column" in one_line_error(capsys, base + ["--dataset", str(csv)])
    assert "only one class" in one_line_error(capsys, base + ["--dataset", str(one_class)])
    assert "does not exist" in one_line_error(capsys, base + ["--model", str(tmp_path / "no-model")])
    assert "invalid float value: 'fast'" in one_line_error(capsys, base + ["--learning-rate", "fast"])
    assert "no option 'prefix_len'" in one_line_error(capsys, base + ["--option", "prefix_len=3"])
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())  # nothing half-written


def test_cli_runs_lists_the_store(smoke_runs, capsys):
    store, runs, _ = smoke_runs
    assert main(["runs", "--runs-dir", str(store)]) == 0
    runs_table, groups_table = capsys.readouterr().out.split("Groups (runs that differ only in the training seed)")
    assert all(run.name in runs_table for run in runs) and runs_table.count("| complete |") == len(runs)
    assert groups_table.count("| one run: seed 0 | 1 |") == len(runs)  # one group per run, one complete run each


def test_cuda_is_picked_when_present(monkeypatch):
    from peftviz.training.inference import pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device("auto").type == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto").type == "cpu"


def test_the_store_lists_runs_in_the_order_they_were_made(smoke_store):
    """Smoke runs are made several to a second: a creation time to the second left ties to the folder
    name, and the Calibration page's first six runs then missed one of the comparison's."""
    from peftviz.run_config import alpha_grid
    from peftviz.training.trainer import created_now

    made = comparison_configs("smoke") + alpha_grid("smoke", (1e-3, 1e-2, 4e-2))  # as conftest's smoke_store
    assert [run.config.run_title for run in list_runs(smoke_store)] == [config.run_title for config in made]
    first = created_now()
    time.sleep(0.002)
    assert created_now() > first  # within one second too
