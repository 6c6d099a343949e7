"""Run folders written by the store's own writer with made-up predictions: stores for the report and the pages
in milliseconds, no training. Every run of one data seed is judged on the same labels, so runs compare paired."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from peftviz.run_config import preset_config
from peftviz.store.writer import RunWriter

LABELS = ["business", "sport", "tech"]
N_EXAMPLES = 40


def write_run(
    root: Path,
    method: str = "lora",
    seed: int = 0,
    *,
    data_seed: int = 0,
    epochs: int = 2,
    done: int | None = None,
    status: str = "complete",
) -> RunWriter:
    """A run of the smoke preset at `seed` with `done` (default: all) of its `epochs` finished, each epoch better
    than the last. `status`: "complete" (with test predictions), "incomplete" (stopped: its writer gone) or
    "training" (the returned writer still holds the run's lock; close it to stop)."""
    import torch

    config = preset_config("smoke", method, seed=seed, data_seed=data_seed, epochs=epochs)
    parameters = {"total": 10, "trainable": 4, "method": 2, "backbone": 6, "head": 2}
    writer = RunWriter.create(
        root,
        config,
        {"label_names": LABELS, "parameters": parameters, "environment": {"created": f"2026-01-01 {seed:02d}:00"}},
    )
    rng = np.random.default_rng([seed, data_seed, len(method)])
    labels = np.random.default_rng(data_seed).integers(0, len(LABELS), size=N_EXAMPLES)  # (N,) one split
    probs = None
    for epoch in range(1, (epochs if done is None else done) + 1):
        probs = rng.dirichlet(np.ones(len(LABELS)), size=N_EXAMPLES).astype(np.float32)  # (N, C)
        line = {
            "epoch": epoch,
            "micro_f1": 0.3 + 0.1 * epoch,
            "accuracy": 0.3 + 0.1 * epoch,
            "ece": 0.1,
            "seconds": 1.0,
        }
        writer.write_epoch(line, probs, labels)
        writer.write_params({"head.weight": torch.full((3, 4), float(epoch))}, epoch)
    if status == "complete":
        writer.write_predictions("test", probs, labels)
        writer.finish({"params_epoch": epochs, "test": {"accuracy": 0.5, "ece": 0.1}})
    elif status == "incomplete":
        writer.close()
    return writer


def corrupt_run(root: Path, method: str = "lora", seed: int = 0) -> Path:
    """A complete run whose config.json no longer reads: it lists as corrupt."""
    folder = write_run(root, method, seed).path
    (folder / "config.json").write_text("{not json")
    return folder
