"""What the training commands (train, compare, alpha-grid) share: their settings' flags and the sweep's, the
configurations over the seeds, a sweep of them with its summary, and `--plan`, which lists them and trains nothing.

Each command gives its own `configs(args)`: the configurations it would train, over --seeds."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from peftviz.cli.common import add_setting_flags, count_flag, device_flag, keep_freed_memory, results_row
from peftviz.errors import ConfigError
from peftviz.paths import store_dir
from peftviz.run_config import PRESETS, TrainConfig, parse_seeds
from peftviz.store.schema import ENGINES
from peftviz.sweep import RayOptions, run_sweep
from peftviz.tables import first_few, format_table

Configs = Callable[[argparse.Namespace], list[TrainConfig]]

# settings that are not plain flags: the method has its own flag, and options come as --option
NOT_FLAGS = {"method", "method_options"}
SWEEP_WORDS = (("train", "new"), ("resume", "resumed"), ("skip", "already complete"))
MAX_FAILED_STATUS = 100  # a sweep's exit status is the number of runs that failed, up to this


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """Every TrainConfig setting's flag, --seeds, --preset, --runs-dir and the sweep's flags."""
    add_setting_flags(parser, [f.name for f in fields(TrainConfig) if f.name not in NOT_FLAGS])
    parser.add_argument(
        "--seeds",
        type=seeds_flag,
        default=None,
        metavar="SEEDS",
        help="train at several training seeds: a count (3 = seeds 0, 1, 2) or a list (0,1,2), at most 100; the data "
        "split stays fixed (--data-seed), so the runs form groups and compare paired",
    )
    parser.add_argument("--preset", choices=list(PRESETS), default="quick", help="starting values (default: quick)")
    parser.add_argument("--runs-dir", type=Path, default=store_dir(), help="the run store (default: %(default)s)")
    add_sweep_flags(parser)


def seeds_flag(text: str) -> list[int]:
    try:
        return parse_seeds(text)
    except ValueError as err:  # argparse shows an ArgumentTypeError's own message
        raise argparse.ArgumentTypeError(str(err)) from None


def add_sweep_flags(parser: argparse.ArgumentParser) -> None:
    from peftviz.sweep.cost import MAX_PROBE_STEPS

    sweep = parser.add_argument_group("sweeps (compare, alpha-grid, train --seeds)")
    sweep.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="local: the runs one after another here (default); ray: each run a Ray task",
    )
    sweep.add_argument(
        "--address",
        default=None,
        metavar="ADDRESS",
        help="with --engine ray: auto or ray://host:port joins a running cluster (default: Ray starts on this machine)",
    )
    sweep.add_argument("--cpus-per-run", type=float, default=1.0, metavar="N", help="with --engine ray (default: 1)")
    sweep.add_argument(
        "--gpus-per-run",
        type=float,
        default=None,
        metavar="N",
        help="with --engine ray (default: 1 where the cluster has GPUs, else 0)",
    )
    sweep.add_argument(
        "--retries",
        type=int,
        default=3,
        metavar="N",
        help="with --engine ray: tries again when a run's worker process dies (default: 3)",
    )
    add_plan_flags(sweep, MAX_PROBE_STEPS)
    sweep.add_argument(
        "--force",
        action="store_true",
        help="train every configuration anew, each marked as a repeat where the store has a run of its settings "
        "and seed; without it, train, compare and alpha-grid skip a configuration with a complete run in the store "
        "and resume a stopped one",
    )


def add_plan_flags(sweep: argparse._ArgumentGroup, max_probe_steps: int) -> None:
    sweep.add_argument(
        "--plan",
        action="store_true",
        help="train nothing: list every run (dataset, method, seed, learning rate), its optimizer steps and its "
        "estimated hours from a step-time probe on this machine's device, and the totals; runs complete in the "
        "store are left out, and named",
    )
    sweep.add_argument(
        "--probe-steps",
        type=count_flag("--probe-steps", max_probe_steps),
        default=None,
        metavar="N",
        help="with --plan: timed steps per method and length (default: 3 on a GPU, 1 on a CPU)",
    )
    sweep.add_argument(
        "--probe-device",
        type=device_flag,
        default=None,
        metavar="DEVICE",
        help="with --plan: the device the probe times (default: the runs' --device)",
    )
    sweep.add_argument(
        "--step-times",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --plan: step times saved by `probe --out` (or benchmarks/gpu.py) on another machine, e.g. a GPU, "
        "instead of probing here",
    )


def given_settings(args: argparse.Namespace) -> dict:
    """The TrainConfig settings given as flags."""
    names = {f.name for f in fields(TrainConfig)} - NOT_FLAGS
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def sweep_overrides(args: argparse.Namespace) -> dict:
    """The settings given as flags, for configurations over --seeds (so not --seed as well)."""
    given = given_settings(args)
    if args.seeds is not None and "seed" in given:
        raise ValueError("give either --seed or --seeds, not both")
    return given


def sweep_command(args: argparse.Namespace, configs: Configs) -> int:
    """`compare`, `alpha-grid` and `train --seeds`: every configuration through the sweep; the exit status is the
    number of runs that failed."""
    from peftviz.training.engine import is_main_process
    from peftviz.training.progress import TerminalProgress, TerminalSweep

    plan_flags_alone(args)
    if args.plan:
        return plan_command(args, configs)
    keep_freed_memory()
    planned = configs(args)
    started = time.perf_counter()
    bar = TerminalSweep()
    ray_options = RayOptions(args.address, args.cpus_per_run, args.gpus_per_run, args.retries)
    outcomes = run_sweep(planned, args.runs_dir, args.engine, args.force, ray_options, bar, TerminalProgress())
    bar.close()
    if is_main_process():  # under `accelerate launch`, one table, not one per process
        return sweep_summary(outcomes, (time.perf_counter() - started) / 60, args.runs_dir)
    return 0


def sweep_summary(outcomes: list, minutes: float, runs_dir: Path) -> int:
    """The table of the sweep's runs, what failed with its error; the exit status is the number that failed."""
    runs = [outcome.run for outcome in outcomes if outcome.run is not None and outcome.run.metrics]
    print(format_table([results_row(run) for run in runs]))
    failed = [outcome for outcome in outcomes if outcome.failed]
    for line in failure_lines(failed):
        print(line, file=sys.stderr)
    actions = Counter(outcome.planned.action for outcome in outcomes)
    done = ", ".join(f"{actions[a]} {word}" for a, word in SWEEP_WORDS if actions[a])
    print(f"\n{len(outcomes)} run(s) ({done}) in {minutes:.1f} minutes, {len(failed)} failed, stored in {runs_dir}")
    return min(len(failed), MAX_FAILED_STATUS)


def failure_lines(failed: list) -> list[str]:
    """One line per distinct error, naming the runs it stopped: the paper's table offline, 36 runs on three
    datasets not available here, is three lines, not 36."""
    titles_by_error: dict[str, list[str]] = {}
    for outcome in failed:
        titles_by_error.setdefault(outcome.error, []).append(outcome.planned.config.run_title)
    return [f"failed: {first_few(titles)}: {error}" for error, titles in titles_by_error.items()]


def plan_command(args: argparse.Namespace, configs: Configs) -> int:
    """`--plan` (train, compare, alpha-grid): every run the command would train, its steps and estimated hours, and
    the totals; what it leaves out of them (runs complete in the store) in one line each; trains nothing. The step
    times come from a probe on this machine's device, or from --step-times (`peftviz.sweep.cost`)."""
    from peftviz.sweep import plan as sweep_actions
    from peftviz.sweep.cost import load_step_times, one_line, plan_table, probe_for

    check_plan_flags(args)
    planned = configs(args)
    times = load_step_times(args.step_times) if args.step_times else None
    actions = sweep_actions(planned, args.runs_dir, args.force)
    counted = [item.config for item in actions if item.action != "skip"]
    took = f"read from {one_line(str(args.step_times))}" if args.step_times else ""
    if times is None and counted:
        keep_freed_memory()  # the probe trains a few steps: as fast as a run's
        started = time.perf_counter()
        times = probe_for(counted, args.probe_device, args.probe_steps)  # torch loads there
        took = f"probe took {time.perf_counter() - started:.0f} s"
    plan = plan_table(planned, times, actions=actions)
    print(format_table(plan.rows) + "\n\n" + format_table(plan.totals))
    print("\n".join(["", *plan.said]) if plan.said else "")
    if counted:
        print(f"est. hours: on the probe's device ({times.device}); {took}")
        print("\n".join(times.describe()))
    print("nothing trained (--plan)")
    return 0


def check_plan_flags(args: argparse.Namespace) -> None:
    """Refuse, before any work, a plan's flags that would be ignored: --resume, and the probe's with --step-times."""
    if getattr(args, "resume", None):
        raise ConfigError("--plan lists the runs a command would start; drop --resume")
    probe_flags = [
        flag
        for flag, value in (("--probe-steps", args.probe_steps), ("--probe-device", args.probe_device))
        if value is not None
    ]
    if args.step_times and probe_flags:
        raise ConfigError(f"--step-times replaces the probe: drop {' and '.join(probe_flags)}")


def plan_flags_alone(args: argparse.Namespace) -> None:
    """--probe-steps, --probe-device and --step-times only shape a --plan: given without one, one line, not ignored."""
    given = [flag for flag in ("probe_steps", "probe_device", "step_times") if getattr(args, flag, None) is not None]
    if given and not args.plan:
        raise ConfigError(f"--{given[0].replace('_', '-')} is for --plan: add --plan, or drop it to train")
