"""Command line: python -m peftviz {train, compare, alpha-grid, probe, runs, report, import, export}.

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

The commands are one table, COMMANDS: each one's help line, the function that adds its arguments
and the function that runs it and returns the exit status; the parser is built from it and `main`
dispatches through it.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from peftviz.analysis.run_labels import run_row
from peftviz.calibration.estimators import DEFAULT_METRICS, ESTIMATORS
from peftviz.errors import ConfigError, PeftvizError, RunError
from peftviz.files import atomic_write
from peftviz.methods import DEFAULT_METHOD, METHODS, PEFT_PREFIX, method_class
from peftviz.paths import reports_dir, store_dir
from peftviz.store.runs import Run, group_runs, list_runs, load_run
from peftviz.store.schema import ENGINES
from peftviz.sweep import RayOptions, run_sweep
from peftviz.sweep.variants import comparison_configs
from peftviz.tables import first_few, format_table
from peftviz.training.config import (
    METHOD_SETS,
    PRESETS,
    TrainConfig,
    alpha_grid,
    over_seeds,
    parse_seeds,
    preset_config,
)

# settings that are not plain flags: the method has its own flag, and options come as --option
NOT_FLAGS = {"method", "method_options"}
SWEEP_WORDS = (("train", "new"), ("resume", "resumed"), ("skip", "already complete"))
TRAIN_ONE_WORDS = {
    "skip": "run {run} already holds these settings and seed, complete: nothing trained (--force trains a repeat)",
    "resume": "resumed run {run}, which had stopped",
    "train": "new run {run}",
}
MAX_FAILED_STATUS = 100  # a sweep's exit status is the number of runs that failed, up to this


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"peftviz: error: {message}\n")


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    _add_setting_flags(parser, [f.name for f in fields(TrainConfig) if f.name not in NOT_FLAGS])
    parser.add_argument(
        "--seeds", type=_seeds_flag, default=None, metavar="SEEDS",
        help="train at several training seeds: a count (3 = seeds 0, 1, 2) or a list (0,1,2), at most 100; the data "
        "split stays fixed (--data-seed), so the runs form groups and compare paired",
    )  # fmt: skip
    parser.add_argument("--preset", choices=list(PRESETS), default="quick", help="starting values (default: quick)")
    parser.add_argument("--runs-dir", type=Path, default=store_dir(), help="the run store (default: %(default)s)")
    _add_sweep_flags(parser)


def _add_setting_flags(parser: argparse.ArgumentParser, names: list[str]) -> None:
    """A flag for each of these TrainConfig fields, typed and with its help (default None: not given)."""
    help_text, types, choices = TrainConfig.help(), TrainConfig.types(), TrainConfig.choices()
    for f in fields(TrainConfig):
        if f.name not in names:
            continue
        flag = "--" + f.name.replace("_", "-")
        if types[f.name] is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text[f.name])
        elif f.name in choices:
            parser.add_argument(flag, choices=choices[f.name], default=None, help=help_text[f.name])
        else:
            parser.add_argument(flag, type=types[f.name], default=None, metavar=f.name.upper(), help=help_text[f.name])


def _add_sweep_flags(parser: argparse.ArgumentParser) -> None:
    from peftviz.sweep.cost import MAX_PROBE_STEPS

    sweep = parser.add_argument_group("sweeps (compare, alpha-grid, train --seeds)")
    sweep.add_argument("--engine", choices=ENGINES, default="local",
                       help="local: the runs one after another here (default); ray: each run a Ray task")  # fmt: skip
    sweep.add_argument("--address", default=None, metavar="ADDRESS",
                       help="with --engine ray: auto or ray://host:port joins a running cluster (default: Ray starts "
                       "on this machine)")  # fmt: skip
    sweep.add_argument("--cpus-per-run", type=float, default=1.0, metavar="N", help="with --engine ray (default: 1)")
    sweep.add_argument("--gpus-per-run", type=float, default=None, metavar="N",
                       help="with --engine ray (default: 1 where the cluster has GPUs, else 0)")  # fmt: skip
    sweep.add_argument("--retries", type=int, default=3, metavar="N",
                       help="with --engine ray: tries again when a run's worker process dies (default: 3)")  # fmt: skip
    sweep.add_argument("--plan", action="store_true",
                       help="train nothing: list every run (dataset, method, seed, learning rate), its optimizer steps "
                       "and its estimated hours from a step-time probe on this machine's device, and the totals; runs "
                       "complete in the store are left out, and named")  # fmt: skip
    sweep.add_argument("--probe-steps", type=_count_flag("--probe-steps", MAX_PROBE_STEPS), default=None, metavar="N",
                       help="with --plan: timed steps per method and length (default: 3 on a GPU, 1 on a CPU)")  # fmt: skip
    sweep.add_argument("--probe-device", type=_device_flag, default=None, metavar="DEVICE",
                       help="with --plan: the device the probe times (default: the runs' --device)")  # fmt: skip
    sweep.add_argument("--step-times", type=Path, default=None, metavar="FILE",
                       help="with --plan: step times saved by `probe --out` (or benchmarks/gpu.py) on another "
                       "machine, e.g. a GPU, instead of probing here")  # fmt: skip
    sweep.add_argument("--force", action="store_true",
                       help="train every configuration anew, each marked as a repeat where the store has a run of "
                       "its settings and seed; without it, train, compare and alpha-grid skip a configuration with "
                       "a complete run in the store and resume a stopped one")  # fmt: skip


def _seeds_flag(text: str) -> list[int]:
    try:
        return parse_seeds(text)
    except ValueError as err:  # argparse shows an ArgumentTypeError's own message
        raise argparse.ArgumentTypeError(str(err)) from None


def _count_flag(flag: str, at_most: int) -> Callable[[str], int]:
    """An argparse type for a count: an integer in [1, at_most], refused in one line before anything runs."""
    from peftviz.options import shown

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # not an integer, or one of over 4,300 digits
            value = 0
        if not 1 <= value <= at_most:
            raise argparse.ArgumentTypeError(f"{flag} takes an integer in [1, {at_most}], not {shown(text)}")
        return value

    return count


def _device_flag(text: str) -> str:
    """A device's name as torch would read it (auto, cpu, cuda, cuda:N); whether this machine has it is checked
    where it is used."""
    from peftviz.training.config import device_problem

    problem = device_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _methods_flag(text: str) -> str:
    if text in METHOD_SETS:
        return text
    for name in text.split(","):
        _method_flag(name)
    return text


def _method_flag(name: str) -> str:
    """A registered method or `peft:<TYPE>`; argparse shows the one-line reason otherwise."""
    try:
        method_class(name)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return name


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command in COMMANDS: a subcommand each, with the help and arguments the table gives."""
    prog = _prog()
    parser = OneLineParser(prog=prog, description=f"Command line: {prog} {{{', '.join(COMMANDS)}}}.")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name, command in COMMANDS.items():
        command.add_arguments(subparsers.add_parser(name, help=command.help))
    return parser


def _prog() -> str:
    """How the usage line names the program: `peftviz` when the console command runs, else `python -m peftviz`."""
    return "peftviz" if Path(sys.argv[0]).name == "peftviz" else "python -m peftviz"


def _add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--method", type=_method_flag, default=DEFAULT_METHOD, metavar="METHOD",
        help=f"one of {', '.join(METHODS)}; or peft:<TYPE> for any tuner of Hugging Face peft (peft:RANDLORA)",
    )  # fmt: skip
    parser.add_argument(
        "--option", action="append", default=[], metavar="NAME=VALUE",
        help="a method option; `python -m peftviz methods` lists each method's, with help",
    )  # fmt: skip
    parser.add_argument(
        "--resume", metavar="RUN", default=None,
        help="continue a killed run from its last finished epoch, with its own settings: its folder name in "
        "--runs-dir, or its path",
    )  # fmt: skip
    _add_config_flags(parser)


def _add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--methods", type=_methods_flag, default=None, metavar="METHODS",
        help="paper (the papers' methods, the default), all (every registered method), peft (those built on Hugging "
        "Face peft's layers), long-documents (the four of the paper's long-document table, paper-long's default), "
        f"or a comma-separated list of: {', '.join(METHODS)}, peft:<TYPE>",
    )  # fmt: skip
    parser.add_argument(
        "--lr-grid", action="store_true",
        help="train each method at every learning rate of its paper's search (Appendix B: 5e-4 … 5e-2 for the "
        "prefix methods, 3e-5 and 5e-5 for the whole encoder); a method without a recorded search keeps its one rate",
    )  # fmt: skip
    _add_config_flags(parser)  # its --dataset takes a comma-separated list here (_datasets_flag)


def _datasets_flag(text: str) -> list[str]:
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


def _add_alpha_grid_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--alphas", type=float, nargs="+", default=None, help="α values (default: the paper's grid)")
    _add_config_flags(parser)


def _add_runs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", type=Path, default=store_dir())


IMPORT_SETTINGS = ["dataset", "limit", "max_length", "data_seed", "seed", "batch_size", "ece_bins", "label", "device"]


def _add_import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="a folder or a Hugging Face hub id")
    parser.add_argument("--model", default=None, metavar="BASE",
                        help="the base an adapter goes on (default: its base_model_name_or_path)")  # fmt: skip
    _add_setting_flags(parser, IMPORT_SETTINGS)
    parser.add_argument("--preset", choices=list(PRESETS), default="quick",
                        help="data settings (limit, max_length, batch size; default: quick); a peftviz export "
                        "defaults to its run's")  # fmt: skip
    parser.add_argument("--runs-dir", type=Path, default=store_dir(), help="the run store (default: %(default)s)")


def _add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="its folder name in --runs-dir, or its path")
    parser.add_argument("folder", metavar="DIR", type=Path, help="a new folder to write")
    parser.add_argument("--runs-dir", type=Path, default=store_dir(), help="the run store (default: %(default)s)")


def run_folder(text: str, runs_dir: Path) -> Path:
    """A run named on the command line: its path, or its folder name in the store."""
    folder = Path(text) if os.sep in text or text in (".", "..") else runs_dir / text
    if not folder.is_dir():
        raise RunError(f"no run folder {folder}")
    return folder


def import_command(args: argparse.Namespace) -> int:
    from peftviz.exchange.imports import import_model  # torch, transformers and peft load here
    from peftviz.exchange.request import ImportRequest

    settings = {name: getattr(args, name) for name in IMPORT_SETTINGS if getattr(args, name) is not None}
    run = import_model(ImportRequest(args.source, settings, args.preset, args.model), args.runs_dir)
    print(format_table([results_row(run)]))
    imported = run.imported
    print(f"\nimported {args.source} ({imported['kind']}, labels matched {imported['labels']}) as run {run.name} "
          f"in {args.runs_dir}")  # fmt: skip
    return 0


def export_command(args: argparse.Namespace) -> int:
    from peftviz.exchange.export import export_run  # torch, transformers and peft load here

    run = load_run(run_folder(args.run, args.runs_dir))
    folder = export_run(run, args.folder)
    kind = "a Hugging Face peft adapter" if (folder / "adapter_config.json").is_file() else "peftviz's own format"
    print(f"exported run {run.name} ({run.label}) to {folder}, as {kind}, with a model card (README.md)")
    return 0


def _power_target_flag(text: str) -> float:
    """--power-target: a power strictly between 0 and 1."""
    try:
        target = float(text)
    except ValueError:
        target = float("nan")
    if not 0 < target < 1:
        raise argparse.ArgumentTypeError(f"--power-target takes a power between 0 and 1 (0.8), not {text!r}")
    return target


def _add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("units", nargs="*", metavar="RUN_OR_GROUP",
                        help="run folder names, group keys or method labels (default: every group of the store's "
                        "most common data split)")  # fmt: skip
    parser.add_argument("--metric", action="append", default=None, choices=list(ESTIMATORS), dest="metrics",
                        help=f"a metric to report; repeat for several (default: {', '.join(DEFAULT_METRICS)})")  # fmt: skip
    parser.add_argument("--epoch", type=int, default=None,
                        help="judge that epoch's validation predictions (default: the best epoch's test predictions)")  # fmt: skip
    parser.add_argument("--dataset", default=None, metavar="DATASET",
                        help="only the runs on this dataset (a comparison over several: one report each; default: "
                        "the store's most common data split)")  # fmt: skip
    parser.add_argument(
        "--bins",
        type=int,
        default=10,
        help="bins of the binned estimators (default: 10; paper_ece keeps the paper's 10 equal-width bins)",
    )
    parser.add_argument("--scheme", choices=["width", "mass"], default="width", help="equal-width or equal-mass bins")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default: 1000)")
    parser.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the resampling (default: 0)")
    parser.add_argument("--group-interval", choices=["bootstrap", "t"], default="bootstrap",
                        help="groups of seeds: two-level bootstrap over seeds and test examples (default), or the "
                        "t-interval over seeds, which leaves out the test set's noise")  # fmt: skip
    parser.add_argument("--power", action="store_true",
                        help="and how many seeds, or test documents, each difference needs to be detected (groups of "
                        "two seeds or more; PREFIX-power.csv)")  # fmt: skip
    parser.add_argument("--power-target", type=_power_target_flag, default=0.8, metavar="P",
                        help="the power --power plans for (default: 0.8), at 0.05 over the pairs (Holm's strictest step)")  # fmt: skip
    parser.add_argument("--csv", type=_csv_prefix_flag, default=None, metavar="PREFIX",
                        help=f"write PREFIX-summary.csv and PREFIX-pairs.csv (default: {reports_dir()}/report-<time>)")  # fmt: skip
    parser.add_argument("--runs-dir", type=Path, default=store_dir())


def report_command(args: argparse.Namespace) -> int:
    from peftviz.analysis import group_stats  # numpy, pandas and scipy; no torch

    settings = group_stats.Settings("test" if args.epoch is None else args.epoch, args.bins, args.scheme,
                                    args.resamples, args.bootstrap_seed, group_interval=args.group_interval)  # fmt: skip
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


def _csv_prefix_flag(text: str) -> Path:
    """--csv: a file name prefix, the folder before it optional (reports/run1: reports/run1-summary.csv, ...)."""
    name = text.rstrip().rsplit(os.sep, 1)[-1]
    if not name or name in (".", "..") or "\n" in text or "\0" in text:
        raise argparse.ArgumentTypeError(f"--csv takes a file name prefix (reports/run1), not {text[:40]!r}")
    return Path(text)


def report_prefix(given: Path | None) -> Path:
    """Where `report` writes its CSV files (PREFIX-summary.csv, ...): its folder made now, before the estimates
    are computed, so a folder that cannot be made is one line, not a lost computation."""
    prefix = given or reports_dir() / f"report-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        prefix.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--csv {prefix}: cannot make its folder {prefix.parent} ({err.strerror})") from None
    return prefix


def resume(args: argparse.Namespace) -> int:
    """`train --resume RUN`: the run continues with its own settings, so other settings are refused."""
    given = sorted(_overrides(args)) + (["--option"] if args.option else []) + (["--seeds"] if args.seeds else [])
    if given:
        raise ConfigError(f"--resume continues a run with its own settings; drop {', '.join(given)}")
    folder = run_folder(args.resume, args.runs_dir)
    from peftviz.sweep.execute import resume_run  # torch and transformers load there
    from peftviz.training.progress import TerminalProgress

    run = resume_run(load_run(folder), TerminalProgress())
    print(format_table([results_row(run)]))
    print(f"\nresumed {run.name}: {run.status}, {run.epochs_done}/{run.config.epochs} epochs, in {folder.parent}")
    return 0


def _overrides(args: argparse.Namespace) -> dict:
    names = {f.name for f in fields(TrainConfig)} - NOT_FLAGS
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


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


def results_row(run: Run) -> dict:
    """One trained (or imported) run's results: the table train, compare, import and resume print."""
    best, summary = run.best_metrics, run.summary
    averaged = summary.get("averaged", {}).get("validation", {})
    params = run.parameters
    return {
        "method": run.label,
        "seed": run.seed,
        "method params": params["method"],
        "trainable params": params["trainable"],
        "trainable %": 100 * params["trainable"] / params["total"],
        "best epoch": run.best_epoch,
        "val accuracy": best.get("accuracy"),
        "val ECE": best.get("ece"),
        "averaged val accuracy": averaged.get("accuracy"),
        "averaged val ECE": averaged.get("ece"),
        "test accuracy": summary.get("test", {}).get("accuracy"),
        "test ECE": summary.get("test", {}).get("ece"),
        "minutes": sum(m["seconds"] for m in run.metrics) / 60,
    }


def keep_freed_memory() -> None:
    """Let glibc keep the memory a training step frees for the next step, instead of returning it to
    the system and faulting it in again: fine-tuning MiniLM took ~100,000 minor page faults a step
    with glibc's defaults and a few hundred with these, and its step got 8-15% faster on 2 CPU cores
    (benchmarks/profile_training.py). Peak memory is unchanged. Only for the command line's training
    process, not the app's server; nothing where the C library is not glibc."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's malloc.h
    mallopt(M_MMAP_THRESHOLD, 1 << 30)  # blocks under 1 GiB from the heap, not from fresh mappings
    mallopt(M_TRIM_THRESHOLD, 1 << 40)  # never give the heap's top back between steps
    mallopt(M_TOP_PAD, 64 << 20)


def _sweep_configs(args: argparse.Namespace) -> list[TrainConfig]:
    overrides = _overrides(args)
    if args.seeds is not None and "seed" in overrides:
        raise ValueError("give either --seed or --seeds, not both")
    dataset = overrides.get("dataset", "")
    if args.command == "train":
        if "," in dataset and not Path(dataset).expanduser().exists():
            raise ConfigError(
                f"train takes one dataset, not a list ({dataset!r}); compare takes a comma-separated list"
            )
        overrides["method_options"] = parse_method_options(args.method, args.option)
        configs = [preset_config(args.preset, args.method, **overrides)]
    elif args.command == "compare":
        datasets = _datasets_flag(overrides.pop("dataset")) if dataset else None
        configs = comparison_configs(args.preset, args.methods, datasets, args.lr_grid, **overrides)
    else:
        configs = alpha_grid(args.preset, tuple(args.alphas) if args.alphas else None, **overrides)
    return over_seeds(configs, args.seeds)


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


def _sweep_summary(outcomes: list, minutes: float, runs_dir: Path) -> int:
    """The table of the sweep's runs, what failed with its error; the exit status is the number that failed."""
    runs = [outcome.run for outcome in outcomes if outcome.run is not None and outcome.run.metrics]
    print(format_table([results_row(run) for run in runs]))
    failed = [outcome for outcome in outcomes if outcome.failed]
    for line in _failure_lines(failed):
        print(line, file=sys.stderr)
    actions = Counter(outcome.planned.action for outcome in outcomes)
    done = ", ".join(f"{actions[a]} {word}" for a, word in SWEEP_WORDS if actions[a])
    print(f"\n{len(outcomes)} run(s) ({done}) in {minutes:.1f} minutes, {len(failed)} failed, stored in {runs_dir}")
    return min(len(failed), MAX_FAILED_STATUS)


def _failure_lines(failed: list) -> list[str]:
    """One line per distinct error, naming the runs it stopped: the paper's table offline, 36 runs on three
    datasets not available here, is three lines, not 36."""
    titles_by_error: dict[str, list[str]] = {}
    for outcome in failed:
        titles_by_error.setdefault(outcome.error, []).append(outcome.planned.config.run_title)
    return [f"failed: {first_few(titles)}: {error}" for error, titles in titles_by_error.items()]


def runs_command(args: argparse.Namespace) -> int:
    runs = list_runs(args.runs_dir)
    print(format_table([run_row(run) for run in runs]))
    from peftviz.analysis.group_stats import group_row  # numpy and pandas; no torch

    print("\nGroups (runs that differ only in the training seed), test numbers as `report` gives them:\n")
    print(format_table([group_row(group) for group in group_runs(runs)]))
    return 0


def _add_methods_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", type=_method_flag, default=None, metavar="METHOD",
                        help=f"list this method's options instead of every method: one of {', '.join(METHODS)}, or "
                        f"{PEFT_PREFIX}<TYPE> for any tuner of Hugging Face peft")  # fmt: skip
    parser.add_argument("--method", type=_method_flag, default=None, metavar="METHOD",
                        help="the same as METHOD, given as a flag (`methods --method NAME` is `methods NAME`)")  # fmt: skip
    parser.add_argument("--counts", metavar="MODEL", default=None,
                        help="count each method's parameters (backbone, method, head, trainable) at its defaults on "
                        "MODEL (minilm, tiny-bert, a folder, ...), for a 5-label head")  # fmt: skip


def methods_command(args: argparse.Namespace) -> int:
    """`methods`: every method with what it is, or one method's options (`methods NAME`, or `--method NAME`) with
    their help, or (--counts MODEL) every method's parameter counts on a model."""
    from peftviz.methods import option_rows, what_it_is

    method = _the_method(args)
    if args.counts:
        from peftviz.modeling.model import method_counts  # torch and transformers load there

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
    print(f"\nand {PEFT_PREFIX}<TYPE> for any other tuner of Hugging Face peft; options: {_prog()} methods NAME")
    return 0


def _the_method(args: argparse.Namespace) -> str | None:
    """The method `methods` is asked about, given as METHOD or as --method (both: the same one)."""
    if args.name and args.method and args.name != args.method:
        raise ConfigError(f"methods takes one method, not {args.name} and --method {args.method}")
    return args.name or args.method


def plan_command(args: argparse.Namespace) -> int:
    """`--plan` (train, compare, alpha-grid): every run the command would train, its steps and estimated hours, and
    the totals; what it leaves out of them (runs complete in the store) in one line each; trains nothing. The step
    times come from a probe on this machine's device, or from --step-times (`peftviz.sweep.cost`)."""
    from peftviz.sweep import plan as sweep_actions
    from peftviz.sweep.cost import load_step_times, one_line, plan_table, probe_for

    _check_plan_flags(args)
    configs = _sweep_configs(args)
    times = load_step_times(args.step_times) if args.step_times else None
    actions = sweep_actions(configs, args.runs_dir, args.force)
    counted = [item.config for item in actions if item.action != "skip"]
    took = f"read from {one_line(str(args.step_times))}" if args.step_times else ""
    if times is None and counted:
        keep_freed_memory()  # the probe trains a few steps: as fast as a run's
        started = time.perf_counter()
        times = probe_for(counted, args.probe_device, args.probe_steps)  # torch loads there
        took = f"probe took {time.perf_counter() - started:.0f} s"
    plan = plan_table(configs, times, actions=actions)
    print(format_table(plan.rows) + "\n\n" + format_table(plan.totals))
    print("\n".join(["", *plan.said]) if plan.said else "")
    if counted:
        print(f"est. hours: on the probe's device ({times.device}); {took}")
        print("\n".join(times.describe()))
    print("nothing trained (--plan)")
    return 0


def _check_plan_flags(args: argparse.Namespace) -> None:
    """Refuse, before any work, a plan's flags that would be ignored: --resume, and the probe's with --step-times."""
    if getattr(args, "resume", None):
        raise ConfigError("--plan lists the runs a command would start; drop --resume")
    probe_flags = [flag for flag, value in (("--probe-steps", args.probe_steps), ("--probe-device", args.probe_device))
                   if value is not None]  # fmt: skip
    if args.step_times and probe_flags:
        raise ConfigError(f"--step-times replaces the probe: drop {' and '.join(probe_flags)}")


def _plan_flags_alone(args: argparse.Namespace) -> None:
    """--probe-steps, --probe-device and --step-times only shape a --plan: given without one, one line, not ignored."""
    given = [flag for flag in ("probe_steps", "probe_device", "step_times") if getattr(args, flag, None) is not None]
    if given and not args.plan:
        raise ConfigError(f"--{given[0].replace('_', '-')} is for --plan: add --plan, or drop it to train")


def _lengths_flag(text: str) -> list[int]:
    from peftviz.options import shown
    from peftviz.sweep.cost import MAX_PROBE_LENGTHS
    from peftviz.training.config import MAX_LENGTH

    parts = [part.strip() for part in text.split(",") if part.strip()]
    numbers = all(part.isascii() and part.isdigit() and len(part) <= 9 for part in parts)
    lengths = [int(part) for part in parts] if numbers and len(parts) <= MAX_PROBE_LENGTHS else []
    if not lengths or not all(2 <= n <= MAX_LENGTH for n in lengths):
        raise argparse.ArgumentTypeError(f"--lengths takes 1 to {MAX_PROBE_LENGTHS} token counts in [2, {MAX_LENGTH}], "
                                         f"comma-separated (512,1024), not {shown(text)}")  # fmt: skip
    return lengths


def _add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    from peftviz.sweep.cost import CPU_BATCH, CPU_LENGTHS, GPU_LENGTHS, MAX_PROBE_STEPS, RECORDED_ARCHITECTURES
    from peftviz.training.config import MAX_BATCH

    recorded = ", ".join(RECORDED_ARCHITECTURES)
    on_gpu, on_cpu = (",".join(str(n) for n in lengths) for lengths in (GPU_LENGTHS, CPU_LENGTHS))
    parser.add_argument("--model", default=next(iter(RECORDED_ARCHITECTURES)),
                        help=f"encoder (random weights from its config; recorded offline: {recorded}; default: "
                        "%(default)s)")  # fmt: skip
    parser.add_argument("--methods", type=_methods_flag, default="paper", metavar="METHODS",
                        help="paper (default), all, peft, long-documents, or a comma-separated list of methods")  # fmt: skip
    parser.add_argument("--lengths", type=_lengths_flag, default=None, metavar="T,T,...",
                        help=f"tokens per document (default: {on_gpu} on a GPU, {on_cpu} on a CPU)")  # fmt: skip
    parser.add_argument("--batch-size", type=_count_flag("--batch-size", MAX_BATCH), default=None, metavar="B",
                        help=f"default: 8 on a GPU, {CPU_BATCH} on a CPU")  # fmt: skip
    parser.add_argument("--device", type=_device_flag, default="auto",
                        help="auto (CUDA when present), cpu, cuda or cuda:N")  # fmt: skip
    parser.add_argument("--precision", choices=TrainConfig.choices()["precision"], default="auto",
                        help="as a run trains (auto: bf16 on a GPU that has it, else fp32)")  # fmt: skip
    parser.add_argument("--steps", type=_count_flag("--steps", MAX_PROBE_STEPS), default=3,
                        help="timed steps per method and length (default: 3)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="also save the times as JSON, for `--plan --step-times FILE` on another machine")  # fmt: skip


def probe_command(args: argparse.Namespace) -> int:
    """`probe`: each method's training micro-batch, AdamW step and inference batch timed on this machine."""
    from peftviz.sweep.cost import CPU_BATCH, CPU_LENGTHS, GPU_LENGTHS, check_out_path, checked_device, one_line, probe
    from peftviz.training.config import comparison_methods

    if args.out:
        check_out_path(args.out)  # before the probe's minutes, not after
    keep_freed_memory()
    on_cpu = checked_device(args.device, "--device").type == "cpu"
    lengths = args.lengths or (CPU_LENGTHS if on_cpu else GPU_LENGTHS)
    batch = args.batch_size or (CPU_BATCH if on_cpu else 8)
    methods = comparison_methods(args.methods)
    times = probe(args.model, methods, lengths, batch, args.device, args.precision, args.steps)
    print(format_table(times.rows()))
    print("\n" + "\n".join(times.describe()))
    if args.out:
        from peftviz.sweep.cost import save_step_times

        save_step_times(times, args.out)
        print(f"saved to {one_line(str(args.out))}")
    return 0


def train_command(args: argparse.Namespace) -> int:
    """`train`: continue a run (--resume), train one configuration, or with --seeds, sweep over the seeds."""
    _plan_flags_alone(args)
    if args.plan:
        return plan_command(args)
    if args.resume:
        return resume(args)
    if args.seeds:
        return sweep_command(args)
    from peftviz.training.engine import is_main_process

    keep_freed_memory()
    return _train_one(_sweep_configs(args)[0], args, is_main_process)  # one run: its own table and errors


def sweep_command(args: argparse.Namespace) -> int:
    """`compare`, `alpha-grid` and `train --seeds`: every configuration through the sweep; the exit status is the
    number of runs that failed."""
    from peftviz.training.engine import is_main_process
    from peftviz.training.progress import TerminalProgress, TerminalSweep

    _plan_flags_alone(args)
    if args.plan:
        return plan_command(args)
    keep_freed_memory()
    configs = _sweep_configs(args)
    started = time.perf_counter()
    bar = TerminalSweep()
    ray_options = RayOptions(args.address, args.cpus_per_run, args.gpus_per_run, args.retries)
    outcomes = run_sweep(configs, args.runs_dir, args.engine, args.force, ray_options, bar, TerminalProgress())
    bar.close()
    if is_main_process():  # under `accelerate launch`, one table, not one per process
        return _sweep_summary(outcomes, (time.perf_counter() - started) / 60, args.runs_dir)
    return 0


@dataclass(frozen=True)
class Command:
    """A command of the command line: its help line, what adds its arguments, and what runs it (to an exit code)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# The one table of commands: `build_parser` makes a subcommand of each, `main` runs the one given.
COMMANDS = {
    "train": Command("train one method", _add_train_arguments, train_command),
    "compare": Command("train every method in turn on the same data and split", _add_compare_arguments, sweep_command),
    "alpha-grid": Command("train the kernel form (Li et al. 2023, eq. 3) at each α of the paper's grid",
                          _add_alpha_grid_arguments, sweep_command),
    "probe": Command("time each method's training step and inference on this machine's device, at each length "
                     "(what --plan's estimates rest on)", _add_probe_arguments, probe_command),
    "runs": Command("list the run store and its groups of seeds", _add_runs_arguments, runs_command),
    "methods": Command("list the methods, or one method's options with their types, ranges and help",
                       _add_methods_arguments, methods_command),
    "report": Command("compare runs or groups: each metric's mean and interval, and which differences are "
                      "significant", _add_report_arguments, report_command),
    "import": Command("evaluate a model trained elsewhere (a peft adapter, a Hugging Face classifier folder, a "
                      "peftviz export) on a dataset and store it as a run", _add_import_arguments, import_command),
    "export": Command("write a run as a Hugging Face peft adapter (every peft-based method: LoRA and its variants, "
                      "AdaLoRA, VeRA, LoHa, LoKr, OFT, BOFT, HRA, FourierFT, VB-LoRA, LN-tuning, IA3, peft:<TYPE>; "
                      "prefix, prompt and P-tuning with layout=peft) or, for peftviz's own methods, as safetensors + "
                      "settings; both with a model card",
                      _add_export_arguments, export_command),
}  # fmt: skip


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
