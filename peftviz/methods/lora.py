"""LoRA, low-rank adaptation (Hu et al., ICLR 2022), through Hugging Face peft: a baseline.

Every targeted linear map W (d_out × d_in, frozen) gains a trainable rank-r update:

    h = W x + (α / r) · B A dropout(x)          A: r × d_in,  B: d_out × r

A starts random (Kaiming-uniform) and B at zero, so training starts from the pretrained model.
The layers are peft's own (`peft.inject_adapter_in_model` with a `LoraConfig`, which replaces each
targeted `nn.Linear` in place by a `peft.tuners.lora.Linear` wrapping it): peftviz only chooses
the options. Both BERT-style attention and peftviz's Longformer (longformer.py) call their
projections as modules, so the injected layers are the ones that run.

Targets are matched by peft's rule: a module whose name ends in ".<target>". peft's default for
BERT and RoBERTa is "query,value" (Hu et al.'s W_q, W_v); peft has no default for the Longformer,
whose layers carry the same names, so the same default is used there. On the Longformer "query"
and "value" are the sliding-window projections only: the global tokens (<s>, which the head
reads, and any prefix positions) use query_global/key_global/value_global, which
"query,value,query_global,value_global" or "all-linear" adapt as well.

Merging B A into W after training (peft's `merge`) would make inference free; peftviz keeps the
layers unmerged, so the trained A, B are what a run stores.

Exchange with peft (`export`, `import`): the options map one to one onto a LoraConfig, and the
A, B matrices keep their names. "all-linear" is exported as the regular expression of the
encoder layers' linear maps (ALL_LINEAR_PATTERN), since peft's "all-linear" on a whole classifier
would also adapt BERT's pooler. An adapter using what this LoRA lacks is refused here, and `import`
reads it as the method that has it (DoRA, rsLoRA, PiSSA, OLoRA: named_tuners.py) or as peft's
own LoRA tuner, `peft:LORA` (LoRA biases, other targets), where one does.

Bounds of the options: r from 1 to MAX_RANK = 1024 (Hu et al. use 1 to 64; a rank beyond the
hidden size, 1024 for the largest supported encoders, adds parameters and no expressiveness);
α from 1 to MAX_LORA_ALPHA = 4096 (an int, as peft declares it; 4096 is a scale α / r of 4096 at
r = 1); dropout in [0, 1). An adapter's r, lora_alpha and lora_dropout are held to the same bounds
(`check_peft_values`): a lora_alpha of 8.0 is refused as a value of 8.5 or "8" is.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, Literal

from peft import LoraConfig, inject_adapter_in_model
from peft.tuners.tuners_utils import BaseTunerLayer

from peftviz.errors import ConfigError
from peftviz.methods.base import MethodConfig, PeftMethod
from peftviz.methods.registration import registered
from peftviz.options import option, shown

ALL_LINEAR = "all-linear"  # peft's shorthand: every nn.Linear of the encoder
# the same on a classifier's encoder layers only (peft fully matches a string target against module names)
ALL_LINEAR_PATTERN = (
    r".*\.encoder\.layer\.\d+\.(attention\.self\.(query|key|value)(_global)?|attention\.output\.dense"
    r"|intermediate\.dense|output\.dense)"
)
# LoraConfig fields whose non-default values change the computation in ways this LoRA does not
UNSUPPORTED_LORA = (
    "use_dora",
    "use_rslora",
    "rank_pattern",
    "alpha_pattern",
    "layers_to_transform",
    "layers_pattern",
    "fan_in_fan_out",
    "layer_replication",
    "bias",
    "lora_bias",
    "exclude_modules",
    "trainable_token_indices",
    "target_parameters",
    "use_qalora",
    "megatron_config",
)


MAX_RANK = 1024
MAX_LORA_ALPHA = 4096
# init_lora_weights that only choose how A and B start (which an adapter's saved A, B replace), not the base
LORA_STARTS = (True, False, "gaussian")


@dataclass
class LoraMethodConfig(MethodConfig):
    r: int = option(
        8, "r, the rank of each update B A (peft's default: 8; Hu et al. use 1 to 64)", at_least=1, at_most=MAX_RANK
    )
    lora_alpha: int = option(
        8,
        "α; the update is scaled by α / r (peft's default: 8, i.e. a scale of 1 at r = 8)",
        at_least=1,
        at_most=MAX_LORA_ALPHA,
    )
    lora_dropout: float = option(
        0.0, "dropout on the input of the low-rank path (peft's default: 0)", at_least=0, below=1
    )
    target_modules: Literal["query,value", "query,key,value", "query,value,query_global,value_global", "all-linear"] = (
        option(
            "query,value",
            "the linear maps that get an update, matched by name suffix: query,value (peft's BERT/RoBERTa default, "
            "Hu et al.'s W_q, W_v; also used for the Longformer, which peft has no default for); query,key,value; "
            "query,value,query_global,value_global (Longformer only: also the global tokens' projections); "
            "all-linear (every linear map of the encoder: attention, its output and both feed-forward layers)",
        )
    )

    def peft_targets(self) -> str | list[str]:
        """What LoraConfig.target_modules receives: "all-linear", or the list of name suffixes."""
        return ALL_LINEAR if self.target_modules == ALL_LINEAR else self.target_modules.split(",")


def refuse_unsupported(adapter: dict, peft_config_class, names: tuple[str, ...], method: str) -> None:
    """ConfigError naming the first of `names` set in `adapter` (an adapter_config.json) to other than
    peft's default: a feature the method does not have."""
    defaults = {f.name: f.default for f in fields(peft_config_class)} | {
        f.name: f.default_factory() for f in fields(peft_config_class) if callable(f.default_factory)
    }
    for name in names:
        value = adapter.get(name, defaults.get(name))
        if value not in (defaults.get(name), None, {}, [], False):
            raise ConfigError(
                f"the {method} adapter sets {name}={shown(value)}, which peftviz's {method} does not have"
            )


def check_targets(encoder, targets: str | list[str], method: str) -> None:
    """Raise ConfigError when a target suffix names no module of `encoder` (peft only raises when
    none of them matches: "query_global" on a BERT would otherwise be dropped silently)."""
    if isinstance(targets, str):
        return
    names = [name for name, _ in encoder.named_modules()]
    for target in targets:
        if not any(name == target or name.endswith(f".{target}") for name in names):
            raise ConfigError(f"{method}: no module of this {type(encoder).__name__} is named {target!r}")


class PeftInjection:
    """The handle of one `inject_adapter_in_model` call, kept with the method's hook handles:
    `remove()` puts back the linear layers peft wrapped (peft's `unload`, without merging), so
    that `remove_hooks()` leaves the encoder as it was before `attach` (tests share one encoder
    between methods)."""

    def __init__(self, encoder):
        self.encoder = encoder

    def remove(self) -> None:
        for name, module in list(self.encoder.named_modules()):
            if isinstance(module, BaseTunerLayer):
                parent, _, child = name.rpartition(".")
                setattr(self.encoder.get_submodule(parent), child, module.get_base_layer())
        if hasattr(self.encoder, "peft_config"):
            del self.encoder.peft_config


@registered
class LoRA(PeftMethod):
    """input_ids (B, T) -> hidden (B, T, D), as the plain encoder; the targeted linear maps carry B A.

    Parameters (all injected into the encoder; the method module itself owns none):
    r · (d_in + d_out) per targeted map, i.e. 2·r·D per D × D projection. Default (query, value):
    L · 2 · 2·r·D = 4·r·D·L. "all-linear" on a BERT: L · r · (10·D + 2·D_ff) (four D × D maps and
    the two feed-forward maps, D_ff being their width); the Longformer's three global projections
    add 6·r·D per layer.
    """

    config_class = LoraMethodConfig
    from_the_papers = False
    peft_based = True
    peft_type = "LORA"
    # Hu et al. train RoBERTa-base at 4e-4 … 5e-4 for 30–80 epochs; three short epochs need more
    learning_rates: ClassVar[dict[str, float]] = {"quick": 2e-3, "quick-long": 2e-3, "paper": 5e-4, "paper-long": 5e-4}

    def lora_settings(self) -> dict:
        """peft's `LoraConfig` arguments for this method's options; a LoRA variant adds its own."""
        config: LoraMethodConfig = self.config
        return {
            "r": config.r,
            "lora_alpha": config.lora_alpha,
            "lora_dropout": config.lora_dropout,
            "target_modules": config.peft_targets(),
            "bias": "none",
        }

    def attach(self, encoder) -> None:
        settings = self.lora_settings()
        check_targets(encoder, settings["target_modules"], self.name)
        inject_adapter_in_model(LoraConfig(**settings), encoder)  # freezes everything but the new lora_A / lora_B
        self._hooks.append(PeftInjection(encoder))

    def peft_config(self) -> dict:
        config: LoraMethodConfig = self.config
        targets = config.peft_targets()
        return {
            "r": config.r,
            "lora_alpha": config.lora_alpha,
            "lora_dropout": config.lora_dropout,
            "target_modules": ALL_LINEAR_PATTERN if targets == ALL_LINEAR else targets,
            "bias": "none",
        }

    @classmethod
    def options_from_peft(cls, adapter: dict) -> dict:
        refuse_unsupported(adapter, LoraConfig, UNSUPPORTED_LORA, cls.name)
        init = adapter.get("init_lora_weights", True)
        if init not in LORA_STARTS:  # PiSSA, OLoRA, LoftQ, ... start from changed base weights, which peft redoes
            raise ConfigError(
                f"the {cls.name} adapter sets init_lora_weights={shown(init)}, which peftviz's {cls.name} does not have"
            )
        return {  # as the adapter holds them: `check_peft_values` then holds them to the options' types and bounds
            "r": adapter.get("r", 8),
            "lora_alpha": adapter.get("lora_alpha", 8),
            "lora_dropout": adapter.get("lora_dropout", 0.0),
            "target_modules": lora_targets(adapter.get("target_modules")),
        }


def lora_targets(targets) -> str:
    """An adapter_config.json's target_modules as the choice of LoraMethodConfig.target_modules it equals."""
    if targets in (ALL_LINEAR, ALL_LINEAR_PATTERN):
        return ALL_LINEAR
    choices = LoraMethodConfig.choices()["target_modules"]
    if isinstance(targets, list):
        for choice in choices:
            if choice != ALL_LINEAR and set(choice.split(",")) == set(targets):
                return choice
    named = targets if isinstance(targets, str) else ",".join(sorted(map(str, targets or [])))
    raise ConfigError(f"the lora adapter targets {shown(named)}; peftviz's LoRA targets one of: {', '.join(choices)}")
