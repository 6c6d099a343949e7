"""fp16's loss scaler in the resume file: its scale and growth tracker (and settings) are written with the
rest of the training state and restored on resume; files without it (bf16, fp32, older files) still load.

No GPU here: the scaler is torch's GradScaler on the CPU, driven by hand through steps that grow and
back off its scale, around the same `checkpoint` functions the trainer calls.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from peftviz.errors import RunError
from peftviz.run_config import preset_config
from peftviz.store.writer import RunWriter
from peftviz.training import checkpoint

LABELS = ["a", "b", "c"]
# a step the scaler skips (an overflow) leaves the scheduler stepping first: torch warns, as in real fp16 runs
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")


class Tiny(nn.Linear):
    """A model with the one method of PeftClassifier the resume state reads."""

    def trainable_state_dict(self):
        return self.state_dict()


def prepared(scaler=None, seed: int = 0) -> SimpleNamespace:
    """What `checkpoint` reads of a `train.Prepared`: model, optimizer, scheduler, loader generator, scaler."""
    torch.manual_seed(seed)
    model = Tiny(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, total_iters=10)
    return SimpleNamespace(
        model=model, optimizer=optimizer, scheduler=scheduler, generator=torch.Generator(), scaler=scaler
    )


def fresh_scaler() -> torch.amp.GradScaler:
    return torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)


def train_steps(state: SimpleNamespace, overflow_at: tuple[int, ...], steps: int = 6) -> None:
    """Steps as the engine runs them under fp16: scaled backward, step (skipped on overflow), update."""
    for step in range(steps):
        loss = state.model(torch.ones(2, 4)).square().mean()
        state.scaler.scale(loss).backward()
        if step in overflow_at:  # an fp16 overflow: the scaler skips the step and backs off
            state.model.weight.grad[0, 0] = float("inf")
        state.scaler.step(state.optimizer)
        state.scaler.update()
        state.scheduler.step()
        state.optimizer.zero_grad()


def written(tmp_path, state: SimpleNamespace, epoch: int = 1):
    """The resume file of `state` as the trainer writes it (RunWriter.write_resume); its path."""
    writer = RunWriter.create(tmp_path / "runs", preset_config("smoke"), {"label_names": LABELS})
    writer.write_resume(*checkpoint.training_state(epoch, state))
    writer.close()
    return writer.path / checkpoint.FILE


def test_the_scalers_state_is_written_and_restored(tmp_path):
    trained = prepared(fresh_scaler())
    train_steps(trained, overflow_at=(0, 1))  # 1024 backs off to 256, grows to 512, and counts towards 1024
    before = trained.scaler.state_dict()
    assert (before["scale"], before["_growth_tracker"]) == (512.0, 1)

    epoch, tensors, metadata = checkpoint.read_state(written(tmp_path, trained))
    resumed = prepared(fresh_scaler(), seed=1)
    checkpoint.restore(tensors, metadata, resumed)
    assert epoch == 1 and resumed.scaler.state_dict() == before

    train_steps(trained, overflow_at=(), steps=3)  # and it goes on as the uninterrupted run does
    train_steps(resumed, overflow_at=(), steps=3)
    assert resumed.scaler.state_dict() == trained.scaler.state_dict()
    assert torch.equal(resumed.model.weight, trained.model.weight)


def test_the_scalers_settings_come_back_too(tmp_path):
    trained = prepared(
        torch.amp.GradScaler("cpu", init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=7)
    )
    train_steps(trained, overflow_at=(0,))
    _, tensors, metadata = checkpoint.read_state(written(tmp_path, trained))
    resumed = prepared(fresh_scaler())
    checkpoint.restore(tensors, metadata, resumed)
    assert resumed.scaler.state_dict() == trained.scaler.state_dict()


@pytest.mark.parametrize("scaler_when_resuming", [None, "fresh"], ids=["no scaler", "a scaler"])
def test_a_resume_file_without_a_scaler_still_loads(tmp_path, scaler_when_resuming):
    trained = prepared(None)  # a bf16 or fp32 run, or a file written before the scaler was kept
    _, tensors, metadata = checkpoint.read_state(written(tmp_path, trained))
    assert "scaler" not in metadata
    resumed = prepared(fresh_scaler() if scaler_when_resuming else None, seed=1)
    checkpoint.restore(tensors, metadata, resumed)
    assert torch.equal(resumed.model.weight, trained.model.weight)
    if resumed.scaler is not None:  # it starts as a fresh one does
        assert resumed.scaler.state_dict() == fresh_scaler().state_dict()


DAMAGED_SCALERS = {  # the metadata's scaler entry -> how the one line naming it goes on after "metadata scaler"
    "not JSON": ("{scale", " is not JSON"),
    "a list": ("[1024.0, 0]", " must be an object, not [1024.0, 0]"),
    "a string": ('"big"', ' must be an object, not "big"'),
    "scale text": ({"scale": "big"}, '.scale must be a number > 0, not "big"'),
    "scale NaN": ({"scale": float("nan")}, ".scale must be a number > 0, not nan"),
    "scale zero": ({"scale": 0.0}, ".scale must be a number > 0, not 0.0"),
    "tracker negative": ({"_growth_tracker": -1}, "._growth_tracker must be at least 0, not -1"),
    "tracker float": ({"_growth_tracker": 1.5}, "._growth_tracker must be an integer, not 1.5"),
    "tracker missing": ({"_growth_tracker": None}, "._growth_tracker must be an integer, not null"),
    "interval zero": ({"growth_interval": 0}, ".growth_interval must be at least 1, not 0"),
    "backoff above 1": ({"backoff_factor": 2.0}, ".backoff_factor must be in (0, 1), not 2.0"),
    "growth below 1": ({"growth_factor": 0.5}, ".growth_factor must be a number > 1, not 0.5"),
}


@pytest.mark.parametrize("damage", list(DAMAGED_SCALERS))
def test_a_damaged_scaler_entry_is_one_line_naming_the_file(tmp_path, damage):
    entry, message = DAMAGED_SCALERS[damage]
    state = prepared(fresh_scaler())
    tensors, metadata = checkpoint.training_state(1, state)
    if isinstance(entry, dict):
        stored = json.loads(metadata["scaler"]) | entry
        entry = json.dumps({key: value for key, value in stored.items() if value is not None})
    metadata["scaler"] = entry
    writer = RunWriter.create(tmp_path / "runs", preset_config("smoke"), {"label_names": LABELS})
    writer.write_resume(tensors, metadata)
    writer.close()
    with pytest.raises(RunError) as caught:
        checkpoint.read_state(writer.path / checkpoint.FILE)
    assert str(caught.value).startswith(f"resume.safetensors: metadata scaler{message}")
    assert "\n" not in str(caught.value)


def test_the_trainer_keeps_the_engines_scaler_with_the_training_state(monkeypatch):
    """Under fp16 Accelerate's scaler steps the optimizer: the trainer hands it to the resume state."""
    from peftviz.training.trainer import Trainer

    trainer = Trainer(preset_config("smoke", epochs=1))
    scaler = fresh_scaler()
    monkeypatch.setattr(trainer.engine.accelerator, "scaler", scaler)  # what Accelerate makes under fp16
    state = trainer._prepare(None)
    assert state.scaler is scaler
    _, metadata = checkpoint.training_state(1, state)
    assert json.loads(metadata["scaler"]) == scaler.state_dict()
