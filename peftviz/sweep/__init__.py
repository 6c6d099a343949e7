"""Sweeps: the many runs of a comparison, planned against the store and run on an engine (see `sweep.plan`).

`run_sweep` is the one way peftviz trains a list of runs: the CLI's `train`, `compare` and `alpha-grid`, the
app's jobs (`peftviz.app.worker`) and the tests' stores go through it, here (`local`) or on Ray (`ray`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from peftviz.errors import ConfigError
from peftviz.run_config import TrainConfig
from peftviz.store.runs import load_run
from peftviz.store.schema import ENGINES
from peftviz.sweep.execute import Outcome, RayOptions, SweepCallback, SweepProgress
from peftviz.sweep.local import run_local
from peftviz.sweep.plan import Planned, plan

__all__ = ["Outcome", "Planned", "RayOptions", "SweepProgress", "plan", "run_sweep"]


def run_sweep(
    configs: list[TrainConfig],
    runs_dir: Path,
    engine: str = "local",
    force: bool = False,
    ray_options: RayOptions | None = None,
    on_progress: SweepCallback | None = None,
    run_progress=None,
    resume: tuple[Path, ...] | list[Path] = (),
) -> list[Outcome]:
    """Plan the sweep against the store, then train what is missing with `engine`; one Outcome per config.

    `resume`: stopped runs' folders to continue first (the app's "resume a stopped run"), one Outcome each before
    the configs'. A run that fails (or whose worker dies on every retry) is an Outcome with its error; the others
    go on. `run_progress` receives the `Progress` events of runs trained in this process (the local engine)."""
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    runs_dir = Path(runs_dir).resolve()  # Ray's workers may start elsewhere
    planned = _resumed(resume) + _shifted(plan(configs, runs_dir, force), len(resume))
    counts = SweepProgress(total=len(planned))
    report = on_progress or (lambda _: None)
    if engine == "local":
        return run_local(planned, runs_dir, counts, report, run_progress)
    from peftviz.sweep.on_ray import run_on_ray  # ray imports here, only for this engine

    return run_on_ray(planned, runs_dir, ray_options or RayOptions(), counts, report)


def _resumed(folders) -> list[Planned]:
    runs = [load_run(Path(folder)) for folder in folders]
    return [Planned(run.config, "resume", run.path) for run in runs]


def _shifted(planned: list[Planned], offset: int) -> list[Planned]:
    """The plan's indices of configurations waited for, after `offset` items put before it."""
    return [replace(item, after=tuple(i + offset for i in item.after)) for item in planned] if offset else planned
