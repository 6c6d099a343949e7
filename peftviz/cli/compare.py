"""`compare`: train every method in turn on the same data and split (several datasets: each in turn)."""

from __future__ import annotations

import argparse
from pathlib import Path

from peftviz.cli.common import methods_flag
from peftviz.cli.sweeps import add_config_flags, sweep_command, sweep_overrides
from peftviz.errors import ConfigError
from peftviz.methods import METHODS, PEFT_PREFIX
from peftviz.run_config import TrainConfig, over_seeds
from peftviz.sweep.variants import comparison_configs

HELP = "train every method in turn on the same data and split"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--methods",
        type=methods_flag,
        default=None,
        metavar="METHODS",
        help="paper (the papers' methods, the default), all (every registered method), peft (those built on Hugging "
        "Face peft's layers), long-documents (the four of the paper's long-document table, paper-long's default), "
        f"or a comma-separated list of: {', '.join(METHODS)}, {PEFT_PREFIX}<TYPE>",
    )
    parser.add_argument(
        "--lr-grid",
        action="store_true",
        help="train each method at every learning rate of its paper's search (Appendix B: 5e-4 … 5e-2 for the "
        "prefix methods, 3e-5 and 5e-5 for the whole encoder); a method without a recorded search keeps its one rate",
    )
    add_config_flags(parser)  # its --dataset takes a comma-separated list here (datasets_flag)


def run(args: argparse.Namespace) -> int:
    return sweep_command(args, configs)


def configs(args: argparse.Namespace) -> list[TrainConfig]:
    """Every method's configurations (and learning rates, with --lr-grid) on each dataset, over --seeds."""
    overrides = sweep_overrides(args)
    datasets = datasets_flag(overrides.pop("dataset")) if overrides.get("dataset", "") else None
    return over_seeds(comparison_configs(args.preset, args.methods, datasets, args.lr_grid, **overrides), args.seeds)


def datasets_flag(text: str) -> list[str]:
    """`compare --dataset`: one dataset, or a comma-separated list of them, each a name or an existing file or
    folder (an existing path with a comma in its name is one dataset); one line naming an unknown one."""
    from peftviz.data.loading import known_names  # loads datasets: only when a comparison is planned

    if "," not in text or Path(text).expanduser().exists():
        return [text]
    names = [part.strip() for part in text.split(",")]
    for name in names:
        if not name or (name not in known_names() and not Path(name).expanduser().exists()):
            shown = f"'{name}'" if name else "an empty name"
            raise ConfigError(
                f"--dataset {text!r}: {shown} is not a file, a folder, or one of: {', '.join(known_names())}"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"--dataset lists a dataset twice: {text!r}")
    return names
