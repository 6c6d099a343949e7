"""The shift evaluation as Ray tasks, one per run, as sweeps train (`sweep.on_ray`).

Imported only when asked for. Each task rebuilds one run's model in a Ray worker and writes its shifted
predictions into the run folder, which every node reaches at the same path; the caller reads them back
from there. A worker that dies is retried (`RETRIES`); the retry finds the shifts already written and
computes only the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import ray
from ray.exceptions import RayError

from peftviz.analysis.shift.evaluate import Progress, evaluate_run
from peftviz.analysis.shift.shifts import Shift
from peftviz.store.runs import Run, load_run

RETRIES = 2


def evaluate_on_ray(runs: Sequence[Run], shifts: Sequence[Shift], progress: Progress | None = None) -> dict[str, str]:
    """Every run on every shift, one Ray task per run: run name -> why its task failed (one line), for those that did."""
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        gpus = min(ray.cluster_resources().get("GPU", 0), 1)
        task = _evaluate_task.options(num_cpus=1, num_gpus=gpus, max_retries=RETRIES)
        pending = {task.remote(str(run.path), list(shifts)): run for run in runs}
        failed = {}
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            run = pending.pop(ref)
            try:
                ray.get(ref)
            except RayError as err:
                cause = getattr(err, "cause", None) or err
                failed[run.name] = (
                    f"its Ray task failed: {str(cause).splitlines()[0] if str(cause) else type(cause).__name__}"
                )
                continue
            if progress:
                progress(f"{run.name} · evaluated on {len(shifts)} shifts")
        return failed
    finally:
        if started_here:
            ray.shutdown()


@ray.remote
def _evaluate_task(path: str, shifts: list[Shift]) -> str:
    evaluate_run(load_run(Path(path)), shifts)
    return path
