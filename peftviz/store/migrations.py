"""config.json of any version read as today's settings: the store owns its format, so it owns its past.

A run folder keeps the config.json it was written with; nothing on disk is ever rewritten. Reading it,
the store (`store.runs.load_run`, and `stored_config` for any other reader) turns the record into
today's settings, one change at a time, and only then hands them to `TrainConfig.from_dict`, which
checks every setting as it checks the CLI's and the app's:

    record --refuse_unreadable--> settings only --MIGRATIONS, in order--> current settings
           --TrainConfig.from_dict--> TrainConfig --refuse_without_model--> the run's config

    change (its commit, date)                          a record from before it
    data_seed apart from seed (928764d, 2026-11-22)    has no data_seed: seed also seeded its split
    precision a setting (107a4ed, 2026-11-22)          has no precision: it trained in float32
    average_heads a method option (ee62ed6, 2026-11-22)  holds average_heads among the run settings
    method required (876c343, 2026-11-22)              none: a record without a method is refused
    model required (c713592, 2026-11-24)               none: a record without a model is refused

A migration takes the settings as they stood before its change and returns them as they stand after
it; it fills in only what the record lacks, so a record written after the change passes unchanged.
A new change to the format adds one function at the end of MIGRATIONS. Refusals are one-line
`ConfigError`s, the same words users have always seen. This module imports no torch.
"""

from __future__ import annotations

from peftviz.errors import ConfigError
from peftviz.options import shown, with_article
from peftviz.run_config import TrainConfig
from peftviz.store.schema import RECORD_FIELDS


def refuse_unreadable(record) -> dict:
    """Every version: config.json is an object naming its method (876c343, 2026-11-22: no default method
    stands in for a run's own, whose parameters would not fit it). Returns the settings without the
    record's other fields (`schema.RECORD_FIELDS`: label names, parameter counts, ...)."""
    if not isinstance(record, dict):
        raise ConfigError(f"config.json holds {with_article(type(record).__name__)}, not an object")
    if "method" not in record:
        raise ConfigError("the run names no method")
    return {key: value for key, value in record.items() if key not in RECORD_FIELDS}


def data_seed_from_seed(settings: dict) -> dict:
    """Before 928764d (2026-11-22) one seed set both the training and the data split: a record without
    `data_seed` split its data by `seed`."""
    return {"data_seed": settings.get("seed", 0), **settings}


def precision_fp32(settings: dict) -> dict:
    """Before 107a4ed (2026-11-22) precision was no setting: every run trained in float32."""
    return {"precision": "fp32", **settings}


def average_heads_into_method_options(settings: dict) -> dict:
    """Before ee62ed6 (2026-11-22) `average_heads` was a run setting; it is now the method's option. A true
    value moves into `method_options` (where those are an object: from_dict refuses any other); false,
    the default, is dropped."""
    settings = dict(settings)
    average_heads = settings.pop("average_heads", False)
    if not isinstance(average_heads, bool):
        raise ConfigError(f"average_heads must be true or false, not {shown(average_heads)}")
    if average_heads and isinstance(settings.get("method_options", {}), dict):
        settings["method_options"] = {**settings.get("method_options", {}), "average_heads": True}
    return settings


MIGRATIONS = (data_seed_from_seed, precision_fp32, average_heads_into_method_options)  # oldest change first


def current_settings(record) -> dict:
    """config.json's settings as today's `TrainConfig.from_dict` takes them (not yet checked)."""
    settings = refuse_unreadable(record)
    for migration in MIGRATIONS:
        settings = migration(settings)
    return settings


def refuse_without_model(record: dict) -> None:
    """Since c713592 (2026-11-24): every run stored its model, and a record without one is refused rather
    than given the default, whose parameters the run's would not fit. Asked after the settings are
    checked, so that a record's bad setting is named first."""
    if "model" not in record:
        raise ConfigError(
            "the run names no model: config.json has no 'model' setting, and no default can stand in "
            "(the run's parameters fit only the encoder it trained)"
        )


def stored_config(record) -> TrainConfig:
    """config.json (a run's, or an export's peftviz.json config) -> its TrainConfig; ConfigError names what
    is wrong in one line."""
    config = TrainConfig.from_dict(current_settings(record))
    refuse_without_model(record)
    return config
