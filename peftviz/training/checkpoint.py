"""The training state at the end of an epoch, so that `train --resume` continues a killed run exactly.

One safetensors file (written atomically by `RunWriter.write_resume`) holds everything that the
next epoch reads:

    model.<name>             the trainable parameters (the frozen backbone is reloaded from its source)
    optimizer.<i>.<key>      AdamW's state of parameter i: step, exp_avg, exp_avg_sq
    rng.torch, rng.cuda.<d>  the global generators (dropout)
    rng.loader               the training loader's generator (the next epoch's batch order)
    metadata                 epoch; the optimizer's param groups and the scheduler's state as JSON;
                             under fp16, the loss scaler's state (scale, growth tracker, settings) as JSON

Restored into a model, optimizer, scheduler and loader built from the same config, the next epoch
repeats bit for bit what the uninterrupted run would have done. torch's own `torch.save` would
pickle the optimizer's state dict; peftviz loads nothing with pickle, hence this flat layout.
"""

from __future__ import annotations

import json

import torch

from peftviz.errors import RunError
from peftviz.store import schema

FILE = "resume.safetensors"


def training_state(epoch: int, prepared) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, metadata) of a run's state (`train.Prepared`) after `epoch`: what `RunWriter.write_resume` stores."""
    tensors = {f"model.{name}": value for name, value in prepared.model.trainable_state_dict().items()}
    saved = prepared.optimizer.state_dict()
    for index, state in saved["state"].items():
        for key, value in state.items():
            tensors[f"optimizer.{index}.{key}"] = value if torch.is_tensor(value) else torch.tensor(value)
    tensors["rng.torch"] = torch.get_rng_state()
    tensors["rng.loader"] = prepared.generator.get_state()
    if torch.cuda.is_available():
        for device, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{device}"] = state
    metadata = {
        "epoch": str(epoch),
        "param_groups": json.dumps(saved["param_groups"]),
        "scheduler": json.dumps(prepared.scheduler.state_dict()),
    }
    if prepared.scaler is not None and prepared.scaler.is_enabled():  # fp16: the scale the next step uses
        metadata["scaler"] = json.dumps(prepared.scaler.state_dict())
    return tensors, metadata


def read_state(path) -> tuple[int, dict[str, torch.Tensor], dict[str, str]]:
    """(epoch, tensors, metadata) of a resume file, its header checked first."""
    from safetensors import SafetensorError, safe_open

    header = schema.safetensors_header(path, FILE)
    epoch = schema.stored_epoch(header, FILE)
    if epoch is None:
        raise schema.Corrupt(FILE, "metadata epoch is missing")
    schema.scaler_state(header["__metadata__"], FILE)  # a damaged entry is refused before anything is restored
    try:
        with safe_open(str(path), framework="pt") as f:
            names = f.keys()  # safe_open is not a dict: no iteration over it
            return epoch, {name: f.get_tensor(name) for name in names}, f.metadata()
    except (OSError, SafetensorError) as err:
        raise schema.Corrupt(FILE, f"the file cannot be read ({err})") from None


def restore(tensors: dict, metadata: dict, prepared) -> None:
    """Put a stored state back into a run's objects (`train.Prepared`) built from the same config."""
    try:
        prepared.model.load_state_dict(model_tensors(tensors), strict=False)
        prepared.optimizer.load_state_dict(
            {"state": _optimizer_state(tensors), "param_groups": json.loads(metadata["param_groups"])}
        )
        prepared.scheduler.load_state_dict(json.loads(metadata["scheduler"]))
    except (KeyError, ValueError, RuntimeError) as err:
        raise RunError(f"{FILE} does not fit the run's model: {str(err).splitlines()[0]}") from None
    _restore_scaler(metadata, prepared.scaler)
    torch.set_rng_state(tensors["rng.torch"])
    prepared.generator.set_state(tensors["rng.loader"])
    cuda = sorted(name for name in tensors if name.startswith("rng.cuda."))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[name] for name in cuda])


def _restore_scaler(metadata: dict, scaler) -> None:
    """The loss scale where the run scales its loss (fp16). A file without one (bf16 and fp32 runs, older
    files) leaves the fresh scaler, which finds its scale again within a few skipped steps; a stored
    state with no scaler to take it has no use."""
    state = schema.scaler_state(metadata, FILE)
    if state is not None and scaler is not None:
        scaler.load_state_dict(state)


def _optimizer_state(tensors: dict) -> dict[int, dict]:
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        if name.startswith("optimizer."):
            _, index, key = name.split(".", 2)
            state.setdefault(int(index), {})[key] = value
    return state


def model_tensors(tensors: dict) -> dict[str, torch.Tensor]:
    """The trainable parameters within a state: the parameters of its epoch."""
    return {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
