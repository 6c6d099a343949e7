"""The tuning methods, registered by name: the only place a method is named.

To add a method: write one module here with a `MethodConfig` dataclass and a `PeftMethod` subclass
marked `@registered` (fine_tuning.py is the smallest, bitfit.py the smallest that trains something
of its own), then add one line to ENTRIES in registration.py; a peft tuner that is a peft type and
fixed settings is one `NamedTuner` row there and nothing else (named_tuners.py makes its class).
Everything the trainer, the analyses and the pages need to know about a method, they ask its class
(see base.py).

The registry maps a name to "module:Class" and imports the module on first use, so that listing
the methods (the CLI's --help, the app's pickers) does not import torch. Registration is the one
place a class gets its `name`: `@registered` (registration.py) sets it as the class is made, and
the classes of `peft:<TYPE>` and `external:<name>` are made with theirs; looking a method up never
changes it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from peftviz.errors import ConfigError
from peftviz.methods.registration import ENTRIES, EXTERNAL_PREFIX, PEFT_PREFIX, NamedTuner, class_path
from peftviz.options import shown

if TYPE_CHECKING:
    from peftviz.methods.base import MethodConfig, PeftMethod


class MethodRegistry(Mapping):
    """name -> method class, imported lazily from "module:Class" (a module of peftviz.methods) or made from a
    NamedTuner row (named_tuners.py)."""

    def __init__(self, entries: Mapping[str, str | NamedTuner]):
        self._entries = dict(entries)

    def __getitem__(self, name: str) -> type[PeftMethod]:
        if isinstance(name, str) and name.startswith(PEFT_PREFIX):
            return self._peft_type(name)
        if isinstance(name, str) and name.startswith(EXTERNAL_PREFIX):
            return self._external(name)
        module_name, class_name = class_path(self._entries[name]).split(":")
        return getattr(importlib.import_module(f"peftviz.methods.{module_name}"), class_name)

    def class_paths(self) -> dict[str, str]:
        """name -> "module:Class" of every entry, without importing any."""
        return {name: class_path(entry) for name, entry in self._entries.items()}

    @staticmethod
    def _peft_type(name: str) -> type[PeftMethod]:
        """`peft:<TYPE>`: peft's tuner of that type (peft_tuner.py); KeyError with the reason where there is none."""
        from peftviz.methods.peft_tuner import tuner_class

        try:
            return tuner_class(name.removeprefix(PEFT_PREFIX))
        except ConfigError as err:
            raise KeyError(str(err)) from None

    @staticmethod
    def _external(name: str) -> type[PeftMethod]:
        """`external:<name>`: a method another training loop recorded a run of (external.py)."""
        from peftviz.methods.external import external_class

        try:
            return external_class(name, name.removeprefix(EXTERNAL_PREFIX))
        except ConfigError as err:
            raise KeyError(str(err)) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


DEFAULT_METHOD = "prefix-propagation"
METHODS = MethodRegistry(ENTRIES)


def method_class(name: str) -> type[PeftMethod]:
    try:
        return METHODS[name]
    except KeyError as err:
        if isinstance(name, str) and name.startswith((PEFT_PREFIX, EXTERNAL_PREFIX)):
            raise ConfigError(err.args[0]) from None
        raise ConfigError(
            f"unknown method {shown(name)}; choose one of {', '.join(METHODS)}, or {PEFT_PREFIX}<TYPE> for any peft tuner"
        ) from None


def make_method(name: str, encoder_config, **options) -> PeftMethod:
    """Build method `name` for an encoder with `encoder_config`; options are its config fields."""
    cls = method_class(name)
    return cls(cls.config_class.from_dict(options), encoder_config)


def paper_methods() -> list[str]:
    """The methods of the papers peftviz is about: what `compare` trains unless told otherwise."""
    return [name for name in METHODS if METHODS[name].from_the_papers]


def long_document_methods() -> list[str]:
    """The four methods of the prefix-propagation paper's long-document table: the paper-long preset's comparison."""
    return [name for name in METHODS if METHODS[name].in_long_document_table]


def peft_methods() -> list[str]:
    """The named methods built on Hugging Face peft's layers (`--methods peft`)."""
    return [name for name in METHODS if METHODS[name].peft_based]


def alpha_grid_method() -> type[PeftMethod]:
    """The method trained at each α of a grid (`python -m peftviz alpha-grid`, the Kernel page)."""
    return next(METHODS[name] for name in METHODS if METHODS[name].alpha_grid)


def backbone_method() -> type[PeftMethod]:
    """The method that trains the whole encoder: what a fine-tuned classifier imported from elsewhere is a run of."""
    return next(METHODS[name] for name in METHODS if METHODS[name].trains_backbone)


def what_it_is(cls: type[PeftMethod]) -> str:
    """One line naming the method: its `title`, or its module's first line."""
    return cls.title or (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()[0]


def describe_methods() -> list[dict]:
    """One row per method: its name, what it is, and its options with help."""
    rows = []
    for name, cls in METHODS.items():
        options = cls.config_class().to_dict()
        help_text = cls.config_class.help()
        rows.append(
            {
                "method": name,
                "what it is": what_it_is(cls),
                "options": "; ".join(f"{key}={value!r}: {help_text[key]}" for key, value in options.items()) or "none",
            }
        )
    return rows


def option_rows(name: str) -> list[dict]:
    """One row per option of method `name` (a registered name or `peft:<TYPE>`): its type, default, the values
    it takes, and its help: what `python -m peftviz methods --method NAME` prints."""
    config_class = method_class(name).config_class
    defaults, types = config_class().to_dict(), config_class.types()
    choices, bounds, help_text = config_class.choices(), config_class.bounds(), config_class.help()
    return [
        {
            "option": key,
            "type": types[key].__name__,
            "default": value,
            "takes": ", ".join(map(str, choices[key])) if key in choices else str(bounds.get(key, "")),
            "help": help_text[key],
        }
        for key, value in defaults.items()
    ]


def __getattr__(name: str):  # MethodConfig and PeftMethod load torch: only when asked for
    if name in ("MethodConfig", "PeftMethod"):
        from peftviz.methods import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_METHOD",
    "METHODS",
    "MethodConfig",
    "MethodRegistry",
    "PeftMethod",
    "describe_methods",
    "long_document_methods",
    "make_method",
    "method_class",
    "option_rows",
    "paper_methods",
    "peft_methods",
    "what_it_is",
]
