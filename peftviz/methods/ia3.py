"""(IA)³, learned rescaling vectors (Liu et al., NeurIPS 2022), through Hugging Face peft: a baseline.

Infused Adapter by Inhibiting and Amplifying Inner Activations: per layer, learned vectors scale
the keys, the values and the feed-forward block's hidden activations elementwise,

    softmax(Q (l_k ⊙ K)ᵀ / √d) (l_v ⊙ V)          (attention)
    W_2 (l_ff ⊙ GELU(W_1 x))                      (feed-forward)

All vectors start at 1, so training starts from the pretrained model. The layers are peft's own
(`peft.inject_adapter_in_model` with an `IA3Config`): a targeted linear map's output is scaled
(l ⊙ (W x + b), keys and values), or, for a "feed-forward" module, its input (W (l ⊙ x) + b:
l_ff on the input of the FFN's output projection is the paper's l_ff ⊙ GELU(W_1 x)).

targets="peft-default" is peft's mapping for BERT and RoBERTa: target_modules key, value,
output.dense, feedforward_modules output.dense. peft matches names by suffix, so "output.dense"
is both the FFN's output projection (layer.output.dense) and the attention block's output
projection (layer.attention.output.dense), and both count as feed-forward: four vectors per layer,
l_k, l_v (D each), one on the input of the attention output projection (D) and l_ff (D_ff).
targets="paper" is the paper's three, l_k, l_v and l_ff. peft has no mapping for the Longformer,
whose layers carry the same names: the same targets are used, "key"/"value" being its
sliding-window projections (the global tokens' key_global/value_global are not scaled).

Exchange with peft (`export`, `import`): both targets are IA3Config settings, passed as they are;
an adapter is read as the one of them its target_modules and feedforward_modules equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from peft import IA3Config, inject_adapter_in_model

from peftviz.errors import ConfigError
from peftviz.methods.base import MethodConfig, PeftMethod
from peftviz.methods.lora import PeftInjection, refuse_unsupported
from peftviz.methods.registration import registered
from peftviz.options import option, shown

# targets -> (target_modules, feedforward_modules) as IA3Config takes them
IA3_TARGETS = {
    "peft-default": (["key", "value", "output.dense"], ["output.dense"]),  # peft's BERT/RoBERTa mapping
    # the paper's l_k, l_v, l_ff: the FFN output projection only, not the attention's (a regex, fully matched)
    "paper": (r".*\.layer\.\d+\.(attention\.self\.(key|value)|output\.dense)", r".*\.layer\.\d+\.output\.dense"),
}


@dataclass
class IA3MethodConfig(MethodConfig):
    targets: Literal["peft-default", "paper"] = option(
        "peft-default",
        "peft-default: peft's BERT/RoBERTa targets (key, value, output.dense; feed-forward output.dense), "
        "which by suffix also scale the input of the attention output projection: 3·D + D_ff per layer; "
        "paper: Liu et al.'s l_k, l_v, l_ff: 2·D + D_ff per layer",
    )


@registered
class IA3(PeftMethod):
    """input_ids (B, T) -> hidden (B, T, D), as the plain encoder; keys, values and FFN activations rescaled.

    Parameters (all injected into the encoder; the method module itself owns none): one vector per
    targeted map, of its output size (key, value) or, for feed-forward modules, its input size.
    peft-default: L · (3·D + D_ff); paper: L · (2·D + D_ff), D_ff being the feed-forward width.
    """

    config_class = IA3MethodConfig
    from_the_papers = False
    peft_based = True
    peft_type = "IA3"
    no_weight_decay = ("ia3_l",)  # scalings start at 1: decay would pull them towards 0, not to the identity
    # the presets' default rate suits it (Liu et al. train T0 at 3e-3, with Adafactor, for many more steps)

    def attach(self, encoder) -> None:
        target_modules, feedforward_modules = IA3_TARGETS[self.config.targets]
        peft_config = IA3Config(target_modules=target_modules, feedforward_modules=feedforward_modules)
        inject_adapter_in_model(peft_config, encoder)  # freezes everything but the new ia3_l vectors
        self._hooks.append(PeftInjection(encoder))

    def peft_config(self) -> dict:
        target_modules, feedforward_modules = IA3_TARGETS[self.config.targets]
        return {"target_modules": target_modules, "feedforward_modules": feedforward_modules}

    @classmethod
    def options_from_peft(cls, adapter: dict) -> dict:
        refuse_unsupported(adapter, IA3Config, ("fan_in_fan_out", "exclude_modules"), cls.name)
        found = [adapter.get("target_modules"), adapter.get("feedforward_modules")]
        for name, targets in IA3_TARGETS.items():
            if all(_same_targets(a, b) for a, b in zip(found, targets)):
                return {"targets": name}
        raise ConfigError(
            f"the ia3 adapter targets {shown(found[0])} (feed-forward {shown(found[1])}); peftviz's IA3 targets "
            f"{' or '.join(f'{t[0]} (feed-forward {t[1]})' for t in IA3_TARGETS.values())}"
        )


def _same_targets(found, expected) -> bool:
    """peft stores a list of names as a list in any order, a pattern as its string."""
    if isinstance(expected, list):
        return isinstance(found, list) and set(found) == set(expected)
    return found == expected
