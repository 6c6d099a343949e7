"""A seed and its settings fix what a run stores, bit for bit on the CPU, wherever it trains.

The app trains in a child process (`peftviz.app.worker`) because in a server thread other threads
drew from torch's global generator and changed dropout masks: the same comparison stored other
results from the app than from the CLI. Here the parent draws from that generator all the time
the child trains, as a busy server does, and the stored predictions still equal an undisturbed
in-process run's exactly.
"""

import sys
import threading
import types

import numpy as np
import pytest
import torch

from peftviz.app.worker import sweep_in_child
from peftviz.errors import ConfigError, ModelLoadError, TrainingError
from peftviz.run_config import preset_config
from peftviz.sweep.variants import comparison_configs
from tests.support.sweeps import trained

pytestmark = pytest.mark.slow  # trains in child processes or on the shipped MiniLM (left out of the fast tier)

METHODS = ["prefix-tuning", "kernel-prefix-propagation"]  # the two rows a tester saw differ


def stored_predictions(run) -> dict[str, np.ndarray]:
    """Every stored evaluation's probabilities, by name."""
    names = [f"epoch_{epoch}" for epoch in range(1, len(run.metrics) + 1)] + ["test"]
    return {name: run.predictions(int(name[6:]) if name.startswith("epoch_") else name)[0] for name in names}


def draw_while(thread_or_event) -> None:
    """What a busy server does to the global generator: build layers (random init) until told to stop."""
    while not thread_or_event.is_set():
        torch.nn.Linear(32, 32)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    configs = [preset_config("smoke", method) for method in METHODS]
    return trained(configs, tmp_path_factory.mktemp("in-process"))


def test_a_child_process_stores_what_an_undisturbed_run_stores(reference, tmp_path):
    configs = [preset_config("smoke", method) for method in METHODS]
    events = []
    stop = threading.Event()
    busy = threading.Thread(target=draw_while, args=(stop,), daemon=True)
    busy.start()
    try:
        runs = sweep_in_child(configs, tmp_path, events.append)
    finally:
        stop.set()
        busy.join()
    assert [run.config.method for run in runs] == METHODS
    for ours, theirs in zip(runs, reference, strict=True):
        expected = stored_predictions(theirs)
        got = stored_predictions(ours)
        assert got.keys() == expected.keys()
        for name in expected:
            np.testing.assert_array_equal(got[name], expected[name], err_msg=f"{ours.config.method} {name}")
    assert {event.run for event in events} == {config.run_title for config in configs}
    assert [event.phase for event in events].count("done") == len(METHODS)


def test_a_thread_that_draws_from_the_generator_changes_an_in_process_run(reference, tmp_path):
    """Why the child process: the same disturbance in a thread of the training process changes its dropout."""
    stop = threading.Event()
    runs = []
    training = threading.Thread(target=lambda: runs.extend(trained([preset_config("smoke", METHODS[0])], tmp_path)))
    training.start()
    draw_while_alive = threading.Thread(target=draw_while, args=(stop,), daemon=True)
    draw_while_alive.start()
    training.join()
    stop.set()
    draw_while_alive.join()
    assert not np.array_equal(stored_predictions(runs[0])["epoch_1"], stored_predictions(reference[0])["epoch_1"])


def test_the_childs_error_reaches_the_parent_as_its_kind_in_one_line(tmp_path):
    config = preset_config("smoke", "prefix-tuning", model=str(tmp_path / "no-such-model"))
    with pytest.raises(Exception) as caught:
        sweep_in_child([config], tmp_path, lambda event: None)
    assert caught.type.__name__ == "ModelLoadError"
    assert "\n" not in str(caught.value) and "no-such-model" in str(caught.value)
    assert not list(tmp_path.glob("prefix-tuning-*"))  # refused before any folder


def test_a_child_killed_without_a_word_is_a_training_error(tmp_path, monkeypatch):
    monkeypatch.setattr("peftviz.app.worker.COMMAND", [sys.executable, "-c", "import os; os._exit(3)"])
    many = [preset_config("smoke", "prefix-tuning")] * 200  # more settings than a pipe holds: the write fails
    with pytest.raises(TrainingError, match="exit code 3"):
        sweep_in_child(many, tmp_path, lambda event: None)


def test_the_child_never_runs_the_parents_main(tmp_path, monkeypatch):
    """In a Streamlit server `__main__` is the last page script; the child must not run it."""
    page = tmp_path / "page.py"
    page.write_text("raise SystemExit('the page ran in the child')\n")
    fake_main = types.ModuleType("__main__")
    fake_main.__file__ = str(page)
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    config = preset_config("smoke", "prefix-tuning", model=str(tmp_path / "no-such-model"))
    with pytest.raises(ModelLoadError):  # the child got as far as loading the model
        sweep_in_child([config], tmp_path, lambda event: None)


def test_the_quick_comparisons_configs_survive_the_trip_as_json():
    for config in comparison_configs("quick"):
        assert type(config).from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError):
        type(config).from_dict({**config.to_dict(), "learning_rate": -1.0})
