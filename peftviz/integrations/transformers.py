"""`PeftvizCallback`: a Hugging Face `Trainer` callback that records every evaluation's predictions into
the run store (`peftviz.record`), so the app shows the run's calibration over epochs.

    trainer = Trainer(model=model, args=args, train_dataset=train,
                      eval_dataset={"validation": validation, "test": test},   # or eval_dataset=validation
                      callbacks=[PeftvizCallback(dataset="bbc-news")])

Each evaluation (eval_strategy "epoch": one per epoch; "steps": one per eval_steps) is one point of
the run, its "epoch" in the store; its metrics line also holds the Trainer's step, epoch and last
training loss. A dict of eval datasets gives the validation split (key `validation`) and the test
split (key `test`) of each point; a single eval dataset is the validation split.

No second pass: the predictions are those of the Trainer's own evaluation, taken from the model's
output by a forward hook while the model is in eval mode, and the labels from the same call. Under
several processes each process holds its shard; they are gathered in the order accelerate's eval
loader deals batches (batch i to process i mod P, the last round padded from the start) and cut to
the dataset's length, as `Accelerator.gather_for_metrics` does, and only the main process writes.

From the model: the method (a `PeftModel`'s adapter config read as the peftviz method that holds it,
as `import` reads adapters, or `external:<peft type>`; a plain model is fine-tuning), its options,
the parameter counts, the base model's name and the label names (`config.id2label`). From the
arguments: learning rate, weight decay, batch sizes, schedule, warmup, clipping, precision and seed.
When the Trainer reports to TensorBoard or MLflow, the calibration summary and the reliability
diagram go there too (`trackers`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import torch
from transformers import TrainerCallback

from peftviz.errors import ConfigError, ExchangeError, PeftvizError
from peftviz.integrations import trackers
from peftviz.methods import EXTERNAL_PREFIX, backbone_method
from peftviz.record import Recorder, RecordError, open_run
from peftviz.store.runs import Run
from peftviz.store.schema import RECORDED_SETTING_CHARS

__all__ = ["PeftvizCallback"]


class PeftvizCallback(TrainerCallback):
    """Records each evaluation of a `transformers.Trainer` as an epoch of a peftviz run.

    name: the run's label (default: the method). dataset: what the data is called (default: the training
    dataset's `info.dataset_name`). model: what the base model is called (default: its name_or_path).
    method, options: override what the model says. settings: more settings to record (peftviz's, such
    as limit and max_length, or the loop's own). runs_dir: the store (default PEFTVIZ_RUNS or
    cache/runs). validation, test: the keys of a dict of eval datasets. After training, `run` is the
    run as the store reads it."""

    def __init__(
        self,
        name: str | None = None,
        *,
        dataset: str | None = None,
        model: str | None = None,
        method: str | None = None,
        options: dict | None = None,
        settings: dict | None = None,
        runs_dir: str | Path | None = None,
        validation: str = "validation",
        test: str = "test",
    ):
        self.name, self.dataset, self.model, self.method, self.options = name, dataset, model, method, options
        self.settings, self.runs_dir = dict(settings or {}), runs_dir
        # an evaluation's metric prefix -> the split it is (a dict of eval datasets: eval_<key>)
        self.splits = {"eval": "validation", f"eval_{validation}": "validation", f"eval_{test}": "test"}
        self.recorder: Recorder | None = None
        self.run: Run | None = None  # the last run, once closed
        self._batches: list[tuple[torch.Tensor, torch.Tensor]] = []  # this process's eval batches: (b, C), (b,)
        self._hook = None
        self._recorded_step: int | None = None  # the Trainer's step at the last recorded evaluation
        # (step, (labels, logits)) of a test split evaluated before its validation split (a dict's order)
        self._pending_test: tuple[int, tuple] | None = None

    # ------------------------------------------------------------------ the Trainer's events

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._end(abandon=True)  # a previous train() that raised never reached on_train_end
        if state.is_world_process_zero:  # a refused setting raises here, before any folder or hook
            self.recorder = open_run(**self._run_settings(args, state, model, kwargs.get("train_dataloader")))
        self._hook = model.register_forward_hook(self._capture, with_kwargs=True)

    def on_step_end(self, args, state, control, **kwargs):
        self._batches.clear()  # eval-mode forwards before this point were not an evaluation's

    def on_evaluate(self, args, state, control, metrics=None, eval_dataloader=None, **kwargs):
        split = self.splits.get(_metric_prefix(metrics or {}))
        labels, logits = self._gathered(eval_dataloader)  # on every process: the gather is collective
        if split is None or self.recorder is None:
            return
        try:
            self._record(args, state, split, labels, logits)
        except PeftvizError:  # refused: the run keeps its epochs and lists as incomplete, not as training
            self._end(abandon=True)
            raise

    def _record(self, args, state, split: str, labels, logits) -> None:
        if labels is None:
            raise RecordError("the Trainer evaluated without labels: the eval dataset needs a label column")
        step = state.global_step
        if split == "test" and self._recorded_step == step:  # the validation of this point came first
            self.recorder.add_test(labels, logits=logits)
        elif split == "test":
            self._pending_test = (step, (labels, logits))
        else:
            test = self._pending_test[1] if self._pending_test and self._pending_test[0] == step else (None, None)
            self._pending_test = None
            line = self.recorder.add_epoch(labels, logits=logits, test_labels=test[0], test_logits=test[1],
                                           values=_trainer_values(state))  # fmt: skip
            self._recorded_step = step
            self._report(args, state, line, *self.recorder.last_validation)

    def on_train_end(self, args, state, control, **kwargs):
        self._end(abandon=False)

    # ------------------------------------------------------------------ capturing the evaluation's outputs

    def _capture(self, module, inputs, kwargs, output) -> None:
        """Forward hook: an eval-mode forward without gradients is the Trainer's evaluation; keep its logits
        (b, C) and the labels it was called with (b,), on the device until the evaluation ends."""
        if module.training or torch.is_grad_enabled():
            return
        labels = kwargs.get("labels")
        logits = output["logits"] if isinstance(output, dict) or hasattr(output, "keys") else None
        if labels is None or logits is None:
            return
        self._batches.append((logits.detach().float(), labels.detach()))

    def _gathered(self, eval_dataloader) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The evaluation's (labels (N,), logits (N, C)) of every process, in the dataset's order."""
        batches, self._batches = self._batches, []
        local = [(logits.cpu().numpy(), labels.cpu().numpy()) for logits, labels in batches]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            every = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(every, local)
            local = [batch for round_ in zip(*every) for batch in round_]  # batch i came from process i mod P
        if not local:
            return None, None
        logits, labels = np.concatenate([b[0] for b in local]), np.concatenate([b[1] for b in local])
        size = _dataset_size(eval_dataloader)
        if size is not None:  # the last round was padded with examples from the start
            logits, labels = logits[:size], labels[:size]
        return labels, logits

    # ------------------------------------------------------------------ what the run records

    def _run_settings(self, args, state, model, train_dataloader) -> dict:
        adapter = _adapter_config(model)  # None for a plain model
        method, options, extra = self._method(adapter)
        base = self.model or _base_model_name(model, adapter)
        return {
            "name": self.name or method,
            "method": method,
            "options": options,
            "model": base,
            "dataset": self.dataset or _dataset_name(train_dataloader) or "unnamed",
            "label_names": _label_names(model),
            "settings": {**_argument_settings(args, state), **extra, **self.settings},
            "parameters": _parameter_counts(model),
            "runs_dir": self.runs_dir,
            "device": str(args.device),
            "processes": _processes(args),
            "by": "transformers-trainer",
        }

    def _method(self, config: dict | None) -> tuple[str, dict, dict]:
        """(method, its options, settings it leaves over) from the model's adapter `config` unless given."""
        if self.method is not None:
            return self.method, dict(self.options or {}), {}
        if config is None:  # a plain model: every weight trained
            return backbone_method().name, {}, {}
        from peftviz.exchange.imports import adapter_method

        try:  # the callback records a classifier, whatever task_type the adapter was saved with
            cls, options = adapter_method({**config, "task_type": "SEQ_CLS"}, "the model's adapter")
            return cls.name, options, {}
        except (ExchangeError, ConfigError):  # a method peftviz does not hold: its plain settings kept
            plain = {f"peft.{key}": value for key, value in config.items() if _plain(value)}
            return f"{EXTERNAL_PREFIX}{str(config.get('peft_type') or 'adapter').lower()}", {}, plain

    def _report(self, args, state, line: dict, probs: np.ndarray, labels: np.ndarray) -> None:
        """The summary and the diagram of the stored probabilities to the trackers the Trainer reports to."""
        report_to = set(args.report_to or [])
        if not report_to & {"tensorboard", "mlflow"}:
            return
        summary = trackers.calibration_summary(line, probs, labels)
        figure = trackers.reliability_figure(probs, labels, f"evaluation {line['epoch']}, ECE {summary['ece']:.3f}")
        if "tensorboard" in report_to:
            trackers.log_tensorboard(_tensorboard_dir(args), summary, figure, state.global_step)
        if "mlflow" in report_to:
            trackers.log_mlflow(summary, figure, state.global_step, line["epoch"])
        import matplotlib.pyplot as plt

        plt.close(figure)

    def _end(self, abandon: bool) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.recorder is not None:
            if abandon:
                self.recorder.abandon()
            elif not self.recorder.closed:
                self.run = self.recorder.close()
            self.recorder = None
        trackers.close_tensorboard()


# ---------------------------------------------------------------------- reading the model and the arguments


def _adapter_config(model) -> dict | None:
    """The active adapter's config of a PeftModel as a dict; None for a plain model."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not configs:
        return None
    active = getattr(model, "active_adapter", None)
    config = configs.get(active) or next(iter(configs.values()))
    # as adapter_config.json holds it, what `import` reads: enums as their values, sets as lists
    return json.loads(
        json.dumps(config.to_dict(), default=lambda value: sorted(value) if isinstance(value, set) else str(value))
    )


def _plain(value) -> bool:
    """A setting the store keeps as given: a finite number, short text, true/false or null."""
    if isinstance(value, float):
        return math.isfinite(value)
    short = isinstance(value, str) and len(value) <= RECORDED_SETTING_CHARS
    return value is None or isinstance(value, (int, bool)) or short


def _base_model_name(model, adapter: dict | None) -> str:
    name = (adapter or {}).get("base_model_name_or_path") or getattr(
        getattr(model, "config", None), "_name_or_path", ""
    )
    return str(name or "unnamed")


def _label_names(model) -> list[str]:
    id2label = getattr(getattr(model, "config", None), "id2label", None) or {}
    names = [str(id2label[key]) for key in sorted(id2label, key=int)]
    if len(names) < 2:
        raise RecordError("the model's config.id2label names fewer than two classes: set id2label (and num_labels)")
    return names


def _parameter_counts(model) -> dict[str, int]:
    parameters = list(model.parameters())
    return {
        "total": sum(p.numel() for p in parameters),
        "trainable": sum(p.numel() for p in parameters if p.requires_grad),
    }


def _argument_settings(args, state) -> dict:
    """TrainingArguments as peftviz's settings where it has them, the loop's own names for the rest."""
    processes = _processes(args)
    schedule = _option_value(args.lr_scheduler_type)
    settings = {
        "learning_rate": float(args.learning_rate),
        "weight_decay": float(args.weight_decay),
        "batch_size": int(args.per_device_train_batch_size),
        "effective_batch_size": int(args.per_device_train_batch_size * args.gradient_accumulation_steps * processes),
        "max_grad_norm": float(args.max_grad_norm),
        "seed": int(args.seed),
        "precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
        "epochs": _planned_evaluations(args, state),
        "warmup_ratio": _warmup_ratio(args, state),
        "eval_strategy": _option_value(args.eval_strategy),
        "num_train_epochs": float(args.num_train_epochs),
    }
    if schedule in ("linear", "cosine"):
        settings["schedule"] = schedule
    else:
        settings["lr_scheduler_type"] = schedule
    return settings


def _warmup_ratio(args, state) -> float:
    """The share of steps the learning rate warms up over: warmup_steps below 1 is that share already (the
    Trainer reads it so), a count is divided by the steps of the run (capped below 1, as the setting is)."""
    steps = float(args.warmup_steps or 0)
    if steps < 1:
        return steps
    return min(steps / state.max_steps, 0.999) if state.max_steps else 0.0


def _option_value(option) -> str:
    """A TrainingArguments choice as its name: the enum's value ("epoch", "cosine"), or the string given."""
    return str(getattr(option, "value", option))


def _processes(args) -> int:
    return max(int(args.world_size or 1), 1)


def _planned_evaluations(args, state) -> int:
    """How many evaluations the Trainer will run: one per epoch, or one per eval_steps of its max_steps."""
    strategy = _option_value(args.eval_strategy)
    if strategy == "steps" and state.max_steps:
        steps = args.eval_steps if args.eval_steps >= 1 else math.ceil(args.eval_steps * state.max_steps)
        return max(1, int(state.max_steps // max(int(steps), 1)))
    return max(1, math.ceil(state.num_train_epochs or args.num_train_epochs))


def _metric_prefix(metrics: dict) -> str | None:
    """The prefix of an evaluation's metrics: "eval", or "eval_<key>" for one of a dict of eval datasets
    (every evaluation reports <prefix>_runtime)."""
    return next((name.removesuffix("_runtime") for name in metrics if name.endswith("_runtime")), None)


def _trainer_values(state) -> dict:
    """The Trainer's place at this evaluation, and its last logged training loss."""
    values = {"step": state.global_step, "trainer_epoch": float(state.epoch or 0.0)}
    losses = [entry["loss"] for entry in state.log_history if "loss" in entry and math.isfinite(entry["loss"])]
    if losses:
        values["train_loss"] = float(losses[-1])
    return values


def _tensorboard_dir(args) -> str:
    """Where the Trainer's TensorBoard callback writes when told (TENSORBOARD_LOGGING_DIR); else a run
    folder of its own, <output_dir>/runs/peftviz, beside the Trainer's time-stamped one (TensorBoard on
    <output_dir>/runs shows both)."""
    return os.path.expanduser(os.getenv("TENSORBOARD_LOGGING_DIR") or os.path.join(args.output_dir, "runs", "peftviz"))


def _dataset_name(loader) -> str | None:
    """A `datasets` split's own name (set when it was loaded from the hub), if the loader holds one."""
    info = getattr(getattr(loader, "dataset", None), "info", None)
    name = getattr(info, "dataset_name", None)
    return name if isinstance(name, str) and name else None


def _dataset_size(loader) -> int | None:
    try:
        return len(loader.dataset)
    except (TypeError, AttributeError):
        return None
