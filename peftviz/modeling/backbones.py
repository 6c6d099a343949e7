"""Encoders by name: a small registry of where an encoder comes from.

    minilm                    the shipped all-MiniLM-L6-v2 (offline default)
    long-minilm[-w<window>]   a Longformer built once from MiniLM, kept in cache/models (long_minilm.py)
    tiny-bert, tiny-roberta, tiny-longformer   random small encoders from config (tests, smoke preset)
    a local folder            any BERT, RoBERTa or Longformer checkpoint
    a hub id                  the same from the Hugging Face hub (e.g. allenai/longformer-base-4096)

`load_encoder(name)` asks each source in that order whether the name is its own. A checkpoint's
config.json, tokenizer and weights are checked as they load (model_folder.py): a bad one is a
one-line ModelLoadError naming its file. `check_model(name)` runs the checks that need no weights
(a local folder's config.json and tokenizer; a hub id: in the local cache, or on a hub that answers),
for a form to call before it starts a training job.
Weights load in float32 whatever dtype the checkpoint was saved in: parameters stay float32 and
mixed precision is the engine's (autocast). Every BERT-style
encoder is loaded with the "peftviz" attention implementation (see attention.py), every
Longformer as peftviz's `LongEncoder` (see longformer.py), and none with the pretrained pooler:
the classification head pools for itself, and RoBERTa checkpoints ship no pooler weights.
`encode` runs either kind with one contract.

Weights are read from safetensors files only: a checkpoint of pickled PyTorch weights
(pytorch_model.bin) is refused with a one-line ModelLoadError saying how to convert it, since
unpickling a file can run any code in it. Converting is one command the user runs knowingly, on a
file they trust.

`max_tokens(encoder)` is how many tokens an encoder can take, from its position table: a BERT's
rows are positions 0, 1, ...; RoBERTa-style embeddings (RoBERTa, XLM-R, CamemBERT, Longformer)
number positions from padding_idx + 1, so roberta-base's 514 rows hold 512 tokens.
`check_max_length` refuses a `max_length` beyond it before anything trains.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import AutoModel, AutoTokenizer, BertConfig, LongformerConfig, PreTrainedModel, RobertaConfig
from transformers.utils import logging as hf_logging

from peftviz.errors import ConfigError, ModelLoadError
from peftviz.modeling.attention_function import ATTN_IMPLEMENTATION, AttentionContext, key_padding_bias
from peftviz.modeling.long_minilm import long_minilm_path, parse_long_minilm
from peftviz.modeling.longformer import LongEncoder
from peftviz.modeling.model_folder import (
    check_weights_fit,
    check_weights_present,
    first_line,
    read_config,
    read_tokenizer,
    weights_label,
)
from peftviz.options import shown
from peftviz.paths import hub_off, minilm_path

__all__ = [
    "DEFAULT_MODEL",
    "ENCODERS",
    "check_max_length",
    "check_model",
    "encode",
    "encoder_layers",
    "load_encoder",
    "max_tokens",
    "tiny_encoder",
]

DEFAULT_MODEL = "minilm"
# Random tiny encoders built from config, tokenised with MiniLM's tokenizer: for tests and the smoke preset.
TINY_MODELS = ("tiny-bert", "tiny-roberta", "tiny-longformer")
# how long a form waits for the hub to say whether it has a model (a job's download would retry for ~30 s)
HUB_TIMEOUT_S = 5
# pickled PyTorch weights, which are never loaded (transformers' WEIGHTS_NAME and WEIGHTS_INDEX_NAME)
PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class EncoderSource:
    """One place encoders come from: `owns(name)` says whether a name is its own, `load(name)` loads it,
    `check(name)` checks what it can without loading the weights (nothing, for a built-in encoder)."""

    name: str
    owns: Callable[[str], bool]
    load: Callable[[str], tuple]
    check: Callable[[str], None] = lambda name: None


def _is_long_minilm(name: str) -> bool:
    try:
        return parse_long_minilm(name) is not None
    except ValueError as err:  # a typo of a long-minilm name
        raise ModelLoadError(str(err)) from None


def _load_long_minilm(name: str):
    max_positions, window = parse_long_minilm(name)
    return _load_pretrained(str(long_minilm_path(max_positions, window)), name)


def _load_tiny(name: str):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    family = name.removeprefix("tiny-")
    return tiny_encoder(family, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id), tokenizer


def is_builtin(name: str) -> bool:
    """Whether `name` is one of peftviz's own encoders (minilm, long-minilm[-w…], the tiny ones): built here,
    never read from a folder or the hub."""
    return name == DEFAULT_MODEL or name in TINY_MODELS or _is_long_minilm(name)


def is_local(name: str) -> bool:
    """Whether `name` names a folder on this machine rather than a hub id."""
    try:
        return name.startswith((".", "/", "~")) or Path(name).exists()
    except OSError as err:  # a name too long for the file system (Path.exists raises ENAMETOOLONG)
        raise ModelLoadError(f"model {shown(name)} is neither a folder nor a hub id: {err.strerror}") from None


def _local_path(name: str) -> str:
    """The folder as transformers is given it: `~` expanded (transformers would take it for a hub id)."""
    return str(Path(name).expanduser()) if name.startswith("~") else name


def _check_local(name: str):
    """A local folder's config.json and tokenizer: (config, tokenizer)."""
    if not (Path(name).expanduser() / "config.json").is_file():
        raise ModelLoadError(f"model folder '{name}' does not exist or has no config.json")
    config = read_config(_local_path(name), name)
    return config, read_tokenizer(_local_path(name), name, config)


def _load_local(name: str):
    return _load_pretrained(_local_path(name), name, _check_local(name))


def _check_hub(name: str) -> None:
    """A hub id, before a job waits on it: its config.json in this machine's Hugging Face cache, or else a
    hub that is on and answers for it within HUB_TIMEOUT_S (a job's download retries for half a minute)."""
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError

    try:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return
    except HFValidationError:
        raise ModelLoadError(f"model {shown(name)} is neither a model folder nor a hub id (owner/name)") from None
    missing = f"model '{name}' is not in this machine's Hugging Face cache"
    if hub_off():
        raise ModelLoadError(
            f"{missing} and the hub is off (HF_HUB_OFFLINE): download it once where the hub is "
            f"reachable (hf download {name}), or give a model folder"
        )
    try:
        HfApi().model_info(name, timeout=HUB_TIMEOUT_S)
    except RepositoryNotFoundError:  # gated ones too: without a login the hub will not give them
        raise ModelLoadError(
            f"the Hugging Face hub has no model '{name}' this machine may read: check the id"
        ) from None
    except Exception as err:  # noqa: BLE001  (no network, DNS, proxy, timeout: all say the hub cannot be asked now)
        raise ModelLoadError(
            f"{missing} and the hub cannot be reached ({type(err).__name__}): connect, or give a model folder"
        ) from None


ENCODERS: tuple[EncoderSource, ...] = (
    EncoderSource(
        "minilm", lambda name: name == DEFAULT_MODEL, lambda name: _load_pretrained(str(minilm_path()), name)
    ),
    EncoderSource("long-minilm[-w<window>]", _is_long_minilm, _load_long_minilm),
    EncoderSource("tiny-bert | tiny-roberta | tiny-longformer", lambda name: name in TINY_MODELS, _load_tiny),
    EncoderSource("a local folder", is_local, _load_local, _check_local),
    EncoderSource("a hub id", lambda name: True, lambda name: _load_pretrained(name, name), _check_hub),
)


def load_encoder(name_or_path: str = DEFAULT_MODEL):
    """Load (encoder, tokenizer). Raises ModelLoadError with one line naming the problem.

    The encoder keeps the name it was loaded by (`peftviz_name`), for messages about it."""
    source = next(source for source in ENCODERS if source.owns(name_or_path))
    encoder, tokenizer = source.load(name_or_path)
    encoder.peftviz_name = name_or_path
    return encoder, tokenizer


def check_model(name_or_path: str = DEFAULT_MODEL) -> None:
    """Raise ModelLoadError for what can be known of a model without its weights: a local folder's
    config.json and tokenizer; a hub id in this machine's Hugging Face cache, or on a hub that answers
    (`_check_hub`: at once when the hub is off). Cheap: for a form to call before it starts a training job."""
    next(source for source in ENCODERS if source.owns(name_or_path)).check(name_or_path)


def max_tokens(encoder) -> int:
    """How many tokens `encoder` can take: the rows of its position table, less the rows before the
    first text position in RoBERTa-style embeddings (which number positions from padding_idx + 1)."""
    embeddings = encoder.embeddings
    table = getattr(embeddings, "position_embeddings", None)
    rows = table.num_embeddings if table is not None else encoder.config.max_position_embeddings
    padding_idx = getattr(embeddings, "padding_idx", None)  # RoBERTa-style only: BERT numbers from 0
    return rows - (padding_idx + 1) if padding_idx is not None else rows


def check_max_length(encoder, max_length: int, method_positions: int = 0) -> None:
    """Raise ConfigError when `max_length` tokens (plus the positions the method embeds with the text)
    do not fit the encoder's position table."""
    available = max_tokens(encoder)
    if max_length + method_positions <= available:
        return
    name = getattr(encoder, "peftviz_name", None) or encoder.config.model_type
    plus = f" (+ {method_positions} positions of the method)" if method_positions else ""
    raise ConfigError(f"max_length {max_length}{plus} is beyond {name}'s {available} positions")


def _load_pretrained(path: str, name: str, checked: tuple | None = None):
    """(encoder, tokenizer) from a checkpoint folder or hub id; `name` is what the user wrote.
    `checked`: the (config, tokenizer) a local folder's checks already read."""
    hf_logging.set_verbosity_error()  # the load report lists the unused pooler weights: noise here
    hf_logging.disable_progress_bar()
    if checked is None:
        config = read_config(path, name)
        checked = config, read_tokenizer(path, name, config)
    config, tokenizer = checked
    return _load_weights(path, name, config), tokenizer


def _load_weights(path: str, name: str, config) -> PreTrainedModel:
    """The encoder with the checkpoint's weights, after a load on the meta device (nothing allocated,
    whatever sizes config.json claims) has shown that they fit the model config.json describes."""
    _refuse_pickled(path, name)
    check_weights_present(path, name)
    if config.model_type == "longformer":
        model_class, extra = LongEncoder, {}
    else:
        model_class, extra = AutoModel, {"add_pooling_layer": False, "attn_implementation": ATTN_IMPLEMENTATION}
    load = functools.partial(
        model_class.from_pretrained, path, config=config, use_safetensors=True, dtype=torch.float32, **extra
    )
    try:
        _, info = load(device_map="meta", ignore_mismatched_sizes=True, output_loading_info=True)
    except (OSError, ValueError, SafetensorError) as err:  # SafetensorError: a damaged weights file
        raise _weights_error(path, name, err) from err
    check_weights_fit(info, path, config)
    try:
        return load()
    except (OSError, ValueError, SafetensorError) as err:
        raise _weights_error(path, name, err) from err


def _weights_error(path: str, name: str, err: Exception) -> ModelLoadError:
    if not is_local(name) and "does not appear to have a file named" in str(err):  # no safetensors on the hub
        return ModelLoadError(_pickled_message(name))
    return ModelLoadError(f"cannot load the weights of '{name}' ({weights_label(path)}): {first_line(err)}")


def _refuse_pickled(path: str, name: str) -> None:
    """A local folder with pickled weights and no safetensors file: refused before anything reads it."""
    folder = Path(path).expanduser()
    if not folder.is_dir() or any(folder.glob("*.safetensors")):
        return
    if any((folder / weights).is_file() for weights in PICKLED_WEIGHTS):
        raise ModelLoadError(_pickled_message(name))


def _pickled_message(name: str) -> str:
    """One line: why pickled weights are refused, and the command that converts them: in place for a
    folder, into a new folder (weights and tokenizer) for a hub id."""
    convert = f"from transformers import AutoModel; AutoModel.from_pretrained({name!r}, use_safetensors=False)"
    if is_local(name):
        command, then = f"{convert}.save_pretrained({name!r})", ""
    else:
        target = f"{name.rsplit('/', 1)[-1]}-safetensors"
        command = (
            f"{convert}.save_pretrained({target!r}); from transformers import AutoTokenizer; "
            f"AutoTokenizer.from_pretrained({name!r}).save_pretrained({target!r})"
        )
        then = f", then use the model folder {target}"
    return (
        f"model '{name}' has no safetensors weights, only pickled PyTorch ones (pytorch_model.bin), which peftviz "
        f'does not load: unpickling can run code. If you trust the file, convert it once: python -c "{command}"{then}'
    )


def encode(encoder, input_ids, attention_mask, token_type_ids, ctx: AttentionContext, n_prefix_queries: int):
    """Hidden states (B, j + T, D) of either encoder kind, given the method's context and its j prefix positions.

    A Longformer pads to its window and marks the global positions itself. A BERT-style encoder takes
    an additive key bias; without padding every key is visible (prefix keys always are), and no mask
    lets attention take its fastest, unmasked kernel.
    """
    if isinstance(encoder, LongEncoder):
        return encoder(input_ids, attention_mask, token_type_ids, peftviz=ctx, n_prefix_queries=n_prefix_queries)
    dtype = next(encoder.parameters()).dtype
    bias = None if bool(attention_mask.all()) else key_padding_bias(attention_mask, n_prefix_queries, dtype)
    return encoder(input_ids=input_ids, attention_mask=bias, token_type_ids=token_type_ids, peftviz=ctx)


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
