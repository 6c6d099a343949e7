"""The command line's help texts and first refusals, byte for byte: `python -m peftviz [COMMAND] --help`, and a few
wrong command lines, each run in a subprocess in a fixed environment and compared with its golden file in
tests/cli_help/ (the help on stdout; a refusal's one line on stderr) and its exit status.

A help text that changes on purpose is regenerated, and its diff reviewed, with

    .venv/bin/python -m tests.test_cli_help
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "cli_help"
COMMANDS = ("train", "compare", "alpha-grid", "probe", "runs", "methods", "report", "import", "export")

# name of the golden file -> (the command line after `python -m peftviz`, its exit status)
CASES: dict[str, tuple[list[str], int]] = {
    "peftviz": (["--help"], 0),
    **{command: ([command, "--help"], 0) for command in COMMANDS},
    "error-no-command": ([], 2),
    "error-unknown-command": (["nonsense"], 2),
    "error-missing-argument": (["export"], 2),
    "error-unknown-flag": (["runs", "--nonsense"], 2),
    "error-bad-choice": (["train", "--preset", "nonsense"], 2),
    "error-unknown-method": (["train", "--method", "nonsense"], 2),
    "error-bad-value": (["probe", "--lengths", "1"], 2),
}


def environment() -> dict[str, str]:
    """A fixed environment, nothing inherited but PATH and HOME: argparse wraps at COLUMNS - 2 (it asks
    shutil.get_terminal_size, which reads COLUMNS and LINES before the terminal), text is UTF-8 (α), no colour,
    and the run store's default, which help texts show, is the relative cache/runs."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/"),
        "COLUMNS": "100",
        "LINES": "40",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "NO_COLOR": "1",
        "PYTHON_COLORS": "0",
        "PEFTVIZ_CACHE": "cache",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def run_cli(argv: list[str]) -> tuple[int, bytes, bytes]:
    """(exit status, stdout, stderr) of `python -m peftviz ARGV` in the fixed environment."""
    command = [sys.executable, "-m", "peftviz", *argv]
    done = subprocess.run(command, cwd=ROOT, env=environment(), capture_output=True, timeout=120, check=False)
    return done.returncode, done.stdout, done.stderr


def golden_path(name: str) -> Path:
    return GOLDEN / f"{name}.txt"


@pytest.mark.parametrize("name", list(CASES))
def test_the_help_and_refusals_are_the_golden_ones(name):
    argv, status = CASES[name]
    golden = golden_path(name).read_bytes()
    expected = (status, golden, b"") if status == 0 else (status, b"", golden)
    assert run_cli(argv) == expected


def test_every_command_has_a_golden_help():
    from peftviz.cli import COMMANDS as TABLE

    assert tuple(TABLE) == COMMANDS
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted(CASES)


def regenerate() -> None:
    """Write every golden file anew; refuses a case whose exit status is not the one CASES expects."""
    GOLDEN.mkdir(exist_ok=True)
    for name, (argv, expected) in CASES.items():
        status, out, err = run_cli(argv)
        if status != expected:
            raise SystemExit(f"{name}: exit status {status}, not {expected}\n{err.decode()}")
        golden_path(name).write_bytes(out if status == 0 else err)
        print(f"wrote {golden_path(name).relative_to(ROOT)}")


if __name__ == "__main__":
    regenerate()
