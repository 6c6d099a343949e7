"""The model card (README.md) of an exported run: its settings, and its calibration on its test split
with 95% percentile-bootstrap intervals (1000 resamples of the test documents, seed 0), computed
from the run's stored test predictions when the card is written."""

from __future__ import annotations

from peftviz.calibration.estimators import estimate_all
from peftviz.exchange.hf import peftviz_only
from peftviz.store.runs import Run

CARD_METRICS = {"accuracy": "accuracy", "ece": "ECE (10 equal-width bins)", "smooth_ece": "smooth ECE",
                "nll": "negative log-likelihood", "brier": "Brier score"}  # fmt: skip
SETTINGS = ("method", "model", "dataset", "limit", "max_length", "pooling", "epochs", "learning_rate",
            "effective_batch_size", "seed", "data_seed", "precision")  # fmt: skip


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
            _loading(peft, config.model),
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


def _loading(peft: bool, model: str) -> str:
    if peft and peftviz_only(model):  # peft's recipe would ask transformers for a base only peftviz has
        return (
            f"A Hugging Face peft adapter (task SEQ_CLS; the head in `modules_to_save`) on `{model}`, an encoder "
            "that exists only inside peftviz (built by peftviz, not on the hub), so peft cannot load it on its own. "
            f"It loads back into peftviz, which builds that base: {IMPORT_RECIPE}."
        )
    if peft:
        return (
            "A Hugging Face peft adapter (task SEQ_CLS; the head in `modules_to_save`):\n\n"
            "```python\n"
            "from peft import PeftConfig, PeftModel\n"
            "from transformers import AutoModelForSequenceClassification\n\n"
            'config = PeftConfig.from_pretrained("THIS_FOLDER")\n'
            "base = AutoModelForSequenceClassification.from_pretrained(config.base_model_name_or_path, num_labels=N)\n"
            'model = PeftModel.from_pretrained(base, "THIS_FOLDER")\n'
            "```\n\n"
            f"or back into peftviz: {IMPORT_RECIPE}."
        )
    return (
        "The run's trained tensors (params.safetensors) and settings (peftviz.json). The method is peftviz's "
        f"own, so this folder loads into peftviz: {IMPORT_RECIPE}."
    )
