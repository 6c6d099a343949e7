"""An imported run forms groups with imported runs only (issue 33), even where its settings and its label
equal a trained run's: a model evaluated as it came is not one more seed of the method trained here.

The store is planted with RunWriter (made-up predictions, no training): two trained runs (seeds 0 and 1)
and two imported ones of the very same settings and label (seeds 0 and 2), as `import --option
label=...` stores them: one evaluated "epoch", the test predictions, and the origin in config.json."""

from pathlib import Path

import numpy as np
import pytest

from peftviz.run_config import TrainConfig, preset_config
from peftviz.store.runs import group_key, group_runs, list_runs
from peftviz.store.writer import RunWriter

LABELS = ["business", "sport", "tech"]
ORIGIN = {"kind": "peftviz", "source": "/exports/lora", "revision": None, "files": {}, "labels": "by name"}


def plant(root: Path, config: TrainConfig, created: str, imported: dict | None = None) -> Path:
    """A complete run of `config` with one epoch of made-up predictions; `imported`: its origin."""
    import torch

    recorded = {"label_names": LABELS, "parameters": {"total": 10, "trainable": 4}, "environment": {"created": created}}
    writer = RunWriter.create(root, config, recorded | ({"imported": imported} if imported else {}))
    rng = np.random.default_rng(config.seed)
    labels = np.random.default_rng(0).integers(0, 3, size=40)
    probs = rng.dirichlet(np.ones(3), size=40).astype(np.float32)
    writer.write_epoch({"epoch": 1, "micro_f1": 0.5, "accuracy": 0.5, "ece": 0.1}, probs, labels)
    writer.write_params({"head.weight": torch.ones(3, 4)}, 1)
    writer.write_predictions("test", probs, labels)
    writer.finish({"params_epoch": 1, "test": {"accuracy": 0.5, "ece": 0.1}})
    return writer.path


@pytest.fixture
def mixed_store(tmp_path) -> Path:
    config = preset_config("smoke", "lora", seed=0, label="lora")
    plant(tmp_path, config, "2026-11-20T10:00:00")
    plant(tmp_path, preset_config("smoke", "lora", seed=1, label="lora"), "2026-11-20T11:00:00")
    plant(tmp_path, config, "2026-11-20T12:00:00", imported=ORIGIN)  # the same settings, label and seed
    plant(tmp_path, preset_config("smoke", "lora", seed=2, label="lora"), "2026-11-20T13:00:00", imported=ORIGIN)
    return tmp_path


def test_imported_runs_with_a_trained_run_s_settings_and_label_form_their_own_group(mixed_store):
    runs = list_runs(mixed_store)
    assert [run.label for run in runs] == ["lora"] * 4 and [bool(run.imported) for run in runs] == [0, 0, 1, 1]
    assert runs[0].config.key_settings == runs[2].config.key_settings  # nothing but the origin tells them apart
    groups = group_runs(runs)
    assert len(groups) == 2 and [group.label for group in groups] == ["lora", "lora"]
    trained, imported = groups
    assert [run.name for run in trained.runs] == [runs[0].name, runs[1].name] and trained.seeds == [0, 1]
    assert [run.name for run in imported.runs] == [runs[2].name, runs[3].name] and imported.seeds == [0, 2]
    assert trained.repeats == imported.repeats == []  # the imported seed 0 is no repeat of the trained one
    assert trained.key != imported.key


def test_the_group_key_of_imported_settings_differs_from_the_trained_one():
    config = preset_config("smoke", "lora", seed=0)
    assert group_key(config, imported=True) != group_key(config)
    assert group_key(config, imported=True) == group_key(preset_config("smoke", "lora", seed=5), imported=True)
