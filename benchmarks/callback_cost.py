"""What `PeftvizCallback` costs a `transformers.Trainer` run: one whole training per process, with or without it.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/callback_cost.py --callback       # the example's settings
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/callback_cost.py --no-callback    # the same run without it
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/callback_cost.py --callback --report-to tensorboard
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/callback_cost.py --callback --profile /tmp/callback.prof

The settings of `examples/hf_trainer.py` on small data, its own data and model code (`tokenized`,
`lora_model`): MiniLM (the shipped copy) with peft's LoRA, r = 8 on query and value, bbc-news at --limit examples per split and --max-length tokens, --epochs epochs, an
evaluation of validation and test after each. Time the two variants as whole processes, alternated
A B A B ..., and take the ratio pair by pair (docs/costs.md, "The Trainer callback"): the process is what a
user waits for, and pairing cancels a shared machine's drift.

Each process prints one JSON line: `train_s`, the wall time of `trainer.train()`, and with --callback
`callback_s`, the time spent inside the callback's own code (its Trainer events and its forward hook, each
timed from outside by wrapping the class's methods, so nothing of the callback is copied here) and
`callback_parts`, that time per method. --profile writes cProfile's statistics of `trainer.train()` and
prints the top functions by cumulative time. Asserts nothing and checks no results.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib.util
import json
import pstats
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from transformers import AutoTokenizer, DataCollatorWithPadding, Trainer, TrainingArguments, set_seed

from peftviz.integrations.transformers import PeftvizCallback
from peftviz.paths import minilm_path

# the callback's code that runs inside a training: its events and its forward hook
TIMED = ("on_train_begin", "on_step_end", "on_evaluate", "on_train_end", "_capture")
spent: dict[str, float] = defaultdict(float)  # method -> seconds inside it


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callback", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--limit", type=int, default=200, help="examples per split")
    parser.add_argument("--max-length", type=int, default=64, help="tokens per document")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--report-to", default="none", help='the Trainer\'s trackers: "none" or "tensorboard"')
    parser.add_argument("--profile", default=None, help="write cProfile's statistics of trainer.train() here")
    return parser.parse_args()


def timed(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            spent[method.__name__] += time.perf_counter() - start

    return wrapper


def example():
    """examples/hf_trainer.py as a module: its data and model are what this benchmark trains."""
    path = Path(__file__).resolve().parents[1] / "examples" / "hf_trainer.py"
    spec = importlib.util.spec_from_file_location("hf_trainer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trainer_for(args: argparse.Namespace, folder: str) -> Trainer:
    """The example's Trainer: MiniLM + LoRA r=8 on query and value, bbc-news, evaluated each epoch."""
    hf_trainer = example()
    set_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    splits, names = hf_trainer.tokenized(args, tokenizer)
    training = TrainingArguments(
        output_dir=f"{folder}/out",
        num_train_epochs=args.epochs,
        learning_rate=5e-3,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=32,
        eval_strategy="epoch",
        save_strategy="no",
        logging_steps=5,
        report_to=args.report_to,
        seed=0,
        disable_tqdm=True,
    )
    callbacks = [PeftvizCallback(dataset="bbc-news", runs_dir=f"{folder}/runs")] if args.callback else []
    return Trainer(
        model=hf_trainer.lora_model(names),
        args=training,
        train_dataset=splits["train"],
        eval_dataset={"validation": splits["validation"], "test": splits["test"]},
        data_collator=DataCollatorWithPadding(tokenizer),
        callbacks=callbacks,
    )


def main() -> None:
    args = parse()
    for name in TIMED:
        setattr(PeftvizCallback, name, timed(getattr(PeftvizCallback, name)))
    with tempfile.TemporaryDirectory(prefix="peftviz-callback-cost-") as folder:
        trainer = trainer_for(args, folder)
        profiler = cProfile.Profile() if args.profile else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        trainer.train()
        if profiler:
            profiler.disable()
        train_s = time.perf_counter() - start
    result = {
        "callback": args.callback,
        "report_to": args.report_to,
        "threads": torch.get_num_threads(),
        "train_s": round(train_s, 3),
    }
    if args.callback:
        result["callback_s"] = round(sum(spent.values()), 3)
        result["callback_parts"] = {name: round(seconds, 4) for name, seconds in spent.items()}
    print(json.dumps(result), flush=True)
    if profiler:
        profiler.dump_stats(args.profile)
        pstats.Stats(args.profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
