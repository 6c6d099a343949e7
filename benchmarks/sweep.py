"""Time one sweep of smoke runs with the local engine and on Ray with 2 workers, and Ray's start-up on its own.

    .venv/bin/python benchmarks/sweep.py                     # 4 methods × 2 seeds = 8 smoke runs, 3 repeats
    .venv/bin/python benchmarks/sweep.py --epochs 20         # the same runs, 10 times the training each
    .venv/bin/python benchmarks/sweep.py --repeats 5 --methods lora,bitfit --seeds 4

Each repeat trains the same runs (`sweep.variants.comparison_configs` of the smoke preset at each seed) into a fresh
temporary store each time, so that nothing is skipped: once with `--engine local` (one after another
in this process, torch's default threads), then with `--engine ray` on a Ray started here with 2 CPUs
and one CPU per run (`RayOptions(cpus_per_run=1, gpus_per_run=0)`): 2 runs at a time, one thread each.
Ray is timed in parts: its start-up (`ray.init` plus one trivial task's round trip), the sweep with
Ray already running (its workers import torch and the trainer inside this time, as in a real sweep),
the same sweep again on the same Ray (workers warm: what a longer sweep's later runs see), and
`ray.shutdown()`. Before timing, this process imports torch and the trainer and trains one untimed
run. Prints the machine, each repeat, and the medians as markdown.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from peftviz.run_config import comparison_methods, over_seeds
from peftviz.sweep import RayOptions, run_sweep
from peftviz.sweep.variants import comparison_configs

METHODS = "prefix-tuning,prefix-propagation,lora,bitfit"
PARTS = ("local", "startup", "ray", "ray_warm", "shutdown", "total")


def timed_sweep(configs, engine: str) -> tuple[float, int]:
    """Wall seconds of one sweep into a fresh store, and how many of its runs failed."""
    with tempfile.TemporaryDirectory(prefix="peftviz-sweep-") as store:
        options = RayOptions(cpus_per_run=1, gpus_per_run=0)
        started = time.perf_counter()
        outcomes = run_sweep(configs, Path(store), engine, ray_options=options)
        return time.perf_counter() - started, sum(outcome.failed for outcome in outcomes)


def start_ray() -> float:
    """Seconds to start Ray on this machine (2 CPUs) and get one trivial task back."""
    import ray

    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ray.get(ray.remote(lambda: None).remote())
    return time.perf_counter() - started


def stop_ray() -> float:
    import ray

    started = time.perf_counter()
    ray.shutdown()
    return time.perf_counter() - started


def one_repeat(configs) -> dict:
    local, local_failed = timed_sweep(configs, "local")
    startup = start_ray()
    try:
        sweep, ray_failed = timed_sweep(configs, "ray")
        warm, warm_failed = timed_sweep(configs, "ray")
    finally:
        shutdown = stop_ray()
    return {
        "local": local,
        "startup": startup,
        "ray": sweep,
        "ray_warm": warm,
        "shutdown": shutdown,
        "total": startup + sweep + shutdown,
        "failed": local_failed + ray_failed + warm_failed,
    }


def machine_line() -> str:
    import ray
    import torch

    cpu = platform.processor() or platform.machine()
    return (
        f"{date.today().isoformat()}, {platform.node()}: {os.cpu_count()} cores ({cpu}), torch "
        f"{torch.__version__} with {torch.get_num_threads()} threads, ray {ray.__version__}, no GPU used"
    )


def print_repeats(rows: list[dict]) -> None:
    print("| repeat | local s | ray start-up s | ray sweep s | again, warm s | ray shutdown s | ray total s | failed |")
    print("|---|---|---|---|---|---|---|---|")
    for index, row in enumerate(rows, 1):
        print(f"| {index} | " + " | ".join(f"{row[part]:.1f}" for part in PARTS) + f" | {row['failed']} |")


def print_medians(rows: list[dict], title: str) -> None:
    median = {part: statistics.median(row[part] for row in rows) for part in PARTS}
    print(f"\n| {title}, median of {len(rows)} | wall s | ray / local |\n|---|---|---|")
    lines = [
        ("local engine (one process)", "local"),
        ("ray, 2 workers: the sweep", "ray"),
        ("ray: the same sweep again, workers warm", "ray_warm"),
        ("ray start-up (`ray.init` + 1 trivial task)", "startup"),
        ("ray shutdown", "shutdown"),
        ("ray: start-up + sweep + shutdown", "total"),
    ]
    for name, part in lines:
        ratio = f"{median[part] / median['local']:.2f}" if part in ("local", "ray", "ray_warm", "total") else ""
        print(f"| {name} | {median[part]:.1f} | {ratio} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=METHODS, help="as compare's --methods (default: %(default)s)")
    parser.add_argument("--seeds", type=int, default=2, help="training seeds 0 .. N-1 (default: 2)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per run (default: the smoke preset's 2)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    overrides = {"epochs": args.epochs} if args.epochs else {}
    runs = comparison_configs("smoke", comparison_methods(args.methods), **overrides)
    configs = over_seeds(runs, list(range(args.seeds)))
    timed_sweep(configs[:1], "local")  # untimed: imports torch and the trainer, warms the file cache
    print(machine_line() + "\n", flush=True)
    rows = [one_repeat(configs) for _ in range(args.repeats)]
    print_repeats(rows)
    print_medians(rows, f"{len(configs)} smoke runs of {configs[0].epochs} epochs")
    return 1 if any(row["failed"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
