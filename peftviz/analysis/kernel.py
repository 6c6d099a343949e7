"""What the Kernel page computes: λ(C), the α sweep, and the kernel runs trained at each α.

Which runs each part applies to, the methods say: λ(C) and the sweep apply to a method with an
`alpha_sweep_method` (its parameters load into that method, which can evaluate under any α), the
trained-α rows to a method with a `trained_alpha`.

Prefix-propagation's attention splits into a sequence term and a prefix term (Li et al., ACL 2023,
eq. 3 and appendix A). Plain softmax attention weights the prefix term by λ(C), each query's
softmax mass on the prefix keys (eqs. 5–6); the kernel form fixes that weight to a constant α:

    λ(C) = Σ_{k ∈ P} exp(q·k / √d) / Σ_{k ∈ P ∪ C} exp(q·k / √d)
    prefix-propagation:  H = (1 − λ(C)) · Attn(q, C) + λ(C) · Attn(q, P)       (eq. 5)
    kernel form:         H = Attn(q, C) + α · Attn(q, P)                       (eq. 7)

- `lambda_distribution`: λ(C) of every text query (`peftviz.analysis.attention.lambda_c`, eq. 6).
- `alpha_sweep`: a trained run evaluated on its validation split under each α (and under the exact
  λ(C)), cached as JSON in the run folder (below).
- `trained_alpha_rows`: the kernel runs of the store, one row per run at its configured α.
- `trained_alpha_groups`: the same runs grouped over training seeds (`group_runs`): one row per
  group with the mean over seeds, its t-interval, and the members' rows.

No Streamlit and no plotting here: the page calls these and `peftviz.figures.kernel` draws them.

The α-sweep cache, written and read back here (`store.caches` writes it the store's way):

    analysis/alpha_sweep.json   format: SWEEP_FORMAT (another format is not read: computed again)
                                sweeps: α-list key ("0.001,0.005,...") -> {alphas: [α > 0, ...],
                                  best_epoch: n >= 1, code: 64 hex digits (`sweep_code`),
                                  rows: one per α, then the exact λ(C)'s: alpha, accuracy, ece, nll}

Every member is checked on every read (`read_alpha_sweeps`, `check_alpha_sweep`): a file or a sweep
that fails is left out and computed again behind the page's button, which says why. A sound sweep is
used only for the run's current best epoch and for the code that computes the rows: `sweep_code`,
the identity (`analysis.code_identity`) of this module and every peftviz module it imports (the
prediction loop, the data and its validation split, the classifier, λ(C)'s attention, the
estimators of accuracy, ECE and NLL), and of the sweep method's module (how α enters the
attention). A change of any of it computes the sweep again: its rows are what that code gives now.
SWEEP_FORMAT is the file's layout, bumped when the members above change; a change of the code needs
no bump.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from peftviz.analysis.attention import lambda_c
from peftviz.analysis.code_identity import code_identity
from peftviz.calibration.stats import LEVEL, t_interval
from peftviz.classifier import PeftClassifier
from peftviz.errors import RunError
from peftviz.methods import METHODS, alpha_grid_method
from peftviz.methods.kernel_prefix_propagation import EXACT
from peftviz.run_config import TrainConfig, alpha_grid
from peftviz.store import caches, schema
from peftviz.store.runs import Run, group_runs
from peftviz.training.inference import evaluation_metrics, load_trained, predict, run_data, validation_loader

SWEEP_FILE = "alpha_sweep.json"  # a cache of the run folder (`store.caches`)
SWEEP_FORMAT = 2  # the file's layout; 2: each sweep has its code (`sweep_code`)
GRID_PRESET = "quick"  # the page's "train at the grid" button trains this preset
N_LAMBDA_DOCS = 16  # validation documents behind the λ(C) distribution
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)  # whisker, box, median, box, whisker
SWEEP_RANGES = {"accuracy": (0.0, 1.0), "ece": (0.0, 1.0), "nll": (0.0, np.inf)}  # a sweep row's metrics
SWEEP_METRICS = tuple(SWEEP_RANGES)  # accuracy, ece, nll: what the cache's check knows
SWEEP_SHOWN = f"{caches.ANALYSIS_DIR}/{SWEEP_FILE}"  # how a check's message names the file

SweepProgress = Callable[[int, int, str], None]  # (settings done, settings in all, the next one)


# ---------------------------------------------------------------------------------------------
# which runs


def sweepable(run: Run) -> bool:
    """Whether λ(C) and the α sweep apply to the run's method."""
    return run.config is not None and run.method_class.alpha_sweep_method is not None


def propagation_runs(runs: list[Run]) -> list[Run]:
    """The runs λ(C) and the α sweep apply to, with parameters: runs whose α is free first, then runs
    trained at a fixed α."""
    usable = [run for run in runs if run.status != "corrupt" and run.has_params and sweepable(run)]
    return sorted(usable, key=lambda run: run.method_class.trained_alpha(run.method_config) is not None)


def grid_configs() -> list[TrainConfig]:
    """What the page's "train at the grid" button starts: kernel runs at the paper's α grid."""
    return alpha_grid(GRID_PRESET)


def grid_alphas() -> tuple[float, ...]:
    return alpha_grid_method().alpha_grid


def alpha_free(run: Run) -> bool:
    """Whether the run's method weighs its prefixes by λ(C) itself (no α): its exact-λ(C) sweep row is the run."""
    return run.method_class.trained_alpha(run.method_config) is None


def fixed_alpha(run: Run) -> float | None:
    """The α a run trained at, when it stayed fixed (None for free-α methods and trainable α)."""
    options = run.method_config
    alpha = run.method_class.trained_alpha(options)
    return None if alpha is None or run.method_class.alpha_trains(options) else alpha


# ---------------------------------------------------------------------------------------------
# λ(C)


def lambda_distribution(model: PeftClassifier, tokenizer, texts: list[str], max_length: int) -> np.ndarray:
    """λ(C) of every text query of `texts`: (layers, heads, N), N the text tokens of all texts.

    λ(C) is `peftviz.analysis.attention.lambda_c`, the one definition the Attention page reads too
    (eq. 6): a kernel model's λ(C) is what the softmax gives its trained prefixes, not its α.
    Prefix queries and padding are left out.
    """
    batch = tokenizer(texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    mask = batch["attention_mask"].bool()  # (B, T)
    lam = lambda_c(model, batch["input_ids"], batch["attention_mask"])  # (L, H, B, T)
    return lam.reshape(*lam.shape[:2], -1)[..., mask.reshape(-1).numpy()]  # (L, H, N)


def validation_texts(run: Run, n_docs: int = N_LAMBDA_DOCS) -> list[str]:
    """The first `n_docs` validation documents of the run's dataset and split."""
    validation = run_data(run).splits["validation"]
    return list(validation.select(range(min(n_docs, len(validation))))["text"])


def lambda_title(run: Run, n_docs: int = N_LAMBDA_DOCS) -> str:
    """What a λ(C) box plot of the run shows, as its title."""
    return f"λ(C) per layer · {run.label} · first {n_docs} validation documents"


def run_lambda_distribution(run: Run, model: PeftClassifier, tokenizer, n_docs: int = N_LAMBDA_DOCS) -> np.ndarray:
    """λ(C) (layers, heads, N) of a run's model on the first `n_docs` validation documents."""
    return lambda_distribution(model, tokenizer, validation_texts(run, n_docs), run.config.max_length)


def lambda_summary(lam: np.ndarray) -> list[dict]:
    """Quantiles of λ(C) (layers, heads, N): one row per layer (head None = all heads) and per head.

    Each row: layer and head (0-based), q05, q25, median, q75, q95, mean, n.
    """
    n_layers, n_heads, _ = lam.shape
    rows = [_quantile_row(layer, None, lam[layer].reshape(-1)) for layer in range(n_layers)]
    rows += [_quantile_row(layer, head, lam[layer, head]) for layer in range(n_layers) for head in range(n_heads)]
    return rows


def _quantile_row(layer: int, head: int | None, values: np.ndarray) -> dict:
    q05, q25, median, q75, q95 = (float(v) for v in np.quantile(values, QUANTILES))
    return {
        "layer": layer,
        "head": head,
        "q05": q05,
        "q25": q25,
        "median": median,
        "q75": q75,
        "q95": q95,
        "mean": float(values.mean()),
        "n": int(values.size),
    }


# ---------------------------------------------------------------------------------------------
# the α sweep


def sweep_model(run: Run, device: str = "auto") -> tuple[PeftClassifier, object]:
    """(model, tokenizer) with the run's trained parameters under its `alpha_sweep_method`, ready for `with_alpha`.

    A kernel run rebuilds as trained. A prefix-propagation run's parameters have the same names as
    the kernel method's, so they load into a kernel model built with the same prefix options.
    """
    if not sweepable(run):
        raise RunError(f"run {run.name} is {run.config.method if run.config else '?'}: the α sweep does not apply")
    # α is overridden, so a run trained without α loads all the same
    return load_trained(
        run, device, method=run.method_class.alpha_sweep_method, optional=frozenset({"method.log_alpha"})
    )


def evaluate_under_alpha(model: PeftClassifier, loader, alpha: float | str, n_bins: int) -> dict:
    """One sweep row: validation accuracy, ECE and NLL of a kernel model with α overridden."""
    with model.method.with_alpha(alpha):
        probs, labels = predict(model, loader, next(model.parameters()).device)
    metrics = evaluation_metrics(probs, labels, n_bins)
    return {"alpha": alpha, **{name: metrics[name] for name in SWEEP_METRICS}}


def alpha_sweep(run: Run, alphas=None, progress: SweepProgress | None = None) -> list[dict]:
    """A run's validation metrics under each α of `alphas`, then under the exact λ(C).

    Rows {alpha (float, or "exact"), accuracy, ece, nll}. For a prefix-propagation run the exact
    row is the run itself. The result is stored in the run folder (analysis/alpha_sweep.json,
    keyed by the α list) and read back on the next call for the same α list, best epoch and code
    (`sweep_code`).
    """
    alphas = [float(a) for a in (alphas or grid_alphas())]
    cached = cached_alpha_sweep(run, alphas)
    if cached is not None:
        return cached
    progress = progress or (lambda done, total, what: None)
    model, tokenizer = sweep_model(run)
    loader = validation_loader(run, tokenizer)
    settings = [*alphas, EXACT]
    rows = []
    for done, alpha in enumerate(settings):
        progress(done, len(settings), alpha_text(alpha))
        rows.append(evaluate_under_alpha(model, loader, alpha, run.config.ece_bins))
    progress(len(settings), len(settings), "done")
    _store_sweep(run, alphas, rows)
    return rows


def alpha_text(alpha: float | str) -> str:
    """How an α setting is named on the page: "α=0.005" or "exact λ(C)"."""
    return "exact λ(C)" if alpha == EXACT else f"α={alpha:g}"


def _sweep_key(alphas) -> str:
    return ",".join(repr(float(a)) for a in alphas)


def _read_sweeps(run: Run) -> tuple[dict, dict]:
    """(the run's sound stored sweeps by α-list key, why each other one was left out: key -> one line
    naming the file and the field; key None: the whole file). A cache, not a result: what fails its
    check (`check_alpha_sweep`) is computed again (behind the page's button), as the estimates
    cache is, and `_store_sweep` then writes the file anew without it; the page says why."""
    path = caches.cache_path(run.path, SWEEP_FILE)
    if not os.path.lexists(path):
        return {}, {}
    try:
        stored = read_alpha_sweeps(path)
    except RunError as err:
        return {}, {None: str(err)}
    sound, damaged = {}, {}
    for key, entry in stored.items():
        problem = _sweep_problem(key, entry)
        if problem is None:
            sound[key] = entry
        else:
            damaged[key] = problem
    return sound, damaged


def _sweep_problem(key: str, entry) -> str | None:
    """Why a stored sweep fails its check or is not the sweep of the α list its key names; None if sound."""
    try:
        check_alpha_sweep(entry, key, EXACT)
        if key != _sweep_key(entry["alphas"]):
            raise schema.Corrupt(SWEEP_SHOWN, f"{key}: alphas must be the α list its key names")
    except RunError as err:
        return str(err)
    return None


def read_alpha_sweeps(path) -> dict:
    """The sweeps of an α-sweep cache by α-list key, each still to check (`check_alpha_sweep`); {} for
    a file of another format. `schema.Corrupt` when the file is not an object of sweeps."""
    stored = schema.mapping(schema.read_json(path, SWEEP_SHOWN, schema.ANALYSIS_LIMIT), SWEEP_SHOWN, "the file")
    if stored.get("format") != SWEEP_FORMAT:
        return {}
    return schema.mapping(stored.get("sweeps", {}), SWEEP_SHOWN, "sweeps")


def check_alpha_sweep(entry, key: str, exact: str) -> dict:
    """One sweep of the α-sweep cache: {"alphas": [α > 0, ...], "best_epoch": n >= 1, "rows", "code"},
    whose rows are one per α in order, then the one under the exact λ(C) (alpha `exact`), each with
    accuracy, ece and nll in SWEEP_RANGES, and whose code is 64 hex digits. Corrupt names the sweep
    and the row."""
    file = SWEEP_SHOWN
    schema.mapping(entry, file, key)
    schema.integer(entry.get("best_epoch"), file, f"{key}: best_epoch", low=1)
    alphas = entry.get("alphas")
    # α > 0 and finite: the page draws them on a log axis
    if not isinstance(alphas, list) or not all(schema.is_number(a) and 0 < a < np.inf for a in alphas):
        raise schema.Corrupt(file, f"{key}: alphas must be a list of numbers > 0, not {schema.shown_value(alphas)}")
    rows = entry.get("rows")
    if not isinstance(rows, list) or len(rows) != len(alphas) + 1:
        raise schema.Corrupt(
            file, f"{key}: rows must be a list of {len(alphas) + 1} rows: one per α, then the exact λ(C)"
        )
    for index, (row, alpha) in enumerate(zip(rows, [*alphas, exact])):
        _check_sweep_row(row, alpha, file, f"{key}: row {index + 1}")
    code = entry.get("code")
    if not (isinstance(code, str) and schema.SHA256.fullmatch(code)):
        raise schema.Corrupt(file, f"{key}: code must be 64 hex digits, not {schema.shown_value(code)}")
    return entry


def _check_sweep_row(row, alpha, file: str, where: str) -> None:
    if schema.mapping(row, file, where).get("alpha") != alpha:
        shown = schema.shown_value
        raise schema.Corrupt(file, f"{where}: alpha must be {shown(alpha)}, not {shown(row.get('alpha'))}")
    for name, (low, high) in SWEEP_RANGES.items():
        value = schema.number(row.get(name), file, f"{where}: {name}")
        if not low <= value <= high:  # NaN fails too
            raise schema.Corrupt(file, f"{where}: {name} must be in [{low}, {high}], not {schema.shown_value(value)}")


def sweep_code(run: Run) -> str:
    """The identity of the code that computes the run's sweep rows (`code_identity`, once per process):
    this module and every peftviz module it imports, and the module of the run's `alpha_sweep_method`
    with every peftviz module that imports."""
    method = run.method_class.alpha_sweep_method if run.config is not None else None
    return code_identity((__name__, *([METHODS[method].__module__] if method else [])))


def cached_alpha_sweep(run: Run, alphas=None) -> list[dict] | None:
    """The stored sweep of `alphas` (default: the paper's grid) for the run's current best epoch and
    the code that computes it now (`sweep_code`), or None."""
    entry = _read_sweeps(run)[0].get(_sweep_key(alphas or grid_alphas()))
    if not isinstance(entry, dict) or entry.get("best_epoch") != run.best_epoch:
        return None  # the parameters changed since (a run still training)
    if entry.get("code") != sweep_code(run):
        return None  # computed by other code: computed again
    return entry.get("rows")


def damaged_sweep(run: Run, alphas=None) -> str | None:
    """Why the run's stored sweep of `alphas` (default: the paper's grid) was left out, in one line
    naming the file and the field; None when it is sound or not stored. For the page to say so."""
    damaged = _read_sweeps(run)[1]
    return damaged.get(_sweep_key(alphas or grid_alphas()), damaged.get(None))


def _store_sweep(run: Run, alphas: list[float], rows: list[dict]) -> None:
    sweeps = _read_sweeps(run)[0]
    entry = {"alphas": alphas, "best_epoch": run.best_epoch, "code": sweep_code(run), "rows": rows}
    sweeps[_sweep_key(alphas)] = entry
    caches.write_json(run.path, SWEEP_FILE, {"format": SWEEP_FORMAT, "sweeps": sweeps})


def exact_row(rows: list[dict]) -> dict | None:
    """The sweep row under the exact λ(C), if the sweep has one."""
    return next((row for row in rows if row["alpha"] == EXACT), None)


# ---------------------------------------------------------------------------------------------
# kernel runs trained at each α


def trained_alpha_rows(runs: list[Run]) -> list[dict]:
    """One row per kernel run of the store with finished epochs, sorted by group and α.

    Row: alpha (the configured α; the starting value when α trains), accuracy and ece of the best
    validation epoch, label, run (folder name), seed (the training seed), group (model · dataset,
    plus kernels and trainable α when not the defaults: a plot draws one series per group),
    learned_alpha (per-layer α read from the params for trainable-α runs, else None).
    """
    rows = [_trained_row(run) for run in runs if run.metrics]
    return sorted((row for row in rows if row is not None), key=lambda row: (row["group"], row["alpha"]))


def _trained_row(run: Run) -> dict | None:
    if run.status == "corrupt":
        return None
    options = run.method_config
    alpha = run.method_class.trained_alpha(options)
    if alpha is None:
        return None
    best = run.best_metrics
    return {
        "alpha": alpha,
        "accuracy": best.get("accuracy"),
        "ece": best.get("ece"),
        "label": run.label,
        "run": run.name,
        "seed": run.seed,
        "group": _group(run, options),
        "learned_alpha": learned_alpha(run) if run.method_class.alpha_trains(options) else None,
    }


def _group(run: Run, options) -> str:
    """model · dataset, plus the method options (other than α) that differ from their defaults."""
    defaults = type(options)().to_dict()
    changed = [
        f"{name}={value}" for name, value in options.to_dict().items() if name != "alpha" and value != defaults[name]
    ]
    return " · ".join([run.config.model, run.config.dataset, *changed])


def learned_alpha(run: Run) -> list[float] | None:
    """exp(method.log_alpha) from the run's params: the α of every layer, or None if unreadable."""
    try:
        log_alpha = run.params().get("method.log_alpha")
    except RunError:
        return None
    return None if log_alpha is None else [float(a) for a in log_alpha.exp()]


def trained_alpha_groups(runs: list[Run], level: float = LEVEL) -> list[dict]:
    """The rows of `trained_alpha_rows` grouped over training seeds: one row per group, sorted as they are.

    A group holds the kernel runs that differ only in the training seed (`group_runs`), so one α.
    Row: alpha, label, group (the plot series), learned_alpha (a one-run group's only), and
    accuracy and ece: the mean over the seeds of each seed's best-validation-epoch value;
    accuracy_low/high and ece_low/high: that mean's `level` Student t interval over the seeds (NaN
    for one seed); n and seeds: the members; members: their `trained_alpha_rows` rows, in seed order.
    """
    by_run = {row["run"]: row for row in trained_alpha_rows(runs)}
    groups = group_runs([run for run in runs if run.name in by_run])
    rows = [_seed_group_row([by_run[run.name] for run in group.runs], group.seeds, level) for group in groups]
    return sorted(rows, key=lambda row: (row["group"], row["alpha"]))


def _seed_group_row(members: list[dict], seeds: list[int], level: float) -> dict:
    first = members[0]
    row = {key: first[key] for key in ("alpha", "label", "group")}
    row |= {"n": len(members), "seeds": seeds, "members": members}
    row["learned_alpha"] = first["learned_alpha"] if len(members) == 1 else None
    for metric in ("accuracy", "ece"):
        row[metric], row[f"{metric}_low"], row[f"{metric}_high"] = _mean_interval([m[metric] for m in members], level)
    return row


def _mean_interval(values: list, level: float) -> tuple[float, float, float]:
    """(mean, low, high) over the values that are present; NaNs when none is."""
    present = [value for value in values if value is not None]
    return t_interval(present, level) if present else (float("nan"),) * 3
