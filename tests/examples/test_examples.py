"""The two examples run as a new user runs them, on CI's small settings, and what they record is checked.

`examples/hf_trainer.py` runs twice: as a script (a subprocess, as the README says to run it), and once
in-process through its `main`, which hands back the Trainer, so that the stored ECE can be recomputed
here from `trainer.predict` (numpy, no peftviz) and the Calibration page shown on the run beside a
peftviz-trained one.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from peftviz.analysis import group_stats
from peftviz.store.runs import list_runs, load_run
from tests.support.helpers import charts, plotly_array

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SMALL = ("--limit", "60", "--epochs", "3", "--max-length", "32")  # CI's settings: seconds per run
LABELS = ["business", "entertainment", "politics", "sports", "tech"]


def run_script(name: str, runs: Path, *more: str) -> str:
    """Run examples/<name> as a user would, from the repository root; returns its standard output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PEFTVIZ_RUNS": str(runs.parent / "elsewhere")}
    done = subprocess.run(
        [sys.executable, f"examples/{name}", *SMALL, "--runs-dir", str(runs), *more],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def example(name: str):
    """examples/<name> imported as a module (examples/ is no package): its `main` called in-process."""
    spec = importlib.util.spec_from_file_location(f"example_{Path(name).stem}", ROOT / "examples" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def top_label_ece(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> float:
    """Binned ECE written out: 10 equal-width bins of the top-label confidence, (0, 0.1], ..., (0.9, 1]."""
    confidence, right = probs.max(axis=1), probs.argmax(axis=1) == labels
    bins = np.clip(np.ceil(confidence * n_bins).astype(int) - 1, 0, n_bins - 1)
    gaps = [abs(right[bins == b].mean() - confidence[bins == b].mean()) * (bins == b).sum() for b in np.unique(bins)]
    return float(sum(gaps) / len(labels))


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def assert_complete(run, method: str, by: str) -> None:
    """Complete, three committed epochs with validation and test predictions, recorded (no parameters)."""
    assert run.status == "complete" and run.epochs_done == 3 and [m["epoch"] for m in run.metrics] == [1, 2, 3]
    assert run.config.method == method and run.config.dataset == "bbc-news" and run.label_names == LABELS
    assert run.recorded["by"] == by and not run.has_params
    for epoch in (1, 2, 3):
        assert len(run.predictions(epoch)[1]) == len(run.predictions(f"epoch_{epoch}_test")[1]) == 60
    assert set(run.summary["test"]) >= {"accuracy", "ece", "brier", "nll"}


# ---------------------------------------------------------------- as scripts


def test_the_trainer_example_runs_as_a_script_and_records_a_complete_run(tmp_path):
    out = run_script("hf_trainer.py", tmp_path / "runs", "--output-dir", str(tmp_path / "trainer"))
    [run] = list_runs(tmp_path / "runs")
    assert str(run.path) in out.splitlines()[-1]  # it says where the run went
    assert_complete(run, "lora", "transformers-trainer")
    assert run.config.method_options["r"] == 8 and run.config.max_length == 32 and run.config.limit == 60
    assert run.config.model == "minilm" and run.recorded["given"] == sorted(run.recorded["given"])
    assert not (tmp_path / "elsewhere").exists()  # --runs-dir, not PEFTVIZ_RUNS


def test_the_plain_loop_example_records_an_external_method_whose_ece_matches_its_predictions(tmp_path):
    out = run_script("plain_loop.py", tmp_path / "runs")
    [run] = list_runs(tmp_path / "runs")
    assert str(run.path) in out.splitlines()[-1]
    assert_complete(run, "external:linear-probe", "recorder")
    assert run.recorded["settings"] == {"optimizer": "AdamW"} and run.config.learning_rate == 5e-2
    for line in run.metrics:  # each epoch's line against its own stored validation predictions
        probs, labels = run.predictions(line["epoch"])
        assert line["ece"] == pytest.approx(top_label_ece(probs, labels), abs=1e-6)
        assert line["accuracy"] == pytest.approx((probs.argmax(1) == labels).mean(), abs=1e-12)
        assert line["train_loss"] > 0
    printed = [float(text.split("ECE ")[1]) for text in out.splitlines() if text.startswith("epoch ")]
    assert printed == pytest.approx([m["ece"] for m in run.metrics], abs=5e-4)  # what it printed was stored


# ---------------------------------------------------------------- in-process: the Trainer at hand


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(trainer, run, tokenized splits) of the Trainer example's main, in this process, one thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        folder = tmp_path_factory.mktemp("hf")
        yield example("hf_trainer.py").main(
            [*SMALL, "--runs-dir", str(folder / "runs"), "--output-dir", str(folder / "out")]
        )
    finally:
        torch.set_num_threads(threads)


def test_the_stored_last_epoch_equals_trainer_predict_on_the_same_split(trained):
    trainer, run, splits = trained
    assert_complete(run, "lora", "transformers-trainer")
    last = run.metrics[-1]
    for split, stored_name in (("validation", 3), ("test", "epoch_3_test")):
        found = trainer.predict(splits[split])  # the final (third) epoch's model, evaluated again
        probs, labels = softmax(found.predictions), found.label_ids
        stored_probs, stored_labels = run.predictions(stored_name)
        assert np.array_equal(stored_labels, labels) and np.allclose(stored_probs, probs, atol=1e-6)
        if split == "validation":
            assert last["ece"] == pytest.approx(top_label_ece(probs, labels), abs=1e-6)
            assert last["accuracy"] == pytest.approx((probs.argmax(1) == labels).mean(), abs=1e-12)
            assert last["ece"] > 0 and last["n"] == 60


def test_every_epochs_stored_ece_is_the_ece_of_its_stored_predictions(trained):
    _, run, _ = trained
    values = [top_label_ece(*run.predictions(m["epoch"])) for m in run.metrics]
    assert [m["ece"] for m in run.metrics] == pytest.approx(values, abs=1e-6)
    assert len(set(np.round(values, 6))) == 3  # the model changed between epochs: three different points


# ---------------------------------------------------------------- the Calibration page


@pytest.fixture
def both_store(trained, tmp_path, monkeypatch):
    """A store with the recorded Trainer run and one run peftviz trained (the smoke preset's LoRA, tiny BERT), both
    judged on the same 60 validation and 60 test documents of bbc-news: the page compares them paired."""
    from peftviz.run_config import preset_config
    from tests.support.sweeps import trained as sweep_trained

    store = tmp_path / "runs"
    shutil.copytree(trained[1].path, store / trained[1].path.name)
    [ours] = sweep_trained([preset_config("smoke", "lora", label="smoke-lora", limit=60)], store)
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    monkeypatch.setattr(group_stats, "RESAMPLE_CHOICES", (20, 1000))  # few resamples: a quick page
    return load_run(store / trained[1].path.name), ours


def test_the_calibration_page_shows_the_recorded_run_beside_a_peftviz_run(both_store):
    recorded, ours = both_store
    page = AppTest.from_file(str(ROOT / "pages/2_Calibration.py"), default_timeout=300).run()
    assert not page.exception and not page.error
    units = page.multiselect(key="calibration_units_False")
    units.set_value([recorded.name, ours.name]).run()
    assert not page.exception and not page.error
    found = charts(page)
    for run in (recorded, ours):  # a reliability diagram each, of its last epoch
        spec = found[f"reliability-{run.name}"]
        counts = next(trace for trace in spec["data"] if trace["name"] == "count")
        assert plotly_array(counts["y"]).sum() == len(run.predictions(run.epochs_done)[1])
    ece = {trace["name"]: trace for trace in found["ece-over-epochs"]["data"] if trace.get("mode") == "lines+markers"}
    assert ece, json.dumps([t.get("name") for t in found["ece-over-epochs"]["data"]])
    by_epochs = {len(plotly_array(trace["x"])): plotly_array(trace["y"]) for trace in ece.values()}
    assert by_epochs[3] == pytest.approx([m["ece"] for m in recorded.metrics], abs=1e-9)
    assert by_epochs[2] == pytest.approx([m["ece"] for m in ours.metrics], abs=1e-9)
    [summary] = [frame for frame in page.table if frame.value.columns[0] == "unit"]  # the comparison, on test
    shown = dict(zip(summary.value["unit"], summary.value["ECE (equal width)"]))
    for run in (recorded, ours):
        assert shown[run.label].startswith(f"{top_label_ece(*run.predictions('test')):.4f} [")
