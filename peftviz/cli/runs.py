"""`runs`: the run store, a row per run, and its groups of seeds."""

from __future__ import annotations

import argparse
from pathlib import Path

from peftviz.analysis.run_labels import run_row
from peftviz.paths import store_dir
from peftviz.store.runs import group_runs, list_runs
from peftviz.tables import format_table

HELP = "list the run store and its groups of seeds"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", type=Path, default=store_dir())


def run(args: argparse.Namespace) -> int:
    runs = list_runs(args.runs_dir)
    print(format_table([run_row(run) for run in runs]))
    from peftviz.analysis.group_stats import group_row  # numpy and pandas; no torch

    print("\nGroups (runs that differ only in the training seed), test numbers as `report` gives them:\n")
    print(format_table([group_row(group) for group in group_runs(runs)]))
    return 0
