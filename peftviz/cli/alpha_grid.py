"""`alpha-grid`: train the kernel form (Li et al. 2023, eq. 3) at each α of the paper's grid, or of --alphas."""

from __future__ import annotations

import argparse

from peftviz.cli.sweeps import add_config_flags, sweep_command, sweep_overrides
from peftviz.run_config import TrainConfig, alpha_grid, over_seeds

HELP = "train the kernel form (Li et al. 2023, eq. 3) at each α of the paper's grid"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--alphas", type=float, nargs="+", default=None, help="α values (default: the paper's grid)")
    add_config_flags(parser)


def run(args: argparse.Namespace) -> int:
    return sweep_command(args, configs)


def configs(args: argparse.Namespace) -> list[TrainConfig]:
    """A run at each α, over --seeds."""
    alphas = tuple(args.alphas) if args.alphas else None
    return over_seeds(alpha_grid(args.preset, alphas, **sweep_overrides(args)), args.seeds)
