"""Kernel decomposition of prefix-propagation (Li et al., ACL 2023, eq. 3/7 and appendix A).

    H = Kern(cat(P, C) W_q, C W_k, C W_v) + α · Kern(cat(P, C) W_q, P W_k, P W_v)

The sequence keys and the prefix keys are normalised separately and the prefix term is scaled
by α. Ordinary prefix-propagation is the special case α = λ(C) with the first term weighted
1 − λ(C), where λ(C) is each query's softmax mass on the prefix keys (eqs. 5–6).

The paper uses the exponential (softmax) kernel and leaves the others, a trainable α, and α per
layer as open questions; here the kernel of each term is selectable (exp, rbf, linear,
polynomial) and α can be fixed or trained, one per layer. A trained α is kept as log α so it stays
positive and moves on the log scale its grid ({1e-3 … 4e-2}) is laid out on.

α is a scale, the weight of the prefix term against the sequence term, whose weights sum to 1:
it must be finite and positive (its log is taken), and at most MAX_ALPHA = 100, the prefix term
a hundred times the whole sequence term: 2500 times the top of the paper's grid, and far beyond
prefix-propagation's own α = λ(C) < 1; a larger α only swamps each layer's output.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from peftviz.methods.prefix_propagation import PrefixPropagation, PrefixPropagationConfig
from peftviz.methods.registration import registered
from peftviz.modeling.attention_function import AttentionContext, Kernel, KernelSpec
from peftviz.options import option

EXACT = "exact"  # the α setting that uses each query's own λ(C): plain prefix-propagation
ALPHA_GRID = (1e-3, 3e-3, 5e-3, 7e-3, 1e-2, 4e-2)  # the paper's search grid (appendix B)
MAX_ALPHA = 100.0


@dataclass
class KernelPrefixPropagationConfig(PrefixPropagationConfig):
    alpha: float = option(
        5e-3,
        "α, the weight of the prefix term (paper grid: 1e-3 … 4e-2; reference scripts 5e-3)",
        above=0,
        at_most=MAX_ALPHA,
    )
    alpha_trainable: bool = option(False, "learn α, one per layer, starting from `alpha`")
    kernel: Kernel = option("exp", "kernel of the prefix term")
    sequence_kernel: Kernel = option("exp", "kernel of the sequence term")


@registered
class KernelPrefixPropagation(PrefixPropagation):
    """Shapes as prefix-propagation; the attention of every layer follows eq. 3.

    Parameters: prefix-propagation's (j, L·D), plus L values of log α when α trains.
    `with_alpha` evaluates a trained model under another α: a float, or "exact" for λ(C).
    """

    config_class = KernelPrefixPropagationConfig
    alpha_sweep_method = "kernel-prefix-propagation"
    learning_rate_search = (5e-4, 1e-3, 5e-3, 1e-2, 5e-2)  # Appendix B: the prefix methods' search; α after it
    in_long_document_table = True
    alpha_grid = ALPHA_GRID
    attention_note = (
        "Kernel form: the λ(C) grid and profile show the softmax share λ(C), the same as on the Kernel page; the "
        "token heatmap shows the weights the run really mixes with, as shares of a row that sums to 1 + α."
    )

    def __init__(self, config: KernelPrefixPropagationConfig, encoder_config):
        super().__init__(config, encoder_config)
        log_alpha = torch.full((self.n_layers,), math.log(config.alpha))
        if config.alpha_trainable:
            self.log_alpha = nn.Parameter(log_alpha)
        else:
            self.register_buffer("log_alpha", log_alpha)
        self.alpha_override: float | str | None = None

    @property
    def alpha(self) -> torch.Tensor:
        """(L,) the α of every layer."""
        return self.log_alpha.exp()

    @contextmanager
    def with_alpha(self, alpha: float | str) -> Iterator[KernelPrefixPropagation]:
        """Inside the block every layer uses `alpha`: a float, or "exact" for each query's own λ(C)."""
        before = self.alpha_override
        self.alpha_override = alpha
        try:
            yield self
        finally:
            self.alpha_override = before

    def exact_prefix_mass(self):
        return self.with_alpha(EXACT)

    @classmethod
    def trained_alpha(cls, options: KernelPrefixPropagationConfig) -> float:
        return float(options.alpha)

    @classmethod
    def alpha_trains(cls, options: KernelPrefixPropagationConfig) -> bool:
        return options.alpha_trainable

    def new_context(self, batch_size: int, record: bool = False) -> AttentionContext:
        ctx = super().new_context(batch_size, record)
        if self.alpha_override is None:
            alpha = self.alpha
        elif self.alpha_override == EXACT:
            alpha = EXACT
        else:
            alpha = torch.full_like(self.log_alpha, float(self.alpha_override))
        ctx.kernel = KernelSpec(alpha, self.config.kernel, self.config.sequence_kernel)
        return ctx
