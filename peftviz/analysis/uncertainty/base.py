"""What every uncertainty method shares: its options, the members it makes of a group, and their cost.

An uncertainty method is a class with a `name`, a one-line `title`, an `options_class` (an `Options`
dataclass: help text, `Literal` choices and bounds, checked on construction), whether it `needs_params`
(a model to run: a recorded run, which holds predictions only, is left out and named), and

    members(group, options, progress) -> list[Member]

A `Member` is one predictor: its probabilities on the best epoch's validation split (N_val, C) and on
the test split (N_test, C), the runs it comes from, the seed it stands for in its unit, and its `Cost`.
A method knows nothing of the statistics, the report or the page (`comparison` does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from peftviz.options import Options
from peftviz.store.runs import Group, Run

Progress = Callable[[str], None]  # told what is being computed now ("mc-dropout · run-3")


@dataclass(frozen=True)
class Cost:
    """What a member's prediction costs: encoder forward passes per document, the numbers it stores
    besides the method's own trained parameters, and measured seconds per 1,000 test documents (NaN
    where nothing could be measured: a run without parameters)."""

    passes: int
    extra_parameters: int
    seconds_per_1000: float


@dataclass(frozen=True)
class Member:
    """One predictor of a unit: `runs` it is made of (one; an ensemble's k), the `seed` it stands for
    (the run's; an ensemble's first member's), and its probabilities on validation and test."""

    runs: tuple[Run, ...]
    seed: int
    validation: np.ndarray  # (N_val, C) float32, the best epoch's validation documents
    test: np.ndarray  # (N_test, C) float32
    cost: Cost


class UncertaintyMethod:
    """Base of the registered uncertainty methods (see the module docstring)."""

    name: ClassVar[str]
    title: ClassVar[str]
    options_class: ClassVar[type[Options]]
    needs_params: ClassVar[bool] = False

    @classmethod
    def describe(cls, options: Options) -> str:
        """How a table names the method at these options ("mc-dropout, T = 5")."""
        return cls.name

    @classmethod
    def members(cls, group: Group, options: Options, progress: Progress | None = None) -> list[Member]:
        raise NotImplementedError
