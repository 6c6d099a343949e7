"""`import`: a model trained elsewhere (a peft adapter, a Hugging Face classifier folder, a peftviz export)
evaluated on a dataset and stored as a run (`peftviz.exchange.imports`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from peftviz.cli.common import add_setting_flags, results_row
from peftviz.paths import store_dir
from peftviz.run_config import PRESETS
from peftviz.tables import format_table

HELP = (
    "evaluate a model trained elsewhere (a peft adapter, a Hugging Face classifier folder, a peftviz export) on a "
    "dataset and store it as a run"
)
IMPORT_SETTINGS = ["dataset", "limit", "max_length", "data_seed", "seed", "batch_size", "ece_bins", "label", "device"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="a folder or a Hugging Face hub id")
    parser.add_argument(
        "--model",
        default=None,
        metavar="BASE",
        help="the base an adapter goes on (default: its base_model_name_or_path)",
    )
    add_setting_flags(parser, IMPORT_SETTINGS)
    parser.add_argument(
        "--preset",
        choices=list(PRESETS),
        default="quick",
        help="data settings (limit, max_length, batch size; default: quick); a peftviz export defaults to its run's",
    )
    parser.add_argument("--runs-dir", type=Path, default=store_dir(), help="the run store (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from peftviz.exchange.imports import import_model  # torch, transformers and peft load here
    from peftviz.exchange.request import ImportRequest

    settings = {name: getattr(args, name) for name in IMPORT_SETTINGS if getattr(args, name) is not None}
    run = import_model(ImportRequest(args.source, settings, args.preset, args.model), args.runs_dir)
    print(format_table([results_row(run)]))
    imported = run.imported
    print(
        f"\nimported {args.source} ({imported['kind']}, labels matched {imported['labels']}) as run {run.name} "
        f"in {args.runs_dir}"
    )
    return 0
