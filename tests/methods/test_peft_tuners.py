"""Hugging Face peft's tuners as peftviz methods (peft_tuner.py and the named ones): what the training loop asks
of them (AdaLoRA's rank allocation, LoRA+'s learning rates), one-line refusals, and each named method trained
from the command line as a new user would, killed and resumed."""

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from peftviz.classifier import build_classifier
from peftviz.cli import main
from peftviz.methods import peft_methods
from peftviz.modeling.backbones import load_encoder
from peftviz.run_config import preset_config
from peftviz.store.runs import list_runs
from peftviz.training.trainer import make_optimizer, resume, train
from tests.support.helpers import padded_batch, tiny_classifier

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL_ADALORA = {"init_r": 6, "target_r": 2, "tinit": 0, "tfinal": 0, "deltaT": 1}


def adalora_steps(model, steps: int) -> list[dict[str, int]]:
    """Train `model` (an adalora classifier) for `steps` steps as the trainer does; the ranks after each."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.method.schedule(steps)
    ids, mask = padded_batch()
    seen = []
    for step in range(1, steps + 1):
        loss = F.cross_entropy(model(ids, mask).logits, torch.tensor([0, 2])) + model.method.regularization()
        loss.backward()
        optimizer.step()
        model.method.after_step(step)
        optimizer.zero_grad()
        seen.append(model.method.ranks())
    return seen


def test_adalora_allocates_ranks_while_it_trains_down_to_its_budget():
    model = tiny_classifier("adalora", "bert", **SMALL_ADALORA).train()
    start = model.method.ranks()
    assert len(start) == 4 and set(start.values()) == {6}  # query and value of 2 layers, at init_r
    seen = adalora_steps(model, steps=8)
    assert seen[0] != start or seen[3] != start  # ranks move during training, not only at the end
    assert sum(seen[-1].values()) == 2 * len(start)  # the final budget: target_r per map on average
    assert max(seen[-1].values()) <= 6


def test_adalora_regularization_is_the_mean_distance_of_p_and_q_from_orthogonal():
    """Independent of peftviz's sum: ‖PᵀP − I‖_F over P (lora_B) and ‖QQᵀ − I‖_F over Q (lora_A), averaged."""
    model = tiny_classifier("adalora", "bert", orth_reg_weight=0.3)
    distances = []
    for name, p in model.encoder.named_parameters():
        if name.endswith(("lora_A.default", "lora_B.default")):
            gram = p @ p.T if "lora_A" in name else p.T @ p
            distances.append(float(np.linalg.norm(gram.detach().numpy() - np.eye(gram.shape[0]), "fro")))
    assert len(distances) == 8
    assert model.method.regularization().item() == pytest.approx(0.3 * np.mean(distances), rel=1e-6)


def test_adalora_s_final_ranks_are_in_the_run_record_and_in_its_stored_parameters(tmp_path):
    run = train(preset_config("smoke", "adalora", epochs=2, method_options=SMALL_ADALORA), runs_dir=tmp_path)
    final, kept = run.summary["method"]["adalora_final_ranks"], run.summary["method"]["adalora_kept_ranks"]
    assert len(final) == 4 and sum(final.values()) == 2 * 4 and max(final.values()) <= 6
    stored = load_file(run.path / "params.safetensors")  # λ of the pruned triplets are 0 in what the run keeps
    from_params = {
        name.removeprefix("encoder.").removesuffix(".lora_E.default"): int((tensor != 0).sum())
        for name, tensor in stored.items()
        if name.endswith(".lora_E.default")
    }
    assert from_params == kept and sum(kept.values()) >= sum(final.values())  # the best epoch may be before the end


def test_lora_plus_trains_the_b_matrices_at_its_ratio_of_the_learning_rate():
    config = preset_config("smoke", "lora-plus", learning_rate=1e-3, method_options={"loraplus_lr_ratio": 8.0})
    model = tiny_classifier("lora-plus", "bert", loraplus_lr_ratio=8.0)
    optimizer, _ = make_optimizer(model, config, total_steps=10)
    names = {id(p): name for name, p in model.named_parameters()}
    # each group's rate before the warm-up scales it (the schedule keeps it as initial_lr)
    rate_of = {names[id(p)]: group["initial_lr"] for group in optimizer.param_groups for p in group["params"]}
    b_rates = {rate for name, rate in rate_of.items() if ".lora_B." in name}
    others = {rate for name, rate in rate_of.items() if ".lora_B." not in name}
    assert b_rates == {8e-3} and others == {1e-3}
    assert sum(".lora_B." in name for name in rate_of) == 4 and sum(".lora_A." in name for name in rate_of) == 4
    assert sorted({group["initial_lr"] for group in optimizer.param_groups}) == [1e-3, 8e-3]


def exit_status(argv: list[str]) -> int:
    """The command line's exit status, whether argparse exits (a bad flag) or main returns it."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize(
    "method, line",
    [
        ("peft:NO_SUCH", "peftviz: error: argument --method: peft has no tuner type 'NO_SUCH'; its types: "),
        ("peft:POLY", "peftviz: error: peft cannot apply peft:POLY to this BertModel: task_ids should not be None."),
        ("peft:CPT", "peftviz: error: argument --method: peft's CPT is prompt learning, not a tuner of the encoder's"),
    ],
)
def test_a_tuner_peft_lacks_or_cannot_apply_gets_one_line_and_no_run(method, line, tmp_path, capsys):
    store = tmp_path / "store"
    assert exit_status(["train", "--preset", "smoke", "--method", method, "--runs-dir", str(store)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(line) and "Traceback" not in "\n".join(err)
    assert not store.exists() or not list(store.iterdir())


NEW = [name for name in peft_methods() if name not in ("lora", "ia3")]  # lora, ia3: tests/training/test_train.py
BY_TYPE = ["peft:RANDLORA", "peft:ADALORA"]  # any tuner by its peft type; ADALORA takes adalora's training loop


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW + BY_TYPE)
def test_each_named_peft_method_trains_from_the_command_line_and_lists_complete_with_its_counts(name, tmp_path, capsys):
    assert main(["train", "--preset", "smoke", "--method", name, "--runs-dir", str(tmp_path)]) == 0
    (run,) = list_runs(tmp_path)
    assert run.status == "complete" and run.config.method == name and run.epochs_done == 2
    encoder, _ = load_encoder("tiny-bert")
    counts = build_classifier(encoder, name, len(run.label_names), run.config.method_options).parameter_counts()
    assert run.parameters == counts and counts["method"] > 0
    capsys.readouterr()
    main(["runs", "--runs-dir", str(tmp_path)])
    listed = next(line for line in capsys.readouterr().out.splitlines() if run.name in line)
    cells = [cell.strip() for cell in listed.split("|")]
    assert "complete" in cells and str(counts["trainable"]) in [cell.replace(",", "") for cell in cells]


class Killed(BaseException):
    """A simulated kill: no `except` in peftviz handles it."""


def kill_before_second_epoch(monkeypatch) -> None:
    """Stop the process as it is about to write the second epoch's metrics line."""
    real_replace, seen = os.replace, []

    def replace(src, dst):
        if str(dst).endswith("metrics.jsonl"):
            seen.append(dst)
            if len(seen) == 2:
                raise Killed
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dora", "vera", "adalora"])
def test_a_killed_run_of_a_peft_method_resumes_to_the_end(name, tmp_path, monkeypatch):
    """DoRA and VeRA resume to the very numbers of a run never killed; AdaLoRA finishes its schedule with its
    ranks recorded (its sensitivity averages start afresh on resume, so its numbers may differ)."""
    config = preset_config("smoke", name, epochs=3)
    whole = train(config, runs_dir=tmp_path / "whole")
    kill_before_second_epoch(monkeypatch)
    with pytest.raises(Killed):
        train(config, runs_dir=tmp_path / "killed")
    monkeypatch.undo()
    (stopped,) = list_runs(tmp_path / "killed")
    assert stopped.status == "incomplete" and stopped.epochs_done == 1
    resumed = resume(stopped)
    assert resumed.status == "complete" and resumed.epochs_done == 3
    if name == "adalora":
        assert sum(resumed.summary["method"]["adalora_final_ranks"].values()) == 8 * 4  # target_r = 8 on 4 maps
    else:
        np.testing.assert_allclose(resumed.predictions("test")[0], whole.predictions("test")[0], atol=1e-6)


def test_methods_counts_prints_what_the_classifier_counts(capsys):
    assert main(["methods", "--counts", "tiny-bert", "--method", "dora"]) == 0
    header, _, row = capsys.readouterr().out.strip().splitlines()
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
    encoder, _ = load_encoder("tiny-bert")
    counts = build_classifier(encoder, "dora", 5).parameter_counts()
    assert cells["method"] == "dora" and int(cells["method params"]) == counts["method"] > 0
    assert int(cells["trainable params"]) == counts["trainable"]


def test_the_peft_method_set_is_the_methods_built_on_peft_s_layers():
    from peftviz.methods import METHODS
    from peftviz.run_config import comparison_methods

    assert comparison_methods("peft") == peft_methods() == [name for name in METHODS if METHODS[name].peft_based]
    assert len(peft_methods()) == 19 and {"lora", "dora", "adalora", "p-tuning"} <= set(peft_methods())
    assert not {"prefix-tuning", "prompt-tuning", "bitfit"} & set(peft_methods())  # peftviz's own implementations
