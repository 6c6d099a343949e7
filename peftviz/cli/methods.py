"""`methods`: every registered method with what it is, one method's options with their help, or every method's
parameter counts on a model (--counts)."""

from __future__ import annotations

import argparse

from peftviz.cli.common import method_flag, prog
from peftviz.errors import ConfigError
from peftviz.methods import METHODS, PEFT_PREFIX
from peftviz.tables import format_table

HELP = "list the methods, or one method's options with their types, ranges and help"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name",
        nargs="?",
        type=method_flag,
        default=None,
        metavar="METHOD",
        help=f"list this method's options instead of every method: one of {', '.join(METHODS)}, or "
        f"{PEFT_PREFIX}<TYPE> for any tuner of Hugging Face peft",
    )
    parser.add_argument(
        "--method",
        type=method_flag,
        default=None,
        metavar="METHOD",
        help="the same as METHOD, given as a flag (`methods --method NAME` is `methods NAME`)",
    )
    parser.add_argument(
        "--counts",
        metavar="MODEL",
        default=None,
        help="count each method's parameters (backbone, method, head, trainable) at its defaults on "
        "MODEL (minilm, tiny-bert, a folder, ...), for a 5-label head",
    )


def run(args: argparse.Namespace) -> int:
    """Every method with what it is, or one method's options (`methods NAME`, or `--method NAME`) with their help,
    or (--counts MODEL) every method's parameter counts on a model."""
    from peftviz.methods import option_rows, what_it_is

    method = _the_method(args)
    if args.counts:
        from peftviz.classifier import method_counts  # torch and transformers load there

        print(format_table(method_counts(args.counts, [method] if method else list(METHODS))))
        return 0
    if method:
        rows = option_rows(method)
        print(format_table(rows) if rows else f"{method} has no options")
        return 0
    rows = [
        {"method": name, "peft type": cls.peft_type or "–", "what it is": what_it_is(cls)}
        for name, cls in METHODS.items()
    ]
    print(format_table(rows))
    print(f"\nand {PEFT_PREFIX}<TYPE> for any other tuner of Hugging Face peft; options: {prog()} methods NAME")
    return 0


def _the_method(args: argparse.Namespace) -> str | None:
    """The method `methods` is asked about, given as METHOD or as --method (both: the same one)."""
    if args.name and args.method and args.name != args.method:
        raise ConfigError(f"methods takes one method, not {args.name} and --method {args.method}")
    return args.name or args.method
