"""Recorded runs (`peftviz.record`) beside a run peftviz trained: the Calibration and Home pages show them.

The store mixes a smoke run peftviz trained, a run a loop recorded to the end (3 epochs), one a loop
recorded for 2 epochs before it was killed with SIGKILL (incomplete) and a corrupt folder. The recorded
runs hold random predictions of the trained run's own validation and test labels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from peftviz.analysis import group_stats
from peftviz.record import open_run
from peftviz.run_config import preset_config
from peftviz.store.runs import list_runs
from tests.record.test_recorder_killed import killed_after, loop_data
from tests.support.helpers import charts, plotly_array
from tests.support.sweeps import trained

pytestmark = pytest.mark.slow  # trains a smoke run and kills a recording child process

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"calibration": "pages/2_Calibration.py", "home": "pages/0_home.py"}
RECORDED, KILLED, CORRUPT = "recorded-loop", "killed-loop", "broken-config"
LIMIT = 60  # documents per split: the recorded runs say so too, or the page will not compare them (other data)


@pytest.fixture(scope="module")
def recorded_store(tmp_path_factory):
    """The four runs of the module docstring; returns (store, {label: run})."""
    import torch

    store = tmp_path_factory.mktemp("recorded_store") / "runs"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        (smoke,) = trained([preset_config("smoke", "lora", limit=LIMIT, epochs=2)], store)
    finally:
        torch.set_num_threads(threads)
    labels, test_labels = smoke.predictions(1)[1], smoke.predictions("test")[1]
    record_complete(store, smoke, labels, test_labels)
    data = loop_data(labels, test_labels, smoke.label_names, name=KILLED, seed=1, settings={"limit": LIMIT})
    killed_after(store, 2, data)
    (store / CORRUPT).mkdir()
    (store / CORRUPT / "config.json").write_text("{not json")
    return store, {run.label if run.config else run.name: run for run in list_runs(store)}


def record_complete(store: Path, smoke, labels, test_labels) -> None:
    rng = np.random.default_rng(0)
    n_classes = len(smoke.label_names)
    with open_run(
        RECORDED,
        method="lora",
        options={"r": 4},
        model="tiny-bert",
        dataset="bbc-news",
        label_names=smoke.label_names,
        settings={"learning_rate": 1e-3, "limit": LIMIT, "scheduler": "cosine"},
        runs_dir=store,
    ) as recorder:
        for _ in range(3):
            recorder.add_epoch(
                labels,
                logits=rng.normal(size=(len(labels), n_classes)),
                test_labels=test_labels,
                test_probs=rng.dirichlet(np.ones(n_classes), len(test_labels)),
            )


@pytest.fixture(autouse=True)
def few_resamples(monkeypatch):
    monkeypatch.setattr(group_stats, "RESAMPLE_CHOICES", (20, 1000))


def open_page(page: str, store: Path, monkeypatch) -> AppTest:
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    at = AppTest.from_file(str(ROOT / PAGES[page]), default_timeout=300).run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    return at


def test_the_store_holds_what_the_pages_are_shown(recorded_store):
    runs = recorded_store[1]
    statuses = {label: (run.status, run.epochs_done, bool(run.recorded)) for label, run in runs.items()}
    assert statuses[RECORDED] == ("complete", 3, True) and statuses[KILLED] == ("incomplete", 2, True)
    assert statuses["lora"] == ("complete", 2, False)
    assert sum(run.status == "corrupt" for run in runs.values()) == 1


def test_the_calibration_page_shows_recorded_runs_beside_the_trained_one(recorded_store, monkeypatch):
    store, runs = recorded_store
    at = open_page("calibration", store, monkeypatch)
    units = at.multiselect(key="calibration_units_False")
    shown = {RECORDED: RECORDED, KILLED: f"{KILLED} (incomplete)", "lora": "lora"}
    assert set(units.options) == set(shown.values())  # every usable run, each under its label
    assert any(CORRUPT in caption.value for caption in at.caption)  # the corrupt folder, skipped and named
    units.set_value([runs[label].name for label in shown]).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    ece = charts(at)["ece-over-epochs"]
    lines = {trace["name"]: trace for trace in ece["data"] if trace.get("mode", "").startswith("lines")}
    for label, name in shown.items():
        trace = next(trace for trace_name, trace in lines.items() if trace_name == name)
        epochs = [int(x) for x in plotly_array(trace["x"])]
        assert epochs == [line["epoch"] for line in runs[label].metrics]
        np.testing.assert_allclose(plotly_array(trace["y"]), [line["ece"] for line in runs[label].metrics], atol=1e-9)
    assert [int(x) for x in plotly_array(lines[shown[KILLED]]["x"])] == [1, 2]
    assert {key for key in charts(at) if key.startswith("reliability-")} == {
        f"reliability-{runs[label].name}" for label in shown
    }


def test_the_home_page_lists_each_run_with_its_status(recorded_store, monkeypatch):
    store, runs = recorded_store
    at = open_page("home", store, monkeypatch)
    table = at.dataframe[0].value
    status = dict(zip(table["run"], table["status"]))
    assert status[runs[RECORDED].name] == "complete" and status[runs[KILLED].name] == "incomplete"
    assert status[runs["lora"].name] == "complete" and status[CORRUPT].startswith("corrupt")
    epochs = dict(zip(table["run"], table["epochs"]))
    assert str(epochs[runs[KILLED].name]).startswith("2") and str(epochs[runs[RECORDED].name]).startswith("3")
