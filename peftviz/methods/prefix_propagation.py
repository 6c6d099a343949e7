"""Prefix-propagation (Li et al., ACL 2023), eq. 1.

    D^(1) = cat(P^(1), C)                          (layer 1: j prefix positions prepended)
    D^(l) = cat(P^(l) + C[:j], C[j:])   for l > 1  (later layers: P^(l) added to the first j states)
    H_{l,i} = Attn(D^(l) W_q, D^(l) W_k, D^(l) W_v)

The prefixes are real positions: they have queries, keys and values, so they read the sequence
and carry what they read to the next layer. One (j × D) matrix per layer: half of prefix-tuning's
parameters at the same j.

Following eq. 1 literally, C is the embedding layer's output and the prefixes are concatenated
after it: prefix slots get no position or token-type embedding and no embedding LayerNorm, and
text positions are not shifted by j. (The reference code embeds the prefixes like tokens and
shifts positions; the paper does neither.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from peftviz.methods.base import PeftMethod
from peftviz.methods.prefix_params import PrefixConfig, prefix_encoder
from peftviz.methods.registration import registered
from peftviz.modeling.attention_function import AttentionContext
from peftviz.modeling.backbones import encoder_layers


@dataclass
class PrefixPropagationConfig(PrefixConfig):
    """Options of prefix-propagation."""


@registered
class PrefixPropagation(PeftMethod):
    """input_ids (B, T) -> hidden (B, j + T, D), the first j positions being the prefixes.

    Parameters: a (j, L·D) matrix, one D-vector per slot per layer.
    """

    config_class = PrefixPropagationConfig
    prefix_keys = True
    # Appendix B of the prefix-propagation paper: "we search between {1e-2, 5e-2, 1e-3, 5e-3, 5e-4} for
    # prefix-based methods"
    learning_rate_search = (5e-4, 1e-3, 5e-3, 1e-2, 5e-2)
    in_long_document_table = True
    alpha_sweep_method = "kernel-prefix-propagation"  # same parameter names: the α sweep evaluates them there

    def __init__(self, config: PrefixPropagationConfig, encoder_config):
        super().__init__(config, encoder_config)
        self.prefix = prefix_encoder(config, self.n_layers * self.hidden_size, self.hidden_size)
        self.dropout = nn.Dropout(config.prefix_dropout)

    @property
    def n_prefix_queries(self) -> int:
        return self.config.prefix_length

    def new_context(self, batch_size: int, record: bool = False) -> AttentionContext:
        j, L, D = self.config.prefix_length, self.n_layers, self.hidden_size
        states = self.prefix().view(j, L, D).transpose(0, 1)  # (L, j, D)
        states = self.dropout(states.unsqueeze(0).expand(batch_size, -1, -1, -1))  # (B, L, j, D)
        # unbind: one backward node for all layers (indexing per layer would build L full-size gradients)
        return AttentionContext(n_prefix_keys=j, prefix_states=list(states.unbind(1)), record=record)

    def attach(self, encoder) -> None:
        for index, layer in enumerate(encoder_layers(encoder)):
            self._hooks.append(layer.register_forward_pre_hook(self._propagate_hook(index), with_kwargs=True))

    def _propagate_hook(self, index: int):
        def hook(module, args, kwargs):
            ctx = kwargs.get("peftviz")
            if ctx is None or ctx.prefix_states is None:
                return None
            hidden, *rest = args
            prefix = ctx.prefix_states[index].to(hidden.dtype)  # (B, j, D)
            if index == 0:
                hidden = torch.cat([prefix, hidden], dim=1)  # (B, j + T, D): cat(P, C)
            else:
                j = prefix.shape[1]
                hidden = torch.cat([hidden[:, :j] + prefix, hidden[:, j:]], dim=1)  # P^(l) + C[:j]
            return (hidden, *rest), kwargs

        return hook
