"""The training engine (engine.py): data parallelism under `accelerate launch`, mixed precision, and
gradient checkpointing, on the smoke preset and the tiny models."""

import copy
import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from peftviz import calibration
from peftviz.classifier import build_classifier
from peftviz.cli import main
from peftviz.errors import ConfigError
from peftviz.methods import METHODS
from peftviz.modeling.backbones import load_encoder, tiny_encoder
from peftviz.run_config import preset_config
from peftviz.store.runs import list_runs
from peftviz.training.engine import resolve_precision
from peftviz.training.inference import evaluation_metrics, run_data
from peftviz.training.trainer import train

ROOT = Path(__file__).resolve().parents[2]
# With dropout off, a two-process run differs from a one-process run of the same effective batch only
# in rounding: each process's half-batch mean, averaged by the all-reduce, against one mean over the
# batch. Measured: at most 1.2e-7 on parameters whose largest entries are about 4. (With dropout on,
# each process draws its own masks, so the two runs follow different random paths, as two seeds do.)
DATA_PARALLEL_TOLERANCE = 1e-5


def launch_two_processes(store: Path, *flags: str) -> subprocess.CompletedProcess:
    """`accelerate launch --multi_gpu --num_processes 2 -m peftviz train --preset smoke --device cpu ...`.

    Two processes on the CPU, with gloo. Not `accelerate launch --cpu --num_processes 2`: accelerate
    1.x starts several CPU processes only through mpirun (with --mpirun_hostfile), and otherwise
    starts one process, silently. `--multi_gpu` starts them through torchrun, GPU or not.
    """
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.accelerate_cli",
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "peftviz",
        "train",
        "--preset",
        "smoke",
        "--device",
        "cpu",
        "--runs-dir",
        str(store),
        *flags,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # two processes on two cores
    return subprocess.run(command, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def without_dropout(tmp_path_factory) -> list[str]:
    """Flags for the smoke preset with no dropout anywhere and validation and test splits of 117:
    the tiny BERT saved with zero dropout, and a CSV of 120 training and 117 + 117 held-out texts.
    117 = 14 batches of 8 and one of 5, which the two processes pad to 3 + 3."""
    folder = tmp_path_factory.mktemp("no-dropout")
    encoder, tokenizer = load_encoder("tiny-bert")
    encoder.config.hidden_dropout_prob = encoder.config.attention_probs_dropout_prob = 0.0
    encoder.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    rng = np.random.default_rng(0)
    words = np.array(["market", "goal", "film", "vote", "phone", "bank", "match", "album", "law", "chip"])
    with open(folder / "data.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label", "split"])
        for split, n in (("train", 120), ("validation", 117), ("test", 117)):
            for i in range(n):
                writer.writerow([" ".join(rng.choice(words[2 * (i % 5) :][:4], 12)), i % 5, split])
    model, data = str(folder / "model"), str(folder / "data.csv")
    return ["--model", model, "--dataset", data, "--head-dropout", "0", "--option", "prefix_dropout=0"]


@pytest.mark.slow
@pytest.mark.parametrize("dropout", [True, False], ids=["smoke", "no-dropout-uneven-last-batch"])
def test_two_processes_train_the_run_one_process_trains(tmp_path, dropout, request):
    flags = [] if dropout else request.getfixturevalue("without_dropout")
    launched = launch_two_processes(tmp_path / "two", *flags)
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert launched.stdout.count("run(s) in") == 1  # only the main process prints
    (run,) = list_runs(tmp_path / "two")  # one run folder, written by the main process alone
    assert run.status == "complete", run.error
    assert run.record["environment"]["processes"] == 2
    assert run.record["environment"]["distributed_backend"] == "gloo"

    expected_labels = np.array(run_data(run).splits["validation"].to_dict()["label"])
    for record in run.metrics:  # every example once, in dataset order; metrics as recomputed
        probs, labels = run.predictions(record["epoch"])
        np.testing.assert_array_equal(labels, expected_labels)
        recomputed = evaluation_metrics(probs, labels, run.config.ece_bins)
        for key in ("accuracy", "ece", "nll", "brier", "micro_f1", "macro_f1", "n"):
            assert record[key] == pytest.approx(recomputed[key], abs=1e-12), key
    if dropout:
        return

    # the same config in one process: the same effective batch (8), in one forward instead of 4 + 4
    single = train(run.config, tmp_path / "one")
    two_params, one_params = load_file(str(run.params_path)), load_file(str(single.params_path))
    assert two_params.keys() == one_params.keys()
    for name, tensor in one_params.items():
        torch.testing.assert_close(two_params[name], tensor, rtol=0, atol=DATA_PARALLEL_TOLERANCE, msg=name)
    assert run.best_epoch == single.best_epoch
    for two, one in zip(run.metrics, single.metrics, strict=True):
        assert two["train_loss"] == pytest.approx(one["train_loss"], abs=DATA_PARALLEL_TOLERANCE)
        np.testing.assert_allclose(
            run.predictions(two["epoch"])[0], single.predictions(one["epoch"])[0], atol=DATA_PARALLEL_TOLERANCE
        )


def test_bf16_trains_the_smoke_preset_on_cpu_with_float32_probabilities(tmp_path):
    config = preset_config("smoke", "prefix-propagation", precision="bf16", epochs=1, device="cpu")
    run = train(config, tmp_path)
    assert run.status == "complete" and run.config.precision == "bf16"
    fp32 = train(preset_config("smoke", "prefix-propagation", epochs=1, device="cpu"), tmp_path)
    assert fp32.config.precision == "fp32"  # "auto" on the CPU
    for name in ("epoch_1", "test"):
        probs, _ = run.predictions(1 if name == "epoch_1" else name)
        assert probs.dtype == np.float32
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
        reference = fp32.predictions(1 if name == "epoch_1" else name)[0]
        assert 0 < np.abs(probs - reference).max() < 0.05  # autocast ran: bf16's 8-bit mantissa shows
    assert run.metrics[0]["ece"] == pytest.approx(calibration.summary(*run.predictions(1), n_bins=10)["ece"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 trains where CUDA is")
def test_fp16_on_cpu_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys):
    store = tmp_path / "runs"
    assert main(["train", "--preset", "smoke", "--precision", "fp16", "--runs-dir", str(store)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "fp16 needs a CUDA GPU" in error and "bf16 or fp32" in error
    assert not store.exists() or not any(store.iterdir())


@pytest.mark.parametrize(
    ("precision", "device", "bf16_supported", "expected"),
    [
        ("auto", "cpu", False, "fp32"),
        ("auto", "cuda", True, "bf16"),
        ("auto", "cuda", False, "fp32"),  # e.g. a GTX 1080 Ti: fp16 only by choice
        ("bf16", "cpu", False, "bf16"),
        ("fp16", "cuda", False, "fp16"),
        ("fp32", "cuda", True, "fp32"),
    ],
)
def test_precision_auto_is_bf16_on_gpus_that_support_it(monkeypatch, precision, device, bf16_supported, expected):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: bf16_supported)
    assert resolve_precision(precision, torch.device(device)) == expected


def test_bf16_on_a_gpu_without_it_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA GeForce GTX 1080 Ti")
    with pytest.raises(ConfigError, match="GTX 1080 Ti has no bfloat16; use fp16 or fp32"):
        resolve_precision("bf16", torch.device("cuda"))


def loss_and_gradients(encoder, method: str, checkpointing: bool) -> tuple[float, dict, int]:
    """One training forward and backward on a padded batch: (loss, gradients, feed-forward calls)."""
    torch.manual_seed(0)
    model = build_classifier(copy.deepcopy(encoder), method, 3).train()
    if checkpointing:
        model.enable_gradient_checkpointing()
    calls = []
    for layer in model.encoder.encoder.layer:  # inside each layer's checkpoint: runs again in the backward
        layer.intermediate.register_forward_hook(lambda *args: calls.append(1))
    ids = torch.randint(5, 100, (2, 24))
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[1, 17:] = 0
    torch.manual_seed(1)  # the same dropout masks in both runs; checkpointing replays them
    loss = torch.nn.functional.cross_entropy(model(ids, mask).logits, torch.tensor([0, 2]))
    loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters() if p.requires_grad}
    return loss.item(), grads, len(calls)


@pytest.fixture(scope="module")
def tiny_longformer():
    return tiny_encoder("longformer", layers=2)


@pytest.mark.parametrize("method", list(METHODS))
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tiny_longformer, method):
    loss, grads, calls = loss_and_gradients(tiny_longformer, method, checkpointing=False)
    loss_ckpt, grads_ckpt, calls_ckpt = loss_and_gradients(tiny_longformer, method, checkpointing=True)
    assert (calls, calls_ckpt) == (2, 4)  # each layer recomputed once in the backward
    assert loss_ckpt == pytest.approx(loss, abs=1e-5)
    assert grads_ckpt.keys() == grads.keys()
    assert all(grad is not None for grad in grads_ckpt.values())  # frozen backbone or not, gradients arrive
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ckpt[name], grad, rtol=0, atol=1e-5, msg=name)


def test_gradient_checkpointing_trains_the_smoke_run_it_trains_without(tmp_path):
    plain = train(preset_config("smoke", "tiny-attention", epochs=1), tmp_path)
    checkpointed = train(preset_config("smoke", "tiny-attention", epochs=1, gradient_checkpointing=True), tmp_path)
    assert checkpointed.config.gradient_checkpointing
    assert checkpointed.metrics[0]["train_loss"] == pytest.approx(plain.metrics[0]["train_loss"], abs=1e-5)
    np.testing.assert_allclose(checkpointed.predictions(1)[0], plain.predictions(1)[0], atol=1e-5)
