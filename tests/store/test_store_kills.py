"""A training run killed at every atomic write: the store still lists it truthfully, and `--resume`
finishes it with the metrics of a run that was never interrupted.

Every write of a run ends in one `os.replace` (the run folder's rename, then each file's). The
in-process tests stop the trainer at each of them, just before and just after the rename, with an
exception no handler catches (as a kill leaves no chance to clean up). The subprocess tests send a
real SIGKILL at chosen writes, leaving the temporary files a dead writer leaves, and check that
opening the store removes them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from peftviz.run_config import preset_config
from peftviz.store import runs as runs_module
from peftviz.store.runs import list_runs
from peftviz.training.inference import load_trained, predict, validation_loader
from peftviz.training.trainer import resume, train

pytestmark = pytest.mark.slow  # trains in child processes or on the shipped MiniLM (left out of the fast tier)

ROOT = Path(__file__).resolve().parents[2]
EPOCHS = 3
TIMING_KEYS = ("seconds",)


class Killed(BaseException):
    """A simulated kill: not an Exception, so no `except` in peftviz handles it."""


def smoke_config():
    return preset_config("smoke", epochs=EPOCHS)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run, and how many renames it made."""
    calls = []
    real_replace = os.replace

    def counting(src, dst):
        calls.append(Path(dst).name)
        real_replace(src, dst)

    os.replace = counting
    try:
        run = train(smoke_config(), runs_dir=tmp_path_factory.mktemp("reference"))
    finally:
        os.replace = real_replace
    return run, calls


def kill_at(monkeypatch, write: int, when: str) -> None:
    """Stop the process's `write`-th rename, before it happens or right after."""
    real_replace, count = os.replace, [0]

    def replace(src, dst):
        count[0] += 1
        if count[0] == write and when == "before":
            raise Killed
        real_replace(src, dst)
        if count[0] == write and when == "after":
            raise Killed

    monkeypatch.setattr(os, "replace", replace)


def without_timing(line: dict) -> dict:
    return {k: v for k, v in line.items() if k not in TIMING_KEYS}


def assert_same_metrics(run, reference_run) -> None:
    assert run.status == "complete"
    assert len(run.metrics) == len(reference_run.metrics) == EPOCHS
    for got, want in zip(run.metrics, reference_run.metrics):
        got, want = without_timing(got), without_timing(want)
        assert got.keys() == want.keys()
        np.testing.assert_allclose([got[k] for k in got], [want[k] for k in got], atol=1e-5, rtol=0)
    for name in ("accuracy", "ece", "nll"):
        assert run.summary["test"][name] == pytest.approx(reference_run.summary["test"][name], abs=1e-5)
    assert run.summary["params_epoch"] == reference_run.summary["params_epoch"]


def assert_best_epoch_reproduces(run) -> None:
    """The model rebuilt from params.safetensors gives the best epoch's stored validation predictions."""
    model, tokenizer = load_trained(run, device="cpu")
    probs, labels = predict(model, validation_loader(run, tokenizer), next(model.parameters()).device)
    stored_probs, stored_labels = run.predictions(run.best_epoch)
    np.testing.assert_array_equal(labels, stored_labels)
    np.testing.assert_allclose(probs, stored_probs, atol=1e-5, rtol=0)


def test_reference_run_makes_the_writes_documented(reference):
    run, calls = reference
    params_writes = calls.count("params.safetensors")
    assert calls[:2] == ["config.json", run.name]  # the settings, then the folder into the store
    assert calls[-2:] == ["test.npz", "summary.json"]
    assert calls.count("metrics.jsonl") == calls.count("resume.safetensors") == EPOCHS
    assert 1 <= params_writes <= EPOCHS and len(calls) == 2 + 3 * EPOCHS + params_writes + 2
    assert not (run.path / "resume.safetensors").exists()  # a complete run needs no resume state


def kill_points(calls: list[str]) -> list[tuple[int, str]]:
    """Just before each write, and just after the last. In-process, a kill just after write k leaves
    the same files as one just before write k + 1 (the subprocess tests below leave temporaries)."""
    return [(write, "before") for write in range(1, len(calls) + 1)] + [(len(calls), "after")]


def test_a_kill_at_every_write_leaves_a_truthful_run_that_resume_finishes(tmp_path, monkeypatch, reference):
    reference_run, calls = reference
    for write, when in kill_points(calls):
        store = tmp_path / f"{when}-{write}"
        kill_at(monkeypatch, write, when)
        with pytest.raises(Killed):
            train(smoke_config(), runs_dir=store)
        monkeypatch.undo()
        found = list_runs(store)
        if not found:  # killed before the folder entered the store: nothing shows, nothing to resume
            assert write <= 2 and when == "before"
            continue
        (run,) = found
        assert run.status in ("incomplete", "complete"), (write, when, run.error)
        if run.metrics:
            assert_best_epoch_reproduces(run)
        if run.status == "incomplete":
            run = resume(run)
        assert_same_metrics(run, reference_run)


def test_resume_refuses_a_complete_run(reference):
    from peftviz.errors import RunError

    with pytest.raises(RunError, match="is complete; only an incomplete"):
        resume(reference[0])


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    write, store = int(sys.argv[1]), sys.argv[2]
    real_replace, count = os.replace, [0]
    def replace(src, dst):
        count[0] += 1
        if count[0] == write:
            os.kill(os.getpid(), signal.SIGKILL)  # mid-write: the temporary file stays behind
        real_replace(src, dst)
    os.replace = replace
    from peftviz.cli import main
    main(["train", "--preset", "smoke", "--epochs", "3", "--runs-dir", store])
    """
)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)


# the writes of a 3-epoch smoke run of the default method: config.json, the folder's rename, then per
# epoch predictions, metrics line, resume state and (for a new best) parameters; test predictions, summary
MAX_WRITES = 2 + 4 * EPOCHS + 2  # every epoch a new best
FAST_WRITES = (1, 5)  # config.json inside the folder being built; the first epoch's resume state


@pytest.mark.parametrize(
    "write", [w if w in FAST_WRITES else pytest.param(w, marks=pytest.mark.long) for w in range(1, MAX_WRITES + 1)]
)
def test_sigkill_mid_write_then_cli_resume(tmp_path, reference, write):
    """A real SIGKILL in the middle of each write (in the fast run: two of them; all with -m long)."""
    if write > len(reference[1]):
        pytest.skip(f"the reference run made {len(reference[1])} writes")
    killed = cli("-c", KILLER, str(write), str(tmp_path))
    assert killed.returncode == -signal.SIGKILL
    assert list(tmp_path.rglob(".*.tmp")), "a kill mid-write leaves the temporary file"
    runs_module._cleaned.clear()
    found = list_runs(tmp_path)  # opening the store removes the dead writer's temporaries
    assert not list(tmp_path.rglob(".*.tmp"))
    if write <= 2:  # the folder never entered the store
        assert found == []
        return
    (run,) = found
    assert run.status == "incomplete", run.error
    if run.metrics:
        assert_best_epoch_reproduces(run)
    resumed = cli("-m", "peftviz", "train", "--resume", run.name, "--runs-dir", str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr
    (run,) = list_runs(tmp_path)
    assert_same_metrics(run, reference[0])


def test_cli_resume_refuses_other_settings_and_unknown_runs(tmp_path):
    mixed = cli("-m", "peftviz", "train", "--resume", "x", "--epochs", "5", "--runs-dir", str(tmp_path))
    assert mixed.returncode == 1
    assert mixed.stderr.strip() == "peftviz: error: --resume continues a run with its own settings; drop epochs"
    unknown = cli("-m", "peftviz", "train", "--resume", "nope", "--runs-dir", str(tmp_path))
    assert unknown.stderr.strip() == f"peftviz: error: no run folder {tmp_path / 'nope'}"
