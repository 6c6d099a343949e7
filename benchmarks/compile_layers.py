"""Graphs and graph breaks of every registered method's compiled layers (`modeling.compiled`), per encoder family.

    PYTHONPATH=. .venv/bin/python benchmarks/compile_layers.py --out DIR
    PYTHONPATH=. .venv/bin/python benchmarks/compile_layers.py --out DIR --time   # and what inductor saves on a CPU

For each method of the registry and each family (tiny Longformer and BERT encoders built from config, two
layers; the method's default options, prefix length 3 where it has one), the encoder's layers are compiled
with dynamo's "eager" backend (graph breaks are dynamo's, whatever backend makes the kernels; eager makes
none, so the table takes minutes, not an hour) and one training forward and backward runs, in train mode
(dropout's code paths). `count_graphs` reads dynamo's counters: graphs captured (a layer without breaks is
one graph, the first layer of prefix-propagation two: its hook adds the prefix positions) and breaks, with
the reasons dynamo gives. Writes DIR/compile_layers.json and DIR/compile_layers.md (docs/costs.md).

`--time`: on the shipped MiniLM at the quick preset's shape (16 × 64 tokens, float32, this machine's CPU),
a training step (forward, cross-entropy, backward, fused AdamW) of fine-tuning and prefix-propagation,
eager against layers compiled with inductor: the compiled model's first step (the compile), then both
timed in `--pairs` interleaved pairs after 2 warm-ups each; the median of the pairs' ratios and its range.
Writes DIR/compile_time.json and DIR/compile_time.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from peftviz import METHODS, build_classifier, tiny_encoder
from peftviz.files import write_bytes_atomic
from peftviz.modeling.backbones import load_encoder
from peftviz.modeling.compiled import compile_layers, count_graphs
from peftviz.tables import format_table

FAMILIES = ("longformer", "bert")
NAMES = {"longformer": "Longformer", "bert": "BERT"}
PREFIXED = ("prefix-tuning", "prefix-propagation", "kernel-prefix-propagation")


def graphs_of(method: str, family: str) -> dict:
    torch.manual_seed(0)
    encoder = tiny_encoder(family, seed=0, **({"window": 8} if family == "longformer" else {}))
    model = build_classifier(encoder, method, 3, {"prefix_length": 3} if method in PREFIXED else {}).train()
    compile_layers(model.encoder, backend="eager")
    ids = torch.randint(5, 120, (2, 29), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 18:] = 0
    graphs = count_graphs(lambda: model(ids, mask).logits.sum().backward())
    return {"graphs": graphs.graphs, "breaks": graphs.breaks, "reasons": graphs.reasons}


def quick_step(method: str, compiled: bool):
    """() -> one training step of `method` on the MiniLM at 16 × 64; the model's layers compiled or not."""
    torch.manual_seed(0)
    encoder, _ = load_encoder("minilm")
    model = build_classifier(encoder, method, 5, {"prefix_length": 8} if method in PREFIXED else {}).train()
    if compiled:
        compile_layers(model.encoder)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, fused=True)
    generator = torch.Generator().manual_seed(0)
    ids, labels = torch.randint(1000, 20000, (16, 64), generator=generator), torch.randint(0, 5, (16,))
    mask = torch.ones_like(ids)

    def step():
        F.cross_entropy(model(ids, mask).logits, labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def seconds(fn) -> float:
    begun = time.perf_counter()
    fn()
    return time.perf_counter() - begun


def time_row(method: str, pairs: int) -> dict:
    eager, compiled = quick_step(method, False), quick_step(method, True)
    compile_s = seconds(compiled)  # the first step compiles (forward and backward)
    for _ in range(2):
        eager(), compiled()
    times = []
    for index in range(pairs):  # which runs first alternates
        if index % 2 == 0:
            e, c = seconds(eager), seconds(compiled)
        else:
            c, e = seconds(compiled), seconds(eager)
        times.append((e, c))
    ratios = [c / e for e, c in times]
    return {
        "method": method,
        "first_compiled_step_s": compile_s,
        "eager_s": statistics.median(e for e, _ in times),
        "compiled_s": statistics.median(c for _, c in times),
        "ratio": {"median": statistics.median(ratios), "low": min(ratios), "high": max(ratios), "pairs": times},
    }


def time_markdown(meta: dict, rows: list[dict]) -> str:
    heading = f"{meta['date']}; torch {meta['torch']}; CPU, {meta['threads']} threads, float32; `{meta['command']}`"
    table = format_table(
        [
            {
                "method": r["method"],
                "eager step s": f"{r['eager_s']:.3f}",
                "compiled step s": f"{r['compiled_s']:.3f}",
                "compiled / eager: median (range, pairs)": (
                    f"{r['ratio']['median']:.2f} ({r['ratio']['low']:.2f}–{r['ratio']['high']:.2f}, "
                    f"{len(r['ratio']['pairs'])})"
                ),
                "first compiled step s": f"{r['first_compiled_step_s']:.0f}",
            }
            for r in rows
        ]
    )
    return f"{heading}\n\n{table}\n"


def markdown(meta: dict, rows: list[dict]) -> str:
    def cells(row: dict) -> dict:
        reasons = sorted({reason for f in FAMILIES for reason in row[f]["reasons"]})
        return (
            {"method": row["method"]}
            | {f"{NAMES[f]}: graphs / breaks": f"{row[f]['graphs']} / {row[f]['breaks']}" for f in FAMILIES}
            | {"why it breaks": "; ".join(reasons) or "–"}
        )

    return f"{meta['date']}; torch {meta['torch']}; `{meta['command']}`\n\n{format_table([cells(r) for r in rows])}\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--time", action="store_true", help="also time a MiniLM step, eager against inductor")
    parser.add_argument("--pairs", type=int, default=10, help="interleaved timing pairs (--time)")
    args = parser.parse_args(argv)
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "threads": torch.get_num_threads(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    if args.time:  # first, while nothing else has compiled
        timed = [time_row(method, args.pairs) for method in ("fine-tuning", "prefix-propagation")]
        write_bytes_atomic(args.out / "compile_time.json", json.dumps(meta | {"rows": timed}, indent=1).encode())
        write_bytes_atomic(args.out / "compile_time.md", time_markdown(meta, timed).encode())
        print(time_markdown(meta, timed), flush=True)
    rows = []
    for method in METHODS:
        rows.append({"method": method} | {family: graphs_of(method, family) for family in FAMILIES})
        print(markdown(meta, rows).splitlines()[-1], flush=True)
        write_bytes_atomic(args.out / "compile_layers.json", json.dumps(meta | {"rows": rows}, indent=1).encode())
        write_bytes_atomic(args.out / "compile_layers.md", markdown(meta, rows).encode())


if __name__ == "__main__":
    main()
