"""peftviz: see how parameter-efficient tuning changes a transformer."""

from peftviz import attention  # noqa: F401  (registers the "peftviz" attention implementation)
from peftviz.backbones import DEFAULT_MODEL, ModelLoadError, load_encoder, tiny_encoder
from peftviz.methods import METHODS, make_method
from peftviz.model import ClassifierOutput, PeftClassifier, build_classifier

__all__ = [
    "DEFAULT_MODEL",
    "METHODS",
    "ClassifierOutput",
    "ModelLoadError",
    "PeftClassifier",
    "build_classifier",
    "load_encoder",
    "make_method",
    "tiny_encoder",
]
