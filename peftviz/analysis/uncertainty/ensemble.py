"""Seed ensembles: a group's seeds combined, from the predictions already stored; no training.

A group of N seeds (in seed order) makes ⌊N / k⌋ disjoint ensembles of k members each (seeds 0..k−1,
k..2k−1, ...; the last N mod k seeds are left out, and said so): disjoint, so that the ensembles are
independent draws of "an ensemble of k" and the interval over them means what an interval over seeds
means. An ensemble of k = N is one predictor: its interval is over the test documents only.

Two ways to combine k members' probabilities p_1 … p_k, a stated choice (Lakshminarayanan et al. 2017
average probabilities; averaging logits is the other common one):

    probabilities   p = (1/k) Σ_j p_j
    logits          p = softmax((1/k) Σ_j z_j)  =  softmax((1/k) Σ_j log p_j)

The second equality is exact: log p_j = z_j − logsumexp(z_j), and the per-document constant cancels in
the softmax, so the stored probabilities suffice. An ensemble of one is the run's own predictions,
unchanged. Cost: k passes, the k − 1 other members' trained parameters, and their measured passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from peftviz.analysis.uncertainty import MAX_PASSES, model_runs
from peftviz.analysis.uncertainty.base import Cost, Member, Progress, UncertaintyMethod
from peftviz.analysis.uncertainty.cache import cached_member, run_inputs
from peftviz.errors import RunError
from peftviz.options import Options, option
from peftviz.store.runs import Group, Run

TINY = np.finfo(np.float32).tiny  # log of a probability that underflowed to 0


@dataclass
class EnsembleOptions(Options):
    size: int = option(
        3,
        "k, the seeds each ensemble averages (a group of N seeds makes ⌊N / k⌋ disjoint ensembles)",
        at_least=1,
        at_most=MAX_PASSES,
    )
    average: Literal["probabilities", "logits"] = option(
        "probabilities", "what is averaged: the members' probabilities, or their logits (then softmax)"
    )


def combine(probs: list[np.ndarray], average: str) -> np.ndarray:
    """(N, C) float32: the k members' (N, C) probabilities combined by `average` (see the module)."""
    stacked = np.stack([p.astype(np.float64) for p in probs])  # (k, N, C)
    if average == "probabilities":
        combined = stacked.mean(axis=0)
    else:
        logits = np.log(np.maximum(stacked, TINY)).mean(axis=0)  # (N, C), up to a per-row constant
        combined = np.exp(logits - logits.max(axis=1, keepdims=True))
        combined /= combined.sum(axis=1, keepdims=True)
    return combined.astype(np.float32)


def chunks(runs: list[Run], size: int) -> list[list[Run]]:
    """The disjoint ensembles of `size` of a group's runs, in seed order."""
    return [runs[start : start + size] for start in range(0, len(runs) - size + 1, size)]


def ensemble_member(runs: list[Run], average: str) -> Member:
    inputs = [run_inputs(run) for run in runs]
    validation = combine([val for (val, _), _ in inputs], average)
    test = combine([test for _, (test, _) in inputs], average)
    others = sum(int(run.parameters.get("trainable", 0)) for run in runs[1:])
    cost = Cost(len(runs), others, float(sum(model_runs.plain_seconds(run) for run in runs)))
    return Member(tuple(runs), runs[0].seed, validation, test, cost)


class Ensemble(UncertaintyMethod):
    name = "ensemble"
    title = "seed ensemble: k seeds' stored predictions averaged (probabilities or logits); no training"
    options_class = EnsembleOptions

    @classmethod
    def describe(cls, options: EnsembleOptions) -> str:
        return f"ensemble of {options.size} ({options.average})"

    @classmethod
    def members(cls, group: Group, options: EnsembleOptions, progress: Progress | None = None) -> list[Member]:
        if len(group.runs) < options.size:
            raise RunError(f"an ensemble of {options.size} needs {options.size} seeds, the group has {len(group.runs)}")
        if options.size == 1:
            return [model_runs.stored_member(run) for run in group.runs]
        settings = {"size": options.size, "average": options.average}
        return [
            cached_member(
                cls.name,
                settings,
                __name__,
                members,
                members[0].seed,
                lambda members=members: ensemble_member(members, options.average),
            )
            for members in chunks(group.runs, options.size)
        ]


def left_over(group: Group, size: int) -> list[Run]:
    """The seeds no ensemble of `size` uses (the last N mod k)."""
    return group.runs[len(group.runs) - len(group.runs) % size :] if len(group.runs) % size else []
