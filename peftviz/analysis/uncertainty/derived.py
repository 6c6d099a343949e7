"""A member of an uncertainty method as a run: what every estimator, interval and paired test reads.

`UncertainRun` is its first run (folder, settings, metrics, seed) with the member's predictions: "test"
and the best epoch's validation. Its estimates are cached in that run's folder like the run's own
(`analysis.estimates` keys them by the predictions' bytes, so they never mix). `unit_of` makes the
members of one uncertainty method on one group a `Group`, which `analysis.group_stats` summarises and
compares as any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from peftviz.analysis.uncertainty.base import Member
from peftviz.errors import RunError
from peftviz.store import schema
from peftviz.store.runs import Group, Run


@dataclass
class UncertainRun(Run):
    uncertainty: str = ""  # how the table names the method ("mc-dropout, T = 5")
    member: Member | None = field(default=None, repr=False)

    @classmethod
    def of(cls, member: Member, uncertainty: str) -> UncertainRun:
        first = member.runs[0]
        return cls(**{f.name: getattr(first, f.name) for f in fields(Run)}, uncertainty=uncertainty, member=member)

    @property
    def name(self) -> str:
        return f"{self.path.name} · {self.uncertainty}"

    @property
    def label(self) -> str:
        return f"{self.config.name} + {self.uncertainty}" if self.config else self.uncertainty

    def predictions(self, which: int | str) -> tuple[np.ndarray, np.ndarray]:
        evaluation = schema.evaluation_name(which)
        labels = Run.predictions(self, which)[1]
        if evaluation == "test":
            return self.member.test, labels
        if which == self.best_epoch:
            return self.member.validation, labels
        raise RunError(f"{self.name} has predictions on test and the best epoch's validation only, not {evaluation}")


def slug(uncertainty: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in uncertainty).strip("-")


def unit_of(group: Group, members: list[Member], uncertainty: str) -> Group:
    """The members as a group of their own, keyed after the group and the method."""
    return Group(f"{group.key}+{slug(uncertainty)}", [UncertainRun.of(member, uncertainty) for member in members])
