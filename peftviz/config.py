"""The run configuration and its presets.

A `TrainConfig` holds everything a run needs, and `config.json` in the run folder is its
`to_dict()`. A preset fills in the values; any field can then be overridden (the CLI has a flag
for each).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from peftviz.methods import METHODS
from peftviz.options import Options, option

SCHEDULES = ("linear", "cosine")


@dataclass
class TrainConfig(Options):
    method: str = option("prefix-propagation", f"tuning method: {', '.join(METHODS)}")
    method_options: dict[str, Any] = field(default_factory=dict, metadata={"help": "the method's own options"})
    label: str = option("", "display name of the run (default: the method)")
    model: str = option(
        "minilm",
        "encoder: 'minilm' (offline default); 'long-minilm' or 'long-minilm-w<window>', a Longformer built from "
        "MiniLM for long documents; tiny-bert, tiny-roberta, tiny-longformer; a folder or a hub id "
        "(e.g. allenai/longformer-base-4096)",
    )
    dataset: str = option("bbc-news", "bbc-news, a .csv/.jsonl file or class folder, or a hub name (sst2, ...)")
    limit: int | None = option(None, "use at most this many examples per split (seeded subsample)")
    max_length: int = option(128, "tokens per document; longer ones are truncated")
    pooling: str = option("cls", "what the head reads: cls (first text token) or mean (of text tokens)")
    head_dropout: float = option(0.1, "dropout in the classification head")
    epochs: int = option(3, "training epochs; validation after each")
    learning_rate: float = option(5e-3, "peak AdamW learning rate")
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases and LayerNorm weights)")
    batch_size: int = option(16, "examples per forward pass")
    effective_batch_size: int = option(16, "examples per optimiser step; gradients accumulate to reach it")
    warmup_ratio: float = option(0.1, "fraction of optimiser steps with linear warmup")
    schedule: str = option("linear", f"learning-rate decay after warmup: {', '.join(SCHEDULES)}")
    max_grad_norm: float = option(1.0, "gradient clipping norm (0 disables)")
    seed: int = option(0, "training seed: initialisation, dropout and batch order (runs differing only here form a group)")
    data_seed: int = option(0, "seed of the data split and subsample, fixed apart from the training seed so runs compare paired")
    ece_bins: int = option(10, "bins of the ECE stored per epoch")
    average_heads: bool = option(False, "tiny-attention: after training, average the heads and evaluate again")
    device: str = option("auto", "auto (CUDA when present), cpu, cuda or cuda:N")

    @property
    def name(self) -> str:
        return self.label or self.method

    @property
    def run_title(self) -> str:
        """The run's name with its training seed: what progress bars show."""
        return f"{self.name} · seed {self.seed}"

    @property
    def accumulation_steps(self) -> int:
        return self.effective_batch_size // self.batch_size

    def validate(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        METHODS[self.method].config_class.from_dict(self.method_options)  # raises on a bad option
        positive = ("epochs", "learning_rate", "batch_size", "effective_batch_size", "max_length", "ece_bins")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")
        if self.effective_batch_size % self.batch_size:
            raise ValueError(
                f"effective_batch_size ({self.effective_batch_size}) must be a multiple of batch_size ({self.batch_size})"
            )
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, not {self.schedule!r}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), not {self.warmup_ratio}")
        if self.seed < 0 or self.data_seed < 0:
            raise ValueError(f"seeds must be >= 0, not seed={self.seed}, data_seed={self.data_seed}")
        if self.limit is not None and self.limit < 2:
            raise ValueError(f"limit must be at least 2, not {self.limit}")


# Learning rates per method from the papers' grids: prefix methods {5e-4 … 5e-2} and fine-tuning
# {3e-5, 5e-5} (prefix-propagation, appendix B); tiny-attention around 8e-4 … 1e-3 (its Table 4).
PAPER_LEARNING_RATES = {
    "fine-tuning": 5e-5,
    "prefix-tuning": 1e-2,
    "prefix-propagation": 1e-2,
    "kernel-prefix-propagation": 1e-2,
    "tiny-attention": 1e-3,
}

PRESETS: dict[str, dict[str, Any]] = {
    # a tiny random model on a few hundred bbc-news documents: seconds, for tests
    "smoke": {
        "model": "tiny-bert",
        "limit": 120,
        "max_length": 32,
        "epochs": 2,
        "batch_size": 8,
        "effective_batch_size": 8,
        "learning_rates": {"fine-tuning": 1e-3, "tiny-attention": 1e-2},
        "learning_rate": 1e-2,
    },
    # the offline MiniLM on bbc-news, sized for six methods in under 12 minutes on 2 CPU cores
    "quick": {
        "model": "minilm",
        "limit": 1000,
        "max_length": 64,
        "epochs": 3,
        "batch_size": 16,
        "effective_batch_size": 16,
        "learning_rates": {"fine-tuning": 1e-4, "tiny-attention": 5e-3},
        "learning_rate": 1e-2,
    },
    # long documents: a Longformer built from MiniLM (window 256) on untruncated bbc-news articles
    # up to 2048 tokens, prefixes as global tokens; sized for six methods on 2 CPU cores
    "quick-long": {
        "model": "long-minilm",
        "limit": 60,
        "max_length": 2048,
        "epochs": 2,
        "batch_size": 4,
        "effective_batch_size": 4,
        "learning_rates": {"fine-tuning": 1e-4, "tiny-attention": 5e-3},
        "learning_rate": 1e-2,
    },
    # Table 5 of the prefix-propagation paper (for a GPU): prefix length 8, effective batch 32,
    # warmup 0.1, linear schedule, 10 epochs, RoBERTa's 512 tokens
    "paper": {
        "model": "roberta-base",
        "max_length": 512,
        "epochs": 10,
        "batch_size": 8,
        "effective_batch_size": 32,
        "learning_rates": PAPER_LEARNING_RATES,
        "learning_rate": 1e-2,
        "method_options": {"prefix-tuning": {"prefix_length": 8}, "prefix-propagation": {"prefix_length": 8}},
    },
}


def preset_config(preset: str, method: str = "prefix-propagation", **overrides) -> TrainConfig:
    """The config of `method` under `preset`, with `overrides` (TrainConfig fields) applied last."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    values = dict(PRESETS[preset])
    default_rate, rates = values.pop("learning_rate"), values.pop("learning_rates")
    method_options = values.pop("method_options", {}).get(method, {})
    values.update(method=method, learning_rate=rates.get(method, default_rate), method_options=dict(method_options))
    return TrainConfig(**{**values, **overrides})


def comparison(preset: str, **overrides) -> list[TrainConfig]:
    """The runs of `python -m peftviz compare`: every method on the same data and split.

    Tiny-attention runs twice: with one head, then with four heads started as perturbed copies of
    the trained one (the paper's recipe; the trainer fills in `init_from`) and averaged at the end.
    """
    configs = [preset_config(preset, method, **overrides) for method in METHODS if method != "tiny-attention"]
    one_head = preset_config(preset, "tiny-attention", **{**overrides, "label": "tiny-attention 1H"})
    four_heads = preset_config(
        preset,
        "tiny-attention",
        **{**overrides, "label": "tiny-attention 4H averaged", "method_options": {"n_heads": 4}, "average_heads": True},
    )
    return configs + [one_head, four_heads]


def parse_seeds(text: str) -> list[int]:
    """`--seeds` text -> training seeds: a list "0,1,2" as given, or a count "3" meaning seeds 0, 1, 2."""
    message = f"--seeds takes a count >= 1 (3) or a list of seeds (0,1,2), not {text!r}"
    try:
        values = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise ValueError(message) from None
    if not values or min(values) < 0:
        raise ValueError(message)
    if "," not in str(text):  # a count
        if values[0] < 1:
            raise ValueError(message)
        return list(range(values[0]))
    if len(set(values)) != len(values):
        raise ValueError(f"--seeds lists a seed twice: {text!r}")
    return values


def over_seeds(configs: list[TrainConfig], seeds: list[int] | None) -> list[TrainConfig]:
    """Every config at every training seed, seed by seed: seed 0's whole comparison comes first.

    The data seed stays as it is, so every run sees the same split and runs compare paired.
    """
    if not seeds:
        return list(configs)
    return [replace(config, seed=seed) for seed in seeds for config in configs]


def alpha_grid(preset: str, alphas: tuple[float, ...] | None = None, **overrides) -> list[TrainConfig]:
    """Kernel prefix-propagation trained at each α of the paper's grid (or `alphas`), same data and split."""
    from peftviz.methods.kernel_prefix_propagation import ALPHA_GRID

    return [
        preset_config(
            preset,
            "kernel-prefix-propagation",
            **{**overrides, "label": f"kernel α={alpha:g}", "method_options": {"alpha": alpha}},
        )
        for alpha in alphas or ALPHA_GRID
    ]
