"""Training in a child process: how the app's background jobs train.

Why not a thread of the server: dropout draws from torch's one global generator, and in the
server other threads draw from it too (a page building a model to record attention, the Kernel
page's α sweep), so a comparison trained there got other dropout masks than the same command
trained from the CLI, and stored other results. A spawned process owns its generator, keeps the
server responsive (no shared GIL), and its memory goes when it ends.

Nothing crosses the boundary as a pickle that the parent loads: the settings go down as JSON
text and the child sends JSON lines back over a pipe (`send_bytes`/`recv_bytes`):

    {"progress": {...}}          a trainer's Progress event
    {"runs": [path, ...]}        done: the folders it wrote
    {"error": "Kind", "message": "..."}   it stopped: a PeftvizError's class and first line

The child watches its parent: if the server dies, it stops after the event in hand, as a killed
run (the store lists it `incomplete`, and `train --resume` continues it).
"""

from __future__ import annotations

import json
import multiprocessing
import os
from dataclasses import asdict
from pathlib import Path

from peftviz import errors
from peftviz.config import TrainConfig
from peftviz.errors import PeftvizError, TrainingError

POLL_SECONDS = 0.5


def compare_in_process(configs: list[TrainConfig], runs_dir: Path, progress) -> list:
    """`train.compare(configs, runs_dir, progress)`, run in a spawned process; returns its runs.

    Raises the PeftvizError the child raised (its class and first line), or a TrainingError if
    the child died without a word (killed, out of memory).
    """
    from peftviz.runs import load_run
    from peftviz.train import Progress

    receive, send = multiprocessing.Pipe(duplex=False)
    settings = json.dumps([config.to_dict() for config in configs])
    child = multiprocessing.get_context("spawn").Process(
        target=_child, args=(settings, str(runs_dir), send, os.getpid()), name="peftviz-training", daemon=True
    )
    child.start()
    send.close()  # the parent only reads: EOF on `receive` then means the child is gone
    try:
        while True:
            message = _next_message(receive, child)
            if "progress" in message:
                progress(Progress(**message["progress"]))
            elif "runs" in message:
                return [load_run(Path(path)) for path in message["runs"]]
            else:
                raise _error(message)
    finally:
        child.join(timeout=30)
        receive.close()


def _next_message(receive, child) -> dict:
    while not receive.poll(POLL_SECONDS):
        if not child.is_alive() and not receive.poll(0):
            raise TrainingError(f"the training process ended without finishing (exit code {child.exitcode})")
    try:
        return json.loads(receive.recv_bytes())
    except EOFError:
        child.join(timeout=5)
        raise TrainingError(f"the training process ended without finishing (exit code {child.exitcode})") from None


def _error(message: dict) -> PeftvizError:
    kind = getattr(errors, str(message.get("error")), None)
    if not (isinstance(kind, type) and issubclass(kind, PeftvizError)):
        kind = TrainingError
    return kind(str(message.get("message", "training failed")))


def _child(settings: str, runs_dir: str, send, parent: int) -> None:
    from peftviz.train import compare

    def report(event) -> None:
        if os.getppid() != parent:  # the server is gone: stop like a killed run, resumable from the CLI
            os._exit(1)
        send.send_bytes(json.dumps({"progress": asdict(event)}).encode())

    try:
        configs = [TrainConfig.from_dict(values) for values in json.loads(settings)]
        runs = compare(configs, Path(runs_dir), report)
        send.send_bytes(json.dumps({"runs": [str(run.path) for run in runs]}).encode())
    except PeftvizError as err:
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        send.send_bytes(json.dumps({"error": type(err).__name__, "message": first_line}).encode())
    except Exception as err:  # noqa: BLE001  (a bug: its kind and line reach the page; the traceback the log)
        import traceback

        traceback.print_exc()
        send.send_bytes(json.dumps({"error": "", "message": f"{type(err).__name__}: {err}".splitlines()[0]}).encode())
    finally:
        send.close()
