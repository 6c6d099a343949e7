"""The tiny-attention page: each head's weights, the averaged head, and what averaging cost.

Everything is read from a run's files (params.safetensors, config.json, summary.json): no model
is built. Per layer and head m (Zhao et al. 2022, appendix A):

    W_Q^(m), W_K^(m), W_V^(m): (D, H)        O^(m): (H, D)

Parameter averaging (eqs. 5–8) keeps one head with the mean W_Q, W_K, W_V and output projection
M·Ō = Σ_m O^(m). `params.safetensors` holds the weights before averaging; the metrics after
averaging are in summary.json under "averaged". `group_averaging_table` summarises the before/after
table over the training seeds of one setting (a `Group`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from peftviz.calibration.stats import LEVEL, t_interval
from peftviz.errors import PeftvizError, RunError
from peftviz.methods.tiny_attention import starting_heads
from peftviz.store.runs import Group, Run, group_runs

MATRICES = ("query", "key", "value", "out")  # W_Q, W_K, W_V, O
SYMBOLS = {"query": "W_Q", "key": "W_K", "value": "W_V", "out": "O"}

HeadWeights = dict[str, np.ndarray]  # "query"/"key"/"value": (M, D, H); "out": (M, H, D)


def applies(run: Run) -> bool:
    """Whether the run's method has heads to average (the tiny-attention adapter) and the run its parameters."""
    return run.has_params and run.method_class.averages_heads


def multi_head_first(runs: list[Run]) -> list[Run]:
    """The runs with heads to average, multi-head runs first (what the page opens on), else in store order."""
    return sorted((run for run in runs if applies(run)), key=lambda run: run.method_config.n_heads == 1)


def head_shape(run: Run) -> tuple[int, int]:
    """(M heads, D head size) from the run's method options, with the method's defaults."""
    if not applies(run):
        raise RunError(f"run {run.name} is {run.config.method if run.config else '?'}: it has no heads to average")
    options = run.method_config
    return options.n_heads, options.head_dim


def _split_layer(stored: dict[str, np.ndarray], n_heads: int, head_dim: int) -> HeadWeights:
    """One adapter's stored weights, query/key/value (M·D, H) and out (H, M·D), split per head."""
    hidden = stored["out"].shape[0]
    split = {name: stored[name].reshape(n_heads, head_dim, hidden) for name in MATRICES[:3]}  # (M, D, H)
    split["out"] = stored["out"].reshape(hidden, n_heads, head_dim).transpose(1, 0, 2)  # (M, H, D)
    return split


def _layer_weights(params: dict, layer: int) -> dict[str, np.ndarray]:
    """{"query", "key", "value", "out"} -> the stored 2-D weight of one layer's adapter, float64."""
    return {name: params[f"method.adapters.{layer}.{name}.weight"].double().numpy() for name in MATRICES}


def _check_shapes(run: Run, layer: int, stored: dict[str, np.ndarray], inner: int) -> None:
    hidden = stored["out"].shape[0]
    expected = {name: (inner, hidden) for name in MATRICES[:3]} | {"out": (hidden, inner)}
    for name, shape in expected.items():
        if stored[name].shape != shape:
            raise RunError(
                f"run {run.name}: layer {layer} {name} weight is {stored[name].shape}, the config's heads need {shape}"
            )


def _n_layers(params: dict) -> int:
    """How many layers' adapters the stored parameters hold."""
    return sum(1 for key in params if key.startswith("method.adapters.") and key.endswith(".query.weight"))


def head_weights(run: Run) -> list[HeadWeights]:
    """Per layer: {"query", "key", "value": (M, D, H), "out": (M, H, D)} as float64 arrays."""
    n_heads, head_dim = head_shape(run)
    params = run.params()
    n_layers = _n_layers(params)
    if n_layers == 0:
        raise RunError(f"run {run.name}: params.safetensors holds no adapter heads (method.adapters.*)")
    layers = []
    for layer in range(n_layers):
        try:
            stored = _layer_weights(params, layer)
        except KeyError as err:
            raise RunError(f"run {run.name}: params.safetensors lacks {err.args[0]}") from err
        _check_shapes(run, layer, stored, n_heads * head_dim)
        layers.append(_split_layer(stored, n_heads, head_dim))
    return layers


def averaged_head(weights: HeadWeights) -> HeadWeights:
    """Eqs. 5–8: the same dict with M = 1: mean W_Q, W_K, W_V (1, D, H) and M·Ō = Σ_m O^(m) (1, H, D)."""
    single = {name: weights[name].mean(axis=0, keepdims=True) for name in MATRICES[:3]}
    single["out"] = weights["out"].sum(axis=0, keepdims=True)
    return single


def head_vectors(weights: HeadWeights) -> np.ndarray:
    """(M, 4·D·H): each head's W_Q, W_K, W_V and O flattened and concatenated."""
    n_heads = weights["query"].shape[0]
    return np.concatenate([weights[name].reshape(n_heads, -1) for name in MATRICES], axis=1)


def mean_similarity(similarity: np.ndarray) -> float:
    """The mean cosine over the pairs of distinct heads of an (M, M) similarity; 1.0 for one head."""
    n_heads = similarity.shape[0]
    if n_heads == 1:
        return 1.0
    return float((similarity.sum() - np.trace(similarity)) / (n_heads * (n_heads - 1)))


def starting_similarity(run: Run) -> list[float] | None:
    """Per layer, the mean head cosine the run started training at: its `init_from` heads, perturbed
    again exactly as in training (same noise). None without `init_from`, or when that file is gone
    or does not fit."""
    options = run.method_config
    if options.n_heads == 1 or not options.init_from or "init_perturbation" not in run.config.method_options:
        return None  # a run before 0.1 became the default did not record its perturbation
    params = run.params()
    try:
        hidden = params["method.adapters.0.out.weight"].shape[0]  # out: (H, M·D)
        adapters = starting_heads(
            options.init_from, _n_layers(params), hidden, options.n_heads, options.head_dim, options.init_perturbation
        )
    except (PeftvizError, OSError, ValueError, KeyError):
        return None
    per_layer = ({name: weight.double().numpy() for name, weight in a.per_head().items()} for a in adapters)
    return [mean_similarity(head_similarity(weights)) for weights in per_layer]


def head_similarity(weights: HeadWeights) -> np.ndarray:
    """(M, M) cosine similarity of the heads' concatenated [W_Q; W_K; W_V; O].

    A head that is all zeros has similarity 0 with every head, itself included.
    """
    vectors = head_vectors(weights)  # (M, 4·D·H)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)  # (M, 1)
    unit = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    similarity = unit @ unit.T
    return np.clip((similarity + similarity.T) / 2, -1.0, 1.0)


@dataclass
class AveragingTable:
    """Before/after averaging. kind: "averaged", "identity" (one head) or "not averaged"."""

    kind: str
    note: str
    rows: list[dict] = field(default_factory=list)  # quantity, before, after, change

    def display_rows(self) -> list[dict]:
        """The rows as text: metrics to 4 decimals, parameter counts as integers, "–" where missing.

        A change too small for 4 decimals is written in scientific notation, never as ±0.0000.
        """
        return [
            {"quantity": row["quantity"], **{col: _display(row[col], row["quantity"], col) for col in COLUMNS}}
            for row in self.rows
        ]

    def changed(self) -> list[str]:
        """The metrics (not the parameter count) whose value averaging changed."""
        return [row["quantity"] for row in self.rows if row["quantity"] in METRICS and row["change"]]

    def styled(self):
        """`display_rows` as a pandas Styler with every changed metric's row highlighted."""
        frame = pd.DataFrame(self.display_rows())
        changed = set(self.changed())

        def highlight(row: pd.Series) -> list[str]:
            return [HIGHLIGHT if row["quantity"] in changed else ""] * len(row)

        return frame.style.apply(highlight, axis=1)

    def change_summary(self) -> str:
        """One sentence: which metrics averaging changed and by how much, or that it changed none."""
        if self.kind != "averaged":
            return ""
        rows = {row["quantity"]: row for row in self.rows}
        changed = [
            f"{quantity} by {_display(rows[quantity]['change'], quantity, 'change')}" for quantity in self.changed()
        ]
        if not changed:
            return "Averaging changed none of the metrics: the heads stayed (nearly) equal."
        return f"Averaging changed {', '.join(changed)} (highlighted)."


COLUMNS = ("before", "after", "change")
METRICS = ("validation accuracy", "validation ECE", "test accuracy", "test ECE")
HIGHLIGHT = "background-color: #fff3bf"  # a pale yellow row: averaging changed this metric
SMALLEST_SHOWN = 5e-5  # below this a change rounds to ±0.0000 at 4 decimals


def _display(value: float | None, quantity: str, column: str) -> str:
    if value is None:
        return "–"
    sign = "+" if column == "change" else ""
    if quantity == "method parameters":
        return f"{value:{sign},.0f}"
    if column == "change" and value and abs(value) < SMALLEST_SHOWN:
        return f"{value:+.1e}"
    return f"{value:{sign}.4f}"


def _row(quantity: str, before, after) -> dict:
    change = after - before if before is not None and after is not None else None
    return {"quantity": quantity, "before": before, "after": after, "change": change}


def _before(run: Run) -> dict:
    best, test = run.best_metrics, run.summary.get("test", {})
    return {
        "validation accuracy": best.get("accuracy"),
        "validation ECE": best.get("ece"),
        "test accuracy": test.get("accuracy"),
        "test ECE": test.get("ece"),
        "method parameters": run.parameters.get("method"),
    }


def _after(averaged: dict) -> dict:
    validation, test = averaged.get("validation", {}), averaged.get("test", {})
    return {
        "validation accuracy": validation.get("accuracy"),
        "validation ECE": validation.get("ece"),
        "test accuracy": test.get("accuracy"),
        "test ECE": test.get("ece"),
        "method parameters": averaged.get("parameters", {}).get("method"),
    }


def averaging_table(run: Run) -> AveragingTable:
    """Validation/test accuracy and ECE and method parameters, before and after head averaging.

    Before: the best epoch's validation metrics and summary["test"]. After: summary["averaged"].
    A one-head run is its own average, so "after" repeats "before".
    """
    n_heads, _ = head_shape(run)
    before = _before(run)
    averaged = run.summary.get("averaged")
    if n_heads == 1:
        kind, note, after = "identity", "One head: averaging is the identity, so nothing changes.", before
    elif averaged:
        kind, after = "averaged", _after(averaged)
        note = f"{n_heads} heads averaged into one after training (eqs. 5–8)."
    else:
        kind, after = "not averaged", dict.fromkeys(before)
        note = f"{n_heads} heads, but this run was not evaluated after averaging (train with average_heads)."
    return AveragingTable(kind, note, [_row(quantity, before[quantity], after[quantity]) for quantity in before])


# ---------------------------------------------------------------------------------------------
# over the seeds of one setting


def run_group(run: Run, runs: list[Run]) -> Group:
    """The group of `runs` (same settings, other training seeds) that `run` belongs to; just `run` if none."""
    return next((group for group in group_runs(runs) if run in group.runs), Group(run.group_key, [run]))


def member_columns(group: Group) -> list[str]:
    """One column name per member, "seed <s>"; a seed trained twice gets the run folder's last 6 characters too."""
    repeated = {seed for seed in group.seeds if group.seeds.count(seed) > 1}
    return [f"seed {run.seed}" + (f" · {run.name[-6:]}" if run.seed in repeated else "") for run in group.runs]


def group_averaging_table(group: Group, level: float = LEVEL) -> pd.DataFrame:
    """The before/after-averaging table of every member, summarised over the training seeds.

    One row per quantity (validation/test accuracy and ECE, method parameters) and stage ("before",
    "after", "change" = after - before of the same seed). mean: the mean over the seeds that have
    the value; low, high: the `level` Student t interval of that mean, cut to the quantity's range
    (`quantity_range`; NaN for fewer than two seeds); n: those seeds; then one column per member
    (`member_columns`) with its own value (NaN where it has none: e.g. a run not evaluated after averaging).
    """
    tables = [{row["quantity"]: row for row in averaging_table(run).rows} for run in group.runs]
    columns = member_columns(group)
    rows = [
        _seed_row(quantity, stage, [table[quantity][stage] for table in tables], columns, level)
        for quantity in tables[0]
        for stage in COLUMNS
    ]
    return pd.DataFrame(rows, columns=["quantity", "stage", "mean", "low", "high", "n", *columns])


def quantity_range(quantity: str, stage: str) -> tuple[float, float]:
    """Where a quantity's mean lies: a score (accuracy, ECE) in [0, 1], its change in [-1, 1]; a count of
    parameters at 0 or more. A t-interval over two or three seeds runs far past these; cut to them, it
    still holds the mean, and the true mean whenever the whole interval did (it lies in the range)."""
    if quantity in METRICS:
        return (-1.0, 1.0) if stage == "change" else (0.0, 1.0)
    return (-np.inf, np.inf) if stage == "change" else (0.0, np.inf)


def _seed_row(quantity: str, stage: str, values: list, columns: list[str], level: float) -> dict:
    """mean, low, high and n over the values that are present (NaNs and n = 0 when none is), then each seed's."""
    present = [float(value) for value in values if value is not None]
    mean, low, high = t_interval(present, level) if present else (np.nan,) * 3
    low, high = np.clip([low, high], *quantity_range(quantity, stage)).tolist()  # NaN stays NaN
    seeds = {column: np.nan if value is None else value for column, value in zip(columns, values)}
    return {"quantity": quantity, "stage": stage, "mean": mean, "low": low, "high": high, "n": len(present), **seeds}
