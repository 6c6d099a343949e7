"""config.json of earlier versions read as today's settings (`store.migrations`), and the refusals of records
no migration can read. The first three tests moved here from tests/training and tests/modeling when the
migrations moved from `TrainConfig.from_stored` into the store."""

import ast
import json
import re
from pathlib import Path

import pytest

from peftviz.errors import ConfigError
from peftviz.run_config import TrainConfig, preset_config
from peftviz.store import migrations
from peftviz.store.migrations import MIGRATIONS, current_settings, stored_config
from peftviz.store.runs import load_run
from peftviz.store.schema import RECORD_FIELDS

ROOT = Path(__file__).resolve().parents[2]

# config.json as the first version wrote it (bff929a, 2026-11-21): one seed for data and training, no
# precision, average_heads a run setting, and the record's own fields beside the settings
FIRST_VERSION = {
    "method": "tiny-attention",
    "method_options": {},
    "label": "",
    "model": "tiny-bert",
    "dataset": "bbc-news",
    "limit": 40,
    "max_length": 32,
    "pooling": "cls",
    "head_dropout": 0.1,
    "epochs": 2,
    "learning_rate": 0.01,
    "weight_decay": 0.01,
    "batch_size": 8,
    "effective_batch_size": 8,
    "warmup_ratio": 0.1,
    "schedule": "linear",
    "max_grad_norm": 1.0,
    "seed": 3,
    "ece_bins": 10,
    "average_heads": True,
    "device": "auto",
    "label_names": ["business", "sport"],
    "parameters": {"total": 10},
    "environment": {"created": "2026-11-21"},
}


def test_stored_configs_from_earlier_versions_still_read():
    config = stored_config(
        {"method": "tiny-attention", "model": "tiny-bert", "seed": 3, "average_heads": True, "parameters": {}}
    )
    assert config.data_seed == 3 and config.method_options == {"average_heads": True}
    with pytest.raises(ConfigError, match="average_heads must be true or false, not 'no'"):
        stored_config({"method": "tiny-attention", "average_heads": "no"})
    with pytest.raises(ConfigError, match="method_options must be a mapping of names to values, not list"):
        stored_config({"method": "tiny-attention", "average_heads": True, "method_options": [1]})
    with pytest.raises(ConfigError, match="config.json holds a list, not an object"):
        stored_config([1])
    with pytest.raises(ConfigError, match=r"TrainConfig has no option\(s\) 'a\\nb', 1, epoch;"):
        stored_config({"method": "lora", "epoch": 3, 1: 2, "a\nb": 3})


def test_runs_stored_before_precisions_read_back_as_fp32():
    record = preset_config("smoke").to_dict()
    del record["precision"], record["gradient_checkpointing"]
    config = stored_config(record)
    assert config.precision == "fp32" and config.gradient_checkpointing is False


def test_a_stored_record_without_a_model_is_refused():
    record = preset_config("smoke").to_dict()
    del record["model"]
    with pytest.raises(ConfigError, match=r"^the run names no model: config.json has no 'model' setting"):
        stored_config(record)


def test_a_record_of_the_first_version_reads_with_every_migration_applied():
    settings = current_settings(FIRST_VERSION)
    assert settings["data_seed"] == 3 and settings["seed"] == 3
    assert settings["precision"] == "fp32"
    assert "average_heads" not in settings and settings["method_options"] == {"average_heads": True}
    assert not set(settings) & set(RECORD_FIELDS)  # label names, counts, environment are no settings
    config = stored_config(FIRST_VERSION)
    assert (config.seed, config.data_seed, config.precision, config.limit) == (3, 3, "fp32", 40)
    assert config.method_config.average_heads is True


def test_a_record_written_today_passes_every_migration_unchanged():
    config = preset_config(
        "smoke", "tiny-attention", seed=5, data_seed=2, precision="bf16", method_options={"average_heads": False}
    )
    record = {**config.to_dict(), "label_names": ["a", "b"], "parameters": {"total": 1}, "attempts": []}
    for migration in MIGRATIONS:
        assert migration(config.to_dict()) == config.to_dict(), migration.__name__
    assert current_settings(record) == config.to_dict()
    assert stored_config(record) == config


def test_a_bad_setting_is_named_before_the_missing_model():
    """The model is asked for after the settings are checked (as from_stored did): a record with both
    problems names its bad setting."""
    with pytest.raises(ConfigError, match="epochs") as caught:
        stored_config({"method": "lora", "epochs": 0})
    assert "no model" not in str(caught.value)
    with pytest.raises(ConfigError, match="^the run names no method$"):
        stored_config({"model": "tiny-bert", "epochs": 0})


def test_the_store_reads_an_old_run_folder_through_the_migrations(tmp_path):
    folder = tmp_path / "runs" / "tiny-attention-2026-11-21"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(FIRST_VERSION))
    run = load_run(folder)
    assert run.status == "incomplete", run.error  # no epoch finished: readable, not corrupt
    assert (run.seed, run.data_seed, run.config.precision) == (3, 3, "fp32")
    assert run.config.method_options == {"average_heads": True} and run.label_names == ["business", "sport"]
    (folder / "config.json").write_text(json.dumps({**FIRST_VERSION, "average_heads": "yes"}))
    corrupt = load_run(folder)
    assert corrupt.status == "corrupt"
    assert corrupt.error == "config.json: average_heads must be true or false, not 'yes'"


def test_each_migration_says_which_change_it_covers():
    """Its docstring names the commit and the date of the change: what a record from before it looks like."""
    for migration in (*MIGRATIONS, migrations.refuse_unreadable, migrations.refuse_without_model):
        doc = migration.__doc__ or ""
        assert re.search(r"\b[0-9a-f]{7}\b", doc) and re.search(r"\b\d{4}-\d{2}-\d{2}\b", doc), migration.__name__


def test_the_run_config_knows_nothing_of_the_store():
    """config -> store -> config was a cycle: the settings module imports nothing under peftviz.store, at any
    depth of its source (a function's import counts), and has no config.json reader left."""
    tree = ast.parse((ROOT / "peftviz" / "run_config.py").read_text())
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert not [name for name in imported if name.startswith("peftviz.store")]
    assert not hasattr(TrainConfig, "from_stored")
