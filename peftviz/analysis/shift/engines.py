"""Where the shift evaluation runs: here, run after run, or one Ray task per run (`on_ray`), as sweeps train.
Either way each run's shifted predictions land in its folder (`evaluate`), and are read back from there."""

from __future__ import annotations

from collections.abc import Sequence

from peftviz.analysis.shift.evaluate import Progress, Shifted, cached_shift, evaluate_run
from peftviz.analysis.shift.shifts import Shift
from peftviz.errors import PeftvizError
from peftviz.store.runs import Run


def evaluate_runs(
    runs: Sequence[Run], shifts: Sequence[Shift], engine: str = "local", progress: Progress | None = None
) -> tuple[dict[str, list[Shifted]], dict[str, str]]:
    """Every run on every shift (see `evaluate_run`): (run name -> its Shifted in the order of `shifts`, run name
    -> why it could not be evaluated, one line). engine "ray": one Ray task per run with anything to compute;
    the results read back from the run folders. One run that fails leaves the others' results whole."""
    failed: dict[str, str] = {}
    if engine == "ray":
        todo = [run for run in runs if any(cached_shift(run, shift) is None for shift in shifts)]
        if todo:
            from peftviz.analysis.shift.on_ray import evaluate_on_ray

            failed = evaluate_on_ray(todo, shifts, progress)
    found = {}
    for run in runs:
        if run.name in failed:
            continue
        try:
            found[run.name] = evaluate_run(run, shifts, progress)
        except PeftvizError as err:
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
            failed[run.name] = why.removeprefix(f"run {run.name}: ")  # the line names the run once
    return found, failed
