"""Do two trainings with the same seed and settings store the same predictions, bit for bit?

Trains a comparison twice into two fresh stores (each in its own process, as a user would run
`python -m peftviz compare` twice), or reads two stores already made, and compares every run's
stored predictions (every epoch's validation set and the test set) between them, matched by label
and seed. Prints one row per run and exits 1 if any differs.

    .venv/bin/python benchmarks/reproducibility.py --preset quick          # ~20 min on 2 CPU cores
    .venv/bin/python benchmarks/reproducibility.py --stores STORE_A STORE_B
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from peftviz.store.runs import list_runs


def train_store(preset: str, methods: str, store: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "peftviz",
        "compare",
        "--preset",
        preset,
        "--methods",
        methods,
        "--runs-dir",
        str(store),
    ]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)


def evaluations(run) -> list[str | int]:
    """Every finished epoch, and the test set once the run is complete."""
    return [*range(1, len(run.metrics) + 1), *(["test"] if run.status == "complete" else [])]


def compare_run(first, second) -> dict:
    """How far apart two runs' stored probabilities are, over every evaluation both stored."""
    shared = [which for which in evaluations(first) if which in evaluations(second)]
    largest = 0.0
    for which in shared:
        a, b = first.predictions(which)[0], second.predictions(which)[0]
        largest = max(largest, float(np.abs(a - b).max()) if a.shape == b.shape else float("inf"))
    same = largest == 0.0 and len(shared) == len(evaluations(first)) == len(evaluations(second))
    return {
        "run": first.label,
        "seed": first.seed,
        "evaluations": len(shared),
        "largest difference": largest,
        "identical": same,
    }


def compare_stores(first: Path, second: Path) -> list[dict]:
    by_key = {(run.label, run.seed): run for run in list_runs(second) if run.metrics}
    rows = []
    for run in list_runs(first):
        other = by_key.get((run.label, run.seed))
        if other is None or not run.metrics:
            rows.append(
                {
                    "run": run.label,
                    "seed": run.seed,
                    "evaluations": 0,
                    "largest difference": float("nan"),
                    "identical": False,
                }
            )
        else:
            rows.append(compare_run(run, other))
    return rows


def print_table(rows: list[dict]) -> None:
    print("| run | seed | evaluations compared | largest |Δp| | identical |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['run']} | {row['seed']} | {row['evaluations']} | {row['largest difference']:.3g} | "
            f"{'yes' if row['identical'] else 'NO'} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--methods", default="paper", help="as compare's --methods")
    parser.add_argument("--stores", nargs=2, type=Path, help="compare these two stores instead of training")
    args = parser.parse_args()
    if args.stores:
        first, second = args.stores
    else:
        scratch = Path(tempfile.mkdtemp(prefix="peftviz-repro-"))
        first, second = scratch / "first", scratch / "second"
        for store in (first, second):
            train_store(args.preset, args.methods, store)
    rows = compare_stores(first, second)
    print_table(rows)
    return 0 if rows and all(row["identical"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
