"""Training with a validation evaluation after every epoch, written to the run store as it goes.

AdamW, linear warmup then linear (or cosine) decay, gradient accumulation to an effective batch
size, gradient clipping, and the best epoch chosen by validation micro-F1. The device is CUDA
when present (config.device="auto"). Progress goes to a callback as `Progress` events; the CLI
draws a terminal bar from them and the app a progress bar.
"""

from __future__ import annotations

import math
import platform
import random
import time
from dataclasses import dataclass, replace
from importlib.metadata import version
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import f1_score
from torch.utils.data import DataLoader
from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup

from peftviz import calibration
from peftviz.backbones import load_encoder
from peftviz.config import TrainConfig
from peftviz.data import TextData, load_data
from peftviz.model import PeftClassifier, build_classifier
from peftviz.runs import Run, RunWriter, load_run, store_dir


class TrainingError(RuntimeError):
    """Training stopped (e.g. a non-finite loss); finished epochs are kept in the run folder."""


@dataclass
class Progress:
    run: str  # the run's display name
    phase: str  # "train", "evaluate" or "done"
    epoch: int
    epochs: int
    batch: int = 0  # batches done in this epoch
    batches: int = 0  # batches per epoch
    loss: float | None = None  # running mean training loss of this epoch


ProgressCallback = Callable[[Progress], None]


def pick_device(spec: str = "auto") -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def environment(device: torch.device) -> dict:
    packages = ("torch", "transformers", "datasets", "numpy", "scikit-learn", "netcal")
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {name: version(name) for name in packages},
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch_threads": torch.get_num_threads(),
    }


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
def predict(model: PeftClassifier, loader, device: torch.device) -> tuple[np.ndarray, np.ndarray]:
    """Class probabilities (N, C) float32 and labels (N,) int64 over a loader, in order."""
    model.eval()
    probs, labels = [], []
    for batch in loader:
        logits = model(batch["input_ids"].to(device), batch["attention_mask"].to(device)).logits
        probs.append(logits.float().softmax(-1).cpu().numpy())
        labels.append(batch["labels"].numpy())
    return np.concatenate(probs).astype(np.float32), np.concatenate(labels).astype(np.int64)


def evaluation_metrics(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> dict[str, float]:
    """Accuracy, micro/macro F1 and the calibration summary (ECE with `n_bins` equal-width bins)."""
    predicted = probs.argmax(1)
    return {
        **calibration.summary(probs, labels, n_bins=n_bins),
        "micro_f1": float(f1_score(labels, predicted, average="micro")),
        "macro_f1": float(f1_score(labels, predicted, average="macro")),
        "n": int(len(labels)),
    }


def make_optimizer(model: PeftClassifier, config: TrainConfig, total_steps: int):
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)  # no decay on biases, LayerNorm, log α
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.learning_rate,
    )
    warmup = int(config.warmup_ratio * total_steps)
    schedule = get_linear_schedule_with_warmup if config.schedule == "linear" else get_cosine_schedule_with_warmup
    return optimizer, schedule(optimizer, warmup, total_steps)


class Trainer:
    """Trains one config and writes its run folder."""

    def __init__(self, config: TrainConfig, runs_dir: Path | None = None, progress: ProgressCallback | None = None):
        self.config = config
        self.runs_dir = Path(runs_dir or store_dir())
        self.progress = progress or (lambda event: None)
        self.device = pick_device(config.device)

    def run(self, data: TextData | None = None) -> Run:
        config = self.config
        seed_everything(config.seed)
        data = data or load_data(config.dataset, seed=config.data_seed, limit=config.limit)
        encoder, tokenizer = load_encoder(config.model)
        model = build_classifier(
            encoder, config.method, data.num_labels, config.method_options, config.pooling, config.head_dropout
        ).to(self.device)
        pad_id = tokenizer.pad_token_id
        splits = {name: tokenize(data.splits[name], tokenizer, config.max_length) for name in data.splits}
        train_loader = make_loader(splits["train"], config.batch_size, pad_id, shuffle=True, seed=config.seed)
        eval_loaders = {name: make_loader(splits[name], config.batch_size, pad_id) for name in ("validation", "test")}

        record = {**config.to_dict(), "label_names": data.label_names, "parameters": model.parameter_counts()}
        writer = RunWriter.create(self.runs_dir, record, environment(self.device))
        try:
            best_state = self._train_epochs(model, train_loader, eval_loaders["validation"], writer)
            self._finish(model, best_state, eval_loaders, writer)
        except TrainingError as err:
            writer.fail(str(err))
            raise
        return load_run(writer.path)

    def _train_epochs(self, model, train_loader, val_loader, writer: RunWriter) -> dict:
        config = self.config
        steps_per_epoch = math.ceil(len(train_loader) / config.accumulation_steps)
        optimizer, scheduler = make_optimizer(model, config, steps_per_epoch * config.epochs)
        best_f1, best_state = -1.0, {}
        for epoch in range(1, config.epochs + 1):
            started = time.perf_counter()
            train_loss = self._train_one_epoch(model, train_loader, optimizer, scheduler, epoch)
            self.progress(Progress(config.run_title, "evaluate", epoch, config.epochs))
            probs, labels = predict(model, val_loader, self.device)
            metrics = evaluation_metrics(probs, labels, config.ece_bins)
            writer.write_epoch(
                {"epoch": epoch, "train_loss": train_loss, **metrics, "seconds": time.perf_counter() - started},
                probs,
                labels,
            )
            if metrics["micro_f1"] > best_f1:
                best_f1 = metrics["micro_f1"]
                best_state = {k: v.detach().cpu().clone() for k, v in model.trainable_state_dict().items()}
                writer.write_params(best_state)
        return best_state

    def _train_one_epoch(self, model, loader, optimizer, scheduler, epoch: int) -> float:
        config = self.config
        model.train()
        total, seen = 0.0, 0
        optimizer.zero_grad(set_to_none=True)
        for index, batch in enumerate(loader, start=1):
            batch = {k: v.to(self.device) for k, v in batch.items()}
            logits = model(batch["input_ids"], batch["attention_mask"]).logits
            loss = F.cross_entropy(logits.float(), batch["labels"])
            if not torch.isfinite(loss):
                raise TrainingError(
                    f"loss became {loss.item()} in epoch {epoch}, batch {index}; stopped, keeping the "
                    f"{epoch - 1} finished epoch(s). A lower learning rate usually helps."
                )
            (loss / config.accumulation_steps).backward()
            if index % config.accumulation_steps == 0 or index == len(loader):
                if config.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
            total, seen = total + loss.item() * len(batch["labels"]), seen + len(batch["labels"])
            self.progress(Progress(config.run_title, "train", epoch, config.epochs, index, len(loader), total / seen))
        return total / seen

    def _finish(self, model: PeftClassifier, best_state: dict, eval_loaders: dict, writer: RunWriter) -> None:
        """Test metrics of the best epoch; for averaged tiny-attention, metrics after averaging too."""
        config = self.config
        model.load_state_dict(best_state, strict=False)
        summary = {"test": self._evaluate_named(model, eval_loaders["test"], "test", writer)}
        if config.average_heads and config.method == "tiny-attention" and model.method.config.n_heads > 1:
            model.method.average_heads_()
            summary["averaged"] = {
                "validation": self._evaluate_named(model, eval_loaders["validation"], "averaged", writer),
                "test": self._evaluate_named(model, eval_loaders["test"], "averaged_test", writer),
                "parameters": model.parameter_counts(),
            }
        writer.finish(summary)
        self.progress(Progress(config.run_title, "done", config.epochs, config.epochs))

    def _evaluate_named(self, model, loader, name: str, writer: RunWriter) -> dict:
        probs, labels = predict(model, loader, self.device)
        writer.write_predictions(name, probs, labels)
        return evaluation_metrics(probs, labels, self.config.ece_bins)


def train(config: TrainConfig, runs_dir: Path | None = None, progress: ProgressCallback | None = None) -> Run:
    """Train one config; returns the finished run."""
    return Trainer(config, runs_dir, progress).run()


def compare(
    configs: list[TrainConfig], runs_dir: Path | None = None, progress: ProgressCallback | None = None
) -> list[Run]:
    """Train configs in turn on the same data and split (loaded once).

    A multi-head tiny-attention config without `init_from` starts from the last one-head
    tiny-attention run of the comparison, as the paper initialises its 4-head adapters.
    """
    first = configs[0]
    data = load_data(first.dataset, seed=first.data_seed, limit=first.limit)
    runs: list[Run] = []
    one_head: Run | None = None
    for config in configs:
        options = config.method_options
        if config.method == "tiny-attention" and options.get("n_heads", 1) > 1 and one_head and not options.get("init_from"):
            config = replace(config, method_options={**options, "init_from": str(one_head.params_path)})
        run = Trainer(config, runs_dir, progress).run(data)
        if config.method == "tiny-attention" and options.get("n_heads", 1) == 1:
            one_head = run
        runs.append(run)
    return runs


def run_data(run: Run) -> TextData:
    """The data a run trained on: the same dataset, data seed (so the same split) and limit."""
    config = run.config
    return load_data(config["dataset"], seed=run.data_seed, limit=config.get("limit"))


def load_trained(
    run: Run, device: str = "auto", method: str | None = None, optional: frozenset[str] = frozenset()
) -> tuple[PeftClassifier, object]:
    """Rebuild a run's model from its config and params.safetensors: (model in eval mode, tokenizer).

    method: rebuild under another method whose parameters have the same names (prefix-propagation's
    load into kernel-prefix-propagation for the α sweep). optional: tensors the run may lack.
    """
    config = run.config
    encoder, tokenizer = load_encoder(config["model"])
    options = {k: v for k, v in config["method_options"].items() if k != "init_from"}  # the params hold the result
    model = build_classifier(
        encoder, method or config["method"], len(config["label_names"]), options, config["pooling"], config["head_dropout"]
    )
    state = run.params()
    missing = set(model.trainable_state_dict()) - set(state) - optional
    if missing:
        raise ValueError(f"run {run.name}: params.safetensors lacks {len(missing)} tensors, e.g. {sorted(missing)[0]}")
    model.load_state_dict(state, strict=False)
    return model.to(pick_device(device)).eval(), tokenizer
