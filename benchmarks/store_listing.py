"""Time listing the run store (`peftviz.store.runs.list_runs`), which the app does whenever the store changes.

    .venv/bin/python benchmarks/store_listing.py --build /tmp/store          # a store of 60 runs × 5 epochs
    .venv/bin/python benchmarks/store_listing.py --list /tmp/store           # time listing it
    PYTHONPATH=<an older checkout> .venv/bin/python benchmarks/store_listing.py --list /tmp/store

Every read is checked against the store's schema: JSON parsed and typed, each epoch's npz headers
and the parameters' safetensors header read. This script says what those checks cost, against an
older checkout's listing of the same store (PYTHONPATH first on the path). The runs are written by
RunWriter with made-up predictions (1,000 examples × 5 classes): no training. Prints markdown.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def build(root: Path, runs: int, epochs: int) -> None:
    import torch

    from peftviz.run_config import preset_config
    from peftviz.store.writer import RunWriter

    rng = np.random.default_rng(0)
    recorded = {"label_names": list("abcde"), "parameters": {"total": 10, "trainable": 4}, "environment": {}}
    for index in range(runs):
        writer = RunWriter.create(root, preset_config("smoke", seed=index), recorded)
        for epoch in range(1, epochs + 1):
            probs = rng.dirichlet(np.ones(5), size=1000).astype(np.float32)
            line = {"epoch": epoch, "micro_f1": 0.1 * epoch, "accuracy": 0.1 * epoch, "ece": 0.05}
            writer.write_epoch(line, probs, rng.integers(0, 5, 1000))
            writer.write_params({"head.weight": torch.zeros(5, 384)}, epoch)
        writer.finish({"params_epoch": epochs, "test": {"accuracy": 0.5}})


def time_listing(root: Path, repeats: int) -> None:
    import peftviz
    from peftviz.store.migrations import stored_config
    from peftviz.store.runs import list_runs

    for config in root.glob("*/config.json"):  # import what reading a config needs (torch, the methods)
        stored_config(json.loads(config.read_text()))
    started = time.perf_counter()
    list_runs(root)  # the first listing of a process: every file read and checked
    first = time.perf_counter() - started
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        found = list_runs(root)
        times.append(time.perf_counter() - started)
    statuses = sorted({run.status for run in found})
    print("| peftviz | runs | statuses | first ms | again: min ms | median ms | max ms |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {Path(peftviz.__file__).parent.parent} | {len(found)} | {', '.join(statuses)} | {1000 * first:.0f} | "
        f"{1000 * min(times):.1f} | {1000 * statistics.median(times):.1f} | {1000 * max(times):.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", type=Path, help="write a store of --runs runs × --epochs epochs here")
    parser.add_argument("--list", type=Path, help="time listing the store here")
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if args.build:
        build(args.build, args.runs, args.epochs)
    if args.list:
        time_listing(args.list, args.repeats)
    if not (args.build or args.list):
        parser.error("give --build DIR, --list DIR or both")


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parent.parent))  # after PYTHONPATH: an older checkout wins
    main()
