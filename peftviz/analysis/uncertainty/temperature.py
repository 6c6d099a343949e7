"""Temperature scaling as an uncertainty method: the post-hoc answer, on the same axis as the Bayesian ones.

    p_T = softmax(log p / T),   T = argmin_T NLL on the best epoch's validation predictions

(Guo et al., ICML 2017; `calibration.recalibration.TemperatureScaling`, which peftviz's Calibration page
also uses.) T is fitted on the validation documents and judged on the test documents, per run; the
member's validation probabilities are the fitted map applied to the documents it was fitted on, so only
its test numbers are a fair judgement. Cost: the run's one pass and one extra number, T.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from peftviz.analysis.uncertainty import model_runs
from peftviz.analysis.uncertainty.base import Cost, Member, Progress, UncertaintyMethod
from peftviz.analysis.uncertainty.cache import per_run_members, run_inputs
from peftviz.calibration.recalibration import TemperatureScaling
from peftviz.options import Options
from peftviz.store.runs import Group, Run


@dataclass
class TemperatureOptions(Options):
    """Temperature scaling has no options: T is fitted."""


def scaled_member(run: Run) -> Member:
    (val, val_labels), (test, _) = run_inputs(run)
    fitted = TemperatureScaling.fit(val, val_labels)
    start = time.perf_counter()
    scaled = fitted.transform(test)
    seconds = model_runs.per_1000(time.perf_counter() - start, len(test))
    cost = Cost(passes=1, extra_parameters=1, seconds_per_1000=model_runs.plain_seconds(run) + seconds)
    return Member((run,), run.seed, fitted.transform(val), scaled, cost)


class Temperature(UncertaintyMethod):
    name = "temperature"
    title = "temperature scaling: one T fitted on validation, softmax(log p / T) (post-hoc)"
    options_class = TemperatureOptions

    @classmethod
    def members(cls, group: Group, options: TemperatureOptions, progress: Progress | None = None) -> list[Member]:
        return per_run_members(cls.name, {}, __name__, group, scaled_member)  # a fit in milliseconds: no progress
