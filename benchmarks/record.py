"""Time recording one epoch with many classes: `Recorder.add_epoch` at N examples and C classes, and the same
call with the two estimators as they were before issue 45 (the thing a user had).

    .venv/bin/python benchmarks/record.py                                   # N = 1,000; C = 5,000, 15,000, 50,000
    .venv/bin/python benchmarks/record.py --classes 50000 --repeats 5       # the docs' line
    .venv/bin/python benchmarks/record.py --classes 2000 --examples 200 --before-gb 0.5

Each cell is the median of --repeats `add_epoch` calls on one open run in a temporary store (each call a new
epoch of the same labels; the first call, not timed, warms the imports). "metrics" is the part spent in
`training.inference.evaluation_metrics`; the rest checks the input, takes the softmax of the logits (float32,
as a model hands them) and writes the epoch's npz and metrics line.

"before": the same calls with the Brier score and the classwise ECE computed as before, swapped into the
estimator registry for the measurement: Brier from `np.eye(C)[labels]`, a (C, C) identity (20 GB at
C = 50,000), and the classwise ECE one class at a time. It runs only where the identity fits --before-gb;
elsewhere the cell says how much it would have taken. Both ways compute the same values (checked: the
largest |difference| of the two metrics lines is printed). Prints markdown; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Iterator

import numpy as np

from peftviz.calibration import estimators
from peftviz.calibration.binning import row_bin_totals
from peftviz.record import Recorder, open_run


def old_brier(s) -> np.ndarray:
    """The Brier score as `estimators._brier` computed it before issue 45: a (C, C) identity, indexed."""
    one_hot = np.eye(s.probs.shape[1])[s.labels]
    return np.sum((s.probs - one_hot) ** 2, axis=1)[s.indices].mean(axis=1)


def old_classwise_ece(s) -> np.ndarray:
    """The classwise ECE as `estimators._classwise_ece` computed it before issue 45: one class per pass."""
    per_class = [
        row_bin_totals(s.probs[:, k], s.labels == k, s.indices, s.n_bins, s.scheme).eces()
        for k in range(s.probs.shape[1])
    ]
    return np.stack(per_class, axis=1).mean(axis=1)


@contextlib.contextmanager
def estimators_before() -> Iterator[None]:
    """The registry's brier and classwise_ece swapped for their old code while the block runs."""
    registry = estimators.ESTIMATORS
    kept = {name: registry[name] for name in ("brier", "classwise_ece")}
    registry["brier"] = dataclasses.replace(kept["brier"], resampled=old_brier)
    registry["classwise_ece"] = dataclasses.replace(kept["classwise_ece"], resampled=old_classwise_ece)
    try:
        yield
    finally:
        registry.update(kept)


def epoch_data(n_examples: int, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """labels (N,) int64 and logits (N, C) float32: scaled normal noise, the label's logit raised by 3."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, n_classes, n_examples)
    logits = (rng.normal(size=(n_examples, n_classes)) * 2).astype(np.float32)  # (N, C)
    logits[np.arange(n_examples), labels] += 3
    return labels, logits


def timed_epochs(recorder: Recorder, labels, logits, repeats: int) -> tuple[float, float, dict]:
    """Median seconds of `add_epoch` and of its metrics part, and the last metrics line."""
    from peftviz.training import inference

    spent, computing = [], []
    original = inference.evaluation_metrics

    def metrics_timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            computing.append(time.perf_counter() - started)

    inference.evaluation_metrics = metrics_timed
    try:
        for _ in range(repeats):
            started = time.perf_counter()
            line = recorder.add_epoch(labels, logits=logits)
            spent.append(time.perf_counter() - started)
    finally:
        inference.evaluation_metrics = original
    return statistics.median(spent), statistics.median(computing), line


def measure(n_examples: int, n_classes: int, repeats: int, before: bool) -> tuple[float, float, dict]:
    labels, logits = epoch_data(n_examples, n_classes)
    names = [f"class {k}" for k in range(n_classes)]
    with tempfile.TemporaryDirectory() as store, estimators_before() if before else contextlib.nullcontext():
        recorder = open_run(
            "benchmark", method="bench", model="none", dataset="random", label_names=names, runs_dir=store
        )
        try:
            return timed_epochs(recorder, labels, logits, repeats)
        finally:
            recorder.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--classes", type=int, nargs="+", default=[5000, 15000, 50000], help="C")
    parser.add_argument("--examples", type=int, default=1000, help="N")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before-gb", type=float, default=2.0, help="largest (C, C) identity to build for 'before'")
    args = parser.parse_args()
    measure(10, 3, 1, before=False)  # imports (torch for the environment, scipy) before timing
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}, {args.repeats} repeats\n")
    print("| N | C | add_epoch s | of which metrics s | before: add_epoch s | before: metrics s | max abs difference |")
    print("|---|---|---|---|---|---|---|")
    for n_classes in args.classes:
        now_s, now_metrics_s, line = measure(args.examples, n_classes, args.repeats, before=False)
        identity_gb = n_classes**2 * 8 / 1e9
        if identity_gb > args.before_gb:
            old = f"not run: np.eye(C) is {identity_gb:.1f} GB | | "
        else:
            old_s, old_metrics_s, old_line = measure(args.examples, n_classes, args.repeats, before=True)
            differs = max(abs(line[name] - old_line[name]) for name in line if name != "epoch")
            old = f"{old_s:.2f} | {old_metrics_s:.2f} | {differs:.1e}"
        print(f"| {args.examples} | {n_classes} | {now_s:.2f} | {now_metrics_s:.2f} | {old} |")


if __name__ == "__main__":
    main()
