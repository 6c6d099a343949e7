"""What every tuning method shares: a config dataclass with help text and a module that attaches
to an encoder.

A method owns only its own parameters (prefixes, adapters). It changes the encoder through
forward hooks and through the per-forward `AttentionContext` that `peftviz_attention` reads, so
the pretrained weights keep their names and the backbone's state dict is never rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from peftviz.attention import AttentionContext
from peftviz.options import Options


@dataclass
class MethodConfig(Options):
    """Base of every method's config. Fields are declared with `option(default, help)`."""


class PeftMethod(nn.Module):
    """Base of the methods. Subclasses set `name` and `config_class` and override what they need.

    trains_backbone: whether the pretrained weights are trained (only fine-tuning).
    n_prefix_positions: positions the method prepends to the sequence (only prefix-propagation);
        the classifier extends the padding mask by these and pools after them.
    attach(encoder): register hooks on the encoder's layers.
    new_context(batch_size, record): the AttentionContext for one forward pass.
    """

    name: ClassVar[str]
    config_class: ClassVar[type[MethodConfig]]
    trains_backbone: ClassVar[bool] = False

    def __init__(self, config: MethodConfig, encoder_config):
        super().__init__()
        self.config = config
        self.n_layers = encoder_config.num_hidden_layers
        self.hidden_size = encoder_config.hidden_size
        self.n_heads = encoder_config.num_attention_heads
        self.head_dim = self.hidden_size // self.n_heads
        self._hooks: list = []

    @property
    def n_prefix_positions(self) -> int:
        return 0

    def attach(self, encoder) -> None:
        """Register hooks on `encoder`. The default method changes nothing."""

    def detach(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()

    def new_context(self, batch_size: int, record: bool = False) -> AttentionContext:
        return AttentionContext(record=record)

    def extra_repr(self) -> str:
        return f"{self.name}: {self.config}"
