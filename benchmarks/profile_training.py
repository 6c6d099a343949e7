"""Where a comparison's training time goes: per phase, and torch.profiler's top operators.

    .venv/bin/python benchmarks/profile_training.py                    # the quick comparison's six runs
    .venv/bin/python benchmarks/profile_training.py --methods fine-tuning prefix-tuning --steps 30 --rows 20
    .venv/bin/python benchmarks/profile_training.py --methods "tiny-attention 4H averaged" --no-epoch
    .venv/bin/python benchmarks/profile_training.py --threads 1        # torch.set_num_threads(1) first

For each run of `peftviz.sweep.variants.comparison_configs(--preset)` picked by --methods (a method name picks all
its variants, a label picks one), in the comparison's order, on data loaded once as
the local sweep loads it, this runs the trainer's own code, `peftviz.training.trainer.Trainer`, and times it
from outside: the functions `Trainer._prepare` calls are wrapped with timers for the duration
(load_encoder, build_classifier, tokenize, make_optimizer, Engine.prepare), and so are the
engine's and optimizer's methods `_train_one_epoch` calls. Nothing of the trainer is copied here,
so what is timed is what `python -m peftviz compare` runs. Per run:

1. setup: Trainer() (the engine), then `_prepare`, piece by piece;
2. a whole epoch of `_train_one_epoch` (or --steps steps with --no-epoch), each line timed alone
   (CPU ops are synchronous): next batch (collate), forward, loss, finite check, backward,
   clipping, optimizer.step (and AdamW's own step inside it), scheduler.step, zero_grad, the
   CLI's progress callback (its tqdm bar drawn to /dev/null); what is left of a step
   (`loss.item()`, the accumulate context, Python) is "rest";
3. one validation pass (`Engine.predict`) and its metrics;
4. the files an epoch writes (`RunWriter`): predictions + metrics line, resume state (built,
   then written), parameters;
5. torch.profiler (CPU, no shapes) over --steps training steps and one validation pass: the top
   --rows operators by self CPU time, and all self times summed into kinds (matmul, attention,
   optimizer, dropout, ...), which says how much is the model's own arithmetic;
6. `Trainer._finish`: the best epoch's parameters back, test (and averaged) evaluations.

A per-run estimate then adds these up as a real run of the preset's epochs spends them, to set
against the run's minutes in the README's table. The CPU may be shared with other work: the load
average is printed with every block of numbers. Asserts nothing and checks no results.
"""

from __future__ import annotations

import time

_STARTED = time.perf_counter()  # before torch and transformers are imported: their import is a phase too

import argparse
import contextlib
import os
import resource
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

import peftviz.training.trainer as train_module
from peftviz.data.loading import load_data
from peftviz.store.runs import load_run
from peftviz.store.writer import RunWriter
from peftviz.sweep.variants import comparison_configs, start_index, with_start
from peftviz.training import checkpoint
from peftviz.training.inference import evaluation_metrics
from peftviz.training.progress import TerminalProgress
from peftviz.training.trainer import Trainer

IMPORTED = time.perf_counter()
WARMUP_STEPS = 2  # the first steps allocate memory and pick kernels: left out of every timing
# what _prepare calls, looked up in peftviz.training.trainer's namespace at call time: wrapped there -> phase name
PREPARE_CALLS = {
    "load_encoder": "model load (load_encoder)",
    "build_classifier": "build classifier (+ init_from)",
    "tokenize": "tokenize the splits",
    "make_optimizer": "optimizer + scheduler",
}
REST = "rest, mean (loss.item(), accumulate, Python)"
SETUP_PHASES = ["engine (Trainer())", *PREPARE_CALLS.values(), "Engine.prepare (accelerate)", "_prepare (all of it)"]
STEP_PHASES = [
    "next batch (collate)",
    "forward",
    "loss (cross_entropy)",
    "finite check",
    "backward",
    "clip_grad_norm_",
    "optimizer.step",
    "  AdamW.step alone",
    "scheduler.step",
    "zero_grad",
    "progress callback",
    REST,
    "step (all of it)",
]
EPOCH_PHASES = [
    "validation pass (Engine.predict)",
    "validation metrics",
    "create run folder",
    "write predictions + metrics line",
    "build resume state",
    "write resume state",
    "write params",
]
FINISH_PHASES = ["finish (Trainer._finish)", "  finish: load_run", "  finish: evaluations"]
# operator-name fragments -> the kind their self time is summed into (first match wins); dropout's own
# mul and div_ are element-wise ops and count there
KINDS = (
    ("matmul (addmm, mm, bmm)", ("addmm", "aten::mm", "bmm", "matmul", "aten::linear")),
    ("attention kernels (SDPA, softmax)", ("scaled_dot_product", "softmax")),
    (
        "optimizer (AdamW, clipping norms)",
        ("Optimizer.", "_foreach", "lerp", "addcdiv", "addcmul", "adamw", "sqrt", "linalg_vector_norm", "aten::norm"),
    ),
    ("embedding backward", ("embedding_dense_backward", "embedding_backward", "index_put", "index_add")),
    ("dropout masks (bernoulli_)", ("dropout", "bernoulli", "uniform_")),
    ("layer norm, GELU, tanh", ("layer_norm", "gelu", "tanh")),
    (
        "copies, casts, cat, fills",
        ("copy_", "clone", "contiguous", "aten::cat", "to_copy", "empty_like", "zero_", "fill_"),
    ),
    ("element-wise add/mul/div", ("aten::add", "aten::mul", "aten::div", "aten::sub", "aten::where")),
)


class Timer:
    """Named wall-clock timings: `with timer("phase"):` appends the block's seconds to that phase."""

    def __init__(self):
        self.seconds: dict[str, list[float]] = defaultdict(list)

    @contextlib.contextmanager
    def __call__(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name].append(time.perf_counter() - started)

    def timed(self, name: str, function):
        """`function`, timing each call under `name`."""

        def call(*args, **kwargs):
            with self(name):
                return function(*args, **kwargs)

        return call

    def total(self, name: str) -> float:
        return sum(self.seconds.get(name, ()))

    def median(self, name: str) -> float:
        return statistics.median(self.seconds[name]) if self.seconds.get(name) else 0.0


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


@contextlib.contextmanager
def patched(owner, name: str, value):
    """owner.name = value inside the block (an instance attribute shadows its class's method)."""
    missing = object()
    before = owner.__dict__.get(name, missing) if hasattr(owner, "__dict__") else getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if before is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, before)


def prepare(trainer: Trainer, data, timer: Timer):
    """`trainer._prepare(data)` itself, with the functions it calls timed where peftviz.training.trainer finds them."""
    with contextlib.ExitStack() as stack:
        for name, phase in PREPARE_CALLS.items():
            if hasattr(train_module, name):
                stack.enter_context(patched(train_module, name, timer.timed(phase, getattr(train_module, name))))
        engine = getattr(trainer, "engine", None)
        if engine is not None:
            stack.enter_context(patched(engine, "prepare", timer.timed("Engine.prepare (accelerate)", engine.prepare)))
        with timer("_prepare (all of it)"):
            return trainer._prepare(data)


class Batches:
    """The training loader, cut to `steps` batches, timing each batch's fetch and each whole step
    (from one batch's request to the next's). Keeps the loader's length: the loop's progress and
    its last-batch test read it."""

    def __init__(self, loader, steps: int, timer: Timer | None):
        self.loader, self.steps, self.timer = loader, steps, timer

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name):  # anything else the loop asks of the loader
        return getattr(self.loader, name)

    def __iter__(self):
        batches = iter(self.loader)
        for _ in range(min(self.steps, len(self.loader))):
            started = time.perf_counter()
            batch = next(batches)
            fetched = time.perf_counter()
            yield batch
            if self.timer:
                self.timer.seconds["next batch (collate)"].append(fetched - started)
                self.timer.seconds["step (all of it)"].append(time.perf_counter() - started)


@contextlib.contextmanager
def instrumented(trainer: Trainer, prepared, timer: Timer):
    """Time each line of `_train_one_epoch` by wrapping what it calls, for the block's duration."""
    engine, optimizer, runner = trainer.engine, prepared.optimizer, prepared.runner
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper holds torch's AdamW
    starts: list[float] = []
    hooks = [
        runner.register_forward_pre_hook(lambda *_: starts.append(time.perf_counter())),
        runner.register_forward_hook(lambda *_: timer.seconds["forward"].append(time.perf_counter() - starts.pop())),
    ]
    wraps = [
        (F, "cross_entropy", "loss (cross_entropy)"),
        (engine, "all_finite", "finite check"),
        (engine, "backward", "backward"),
        (engine, "clip_grad_norm_", "clip_grad_norm_"),
        (optimizer, "step", "optimizer.step"),
        (optimizer, "zero_grad", "zero_grad"),
        (prepared.scheduler, "step", "scheduler.step"),
        (trainer, "progress", "progress callback"),
    ]
    if inner is not optimizer:
        wraps.append((inner, "step", "  AdamW.step alone"))
    with contextlib.ExitStack() as stack:
        for owner, name, phase in wraps:
            stack.enter_context(patched(owner, name, timer.timed(phase, getattr(owner, name))))
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()
    named = sum(timer.total(name) for name in STEP_PHASES[:-2] if not name.startswith("  "))
    steps = len(timer.seconds["step (all of it)"])  # the rest is known only in total: shown as its mean
    timer.seconds[REST] = [(timer.total("step (all of it)") - named) / steps] * steps


def run_steps(trainer: Trainer, prepared, steps: int, timer: Timer | None) -> None:
    """`trainer._train_one_epoch` over the first `steps` batches of an epoch."""
    loader = prepared.train_loader
    prepared.train_loader = Batches(loader, steps, timer)
    try:
        trainer._train_one_epoch(prepared, 1)
    finally:
        prepared.train_loader = loader


def validation(trainer: Trainer, prepared, timer: Timer):
    with timer("validation pass (Engine.predict)"):
        probs, labels = trainer.engine.predict(prepared.model, prepared.eval_loaders["validation"])
    with timer("validation metrics"):
        metrics = evaluation_metrics(probs, labels, trainer.config.ece_bins)
    return probs, labels, metrics


def write_epoch_files(trainer: Trainer, prepared, timer: Timer) -> tuple[RunWriter, int]:
    """What `Trainer._train_epochs` writes after an epoch, each file timed (epoch 1, a new best)."""
    probs, labels, metrics = validation(trainer, prepared, timer)
    with timer("create run folder"):
        writer = RunWriter.create(trainer.runs_dir, trainer.config, prepared.recorded)
    with timer("write predictions + metrics line"):
        writer.write_epoch({"epoch": 1, "train_loss": 0.0, **metrics, "seconds": 0.0}, probs, labels)
    with timer("build resume state"):
        state = checkpoint.training_state(1, prepared)
    with timer("write resume state"):
        writer.write_resume(*state)
    with timer("write params"):
        writer.write_params(prepared.model.trainable_state_dict(), 1)
    return writer, sum(t.numel() * t.element_size() for t in state[0].values())


@contextlib.contextmanager
def finish_timed(trainer: Trainer, timer: Timer):
    """`_finish`'s parts: reading the run back (load_run) and its evaluations (test; averaged val + test)."""
    with (
        patched(train_module, "load_run", timer.timed("  finish: load_run", train_module.load_run)),
        patched(trainer, "_evaluate_named", timer.timed("  finish: evaluations", trainer._evaluate_named)),
    ):
        yield


def profiled(trainer: Trainer, prepared, steps: int):
    """torch.profiler over `steps` training steps and one validation pass, each under a label."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        with record_function("## training steps"):
            run_steps(trainer, prepared, steps, None)
        with record_function("## validation pass"):
            trainer.engine.predict(prepared.model, prepared.eval_loaders["validation"])
    return prof


def by_kind(prof) -> dict[str, float]:
    """Self CPU seconds of the profile summed into KINDS; the rest is 'other'."""
    kinds: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        if event.key.startswith("## "):  # our labels: their self time is the Python between ops
            kinds["Python between ops (labels' self time)"] += event.self_cpu_time_total / 1e6
            continue
        kind = next((kind for kind, parts in KINDS if any(p in event.key for p in parts)), "other")
        kinds[kind] += event.self_cpu_time_total / 1e6
    return dict(sorted(kinds.items(), key=lambda item: -item[1]))


def estimate(config, timer: Timer, batches: int) -> dict[str, float]:
    """Seconds a real run of config.epochs would spend per phase, from the timings."""
    files = sum(timer.total(name) for name in EPOCH_PHASES[2:])
    return {
        "setup (engine, _prepare)": timer.total("engine (Trainer())") + timer.total("_prepare (all of it)"),
        "training (median step x steps)": timer.median("step (all of it)") * batches * config.epochs,
        "validation, every epoch": timer.total("validation pass (Engine.predict)") * config.epochs,
        "files, every epoch (params each time: an upper bound)": files * config.epochs,
        "finish (test; averaged val + test)": timer.total("finish (Trainer._finish)"),
    }


def profile_run(config, data, runs_dir: Path, earlier: list, args) -> float:
    """Everything above for one config; returns the run's estimated seconds."""
    start = start_index([*(run.config for run in earlier), config], len(earlier))  # 4 heads start from the 1-head run
    config = with_start(config, None if start is None else earlier[start])
    print(f"\n## {config.name}  ({load()})\n")
    timer = Timer()
    with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):  # the CLI's tqdm bar, unseen
        with timer("engine (Trainer())"):
            trainer = Trainer(config, runs_dir, TerminalProgress())
        prepared = prepare(trainer, data, timer)
        run_steps(trainer, prepared, WARMUP_STEPS, None)
        steps = len(prepared.train_loader) if args.epoch else min(args.steps, len(prepared.train_loader))
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        with instrumented(trainer, prepared, timer), timer("epoch wall (_train_one_epoch)"):
            run_steps(trainer, prepared, steps, timer)
        # the allocator handing big blocks back to the OS and faulting them in again shows here, not in the profile
        timer.seconds["minor page faults"] = [(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps]
        writer, resume_bytes = write_epoch_files(trainer, prepared, timer)
        prof = profiled(trainer, prepared, args.steps)
        counts = prepared.model.parameter_counts()  # before _finish, which may average heads away
        with finish_timed(trainer, timer), timer("finish (Trainer._finish)"):
            trainer._finish(prepared, writer)
    earlier.append(load_run(writer.path))
    return report(config, prepared, timer, prof, counts, resume_bytes, steps, args)


def report(config, prepared, timer: Timer, prof, counts: dict, resume_bytes: int, steps: int, args) -> float:
    print(f"trainable parameters {counts['trainable']:,}; resume state {resume_bytes / 1e6:.0f} MB  ({load()})\n")
    print("setup, per-epoch and final phases (s):")
    for name in [*SETUP_PHASES, *EPOCH_PHASES, *FINISH_PHASES]:
        print(f"  {name:44s} {timer.total(name):8.3f}")
    wall, faults = timer.total("epoch wall (_train_one_epoch)"), timer.total("minor page faults")
    print(f"\ntraining, line by line over {steps} steps ({wall:.1f} s wall, {faults:,.0f} minor page faults a step):")
    step_total = timer.total("step (all of it)")
    print(f"  {'phase':44s} {'total s':>8s} {'median ms':>10s} {'min ms':>8s} {'share':>7s}")
    for name in STEP_PHASES:
        if name in timer.seconds:
            share = 100 * timer.total(name) / step_total if step_total else 0.0
            fastest = 1e3 * min(timer.seconds[name])
            print(
                f"  {name:44s} {timer.total(name):8.3f} {1e3 * timer.median(name):10.1f} {fastest:8.1f} {share:6.1f}%"
            )
    batches = len(prepared.train_loader)
    parts = estimate(config, timer, batches)
    print(f"\nestimated run ({config.epochs} epochs x {batches} steps):")
    for name, seconds in parts.items():
        print(f"  {name:54s} {seconds:7.1f} s")
    print(f"  {'total':54s} {sum(parts.values()):7.1f} s = {sum(parts.values()) / 60:.2f} min")
    print(f"\nprofile, {args.steps} training steps + 1 validation pass: self CPU by kind (s)  ({load()})")
    for kind, seconds in by_kind(prof).items():
        print(f"  {kind:44s} {seconds:8.3f}")
    print()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
    return sum(parts.values())


def pick(configs, wanted: list[str] | None):
    """The comparison's configs whose label or method is in `wanted` (all when None), in order."""
    if not wanted:
        return configs
    unknown = set(wanted) - {c.name for c in configs} - {c.method for c in configs}
    if unknown:
        names = ", ".join(c.name for c in configs)
        raise SystemExit(f"not in the comparison: {', '.join(sorted(unknown))}; choose from {names}")
    return [c for c in configs if c.name in wanted or c.method in wanted]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="*", help="methods or run labels of the comparison (default: all)")
    parser.add_argument("--preset", default="quick", help="the comparison's preset (default: quick)")
    parser.add_argument("--steps", type=int, default=30, help="training steps profiled (default: 30)")
    parser.add_argument("--rows", type=int, default=15, help="rows of the profile table (default: 15)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads first (default: torch's own)")
    parser.add_argument(
        "--epoch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time a whole epoch line by line (default), or --no-epoch: only --steps steps",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs; {load()}")
    print(f"imports (torch, transformers, peftviz): {IMPORTED - _STARTED:.2f} s")
    configs = pick(comparison_configs(args.preset), args.methods)
    started = time.perf_counter()
    data = load_data(configs[0].dataset, seed=configs[0].data_seed, limit=configs[0].limit)  # once, as compare does
    print(f"data loading (load_data, once per comparison): {time.perf_counter() - started:.2f} s")
    earlier: list = []
    with tempfile.TemporaryDirectory(prefix="peftviz-profile-") as runs_dir:
        total = sum(profile_run(config, data, Path(runs_dir), earlier, args) for config in configs)
    print(f"\nall runs, estimated: {total:.0f} s = {total / 60:.2f} min, plus imports and data loading  ({load()})")


if __name__ == "__main__":
    main()
