"""`report`: compare runs or groups of seeds: each metric's mean and interval, which differences are significant,
and (--power) how many seeds or test documents each difference needs; the tables also written as CSV."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from peftviz.calibration.estimators import DEFAULT_METRICS, ESTIMATORS
from peftviz.errors import ConfigError
from peftviz.files import atomic_write
from peftviz.paths import reports_dir, store_dir
from peftviz.store.runs import list_runs

HELP = "compare runs or groups: each metric's mean and interval, and which differences are significant"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "units",
        nargs="*",
        metavar="RUN_OR_GROUP",
        help="run folder names, group keys or method labels (default: every group of the store's most common data "
        "split)",
    )
    parser.add_argument(
        "--metric",
        action="append",
        default=None,
        choices=list(ESTIMATORS),
        dest="metrics",
        help=f"a metric to report; repeat for several (default: {', '.join(DEFAULT_METRICS)})",
    )
    parser.add_argument(
        "--epoch",
        type=int,
        default=None,
        help="judge that epoch's validation predictions (default: the best epoch's test predictions)",
    )
    parser.add_argument(
        "--dataset",
        default=None,
        metavar="DATASET",
        help="only the runs on this dataset (a comparison over several: one report each; default: the store's most "
        "common data split)",
    )
    parser.add_argument(
        "--bins",
        type=int,
        default=10,
        help="bins of the binned estimators (default: 10; paper_ece keeps the paper's 10 equal-width bins)",
    )
    parser.add_argument("--scheme", choices=["width", "mass"], default="width", help="equal-width or equal-mass bins")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default: 1000)")
    parser.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the resampling (default: 0)")
    _add_output_arguments(parser)
    parser.add_argument("--runs-dir", type=Path, default=store_dir())


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """--group-interval, --power, --power-target and --csv."""
    parser.add_argument(
        "--group-interval",
        choices=["bootstrap", "t"],
        default="bootstrap",
        help="groups of seeds: two-level bootstrap over seeds and test examples (default), or the t-interval over "
        "seeds, which leaves out the test set's noise",
    )
    parser.add_argument(
        "--power",
        action="store_true",
        help="and how many seeds, or test documents, each difference needs to be detected (groups of two seeds or "
        "more; PREFIX-power.csv)",
    )
    parser.add_argument(
        "--power-target",
        type=power_target_flag,
        default=0.8,
        metavar="P",
        help="the power --power plans for (default: 0.8), at 0.05 over the pairs (Holm's strictest step)",
    )
    parser.add_argument(
        "--csv",
        type=csv_prefix_flag,
        default=None,
        metavar="PREFIX",
        help=f"write PREFIX-summary.csv and PREFIX-pairs.csv (default: {reports_dir()}/report-<time>)",
    )


def power_target_flag(text: str) -> float:
    """--power-target: a power strictly between 0 and 1."""
    try:
        target = float(text)
    except ValueError:
        target = float("nan")
    if not 0 < target < 1:
        raise argparse.ArgumentTypeError(f"--power-target takes a power between 0 and 1 (0.8), not {text!r}")
    return target


def csv_prefix_flag(text: str) -> Path:
    """--csv: a file name prefix, the folder before it optional (reports/run1: reports/run1-summary.csv, ...)."""
    name = text.rstrip().rsplit(os.sep, 1)[-1]
    if not name or name in (".", "..") or "\n" in text or "\0" in text:
        raise argparse.ArgumentTypeError(f"--csv takes a file name prefix (reports/run1), not {text[:40]!r}")
    return Path(text)


def run(args: argparse.Namespace) -> int:
    from peftviz.analysis import group_stats  # numpy, pandas and scipy; no torch

    settings = group_stats.Settings(
        "test" if args.epoch is None else args.epoch,
        args.bins,
        args.scheme,
        args.resamples,
        args.bootstrap_seed,
        group_interval=args.group_interval,
    )
    group_stats.check_metrics(args.metrics)
    chosen = group_stats.choose(list_runs(args.runs_dir), args.units, args.dataset, settings.which)
    prefix = report_prefix(args.csv)
    units = chosen.units
    result = group_stats.stats_of_groups(units, settings, args.metrics)
    print("\n".join([*chosen.left_out, group_stats.markdown(result)]))
    tables = {"summary": result.summary, "pairs": result.pairs}
    if args.power:
        from peftviz.analysis import power

        tables["power"] = power.power_table(units, settings, args.metrics, target=args.power_target)
        print("\n" + power.markdown(tables["power"]))
    for name, table in tables.items():
        path = Path(f"{prefix}-{name}.csv")
        atomic_write(path, lambda tmp, table=table: table.to_csv(tmp, index=False))
        print(f"wrote {path}")
    return 0


def report_prefix(given: Path | None) -> Path:
    """Where `report` writes its CSV files (PREFIX-summary.csv, ...): its folder made now, before the estimates
    are computed, so a folder that cannot be made is one line, not a lost computation."""
    prefix = given or reports_dir() / f"report-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        prefix.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--csv {prefix}: cannot make its folder {prefix.parent} ({err.strerror})") from None
    return prefix
