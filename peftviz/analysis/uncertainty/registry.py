"""The registered uncertainty methods by name, loaded when asked for (torch only where a method needs it)."""

from __future__ import annotations

import importlib

from peftviz.analysis.uncertainty import NAMES
from peftviz.errors import ConfigError
from peftviz.options import shown

CLASSES = {
    "temperature": "temperature:Temperature",
    "ensemble": "ensemble:Ensemble",
    "mc-dropout": "mc_dropout:MCDropout",
    "laplace": "laplace:Laplace",
}
assert tuple(CLASSES) == NAMES  # one list of names, in one order


def method(name: str):
    """The class of uncertainty method `name`; one ConfigError line naming the choices otherwise."""
    if name not in CLASSES:
        raise ConfigError(f"unknown uncertainty method {shown(name)}; choose from {', '.join(NAMES)}")
    module, cls = CLASSES[name].split(":")
    return getattr(importlib.import_module(f"peftviz.analysis.uncertainty.{module}"), cls)


def parse_names(text: str) -> tuple[str, ...]:
    """`report --uncertainty`'s value: comma-separated names, any subset, each once, e.g. "ensemble,laplace"."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"--uncertainty takes comma-separated names from {', '.join(NAMES)}, not {shown(text)}")
    names = [part.strip() for part in text.split(",")]
    for name in names:
        if name not in NAMES:
            raise ConfigError(f"--uncertainty: unknown method {shown(name)}; choose from {', '.join(NAMES)}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"--uncertainty names {', '.join(repeated)} more than once")
    return tuple(names)
