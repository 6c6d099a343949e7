"""Prefix-tuning (Li & Liang 2021; P-tuning v2): trainable keys and values in every layer.

Prefix-propagation paper, eq. 2:
    H_{l,i} = Attn(C W_q, cat(P_k^(l,i), C W_k), cat(P_v^(l,i), C W_v))
Every query attends to j extra keys/values per layer; the prefixes have no queries and the text
positions are not shifted (layout="paper"). Only the prefixes and the head train.

layout="peft" numbers the text's positions after the j prefix slots (j, j + 1, ...), as Hugging
Face peft and P-tuning v2's code do (they pass the prefixes as past_key_values, which transformers
counts as earlier positions): a run meant for `export` as a peft adapter trains so, and an
imported peft adapter is evaluated so. peft stores the (j, 2·L·D) matrix itself (its
`prompt_embeddings`), in the same order (slot, layer, key/value, head, d), so the parameters
carry over unchanged; with reparameterize the MLP's output is what is exported. BERT and RoBERTa
only: peft's prefix tuning needs past_key_values, which the Longformer does not take.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Literal

from torch import Tensor, nn

from peftviz.errors import ConfigError
from peftviz.methods.base import PeftMethod
from peftviz.methods.prefix_params import PrefixConfig, prefix_encoder
from peftviz.methods.registration import registered
from peftviz.modeling.attention_function import AttentionContext
from peftviz.options import option


@dataclass
class PrefixTuningConfig(PrefixConfig):
    layout: Literal["paper", "peft"] = option(
        "paper",
        "paper: the text's positions numbered from 0 (eq. 2); peft: numbered after the j prefix slots, as Hugging "
        "Face peft and P-tuning v2's code do: needed to export the run as a peft adapter (BERT and RoBERTa)",
    )


@registered
class PrefixTuning(PeftMethod):
    """input_ids (B, T) -> hidden (B, T, D); each layer's keys/values become (B, H, j + T, d).

    Parameters: a (j, 2·L·D) matrix, a key and a value vector per slot per layer.
    """

    config_class = PrefixTuningConfig
    prefix_keys = True
    # Appendix B of the prefix-propagation paper: "we search between {1e-2, 5e-2, 1e-3, 5e-3, 5e-4} for
    # prefix-based methods"
    learning_rate_search = (5e-4, 1e-3, 5e-3, 1e-2, 5e-2)
    in_long_document_table = True
    peft_type = "PREFIX_TUNING"
    peft_names = {"prefix_length": "num_virtual_tokens"}

    def __init__(self, config: PrefixTuningConfig, encoder_config):
        super().__init__(config, encoder_config)
        self.prefix = prefix_encoder(config, 2 * self.n_layers * self.hidden_size, self.hidden_size)
        self.dropout = nn.Dropout(config.prefix_dropout)

    def new_context(self, batch_size: int, record: bool = False) -> AttentionContext:
        j, L, H, d = self.config.prefix_length, self.n_layers, self.n_heads, self.head_dim
        kv = self.prefix().view(j, L, 2, H, d).permute(1, 2, 3, 0, 4)  # (L, 2, H, j, d)
        kv = self.dropout(kv.unsqueeze(0).expand(batch_size, -1, -1, -1, -1, -1))  # (B, L, 2, H, j, d)
        # unbind, not kv[:, layer, 0] per layer: one backward node for all layers, where 2·L index
        # operations would each scatter their gradient into a zero tensor of kv's whole size
        keys, values = kv.unbind(2)  # (B, L, H, j, d) each
        prefix_kv = list(zip(keys.unbind(1), values.unbind(1)))  # per layer (B, H, j, d) keys, values
        return AttentionContext(prefix_kv=prefix_kv, n_prefix_keys=j, record=record)

    @property
    def added_positions(self) -> int:
        return self.config.prefix_length if self.config.layout == "peft" else 0  # the text starts at position j

    def attach(self, encoder) -> None:
        if self.config.layout == "peft":
            check_peft_layout(encoder, self.name)
            self._offset_name = embedding_offset_name(encoder.embeddings)
            self._hooks.append(encoder.embeddings.register_forward_pre_hook(self._shift_positions, with_kwargs=True))

    def _shift_positions(self, module, args, kwargs):
        # the text from position j, as if j positions came before it (transformers 5.23 names that count
        # past_key_values_length, later releases cache_length)
        return args, {**kwargs, self._offset_name: self.config.prefix_length}

    def peft_config(self) -> dict:
        if self.config.layout != "peft":
            raise ConfigError(
                f"{self.name}: layout={self.config.layout!r} has no exact peft form: train with layout=peft"
            )
        return {"num_virtual_tokens": self.config.prefix_length, "prefix_projection": False}

    def peft_prompt(self) -> Tensor:
        return self.prefix().detach()  # (j, 2·L·D): peft's prompt_embeddings

    @classmethod
    def options_from_peft(cls, adapter: dict) -> dict:
        return {"prefix_length": adapter.get("num_virtual_tokens"), "prefix_dropout": 0.0, "layout": "peft"}

    @classmethod
    def prompt_state(cls, embeddings: Tensor) -> dict[str, Tensor]:
        return {"method.prefix.embedding.weight": embeddings}


OFFSET_NAMES = ("past_key_values_length", "cache_length")  # a BERT-style embedding's count of earlier positions


def embedding_offset_name(embeddings) -> str:
    """The keyword by which `embeddings` is told how many positions came before the sequence."""
    parameters = inspect.signature(embeddings.forward).parameters
    return next(name for name in OFFSET_NAMES if name in parameters)


def check_peft_layout(encoder, method: str) -> None:
    """layout=peft changes how a BERT-style embedding layer numbers positions: refuse other encoders."""
    if getattr(encoder.config, "model_type", None) not in ("bert", "roberta"):
        raise ConfigError(f"{method}: layout=peft is for BERT and RoBERTa encoders, not {encoder.config.model_type}")
