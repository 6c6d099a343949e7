"""Full fine-tuning: every pretrained weight trains, with the head. The baseline of every comparison."""

from __future__ import annotations

from dataclasses import dataclass

from peftviz.methods.base import MethodConfig, PeftMethod


@dataclass
class FineTuningConfig(MethodConfig):
    """Fine-tuning has no options of its own."""


class FineTuning(PeftMethod):
    """The encoder unchanged and fully trainable. Inputs and outputs as the plain encoder."""

    name = "fine-tuning"
    config_class = FineTuningConfig
    trains_backbone = True
