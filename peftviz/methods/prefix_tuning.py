"""Prefix-tuning (Li & Liang 2021; P-tuning v2): trainable keys and values in every layer.

Prefix-propagation paper, eq. 2:
    H_{l,i} = Attn(C W_q, cat(P_k^(l,i), C W_k), cat(P_v^(l,i), C W_v))
Every query attends to j extra keys/values per layer; the prefixes have no queries and the text
positions are not shifted. Only the prefixes and the head train.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from peftviz.attention_function import AttentionContext
from peftviz.methods.base import PeftMethod
from peftviz.methods.prefix_params import PrefixConfig, prefix_encoder


@dataclass
class PrefixTuningConfig(PrefixConfig):
    """Options of prefix-tuning."""


class PrefixTuning(PeftMethod):
    """input_ids (B, T) -> hidden (B, T, D); each layer's keys/values become (B, H, j + T, d).

    Parameters: a (j, 2·L·D) matrix, a key and a value vector per slot per layer.
    """

    config_class = PrefixTuningConfig
    prefix_keys = True

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
