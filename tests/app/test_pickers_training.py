"""A run still training is marked "(training)" wherever a page picks it (issue 45), as the Calibration page's
legends mark it (`analysis.calibration.display_names`): the run pickers of the Attention, Kernel and Tiny-attention
heads pages (`appkit.pick_run`, `appkit.run_label`). A run picked while it trains stays picked when it finishes."""

import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz.analysis.run_labels import run_labels
from peftviz.store.runs import list_runs
from peftviz.store.writer import WriterLock

ROOT = Path(__file__).resolve().parents[2]
PICKERS = [
    ("pages/3_Attention.py", "attention_run"),
    ("pages/4_Kernel.py", "kernel_run"),
    ("pages/5_Tiny_attention_heads.py", "tiny_heads_run"),
]
MARK = " (training)"


class LiveRuns:
    """Runs of a copy of the smoke store made to read as training: no summary.json, and a writer lock this test
    process holds, as a training job's child would."""

    def __init__(self, store: Path, methods: tuple[str, ...]):
        runs = list_runs(store)
        self.runs = [
            next(
                run for run in runs if run.config.method == method and run.config.method_options.get("n_heads", 0) != 1
            )
            for method in methods
        ]
        for run in self.runs:
            (run.path / "summary.json").rename(run.path / "summary.kept")
        self.locks = {run.name: WriterLock(run.path) for run in self.runs}

    def finish(self, run) -> None:
        self.locks.pop(run.name).release()
        (run.path / "summary.kept").rename(run.path / "summary.json")

    def release(self) -> None:
        for lock in self.locks.values():
            lock.release()


@pytest.fixture
def live(app_store, tmp_path, monkeypatch):
    store = tmp_path / "runs"
    shutil.copytree(app_store, store)
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    runs = LiveRuns(store, ("prefix-propagation", "tiny-attention"))
    yield runs
    runs.release()


def labels_now() -> dict[str, str]:
    return run_labels(list_runs())


@pytest.mark.parametrize(("page", "key"), PICKERS)
def test_a_run_still_training_is_marked_in_every_run_picker(live, page, key):
    assert {run.status for run in list_runs() if run.name in live.locks} == {"training"}
    at = AppTest.from_file(str(ROOT / page), default_timeout=120).run()
    assert not at.exception
    options = at.selectbox(key=key).options
    labels = labels_now()
    training = {labels[run.name] for run in live.runs}
    assert any(option.endswith(MARK) for option in options)
    for option in options:  # the live runs offered, and no other run, marked
        assert option.endswith(MARK) == (option.removesuffix(MARK) in training), option


def test_a_run_picked_while_training_stays_picked_when_it_finishes(live):
    propagation = live.runs[0]
    at = AppTest.from_file(str(ROOT / "pages/3_Attention.py"), default_timeout=120).run()
    label = labels_now()[propagation.name]
    box = at.selectbox(key="attention_run")
    box.select_index(box.options.index(label + MARK)).run()
    assert at.selectbox(key="attention_run").value.name == propagation.name
    live.finish(propagation)
    at.run()
    box = at.selectbox(key="attention_run")
    assert not at.exception and label in box.options and label + MARK not in box.options
    assert box.value.name == propagation.name and box.options[box.index] == label
