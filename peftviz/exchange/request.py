"""What an import is asked to do, as the CLI, the app's job queue and its training child pass it on.

Light on purpose (no torch): the job queue holds it, and it crosses to the worker process as JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class ImportRequest:
    """Import `source` (a folder or hub id): `base` for an adapter (None: its own
    base_model_name_or_path); `settings`, TrainConfig fields over the preset's (dataset, limit,
    max_length, data_seed, seed, batch_size, label, ...; a peftviz export defaults to its run's)."""

    source: str
    settings: dict = field(default_factory=dict)
    preset: str = "quick"
    base: str | None = None

    @property
    def title(self) -> str:
        """What progress bars call it."""
        return f"import {self.source}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> ImportRequest:
        return cls(**values)
