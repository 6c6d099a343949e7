"""What the CLI's tables and the app's pickers say about runs: table rows, picker labels, timings.

Reads runs as the store gives them (`store.runs`); writes nothing. The labels name what differs
between runs (lr, epochs, heads, data…), not a hash.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from peftviz.data.uploads import dataset_label
from peftviz.run_config import TrainConfig
from peftviz.store.runs import Run


def trained_by(run: Run) -> str | None:
    """The engine and node of each attempt at the run: "ray on node-3", then ", resumed at epoch 2 by local on
    vm" for each resume (`sweep`); None for runs from before attempts were recorded."""
    if run.imported:  # evaluated, not trained, here
        return f"imported ({run.imported['kind']}) from {run.imported['source']}"
    if run.recorded:  # trained by another loop, which recorded it
        return f"recorded by {run.recorded['by']}"
    attempts = run.record.get("attempts") or []
    if not attempts:
        return None
    first, *resumes = attempts
    text = f"{first['engine']} on {first['node']}"
    return text + "".join(f", resumed at epoch {a['from_epoch']} by {a['engine']} on {a['node']}" for a in resumes)


def run_row(run: Run) -> dict:
    """One row of the runs table: what the CLI's `runs` and the app's home page show."""
    config, best = run.config, run.best_metrics
    params = run.parameters
    trainable = params.get("trainable")
    return {
        "run": run.name,
        "method": run.label,
        "seed": run.seed,
        "repeat of": run.repeat_of,  # a forced repeat: the run of the same settings and seed it repeats
        "group": run.group_key if run.status != "corrupt" else None,
        "status": run.status if not run.error else f"{run.status}: {run.error}",
        "trained by": trained_by(run),
        "dataset": dataset_label(config.dataset) if config else "?",
        "model": config.model if config else "?",
        "epochs": f"{run.epochs_done}/{config.epochs if config else '?'}",
        "best accuracy": best.get("accuracy"),
        "ECE": best.get("ece"),
        "test accuracy": run.summary.get("test", {}).get("accuracy"),
        "trainable": trainable,
        "trainable %": 100 * trainable / params["total"] if trainable and params.get("total") else None,
    }


NOT_YET = "not yet"  # a number a run still training (or stopped, to be resumed) has not reached
SHOWN_SCORES = ("best accuracy", "ECE", "test accuracy")  # run_row's scores, in [0, 1]


def shown_run_row(run: Run) -> dict:
    """`run_row` for a table a person reads (Home): its scores as text to three decimals, and a missing
    one said for what it is, "not yet" for a run that has not finished (training or incomplete) and "—"
    for one that never will, where a grid would print None."""
    row = run_row(run)
    pending = run.status in ("training", "incomplete")
    for column in SHOWN_SCORES:
        value = row[column]
        row[column] = f"{value:.3f}" if value is not None else NOT_YET if pending else "—"
    return row


def data_changed(run: Run) -> str | None:
    """One sentence when the data under the run's dataset name is no longer what the run trained on
    (its recorded `data_sha256`), so a page showing its documents says they come from the data as
    it is now. None when it is the same, or the run recorded no hash (older runs, hub data)."""
    recorded = run.record.get("data_sha256")
    if not recorded or run.config is None:
        return None
    from peftviz.data.uploads import data_sha256  # reads the data's files; `datasets` loads here

    now = data_sha256(run.config.dataset)
    if now == recorded:
        return None
    if now is None:
        return f"The data run {run.name} trained on ({run.config.dataset}) can no longer be read."
    return (
        f"The data at {run.config.dataset} has changed since run {run.name} trained on it: the documents "
        "shown come from the data as it is now."
    )


SHORT_NAMES = {
    "learning_rate": "lr",
    "n_heads": "heads",
    "max_length": "length",
    "batch_size": "batch",
    "data_seed": "split seed",
    "effective_batch_size": "effective batch",
    "gradient_checkpointing": "checkpointing",
}


def _label_settings(config: TrainConfig, recorded: dict | None = None) -> dict:
    """The settings a picker may name: the run's and its method's (not links to other runs)."""
    values = {k: v for k, v in config.to_dict().items() if k not in ("method", "label", "method_options", "seed")}
    if recorded:  # a run another loop recorded: only the settings it gave describe it (and what it is of)
        values = {k: v for k, v in values.items() if k in recorded.get("given", []) or k in ("model", "dataset")}
    link = config.method_class.start_option()
    values.update({k: v for k, v in config.method_config.to_dict().items() if k != link})  # defaults filled in
    return values


def _shown_setting(name: str, value) -> str:
    if name == "dataset" and isinstance(value, str) and dataset_label(value) != value:
        value = dataset_label(value)  # an upload: the name it was uploaded under, not its content's hash
    elif isinstance(value, float):
        value = f"{value:g}"
    elif isinstance(value, str) and ("/" in value or os.sep in value):
        value = Path(value).name  # a data file or model folder: its name
    return f"{SHORT_NAMES.get(name, name.replace('_', ' '))} {value}"


def run_labels(runs: list[Run]) -> dict[str, str]:
    """Picker labels, run folder name -> label: the method's label and seed, then the settings in
    which the run differs from other runs of that label (lr, epochs, heads, data...); runs that
    still read alike get their date, then their folder's hash. Names what differs, not a hash."""
    by_label: dict[str, list[Run]] = {}
    for run in runs:
        by_label.setdefault(run.label, []).append(run)
    labels = {}
    for label, members in by_label.items():
        settings = {run.name: _label_settings(run.config, run.recorded) if run.config else {} for run in members}
        names = list(dict.fromkeys(name for values in settings.values() for name in values))
        differing = [n for n in names if len({json.dumps(s.get(n), default=str) for s in settings.values()}) > 1]
        for run in members:
            parts = [label, f"seed {run.seed}", *(_shown_setting(n, settings[run.name].get(n)) for n in differing)]
            labels[run.name] = " · ".join(parts)
    for tie_breaker in (lambda run: run.created[:16].replace("T", " "), lambda run: run.name[-6:]):
        _break_ties(runs, labels, tie_breaker)
    return labels


def _break_ties(runs: list[Run], labels: dict[str, str], extra) -> None:
    seen: dict[str, int] = {}
    for run in runs:
        seen[labels[run.name]] = seen.get(labels[run.name], 0) + 1
    for run in runs:
        if seen[labels[run.name]] > 1 and extra(run):
            labels[run.name] = f"{labels[run.name]} · {extra(run)}"


def measured_minutes(runs: list[Run], settings: dict) -> list[tuple[float, str]]:
    """(minutes, where) of each complete run trained with `settings` (TrainConfig fields, e.g. a
    preset's): its epochs' recorded wall time, and the device and threads it ran on. What a page
    can honestly say a run of these settings takes, here or on the machine that trained the store."""
    found = []
    for run in runs:
        if run.status != "complete" or run.config is None:
            continue
        if any(getattr(run.config, name, None) != value for name, value in settings.items()):
            continue
        environment = run.record.get("environment") or {}
        where = (
            f"{environment.get('device_name') or environment.get('device', '?')}, "
            f"{environment.get('torch_threads', '?')} threads"
        )
        found.append((sum(m.get("seconds", 0.0) for m in run.metrics) / 60, where))
    return found
