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
    {"outcome": {...}}           what became of one run of the sweep (`RunOutcome`): new, skipped, resumed or
                                 failed with its error's first line; a failed run does not stop the others
    {"runs": [path, ...]}        done: the folders it wrote
    {"error": "Kind", "message": "..."}   it stopped, or some runs failed: a PeftvizError's class and first line
                                 (for a job of several runs, how many failed and the first one's error)

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
from dataclasses import asdict, dataclass
from pathlib import Path

from peftviz import errors
from peftviz.errors import PeftvizError, TrainingError
from peftviz.run_config import TrainConfig
from peftviz.store.runs import load_run
from peftviz.training.progress import SKIPPED, Progress

COMMAND = [sys.executable, "-m", "peftviz.app.worker"]  # a test swaps it for a child that dies
# Training yields the CPU to the server: pages stay responsive while a job trains, and a job alone
# on the machine trains as fast as before (niceness only orders who runs when both want a core).
NICENESS = 10


@dataclass(frozen=True)
class RunOutcome:
    """What became of one run of a job, as the child tells it (a sweep's `Outcome`, without the objects)."""

    run: str  # the run's title, as its Progress events name it
    action: str  # what the sweep planned: "train", "resume" or "skip"
    path: str = ""  # its folder, where it has one
    failed: bool = False
    error: str = ""  # the first line of its error, where it failed

    @classmethod
    def of(cls, outcome) -> RunOutcome:
        run, config = outcome.run, outcome.planned.config
        error = outcome.error or (f"it ended {run.status}" if outcome.failed and run is not None else "")
        path = str(run.path) if run is not None else ""
        return cls(config.run_title, outcome.planned.action, path, outcome.failed, error if outcome.failed else "")

    @property
    def kind(self) -> str:
        """How it ended, in one word: "new", "skipped", "resumed" or "failed" (what the job's counts count)."""
        return "failed" if self.failed else {"train": "new", "skip": "skipped", "resume": "resumed"}[self.action]

    @property
    def word(self) -> str:
        """What the job panel says of it: "new", "skipped (already complete)", "resumed", or "failed: <line>"."""
        if self.failed:
            return f"failed: {self.error or 'training failed'}"
        return f"skipped ({SKIPPED})" if self.kind == "skipped" else self.kind


def sweep_in_child(
    configs: list[TrainConfig],
    runs_dir: Path,
    progress,
    resume=(),
    stoppable: Callable | None = None,
    engine: str = "local",
    imports=(),
    force: bool = False,
    told: Callable[[RunOutcome], None] | None = None,
) -> list:
    """Continue the incomplete runs `resume` (their folders), then train `configs`, as one sweep
    (`peftviz.sweep`: a configuration with a complete run in the store is skipped, one with a stopped run
    resumed, unless `force`; a run that fails does not stop the others), then import the models `imports`
    (ImportRequests), in a child process; returns the runs. `told` receives each run's `RunOutcome` as it ends.
    `stoppable(stop)` is handed a function that stops the child (a cancelled job): its run is left incomplete,
    as a killed run, which the next job of the same settings resumes. With engine "ray" each run is one Ray task.

    Raises the PeftvizError the child raised, or that of its first failed run once the others have ended (its
    class and first line), or a TrainingError if the child died without a word (killed, out of memory).
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
    child = subprocess.Popen([*COMMAND, str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if stoppable is not None:
        stoppable(child.terminate)
    try:
        _send(child, settings)
        for line in child.stdout:  # ends at EOF: the child is gone
            message = json.loads(line)
            if "progress" in message:
                progress(Progress(**message["progress"]))
            elif "outcome" in message:
                (told or (lambda outcome: None))(RunOutcome(**message["outcome"]))
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


def sweep_here(
    configs: list[TrainConfig], runs_dir: Path, report, engine: str = "local", force: bool = False, resume=(), told=None
) -> list:
    """The stopped runs `resume` (folders), then the configs, as a sweep driven from this process (`peftviz.sweep`):
    each run's `RunOutcome` to `told`, and to `report` the Progress events of the runs. On the local engine those
    are the trainer's, and SKIPPED for runs already complete; on Ray, where each run is one task, those a task
    tells: queued, then done (or SKIPPED) or failed. Returns the sweep's Outcomes: a failed run does not stop the
    others."""
    from peftviz.sweep import run_sweep

    told_actions = ("skip",)
    if engine == "ray":
        told_actions = ("skip", "train", "resume")
        for config in [run.config for run in map(load_run, resume)] + configs:
            report(Progress(config.run_title, "queued on Ray", 0, config.epochs))
    finished = _told_when(report, told, *told_actions)
    return run_sweep(configs, runs_dir, engine, force, on_progress=finished, run_progress=report, resume=resume)


def _told_when(report, told, *actions: str):
    """A sweep callback that tells `told` each finished configuration's `RunOutcome`, and `report` a Progress event
    where its action is one of `actions`: SKIPPED for a skipped one, else done or failed (the trainer's own events
    tell the rest)."""
    reported: list = []  # the outcomes already told

    def finished(counts) -> None:
        for outcome in counts.finished[len(reported) :]:
            reported.append(outcome)
            if told is not None:
                told(RunOutcome.of(outcome))
            config, action = outcome.planned.config, outcome.planned.action
            if action not in actions:
                continue
            phase = SKIPPED if action == "skip" else "failed" if outcome.failed else "done"
            epochs = outcome.run.epochs_done if outcome.run is not None else config.epochs
            report(Progress(config.run_title, phase, epochs, config.epochs))

    return finished


def _failures(outcomes: list) -> dict | None:
    """The answer for a sweep with failed runs (None when none failed): the first failure as its own kind of error
    (a one-run job's error as it was raised, a longer job's with how many failed and which)."""
    failed = [outcome for outcome in outcomes if outcome.failed]
    if not failed:
        return None
    first = failed[0]
    message = (
        first.error
        if len(outcomes) == 1
        else (f"{len(failed)} of {len(outcomes)} runs failed; {first.planned.config.run_title}: {first.error}")
    )
    return {"error": first.error_kind, "message": message or "training failed"}


def _import(values: dict, runs_dir: Path, report):
    from peftviz.exchange.imports import import_model
    from peftviz.exchange.request import ImportRequest

    return import_model(ImportRequest.from_dict(values), runs_dir, report)


def main(parent: int) -> None:
    """The child: read settings from stdin, train, answer on the stdout it was given."""
    channel = os.fdopen(os.dup(1), "w")
    os.nice(NICENESS)
    os.dup2(2, 1)  # stray prints (libraries, warnings) go to stderr, never into the answers

    def report(event, kind: str = "progress") -> None:
        if os.getppid() != parent:  # the server is gone: stop like a killed run, resumable from the CLI
            os._exit(1)
        _answer(channel, {kind: asdict(event)})

    try:
        settings = json.loads(sys.stdin.read())
        configs = [TrainConfig.from_dict(values) for values in settings["configs"]]
        resume, runs_dir = [Path(path) for path in settings.get("resume", [])], Path(settings["runs_dir"])
        engine, force = settings.get("engine", "local"), settings.get("force", False) is True
        told = lambda outcome: report(outcome, "outcome")
        outcomes = sweep_here(configs, runs_dir, report, engine, force, resume, told) if configs or resume else []
        runs = [outcome.run for outcome in outcomes if not outcome.failed]
        runs += [_import(values, runs_dir, report) for values in settings.get("imports", [])]
        _answer(channel, _failures(outcomes) or {"runs": [str(run.path) for run in runs]})
    except PeftvizError as err:
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        _answer(channel, {"error": type(err).__name__, "message": first_line})
    except Exception as err:  # noqa: BLE001  (a bug: its kind and line reach the page; the traceback the log)
        import traceback

        traceback.print_exc()
        _answer(channel, {"error": "", "message": f"{type(err).__name__}: {err}".splitlines()[0]})


if __name__ == "__main__":
    main(int(sys.argv[1]))
