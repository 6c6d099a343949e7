"""Training in a child process: how the app's background jobs train.

Why not a thread of the server: dropout draws from torch's one global generator, and in the
server other threads draw from it too (a page building a model to record attention, the Kernel
page's α sweep), so a comparison trained there got other dropout masks than the same command
trained from the CLI, and stored other results. A child process owns its generator, keeps the
server responsive (no shared GIL), and its memory goes when it ends.

Why `python -m peftviz.app.worker` and not `multiprocessing`: a spawned multiprocessing child first
re-runs the parent's `__main__`, and in a Streamlit server `__main__` is whichever page script
ran last, so the child would run a page before training (and fail where the page needs a
session). A plain subprocess imports only this module.

Nothing crosses the boundary as a pickle: the settings go down stdin as JSON, and the child
answers one JSON object per line on its stdout (anything else it prints goes to stderr):

    {"progress": {...}}          a trainer's Progress event
    {"runs": [path, ...]}        done: the folders it wrote
    {"error": "Kind", "message": "..."}   it stopped: a PeftvizError's class and first line

The child watches its parent: if the server dies, it stops after the event in hand, as a killed
run (the store lists it `incomplete`, and `train --resume` continues it).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from peftviz import errors
from peftviz.errors import PeftvizError, TrainingError
from peftviz.paths import child_python_path
from peftviz.store.runs import load_run
from peftviz.training.config import TrainConfig
from peftviz.training.progress import SKIPPED, Progress

COMMAND = [sys.executable, "-m", "peftviz.app.worker"]  # a test swaps it for a child that dies
# Training yields the CPU to the server: pages stay responsive while a job trains, and a job alone
# on the machine trains as fast as before (niceness only orders who runs when both want a core).
NICENESS = 10


def compare_in_process(
    configs: list[TrainConfig],
    runs_dir: Path,
    progress,
    resume=(),
    stoppable: Callable | None = None,
    engine: str = "local",
    imports=(),
    force: bool = False,
) -> list:
    """Continue the incomplete runs `resume` (their folders), then train `configs` as a sweep
    (`peftviz.sweep.plan`: a configuration with a complete run in the store is skipped, one with a stopped run
    resumed, unless `force`), then import the models `imports` (ImportRequests), in a child process;
    returns the runs. `stoppable(stop)` is handed a function that stops the child (a cancelled job): its
    run is left incomplete, as a killed run, which the next job of the same settings resumes. With engine
    "ray" each run is one Ray task.

    Raises the PeftvizError the child raised (its class and first line), or a TrainingError if
    the child died without a word (killed, out of memory).
    """
    settings = json.dumps(
        {
            "configs": [config.to_dict() for config in configs],
            "runs_dir": str(runs_dir),
            "resume": list(map(str, resume)),
            "engine": engine,
            "imports": [request.to_dict() for request in imports],
            "force": force,
        }
    )
    child = subprocess.Popen(
        [*COMMAND, str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_child_env()
    )
    if stoppable is not None:
        stoppable(child.terminate)
    try:
        _send(child, settings)
        for line in child.stdout:  # ends at EOF: the child is gone
            message = json.loads(line)
            if "progress" in message:
                progress(Progress(**message["progress"]))
            elif "runs" in message:
                return [load_run(Path(path)) for path in message["runs"]]
            else:
                raise _error(message)
        raise TrainingError(f"the training process ended without finishing (exit code {child.wait()})")
    finally:
        _end(child)


def _send(child: subprocess.Popen, settings: str) -> None:
    try:
        child.stdin.write(settings)
        child.stdin.close()
    except BrokenPipeError:  # it died before reading them: its exit code is the news, read after this
        with contextlib.suppress(BrokenPipeError):
            child.stdin.close()  # closes the pipe even though the flush fails again


def _child_env() -> dict[str, str]:
    """The server's environment, with this checkout first on the path whatever the server's cwd."""
    return {**os.environ, "PYTHONPATH": child_python_path()}


def _end(child: subprocess.Popen) -> None:
    """Let a finished child exit; one the parent abandoned (its progress callback raised) is killed."""
    child.stdout.close()
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _error(message: dict) -> PeftvizError:
    kind = getattr(errors, str(message.get("error")), None)
    if not (isinstance(kind, type) and issubclass(kind, PeftvizError)):
        kind = TrainingError
    return kind(str(message.get("message", "training failed")))


def _answer(channel, message: dict) -> None:
    channel.write(json.dumps(message) + "\n")
    channel.flush()


def sweep_here(configs: list[TrainConfig], runs_dir: Path, report, force: bool = False) -> list:
    """The configs as a sweep in this process (`peftviz.sweep.plan`, local engine): the trainer's events of the runs
    it trains or resumes, SKIPPED for those already complete. Raises if any run failed, naming the first."""
    from peftviz.sweep.plan import run_sweep

    outcomes = run_sweep(configs, runs_dir, "local", force, on_progress=_told_when(report, "skip"), run_progress=report)
    return _all_complete(outcomes)


def sweep_on_ray(configs: list[TrainConfig], runs_dir: Path, report, force: bool = False) -> list:
    """The configs as a sweep on Ray (`peftviz.sweep.plan`): as `sweep_here`, each run one task. A run's events are
    those a Ray task tells: queued, then done (or SKIPPED) or failed. Raises if any run failed, naming the first."""
    from peftviz.sweep.plan import run_sweep

    for config in configs:
        report(Progress(config.run_title, "queued on Ray", 0, config.epochs))
    outcomes = run_sweep(configs, runs_dir, "ray", force, on_progress=_told_when(report, "skip", "train", "resume"))
    return _all_complete(outcomes)


def _told_when(report, *actions: str):
    """A sweep callback that reports each finished configuration whose action is one of `actions`: SKIPPED
    for a skipped one, else done or failed (the trainer's own events tell the rest)."""
    reported: list = []  # the outcomes already told

    def finished(counts) -> None:
        for outcome in counts.finished[len(reported) :]:
            reported.append(outcome)
            config, action = outcome.planned.config, outcome.planned.action
            if action not in actions:
                continue
            phase = SKIPPED if action == "skip" else "failed" if outcome.failed else "done"
            epochs = outcome.run.epochs_done if outcome.run is not None else config.epochs
            report(Progress(config.run_title, phase, epochs, config.epochs))

    return finished


def _all_complete(outcomes: list) -> list:
    """The runs of a sweep's outcomes; else the first failure as its own kind of error (a one-run job's
    error as it was raised, a longer job's with how many failed and which)."""
    failed = [outcome for outcome in outcomes if outcome.failed]
    if not failed:
        return [outcome.run for outcome in outcomes]
    first = failed[0]
    message = first.error if len(outcomes) == 1 else (
        f"{len(failed)} of {len(outcomes)} runs failed; {first.planned.config.run_title}: {first.error}")  # fmt: skip
    raise _error({"error": first.error_kind, "message": message or "training failed"})


def _import(values: dict, runs_dir: Path, report):
    from peftviz.exchange.imports import import_model
    from peftviz.exchange.request import ImportRequest

    return import_model(ImportRequest.from_dict(values), runs_dir, report)


def main(parent: int) -> None:
    """The child: read settings from stdin, train, answer on the stdout it was given."""
    channel = os.fdopen(os.dup(1), "w")
    os.nice(NICENESS)
    os.dup2(2, 1)  # stray prints (libraries, warnings) go to stderr, never into the answers
    from peftviz.training.trainer import resume

    def report(event) -> None:
        if os.getppid() != parent:  # the server is gone: stop like a killed run, resumable from the CLI
            os._exit(1)
        _answer(channel, {"progress": asdict(event)})

    try:
        settings = json.loads(sys.stdin.read())
        configs = [TrainConfig.from_dict(values) for values in settings["configs"]]
        runs = [resume(load_run(Path(path)), report) for path in settings.get("resume", [])]
        sweep = sweep_on_ray if settings.get("engine", "local") == "ray" else sweep_here
        if configs:
            runs += sweep(configs, Path(settings["runs_dir"]), report, settings.get("force", False) is True)
        runs += [_import(values, Path(settings["runs_dir"]), report) for values in settings.get("imports", [])]
        _answer(channel, {"runs": [str(run.path) for run in runs]})
    except PeftvizError as err:
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        _answer(channel, {"error": type(err).__name__, "message": first_line})
    except Exception as err:  # noqa: BLE001  (a bug: its kind and line reach the page; the traceback the log)
        import traceback

        traceback.print_exc()
        _answer(channel, {"error": "", "message": f"{type(err).__name__}: {err}".splitlines()[0]})


if __name__ == "__main__":
    main(int(sys.argv[1]))
