"""`export` takes complete runs only (issue 33): a run stopped after its first epoch has parameters that
load, so nothing but the status check keeps it from being shared as if it were trained; a failed run
neither. The refusal is one line, and no folder is left behind.

Two smoke LoRA runs (tiny-bert built from its config, 120 documents, 2 epochs), a few seconds each: one
interrupted after its first epoch is stored, as a Ctrl-C would; one trained to its end, which exports,
and a copy of it whose summary.json is lost: it reads back incomplete with every other file in place,
so only the status check stands between it and an export."""

import shutil

import numpy as np
import pytest

from peftviz.cli import main
from peftviz.errors import ExchangeError
from peftviz.exchange.export import export_run
from peftviz.run_config import preset_config
from peftviz.store.runs import list_runs, load_run
from peftviz.store.writer import RunWriter
from peftviz.sweep import run_sweep


class Interrupt(Exception):
    pass


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory, one_thread):
    """A smoke LoRA run whose epoch 1 (and its parameters) is stored; epoch 2 never finished."""

    def stop_in_epoch_two(event):
        if event.phase == "evaluate" and event.epoch == 2:
            raise Interrupt

    store = tmp_path_factory.mktemp("stopped")
    with pytest.raises(Interrupt):
        run_sweep([preset_config("smoke", "lora")], store, "local", run_progress=stop_in_epoch_two)
    (run,) = list_runs(store)
    return run


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, one_thread):
    store = tmp_path_factory.mktemp("finished")
    (outcome,) = run_sweep([preset_config("smoke", "lora")], store, "local")
    return outcome.run


def test_a_complete_run_exports_and_the_same_run_without_its_summary_does_not(finished_run, tmp_path):
    assert finished_run.status == "complete"
    assert (export_run(finished_run, tmp_path / "adapter") / "adapter_config.json").is_file()
    lost = shutil.copytree(finished_run.path, tmp_path / "runs" / finished_run.name)
    (lost / "summary.json").unlink()
    run = load_run(lost)
    assert run.status == "incomplete" and run.epochs_done == 2 and (lost / "predictions" / "test.npz").is_file()
    with pytest.raises(ExchangeError) as refused:
        export_run(run, tmp_path / "again")
    assert str(refused.value) == f"run {run.name} is incomplete; only a complete run can be exported"
    assert not (tmp_path / "again").exists()


def test_export_refuses_a_stopped_run_whose_parameters_load(stopped_run, tmp_path):
    assert stopped_run.status == "incomplete" and stopped_run.epochs_done == 1 and stopped_run.params_epoch == 1
    with pytest.raises(ExchangeError) as refused:
        export_run(stopped_run, tmp_path / "adapter")
    assert str(refused.value) == f"run {stopped_run.name} is incomplete; only a complete run can be exported"
    assert list(tmp_path.iterdir()) == []


def test_the_export_command_refuses_a_stopped_run_in_one_line(stopped_run, tmp_path, capsys):
    argv = ["export", stopped_run.name, str(tmp_path / "adapter"), "--runs-dir", str(stopped_run.path.parent)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == f"peftviz: error: run {stopped_run.name} is incomplete; only a complete run can be exported\n"
    assert list(tmp_path.iterdir()) == []


def test_export_refuses_a_failed_run(tmp_path):
    import torch

    recorded = {"label_names": ["a", "b"], "parameters": {"total": 10, "trainable": 4}}
    writer = RunWriter.create(tmp_path / "runs", preset_config("smoke", "lora"), recorded)
    writer.write_epoch(
        {"epoch": 1, "micro_f1": 0.5, "accuracy": 0.5, "ece": 0.0}, np.full((2, 2), 0.5), np.array([0, 1])
    )
    writer.write_params({"head.weight": torch.ones(2, 4)}, 1)
    writer.fail("training loss is NaN at epoch 2")
    run = load_run(writer.path)
    assert run.status == "failed" and run.params_epoch == 1
    with pytest.raises(ExchangeError, match=rf"^run {run.name} is failed; only a complete run can be exported$"):
        export_run(run, tmp_path / "adapter")
    assert not (tmp_path / "adapter").exists()
