"""The training engine: Hugging Face Accelerate for the device, mixed precision and data parallelism.

One `Engine` per run wraps an `accelerate.Accelerator` (the ecosystem's convention for
transformers models, from one GPU to many machines; peftviz writes no DDP of its own):

    precision    fp32, bf16 or fp16; "auto" is bf16 on a GPU that supports it, else fp32. bf16 and
                 fp16 run the forward under autocast while trained parameters and AdamW's state stay
                 float32; fp16 scales the loss (a GradScaler) and skips a step whose gradients
                 overflowed. Probabilities, and so every calibration metric, are float32.
    frozen       under bf16 and fp16 the frozen weights of linear layers are held in that dtype
                 (`hold_frozen_in`): autocast would cast them on every forward, to the same values,
                 so the logits do not change and the casts (and half their memory) are gone.
                 Fine-tuning freezes nothing: its weights stay float32 masters, cast per forward.
    processes    `accelerate launch --multi_gpu --num_processes N -m peftviz train ...` runs N copies. Each
                 takes an equal share of every batch (`split_batches`), so `batch_size` and
                 `effective_batch_size` count the same examples per forward and per optimiser step
                 whatever N is: a run compares with a single-process run of the same config.
                 Gradients are averaged across processes; only the main process writes the run.
    predictions  gathered from every process in dataset order, with the copies that pad the last
                 batch to an equal share dropped (`gather_for_metrics`).

Accelerate keeps its settings in process-wide singletons that refuse a second, different setting
("AcceleratorState has already been initialized"). The app and `compare` train many runs in one
process, each with its own precision, so the engine clears that state before each run; a
data-parallel launch keeps its process group (`PartialState`) and clears only the rest.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from accelerate import Accelerator, DataLoaderConfiguration, DistributedDataParallelKwargs
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import broadcast_object_list
from torch import nn

from peftviz.errors import ConfigError
from peftviz.run_config import TrainConfig
from peftviz.training.inference import pick_device, predict

# peftviz's names -> accelerate's `mixed_precision`
MIXED_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}


def launched_processes() -> int:
    """Processes of this launch: WORLD_SIZE, set by `accelerate launch` (and torchrun); 1 otherwise."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Whether this process prints and writes: the only one, or rank 0 of a launch."""
    return int(os.environ.get("RANK", "0")) == 0


def check_device(spec: str) -> torch.device:
    """The config's device, refused in one line where this machine has none such."""
    device = pick_device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {spec}: no CUDA GPU is visible here; use --device cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device {spec}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    return device


def resolve_precision(precision: str, device: torch.device) -> str:
    """The precision a run trains in on `device`: "auto" decided, impossible choices refused."""
    bf16_gpu = device.type == "cuda" and torch.cuda.is_bf16_supported()
    if precision == "auto":
        return "bf16" if bf16_gpu else "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError("precision fp16 needs a CUDA GPU (its loss scaling runs there); on the CPU use bf16 or fp32")
    if precision == "bf16" and device.type == "cuda" and not bf16_gpu:
        raise ConfigError(f"precision bf16: {torch.cuda.get_device_name(device)} has no bfloat16; use fp16 or fp32")
    return precision


COMPUTE_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}


def hold_frozen_in(model: nn.Module, dtype: torch.dtype) -> int:
    """Hold every frozen weight and bias of `model`'s linear layers in `dtype`; returns how many tensors changed.

    Autocast runs `F.linear` in its lower precision: it casts a float32 weight to `dtype` on every forward
    (one cast kernel per weight, and in a frozen backbone that is most of a step's casts). A weight already
    in `dtype` is used as it is, and `W.to(dtype)` once gives the very values autocast would make each time,
    so under autocast the outputs are unchanged. Only linear layers: autocast runs layer norm in float32
    (a half-precision norm weight would be cast back each step) and embeddings are lookups, never cast.
    A frozen weight must then only run under autocast, which is how the engine runs every forward.
    """
    changed = 0
    for module in model.modules():
        if not isinstance(module, nn.Linear):
            continue
        for param in (module.weight, module.bias):
            if param is not None and not param.requires_grad and param.dtype != dtype:
                param.data = param.data.to(dtype)
                changed += 1
    return changed


def check_machine(config: TrainConfig) -> str:
    """The precision `config` trains in on this machine; ConfigError where its device or precision is missing."""
    return resolve_precision(config.precision, check_device(config.device))


def _fresh_state() -> None:
    """Clear accelerate's singletons so this run's Accelerator may differ from the last one's."""
    AcceleratorState._reset_state(reset_partial_state=launched_processes() == 1)
    GradientState._reset_state()


class Engine:
    """How a run's steps execute: device, precision, processes. The trainer says what to run."""

    def __init__(self, config: TrainConfig):
        device = check_device(config.device)
        self.precision = resolve_precision(config.precision, device)
        _fresh_state()
        if device.type == "cuda" and device.index is not None and launched_processes() == 1:
            torch.cuda.set_device(device)  # Accelerate places a single process on the current GPU
        self.accelerator = Accelerator(
            cpu=device.type == "cpu",
            mixed_precision=MIXED_PRECISION[self.precision],
            gradient_accumulation_steps=config.accumulation_steps,
            dataloader_config=DataLoaderConfiguration(split_batches=True),
            # a method may leave a trainable parameter out of a forward (a head's dropout path, an
            # unused kernel scale); DDP would then wait for its gradient forever
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
        )
        if config.batch_size % self.processes:
            raise ConfigError(
                f"batch_size {config.batch_size} must be a multiple of the {self.processes} processes "
                "(each takes an equal share of every batch)"
            )

    @property
    def device(self) -> torch.device:
        return self.accelerator.device

    @property
    def processes(self) -> int:
        return self.accelerator.num_processes

    @property
    def backend(self) -> str | None:
        """The process group's backend (gloo on CPUs, nccl on GPUs); None in a single process."""
        return self.accelerator.state.backend if self.processes > 1 else None

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    def hold_frozen(self, model: nn.Module) -> int:
        """Frozen linear weights in the compute dtype under bf16 and fp16 (`hold_frozen_in`); nothing in fp32."""
        dtype = COMPUTE_DTYPE.get(self.precision)
        return hold_frozen_in(model, dtype) if dtype else 0

    def prepare(self, model, optimizer, scheduler, train_loader, eval_loaders: dict):
        """-> (runner, optimizer, scheduler, train_loader, eval_loaders) as the engine runs them.

        The runner is the model wrapped for data parallelism (the model itself in one process);
        both share the parameters, so state dicts and the method are read from the model."""
        names = list(eval_loaders)
        runner, optimizer, scheduler, train_loader, *loaders = self.accelerator.prepare(
            model, optimizer, scheduler, train_loader, *eval_loaders.values()
        )
        return runner, optimizer, scheduler, train_loader, dict(zip(names, loaders))

    def accumulate(self, runner):
        """Context of one forward/backward: gradients sync across processes only on a stepping batch."""
        return self.accelerator.accumulate(runner)

    def backward(self, loss: torch.Tensor) -> None:
        """loss / accumulation steps, scaled under fp16, backward."""
        self.accelerator.backward(loss)

    @property
    def sync_gradients(self) -> bool:
        """Whether this batch ends an accumulation: the optimizer steps after it."""
        return self.accelerator.sync_gradients

    def clip_grad_norm_(self, parameters, max_norm: float) -> None:
        self.accelerator.clip_grad_norm_(parameters, max_norm)  # unscales fp16 gradients first

    def all_finite(self, loss: torch.Tensor) -> bool:
        """Whether every process's loss is finite: all stop together, or none does."""
        finite = torch.isfinite(loss.detach()).float()
        if self.processes > 1:
            finite = self.accelerator.reduce(finite, reduction="sum") / self.processes
        return bool(finite.item() == 1.0)

    def mean_over_processes(self, total: float, count: int) -> float:
        """The mean of a quantity summed per process over `count` examples per process."""
        if self.processes == 1:
            return total / count
        sums = self.accelerator.reduce(torch.tensor([total, count], device=self.device, dtype=torch.float64), "sum")
        return float(sums[0] / sums[1])

    def predict(self, model, loader) -> tuple[np.ndarray, np.ndarray]:
        """Float32 probabilities (N, C) and labels (N,) of the whole split, in dataset order, on every process."""
        with self.accelerator.autocast():  # a no-op in fp32
            return predict(model, loader, self.device, gather=self.accelerator.gather_for_metrics)

    def wait(self) -> None:
        """Every process reaches this point before any goes on (the main one has written its files)."""
        self.accelerator.wait_for_everyone()

    def share(self, value):
        """The main process's `value`, on every process (a picklable object: a path, a name)."""
        if self.processes == 1:
            return value
        return broadcast_object_list([value])[0]
