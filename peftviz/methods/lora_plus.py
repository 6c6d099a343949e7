"""LoRA+ (Hayou et al., ICML 2024): LoRA with the B matrices on their own, higher learning rate.

The model is LoRA's, h = W x + (α / r) · B A x (peft's layers, as lora.py), and so are its options.
What changes is the optimiser: for width n → ∞, A and B learn efficiently only with η_B / η_A = Θ(n),
so LoRA+ trains B at λ times the rate of A,

    η_B = λ · η_A,   λ = loraplus_lr_ratio (the paper recommends 2⁴ = 16 as a start)

and the rest of the classifier (the head) at η_A. The trainer asks `learning_rate_scale` per
parameter and gives the B matrices their own parameter groups.

Why not peft's `create_loraplus_optimizer`: it builds the whole optimiser and also puts every 1-D
parameter (the head's biases) and, with weight decay, the head's dense weight at λ · η or without
decay; the paper's rule is the B matrices only, and peftviz keeps its optimiser (fused AdamW, its
decay groups) for every method. The λ is the same option peft takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from peftviz.methods.peft_tuner import PeftTuner, peft_options
from peftviz.methods.registration import registered
from peftviz.options import option

MAX_RATIO = 1024  # η_B / η_A; the paper sweeps 2⁰ … 2⁸


@dataclass
class LoraPlusConfig(peft_options("LORA")):
    loraplus_lr_ratio: float = option(
        16.0,
        "λ = η_B / η_A, the B matrices' learning rate over A's (the paper recommends 16)",
        at_least=1,
        at_most=MAX_RATIO,
    )


@registered
class LoraPlus(PeftTuner):
    peft_type = "LORA"
    config_class = LoraPlusConfig

    def learning_rate_scale(self, parameter_name: str) -> float:
        return self.config.loraplus_lr_ratio if ".lora_B." in parameter_name else 1.0
