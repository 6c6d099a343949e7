"""How long the light entry points take to start, and what they import.

    .venv/bin/python benchmarks/startup.py [--runs 7]

Times each command as a whole process (`python -m peftviz --help` and friends) over several runs
and prints min / median / max wall seconds, and whether torch was imported (a test checks the
imports; timings live here, never in unit tests).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "python -m peftviz --help": [sys.executable, "-m", "peftviz", "--help"],
    "python -m peftviz compare --help": [sys.executable, "-m", "peftviz", "compare", "--help"],
    "import peftviz.calibration.metrics": [sys.executable, "-c", "import peftviz.calibration.metrics"],
    "python -c pass (the interpreter alone)": [sys.executable, "-c", "pass"],
}
TORCH_CHECK = "import sys, runpy; sys.argv = ['peftviz', '--help']\ntry:\n    runpy.run_module('peftviz', run_name='__main__')\nexcept SystemExit:\n    pass\nprint('torch' in sys.modules)"


def wall_seconds(command: list[str], runs: int) -> list[float]:
    subprocess.run(command, cwd=ROOT, capture_output=True, check=True)  # warm-up: file cache
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, cwd=ROOT, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print("| command | min s | median s | max s |\n|---|---|---|---|")
    for name, command in COMMANDS.items():
        times = wall_seconds(command, args.runs)
        print(f"| `{name}` | {min(times):.2f} | {statistics.median(times):.2f} | {max(times):.2f} |")
    loaded = subprocess.run([sys.executable, "-c", TORCH_CHECK], cwd=ROOT, capture_output=True, text=True, check=True)
    print(f"\n`--help` imports torch: {loaded.stdout.strip().splitlines()[-1]}")


if __name__ == "__main__":
    main()
