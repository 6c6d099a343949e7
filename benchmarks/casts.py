"""Cast and copy kernels per training step under bf16 autocast, before and after frozen weights are held in bf16.

    PYTHONPATH=. .venv/bin/python benchmarks/casts.py --out DIR [--cases 1024x1] [--hidden 768]

The issue-49 profile of a Longformer-base step on an H100 spent 22% of its CUDA time in copies and
dtype casts (about 1,050 `aten::copy_` a step), mostly autocast casting float32 weights to bf16 on
every forward. What a GPU spends there cannot be timed on a CPU, but how many cast kernels a step
launches can: torch.profiler counts them on the CPU in bf16 autocast exactly as on the GPU (autocast
casts the same tensors on both; only the kernels that run the casts differ).

Model: benchmarks/gpu.py's Longformer-base-4096 shape (12 layers, 12 heads, window 512; random
weights), `--hidden` wide, and its training step (bf16 autocast forward, float32 cross-entropy,
backward, clipping to norm 1, fused AdamW, zero_grad). Per method, "before" is the model as built
(float32 frozen weights) and "after" the same model with `engine.hold_frozen_in(model, bfloat16)`,
as the trainer runs every bf16 run. One warm-up step, then one profiled step; counts are the
profiler's `key_averages()` counts of `aten::_to_copy` (a dtype cast) and `aten::copy_` (every copy,
casts included: `_to_copy` calls it). casts.json also keeps each profiled step's CPU milliseconds; the
table leaves them out: one step on shared cores says nothing of what the casts cost a GPU.
Writes DIR/casts.json and DIR/casts.md (the table for docs/costs.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import torch

from benchmarks.gpu import Bench, encoder_config, make_case, parse_cases, peftviz_model, train_step
from peftviz.files import write_bytes_atomic
from peftviz.modeling.longformer import LongEncoder
from peftviz.tables import format_table
from peftviz.training.engine import hold_frozen_in

METHODS = ("fine-tuning", "prefix-tuning", "prefix-propagation", "kernel-prefix-propagation", "tiny-attention", "lora")
CAST, COPY = KERNELS = ("aten::_to_copy", "aten::copy_")


def profiled_step(model, case, bench: Bench) -> dict:
    """Kernel counts and wall seconds of one training step, after one warm-up step."""
    model.train()
    step, _ = train_step(model, case, bench)
    step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        begun = time.perf_counter()
        step()
        seconds = time.perf_counter() - begun
    counts = {event.key: event.count for event in profiler.key_averages() if event.key in KERNELS}
    return {kernel: counts.get(kernel, 0) for kernel in KERNELS} | {"ms": 1000 * seconds}


def method_row(method: str, encoder: LongEncoder, case, bench: Bench) -> dict:
    row = {"method": method, "case": case.label}
    row["before"] = profiled_step(peftviz_model(encoder, method, bench.device), case, bench)
    model = peftviz_model(encoder, method, bench.device)
    row["held"] = hold_frozen_in(model, torch.bfloat16)
    row["after"] = profiled_step(model, case, bench)
    return row


def markdown(meta: dict, rows: list[dict]) -> str:
    heading = (
        f"{meta['date']}; torch {meta['torch']}; CPU, bf16 autocast, {meta['threads']} threads; `{meta['command']}`"
    )
    table = format_table(
        [
            {
                "T × B": r["case"],
                "method": r["method"],
                "frozen tensors held in bf16": r["held"],
                "`aten::_to_copy` per step, before → after": f"{r['before'][CAST]} → {r['after'][CAST]}",
                "`aten::copy_` per step, before → after": f"{r['before'][COPY]} → {r['after'][COPY]}",
            }
            for r in rows
        ]
    )
    return f"{heading}\n\n{table}\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cases", default="1024x1", help="TxB,... (default 1024x1)")
    parser.add_argument("--hidden", type=int, default=768, help="hidden size (Longformer-base: 768; 12 heads)")
    parser.add_argument("--layers", type=int, default=12, help="encoder layers (Longformer-base: 12)")
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args(argv)
    config = encoder_config(test=False)
    config.hidden_size, config.intermediate_size = args.hidden, 4 * args.hidden
    config.num_hidden_layers = args.layers
    torch.manual_seed(0)
    encoder = LongEncoder(config)
    bench = Bench(torch.device("cpu"), bf16=True, warmups=1, repeats=1, pairs=0, budget_s=float("inf"))
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "hidden": args.hidden,
        "layers": args.layers,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    for T, B in parse_cases(args.cases):
        case = make_case(T, B, config.vocab_size, bench.device)
        for method in args.methods.split(","):
            rows.append(method_row(method, encoder, case, bench))
            print(markdown(meta, rows).splitlines()[-1], flush=True)
            write_bytes_atomic(args.out / "casts.json", json.dumps(meta | {"rows": rows}, indent=1).encode())
            write_bytes_atomic(args.out / "casts.md", markdown(meta, rows).encode())
    print(markdown(meta, rows))


if __name__ == "__main__":
    main()
