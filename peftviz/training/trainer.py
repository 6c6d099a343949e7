"""Training with a validation evaluation after every epoch, written to the run store as it goes.

AdamW, linear warmup then linear (or cosine) decay, gradient accumulation to an effective batch
size, gradient clipping, and the best epoch chosen by validation micro-F1. How the steps run
(device, precision, processes) is the `Engine`'s (engine.py, Hugging Face Accelerate): CUDA when
present, bf16 there by default, and data-parallel under `accelerate launch`, where only the main
process writes and the others keep the metrics in memory (`FollowerWriter`). Progress goes to a
callback as `Progress` events; the CLI draws a terminal bar from them and the app a progress bar.
"""

from __future__ import annotations

import math
import platform
import random
import time
from dataclasses import dataclass, replace
from datetime import datetime
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup

from peftviz.classifier import PeftClassifier, build_classifier
from peftviz.data.loading import load_data
from peftviz.data.text_data import TextData
from peftviz.data.uploads import data_sha256
from peftviz.errors import RunError, TrainingError
from peftviz.modeling.backbones import load_encoder
from peftviz.modeling.compiled import compile_layers
from peftviz.paths import store_dir
from peftviz.run_config import TrainConfig
from peftviz.store.runs import Run, best_epoch_of, load_run, read_metrics_lines
from peftviz.store.writer import FollowerWriter, RunWriter
from peftviz.training import checkpoint
from peftviz.training.engine import Engine
from peftviz.training.inference import evaluation_metrics, make_loader, tokenize
from peftviz.training.progress import Progress, ProgressCallback

__all__ = ["Trainer", "resume", "train"]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def created_now() -> str:
    """The time to the microsecond, with its UTC offset. The store lists runs oldest first by it, and
    small runs are made several to a second (to the second, ties went by folder name)."""
    return datetime.now().astimezone().isoformat(timespec="microseconds")


def attempt(sweep_engine: str, from_epoch: int) -> dict:
    """Who trains a run now: the sweep's engine ("local" or "ray"), this machine, and the epoch it starts from."""
    return {"engine": sweep_engine, "node": platform.node(), "started": created_now(), "from_epoch": from_epoch}


def environment(device: torch.device, processes: int = 1, backend: str | None = None) -> dict:
    """What config.json records of where a run was made: time, Python, packages, device, processes."""
    packages = ("torch", "transformers", "accelerate", "datasets", "numpy", "scikit-learn", "netcal", "peft")
    return {
        "created": created_now(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {name: version(name) for name in packages},
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "processes": processes,
        "distributed_backend": backend,
        "torch_threads": torch.get_num_threads(),
    }


def parameter_groups(model: PeftClassifier, config: TrainConfig) -> list[dict]:
    """AdamW's groups: decayed or not, at the rate the method gives each parameter (LoRA+: its B matrices' own)."""
    method, groups = model.method, {}
    kept = method.no_weight_decay  # e.g. (IA)³'s scalings, which peft stores as (D, 1) matrices
    for name, p in model.named_parameters():
        if p.requires_grad:
            # no decay on biases, LayerNorm, log α, nor on what the method says is not a weight
            decays = not (p.ndim < 2 or any(part in name for part in kept))
            scale = method.learning_rate_scale(name.removeprefix("encoder."))
            groups.setdefault((decays, scale), []).append(p)
    return [
        {"params": params, "weight_decay": config.weight_decay if decays else 0.0, "lr": config.learning_rate * scale}
        for (decays, scale), params in sorted(groups.items(), key=lambda item: (not item[0][0], item[0][1]))
    ]


def make_optimizer(model: PeftClassifier, config: TrainConfig, total_steps: int):
    model.method.schedule(total_steps)  # AdaLoRA's budget schedule; a ConfigError before any folder exists
    optimizer = torch.optim.AdamW(
        parameter_groups(model, config),
        lr=config.learning_rate,
        # one fused kernel per step instead of a loop over parameters: fine-tuning's step on 2 CPU cores
        # from 70 to 12 ms (benchmarks/profile_training.py); parameters differ from the loop's by ~1e-7
        fused=True,
    )
    warmup = int(config.warmup_ratio * total_steps)
    schedule = get_linear_schedule_with_warmup if config.schedule == "linear" else get_cosine_schedule_with_warmup
    return optimizer, schedule(optimizer, warmup, total_steps)


@dataclass
class Prepared:
    """What training needs before it writes anything: the model and the tokenized splits; once
    `Engine.prepare`d, also the runner (the model as the engine runs it), optimizer and scheduler."""

    model: PeftClassifier  # its state dicts and its method; shares its parameters with the runner
    train_loader: DataLoader
    eval_loaders: dict[str, DataLoader]  # "validation", "test"
    recorded: dict  # what config.json records besides the settings
    generator: torch.Generator  # the training loader's: the batch order the resume state keeps
    runner: torch.nn.Module | None = None  # the model wrapped for data parallelism (itself in one process)
    optimizer: torch.optim.Optimizer | None = None
    scheduler: object = None
    scaler: torch.amp.GradScaler | None = None  # fp16's loss scaler (Accelerate's), which the resume state keeps


class Trainer:
    """Trains one config and writes its run folder; or continues a killed run (`resume`)."""

    def __init__(
        self,
        config: TrainConfig,
        runs_dir: Path | None = None,
        progress: ProgressCallback | None = None,
        sweep_engine: str = "local",
        repeat_of: str | None = None,
    ):
        self.engine = Engine(config)  # refuses a device or precision this machine lacks, before anything loads
        self.config = replace(config, precision=self.engine.precision)  # the run records what it trained in
        self.runs_dir = Path(runs_dir or store_dir())
        self.sweep_engine = sweep_engine  # recorded in the run's attempts: which engine and node trained it
        self.repeat_of = repeat_of  # the folder of the run of this key and seed it repeats (a forced train)
        self.progress = progress if progress and self.engine.is_main else (lambda event: None)

    def run(self, data: TextData | None = None) -> Run:
        prepared = self._prepare(data)  # a refused setting or model raises here, before any folder exists
        writer = None
        if self.engine.is_main:
            writer = RunWriter.create(self.runs_dir, self.config, prepared.recorded)
        path = self.engine.share(writer.path if writer else None)
        return self._train(prepared, writer or FollowerWriter(path), start=0)

    def resume(self, run: Run) -> Run:
        """Continue `run` from its last finished epoch, as if it had never stopped."""
        prepared = self._prepare(None)
        writer_class = RunWriter if self.engine.is_main else FollowerWriter
        writer = writer_class(run.path, read_metrics_lines(run.path))
        start = self._restore(run, prepared, writer)
        writer.add_attempt(attempt(self.sweep_engine, start))
        return self._train(prepared, writer, start)

    def _prepare(self, data: TextData | None) -> Prepared:
        config = self.config
        seed_everything(config.seed)
        data = data or load_data(config.dataset, seed=config.data_seed, limit=config.limit)
        encoder, tokenizer = load_encoder(config.model)
        model = build_classifier(
            encoder,
            config.method,
            data.num_labels,
            config.method_options,
            config.pooling,
            config.head_dropout,
            max_length=config.max_length,  # checked against the encoder's positions before any folder exists
        ).to(self.engine.device)
        self.engine.hold_frozen(model)  # bf16/fp16: autocast no longer casts the frozen weights each forward
        if config.gradient_checkpointing:
            model.enable_gradient_checkpointing()
        model.set_local_attention(config.local_attention)  # a ConfigError for flex on an encoder without windows
        if config.compile_layers:
            compile_layers(model.encoder)
        pad_id = tokenizer.pad_token_id
        splits = {name: tokenize(data.splits[name], tokenizer, config.max_length) for name in data.splits}
        recorded = {
            "label_names": data.label_names,
            "parameters": model.parameter_counts(),
            "environment": environment(self.engine.device, self.engine.processes, self.engine.backend),
            "data_sha256": data_sha256(config.dataset),  # a page can tell when the data changed since
            "attempts": [attempt(self.sweep_engine, 0)],
        } | ({"repeat_of": self.repeat_of} if self.repeat_of else {})
        train_loader = make_loader(splits["train"], config.batch_size, pad_id, shuffle=True, seed=config.seed)
        eval_loaders = {name: make_loader(splits[name], config.batch_size, pad_id) for name in ("validation", "test")}
        generator = train_loader.generator  # the engine's loader draws its batch order from this one
        steps_per_epoch = math.ceil(len(train_loader) / config.accumulation_steps)
        optimizer, scheduler = make_optimizer(model, config, steps_per_epoch * config.epochs)
        runner, optimizer, scheduler, train_loader, eval_loaders = self.engine.prepare(
            model, optimizer, scheduler, train_loader, eval_loaders
        )
        scaler = self.engine.accelerator.scaler  # None but under fp16
        return Prepared(model, train_loader, eval_loaders, recorded, generator, runner, optimizer, scheduler, scaler)

    def _restore(self, run: Run, prepared: Prepared, writer: RunWriter) -> int:
        """Load the resume state; drop the metrics lines after it; returns the epoch to continue from.

        The state is written after an epoch's metrics line and before its parameters, so it holds the
        last line's epoch or the one before (that line is then trained again: the same result). If
        the kill came before a new best's parameters, the state's own are that epoch's: stored now.
        """
        if not (run.path / checkpoint.FILE).exists():  # killed during the first epoch
            writer.keep_epochs(0)
            return 0
        epoch, tensors, metadata = checkpoint.read_state(run.path / checkpoint.FILE)
        if not len(writer.metrics) - 1 <= epoch <= len(writer.metrics):
            raise RunError(
                f"run {run.name}: {checkpoint.FILE} holds epoch {epoch}, metrics.jsonl {len(writer.metrics)}"
            )
        checkpoint.restore(tensors, metadata, prepared)
        writer.keep_epochs(epoch)
        if best_epoch_of(writer.metrics) == epoch and run.params_epoch != epoch:
            writer.write_params(checkpoint.model_tensors(tensors), epoch)
        return epoch

    def _train(self, prepared: Prepared, writer: RunWriter, start: int) -> Run:
        try:
            self._train_epochs(prepared, writer, start)
            self._finish(prepared, writer)
        except TrainingError as err:
            writer.fail(str(err))
            raise
        finally:  # any other error (an interrupt, a full disk): the run stops saying "training"
            writer.close()
        self.engine.wait()  # the main process has written the summary
        return load_run(writer.path)

    def _train_epochs(self, prepared: Prepared, writer: RunWriter, start: int) -> None:
        """Epochs start+1 .. epochs. Each is written as RunWriter documents: predictions, metrics line,
        resume state, then the parameters if it is the new best."""
        config, model = self.config, prepared.model
        best_f1 = max((m["micro_f1"] for m in writer.metrics), default=-1.0)
        for epoch in range(start + 1, config.epochs + 1):
            started = time.perf_counter()
            train_loss = self._train_one_epoch(prepared, epoch)
            self.progress(Progress(config.run_title, "evaluate", epoch, config.epochs))
            probs, labels = self.engine.predict(model, prepared.eval_loaders["validation"])
            metrics = evaluation_metrics(probs, labels, config.ece_bins)
            seconds = time.perf_counter() - started
            writer.write_epoch({"epoch": epoch, "train_loss": train_loss, **metrics, "seconds": seconds}, probs, labels)
            writer.write_resume(*checkpoint.training_state(epoch, prepared))
            if metrics["micro_f1"] > best_f1:
                best_f1 = metrics["micro_f1"]
                writer.write_params(model.trainable_state_dict(), epoch)

    def _train_one_epoch(self, prepared: Prepared, epoch: int) -> float:
        """One pass over the training split; returns its mean loss (over every process's examples)."""
        config, engine, runner, optimizer = self.config, self.engine, prepared.runner, prepared.optimizer
        loader = prepared.train_loader
        steps_done = (epoch - 1) * math.ceil(len(loader) / config.accumulation_steps)  # before this epoch
        runner.train()
        total, seen = 0.0, 0
        optimizer.zero_grad(set_to_none=True)
        for index, batch in enumerate(loader, start=1):  # batches arrive on the engine's device
            with engine.accumulate(runner):
                logits = runner(batch["input_ids"], batch["attention_mask"]).logits
                loss = F.cross_entropy(logits.float(), batch["labels"])
                penalty = prepared.model.method.regularization()  # AdaLoRA's orthogonality term
                if penalty is not None:
                    loss = loss + penalty
                if not engine.all_finite(loss):
                    raise TrainingError(
                        f"loss became {loss.item()} in epoch {epoch}, batch {index}; stopped, keeping the "
                        f"{epoch - 1} finished epoch(s). A lower learning rate usually helps."
                    )
                engine.backward(loss)  # divided by the accumulation steps
                if engine.sync_gradients and config.max_grad_norm > 0:
                    engine.clip_grad_norm_(runner.parameters(), config.max_grad_norm)
                optimizer.step()  # the engine's optimizer and scheduler step only where gradients synced
                prepared.scheduler.step()
                if engine.sync_gradients:  # a step taken: AdaLoRA allocates ranks from its gradients
                    prepared.model.method.after_step(steps_done + math.ceil(index / config.accumulation_steps))
                optimizer.zero_grad(set_to_none=True)
            total, seen = total + loss.item() * len(batch["labels"]), seen + len(batch["labels"])
            self.progress(Progress(config.run_title, "train", epoch, config.epochs, index, len(loader), total / seen))
        return engine.mean_over_processes(total, seen)

    def _finish(self, prepared: Prepared, writer: RunWriter) -> None:
        """Test metrics of the best epoch; if the method changes the model after training (averaging
        tiny-attention's heads), validation and test metrics of the changed model too."""
        config, model, loaders = self.config, prepared.model, prepared.eval_loaders
        self.engine.wait()  # the main process has written the last epoch's files
        best = load_run(writer.path)
        model.load_state_dict(best.params(), strict=False)
        summary = {
            "params_epoch": best.best_epoch,
            "test": self._evaluate_named(model, loaders["test"], "test", writer),
        }
        record = model.method.training_record()  # e.g. AdaLoRA's final ranks
        if record:
            summary["method"] = record
        changed = model.method.after_training()  # e.g. "averaged"
        if changed:
            summary[changed] = {
                "validation": self._evaluate_named(model, loaders["validation"], changed, writer),
                "test": self._evaluate_named(model, loaders["test"], f"{changed}_test", writer),
                "parameters": model.parameter_counts(),
            }
        writer.finish(summary)
        self.progress(Progress(config.run_title, "done", config.epochs, config.epochs))

    def _evaluate_named(self, model, loader, name: str, writer: RunWriter) -> dict:
        probs, labels = self.engine.predict(model, loader)
        writer.write_predictions(name, probs, labels)
        return evaluation_metrics(probs, labels, self.config.ece_bins)


def train(config: TrainConfig, runs_dir: Path | None = None, progress: ProgressCallback | None = None) -> Run:
    """Train one config; returns the finished run."""
    return Trainer(config, runs_dir, progress).run()


def resume(run: Run, progress: ProgressCallback | None = None, sweep_engine: str = "local") -> Run:
    """Continue a killed (incomplete) run from its last finished epoch; returns the finished run."""
    if run.recorded:
        raise RunError(
            f"run {run.name} was recorded by {run.recorded['by']}, not trained by peftviz: only the loop "
            "that trained it can continue it"
        )
    if run.status != "incomplete":
        reason = f": {run.error}" if run.error else ""
        raise RunError(f"run {run.name} is {run.status}{reason}; only an incomplete (killed) run can be resumed")
    return Trainer(run.config, run.path.parent, progress, sweep_engine).resume(run)
