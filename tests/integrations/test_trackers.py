"""The callback's trackers (issue 35): a Trainer that reports to TensorBoard or MLflow gets each evaluation's
ECE, smooth ECE, Brier and NLL as scalars and its reliability diagram as a figure, read back here from the event
files and from MLflow's local file store and checked against the run's stored predictions; a Trainer that
reports nowhere writes to neither, and needs neither package."""

import io
import sys

import numpy as np
import pytest
import relplot
from datasets import Dataset
from PIL import Image
from transformers import Trainer

from peftviz.errors import ConfigError
from peftviz.integrations import trackers
from peftviz.integrations.transformers import PeftvizCallback
from peftviz.store.runs import list_runs
from tests.support.tiny_trainer import tiny_trainer

pytestmark = pytest.mark.usefixtures("one_thread")

SCALARS = ("ece", "smooth_ece", "brier", "nll")
EVALUATION_STEPS = [8, 16, 24]  # 64 training examples in batches of 8: an evaluation every 8 steps, 3 epochs


def datasets() -> tuple[Dataset, Dataset, Dataset]:
    """Train, validation and test splits of 12 tokens from their class's third of the vocabulary, the first naming
    the class, and 30% of the labels drawn at random: learnt within 3 epochs with confidences spread over several of
    the ECE's bins, over- and underconfident, so that the binning shows in the ECE."""
    rng = np.random.default_rng(0)

    def split(n: int) -> Dataset:
        classes = rng.integers(0, 3, n)
        ids = 1 + 33 * classes[:, None] + rng.integers(0, 33, (n, 12))
        ids[:, 0] = 1 + classes
        labels = np.where(rng.random(n) < 0.3, rng.integers(0, 3, n), classes)
        return Dataset.from_dict(
            {"input_ids": ids.tolist(), "attention_mask": np.ones_like(ids).tolist(), "labels": labels.tolist()}
        )

    return split(64), split(30), split(20)


def trainer_for(tmp_path, report_to) -> Trainer:
    """The support's tiny BERT with a peft LoRA (`tiny_trainer`), on the splits above at a rate of 0.3, the callback
    recording into tmp_path/runs."""
    train, validation, test = datasets()
    callback = PeftvizCallback(dataset="synthetic", runs_dir=tmp_path / "runs")
    return tiny_trainer(
        tmp_path / "out",
        [callback],
        {"validation": validation, "test": test},
        train_dataset=train,
        learning_rate=0.3,
        report_to=report_to,
        logging_steps=4,
        disable_tqdm=True,
    )


def trained_run(tmp_path, report_to):
    trainer_for(tmp_path, report_to).train()
    (run,) = list_runs(tmp_path / "runs")
    assert run.status == "complete" and [line["step"] for line in run.metrics] == EVALUATION_STEPS
    return run


def expected_summaries(run) -> dict[int, dict[str, float]]:
    """Each evaluation's step -> the four numbers: ECE as the run's metrics line holds it; smooth ECE (relplot's
    smECE of top-label confidence against correctness), Brier and NLL from the stored predictions, here."""
    expected = {}
    for line in run.metrics:
        with np.load(run.path / "predictions" / f"epoch_{line['epoch']}.npz", allow_pickle=False) as stored:
            probs, labels = stored["probs"].astype(np.float64), stored["labels"]
        confidence, correct = probs.max(axis=1), (probs.argmax(axis=1) == labels).astype(np.float64)
        true_class = probs[np.arange(len(labels)), labels]
        expected[int(line["step"])] = {
            "ece": line["ece"],
            "smooth_ece": float(relplot.smECE(confidence, correct)),
            "brier": float(((probs - np.eye(probs.shape[1])[labels]) ** 2).sum(axis=1).mean()),
            "nll": float(-np.log(np.maximum(true_class, 1e-12)).mean()),
        }
    return expected


def assert_png(data: bytes) -> None:
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG" and image.size[0] > 0 and image.size[1] > 0


# ---------------------------------------------------------------------------------------------- TensorBoard

TENSORBOARD_DIRS = [
    # TENSORBOARD_LOGGING_DIR (under tmp_path) or None, where the callback's event file is, under tmp_path
    ("tb", "tb"),  # the Trainer's own logging dir: both write there
    (None, "out/runs/peftviz"),  # beside the Trainer's time-stamped folder under <output_dir>/runs
]


@pytest.mark.parametrize("logging_dir, event_dir", TENSORBOARD_DIRS)
def test_tensorboard_holds_each_evaluations_summary_and_diagram(tmp_path, monkeypatch, logging_dir, event_dir):
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator
    from tensorboard.backend.event_processing.event_accumulator import SCALARS as ALL_SCALARS

    if logging_dir is None:
        monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    else:
        monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / logging_dir))
    run = trained_run(tmp_path, ["tensorboard"])
    events = EventAccumulator(str(tmp_path / event_dir), size_guidance={IMAGES: 0, ALL_SCALARS: 0}).Reload()
    expected = expected_summaries(run)
    for name in SCALARS:
        logged = events.Scalars(f"peftviz/{name}")
        assert [event.step for event in logged] == EVALUATION_STEPS, name
        for event in logged:  # the event file holds float32
            assert event.value == pytest.approx(expected[event.step][name], rel=1e-5, abs=1e-6), (name, event.step)
    images = events.Images("peftviz/reliability")
    assert [image.step for image in images] == EVALUATION_STEPS
    for image in images:
        assert_png(image.encoded_image_string)
    if logging_dir is not None:  # the Trainer's own scalars share the folder
        assert "eval/validation_loss" in events.Tags()["scalars"]


# ---------------------------------------------------------------------------------------------- MLflow


def test_mlflow_run_holds_each_evaluations_summary_and_diagram(tmp_path, monkeypatch):
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = f"file://{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # MLflow's local file store
    # MLflow 3.17 refuses the file store ("maintenance mode") unless told; its database stores need SQLAlchemy,
    # which mlflow-skinny leaves out
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "peftviz-trackers")
    monkeypatch.setattr(mlflow.tracking._tracking_service.utils, "_tracking_uri", None)  # the Trainer sets it
    run = trained_run(tmp_path, ["mlflow"])
    assert mlflow.active_run() is None  # the Trainer's MLflowCallback ended its run

    client = MlflowClient(tracking_uri=uri)
    (logged_run,) = client.search_runs([client.get_experiment_by_name("peftviz-trackers").experiment_id])
    run_id = logged_run.info.run_id
    expected = expected_summaries(run)
    for name in SCALARS:
        history = sorted(client.get_metric_history(run_id, f"peftviz/{name}"), key=lambda metric: metric.step)
        assert [metric.step for metric in history] == EVALUATION_STEPS, name
        for metric in history:
            assert metric.value == pytest.approx(expected[metric.step][name], rel=1e-5, abs=1e-6), (name, metric.step)
    artifacts = sorted(artifact.path for artifact in client.list_artifacts(run_id, "peftviz"))
    assert artifacts == [f"peftviz/reliability_{epoch:03d}.png" for epoch in (1, 2, 3)]
    for path in artifacts:
        local = client.download_artifacts(run_id, path, str(tmp_path))
        with open(local, "rb") as file:
            assert_png(file.read())


# ---------------------------------------------------------------------------------------------- no tracker

TRACKER_MODULES = ("mlflow", "tensorboard", "torch.utils.tensorboard", "tensorboardX")


def block_imports(monkeypatch, names) -> None:
    """As if the packages were not installed: `import` fails and importlib's find_spec finds nothing."""
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def test_reporting_nowhere_writes_no_tracker_and_needs_none(tmp_path, monkeypatch):
    block_imports(monkeypatch, TRACKER_MODULES)
    monkeypatch.chdir(tmp_path)  # where MLflow's default store, ./mlruns, would appear
    trained_run(tmp_path, "none")
    assert not list(tmp_path.rglob("events.out.tfevents.*"))
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "out" / "runs").exists()


MISSING = [
    # report_to, the packages missing, the Trainer's own line
    ("tensorboard", ("tensorboard", "tensorboardX"), "TensorBoardCallback requires tensorboard to be installed"),
    ("mlflow", ("mlflow",), "MLflowCallback requires mlflow to be installed"),
]


@pytest.mark.parametrize("report_to, missing, line", MISSING)
# transformers' MLflowCallback.__del__ reads an attribute its refused __init__ never set: its noise, not ours
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_missing_tracker_is_refused_before_a_run_is_opened(tmp_path, monkeypatch, report_to, missing, line):
    block_imports(monkeypatch, missing)
    with pytest.raises(RuntimeError, match=line):
        trainer_for(tmp_path, [report_to])
    assert not (tmp_path / "runs").exists()


def test_a_tracker_that_does_not_import_later_is_one_line(tmp_path, monkeypatch):
    block_imports(monkeypatch, TRACKER_MODULES)
    summary = dict.fromkeys(SCALARS, 0.1)
    with pytest.raises(ConfigError, match=r"^the Trainer reports to tensorboard, .*: pip install tensorboard$"):
        trackers.log_tensorboard(tmp_path / "tb", summary, figure=None, step=1)
    with pytest.raises(ConfigError, match=r"^the Trainer reports to mlflow, .*: pip install mlflow$"):
        trackers.log_mlflow(summary, figure=None, step=1, evaluation=1)
    assert not (tmp_path / "tb").exists()
