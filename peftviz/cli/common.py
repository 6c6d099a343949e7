"""What several commands share: the one-line parser, the program's name, argument types (a count, a device, a
method, a list of methods), the flags of TrainConfig's settings, a run named on the command line, the results table
of a trained run, and the allocator setting of a training process."""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from peftviz.errors import ConfigError, RunError
from peftviz.methods import method_class
from peftviz.run_config import METHOD_SETS, TrainConfig
from peftviz.store.runs import Run


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"peftviz: error: {message}\n")


def prog() -> str:
    """How the usage line names the program: `peftviz` when the console command runs, else `python -m peftviz`."""
    return "peftviz" if Path(sys.argv[0]).name == "peftviz" else "python -m peftviz"


def add_setting_flags(parser: argparse.ArgumentParser, names: list[str]) -> None:
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


def count_flag(flag: str, at_most: int) -> Callable[[str], int]:
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


def device_flag(text: str) -> str:
    """A device's name as torch would read it (auto, cpu, cuda, cuda:N); whether this machine has it is checked
    where it is used."""
    from peftviz.run_config import device_problem

    problem = device_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def methods_flag(text: str) -> str:
    """A set of methods (paper, all, ...) or a comma-separated list of methods."""
    if text in METHOD_SETS:
        return text
    for name in text.split(","):
        method_flag(name)
    return text


def method_flag(name: str) -> str:
    """A registered method or `peft:<TYPE>`; argparse shows the one-line reason otherwise."""
    try:
        method_class(name)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return name


def run_folder(text: str, runs_dir: Path) -> Path:
    """A run named on the command line: its path, or its folder name in the store."""
    folder = Path(text) if os.sep in text or text in (".", "..") else runs_dir / text
    if not folder.is_dir():
        raise RunError(f"no run folder {folder}")
    return folder


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
