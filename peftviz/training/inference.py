"""Running a classifier on data, and rebuilding a stored run's model: what the trainer, the analyses
and the app share, without the trainer.

    tokenize -> make_loader (collate pads each batch) -> predict -> evaluation_metrics
    run_data(run), load_trained(run): the data and the model of a stored run (`rebuild`: of any config)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch.utils.data import DataLoader

from peftviz.calibration.estimators import point_estimates
from peftviz.classifier import PeftClassifier, build_classifier
from peftviz.data.loading import load_data
from peftviz.data.text_data import TextData
from peftviz.errors import RunError
from peftviz.modeling.backbones import load_encoder
from peftviz.run_config import TrainConfig
from peftviz.store.runs import Run


def pick_device(spec: str = "auto") -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec)


def tokenize(split, tokenizer, max_length: int) -> list[dict]:
    """A `datasets` split -> list of {"input_ids": [...], "label": int}, truncated to max_length."""
    columns = split.to_dict()  # plain lists (datasets 5 returns lazy Column objects)
    encoded = tokenizer(columns["text"], truncation=True, max_length=max_length)
    return [{"input_ids": ids, "label": label} for ids, label in zip(encoded["input_ids"], columns["label"])]


def collate(examples: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest example: input_ids and attention_mask (B, T), labels (B,)."""
    T = max(len(e["input_ids"]) for e in examples)
    ids = torch.full((len(examples), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), T), dtype=torch.long)
    for row, example in enumerate(examples):
        n = len(example["input_ids"])
        ids[row, :n] = torch.tensor(example["input_ids"])
        mask[row, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([e["label"] for e in examples])}


def make_loader(examples: list[dict], batch_size: int, pad_id: int, shuffle: bool = False, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        examples, batch_size=batch_size, shuffle=shuffle, generator=generator, collate_fn=lambda b: collate(b, pad_id)
    )


@torch.no_grad()
def predict(model: PeftClassifier, loader, device: torch.device, gather=None) -> tuple[np.ndarray, np.ndarray]:
    """Class probabilities (N, C) float32 and labels (N,) int64 over a loader, in order.

    gather: each batch's (probs, labels) -> those of every process, in data-parallel training
    (`Engine.predict`); probabilities are float32 whatever precision the forward ran in."""
    model.eval()
    probs, labels = [], []
    for batch in loader:
        logits = model(batch["input_ids"].to(device), batch["attention_mask"].to(device)).logits
        batch_probs, batch_labels = logits.float().softmax(-1), batch["labels"].to(device)  # (b, C), (b,)
        if gather is not None:
            batch_probs, batch_labels = gather((batch_probs, batch_labels))
        probs.append(batch_probs.cpu().numpy())
        labels.append(batch_labels.cpu().numpy())
    return np.concatenate(probs).astype(np.float32), np.concatenate(labels).astype(np.int64)


# A line of metrics.jsonl: each name, in this order, and the registry's estimator that computes it, so the
# numbers written per epoch and those the pages show come from one piece of code. micro_f1 is accuracy: with
# one label per example every wrong prediction is one false positive and one false negative, so micro
# precision = recall = F1 = correct / N (sklearn's micro F1 bit for bit).
EPOCH_METRICS = {
    "accuracy": "accuracy",
    "ece": "ece",
    "mce": "mce",
    "ace": "ace",
    "classwise_ece": "classwise_ece",
    "brier": "brier",
    "nll": "nll",
    "micro_f1": "accuracy",
    "macro_f1": "macro_f1",
}


def evaluation_metrics(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> dict[str, float]:
    """`EPOCH_METRICS` on all predictions (the registry's point values; binned ones on `n_bins` equal-width
    bins), and the number of examples n."""
    values = point_estimates(probs, labels, n_bins, "width", metrics=list(dict.fromkeys(EPOCH_METRICS.values())))
    return {**{name: values[estimator] for name, estimator in EPOCH_METRICS.items()}, "n": len(labels)}


def run_data(run: Run) -> TextData:
    """The data a run trained on: the same dataset, data seed (so the same split) and limit."""
    return load_data(run.config.dataset, seed=run.data_seed, limit=run.config.limit)


def validation_loader(run: Run, tokenizer):
    """The run's validation split, tokenized and batched as in training."""
    examples = tokenize(run_data(run).splits["validation"], tokenizer, run.config.max_length)
    return make_loader(examples, run.config.batch_size, tokenizer.pad_token_id)


def load_trained(
    run: Run, device: str = "auto", method: str | None = None, optional: frozenset[str] = frozenset()
) -> tuple[PeftClassifier, object]:
    """Rebuild a run's model from its config and params.safetensors: (model in eval mode, tokenizer).

    method: rebuild under another method whose parameters have the same names (prefix-propagation's
    load into the kernel form for the α sweep). optional: tensors the run may lack.
    """
    if run.config is None:  # a corrupt run: its settings cannot be read (e.g. its config.json lost the model)
        raise RunError(f"run {run.name}: {run.error}")
    model, tokenizer = rebuild(
        run.config, len(run.label_names), run.params, f"run {run.name}: params.safetensors", method, optional
    )
    return model.to(pick_device(device)).eval(), tokenizer


def rebuild(
    config: TrainConfig,
    n_labels: int,
    trained: Callable[[], dict],
    where: str,
    method: str | None = None,
    optional: frozenset[str] = frozenset(),
) -> tuple[PeftClassifier, object]:
    """`config`'s classifier with the tensors `trained()` reads (after the encoder has loaded): (model, tokenizer).
    A run's or an export's; `where` names the tensors' file in errors."""
    encoder, tokenizer = load_encoder(config.model)
    model = build_classifier(
        encoder, method or config.method, n_labels, config.setting_options, config.pooling, config.head_dropout
    )
    load_params(model, trained(), where, optional)
    return model, tokenizer


def load_params(model: PeftClassifier, state: dict, where: str, optional: frozenset[str] = frozenset()) -> None:
    """Load trained tensors into `model`; RunError (naming `where`) if any it trains is missing or of
    another shape (the tensors were trained on another encoder or with other options)."""
    missing = set(model.trainable_state_dict()) - set(state) - optional
    if missing:
        raise RunError(f"{where} lacks {len(missing)} tensors, e.g. {min(missing)}")
    expected = model.state_dict()
    wrong = [name for name, tensor in state.items() if name in expected and tensor.shape != expected[name].shape]
    if wrong:
        name = wrong[0]
        raise RunError(
            f"{where}: {name} has shape {tuple(state[name].shape)}, the model's is {tuple(expected[name].shape)}"
        )
    model.load_state_dict(state, strict=False)
