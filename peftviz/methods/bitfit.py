"""BitFit, bias-terms fine-tuning (Ben Zaken, Goldberg & Ravfogel, ACL 2022): a baseline.

Only the encoder's bias terms train (with the head); every weight matrix stays frozen. In the
paper's notation a BERT layer is

    Q = W_q x + b_q,  K = W_k x + b_k,  V = W_v x + b_v            (self-attention)
    h_2 = Dropout(W_m1 h_1 + b_m1)                                  (attention output projection)
    h_3 = g_LN1 ⊙ (h_2 + x − μ) / σ + b_LN1
    h_4 = GELU(W_m2 h_3 + b_m2)                                     (feed-forward, D -> D_ff)
    h_5 = Dropout(W_m3 h_4 + b_m3)                                  (feed-forward, D_ff -> D)
    out = g_LN2 ⊙ (h_5 + h_3 − μ) / σ + b_LN2

biases="all" trains every b above (the LayerNorm shifts b_LN included) and the embedding
LayerNorm's bias; on a Longformer also the global tokens' b_q, b_k, b_v. biases="query_and_intermediate"
trains only b_q and b_m2, the two the paper finds change most and that alone come close to full
BitFit (§4.2; on a Longformer b_q means both query projections, local and global).

BitFit adds no parameters: the method owns none ("method" parameters: 0) and only unfreezes
pretrained ones ("trainable" = the chosen biases + the head). Note that b_k cannot matter:
softmax is invariant to the q·b_k it adds to every score of a row, so its gradient is zero up
to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from peftviz.methods.base import MethodConfig, PeftMethod
from peftviz.methods.registration import registered
from peftviz.options import option

# biases="query_and_intermediate": parameter names ending so (BERT/RoBERTa and peftviz's Longformer)
QUERY_AND_INTERMEDIATE = ("attention.self.query.bias", "attention.self.query_global.bias", "intermediate.dense.bias")


@dataclass
class BitFitConfig(MethodConfig):
    biases: Literal["all", "query_and_intermediate"] = option(
        "all",
        "all: every bias of the encoder, LayerNorm shifts included (the paper's BitFit); query_and_intermediate: "
        "only b_q and the feed-forward's first bias b_m2, which the paper finds go most of the way",
    )


def is_chosen(name: str, biases: str) -> bool:
    """Whether the encoder parameter `name` is one of the biases that train."""
    if biases == "all":
        return name == "bias" or name.endswith(".bias")
    return name.endswith(QUERY_AND_INTERMEDIATE)


@registered
class BitFit(PeftMethod):
    """input_ids (B, T) -> hidden (B, T, D), as the plain encoder; its bias vectors train.

    Parameters: none of its own (0). Trainable besides the head, biases="all" on a BERT:
    D (embedding LayerNorm) + L · (7·D + D_ff), i.e. b_q, b_k, b_v, b_m1, b_LN1, b_m3, b_LN2 (D each)
    and b_m2 (D_ff); a Longformer adds 3·D per layer (global b_q, b_k, b_v).
    query_and_intermediate: L · (D + D_ff) (Longformer: L · (2·D + D_ff)).
    """

    config_class = BitFitConfig
    from_the_papers = False
    # the paper's BERT-base rates are 1e-4 … 1e-3 over many epochs; three short epochs need more
    learning_rates: ClassVar[dict[str, float]] = {"quick": 5e-3, "quick-long": 5e-3, "paper": 1e-3, "paper-long": 1e-3}

    def attach(self, encoder) -> None:
        self.unfreeze(p for name, p in encoder.named_parameters() if is_chosen(name, self.config.biases))
