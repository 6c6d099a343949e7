"""What every tuning method shares: a config dataclass with help text and a module that attaches
to an encoder, and the answers the rest of peftviz asks a method for.

A method changes the encoder through forward hooks, through the per-forward `AttentionContext`
that `peftviz_attention` reads, or (for the methods Hugging Face peft implements) through peft's
own injection into the encoder's linear layers. The classifier counts as the method's parameters
everything it owns plus whatever it added to the encoder.

What a method tells the rest of peftviz (class attributes and methods below):
- training: `trains_backbone`, `learning_rates` per preset, `learning_rate_grid` (the papers' search,
  for `learning_rate_note`), `learning_rate_search` (the rates of its paper's search, as runs of a
  grid), `in_long_document_table` (the paper-long preset's default methods), `after_training()`
  (e.g. head averaging); for a loop's steps,
  `learning_rate_scale`, `schedule`, `regularization`, `after_step` and `training_record` (AdaLoRA,
  LoRA+; answered the same whoever runs the loop); as data, the `variants` its
  comparison trains and `starts_from` (the option that takes another run's parameters, and what that
  run must match). The sweep planner (`peftviz.sweep.variants`) reads them: a method knows nothing of
  training loops, the store or sweeps;
- building: `added_positions` (position-table rows it uses besides the text's, checked against
  the encoder with max_length);
- the analyses: `prefix_keys` (λ(C) and the prefix-mass grid apply), `n_prefix_queries` (prefix
  positions), `alpha_sweep_method` (the α sweep applies), `averages_heads` (the heads page applies),
  `attention_note` (what the Attention page should say about it);
- exchange with Hugging Face peft (`peftviz.exchange`): `peft_type` (None: peft has no such method),
  `peft_config()` (its options as peft's config takes them), `options_from_peft(adapter_config)`
  and `check_peft_values` (those options held to the options' own bounds before peft sees them,
  named as the adapter names them: `peft_names`), and for prompt learning `peft_prompt()` /
  `prompt_state(prompt_embeddings)`, the tensor peft stores. Tensors a method injects into the
  encoder (LoRA's, IA3's) carry over by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import ClassVar

from torch import Tensor, nn

from peftviz.errors import ConfigError
from peftviz.modeling.attention_function import AttentionContext
from peftviz.options import Options

# a learning rate this many times beyond its method's usual range gets a warning (`learning_rate_note`)
FAR_FACTOR = 10


@dataclass
class MethodConfig(Options):
    """Base of every method's config. Fields are declared with `option(default, help)`."""


@dataclass(frozen=True)
class Variant:
    """One run of a method's comparison: labelled "<method> <label>", with `options` set over the comparison's
    (and `defaults` written in where the comparison gives none, so the run records them). `starts_from`: the
    label of the variant of the same comparison, at the same seed, whose trained parameters it starts from
    (through the method's `StartFrom.option`)."""

    label: str
    options: Mapping = field(default_factory=dict)
    defaults: Mapping = field(default_factory=dict)
    starts_from: str | None = None


@dataclass(frozen=True)
class StartFrom:
    """A run may start from another run's trained parameters: `option` names that run's parameters file. The
    starting run is a complete run of the same method whose options include `requires`, with the same
    `same_settings` (TrainConfig fields) and `same_options` (method options) as the run it starts."""

    option: str
    requires: Mapping = field(default_factory=dict)
    same_settings: tuple[str, ...] = ("model",)
    same_options: tuple[str, ...] = ()


class PeftMethod(nn.Module):
    """Base of the methods. Subclasses set `config_class` and override what they need.

    Registration (`@registered`, methods/__init__.py) sets `name`. `attach(encoder)` registers hooks or injects
    layers; `new_context(batch_size, record)` gives the AttentionContext of one forward pass.
    """

    name: ClassVar[str]
    config_class: ClassVar[type[MethodConfig]]
    trains_backbone: ClassVar[bool] = False
    title: ClassVar[str] = ""  # one line naming it and its paper, where its module's first line does not
    from_the_papers: ClassVar[bool] = True  # one of the papers' methods (the default comparison), or a baseline
    peft_based: ClassVar[bool] = False  # built on Hugging Face peft's layers: one of `--methods peft`
    # preset -> learning rate when the preset's own default does not suit the method; "paper-long" (Longformer,
    # the same search as RoBERTa's in the paper) takes each method's "paper" rate
    learning_rates: ClassVar[dict[str, float]] = {}
    # names (or parts of names) of its parameters that are scalings, not weights: AdamW does not decay them
    no_weight_decay: ClassVar[tuple[str, ...]] = ()
    # the learning rates its papers searched: with `learning_rates`, the usual range (`usual_learning_rates`).
    # The default is the prefix-propagation paper's grid for prefixes (Table 5, {5e-4 … 5e-2})
    learning_rate_grid: ClassVar[tuple[float, ...]] = (5e-4, 5e-2)
    # the learning rates its paper's search tried, each a run of `compare --lr-grid` (`peftviz.sweep.variants`);
    # empty: the comparison trains its one rate. Not `learning_rate_grid`, the (low, high) range the app warns by
    learning_rate_search: ClassVar[tuple[float, ...]] = ()
    # one of the four methods of the prefix-propagation paper's long-document table (Table 2): the
    # default `--methods` of the paper-long preset
    in_long_document_table: ClassVar[bool] = False
    # the runs its comparison trains (`peftviz.sweep.variants`); empty: one run, the comparison's config as it is
    variants: ClassVar[tuple[Variant, ...]] = ()
    # how a run may start from another run's parameters; its option names a run, so it is not a setting (groups
    # of seeds and rebuilding a run ignore it)
    starts_from: ClassVar[StartFrom | None] = None

    # what the analyses may read
    prefix_keys: ClassVar[bool] = False  # every query attends to learned prefix keys: λ(C) is defined
    alpha_sweep_method: ClassVar[str | None] = None  # the method whose α its parameters are evaluated under
    alpha_grid: ClassVar[tuple[float, ...]] = ()  # the α values `alpha-grid` trains it at (kernel form)
    averages_heads: ClassVar[bool] = False  # multi-head adapters averaged after training (tiny-attention)
    attention_note: ClassVar[str] = ""  # one sentence the Attention page shows for this method's runs
    # Hugging Face peft's PeftType of the same method, where peft has it: `export` writes such runs as
    # peft adapters, and `import` reads peft adapters of that type as runs of this method
    peft_type: ClassVar[str | None] = None
    # option -> the adapter_config.json field it is read from, where the names differ (prompt tuning's prompt_length
    # is peft's num_virtual_tokens): what `check_peft_values` names in its refusals
    peft_names: ClassVar[Mapping[str, str]] = {}

    def __init__(self, config: MethodConfig, encoder_config):
        super().__init__()
        self.config = config
        self.n_layers = encoder_config.num_hidden_layers
        self.hidden_size = encoder_config.hidden_size
        self.n_heads = encoder_config.num_attention_heads
        self.head_dim = self.hidden_size // self.n_heads
        self._hooks: list = []

    @property
    def added_positions(self) -> int:
        """Rows of the encoder's position table the method uses besides the text's max_length tokens
        (a method that embeds its own tokens with the text, shifting it, says how many). The prefix
        and prompt positions of peftviz's methods enter after the embedding layer and use none."""
        return 0

    @property
    def n_prefix_queries(self) -> int:
        """Positions the method prepends to the sequence; the classifier extends the padding mask by
        these and pools after them (prefix-propagation's prefixes, prompt tuning's soft prompt)."""
        return 0

    @property
    def pooled_position(self) -> int:
        """The position the head reads with pooling "cls": the text's first token, after the prefix positions."""
        return self.n_prefix_queries

    def attach(self, encoder) -> None:
        """Register hooks on `encoder` (or inject layers into it). The default changes nothing."""

    def remove_hooks(self) -> None:
        """Undo `attach`: `_hooks` holds anything with a `remove()` (hook handles, and handles that put
        back layers peft wrapped or re-freeze what a method unfroze)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()

    def unfreeze(self, parameters: Iterable[nn.Parameter]) -> None:
        """Let pretrained `parameters` train (BitFit's biases, Houlsby's LayerNorms); `remove_hooks` freezes them again."""
        unfrozen = [p for p in parameters if not p.requires_grad]
        for p in unfrozen:
            p.requires_grad_(True)
        self._hooks.append(_Unfrozen(unfrozen))

    def new_context(self, batch_size: int, record: bool = False) -> AttentionContext:
        return AttentionContext(record=record)

    # what a training loop asks of a method with a schedule of its own (AdaLoRA) or its own learning
    # rates (LoRA+); the loop is peftviz's trainer or anyone's: the method knows none of them

    def learning_rate_scale(self, parameter_name: str) -> float:
        """The factor on the learning rate of the method's parameter `parameter_name` (LoRA+: its B matrices)."""
        return 1.0

    def schedule(self, total_steps: int) -> None:
        """Told, before the first step, how many optimiser steps training will take (AdaLoRA's budget schedule).
        ConfigError when the method cannot train in that many."""

    def regularization(self) -> Tensor | None:
        """A term the training loss adds (AdaLoRA's orthogonality penalty), or None."""
        return None

    def after_step(self, step: int) -> None:
        """Called after optimiser step `step` (1, 2, ...), before the gradients are cleared (AdaLoRA allocates ranks)."""

    def training_record(self) -> dict | None:
        """What a run's record keeps of how the method changed itself while training (AdaLoRA's final ranks)."""
        return None

    def after_training(self) -> str | None:
        """A step once the best epoch's parameters are back (e.g. averaging heads). Returns the name of
        the extra evaluation it calls for ("averaged"), or None when the model is unchanged."""
        return None

    def exact_prefix_mass(self) -> AbstractContextManager:
        """Inside the block, attention weighs the prefix keys by their softmax mass λ(C) (for λ(C) readings)."""
        return nullcontext()

    @classmethod
    def learning_rate(cls, preset: str, default: float) -> float:
        return cls.learning_rates.get(preset, default)

    @classmethod
    def usual_learning_rates(cls) -> tuple[float, float]:
        """(lowest, highest) rate the method trains at: its papers' grid and its presets' rates."""
        rates = [*cls.learning_rate_grid, *cls.learning_rates.values()]
        return min(rates), max(rates)

    @classmethod
    def learning_rate_note(cls, rate: float) -> str | None:
        """One sentence when `rate` is more than FAR_FACTOR times outside the usual range (a warning: it
        trains anyway), else None; also None for a rate the config refuses (not above 0)."""
        low, high = cls.usual_learning_rates()
        if not rate > 0 or low / FAR_FACTOR <= rate <= high * FAR_FACTOR:
            return None
        return (
            f"Learning rate {rate:g} is far outside {cls.name}'s usual range, {low:g} to {high:g} (its papers' "
            f"grid and the presets): it will train, but expect it to diverge or hardly to move"
        )

    @classmethod
    def start_option(cls) -> str | None:
        """The option naming another run's parameters (`starts_from`), or None."""
        return cls.starts_from.option if cls.starts_from else None

    @classmethod
    def trained_alpha(cls, options: MethodConfig) -> float | None:
        """The α the prefix term was trained at (its start when α trains); None for methods without α."""
        return None

    @classmethod
    def alpha_trains(cls, options: MethodConfig) -> bool:
        """Whether α is a trained parameter (then `method.log_alpha` in the params holds it per layer)."""
        return False

    def peft_config(self) -> dict:
        """This method's options as peft's config of `peft_type` takes them (the task, the head and the
        base aside); ConfigError where these options have no exact peft form."""
        raise ConfigError(f"{self.name} has no Hugging Face peft form")

    def peft_prompt(self) -> Tensor | None:
        """What peft stores as `prompt_embeddings` (prompt learning), or None: the method's tensors are
        in the encoder and carry over by name."""
        return None

    @classmethod
    def options_from_peft(cls, adapter: dict) -> dict:
        """The method's options for a peft adapter_config.json of `peft_type`; ConfigError (one line)
        for a feature the method does not have."""
        raise ConfigError(f"{cls.name} has no Hugging Face peft form")

    @classmethod
    def check_peft_values(cls, adapter: dict, options: dict) -> None:
        """ConfigError (one line, naming the adapter's field) where `options`, which `options_from_peft` read from
        `adapter`, are not what this method's options take: each by its own type and bounds (the bounds a user's
        options are held to), then all together (the config's `validate`). Before peft builds anything of them."""
        for name, value in options.items():
            cls.config_class.check_value(name, value, called=cls.peft_names.get(name, name))
        cls.config_class.from_dict(options)

    @classmethod
    def prompt_state(cls, embeddings: Tensor) -> dict[str, Tensor]:
        """peftviz's tensors (state-dict names) holding peft's `prompt_embeddings`."""
        return {}

    def extra_repr(self) -> str:
        return f"{self.name}: {self.config}"


class _Unfrozen:
    """Hook-handle stand-in: `remove()` freezes again the pretrained parameters `unfreeze` let train."""

    def __init__(self, parameters: list[nn.Parameter]):
        self.parameters = parameters

    def remove(self) -> None:
        for p in self.parameters:
            p.requires_grad_(False)
