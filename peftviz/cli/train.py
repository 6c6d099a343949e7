"""`train`: train one method, continue a killed run (--resume), or train at several seeds (--seeds)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from peftviz.cli.common import keep_freed_memory, method_flag, results_row, run_folder
from peftviz.cli.sweeps import (
    add_config_flags,
    given_settings,
    plan_command,
    plan_flags_alone,
    sweep_command,
    sweep_overrides,
)
from peftviz.errors import ConfigError
from peftviz.methods import DEFAULT_METHOD, METHODS, PEFT_PREFIX, method_class
from peftviz.run_config import TrainConfig, over_seeds, preset_config
from peftviz.store.runs import load_run
from peftviz.tables import format_table

HELP = "train one method"
TRAIN_ONE_WORDS = {
    "skip": "run {run} already holds these settings and seed, complete: nothing trained (--force trains a repeat)",
    "resume": "resumed run {run}, which had stopped",
    "train": "new run {run}",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--method",
        type=method_flag,
        default=DEFAULT_METHOD,
        metavar="METHOD",
        help=f"one of {', '.join(METHODS)}; or {PEFT_PREFIX}<TYPE> for any tuner of Hugging Face peft "
        f"({PEFT_PREFIX}RANDLORA)",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a method option; `python -m peftviz methods` lists each method's, with help",
    )
    parser.add_argument(
        "--resume",
        metavar="RUN",
        default=None,
        help="continue a killed run from its last finished epoch, with its own settings: its folder name in "
        "--runs-dir, or its path",
    )
    add_config_flags(parser)


def run(args: argparse.Namespace) -> int:
    """Continue a run (--resume), train one configuration, or with --seeds, sweep over the seeds."""
    plan_flags_alone(args)
    if args.plan:
        return plan_command(args, configs)
    if args.resume:
        return resume(args)
    if args.seeds:
        return sweep_command(args, configs)
    from peftviz.training.engine import is_main_process

    keep_freed_memory()
    return _train_one(configs(args)[0], args, is_main_process)  # one run: its own table and errors


def configs(args: argparse.Namespace) -> list[TrainConfig]:
    """The one configuration the command line gives, over --seeds."""
    overrides = sweep_overrides(args)
    dataset = overrides.get("dataset", "")
    if "," in dataset and not Path(dataset).expanduser().exists():
        raise ConfigError(f"train takes one dataset, not a list ({dataset!r}); compare takes a comma-separated list")
    overrides["method_options"] = parse_method_options(args.method, args.option)
    return over_seeds([preset_config(args.preset, args.method, **overrides)], args.seeds)


def _train_one(config: TrainConfig, args: argparse.Namespace, is_main_process) -> int:
    """One run, as a sweep of one (`peftviz.sweep`): skipped where the store has it complete, resumed where it
    was stopped, unless --force; errors raise (one line, from `main`)."""
    from peftviz.sweep import plan
    from peftviz.sweep.execute import execute
    from peftviz.training.progress import TerminalProgress

    if args.engine != "local":
        raise ConfigError("--engine ray spreads a sweep: give --seeds, or use compare or alpha-grid")
    started = time.perf_counter()
    (item,) = plan([config], args.runs_dir, args.force)
    run = execute(item, args.runs_dir, [], "local", TerminalProgress())  # torch and transformers load here
    if is_main_process():
        print(format_table([results_row(run)]))
        print(f"\n1 run(s) in {(time.perf_counter() - started) / 60:.1f} minutes, stored in {args.runs_dir}")
        repeat = f", a repeat of run {item.repeat_of}: not counted as a seed" if item.repeat_of else ""
        print(TRAIN_ONE_WORDS[item.action].format(run=run.name) + repeat)
    return 0


def resume(args: argparse.Namespace) -> int:
    """`train --resume RUN`: the run continues with its own settings, so other settings are refused."""
    given = sorted(given_settings(args)) + (["--option"] if args.option else []) + (["--seeds"] if args.seeds else [])
    if given:
        raise ConfigError(f"--resume continues a run with its own settings; drop {', '.join(given)}")
    folder = run_folder(args.resume, args.runs_dir)
    from peftviz.sweep.execute import resume_run  # torch and transformers load there
    from peftviz.training.progress import TerminalProgress

    run = resume_run(load_run(folder), TerminalProgress())
    print(format_table([results_row(run)]))
    print(f"\nresumed {run.name}: {run.status}, {run.epochs_done}/{run.config.epochs} epochs, in {folder.parent}")
    return 0


def parse_method_options(method: str, pairs: list[str]) -> dict:
    """["prefix_length=16", ...] -> {"prefix_length": 16}, typed by the method's config fields; ConfigError, one line,
    for a pair that is not NAME=VALUE, an option the method lacks, or a value of another type."""
    from peftviz.options import shown, with_article

    types = method_class(method).config_class.types()
    options = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep:
            raise ConfigError(f"--option {shown(pair)} is not NAME=VALUE")
        if name not in types:
            raise ConfigError(f"{method} has no option {shown(name)}; options: {', '.join(types) or 'none'}")
        parse = types[name]
        if parse is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ConfigError(f"option {name} takes true or false, not {shown(text)}")
            options[name] = text.lower() in ("true", "1")
        else:
            try:
                options[name] = parse(text)
            except ValueError:
                raise ConfigError(f"option {name} takes {with_article(parse.__name__)}, not {shown(text)}") from None
    return options
