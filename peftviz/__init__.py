"""peftviz: see how parameter-efficient tuning changes a transformer.

The package imports lazily: `import peftviz`, `import peftviz.calibration.metrics` and `python -m peftviz
--help` load no torch. The names below load their module on first use.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "DEFAULT_MODEL": "peftviz.modeling.backbones",
    "ModelLoadError": "peftviz.errors",
    "PeftvizError": "peftviz.errors",
    "load_encoder": "peftviz.modeling.backbones",
    "tiny_encoder": "peftviz.modeling.backbones",
    "METHODS": "peftviz.methods",
    "make_method": "peftviz.methods",
    "ClassifierOutput": "peftviz.classifier",
    "PeftClassifier": "peftviz.classifier",
    "build_classifier": "peftviz.classifier",
}
__all__ = [  # noqa: RUF022  (the order of _LAZY above)
    "DEFAULT_MODEL",
    "ModelLoadError",
    "PeftvizError",
    "load_encoder",
    "tiny_encoder",
    "METHODS",
    "make_method",
    "ClassifierOutput",
    "PeftClassifier",
    "build_classifier",
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'peftviz' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
