"""A training loop recording through `peftviz.record`, killed with SIGKILL: its run reads back incomplete
with the epochs it recorded, their predictions readable, never corrupt, whenever the kill lands."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from peftviz.store import runs as runs_module
from peftviz.store.runs import list_runs
from peftviz.store.schema import read_predictions

pytestmark = pytest.mark.slow  # child processes that import torch: seconds each

ROOT = Path(__file__).resolve().parents[2]
N, C = 30, 4

# argv: store, epochs, seconds to sleep after them, the loop's data as JSON (`loop_data`); each epoch
# records a validation and a test split
LOOP = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    from peftviz.record import open_run
    store, epochs, sleep, data = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4])
    rng = np.random.default_rng(data["seed"])
    labels, test_labels, names = np.array(data["labels"]), np.array(data["test_labels"]), data["label_names"]
    recorder = open_run(data["name"], method="my-adapter", model="tiny-bert", dataset="bbc-news",
                        label_names=names, settings=data["settings"], runs_dir=store)
    for epoch in range(epochs):
        recorder.add_epoch(labels, logits=rng.normal(size=(len(labels), len(names))), test_labels=test_labels,
                           test_probs=rng.dirichlet(np.ones(len(names)), len(test_labels)))
    time.sleep(sleep)
    recorder.close()
    """
)


def loop_data(labels=None, test_labels=None, label_names=None, name="killed", seed=0, settings=None) -> str:
    """What the loop records: its validation and test labels and class names (default: N and N / 2 of C), and
    the settings it names."""
    labels = np.arange(N) % C if labels is None else np.asarray(labels)
    test_labels = np.arange(N // 2) % C if test_labels is None else np.asarray(test_labels)
    names = label_names or [f"class-{k}" for k in range(C)]
    return json.dumps(
        {
            "labels": labels.tolist(),
            "test_labels": test_labels.tolist(),
            "label_names": names,
            "name": name,
            "seed": seed,
            "settings": settings or {},
        }
    )


def start(store: Path, epochs: int, sleep: float, data: str | None = None) -> subprocess.Popen:
    """The loop in a child process, recording `epochs` epochs into `store`, then sleeping `sleep` seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    arguments = [str(store), str(epochs), str(sleep), data or loop_data()]
    return subprocess.Popen([sys.executable, "-c", LOOP, *arguments], cwd=ROOT, env=env, stderr=subprocess.PIPE)


def metrics_lines(store: Path, others: frozenset = frozenset()) -> int:
    """Lines of the recording run's metrics.jsonl so far (0 before its folder is in the store); `others`: the
    folders the store held before the loop started."""
    found = [path for path in store.glob("*/metrics.jsonl") if path.parent.name not in others]
    return len(found[0].read_text().splitlines()) if found else 0


def wait_for_lines(child: subprocess.Popen, store: Path, lines: int, others=frozenset(), seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while metrics_lines(store, others) < lines:
        assert child.poll() is None, child.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, f"no {lines} metrics lines in {seconds} s"
        time.sleep(0.01)


def kill(child: subprocess.Popen) -> None:
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL


def killed_after(store: Path, epochs: int, data: str | None = None) -> None:
    """A loop that records `epochs` epochs, then is killed with SIGKILL while it sleeps before `close`."""
    others = frozenset(path.name for path in store.iterdir()) if store.exists() else frozenset()
    child = start(store, epochs, sleep=600, data=data)
    wait_for_lines(child, store, epochs, others)
    kill(child)


def assert_readable(store: Path):
    """The one run lists complete or incomplete, and every epoch it lists has its predictions."""
    runs_module._cleaned.clear()  # open the store anew: a dead writer's temporaries are removed
    (run,) = list_runs(store)
    assert run.status in ("complete", "incomplete"), run.error
    assert [line["epoch"] for line in run.metrics] == list(range(1, run.epochs_done + 1))
    for epoch in range(1, run.epochs_done + 1):
        probs, labels = run.predictions(epoch)
        assert probs.shape == (N, C) and np.array_equal(labels, np.arange(N) % C)
        assert np.allclose(probs.sum(axis=1), 1, atol=1e-5)
    for path in (run.path / "predictions").glob("*_test.npz"):  # a test split may be ahead of its epoch's line
        assert read_predictions(path, C)[0].shape == (N // 2, C)
    assert not list(store.rglob(".*.tmp"))
    return run


def test_a_loop_killed_after_two_epochs_reads_incomplete_with_both(tmp_path):
    child = start(tmp_path, epochs=2, sleep=600)
    wait_for_lines(child, tmp_path, 2)
    assert list_runs(tmp_path)[0].status == "training"
    kill(child)
    run = assert_readable(tmp_path)
    assert run.status == "incomplete" and run.epochs_done == 2 and not run.summary
    assert run.config.method == "external:my-adapter" and run.recorded["by"] == "recorder"
    assert [line["n"] for line in run.metrics] == [N, N]


def test_a_loop_killed_at_random_moments_is_never_corrupt(tmp_path):
    outcomes = []
    for seed in range(6):
        store = tmp_path / f"seed-{seed}"
        child = start(store, epochs=400, sleep=0)
        wait_for_lines(child, store, 1)
        time.sleep(random.Random(seed).uniform(0, 0.4))
        kill(child)
        run = assert_readable(store)
        outcomes.append((run.status, run.epochs_done))
    incomplete = [epochs for status, epochs in outcomes if status == "incomplete"]
    assert len(incomplete) >= 3, outcomes  # the kills landed mid-run: the test saw what it is about
    assert all(1 <= epochs < 400 for epochs in incomplete), outcomes
