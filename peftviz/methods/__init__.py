"""The tuning methods, registered by name.

To add a method: write a module with a `MethodConfig` dataclass and a `PeftMethod` subclass
(see fine_tuning.py for the smallest one), then add it to METHODS below.
"""

from __future__ import annotations

import sys

from peftviz.methods.base import MethodConfig, PeftMethod
from peftviz.methods.fine_tuning import FineTuning
from peftviz.methods.kernel_prefix_propagation import KernelPrefixPropagation
from peftviz.methods.prefix_propagation import PrefixPropagation
from peftviz.methods.prefix_tuning import PrefixTuning
from peftviz.methods.tiny_attention import TinyAttentionMethod

METHODS: dict[str, type[PeftMethod]] = {
    method.name: method
    for method in (FineTuning, PrefixTuning, PrefixPropagation, KernelPrefixPropagation, TinyAttentionMethod)
}


def method_class(name: str) -> type[PeftMethod]:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}") from None


def make_method(name: str, encoder_config, **options) -> PeftMethod:
    """Build method `name` for an encoder with `encoder_config`; options are its config fields."""
    cls = method_class(name)
    return cls(cls.config_class.from_dict(options), encoder_config)


__all__ = ["METHODS", "MethodConfig", "PeftMethod", "describe_methods", "make_method", "method_class"]


def describe_methods() -> list[dict]:
    """One row per method: its name, what it is (its module's first line), and its options with help."""
    rows = []
    for name, cls in METHODS.items():
        module_doc = sys.modules[cls.__module__].__doc__ or ""
        options = cls.config_class().to_dict()
        help_text = cls.config_class.help()
        rows.append(
            {
                "method": name,
                "what it is": module_doc.strip().splitlines()[0],
                "options": "; ".join(f"{key}={value!r}: {help_text[key]}" for key, value in options.items()) or "none",
            }
        )
    return rows
