"""A Longformer-style long encoder built offline from the shipped MiniLM (all-MiniLM-L6-v2).

This follows the recipe allenai used to turn roberta-base into longformer-base-4096:

* the 512 learned position embeddings are copied again and again up to the target length, so a
  token at position k reuses the embedding of position k % 512 (better than random rows, and
  the model only has to learn the seams between copies if fine-tuned);
* every self-attention layer's Q/K/V weights go into both the local projections (query/key/value)
  and the global ones (query_global/key_global/value_global), so global tokens start out
  attending exactly like the BERT they came from;
* everything else (word/token-type embeddings, LayerNorms, feed-forward blocks) is copied as is.

With a text that fits inside the one-sided window, the result computes the same hidden states
as MiniLM: local attention then sees every token, and the global projections equal the local ones.

The built folder (safetensors weights, config, tokenizer) is cached under
`<cache>/models/long-minilm-<positions>-w<window>` and made once; see `long_minilm_path`.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

import torch
from torch import Tensor
from transformers import AutoModel, AutoTokenizer, LongformerConfig, LongformerModel

from peftviz.paths import minilm_path, models_dir

LONG_MINILM = "long-minilm"
DEFAULT_MAX_POSITIONS = 4096
# Longformer's attention_window is the full two-sided window: each token sees window // 2 on each side.
DEFAULT_WINDOW = 256

_NAME = re.compile(rf"{re.escape(LONG_MINILM)}(?:-w(?P<window>.*))?")
# Names of the linear layers inside a self-attention block, and their global twins.
_PROJECTIONS = ("query", "key", "value")


def check_window(window: int) -> int:
    """Return `window` if Longformer accepts it (positive and even, as its padding asserts); else ValueError."""
    if window <= 0 or window % 2:
        raise ValueError(f"long-minilm attention window must be a positive even number of tokens, got {window}")
    return window


def parse_long_minilm(name: str) -> tuple[int, int] | None:
    """'long-minilm' -> (4096, 256); 'long-minilm-w128' -> (4096, 128); other names -> None.

    A name that starts like a long-minilm name but does not parse (e.g. 'long-minilm-wabc',
    'long-minilm-w127', 'long-minilm-big') raises ValueError: it is a typo, not another model.
    """
    if name != LONG_MINILM and not name.startswith(LONG_MINILM + "-"):
        return None
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"bad model name {name!r}: expected {LONG_MINILM!r} or '{LONG_MINILM}-w<even window>'")
    window = match["window"]
    if window is None:
        return DEFAULT_MAX_POSITIONS, DEFAULT_WINDOW
    if not window.isdigit():
        raise ValueError(f"bad model name {name!r}: the window after '-w' must be a whole number, got {window!r}")
    return DEFAULT_MAX_POSITIONS, check_window(int(window))


def long_config(bert_config, tokenizer, max_positions: int, window: int) -> LongformerConfig:
    """A LongformerConfig with MiniLM's sizes, MiniLM's token ids and `max_positions` text positions."""
    return LongformerConfig(
        vocab_size=bert_config.vocab_size,
        hidden_size=bert_config.hidden_size,
        num_hidden_layers=bert_config.num_hidden_layers,
        num_attention_heads=bert_config.num_attention_heads,
        intermediate_size=bert_config.intermediate_size,
        hidden_act=bert_config.hidden_act,
        hidden_dropout_prob=bert_config.hidden_dropout_prob,
        attention_probs_dropout_prob=bert_config.attention_probs_dropout_prob,
        layer_norm_eps=bert_config.layer_norm_eps,
        initializer_range=bert_config.initializer_range,
        type_vocab_size=bert_config.type_vocab_size,
        # Longformer's defaults are RoBERTa's ids (pad 1, bos 0, eos 2); MiniLM uses BERT's vocabulary.
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        sep_token_id=tokenizer.sep_token_id,
        attention_window=window,
        # RoBERTa-style embeddings number text positions from padding_idx + 1 = 1 (row 0 is the
        # padding row), so `max_positions` tokens need one extra row.
        max_position_embeddings=max_positions + 1,
    )


def tiled_positions(old: Tensor, max_positions: int) -> Tensor:
    """Position rows for Longformer: row 0 zeros (padding), row 1 + k = old[k % len(old)]."""
    new = old.new_zeros(max_positions + 1, old.shape[1])
    index = torch.arange(max_positions) % old.shape[0]
    new[1:] = old[index]
    return new


def long_state_dict(bert_state: dict[str, Tensor], max_positions: int) -> dict[str, Tensor]:
    """Map a BertModel state dict onto LongformerModel's parameter names (no pooler)."""
    state = {}
    for key, value in bert_state.items():
        if key.startswith("pooler.") or key == "embeddings.position_ids":
            continue  # Longformer is built without a pooler; position_ids is a buffer, not a weight
        if key == "embeddings.position_embeddings.weight":
            value = tiled_positions(value, max_positions)
        state[key] = value
        # The global projections start as copies of the local ones, as in longformer-base-4096.
        for proj in _PROJECTIONS:
            if f".attention.self.{proj}." in key:
                state[key.replace(f".self.{proj}.", f".self.{proj}_global.")] = value.clone()
    return state


def convert(bert, tokenizer, max_positions: int, window: int) -> LongformerModel:
    """A LongformerModel holding `bert`'s weights; strict loading proves no parameter is left random."""
    model = LongformerModel(long_config(bert.config, tokenizer, max_positions, window), add_pooling_layer=False)
    model.load_state_dict(long_state_dict(bert.state_dict(), max_positions), strict=True)
    return model.eval()


def build_long_minilm(dest: Path, max_positions: int = DEFAULT_MAX_POSITIONS, window: int = DEFAULT_WINDOW) -> Path:
    """Build the long MiniLM into folder `dest` (safetensors + config + tokenizer) and return `dest`.

    Everything is written to a temporary folder next to `dest` and renamed into place, so a build
    that dies half-way leaves no half folder at `dest` (and the temporary folder is removed on
    errors). An existing `dest` is replaced.
    """
    if max_positions <= 0:
        raise ValueError(f"long-minilm max_positions must be positive, got {max_positions}")
    check_window(window)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        _write_model(tmp, max_positions, window)
        _move_into_place(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # only left when something above failed
    return dest


def _write_model(folder: Path, max_positions: int, window: int) -> None:
    """Load MiniLM and its tokenizer, convert, and save both into `folder`."""
    source = minilm_path()
    bert = AutoModel.from_pretrained(source)
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = convert(bert, tokenizer, max_positions, window)
    model.save_pretrained(folder)  # transformers 5 writes safetensors only
    tokenizer.model_max_length = max_positions  # so truncation=True keeps long texts long
    tokenizer.save_pretrained(folder)


def _move_into_place(tmp: Path, dest: Path) -> None:
    """Rename `tmp` to `dest`; an existing `dest` is first moved aside (rename cannot replace a full folder)."""
    old = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.old")
    if dest.exists():
        os.replace(dest, old)
    try:
        os.replace(tmp, dest)
    except BaseException:
        if old.exists():
            os.replace(old, dest)  # put the previous build back rather than leave nothing
        raise
    shutil.rmtree(old, ignore_errors=True)


def long_minilm_path(
    max_positions: int = DEFAULT_MAX_POSITIONS, window: int = DEFAULT_WINDOW, cache_dir: Path | None = None
) -> Path:
    """The cached long MiniLM folder for these settings, built on first use (a few seconds)."""
    folder = (Path(cache_dir) / "models" if cache_dir else models_dir()) / f"{LONG_MINILM}-{max_positions}-w{window}"
    # config.json is written by a finished build only: the folder appears by rename when complete.
    if not (folder / "config.json").is_file():
        build_long_minilm(folder, max_positions, window)
    return folder
