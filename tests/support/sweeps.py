"""Training the tests' stores the one way peftviz trains a list of runs: a sweep on the local engine."""

from __future__ import annotations

from pathlib import Path


def trained(configs: list, store: Path, progress=None) -> list:
    """The runs of `configs` trained into `store` by `peftviz.sweep.run_sweep` (local engine: the data loaded
    once, in order, a variant started from the run it declares), as `python -m peftviz compare` trains them.
    A run that did not finish complete fails the fixture with its error's first line."""
    from peftviz.sweep import run_sweep

    outcomes = run_sweep(configs, store, "local", run_progress=progress)
    failed = [outcome for outcome in outcomes if outcome.failed]
    if failed:
        raise AssertionError(f"{failed[0].planned.config.run_title}: {failed[0].error}")
    return [outcome.run for outcome in outcomes]
