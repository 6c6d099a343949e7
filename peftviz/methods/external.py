"""A method peftviz does not implement: `external:<name>`, the method of a run another training loop
recorded (`peftviz.record`, the Trainer callback in `peftviz.integrations.transformers`).

Such a run holds predictions, not parameters: the pages read its calibration like any run's, and
what needs the model (attention, the kernel's α, the tiny-attention heads, export, resume) leaves it
out. The name after `external:` is the loop's own label for its method ("my-adapter"); its settings
are in config.json's `recorded` record, not here, since peftviz cannot check them. Building it is
refused with one line: there is no implementation to build.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from peftviz.errors import ConfigError
from peftviz.methods.base import MethodConfig, PeftMethod

# a loop's label for its method: what a run list shows; words, so it can never be read as a path
EXTERNAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+\-]{0,63}")


@dataclass
class ExternalConfig(MethodConfig):
    """A method peftviz does not implement has no options it could check."""


class External(PeftMethod):
    """Stands for a method trained outside peftviz; never built (there is nothing to build)."""

    config_class = ExternalConfig
    from_the_papers = False

    def __init__(self, config: MethodConfig, encoder_config):
        raise ConfigError(
            f"{self.name} was trained outside peftviz (its run was recorded, not trained here): peftviz has no "
            "implementation of it to build or train"
        )


@functools.cache  # one class per name, as the registry's other classes
def external_class(name: str, label: str) -> type[External]:
    """The class standing for `name` (`external:<label>`); ConfigError where the label is not a word."""
    if not EXTERNAL_NAME.fullmatch(label):
        raise ConfigError(
            f"{name!r} is not a method name: {label!r} must be 1-64 letters, digits, '.', '_', '+' or '-'"
        )
    title = f"{label} (trained outside peftviz)"
    namespace = {"name": name, "title": title}  # its name, set as it is made: the registry only looks it up
    return type(f"External_{re.sub(r'[^A-Za-z0-9_]', '_', label)}", (External,), namespace)
