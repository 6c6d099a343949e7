"""The trainable prefix matrix shared by prefix-tuning and prefix-propagation."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from peftviz.methods.base import MethodConfig
from peftviz.options import option


@dataclass
class PrefixConfig(MethodConfig):
    prefix_length: int = option(8, "j, the number of prefix slots in every layer (paper: 8; 32 for WikiHop)")
    reparameterize: bool = option(
        False, "produce the prefixes with an MLP (embedding -> Linear -> tanh -> Linear), as in Li & Liang 2021"
    )
    mlp_hidden: int = option(512, "hidden width of the reparameterisation MLP")
    prefix_dropout: float = option(0.1, "dropout applied to the prefix vectors on every training forward")

    def validate(self) -> None:
        if self.prefix_length < 1:
            raise ValueError(f"prefix_length must be at least 1, not {self.prefix_length}")
        if not 0 <= self.prefix_dropout < 1:
            raise ValueError(f"prefix_dropout must be in [0, 1), not {self.prefix_dropout}")
        if self.reparameterize and self.mlp_hidden < 1:
            raise ValueError(f"mlp_hidden must be at least 1, not {self.mlp_hidden}")


class PrefixEncoder(nn.Module):
    """forward() -> (j, width): one row of prefix parameters per slot.

    Without reparameterisation the rows are free parameters (j × width of them). With it, a
    j × hidden embedding goes through Linear(hidden, mlp_hidden) -> tanh -> Linear(mlp_hidden, width);
    after training the MLP can be folded away, but it changes the optimisation.
    """

    def __init__(self, prefix_length: int, width: int, hidden_size: int, mlp_hidden: int | None = None):
        super().__init__()
        self.embedding = nn.Embedding(prefix_length, hidden_size if mlp_hidden else width)
        self.mlp = None
        if mlp_hidden:
            self.mlp = nn.Sequential(nn.Linear(hidden_size, mlp_hidden), nn.Tanh(), nn.Linear(mlp_hidden, width))

    def forward(self) -> Tensor:
        prefix = self.embedding.weight  # (j, width) or (j, hidden)
        return prefix if self.mlp is None else self.mlp(prefix)


def prefix_encoder(config: PrefixConfig, width: int, hidden_size: int) -> PrefixEncoder:
    return PrefixEncoder(config.prefix_length, width, hidden_size, config.mlp_hidden if config.reparameterize else None)
