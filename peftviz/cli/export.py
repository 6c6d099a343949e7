"""`export`: a run written as a Hugging Face peft adapter, or for peftviz's own methods as safetensors and settings,
with a model card (`peftviz.exchange.export`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from peftviz.cli.common import run_folder
from peftviz.methods import PEFT_PREFIX
from peftviz.paths import store_dir
from peftviz.store.runs import load_run

# Which methods export as peft adapters is each method class's `peft_type`; the classes load torch, which --help
# must not, so the help names no method and points to `methods`, whose list shows every method's peft type.
HELP = (
    "write a run as a Hugging Face peft adapter (a run of any method that `methods` lists with a peft type, the "
    f"prompt-learning ones trained with layout=peft, or of {PEFT_PREFIX}<TYPE>) or, for peftviz's own methods, as "
    "safetensors + settings; both with a model card"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="its folder name in --runs-dir, or its path")
    parser.add_argument("folder", metavar="DIR", type=Path, help="a new folder to write")
    parser.add_argument("--runs-dir", type=Path, default=store_dir(), help="the run store (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from peftviz.exchange.export import export_run  # torch, transformers and peft load here

    run = load_run(run_folder(args.run, args.runs_dir))
    folder = export_run(run, args.folder)
    kind = "a Hugging Face peft adapter" if (folder / "adapter_config.json").is_file() else "peftviz's own format"
    print(f"exported run {run.name} ({run.label}) to {folder}, as {kind}, with a model card (README.md)")
    return 0
