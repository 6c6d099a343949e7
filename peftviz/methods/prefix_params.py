"""The trainable prefix matrix shared by prefix-tuning and prefix-propagation.

Bounds of the options: the papers use j = 8 (32 for WikiHop) and an MLP of width 512. A prefix of
more than MAX_PREFIX_LENGTH = 1024 slots (twice a BERT's whole 512-token input, which
prefix-propagation's prefixes join) is a typo, refused before its (j × 2·L·D) matrix is allocated;
the MLP is bounded by MAX_MLP_HIDDEN = 8192 (16 times the papers' width) for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from peftviz.methods.base import MethodConfig
from peftviz.options import option

MAX_PREFIX_LENGTH = 1024
MAX_MLP_HIDDEN = 8192


@dataclass
class PrefixConfig(MethodConfig):
    prefix_length: int = option(
        8,
        "j, the number of prefix slots in every layer (paper: 8; 32 for WikiHop)",
        at_least=1,
        at_most=MAX_PREFIX_LENGTH,
    )
    reparameterize: bool = option(
        False, "produce the prefixes with an MLP (embedding -> Linear -> tanh -> Linear), as in Li & Liang 2021"
    )
    mlp_hidden: int = option(512, "hidden width of the reparameterisation MLP", at_least=1, at_most=MAX_MLP_HIDDEN)
    prefix_dropout: float = option(
        0.1, "dropout applied to the prefix vectors on every training forward", at_least=0, below=1
    )


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
