"""Graphs and graph breaks of every registered method's compiled layers (`modeling.compiled`), per encoder family.

    PYTHONPATH=. .venv/bin/python benchmarks/compile_layers.py --out DIR

For each method of the registry and each family (tiny Longformer and BERT encoders built from config, two
layers; the method's default options, prefix length 3 where it has one), the encoder's layers are compiled
with dynamo's "eager" backend (graph breaks are dynamo's, whatever backend makes the kernels; eager makes
none, so the table takes minutes, not an hour) and one training forward and backward runs, in train mode
(dropout's code paths). `count_graphs` reads dynamo's counters: graphs captured (a layer without breaks is
one graph, the first layer of prefix-propagation two: its hook adds the prefix positions) and breaks, with
the reasons dynamo gives. Writes DIR/compile_layers.json and DIR/compile_layers.md (docs/costs.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import torch

from peftviz import METHODS, build_classifier, tiny_encoder
from peftviz.files import write_bytes_atomic
from peftviz.modeling.compiled import compile_layers, count_graphs

FAMILIES = ("longformer", "bert")
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


def markdown(meta: dict, rows: list[dict]) -> str:
    lines = [
        f"{meta['date']}; torch {meta['torch']}; `{meta['command']}`",
        "",
        "| method | Longformer: graphs / breaks | BERT: graphs / breaks | why it breaks |",
        "|---|---|---|---|",
    ]
    for row in rows:
        cells = [f"{row[f]['graphs']} / {row[f]['breaks']}" for f in FAMILIES]
        reasons = sorted({reason for f in FAMILIES for reason in row[f]["reasons"]})
        lines.append(f"| {row['method']} | {' | '.join(cells)} | {'; '.join(reasons) or '–'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for method in METHODS:
        rows.append({"method": method} | {family: graphs_of(method, family) for family in FAMILIES})
        print(markdown(meta, rows).splitlines()[-1], flush=True)
        write_bytes_atomic(args.out / "compile_layers.json", json.dumps(meta | {"rows": rows}, indent=1).encode())
        write_bytes_atomic(args.out / "compile_layers.md", markdown(meta, rows).encode())


if __name__ == "__main__":
    main()
