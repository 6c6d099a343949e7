"""Settings dataclasses with help text and choices: the base of every method config and of the run config.

A field is declared with `option(default, help)`. Its choices come from a `Literal[...]` type or an
explicit `choices=` (for lists known only at run time, such as the registered methods); the CLI
turns them into `choices=` and the app into a select box. `validate` runs on construction and
raises `ConfigError` naming the setting.
"""

from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args, get_origin

from peftviz.errors import ConfigError


def option(default: Any, help: str, choices: typing.Iterable | None = None):
    """A settings field with help text (shown by the CLI and the app) and, optionally, its choices."""
    metadata = {"help": help} | ({"choices": choices} if choices is not None else {})
    return field(default=default, metadata=metadata)


def _literal_values(annotation) -> tuple | None:
    """Literal["a", "b"] -> ("a", "b"); Literal[...] | None -> the same; anything else -> None."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    for arg in get_args(annotation):
        if get_origin(arg) is Literal:
            return get_args(arg)
    return None


@dataclass
class Options:
    """Fields are declared with `option(default, help)`; `validate` runs on construction."""

    def __post_init__(self):
        self._check_choices()
        try:
            self.validate()
        except ConfigError:
            raise
        except ValueError as err:  # subclasses raise plain ValueError; callers catch one kind
            raise ConfigError(str(err)) from None

    def validate(self) -> None:
        """Raise ValueError naming the bad setting. Subclasses extend."""

    def _check_choices(self) -> None:
        for name, allowed in self.choices().items():
            value = getattr(self, name)
            if value is not None and value not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(map(str, allowed))}, not {value!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> Options:
        if not isinstance(values, dict):
            raise ConfigError(f"{cls.__name__} needs a mapping of options, not {type(values).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(
                f"{cls.__name__} has no option(s) {', '.join(unknown)}; options: {', '.join(sorted(known))}"
            )
        return cls(**values)

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("help", "") for f in fields(cls)}

    @classmethod
    def choices(cls) -> dict[str, tuple]:
        """Fields with a fixed set of values: name -> the values, from `choices=` or a Literal type."""
        hints = typing.get_type_hints(cls)
        found = {}
        for f in fields(cls):
            values = f.metadata.get("choices")
            values = tuple(values) if values is not None else _literal_values(hints[f.name])
            if values is not None:
                found[f.name] = values
        return found

    @classmethod
    def types(cls) -> dict[str, type]:
        """name -> bool, int, float or str: the type a CLI flag or a form widget parses a value as."""
        hints = typing.get_type_hints(cls)
        parsed = {}
        for f in fields(cls):
            hint = hints[f.name]
            candidates = [hint, *get_args(hint)]
            parsed[f.name] = next((t for t in (bool, int, float) if t in candidates), str)
        return parsed
