"""The run configuration and its presets.

It sits below everything that reads or builds a run's settings (the store, the trainer, the sweep, the app,
the CLI) and imports only the errors, the options and the methods' registry.

A `TrainConfig` holds everything a run needs, and `config.json` in the run folder is its
`to_dict()` plus what the run recorded (label names, parameter counts, environment); the store
reads it back, records of earlier versions included (`store.migrations`): this module knows nothing
of config.json. A preset fills in the values; any field can then be overridden (the CLI has a flag
for each). What differs by method (learning rate per preset, the variants a comparison trains) each
method's class says.

Every setting is checked on construction, whatever its source (CLI, app, config.json): its type,
its choices and its range as declared below (see options.py), then `validate`'s rules across
fields, the method's options included. A refused setting raises a one-line `ConfigError` before
anything is loaded or written. Whether `max_length` fits the encoder's positions is known only
once the encoder is loaded: `classifier.build_classifier` checks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from peftviz.errors import ConfigError
from peftviz.methods import (
    DEFAULT_METHOD,
    METHODS,
    alpha_grid_method,
    long_document_methods,
    paper_methods,
    peft_methods,
)
from peftviz.methods import method_class as find_method
from peftviz.options import Options, option, shown

# Bounds of the run settings (see options.py for how they are checked). Upper bounds are typo guards,
# far above any setting the papers or the presets use, and low enough that nothing is allocated or
# run before a mistake is seen.
MAX_LENGTH = 16384  # 4x the 4096 positions of the longest supported encoders (Longformer, long-minilm);
# the loaded encoder's own position count is checked when the classifier is built (classifier.py)
MAX_EPOCHS = 1000  # the papers train 3-20 epochs
MAX_BATCH = 65536  # examples per forward pass or per optimiser step: beyond any split peftviz trains on
MAX_ECE_BINS = 10000  # ECE uses 10-20 bins; 10^4 already leaves most bins empty on any test split
MAX_SEED = 2**32 - 1  # numpy's seeds (np.random.seed, the data split) stop at 2^32 - 1
MAX_LIMIT = 10**9  # examples per split: more than any dataset (data.py reads at most 10^6 rows); None: no limit
MAX_LEARNING_RATE = 10.0  # AdamW diverges long before; the papers' grids stop at 5e-2 (prompt tuning: 0.3)
MAX_WEIGHT_DECAY = 1.0  # AdamW shrinks each weight by lr x decay per step; the usual values are 0-0.1
# A run's folder is named after its label (lowercased, every other character a "-": at most two per
# character, as "İ".lower() is two) and a 23-character time stamp, and is built under a temporary name
# 22 characters longer: 2 x 80 + 23 + 22 stays within the 255 bytes of a file name on every common
# file system. 80 characters is a sentence of a name; a picker shows far less.
MAX_LABEL_CHARS = 80
DEVICE = re.compile(r"auto|cpu|cuda(:(0|[1-9][0-9]{0,2}))?")
MAX_DEVICE_INDEX = 127  # torch keeps a device's index in 8 bits: cuda:128 reads as cuda:-128, cuda:256 as cuda:0


@dataclass
class TrainConfig(Options):
    # checked by `validate` (a registered name, or peft:<TYPE> for any peft tuner): not a fixed list of choices
    method: str = option(DEFAULT_METHOD, "tuning method: a registered name, or peft:<TYPE> for any peft tuner")
    method_options: dict[str, Any] = field(default_factory=dict, metadata={"help": "the method's own options"})
    label: str = option("", "display name of the run (default: the method)", max_chars=MAX_LABEL_CHARS)
    model: str = option(
        "minilm",
        "encoder: 'minilm' (offline default); 'long-minilm' or 'long-minilm-w<window>', a Longformer built from "
        "MiniLM for long documents; tiny-bert, tiny-roberta, tiny-longformer; a folder or a hub id "
        "(e.g. allenai/longformer-base-4096)",
    )
    dataset: str = option("bbc-news", "bbc-news, a .csv/.jsonl file or class folder, or a hub name (sst2, ...)")
    limit: int | None = option(
        None, "use at most this many examples per split (seeded subsample)", at_least=2, at_most=MAX_LIMIT
    )
    max_length: int = option(
        128, "tokens per document, [CLS] and [SEP] included; longer ones are truncated", at_least=2, at_most=MAX_LENGTH
    )
    pooling: Literal["cls", "mean"] = option(
        "cls", "what the head reads: cls (first text token) or mean (of text tokens)"
    )
    head_dropout: float = option(0.1, "dropout in the classification head", at_least=0, below=1)
    epochs: int = option(3, "training epochs; validation after each", at_least=1, at_most=MAX_EPOCHS)
    learning_rate: float = option(5e-3, "peak AdamW learning rate", above=0, at_most=MAX_LEARNING_RATE)
    weight_decay: float = option(
        0.01, "AdamW weight decay (not on biases and LayerNorm weights)", at_least=0, at_most=MAX_WEIGHT_DECAY
    )
    batch_size: int = option(16, "examples per forward pass", at_least=1, at_most=MAX_BATCH)
    effective_batch_size: int = option(
        16, "examples per optimiser step; gradients accumulate to reach it", at_least=1, at_most=MAX_BATCH
    )
    warmup_ratio: float = option(0.1, "fraction of optimiser steps with linear warmup", at_least=0, below=1)
    schedule: Literal["linear", "cosine"] = option("linear", "learning-rate decay after warmup")
    max_grad_norm: float = option(1.0, "gradient clipping norm (0 disables)", at_least=0)
    seed: int = option(
        0,
        "training seed: initialisation, dropout and batch order (runs differing only here form a group)",
        at_least=0,
        at_most=MAX_SEED,
    )
    data_seed: int = option(
        0,
        "seed of the data split and subsample, fixed apart from the training seed so runs compare paired",
        at_least=0,
        at_most=MAX_SEED,
    )
    ece_bins: int = option(10, "bins of the ECE stored per epoch", at_least=1, at_most=MAX_ECE_BINS)
    device: str = option("auto", "auto (CUDA when present), cpu, cuda or cuda:N")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = option(
        "auto",
        "auto (bf16 on a GPU that supports it, else fp32), fp32, bf16 (autocast), or fp16 (autocast with loss "
        "scaling; CUDA only); trained parameters and optimizer state stay float32 (frozen linear weights are held "
        "in the compute dtype, as autocast would cast them), probabilities are float32",
    )
    gradient_checkpointing: bool = option(
        False, "recompute each encoder layer's activations in the backward pass instead of keeping them: less memory"
    )
    compile_layers: bool = option(
        False,
        "torch.compile each encoder layer (dynamic shapes: one compile for every length) for training and "
        "evaluation; pays on a GPU once its compile is amortised; the paper's methods compile without graph breaks",
    )
    local_attention: Literal["blocks", "flex"] = option(
        "blocks",
        "Longformer encoders only: the windowed attention as banded blocks (the reference) or flex (one fused "
        "FlexAttention kernel on a GPU, attention dropout included; the blocks where gradients run on a CPU)",
    )

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

    @property
    def method_class(self):
        return find_method(self.method)

    @property
    def setting_options(self) -> dict:
        """The method options that are settings: all but the one naming a starting run (the method's
        `start_option`), whose result the run's parameters already hold and which groups of seeds leave out."""
        link = self.method_class.start_option()
        return {key: value for key, value in self.method_options.items() if key != link}

    @property
    def key_settings(self) -> dict:
        """The settings as a group key reads them (`store.runs.group_key`): every field as its type declares
        it, and of the method's options those that are settings and differ from the method's defaults.

        The Train page stores every option (at its default unless changed), the CLI only those given: both
        are the same configuration. Options equal to their default are dropped rather than defaults filled
        in, so that a run stored with `{}` keeps the key it always had, and a method that gains an option
        (with a default) keeps its runs' keys."""
        settings = typed_values(self)
        defaults = typed_values(self.method_class.config_class())
        link = self.method_class.start_option()
        options = typed_values(self.method_config)
        settings["method_options"] = {
            name: value for name, value in options.items() if name != link and value != defaults[name]
        }
        return settings

    @property
    def method_config(self):
        """The method's options as its config object, defaults filled in."""
        return self.method_class.config_class.from_dict(self.method_options)

    def validate(self) -> None:
        self.method_class.config_class.from_dict(self.method_options)  # raises on a bad option
        if self.effective_batch_size % self.batch_size:
            raise ConfigError(
                f"effective_batch_size ({self.effective_batch_size}) must be a multiple of batch_size ({self.batch_size})"
            )
        if problem := device_problem(self.device):
            raise ConfigError(f"device must be {problem}")


def device_problem(spec) -> str | None:
    """What is wrong with a device's name, before torch reads it (None: nothing): it must be auto, cpu, cuda or
    cuda:N with N at most MAX_DEVICE_INDEX, as torch would read a larger N as another GPU (cuda:256 as cuda:0)."""
    match = DEVICE.fullmatch(spec) if isinstance(spec, str) else None
    if match is None or (match.group(2) is not None and int(match.group(2)) > MAX_DEVICE_INDEX):
        return f"auto, cpu, cuda or cuda:N (N up to {MAX_DEVICE_INDEX}), not {shown(spec)}"
    return None


def typed_values(options: Options) -> dict:
    """An Options object's fields, an int given for a float field read as that float: 1 and 1.0 are the same
    setting (a form may give either), though JSON writes them apart."""
    types = type(options).types()
    return {
        name: float(value) if types[name] is float and type(value) is int else value
        for name, value in options.to_dict().items()
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
        "learning_rate": 1e-2,
    },
    # Table 5 of the prefix-propagation paper (for a GPU): prefix length 8 (the methods' default),
    # effective batch 32, warmup 0.1, linear schedule, 10 epochs, RoBERTa's 512 tokens; the learning
    # rates of its grid ({5e-4 … 5e-2} for prefixes; each method's class gives its own)
    "paper": {
        "model": "roberta-base",
        "max_length": 512,
        "epochs": 10,
        "batch_size": 8,
        "effective_batch_size": 32,
        "learning_rate": 1e-2,
    },
    # Table 5 of the prefix-propagation paper on its long documents, Longformer-base-4096 (for a GPU): prefix
    # length 8 (the methods' default), effective batch 32, warmup 0.1, linear schedule, 10 epochs (20 on
    # Hyperpartisan: PRESET_DATASET_SETTINGS), documents truncated to 4096 tokens. Micro-batches of 4: peftviz's
    # Longformer fine-tuning at 4096 x 8 peaked at 20.0 GiB with bf16 on an H200 (issue 36), too close to a 24 GB
    # card's memory (and twice the activations in fp32); 4 halves the activations, and 8 accumulated micro-batches
    # make the effective 32
    "paper-long": {
        "model": "allenai/longformer-base-4096",
        "dataset": "arxiv",
        "max_length": 4096,
        "epochs": 10,
        "batch_size": 4,
        "effective_batch_size": 32,
        "warmup_ratio": 0.1,
        "schedule": "linear",
        "learning_rate": 1e-2,  # the prefix methods' rate, as in paper; the others' come from their classes
    },
}
# what a preset changes on some datasets (Table 5: 20 epochs on Hyperpartisan); settings given still win
PRESET_DATASET_SETTINGS: dict[str, dict[str, dict[str, Any]]] = {"paper-long": {"hyperpartisan": {"epochs": 20}}}
# the datasets a preset's comparison trains on when none is given (the paper's long-document table)
PRESET_DATASETS: dict[str, tuple[str, ...]] = {"paper-long": ("arxiv", "hyperpartisan", "20newsgroups")}
# the comparison's method lists: `--methods paper` (the default), `--methods all`, `--methods peft` and
# `--methods long-documents` (the four of the paper's long-document table: paper-long's default)
METHOD_SETS = ("paper", "all", "peft", "long-documents")
PRESET_METHOD_SETS: dict[str, str] = {"paper-long": "long-documents"}  # a preset's default `--methods`


def preset_config(preset: str, method: str = DEFAULT_METHOD, **overrides) -> TrainConfig:
    """The config of `method` under `preset`, with `overrides` (TrainConfig fields) applied last."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    values = dict(PRESETS[preset])
    dataset = overrides.get("dataset", values.get("dataset"))
    values.update(PRESET_DATASET_SETTINGS.get(preset, {}).get(dataset, {}))
    values.update(method=method, learning_rate=find_method(method).learning_rate(preset, values["learning_rate"]))
    return TrainConfig(**{**values, **overrides})


def comparison_methods(methods: str | list[str] | None = None) -> list[str]:
    """ "paper" or None: the papers' methods; "all": every registered method; "peft": those built on Hugging
    Face peft's layers; "long-documents": the four of the prefix-propagation paper's long-document table; or a
    list of names (which may include `peft:<TYPE>`)."""
    if methods is None or methods == "paper":
        return paper_methods()
    if methods == "long-documents":
        return long_document_methods()
    if methods == "all":
        return list(METHODS)
    if methods == "peft":
        return peft_methods()
    names = methods.split(",") if isinstance(methods, str) else list(methods)
    for name in names:
        find_method(name)  # raises on an unknown name
    return names


# A sweep's seeds: the papers train 1-5 seeds a configuration and a group's interval narrows little beyond some
# tens, while each seed is a whole comparison (10 methods at 100 seeds: 1,000 runs). A typo (--seeds 1000000)
# is refused here rather than planned as a million runs.
MAX_SEEDS = 100
SEED_TEXT = re.compile(r"\s*[0-9]+\s*")


def parse_seeds(text: str) -> list[int]:
    """`--seeds` text -> training seeds: a list "0,1,2" as given, or a count "3" meaning seeds 0, 1, 2. At most
    MAX_SEEDS of them, each a seed in [0, MAX_SEED], none twice; anything else one line saying what is accepted."""
    message = (
        f"--seeds takes a count in [1, {MAX_SEEDS}] (3) or a list of at most {MAX_SEEDS} distinct seeds in "
        f"[0, {MAX_SEED}] (0,1,2), not {shown(text)}"
    )
    parts = [part for part in str(text).split(",") if part.strip()]
    if not parts or len(parts) > MAX_SEEDS or not all(SEED_TEXT.fullmatch(part) for part in parts):
        raise ConfigError(message)
    values = [_seed_value(part) for part in parts]
    if "," not in str(text):  # a count
        if not 1 <= values[0] <= MAX_SEEDS:
            raise ConfigError(message)
        return list(range(values[0]))
    if max(values) > MAX_SEED:
        raise ConfigError(message)
    if len(set(values)) != len(values):
        raise ConfigError(f"--seeds lists a seed twice: {shown(text)}")
    return values


def _seed_value(digits: str) -> int:
    """A run of ASCII digits as an int; above MAX_SEED (10 digits) without converting more digits than that."""
    significant = digits.strip().lstrip("0")
    return int(significant or "0") if len(significant) <= len(str(MAX_SEED)) else MAX_SEED + 1


def over_seeds(configs: list[TrainConfig], seeds: list[int] | None) -> list[TrainConfig]:
    """Every config at every training seed, seed by seed: seed 0's whole comparison comes first.

    The data seed stays as it is, so every run sees the same split and runs compare paired.
    """
    if not seeds:
        return list(configs)
    return [replace(config, seed=seed) for seed in seeds for config in configs]


def alpha_grid(preset: str, alphas: tuple[float, ...] | None = None, **overrides) -> list[TrainConfig]:
    """The kernel form trained at each α of the paper's grid (or `alphas`), same data and split."""
    method = alpha_grid_method()
    return [
        preset_config(
            preset, method.name, **{**overrides, "label": f"kernel α={alpha:g}", "method_options": {"alpha": alpha}}
        )
        for alpha in alphas or method.alpha_grid
    ]
