"""Any tuner of Hugging Face peft, as a peftviz method: peft's own layers, peft's own options.

A peft tuner replaces the encoder's targeted modules by its own layers, which hold the trainable
tensors (LoRA's A, B; VeRA's scaling vectors over frozen random projections; OFT's orthogonal
blocks; ...). Whatever the tuner, for an encoder layer input x and a targeted map W:

    h = tuner_layer(W)(x)          e.g. LoRA: W x + (α / r) · B A x;  OFT: (R W) x, R block-orthogonal

and the rest of the encoder runs as it is: input_ids (B, T) -> hidden (B, T, D). peftviz builds the
tuner with peft's tuner class (`PEFT_TYPE_TO_TUNER_MAPPING[type](encoder, config)`, what
`get_peft_model` does inside) rather than `inject_adapter_in_model`, because VeRA, VB-LoRA and
other tuners keep shared state on the tuner object, and AdaLoRA's rank allocator lives there.
Nothing of the tuner is re-implemented here.

The options are peft's. `peft_options(type)` turns the fields of peft's config dataclass into a
peftviz `MethodConfig`: each field of a plain type (int, float, bool, str, a `Literal` of them, or
`None` besides) becomes an option with peft's default and help text; fields of richer types
(per-layer patterns, sub-configs) and those that only describe saving or other model kinds
(NOT_OPTIONS) keep peft's default. `target_modules` is one string: "peft-default" (peft's targets
for the encoder's model type; the Longformer, which peft has no mapping for, takes BERT's, whose
layer names it shares), "all-linear" (every linear map of the encoder layers), or a comma list of
module-name suffixes. peft's own checks (its config's `__post_init__`) run when the options are
built, so a refused value is a one-line error before any model loads.

Bounds. peft bounds little itself, and every number that sizes something needs an upper bound
here: integers are in [0, MAX_SIZE] (65,536: 64 times peft's largest default size, FourierFT's
1,000 frequencies), the ranks (RANKS) up to 1,024 and lora_alpha up to 4,096, as LoRA's own r and α
are (lora.py); fractions (dropouts) in [0, 1), AdaLoRA's β in (0, 1), which peft asserts; other
floats in [0, MAX_FLOAT]. A negative default (LoKr's decompose_factor -1, "automatic") extends the
lower bound to it. The sizes peft divides by or picks k of (POSITIVE: ranks, LoRA's α, VB-LoRA's
vectors, FourierFT's frequencies, AdaLoRA's deltaT, ...) start at 1: at 0 peft fails, deep in
attaching or in the first training steps (a ZeroDivisionError, an empty kthvalue, a non-finite
PiSSA start), unless peft's own default is 0, which then means "not this way" (OFT's r, given
its oft_block_size). Rules across options are peft's own (its config's checks, and what it refuses
when it attaches: VB-LoRA's topk beyond its num_vectors, in one line); AdaLoRA's target_r below its
init_r, which peft needs only to allocate ranks, is checked when training is scheduled (adalora.py),
so that an adapter with any ranks still imports.

Named methods (a `NamedTuner` row each in registration.py, with the peft type and the settings that
make it what it is; named_tuners.py makes the classes) and `peft:<TYPE>` for any other type:
`METHODS["peft:C3A"]` builds the class on first use. A type peft cannot apply to an encoder (it needs
task ids, a causal LM, prompt learning) is refused with one line naming what peft said.
"""

from __future__ import annotations

import functools
import importlib
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields, make_dataclass
from typing import Any, ClassVar, Literal, get_args, get_origin

import torch

from peftviz.errors import ConfigError
from peftviz.methods.base import MethodConfig, PeftMethod
from peftviz.methods.lora import LORA_STARTS, MAX_LORA_ALPHA, MAX_RANK, PeftInjection
from peftviz.methods.registration import PEFT_PREFIX
from peftviz.options import option, shown

MAX_SIZE = 65_536
MAX_FLOAT = 1e6
RANKS = ("r", "init_r", "target_r")
# sizes peft divides by, or picks k of, or builds (prompt learning's): from 1 (at 0 peft fails), unless peft's default
# is 0 (OFT's r)
POSITIVE = frozenset(
    {
        "r",
        "init_r",
        "lora_alpha",
        "deltaT",
        "n_frequency",
        "num_vectors",
        "vector_length",
        "topk",
        "n_splits",
        "num_virtual_tokens",
        "token_dim",
        "num_layers",
        "num_attention_heads",
        "num_transformer_submodules",
    }
)
OPEN_FRACTIONS = ("beta1", "beta2")  # AdaLoRA's moving averages: peft asserts 0 < β < 1
PEFT_DEFAULT, ALL_LINEAR = "peft-default", "all-linear"
ALL_LINEAR_PATTERN = (  # the encoder layers' linear maps (peft's "all-linear" would also take BERT's pooler)
    r".*\.?layer\.\d+\.(attention\.self\.(query|key|value)(_global)?|attention\.output\.dense"
    r"|intermediate\.dense|output\.dense)"
)
# adapter_config.json fields that describe the file, the training or other model kinds, not what peft computes
# on an encoder: an adapter may set them to anything
NOT_COMPUTATION = frozenset(
    {
        "task_type",
        "peft_type",
        "base_model_name_or_path",
        "revision",
        "inference_mode",
        "auto_mapping",
        "peft_version",
        "modules_to_save",
        "megatron_core",
        "save_projection",
        "save_only_topk_weights",
        "ensure_weight_tying",
        "use_effective_conv2d",
        "qalora_group_size",
        "layers_pattern",
        "fan_in_fan_out",
        "runtime_config",
    }
)
# peft config fields that are not options here: those, GPTQ's quantised LoRA, and what peftviz sets itself
NOT_OPTIONS = NOT_COMPUTATION | {"use_qalora", "total_step", "target_modules"}
# what peft raises where a tuner cannot apply to an encoder (SHADOW looks for a decoder's layers: AttributeError)
CANNOT_APPLY = (ValueError, TypeError, NotImplementedError, RuntimeError, KeyError, AssertionError, AttributeError)
WORDS = re.compile(r"[\w.-]+(,[\w.-]+)*")  # what a string option of a peft tuner takes
TARGETS_HELP = (
    "the modules peft adapts: peft-default (peft's targets for this encoder type; BERT's for the Longformer), "
    "all-linear (every linear map of the encoder layers), or module-name suffixes separated by commas "
    "(query,value)"
)


def _plain_type(hint) -> Any | None:
    """peft's annotation as an option type: int, float, bool, str, a Literal, any of them `| None`; else None."""
    if hint in (int, float, bool, str) or get_origin(hint) is Literal:
        return hint
    args = get_args(hint)
    if get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        inner = next(a for a in args if a is not type(None))
        return _plain_type(inner) and hint
    return None


def _bounds(name: str, kind, default) -> dict:
    base = kind if kind in (int, float) else next((a for a in get_args(kind) if a in (int, float)), None)
    if base is int:
        return {"at_least": _lowest(name, default), "at_most": _highest(name)}
    if base is float:
        if "dropout" in name:
            return {"at_least": 0, "below": 1}
        if name in OPEN_FRACTIONS:
            return {"above": 0, "below": 1}
        low = min(0.0, default) if isinstance(default, (int, float)) else 0.0  # peft's weights and scales are >= 0
        return {"at_least": low, "at_most": MAX_FLOAT}
    return {"max_chars": 200} if kind is str else {}


def _lowest(name: str, default) -> int:
    """An int option's lower bound: 1 for the POSITIVE sizes (but 0 where peft's default is 0); else 0, or a
    negative default, which peft uses to mean "automatic" (LoKr's decompose_factor -1)."""
    if name in POSITIVE and default != 0:
        return 1
    return min(0, default) if isinstance(default, int) else 0


def _highest(name: str) -> int:
    """An int option's upper bound: LoRA's own for its α and the ranks (lora.py), MAX_SIZE for other sizes."""
    return MAX_LORA_ALPHA if name == "lora_alpha" else MAX_RANK if name in RANKS else MAX_SIZE


def _option_fields(peft_config_class, defaults: Mapping, fixed: Mapping) -> list[tuple]:
    hints = typing.get_type_hints(peft_config_class)
    found = []
    for f in fields(peft_config_class):
        kind = _plain_type(hints[f.name])
        if f.name in NOT_OPTIONS or f.name in fixed or kind is None or f.default is MISSING:
            continue
        default = defaults.get(f.name, f.default)
        help_text = " ".join(str(f.metadata.get("help", f.name)).split())
        found.append((f.name, kind, option(default, f"peft: {help_text}", **_bounds(f.name, kind, default))))
    if "target_modules" in {f.name for f in fields(peft_config_class)}:
        target = defaults.get("target_modules", PEFT_DEFAULT)
        found.append(("target_modules", str, option(target, TARGETS_HELP, max_chars=500)))
    return found


@functools.cache
def peft_options(peft_type: str, defaults: tuple = (), fixed: tuple = ()) -> type[MethodConfig]:
    """The MethodConfig of peft's config dataclass of `peft_type` (see the module docstring); `defaults` and
    `fixed` as (name, value) pairs: peftviz's defaults over peft's, and settings that are not options."""
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING

    peft_class = PEFT_TYPE_TO_CONFIG_MAPPING[peft_type]
    found = _option_fields(peft_class, dict(defaults), dict(fixed))
    namespace = {"peft_type": peft_type, "fixed": dict(fixed), "__module__": __name__}
    return make_dataclass(f"{peft_class.__name__}Options", found, bases=(PeftTunerConfig,), namespace=namespace)


@dataclass
class PeftTunerConfig(MethodConfig):
    """Base of the generated configs: `validate` builds peft's config, so peft's own checks run."""

    peft_type: ClassVar[str] = ""
    fixed: ClassVar[dict] = {}

    def validate(self) -> None:
        super().validate()
        self._check_words()
        self.peft_config(targets=None)

    def _check_words(self) -> None:
        """peft's string options are modes and module names, never paths or patterns: a word, or words separated
        by commas (so a visitor of a shared server cannot name a server file through them)."""
        for name, kind in self.types().items():
            value = getattr(self, name)
            if kind is str and value is not None and not WORDS.fullmatch(value):
                raise ConfigError(f"{name} takes a word or module names separated by commas: {_what_breaks(value)}")

    def peft_settings(self, targets) -> dict:
        """The options as peft's config takes them: the fields peft has, the fixed ones, and `targets`."""
        from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING

        known = {f.name for f in fields(PEFT_TYPE_TO_CONFIG_MAPPING[self.peft_type])}
        values = {name: value for name, value in self.to_dict().items() if name in known and name != "target_modules"}
        if "target_modules" in known and targets is not None:
            values["target_modules"] = targets
        return values | self.fixed

    def peft_config(self, targets):
        """peft's config object of these options; ConfigError with peft's own first line where it refuses them."""
        from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING

        settings = self.peft_settings(targets) | self.placeholders()
        try:
            return PEFT_TYPE_TO_CONFIG_MAPPING[self.peft_type](**settings)
        except (ValueError, TypeError, NotImplementedError) as err:
            raise ConfigError(f"peft refuses these {self.peft_type} options: {_first_line(err)}") from None

    def placeholders(self) -> dict:
        """Settings peft requires that the method only knows later (AdaLoRA's total_step)."""
        return {}


def _peft_defaults(peft_type: str) -> dict:
    """Every field of peft's config dataclass of `peft_type` and its default."""
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING

    return {
        f.name: f.default_factory() if f.default_factory is not MISSING else f.default
        for f in fields(PEFT_TYPE_TO_CONFIG_MAPPING[peft_type])
        if f.default is not MISSING or f.default_factory is not MISSING
    }


def _same_setting(value, default) -> bool:
    """Whether an adapter's value (read from JSON) is peft's default: lists for tuples and sets, and None,
    {} and [] alike (peft writes an unset pattern either way)."""
    empty = (None, {}, [], ())
    if value in empty and default in empty:
        return True
    if isinstance(default, (set, frozenset, tuple)) and isinstance(value, list):
        return set(value) == set(default) if isinstance(default, (set, frozenset)) else list(default) == value
    return value == default


def _target_option(targets, method: str) -> str:
    """An adapter's target_modules as the option: all-linear for the encoder layers' pattern that peftviz
    exports, a list as its comma-separated suffixes; ConfigError for any other pattern (peftviz matches suffixes)."""
    if targets == ALL_LINEAR_PATTERN:
        return ALL_LINEAR
    if isinstance(targets, str):
        raise ConfigError(
            f"the adapter targets the modules matching {shown(targets)}; peftviz's {method} takes peft-default, all-linear "
            "or module-name suffixes"
        )
    return ",".join(sorted(targets))


def _what_breaks(value: str) -> str:
    """Why `value` is not words separated by commas, naming the first character that is not allowed (the value
    itself is not quoted: it may be a path, and the answer must not depend on more of it)."""
    if not value:
        return "it is empty"
    bad = next((char for char in value if not re.fullmatch(r"[\w.,-]", char)), None)
    if bad is not None:
        return f"{bad!r} is not a letter, digit, _ . - or ,"
    return "a comma may only separate two names"


def _first_line(err: Exception) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


def peft_targets(encoder, peft_type: str, choice: str) -> str | list[str]:
    """`target_modules` for peft: the suffixes of a comma list (each checked to name a module of `encoder`),
    the encoder layers' linear maps for all-linear, or peft's mapping for the encoder's type (BERT's where
    peft has none)."""
    if choice == ALL_LINEAR:
        return ALL_LINEAR_PATTERN
    if choice == PEFT_DEFAULT:
        return _default_targets(encoder, peft_type)
    targets = [part.strip() for part in choice.split(",") if part.strip()]
    names = [name for name, _ in encoder.named_modules()]
    for target in targets:
        if not any(name == target or name.endswith(f".{target}") for name in names):
            raise ConfigError(f"target_modules: no module of this {type(encoder).__name__} is named {target!r}")
    if not targets:
        raise ConfigError("target_modules is empty: give peft-default, all-linear or module names")
    return targets


def _default_targets(encoder, peft_type: str):
    from peft.utils import constants

    mapping = getattr(constants, f"TRANSFORMERS_MODELS_TO_{peft_type}_TARGET_MODULES_MAPPING", None)
    if mapping is None:
        return None  # peft decides (or says it cannot)
    model_type = encoder.config.model_type
    targets = mapping.get(model_type, mapping.get("bert"))
    return list(targets) if targets is not None else None


class PeftTuner(PeftMethod):
    """input_ids (B, T) -> hidden (B, T, D), as the plain encoder; peft's layers in place of the targeted maps.

    Parameters: what peft's layers hold (all injected into the encoder; the method module owns none).
    A subclass names `peft_type`, and optionally `fixed` (peft settings that make the method what it is,
    not options: DoRA's use_dora) and `defaults` (peftviz's defaults over peft's, where peft's do not fit
    an encoder of MiniLM's size). Its config is generated from peft's dataclass unless it declares one.
    """

    peft_type: ClassVar[str]
    fixed: ClassVar[Mapping[str, Any]] = {}
    defaults: ClassVar[Mapping[str, Any]] = {}
    from_the_papers = False
    peft_based = True  # one of `--methods peft`
    changes_base_weights: ClassVar[bool] = False  # its initialisation rewrites the frozen W (PiSSA's W_res)
    attention_note = "It changes the encoder's weights, not what attention can attend to: there is no prefix to show."
    # the range LoRA-style updates usually train in: around the presets' 5e-4 and 2e-3, a factor 5 either side
    learning_rate_grid = (1e-4, 1e-2)
    learning_rates: ClassVar[dict[str, float]] = {"quick": 2e-3, "quick-long": 2e-3, "paper": 5e-4, "paper-long": 5e-4}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "config_class" not in cls.__dict__ and getattr(cls, "peft_type", None):
            cls.config_class = peft_options(cls.peft_type, tuple(cls.defaults.items()), tuple(cls.fixed.items()))

    def attach(self, encoder) -> None:
        from peft.mapping import PEFT_TYPE_TO_TUNER_MAPPING

        targets = (
            peft_targets(encoder, self.peft_type, self.config.target_modules)
            if hasattr(self.config, "target_modules")
            else None
        )
        peft_config = self.config.peft_config(targets)
        handle = PeftInjection(encoder)
        if self.changes_base_weights:  # PiSSA, OLoRA: W becomes W_res; removing the method puts W back
            self._hooks.append(_BaseWeights(encoder))
        try:
            handle.tuner = PEFT_TYPE_TO_TUNER_MAPPING[self.peft_type](encoder, peft_config, adapter_name="default")
        except CANNOT_APPLY as err:
            handle.remove()  # layers peft wrapped before it gave up
            self.remove_hooks()
            raise ConfigError(
                f"peft cannot apply {self.name} to this {type(encoder).__name__}: {_first_line(err)}"
            ) from None
        self._hooks.insert(0, handle)  # first: `tuner` reads it; removed before the base weights are put back
        self._probe(encoder)

    def _probe(self, encoder) -> None:
        """One forward of two tokens: some tuners attach and then need more than an encoder's inputs (peft's
        Poly wants task ids). Without gradients, in eval mode, and on its own random stream, so that training
        starts as it would without it."""
        was_training = encoder.training
        ids = torch.ones(1, 2, dtype=torch.long, device=encoder.device)
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                encoder.eval()(input_ids=ids, attention_mask=torch.ones_like(ids))
        except (ValueError, TypeError, RuntimeError, AttributeError, KeyError, IndexError) as err:
            self.remove_hooks()
            raise ConfigError(
                f"peft cannot apply {self.name} to this {type(encoder).__name__}: {_first_line(err)}"
            ) from None
        finally:
            encoder.train(was_training)

    @property
    def tuner(self):
        """peft's tuner object (its BaseTuner), which holds the shared state of VeRA-like methods."""
        return self._hooks[0].tuner

    def peft_config(self) -> dict:
        """The options as the adapter_config.json of a peft classifier takes them (targets with BERT's names)."""
        settings = self.config.peft_settings(None)
        choice = getattr(self.config, "target_modules", None)
        if choice is not None:
            targets = self.tuner.peft_config["default"].target_modules if self._hooks else None
            settings["target_modules"] = sorted(targets) if isinstance(targets, set) else targets
        return settings

    @classmethod
    def options_from_peft(cls, adapter: dict) -> dict:
        """An adapter_config.json's settings as this method's options (peft's default where it lacks one);
        ConfigError (one line) where it sets what the method fixes otherwise (a DoRA adapter is not an rsLoRA
        run), or a setting that changes what peft computes and that is no option here (per-layer ranks)."""
        for name, value in cls.fixed.items():
            if adapter.get(name, value) != value:
                raise ConfigError(
                    f"the adapter sets {name}={shown(adapter.get(name))}; {cls.name} has {name}={value!r}"
                )
        # init_lora_weights that only choose how A, B start (the adapter's replace them): the base stays as it is
        start_only = {"init_lora_weights": LORA_STARTS}
        peft_defaults = _peft_defaults(cls.peft_type)
        names = [f.name for f in fields(cls.config_class)]
        for name, value in adapter.items():
            if name in names or name in cls.fixed or name in NOT_COMPUTATION or name not in peft_defaults:
                continue
            if value in start_only.get(name, ()) or _same_setting(value, peft_defaults[name]):
                continue
            raise ConfigError(f"the adapter sets {name}={shown(value)}, which peftviz's {cls.name} has no option for")
        options = {
            name: adapter[name] if adapter.get(name) is not None else peft_defaults[name]
            for name in names
            if name != "target_modules" and (adapter.get(name) is not None or name in peft_defaults)
        }
        if "target_modules" in names and adapter.get("target_modules"):
            options["target_modules"] = _target_option(adapter["target_modules"], cls.name)
        return options


class _BaseWeights:
    """A copy of the encoder's weights, put back by `remove()`: for methods whose initialisation rewrites them."""

    def __init__(self, encoder):
        self.encoder = encoder
        self.saved = {name: p.detach().clone() for name, p in encoder.named_parameters()}

    @torch.no_grad()
    def remove(self) -> None:
        for name, p in self.encoder.named_parameters():
            if name in self.saved:
                p.copy_(self.saved[name])


def tuner_class(peft_type: str) -> type[PeftTuner]:
    """The method `peft:<peft_type>`: any peft tuner type, built on first use; ConfigError for a type peft lacks
    or one that is not a tuner of an encoder's modules (prompt learning has its own methods)."""
    from peft import PeftType, PromptLearningConfig
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING, PEFT_TYPE_TO_TUNER_MAPPING

    known = [t.value for t in PeftType]
    if peft_type not in known:
        raise ConfigError(f"peft has no tuner type {shown(peft_type)}; its types: {', '.join(known)}")
    config_class = PEFT_TYPE_TO_CONFIG_MAPPING.get(peft_type)
    if peft_type not in PEFT_TYPE_TO_TUNER_MAPPING or issubclass(config_class, PromptLearningConfig):
        raise ConfigError(
            f"peft's {peft_type} is prompt learning, not a tuner of the encoder's modules: peftviz's prefix-tuning, "
            "prompt-tuning and p-tuning are its forms"
        )
    return _tuner_class(peft_type)


@functools.cache
def tuner_types() -> tuple[str, ...]:
    """peft's types that `peft:<TYPE>` takes (those `tuner_class` accepts), in peft's order: what the Train page
    offers. Some of them still cannot apply to an encoder (Poly wants task ids): training says so in one line."""
    from peft import PeftType

    accepted = []
    for peft_type in PeftType:
        try:
            tuner_class(peft_type.value)
        except ConfigError:
            continue  # prompt learning: peftviz's own prompt methods
        accepted.append(peft_type.value)
    return tuple(accepted)


# peft types whose tuner needs more of the training loop than the generic one gives: their named method's class
WITH_LOOP = {"ADALORA": ("peftviz.methods.adalora", "AdaLoRA")}  # the step count, the penalty, the allocator


@functools.cache
def _tuner_class(peft_type: str) -> type[PeftTuner]:
    title = f"peft's {peft_type} tuner, through Hugging Face peft"
    namespace = {"name": f"{PEFT_PREFIX}{peft_type}", "peft_type": peft_type, "title": title}  # named as it is made
    base = PeftTuner
    if peft_type in WITH_LOOP:
        module, name = WITH_LOOP[peft_type]
        base = getattr(importlib.import_module(module), name)
        namespace["config_class"] = base.config_class
    return type(f"Peft{peft_type.title().replace('_', '')}", (base,), namespace | {"__module__": __name__})
