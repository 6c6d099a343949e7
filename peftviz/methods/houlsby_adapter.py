"""Bottleneck adapters (Houlsby et al., ICML 2019, "Parameter-Efficient Transfer Learning for NLP"): a baseline.

Two adapters per layer: one on the attention block's output projection and one on the
feed-forward block's output projection, each before the residual connection and LayerNorm:

    a(h) = h + W_up σ(W_down h + b_down) + b_up        W_down: m × D,  W_up: D × m,  σ = GELU
    attention:     LN(x + a(W_o · Attn(x)))                (in place of LN(x + W_o · Attn(x)))
    feed-forward:  LN(y + a(W_2 · GELU(W_1 y)))

(dropout, in training, follows a). With m ≪ D each adapter is a bottleneck of 2·m·D + D + m
parameters. W_up and b_up start at zero (W_down, b_down as PyTorch's Linear, then b_down = 0),
so every adapter starts as exactly the identity and training starts from the pretrained model
(Houlsby et al. start near the identity with small random weights; a zero W_up makes it exact,
as B = 0 does for LoRA, while W_down's ordinary scale keeps the first gradients of W_up useful).

Houlsby et al. also train the layer normalisation parameters: with train_layer_norm (default)
every LayerNorm of the encoder (the embeddings' and the two of each layer) trains too. They are
pretrained parameters the method unfreezes, not its own: they count as trainable, not as method
parameters.

The adapters are forward hooks on `layer.attention.output.dense` and `layer.output.dense`, which
BERT, RoBERTa and peftviz's Longformer all have.

Bounds: m from 1 to MAX_BOTTLENECK = 4096 (Houlsby et al. search 8, 64, 256; wider than the
hidden size, at most 1024 for the supported encoders, it is no bottleneck).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch.nn.functional as F
from torch import Tensor, nn

from peftviz.methods.base import MethodConfig, PeftMethod
from peftviz.methods.registration import registered
from peftviz.modeling.backbones import encoder_layers
from peftviz.options import option

MAX_BOTTLENECK = 4096


@dataclass
class HoulsbyAdapterConfig(MethodConfig):
    bottleneck: int = option(
        64,
        "m, the adapter's bottleneck width (Houlsby et al. search 8, 64, 256; 64 is 2.6% of MiniLM's parameters)",
        at_least=1,
        at_most=MAX_BOTTLENECK,
    )
    train_layer_norm: bool = option(True, "train the encoder's LayerNorm gains and shifts too, as Houlsby et al.")


class BottleneckAdapter(nn.Module):
    """h (..., D) -> h + W_up GELU(W_down h + b_down) + b_up (..., D); the identity at initialisation."""

    def __init__(self, hidden_size: int, bottleneck: int):
        super().__init__()
        self.down = nn.Linear(hidden_size, bottleneck)
        self.up = nn.Linear(bottleneck, hidden_size)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, h: Tensor) -> Tensor:
        return h + self.up(F.gelu(self.down(h)))


@registered
class HoulsbyAdapter(PeftMethod):
    """input_ids (B, T) -> hidden (B, T, D); two bottleneck adapters per layer.

    Parameters: per layer 2 · (2·m·D + D + m) (two adapters, each W_down, b_down, W_up, b_up):
    2·L·(2·m·D + D + m). With train_layer_norm the encoder's 2·L + 1 LayerNorms also train,
    2·D·(2·L + 1) pretrained parameters counted as trainable, not as the method's.
    """

    config_class = HoulsbyAdapterConfig
    from_the_papers = False
    # Houlsby et al. sweep 3e-5 … 3e-3 for BERT-base over 3–20 epochs
    learning_rates: ClassVar[dict[str, float]] = {"quick": 2e-3, "quick-long": 2e-3, "paper": 1e-3, "paper-long": 1e-3}

    def __init__(self, config: HoulsbyAdapterConfig, encoder_config):
        super().__init__(config, encoder_config)
        D, m = self.hidden_size, config.bottleneck
        self.adapters = nn.ModuleList(
            nn.ModuleDict({"attention": BottleneckAdapter(D, m), "feed_forward": BottleneckAdapter(D, m)})
            for _ in range(self.n_layers)
        )

    def attach(self, encoder) -> None:
        for index, layer in enumerate(encoder_layers(encoder)):
            adapters = self.adapters[index]
            for projection, adapter in (
                (layer.attention.output.dense, adapters["attention"]),
                (layer.output.dense, adapters["feed_forward"]),
            ):
                self._hooks.append(projection.register_forward_hook(lambda module, args, out, a=adapter: a(out)))
        if self.config.train_layer_norm:
            self.unfreeze(
                p for module in encoder.modules() if isinstance(module, nn.LayerNorm) for p in module.parameters()
            )
