"""`python -m peftviz export RUN DIR`: a run as a folder others can load.

- A run of a method Hugging Face peft has (its class's `peft_type`: every peft-based method, LoRA
  and its variants to LN-tuning and `peft:<TYPE>`; prefix, prompt and P-tuning with layout=peft)
  becomes a peft adapter folder: adapter_config.json (task SEQ_CLS, the base as `portable_base`
  names it) and adapter_model.safetensors, with the head as peft carries it, in `modules_to_save`
  (hf.py). It is written by peft itself: the run's tensors are copied into `get_peft_model` of the
  architecture's AutoModelForSequenceClassification (by name; a prompt encoder as a whole, whose
  output peft saves) and saved with `save_pretrained`, so `PeftModel.from_pretrained` loads it onto
  that classifier. peft saves what its config says to (AdaLoRA: the kept triplets of rank_pattern).
- Any other run (prefix-propagation and its kernel form, tiny-attention, Houlsby, BitFit,
  fine-tuning) becomes params.safetensors, the run's trained tensors.

Both get peftviz.json (the run's config.json and label names: what `import` reads back) and a
model card, README.md (card.py). The folder is built under a temporary name and renamed into place:
an export that fails leaves nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from peftviz.classifier import PeftClassifier
from peftviz.errors import ExchangeError
from peftviz.exchange import card
from peftviz.exchange.hf import (
    classifier_for,
    copy_into,
    encoder_names,
    head_of,
    live_tensors,
    portable_base,
    quiet_peft_wrapping,
)
from peftviz.exchange.sources import MANIFEST
from peftviz.store.runs import Run
from peftviz.store.schema import PARAMS_FILE
from peftviz.training.inference import load_trained

MANIFEST_FORMAT = 1  # of peftviz.json: the run's record and label names, what `import` reads back
PROMPT = "prompt_embeddings"  # what peft calls the prompt-learning tensor it saves


def export_run(run: Run, folder: Path) -> Path:
    """Write `run` into the new folder `folder` (see the module docstring); returns it."""
    if run.status != "complete":
        raise ExchangeError(f"run {run.name} is {run.status}; only a complete run can be exported")
    if not run.has_params:
        raise ExchangeError(
            f"run {run.name} was recorded from another training loop: it holds predictions, no parameters to export"
        )
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ExchangeError(f"{folder} exists and is not an empty folder: choose a new one")
    model, _ = load_trained(run, device="cpu")  # also refuses a run whose tensors do not fit its model
    building = folder.parent / f".{folder.name}.exporting"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    try:
        if model.method.peft_type:
            _write_adapter(run, model, building)
        else:
            save_file(run.params(), str(building / PARAMS_FILE), metadata={"format": "pt"})
        manifest = {"format": MANIFEST_FORMAT, "run": run.name, "config": run.record, "label_names": run.label_names}
        (building / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
        (building / "README.md").write_text(card.model_card(run, peft=bool(model.method.peft_type)))
        _give_usual_mode(building, like=building / MANIFEST)
        if folder.exists():
            folder.rmdir()
        building.rename(folder)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return folder


def peft_adapter_model(model: PeftClassifier, label_names: list[str], base: str):
    """The run's model as peft's PeftModel on the architecture's AutoModelForSequenceClassification:
    every tensor copied from `model`, so its logits are peftviz's (checked by the tests)."""
    from peft import PEFT_TYPE_TO_CONFIG_MAPPING

    if model.pooling != "cls":
        raise ExchangeError(
            f"the run pools the mean of the text (pooling={model.pooling}); Hugging Face classifiers read the first "
            "token, so it has no peft form: train it with --pooling cls to export it as a peft adapter"
        )
    method, encoder = model.method, model.encoder
    head = head_of(encoder.config.model_type)
    config_class = PEFT_TYPE_TO_CONFIG_MAPPING[method.peft_type]
    settings = method.peft_config()  # a ConfigError where the run's options have no exact peft form
    classifier = classifier_for(encoder.config, label_names)
    if settings.get("rank_pattern") and method.peft_type == "ADALORA":  # named in the encoder: in the classifier
        settings["rank_pattern"] = {
            f"{classifier.base_model_prefix}.{key}": kept for key, kept in settings["rank_pattern"].items()
        }
    peft_config = config_class(task_type="SEQ_CLS", modules_to_save=list(head.modules_to_save), **settings)
    peft_model = _wrapped(classifier, peft_config, base)
    live = live_tensors(peft_model.get_base_model())
    ours = model.state_dict()
    copy_into(live, encoder.state_dict(), encoder_names(encoder, classifier))  # the base and injected tensors
    copy_into(live, ours, head.names)
    prompt = method.peft_prompt()  # prompt learning: (j, 2·L·D) prefixes or an (n, D) prompt
    if isinstance(getattr(method, "prompt_encoder", None), torch.nn.Module):  # made by peft's own prompt encoder
        # its whole state (embeddings and MLP): peft saves what the encoder makes of its embeddings
        peft_encoder = peft_model.prompt_encoder["default"]
        copy_into(
            peft_encoder.state_dict(keep_vars=True),
            method.prompt_encoder.state_dict(),
            {name: name for name in method.prompt_encoder.state_dict()},
        )
    elif prompt is not None:
        copy_into({PROMPT: peft_model.prompt_encoder["default"].embedding.weight}, {PROMPT: prompt}, {PROMPT: PROMPT})
    return peft_model


def _wrapped(classifier, peft_config, base: str):
    """peft's get_peft_model, its config then made to say what the adapter is: `base`, each saved module once."""
    from peft import get_peft_model

    with quiet_peft_wrapping():
        peft_model = get_peft_model(classifier, peft_config).eval()
    config = peft_model.peft_config["default"]
    # named after wrapping: get_peft_model names the base after the classifier (None: built from config) and warns
    # that a name given before was "renamed"
    config.base_model_name_or_path = base
    # peft appends the heads it saves by itself ("classifier", "score") to ours, twice for prompt learning
    config.modules_to_save = list(dict.fromkeys(config.modules_to_save))
    return peft_model


def _write_adapter(run: Run, model: PeftClassifier, folder: Path) -> None:
    base = portable_base(run.config.model)
    peft_model = peft_adapter_model(model, run.label_names, base)
    # the embedding layers never train here: no need for peft to fetch the base's config to decide so
    peft_model.save_pretrained(str(folder), safe_serialization=True, save_embedding_layers=False)


def _give_usual_mode(folder: Path, like: Path) -> None:
    """Give every file in `folder` the mode of `like`, a file Python created, so the umask's (0644 under umask
    022): safetensors writes its files through a private temporary file, mode 0600, which an export (a
    folder to share) should not keep. The run store's own files are left as they are."""
    mode = like.stat().st_mode & 0o777
    for file in folder.iterdir():
        if file.is_file() and not file.is_symlink():
            file.chmod(mode)
