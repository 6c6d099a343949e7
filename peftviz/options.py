"""Settings dataclasses with help text: the base of every method config and of the run config."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


def option(default: Any, help: str):
    """A settings field with help text (shown by the CLI and the app)."""
    return field(default=default, metadata={"help": help})


@dataclass
class Options:
    """Fields are declared with `option(default, help)`; `validate` runs on construction."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the bad setting. Subclasses extend."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "Options":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{cls.__name__} has no option(s) {', '.join(unknown)}; options: {', '.join(sorted(known))}")
        return cls(**values)

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("help", "") for f in fields(cls)}
