"""The Ray engine of a sweep (`peftviz.sweep.run_sweep`): one Ray task per run, retried where its worker dies.

Imported only when a sweep asks for Ray, so nothing else loads it. Each task trains (or resumes) one
planned configuration in a Ray worker process and writes its run into the store, which every node
reaches at the same path (a shared file system on a cluster). A task asks for `RayOptions.cpus_per_run`
CPUs (Ray sets the worker's thread count to it) and `gpus_per_run` GPUs: one run per GPU by default
where the cluster has GPUs. Ray retries a task whose worker process died (`max_retries`), not one
that raised: a bad setting fails the same way every time. The retry finds the run its dead worker
left incomplete and resumes it (`sweep.execute.retried`).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import ray
from ray.exceptions import RayError, RayTaskError, WorkerCrashedError

from peftviz.store.runs import load_run
from peftviz.sweep.execute import Outcome, RayOptions, execute, finished, retried
from peftviz.sweep.plan import Planned


def run_on_ray(planned: list[Planned], runs_dir: Path, options: RayOptions, counts, report) -> list[Outcome]:
    """Every planned configuration as a Ray task (skipped ones read from the store); one Outcome each, in order."""
    started_here = not ray.is_initialized()
    if started_here:
        # no runtime_env: Ray's workers run this python, whose install of peftviz (scripts/setup.sh) finds the package
        ray.init(address=options.address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        return _run_tasks(planned, runs_dir, options, counts, report)
    finally:
        if started_here:
            ray.shutdown()


def _run_tasks(planned, runs_dir, options, counts, report) -> list[Outcome]:
    since = datetime.now().astimezone().isoformat(timespec="microseconds")
    gpus = options.gpus_per_run if options.gpus_per_run is not None else min(ray.cluster_resources().get("GPU", 0), 1)
    task = _train_task.options(num_cpus=options.cpus_per_run, num_gpus=gpus, max_retries=options.retries)
    outcomes: list[Outcome | None] = [None] * len(planned)
    handles: dict[int, object] = {}  # index -> what a dependent task gets: a task's ObjectRef, or a skipped run's path
    pending = {}  # ObjectRef -> index
    for index, item in enumerate(planned):
        if item.action == "skip":
            outcomes[index] = Outcome(item, load_run(item.run))
            handles[index] = {"path": str(item.run)}
            finished(counts, outcomes[index], report, was_running=False)
            continue
        ref = task.remote(item, str(runs_dir), since, *(handles[i] for i in item.after))
        handles[index], pending[ref] = ref, index
        counts.running += 1
    report(counts)
    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        index = pending.pop(ref)
        outcomes[index] = _outcome(planned[index], ref, options.retries)
        finished(counts, outcomes[index], report)
    return outcomes


def _outcome(item: Planned, ref, retries: int) -> Outcome:
    try:
        run = load_run(Path(ray.get(ref)["path"]))
    except WorkerCrashedError:
        return Outcome(item, None, f"its worker process died on each of {retries + 1} tries")
    except RayTaskError as err:  # the task raised (or a run it starts from failed): its first line
        cause = err.cause if err.cause is not None else err
        return Outcome(item, None, str(cause).splitlines()[0] if str(cause) else type(cause).__name__)
    except RayError as err:
        return Outcome(item, None, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    return Outcome(item, run, run.error)


@ray.remote
def _train_task(item: Planned, runs_dir: str, since: str, *earlier: dict) -> dict:
    """In a Ray worker: train, resume (a retry included) or read one configuration's run; its folder."""
    item = retried(item, Path(runs_dir), since)
    runs = [load_run(Path(handle["path"])) for handle in earlier]
    run = execute(item, Path(runs_dir), runs, "ray")
    return {"path": str(run.path)}
