"""`report`: compare runs or groups of seeds: each metric's mean and interval, which differences are significant,
and (--power) how many seeds or test documents each difference needs; the tables also written as CSV."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from peftviz.analysis.shift import FAMILIES, SEVERITIES
from peftviz.analysis.uncertainty import MAX_PASSES
from peftviz.analysis.uncertainty import METRICS as UNCERTAINTY_METRICS
from peftviz.analysis.uncertainty import NAMES as UNCERTAINTY_NAMES
from peftviz.calibration.estimators import DEFAULT_METRICS, ESTIMATORS
from peftviz.errors import ConfigError
from peftviz.files import atomic_write
from peftviz.paths import reports_dir, store_dir
from peftviz.store.runs import list_runs
from peftviz.store.schema import ENGINES

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
    _add_uncertainty_arguments(parser)
    _add_shift_arguments(parser)
    parser.add_argument("--runs-dir", type=Path, default=store_dir())


def _add_uncertainty_arguments(parser: argparse.ArgumentParser) -> None:
    """--uncertainty and the budget its methods share."""
    parser.add_argument(
        "--uncertainty",
        type=uncertainty_flag,
        default=None,
        metavar="NAMES",
        help=f"what fixes it: each method before and after these uncertainty methods, comma-separated, any subset of "
        f"{','.join(UNCERTAINTY_NAMES)}, with intervals, the paired difference to the plain method and the cost "
        "(PREFIX-uncertainty.csv; default metrics: " + ", ".join(UNCERTAINTY_METRICS) + ")",
    )
    parser.add_argument(
        "--passes",
        type=passes_flag,
        default=3,
        metavar="P",
        help="--uncertainty's equal budget of forward passes: an ensemble of P seeds, MC dropout at T = P, Laplace's "
        "Monte Carlo predictive with P samples (default: 3)",
    )
    parser.add_argument(
        "--ensemble-average",
        choices=["probabilities", "logits"],
        default="probabilities",
        help="what an ensemble averages: its members' probabilities (default) or their logits",
    )
    parser.add_argument(
        "--laplace-predictive",
        choices=["probit", "mc"],
        default="probit",
        help="Laplace's predictive: the probit approximation (one pass, default) or Monte Carlo with P samples",
    )


def _add_shift_arguments(parser: argparse.ArgumentParser) -> None:
    """--shift and what it evaluates."""
    parser.add_argument(
        "--shift",
        action="store_true",
        help="calibration under shift: each method on its test split corrupted by --shift-families at "
        "--shift-severities (and on --shift-dataset), one row per method and severity with the families' spread, "
        "the significant differences between methods (PREFIX-shift.csv, -shift-pairs.csv, -shift-coverage.csv); "
        "with --uncertainty, its methods that need no model run too",
    )
    parser.add_argument(
        "--shift-families",
        type=families_flag,
        default=FAMILIES,
        metavar="NAMES",
        help=f"--shift's corruption families, comma-separated (default: all: {','.join(FAMILIES)})",
    )
    parser.add_argument(
        "--shift-severities",
        type=severities_flag,
        default=SEVERITIES,
        metavar="LIST",
        help=f"--shift's severities, {SEVERITIES[0]} (the test split itself) to {SEVERITIES[-1]}, e.g. 0,3,5 or 0-5 "
        f"(default: 0-{SEVERITIES[-1]})",
    )
    parser.add_argument(
        "--shift-dataset",
        action="append",
        default=None,
        metavar="DATASET",
        help="--shift: also evaluate on this dataset with the runs' labels (a domain shift: a file, folder or "
        "name); repeat for several",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="--shift: evaluate the runs here (default) or one Ray task per run",
    )


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


def uncertainty_flag(text: str) -> tuple[str, ...]:
    """--uncertainty: comma-separated uncertainty methods, each once."""
    from peftviz.analysis.uncertainty.registry import parse_names

    try:
        return parse_names(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--uncertainty: ")) from None


def passes_flag(text: str) -> int:
    """--passes: a whole number of forward passes, 1 to MAX_PASSES."""
    try:
        passes = int(text)
    except ValueError:
        passes = 0
    if not 1 <= passes <= MAX_PASSES:
        raise argparse.ArgumentTypeError(f"--passes takes a whole number from 1 to {MAX_PASSES}, not {text[:40]!r}")
    return passes


def families_flag(text: str) -> tuple[str, ...]:
    from peftviz.analysis.shift.shifts import parse_families

    try:
        return parse_families(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def severities_flag(text: str) -> tuple[int, ...]:
    from peftviz.analysis.shift.shifts import parse_severities

    try:
        return parse_severities(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


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
    if args.shift:
        return _report_shift(args, settings)
    _refuse_shift_flags(args)
    if args.uncertainty:
        return _report_uncertainty(args, settings)
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


def _report_uncertainty(args: argparse.Namespace, settings) -> int:
    """`report --uncertainty`: the "What fixes it" table, one row per method and uncertainty method."""
    import sys

    from peftviz.analysis import group_stats
    from peftviz.analysis.uncertainty import comparison

    if args.epoch is not None:
        raise ConfigError("--uncertainty judges the test split (the best epoch's model): leave out --epoch")
    metrics = group_stats.check_metrics(args.metrics or UNCERTAINTY_METRICS)
    requests = comparison.equal_budget(
        args.uncertainty, args.passes, args.ensemble_average, {"predictive": args.laplace_predictive}
    )
    chosen = group_stats.choose(list_runs(args.runs_dir), args.units, args.dataset, "test")
    prefix = report_prefix(args.csv)
    result = comparison.compare_uncertainty(
        chosen.units, requests, settings, metrics, progress=lambda what: print(f"computing {what}", file=sys.stderr)
    )
    print("\n".join([*chosen.left_out, comparison.markdown(result)]))
    path = Path(f"{prefix}-uncertainty.csv")
    atomic_write(path, lambda tmp: result.table.to_csv(tmp, index=False))
    print(f"wrote {path}")
    return 0


def _refuse_shift_flags(args: argparse.Namespace) -> None:
    given = [
        flag
        for flag, value, default in (
            ("--shift-families", args.shift_families, FAMILIES),
            ("--shift-severities", args.shift_severities, SEVERITIES),
            ("--shift-dataset", args.shift_dataset, None),
            ("--engine", args.engine, "local"),
        )
        if value != default
    ]
    if given:
        raise ConfigError(f"{', '.join(given)} choose what --shift evaluates: add --shift, or leave them out")


def _report_shift(args: argparse.Namespace, settings) -> int:
    """`report --shift`: calibration under shift, one row per method and severity."""
    import sys

    from peftviz.analysis import group_stats
    from peftviz.analysis.shift.shifts import Shift, corruption_grid
    from peftviz.analysis.shift.table import METRICS, markdown, shift_table
    from peftviz.analysis.uncertainty import comparison

    if args.epoch is not None:
        raise ConfigError("--shift judges the test split (the best epoch's model): leave out --epoch")
    metrics = group_stats.check_metrics(args.metrics or METRICS)
    shifts = corruption_grid(args.shift_families, args.shift_severities)
    shifts += [Shift("domain", None, spec) for spec in dict.fromkeys(args.shift_dataset or [])]
    requests = comparison.equal_budget(args.uncertainty, args.passes, args.ensemble_average) if args.uncertainty else []
    chosen = group_stats.choose(list_runs(args.runs_dir), args.units, args.dataset, "test")
    prefix = report_prefix(args.csv)
    result = shift_table(
        chosen.units,
        shifts,
        settings,
        metrics,
        requests,
        engine=args.engine,
        progress=lambda what: print(f"evaluating {what}", file=sys.stderr),
    )
    print("\n".join([*chosen.left_out, markdown(result)]))
    for name, table in (("shift", result.table), ("shift-pairs", result.pairs), ("shift-coverage", result.coverage)):
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
