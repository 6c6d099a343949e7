"""What one severity of `report --shift` costs a stored run, against the plain test pass and the plan's estimate.

    .venv/bin/python benchmarks/shift.py RUN_FOLDER [--severity 3] [--repeats 3]

For each repeat, on a copy of the run folder without its analysis caches (nothing read from a cache):

- corrupt: every corruption family's copy of the run's test split at --severity (`corrupt_texts`; the
  per-process memo cleared first);
- evaluate: the run's model on those copies, one pass per family (`evaluate._compute`, model rebuilt once,
  files written);
- plain: what a user would run instead, one pass of the same model over the clean test split
  (`training.inference.predict`), timed in the same process right after.

Wall seconds by `time.perf_counter`; medians of the repeats, and the ratio (corrupt + evaluate) / plain. Prints
the machine and a markdown table. (The plan's column "shift s / severity" estimates the evaluate part from a
step-time probe for the datasets it has recorded sizes of: `compare --plan`.)
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from datetime import date
from pathlib import Path

from peftviz.analysis.shift import FAMILIES
from peftviz.analysis.shift import evaluate as shift_evaluate
from peftviz.analysis.shift import shifts as shift_sets
from peftviz.store.runs import load_run


def timed(function, *args):
    started = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - started, result


def one_repeat(folder: Path, severity: int) -> dict[str, float]:
    from peftviz.analysis.uncertainty.model_runs import split_loaders, with_model
    from peftviz.training.inference import predict

    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / folder.name
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("analysis"))
        run = load_run(copy)
        grid = [shift_sets.Shift(family, severity) for family in FAMILIES]
        shift_sets._corrupted.cache_clear()
        corrupt, _ = timed(lambda: [shift_sets.shifted_texts(run, shift) for shift in grid])
        evaluate, _ = timed(shift_evaluate._compute, run, grid, None)

        def plain_pass(model, tokenizer, device) -> float:
            loader = split_loaders(run, tokenizer, ("test",))["test"]
            predict(model, loader, device)  # warm, as the shift's passes are after the first
            return timed(predict, model, loader, device)[0]

        plain = with_model(run, plain_pass)
    return {"corrupt": corrupt, "evaluate": evaluate, "plain": plain}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--severity", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch

    rows = [one_repeat(args.run, args.severity) for _ in range(args.repeats)]
    median = {part: statistics.median(row[part] for row in rows) for part in rows[0]}
    n_docs = len(load_run(args.run).predictions("test")[1])
    print(
        f"{date.today()} · {platform.machine()} · {os.cpu_count()} CPUs · torch threads {torch.get_num_threads()} · "
        f"run {args.run.name} · {n_docs} test documents · severity {args.severity} · {len(FAMILIES)} families"
    )
    print("\n| repeat | corrupt s | evaluate s | plain test pass s |\n|---|---|---|---|")
    for i, row in enumerate(rows, 1):
        print(f"| {i} | {row['corrupt']:.2f} | {row['evaluate']:.2f} | {row['plain']:.2f} |")
    ratio = (median["corrupt"] + median["evaluate"]) / median["plain"]
    print(
        f"| median | {median['corrupt']:.2f} | {median['evaluate']:.2f} | {median['plain']:.2f} |\n\n"
        f"one severity / one plain test pass: {ratio:.1f}×"
    )


if __name__ == "__main__":
    main()
