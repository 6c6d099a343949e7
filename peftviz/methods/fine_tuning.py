"""Full fine-tuning: every pretrained weight trains, with the head. The baseline of every comparison."""

from __future__ import annotations

from dataclasses import dataclass

from peftviz.methods.base import MethodConfig, PeftMethod
from peftviz.methods.registration import registered


@dataclass
class FineTuningConfig(MethodConfig):
    """Fine-tuning has no options of its own."""


@registered
class FineTuning(PeftMethod):
    """The encoder unchanged and fully trainable. Inputs and outputs as the plain encoder."""

    config_class = FineTuningConfig
    trains_backbone = True
    # every pretrained weight moves: rates of the papers' grid for fine-tuning ({3e-5, 5e-5}) and,
    # for the short presets, a little higher so three epochs suffice
    # paper-long: the upper rate of the paper's search, as for paper
    learning_rates = {"smoke": 1e-3, "quick": 1e-4, "quick-long": 1e-4, "paper": 5e-5, "paper-long": 5e-5}
    learning_rate_grid = (3e-5, 5e-5)
    learning_rate_search = (3e-5, 5e-5)  # Appendix B: "{3e-5, 5e-5} for fine-tuning"
    in_long_document_table = True
