"""An adapter_config.json checked before peft sees it, and peft's config made of what was checked.

peft builds what an adapter_config.json says and checks little of it: a rank "4" or 4.0 fails deep in torch, a rank
of 10^12 asks for terabytes, a list where a module name belongs ends in a traceback. `import` reads the file once
(`sources.Source.json`: at most 4 MB, a JSON object) and checks it before peft builds anything, one set of rules for
every peft type:

1. the file's own (`check_fields`, before any model is loaded): every field that peft's config class of the
   adapter's type declares, by that field's annotation, as JSON holds it,

       int, float        a number of its kind (an int is not true, 4.0 or "4"; a float is finite)
       bool              true or false
       str, an enum      a string of at most MAX_CHARS characters (which value: peft's own checks, below)
       list[str]         at most MAX_ITEMS module names (letters, digits, _ . -: what peft matches module names by)
       list[X], tuple    at most MAX_ITEMS X's (a tuple: exactly its items)
       dict, sub-config  an object of at most MAX_ITEMS entries, nested at most MAX_DEPTH deep
       X | None          also null (so is a field whose peft default is null)

   and its numbers within the bounds `peft:<TYPE>` holds the same field to as an option (`peft_tuner.peft_options`:
   ranks from 1 to 1,024, other sizes up to 65,536, dropouts in [0, 1)), whichever method reads the adapter. A field
   peft does not declare is left out, as peft leaves it;
2. the reading method's (`peftviz.methods`: its `check_peft_values`): the fields it reads as its options, by the
   options' own types and bounds, those a user's options are held to (LoRA's r up to 1,024, prompt tuning's
   num_virtual_tokens up to 1,024), and what its peft form reads besides (AdaLoRA's total_step and rank_pattern);
   then peft's own checks of its config (`peft_config`);
3. the base's (`check_base_fields`, once the base is loaded and before peft builds on it): prompt learning's fields
   that describe the base (BASE_FIELDS) must be the base's, since peft sizes the prompt by them.

Every refusal is one line that names adapter_config.json and the field. peft then builds its config from the checked
object, not from the file again.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
import types
import typing
from typing import Any, Literal, get_args, get_origin

from peftviz.errors import ConfigError
from peftviz.methods.peft_tuner import CANNOT_APPLY, peft_options
from peftviz.options import shown, with_article

MAX_CHARS = 4096  # a path (base_model_name_or_path) or a pattern of module names
MAX_ITEMS = 10_000  # module names, per-map patterns: a few per layer of the deepest encoder
MAX_DEPTH = 4  # peft's sub-configs and patterns are flat objects of lists
MODULE_NAME = re.compile(r"[\w.-]+")
# prompt learning's fields that describe the base: field -> the base config's attribute it must equal
BASE_FIELDS = {
    "token_dim": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_attention_heads": "num_attention_heads",
    "num_transformer_submodules": None,
}
ENCODER_SUBMODULES = 1  # peft's num_transformer_submodules of an encoder (a seq2seq model has 2)


@functools.cache
def _hints(peft_type: str) -> dict[str, Any]:
    """Field -> annotation of peft's config class of `peft_type`; `| None` where peft's default is None though its
    annotation says otherwise (P-tuning's `encoder_hidden_size: int = None`)."""
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING

    config_class = PEFT_TYPE_TO_CONFIG_MAPPING[peft_type]
    hints = typing.get_type_hints(config_class)
    return {
        f.name: hints[f.name] | None if f.default is None else hints[f.name] for f in dataclasses.fields(config_class)
    }


def check_fields(adapter: dict, peft_type: str) -> None:
    """ConfigError (one line, naming the field) where a field of `adapter` that peft's config of `peft_type` declares
    is not what its annotation takes (the table of the module docstring), or a number is beyond the bounds
    `peft:<TYPE>` holds that field to as an option (`peft_tuner.peft_options`: ranks from 1 to 1,024, sizes to 65,536,
    dropouts in [0, 1), ...), whichever method reads it."""
    hints = _hints(peft_type)
    options, numbers = _numbers(peft_type)
    for name, value in adapter.items():
        if name in hints:
            _check(name, value, hints[name], 0)
        if name in numbers and value is not None:  # null: peft's default
            options.check_value(name, value)


@functools.cache
def _numbers(peft_type: str) -> tuple[type, frozenset[str]]:
    """peft's config of `peft_type` as peftviz's options (`peft_options`), and the names of its int and float fields:
    one set of types and bounds for `peft:<TYPE>`'s options and for every adapter of the type. What it sets aside
    (AdaLoRA's total_step, the file's own settings) is checked by type alone, or by the method that reads it."""
    options = peft_options(peft_type)
    bounded = options.bounds()
    return options, frozenset(
        name for name, kind in options.types().items() if kind in (int, float) and name in bounded
    )


def check_base_fields(adapter: dict, encoder_config, base: str) -> None:
    """ConfigError where a base-describing field of the adapter (BASE_FIELDS) is not the base's: the adapter was trained
    on another base, and peft would size its prompt by the field."""
    for name, attribute in BASE_FIELDS.items():
        value = adapter.get(name)
        expected = getattr(encoder_config, attribute) if attribute else ENCODER_SUBMODULES
        if value is not None and value != expected:
            raise ConfigError(f"{name} is {value}, and base {base} has {expected} (the adapter was trained on another)")


def peft_config(adapter: dict):
    """peft's config object of the checked `adapter` (its declared fields; its type's config class), in inference
    mode; ConfigError with the first line of peft's own refusal (AdaLoRA's tinit beyond its total_step, say)."""
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING

    config_class = PEFT_TYPE_TO_CONFIG_MAPPING[adapter["peft_type"]]
    hints = _hints(adapter["peft_type"])
    try:
        declared = {name: _built(value, hints[name]) for name, value in adapter.items() if name in hints}
        config = config_class(**config_class.check_kwargs(**declared))
    except CANNOT_APPLY as err:
        raise ConfigError(f"peft refuses it: {str(err).strip() or type(err).__name__}".splitlines()[0]) from None
    config.inference_mode = True  # nothing of training: no prompt encoder to build, no tokenizer to fetch
    return config


def _built(value, hint):
    """A sub-config's object as peft's dataclass, where the field takes only that (LoRA's runtime_config): peft reads
    its attributes, and never writes it to a file itself."""
    alternatives = [arg for arg in get_args(hint) if arg is not type(None)] if _is_union(hint) else [hint]
    if isinstance(value, dict) and len(alternatives) == 1 and dataclasses.is_dataclass(alternatives[0]):
        return alternatives[0](**value)
    return value


# ---------------------------------------------------------------- one value against one annotation


def _check(name: str, value, hint, depth: int) -> None:
    """ConfigError where `value` is not what `hint` takes (as JSON holds it); `name` says where it is."""
    alternatives = [arg for arg in get_args(hint) if arg is not type(None)] if _is_union(hint) else [hint]
    if value is None and (len(alternatives) < len(get_args(hint)) or hint is Any):
        return
    fitting = [alternative for alternative in alternatives if _same_kind(value, alternative)]
    if not fitting:
        expected = " or ".join(dict.fromkeys(_described(alternative) for alternative in alternatives))
        raise ConfigError(f"{name} must be {expected}, not {shown(value)}")
    _check_inside(name, value, fitting[0], depth)


def _is_union(hint) -> bool:
    return get_origin(hint) in (typing.Union, types.UnionType)


def _kind(hint) -> type:
    """The JSON kind an annotation takes: bool, int, float, str, list or dict (Any: object)."""
    origin = get_origin(hint) or hint
    if origin is Literal:
        return type(get_args(hint)[0])
    if isinstance(origin, type) and issubclass(origin, enum.Enum):
        return str
    if origin in (bool, int, float, str):
        return origin
    if origin in (list, tuple, set, frozenset):
        return list
    if origin is dict or dataclasses.is_dataclass(origin):
        return dict
    return object


def _same_kind(value, hint) -> bool:
    """Whether `value` is of the JSON kind `hint` takes (an int is a float; a bool is neither)."""
    kind = _kind(hint)
    if kind is object:
        return True
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, kind) or (kind is float and isinstance(value, int))


def _described(hint) -> str:
    kind = _kind(hint)
    words = {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }
    return words.get(kind, with_article(getattr(kind, "__name__", "value")))


def _check_inside(name: str, value, hint, depth: int) -> None:
    """The checks within a kind: a string's length, a container's size and items (numbers: `_numbers`)."""
    kind = _kind(hint)
    if kind is str and len(value) > MAX_CHARS:
        raise ConfigError(f"{name} must be at most {MAX_CHARS} characters, not {len(value)}")
    if kind in (list, dict):
        _check_container(name, value, hint, depth + 1)
    elif kind is object:
        _check_json(name, value, depth)


def _check_container(name: str, value, hint, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ConfigError(f"{name} is nested deeper than {MAX_DEPTH} levels")
    if len(value) > MAX_ITEMS:
        raise ConfigError(f"{name} must hold at most {MAX_ITEMS} items, not {len(value)}")
    if isinstance(value, dict):
        args = get_args(hint)
        for key, item in value.items():
            _check(f"{name}[{shown(key)}]", item, args[1] if len(args) == 2 else Any, depth)
        return
    items = _item_hints(hint, len(value))
    if items is None:
        raise ConfigError(f"{name} must hold {len(get_args(hint))} items, not {len(value)}")
    for index, (item, item_hint) in enumerate(zip(value, items)):
        _check(f"{name}[{index}]", item, item_hint, depth)
        if item_hint is str and not MODULE_NAME.fullmatch(item):
            raise ConfigError(f"{name}[{index}] must be a module name (letters, digits, _ . -), not {shown(item)}")


def _item_hints(hint, length: int) -> list | None:
    """The annotation of each of `length` items of a list or tuple annotation; None for a tuple of another length."""
    args = [arg for arg in get_args(hint) if arg is not Ellipsis]
    if get_origin(hint) is tuple and Ellipsis not in get_args(hint):
        return args if len(args) == length else None
    return [args[0] if args else Any] * length


def _check_json(name: str, value, depth: int) -> None:
    """Any JSON value, its containers and strings bounded (an object no annotation describes)."""
    if isinstance(value, (list, dict)):
        _check_container(name, value, dict[str, Any] if isinstance(value, dict) else list[Any], depth + 1)
    elif isinstance(value, str) and len(value) > MAX_CHARS:
        raise ConfigError(f"{name} must be at most {MAX_CHARS} characters, not {len(value)}")
