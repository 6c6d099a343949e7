"""The registered methods' names, in one table, and `@registered`, the one place a method's class gets its name.

ENTRIES maps each name to its class: "module:Class" for a module of peftviz.methods, or a `NamedTuner` row
for a peft tuner that is a peft type and the settings that make it that method (its class is made from
the row in named_tuners.py, whose docstring holds the equations). The registry (methods/__init__.py)
lists and loads the classes from here; this module imports nothing of peftviz, so that listing loads
no torch and every method module may import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, TypeVar

PEFT_PREFIX = "peft:"  # `peft:<TYPE>` names any tuner of Hugging Face peft by its PeftType
EXTERNAL_PREFIX = "external:"  # `external:<name>`: a method trained outside peftviz, whose run was recorded


class NamedTuner(NamedTuple):
    """A named peft tuner: its class named_tuners.<class_name>, a `PeftTuner` with these class attributes (the
    empty ones are PeftTuner's)."""

    class_name: str
    peft_type: str
    title: str  # what it is and its paper; the class's title adds ", through Hugging Face peft"
    fixed: Mapping[str, Any] = {}  # peft settings that make it the method, not options
    defaults: Mapping[str, Any] = {}  # peftviz's defaults over peft's, where peft's do not fit MiniLM
    changes_base_weights: bool = False  # its initialisation rewrites the frozen W (W_res)
    learning_rates: Mapping[str, float] = {}  # preset -> rate, where LoRA's do not suit it
    learning_rate_grid: tuple[float, float] | None = None


# VeRA's update starts small (Λ_d at 0.1, Λ_b at 0) and holds few tensors: it needs a higher rate than LoRA
VERA_RATES = {"quick": 1e-2, "quick-long": 1e-2, "paper": 4e-3, "paper-long": 4e-3}
# FourierFT's n spectral coefficients per map are far fewer than LoRA's entries: like VeRA, a higher rate
FOURIERFT_RATES = {"quick": 5e-2, "quick-long": 5e-2, "paper": 5e-2, "paper-long": 5e-2}

ENTRIES: dict[str, str | NamedTuner] = {
    "fine-tuning": "fine_tuning:FineTuning",
    "prefix-tuning": "prefix_tuning:PrefixTuning",
    "prefix-propagation": "prefix_propagation:PrefixPropagation",
    "kernel-prefix-propagation": "kernel_prefix_propagation:KernelPrefixPropagation",
    "tiny-attention": "tiny_attention:TinyAttentionMethod",
    "lora": "lora:LoRA",
    "ia3": "ia3:IA3",
    "prompt-tuning": "prompt_tuning:PromptTuning",
    "bitfit": "bitfit:BitFit",
    "houlsby-adapter": "houlsby_adapter:HoulsbyAdapter",
    "dora": NamedTuner(
        "DoRA", "LORA", "DoRA, weight-decomposed low-rank adaptation (Liu et al., ICML 2024)", fixed={"use_dora": True}
    ),
    "rslora": NamedTuner(
        "RsLoRA", "LORA", "rsLoRA, rank-stabilised LoRA: scale α / √r (Kalajdzievski 2023)", fixed={"use_rslora": True}
    ),
    "pissa": NamedTuner(
        "PiSSA",
        "LORA",
        "PiSSA, LoRA started from W's principal singular vectors (Meng et al., NeurIPS 2024)",
        fixed={"init_lora_weights": "pissa"},
        changes_base_weights=True,
    ),
    "olora": NamedTuner(
        "OLoRA",
        "LORA",
        "OLoRA, LoRA started from the QR decomposition of W (Büyükakyüz 2024)",
        fixed={"init_lora_weights": "olora"},
        changes_base_weights=True,
    ),
    "lora-plus": "lora_plus:LoraPlus",
    "monteclora": "monteclora:MonteCLoRA",
    "adalora": "adalora:AdaLoRA",
    "vera": NamedTuner(
        "VeRA",
        "VERA",
        "VeRA, vector-based random matrix adaptation (Kopiczko et al., ICLR 2024)",
        learning_rates=VERA_RATES,
    ),
    "loha": NamedTuner("LoHa", "LOHA", "LoHa, low-rank Hadamard product updates (Hyeon-Woo et al., ICLR 2022)"),
    "lokr": NamedTuner("LoKr", "LOKR", "LoKr, low-rank Kronecker product updates (Edalati et al. 2022)"),
    "oft": NamedTuner("OFT", "OFT", "OFT, orthogonal fine-tuning (Qiu et al., NeurIPS 2023)"),
    "boft": NamedTuner("BOFT", "BOFT", "BOFT, butterfly orthogonal fine-tuning (Liu et al., ICLR 2024)"),
    "hra": NamedTuner("HRA", "HRA", "HRA, Householder reflection adaptation (Yuan et al., NeurIPS 2024)"),
    "fourierft": NamedTuner(
        "FourierFT",
        "FOURIERFT",
        "FourierFT, sparse spectral updates (Gao et al., ICML 2024)",
        learning_rates=FOURIERFT_RATES,
        learning_rate_grid=(1e-3, 1e-1),
    ),
    "vblora": NamedTuner(
        "VBLoRA",
        "VBLORA",
        "VB-LoRA, LoRA from a shared vector bank (Li et al., NeurIPS 2024)",
        defaults={"vector_length": 32},
    ),
    "ln-tuning": NamedTuner(
        "LNTuning",
        "LN_TUNING",
        "LN-tuning, LayerNorm gains and shifts only (Qi et al., 2022)",
        defaults={"target_modules": "LayerNorm"},
    ),
    "p-tuning": "p_tuning:PTuning",
}


def class_path(entry: str | NamedTuner) -> str:
    """An entry's class as "module:Class" (a module of peftviz.methods)."""
    return f"named_tuners:{entry.class_name}" if isinstance(entry, NamedTuner) else entry


M = TypeVar("M", bound=type)


def registered(cls: M) -> M:
    """Class decorator of a method in ENTRIES: sets its `name`, on the class itself, to its name there, as the
    class is made (the registry's getter only looks classes up). TypeError where no entry, or several, is the
    class, or where the class already has another name of its own."""
    path = f"{cls.__module__.removeprefix('peftviz.methods.')}:{cls.__qualname__}"
    names = [name for name, entry in ENTRIES.items() if class_path(entry) == path]
    if len(names) != 1:
        raise TypeError(f"{path} is {'no' if not names else 'more than one'} entry of the method registry")
    if cls.__dict__.get("name", names[0]) != names[0]:
        raise TypeError(f"{cls.__qualname__} is registered as {cls.__dict__['name']!r}, not {names[0]!r}")
    cls.name = names[0]
    return cls
