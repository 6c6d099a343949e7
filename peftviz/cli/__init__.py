"""Command line: python -m peftviz {train, compare, alpha-grid, probe, runs, methods, report, import, export}.

    python -m peftviz train --method prefix-propagation --dataset bbc-news --preset quick
    python -m peftviz compare --preset quick [--methods all]
    python -m peftviz alpha-grid --preset quick
    python -m peftviz compare --preset paper-long --seeds 3 --plan   # every run, its steps and hours; trains nothing
    python -m peftviz probe --lengths 512,1024,4096 --batch-size 8   # each method's step times on this device
    python -m peftviz runs
    python -m peftviz report --metric ece   # ECE of each run or group, its interval, the significant differences
    python -m peftviz import ./my-lora-adapter --dataset bbc-news   # a peft adapter or HF classifier, evaluated
    python -m peftviz export RUN ./exported   # a run as a peft adapter (or peftviz's own folder)
    accelerate launch --multi_gpu --num_processes 2 -m peftviz train ...   # data-parallel (engine.py)
Every TrainConfig field has a flag (--learning-rate 1e-3, --epochs 5, ...); method options are
given as --option name=value. Errors end in one line naming the problem. `peftviz ...`, the console
command the project's install puts in .venv/bin (scripts/setup.sh), is the same as `python -m peftviz ...`.

The commands are one table, COMMANDS: each one's help line, the function that adds its arguments,
the function that runs it and returns the exit status, and for a training command the
configurations it trains; the parser is built from it and `main` dispatches through it. Each
command is one module of this package (train.py, ..., import_.py), as each page is one file of
pages/; common.py holds what several commands share, sweeps.py what the training commands do.
Importing the package loads no torch: a command loads it in its body, when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from peftviz.cli import alpha_grid, compare, export, import_, methods, probe, report, runs, train
from peftviz.cli.common import OneLineParser, prog
from peftviz.errors import PeftvizError
from peftviz.run_config import TrainConfig


@dataclass(frozen=True)
class Command:
    """A command of the command line: its help line, what adds its arguments, what runs it (to an exit code), and
    for a command that trains, the configurations a command line of it trains (over its seeds)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    configs: Callable[[argparse.Namespace], list[TrainConfig]] | None = None


# The one table of commands: `build_parser` makes a subcommand of each, `main` runs the one given.
COMMANDS = {
    "train": Command(train.HELP, train.add_arguments, train.run, train.configs),
    "compare": Command(compare.HELP, compare.add_arguments, compare.run, compare.configs),
    "alpha-grid": Command(alpha_grid.HELP, alpha_grid.add_arguments, alpha_grid.run, alpha_grid.configs),
    "probe": Command(probe.HELP, probe.add_arguments, probe.run),
    "runs": Command(runs.HELP, runs.add_arguments, runs.run),
    "methods": Command(methods.HELP, methods.add_arguments, methods.run),
    "report": Command(report.HELP, report.add_arguments, report.run),
    "import": Command(import_.HELP, import_.add_arguments, import_.run),
    "export": Command(export.HELP, export.add_arguments, export.run),
}


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command in COMMANDS: a subcommand each, with the help and arguments the table gives."""
    name = prog()
    parser = OneLineParser(prog=name, description=f"Command line: {name} {{{', '.join(COMMANDS)}}}.")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for command_name, command in COMMANDS.items():
        command.add_arguments(subparsers.add_parser(command_name, help=command.help))
    return parser


def configs_of(args: argparse.Namespace) -> list[TrainConfig]:
    """The configurations a parsed train, compare or alpha-grid command line trains, over its seeds (what --plan
    lists); trains nothing."""
    configs = COMMANDS[args.command].configs
    if configs is None:
        raise ValueError(f"{args.command} trains nothing")
    return configs(args)


def main(argv: list[str] | None = None) -> int:
    """The command line (`python -m peftviz`, the `peftviz` console command); returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except KeyboardInterrupt:
        print("\ninterrupted: the current run is kept and lists as incomplete", file=sys.stderr)
        return 130
    except (PeftvizError, ValueError, OSError) as err:  # bad settings, data, models, runs; a stopped training
        print(f"peftviz: error: {err}".splitlines()[0], file=sys.stderr)
        return 1


__all__ = ["COMMANDS", "Command", "build_parser", "configs_of", "main"]
