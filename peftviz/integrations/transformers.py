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

What it refuses, in one line (a `PeftvizError`): arguments of the wrong kind when it is built (text that is
empty or more than one line, options without a method, the same key for validation and test); and, when
training starts, before any step and before any run folder exists, a Trainer that would never evaluate
(eval_strategy "no", eval_delay past the last epoch or step), no eval_dataset, or a dict of eval datasets
none of whose keys is the validation split it reads (the Trainer does not hand its callbacks the eval
dataset: the callback reads it from the Trainer whose event calls it). An evaluation it cannot record
(labels outside the model's classes, caught before the model's own loss sees them; no labels; logits of
another width) stops training with that line, and the run ends failed with it, its recorded epochs kept.
Evaluations outside `train()` (before it, after it) are not recorded.
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from transformers import TrainerCallback

from peftviz.errors import ConfigError, ExchangeError, PeftvizError
from peftviz.integrations import trackers
from peftviz.methods import EXTERNAL_PREFIX, backbone_method
from peftviz.options import breaks_lines, shown
from peftviz.record import Recorder, RecordError, open_run
from peftviz.run_config import MAX_LABEL_CHARS
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
    run as the store reads it. An argument of the wrong kind is refused here, in one line (ConfigError)."""

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
        _check_arguments(
            name=name,
            dataset=dataset,
            model=model,
            method=method,
            options=options,
            settings=settings,
            runs_dir=runs_dir,
            validation=validation,
            test=test,
        )
        self.name, self.dataset, self.model, self.method, self.options = name, dataset, model, method, options
        self.settings, self.runs_dir = dict(settings or {}), runs_dir
        self.validation, self.test = validation, test
        # an evaluation's metric prefix -> the split it is (a dict of eval datasets: eval_<key>)
        self.splits = {"eval": "validation", f"eval_{validation}": "validation", f"eval_{test}": "test"}
        self.recorder: Recorder | None = None
        self.run: Run | None = None  # the last run, once closed
        self._batches: list[tuple[torch.Tensor, torch.Tensor]] = []  # this process's eval batches: (b, C), (b,)
        self._lacking = "labels"  # what the last eval forward it could not keep lacked: labels or logits
        self._hooks: list = []  # the forward hooks on the model while it trains
        self._classes = 0  # the model's classes (config.id2label), which an evaluation's labels must index
        self._state = None  # the Trainer's state while it trains: its step names a refused evaluation
        self._evaluated: list[str] = []  # the metric prefixes of this train()'s evaluations, recorded or not
        self._recorded_step: int | None = None  # the Trainer's step at the last recorded evaluation
        # (step, (labels, logits)) of a test split evaluated before its validation split (a dict's order)
        self._pending_test: tuple[int, tuple] | None = None

    # ------------------------------------------------------------------ the Trainer's events

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        """Check that the Trainer will evaluate a split the callback reads, then open the run and hook the model:
        a refusal raises here (one line), before any step, folder or hook."""
        self._end(abandon=True)  # a previous train() that raised never reached on_train_end
        self._check_evaluations(args, state, _calling_trainer())
        label_names = _label_names(model)
        if state.is_world_process_zero:
            settings = self._run_settings(args, state, model, label_names, kwargs.get("train_dataloader"))
            self.recorder = open_run(**settings)
        self._classes, self._state, self._evaluated = len(label_names), state, []
        self._recorded_step, self._pending_test = None, None
        self._hooks = [
            model.register_forward_pre_hook(self._check_labels, with_kwargs=True),
            model.register_forward_hook(self._capture, with_kwargs=True),
        ]

    def on_step_end(self, args, state, control, **kwargs):
        self._batches.clear()  # eval-mode forwards before this point were not an evaluation's

    def on_predict(self, args, state, control, metrics=None, **kwargs):
        self._batches.clear()  # a predict() within training (another callback's) is not an evaluation

    def on_evaluate(self, args, state, control, metrics=None, eval_dataloader=None, **kwargs):
        prefix = _metric_prefix(metrics or {})
        self._evaluated.append(str(prefix))
        split = self.splits.get(prefix)
        labels, logits = self._gathered(eval_dataloader)  # on every process: the gather is collective
        if split is None or not self._hooks:  # a split it does not read, or an evaluation outside train()
            return
        try:
            if labels is None:  # every process holds the gathered evaluation: each refuses alike
                raise RecordError(self._nothing_captured_line())
            if self.recorder is not None:
                self._record(args, state, split, labels, logits)
        except PeftvizError as err:  # refused: the run ends failed with the line, its epochs kept
            self._fail(str(err))
            raise

    def _record(self, args, state, split: str, labels, logits) -> None:
        step = state.global_step
        if split == "test" and self._recorded_step == step:  # the validation of this point came first
            self.recorder.add_test(labels, logits=logits)
        elif split == "test":
            self._pending_test = (step, (labels, logits))
        else:
            test = self._pending_test[1] if self._pending_test and self._pending_test[0] == step else (None, None)
            self._pending_test = None
            line = self.recorder.add_epoch(
                labels, logits=logits, test_labels=test[0], test_logits=test[1], values=_trainer_values(state)
            )
            self._recorded_step = step
            self._report(args, state, line, *self.recorder.last_validation)

    def on_train_end(self, args, state, control, **kwargs):
        if self.recorder is not None and not self.recorder.closed and not self.recorder.epochs:
            line = self._nothing_recorded_line()  # said, not only stored: the run ends failed with it
            warnings.warn(line, stacklevel=2)
            self._fail(line)
        self._end(abandon=False)

    # ------------------------------------------------------------------ what it refuses

    def _check_evaluations(self, args, state, trainer) -> None:
        """Refuse (ConfigError) a train() that would record nothing: the Trainer never evaluates, or evaluates
        no split the callback reads as validation. `trainer` None (events sent by another loop): its eval
        dataset is unknown, and only the arguments are checked."""
        if _planned_evaluations(args, state) < 1:
            raise ConfigError(_never_evaluates_line(args))
        if trainer is None:
            return
        splits = trainer.eval_dataset
        if splits is None:
            raise ConfigError(
                f"the Trainer has no eval_dataset, and PeftvizCallback records its evaluations: "
                f"pass eval_dataset=validation or "
                f"{{{self.validation!r}: validation, {self.test!r}: test}}"
            )
        if isinstance(splits, dict) and not all(isinstance(key, str) for key in splits):
            key = next(key for key in splits if not isinstance(key, str))
            raise ConfigError(
                f"eval_dataset's keys must be text (the Trainer looks each split up by its name), not {shown(key)}"
            )
        if isinstance(splits, dict) and self.validation not in splits:
            keys = ", ".join(shown(key) for key in list(splits)[:5]) + (", ..." if len(splits) > 5 else "")
            raise ConfigError(
                f"eval_dataset's keys are {keys or '(none)'}, none of them {self.validation!r}, the "
                f"validation split PeftvizCallback records (and {self.test!r} the test split): name "
                "them so, or pass PeftvizCallback(validation=..., test=...)"
            )

    def _check_labels(self, module, inputs, kwargs) -> None:
        """Forward pre-hook: an evaluation's labels must be class ids of the model's classes. Checked before the
        model's loss sees them (its own check is a traceback on the CPU, and on a GPU a device-side assert that
        ends the process): a refusal fails the run with the line and stops training."""
        labels = kwargs.get("labels")
        if module.training or torch.is_grad_enabled() or not isinstance(labels, torch.Tensor) or not labels.numel():
            return
        if labels.ndim != 1 or labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
            problem = f"labels must be a 1-D array of class ids (integers), not {labels.dtype} {tuple(labels.shape)}"
        else:
            low, high = (int(value) for value in torch.aminmax(labels))
            if low >= 0 and high < self._classes:
                return
            problem = f"labels must be class ids 0..{self._classes - 1} (config.id2label); found {low} to {high}"
        line = f"evaluation at step {self._state.global_step}: {problem}"
        self._fail(line)
        raise RecordError(line)

    def _nothing_captured_line(self) -> str:
        """Why an evaluation left nothing to record: no forward had both labels and logits."""
        if self._lacking == "logits":
            return (
                "the model's output at evaluation has no logits: return a ModelOutput with logits, or a tuple "
                "(loss, logits, ...)"
            )
        return "the Trainer evaluated without labels: the eval dataset needs a label column"

    def _nothing_recorded_line(self) -> str:
        evaluated = ", ".join(dict.fromkeys(self._evaluated)) or "nothing"
        return (
            f"training ended with no evaluation recorded: the Trainer evaluated {evaluated}, and "
            f"PeftvizCallback records eval or eval_{self.validation} "
            f"(eval_dataset key {self.validation!r})"
        )

    # ------------------------------------------------------------------ capturing the evaluation's outputs

    def _capture(self, module, inputs, kwargs, output) -> None:
        """Forward hook: an eval-mode forward without gradients is the Trainer's evaluation; keep its logits
        (b, C) and the labels it was called with (b,), on the device until the evaluation ends."""
        if module.training or torch.is_grad_enabled():
            return
        labels, logits = kwargs.get("labels"), _logits(output)
        if not isinstance(labels, torch.Tensor) or logits is None:
            self._lacking = "labels" if not isinstance(labels, torch.Tensor) else "logits"
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

    def _run_settings(self, args, state, model, label_names: list[str], train_dataloader) -> dict:
        adapter = _adapter_config(model)  # None for a plain model
        method, options, extra = self._method(adapter)
        base = self.model or _base_model_name(model, adapter)
        return {
            "name": self.name or method,
            "method": method,
            "options": options,
            "model": base,
            "dataset": self.dataset or _dataset_name(train_dataloader) or "unnamed",
            "label_names": label_names,
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

    def _fail(self, line: str) -> None:
        """The run ends failed with `line` beside it (its recorded epochs kept), not left training or incomplete;
        the hooks come off."""
        if self.recorder is not None and not self.recorder.closed:
            self.run = self.recorder.fail(line)
        self._end(abandon=True)

    def _end(self, abandon: bool) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if self.recorder is not None:
            if abandon:
                self.recorder.abandon()
            elif not self.recorder.closed:
                self.run = self.recorder.close()
            self.recorder = None
        trackers.close_tensorboard()


# ---------------------------------------------------------------------- the callback's own arguments


def _check_arguments(*, name, dataset, model, method, options, settings, runs_dir, validation, test) -> None:
    """Refuse (one ConfigError line) an argument of the wrong kind, when the callback is built: what the store
    checks of their values (a method name, the settings) it checks when training starts, before any folder."""
    for argument, value in (("name", name), ("dataset", dataset), ("model", model), ("method", method)):
        if value is not None:
            _one_line(value, argument)
    if name is not None and len(name) > MAX_LABEL_CHARS:
        raise ConfigError(f"name must be at most {MAX_LABEL_CHARS} characters, not {len(name)}")
    for argument, value in (("options", options), ("settings", settings)):
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{argument} must be a dict or None, not {shown(value)}")
    if options and method is None:
        raise ConfigError(
            "options need method: they are the options of the method you name (without method, "
            "the model's adapter gives both)"
        )
    path = os.fspath(runs_dir) if isinstance(runs_dir, os.PathLike) else runs_dir
    if runs_dir is not None and not (isinstance(path, str) and path and "\0" not in path):
        raise ConfigError(f"runs_dir must be a folder's path (text) or None, not {shown(runs_dir)}")
    if _one_line(validation, "validation") == _one_line(test, "test"):
        raise ConfigError(f"validation and test must be different keys of eval_dataset, not both {validation!r}")


def _one_line(value, argument: str) -> str:
    """`value` if it is text of one line, not blank; else a ConfigError naming `argument`."""
    if not isinstance(value, str) or not value.strip() or breaks_lines(value):
        raise ConfigError(f"{argument} must be one line of text, not {shown(value)}")
    return value


def _calling_trainer():
    """The Trainer whose event calls the callback: the `self` of a frame up the stack. The Trainer hands its
    callbacks its arguments and model, never itself or its eval_dataset, which the start's check needs.
    None when no Trainer called (the events sent by another loop)."""
    from transformers import Trainer

    frame = sys._getframe(1)
    for _ in range(12):  # on_train_begin <- CallbackHandler.call_event <- .on_train_begin <- the Trainer's loop
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, Trainer):
            return owner
        frame = frame.f_back
    return None


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
    """The classes in the order of the logits' columns: config.id2label, whose keys must be the class ids 0..n-1
    and whose names must be two or more, distinct, one line each; else one RecordError line."""
    id2label = getattr(getattr(model, "config", None), "id2label", None)
    try:
        by_id = {int(key): str(name) for key, name in id2label.items()}
    except (AttributeError, TypeError, ValueError):  # not a dict, or a key that is not a class id
        by_id = {}
    names = [by_id.get(class_id) for class_id in range(len(by_id))]
    if len(names) < 2 or None in names or len(set(names)) < len(names) or not all(_named(name) for name in names):
        raise RecordError(
            f"the model's config.id2label must map class ids 0..n-1 to two or more distinct names, "
            f"one line each, not {shown(id2label)}: set id2label (and num_labels)"
        )
    return names


def _named(name: str) -> bool:
    return bool(name.strip()) and not breaks_lines(name)


def _logits(output) -> torch.Tensor | None:
    """The logits of a model's output: its `logits` (a ModelOutput or a dict), or of a tuple (return_dict=False:
    (loss, logits, ...) with labels) the first 2-D tensor. None when it has none."""
    if isinstance(output, dict) or hasattr(output, "keys"):
        logits = output.get("logits") if hasattr(output, "get") else None
    elif isinstance(output, (tuple, list)):
        logits = next((part for part in output if isinstance(part, torch.Tensor) and part.ndim == 2), None)
    else:
        logits = output
    return logits if isinstance(logits, torch.Tensor) else None


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
    """How many evaluations this train() runs, as the Trainer decides them (DefaultFlowCallback): one at the start
    with eval_on_start; then one per epoch, or one per eval_steps and one at the last step; only those after the
    step it starts from (a resumed run) and none before eval_delay (epochs or steps). 0: it never evaluates."""
    strategy = _option_value(args.eval_strategy)
    at_start = int(bool(args.eval_on_start))
    delay = float(args.eval_delay or 0)
    if strategy == "steps" and state.max_steps:
        every = max(int(state.eval_steps or 1), 1)  # the Trainer's, a fraction of max_steps already resolved
        first = max(state.global_step + 1, math.ceil(delay))
        if first > state.max_steps:
            return at_start
        multiples = state.max_steps // every - (first - 1) // every
        return at_start + multiples + int(state.max_steps % every != 0)
    if strategy == "epoch":
        epochs = math.ceil(state.num_train_epochs or args.num_train_epochs)
        first = max(math.floor(state.epoch or 0) + 1, math.ceil(delay))
        return at_start + max(epochs - first + 1, 0)
    return at_start


def _never_evaluates_line(args) -> str:
    """Why a Trainer with these arguments never evaluates in this train()."""
    strategy = _option_value(args.eval_strategy)
    if strategy == "no":
        return (
            "eval_strategy is 'no': the Trainer never evaluates, and PeftvizCallback records its evaluations; "
            "set eval_strategy='epoch' or 'steps'"
        )
    return (
        f"eval_delay={args.eval_delay!r} is past the last {'step' if strategy == 'steps' else 'epoch'} this "
        "train() runs: the Trainer never evaluates, and PeftvizCallback records its evaluations; "
        "lower eval_delay"
    )


def _metric_prefix(metrics: dict) -> str | None:
    """The prefix of an evaluation's metrics: "eval", or "eval_<key>" for one of a dict of eval datasets. Every
    evaluation reports <prefix>_runtime, last of its names ending so: compute_metrics' names come before it."""
    runtimes = [name for name in metrics if isinstance(name, str) and name.endswith("_runtime")]
    return runtimes[-1].removesuffix("_runtime") if runtimes else None


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
