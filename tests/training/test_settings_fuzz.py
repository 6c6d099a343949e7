"""Hostile settings, generated: `TrainConfig.from_dict` and the store's `stored_config` on dicts that mix
valid values with NaN, ±inf, huge and negative numbers, bools, strings, None, containers and
unknown keys, for the run settings and every registered method's options.

The oracle, `problems`, is written here, apart from options.py: it knows the types from the
annotations and reads the declared bounds, and says whether a dict is valid. A valid dict must give
a config holding exactly those values; any other must raise a one-line ConfigError. Any other
exception fails.
"""

import math
import re
import types
import typing
from dataclasses import fields
from typing import Any, Literal, get_args, get_origin

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING

from peftviz.errors import ConfigError
from peftviz.methods import METHODS
from peftviz.methods.peft_tuner import PeftTunerConfig
from peftviz.run_config import MAX_BATCH, TrainConfig
from peftviz.store.migrations import stored_config
from peftviz.store.schema import RECORD_FIELDS
from tests.support.helpers import each_case_within

FUZZ = settings(derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
METHOD_NAMES = list(METHODS)
CONFIG_CLASSES = {name: METHODS[name].config_class for name in METHOD_NAMES}
DEVICES = ("auto", "cpu", "cuda", "cuda:0", "cuda:12")

HOSTILE = st.one_of(
    st.sampled_from(
        [
            math.nan,
            math.inf,
            -math.inf,
            True,
            False,
            None,
            "",
            "3",
            "1e-3",
            "nan",
            3.0,
            0.5,
            -1,
            0,
            -0.0,
            10**6,
            10**30,
            -(10**30),
            2**64,
            10**400,
            1e308,
            5e-324,
            [],
            {},
            [1],
            {"a": 1},
            "cuda:x",
            "\n",
        ]
    ),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


# ---------------------------------------------------------------------------------------------
# the oracle


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def type_problem(value, hint) -> bool:
    """Whether `value` is not what the annotation takes (ints exactly, floats finite, no bools as numbers)."""
    if hint is Any:
        return False
    if get_origin(hint) in (typing.Union, types.UnionType):
        return value is not None and all(type_problem(value, arg) for arg in get_args(hint) if arg is not type(None))
    if get_origin(hint) is Literal:
        return type(value) is not str or value not in get_args(hint)
    base = get_origin(hint) or hint
    if base is float:
        return type(value) not in (int, float) or not _finite(value)
    return type(value) is not base


def range_problem(value, bounds) -> bool:
    return value is not None and not (
        (bounds.at_least is None or value >= bounds.at_least)
        and (bounds.above is None or value > bounds.above)
        and (bounds.at_most is None or value <= bounds.at_most)
        and (bounds.below is None or value < bounds.below)
    )


def length_problem(value, max_chars: int | None) -> bool:
    return max_chars is not None and isinstance(value, str) and len(value) > max_chars


def field_problems(options_class, values: dict) -> list[str]:
    """Names of the settings of `values` (defaults filled in) that break a type, choice, range or length rule."""
    if not isinstance(values, dict):
        return ["not a mapping"]
    hints = typing.get_type_hints(options_class)
    names = {f.name for f in fields(options_class)}
    found = [f"unknown {key!r}" for key in values if key not in names]
    bounds, lengths = options_class.bounds(), options_class.max_chars()
    for f in fields(options_class):
        value = values.get(f.name, {} if f.name == "method_options" else f.default)
        broken = type_problem(value, hints[f.name]) or (f.name in bounds and range_problem(value, bounds[f.name]))
        if broken or length_problem(value, lengths.get(f.name)):
            found.append(f.name)
    return found


def peft_problems(options_class, values: dict) -> list[str]:
    """A peft tuner's options (field rules passed): its string options are words or comma lists of them, and
    peft's own config class, asked directly, takes the settings peft has (its rules across fields)."""
    if not issubclass(options_class, PeftTunerConfig):
        return []
    merged = {f.name: values.get(f.name, f.default) for f in fields(options_class)}
    texts = [name for name, kind in options_class.types().items() if kind is str and merged[name] is not None]
    words = [name for name in texts if not re.fullmatch(r"[\w.-]+(,[\w.-]+)*", merged[name])]
    if words:
        return words
    peft_class = PEFT_TYPE_TO_CONFIG_MAPPING[options_class.peft_type]
    peft_fields = {f.name for f in fields(peft_class)} - {"target_modules"}
    settings = {name: value for name, value in merged.items() if name in peft_fields} | options_class.fixed
    if "total_step" in peft_fields:  # AdaLoRA's, known once training starts: the least its schedule takes
        settings["total_step"] = merged["tinit"] + merged["tfinal"] + 1
    try:
        peft_class(**settings)
    except (ValueError, TypeError, NotImplementedError):
        return ["peft"]
    return []


def problems(values: dict) -> list[str]:
    """Everything wrong with a TrainConfig dict, the method's options and the rules across fields included."""
    found = field_problems(TrainConfig, values)
    if found:
        return found
    method = values.get("method", TrainConfig.method)
    if method not in METHODS:
        return ["method"]
    found = field_problems(CONFIG_CLASSES[method], values.get("method_options", {}))
    found = found or peft_problems(CONFIG_CLASSES[method], values.get("method_options", {}))
    batch, effective = values.get("batch_size", 16), values.get("effective_batch_size", 16)
    if effective % batch:
        found.append("batch sizes")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", values.get("device", "auto")):
        found.append("device")
    return found


def stored_as_values(record) -> dict | list[str]:
    """What stored_config hands on to from_dict, or the problems it finds itself (a record without a model is
    refused too: the property says so)."""
    if not isinstance(record, dict) or "method" not in record:
        return ["record"]
    values = {key: value for key, value in record.items() if key not in RECORD_FIELDS}
    values.setdefault("data_seed", values.get("seed", 0))
    average_heads = values.pop("average_heads", False)
    if type(average_heads) is not bool:
        return ["average_heads"]
    if average_heads and isinstance(values.get("method_options", {}), dict):
        values["method_options"] = {**values.get("method_options", {}), "average_heads": True}
    return values


def assert_refused_in_one_line(call) -> None:
    try:
        call()
    except ConfigError as err:
        message = str(err)
        assert message and "\n" not in message and len(message) < 600, message
    else:
        raise AssertionError("accepted a setting the rules refuse")


def assert_holds_exactly(config: TrainConfig, values: dict) -> None:
    for f in fields(TrainConfig):
        if f.name in values and f.name != "method_options":
            assert getattr(config, f.name) == values[f.name]
    options = config.method_config.to_dict()
    for name, value in values.get("method_options", {}).items():
        assert options[name] == value
    assert not field_problems(TrainConfig, config.to_dict())
    assert not field_problems(type(config.method_config), options)


# ---------------------------------------------------------------------------------------------
# generating settings


def valid_value(options_class, name: str) -> st.SearchStrategy:
    """Values that obey the rules of one field, near its bounds as often as inside them."""
    hint = typing.get_type_hints(options_class)[name]
    choices = options_class.choices().get(name)
    if name == "device":
        return st.sampled_from(DEVICES)
    if choices is not None:
        return st.sampled_from(list(choices))
    optional = type(None) in get_args(hint)
    kind = options_class.types()[name]
    bounds = options_class.bounds().get(name)
    if kind is bool:
        strategy = st.booleans()
    elif kind is int:
        low = bounds.at_least if bounds.at_least is not None else bounds.above + 1
        high = bounds.at_most if bounds.at_most is not None else bounds.below - 1
        strategy = st.one_of(st.sampled_from([low, high]), st.integers(low, high))
    elif kind is float:
        low = bounds.at_least if bounds.at_least is not None else bounds.above
        high = bounds.at_most if bounds.at_most is not None else bounds.below
        strategy = st.floats(
            min_value=low,
            max_value=high,
            exclude_min=bounds.above is not None,
            exclude_max=bounds.below is not None,
            allow_nan=False,
            allow_infinity=False,
        )
    else:
        longest = options_class.max_chars().get(name)
        at_bound = [] if longest is None else [st.sampled_from(["x" * longest, "İ" * longest])]
        strategy = st.one_of(st.text(max_size=12), *at_bound)
    return st.one_of(st.none(), strategy) if optional else strategy


def outside(bounds, max_chars: int | None = None) -> list:
    """Just past each bound, and far past it; a string one character too long, and far too long."""
    if max_chars is not None:
        return ["x" * (max_chars + 1), "é" * 10000]
    if bounds is None:
        return []
    low = bounds.at_least if bounds.at_least is not None else bounds.above
    high = bounds.at_most if bounds.at_most is not None else bounds.below
    found = [] if low is None else [low - 1, low - 1e-6, -(10**30)]
    found += [] if bounds.above is None else [bounds.above]
    found += [] if high is None else [high + 1, high * 1.000001 + 1e-6, 10**30, 10**400]
    return found + ([] if bounds.below is None else [bounds.below])


# kinds of hostility, drawn first so that each is as likely as the others, whatever the field
HOSTILITY = ("bool", "nan", "inf", "none", "text", "float", "container", "outside", "huge", "anything")


@st.composite
def hostile_value(draw, options_class, name: str):
    """A value that (most likely) breaks one field's rules, of a kind drawn from HOSTILITY; often a valid
    value in the wrong clothes (as text, in a container, an int as a float)."""
    hostility = draw(st.sampled_from(HOSTILITY))
    valid = draw(valid_value(options_class, name))
    past = outside(options_class.bounds().get(name), options_class.max_chars().get(name))
    if hostility == "outside" and past:
        return draw(st.sampled_from(past))
    candidates = {
        "bool": [True, False],
        "nan": [math.nan],
        "inf": [math.inf, -math.inf],
        "none": [None],
        "text": [str(valid), "", "\n"],
        "float": [float(valid)] if type(valid) is int else [0.5, 1.0],
        "container": [[valid], {"value": valid}, []],
        "huge": [10**400, -(10**30), 2**64, 1e308],
    }.get(hostility)
    return draw(st.sampled_from(candidates) if candidates else HOSTILE)


@st.composite
def settings_of(draw, options_class, mode: str = "anything", skip: tuple[str, ...] = ()) -> dict:
    """A dict of `options_class` fields, each valid or left out, except: "clean": none hostile; "one": exactly
    one hostile field; "anything": up to two hostile fields and sometimes an unknown key."""
    names = [f.name for f in fields(options_class) if f.name not in skip]
    if mode == "one" and names:
        hostile = {draw(st.sampled_from(names))}
    elif mode == "anything" and names:
        hostile = set(draw(st.lists(st.sampled_from(names), max_size=2, unique=True)))
    else:
        hostile = set()
    values = {}
    for name in names:
        if name in hostile:
            values[name] = draw(hostile_value(options_class, name))
        elif draw(st.booleans()):
            values[name] = draw(valid_value(options_class, name))
    if mode == "anything" and draw(st.integers(0, 4)) == 0:
        values[draw(st.sampled_from(["epoch", "prefix_len", "", "a\nb", "__class__"]))] = draw(HOSTILE)
    return values


MODES = ("clean", "one setting", "one setting", "one method option", "anything")


@st.composite
def train_dicts(draw) -> dict:
    """One of MODES: every value valid (though the batch sizes may disagree); exactly one hostile run
    setting; exactly one hostile method option; or hostile anywhere, the method and its options included."""
    mode = draw(st.sampled_from(MODES))
    own = {"one setting": "one", "anything": "anything"}.get(mode, "clean")
    values = draw(settings_of(TrainConfig, own, ("method_options", "effective_batch_size")))
    method = values.setdefault("method", draw(st.sampled_from(METHOD_NAMES)))
    config_class = CONFIG_CLASSES.get(method, CONFIG_CLASSES["lora"]) if isinstance(method, str) else None
    options = settings_of(config_class or CONFIG_CLASSES["lora"], {"one method option": "one"}.get(mode, own))
    if mode == "anything":
        options = st.one_of(options, HOSTILE)
    if mode == "one method option" or draw(st.integers(0, 4)):
        values["method_options"] = draw(options)
    batch = values.get("batch_size", 16)
    if type(batch) is int and 1 <= batch <= MAX_BATCH:  # mostly a multiple, as the rule asks
        values["effective_batch_size"] = batch * draw(st.sampled_from([1, 1, 2, 4, 3]))
    if mode == "anything" and draw(st.booleans()):
        values["effective_batch_size"] = draw(hostile_value(TrainConfig, "effective_batch_size"))
    return values


# ---------------------------------------------------------------------------------------------
# the properties


def assert_refused_or_exact(refused: bool, build, expected: dict) -> None:
    """`build()` raises a one-line ConfigError when `refused`, else returns a config holding `expected`."""
    event("refused" if refused else "accepted")
    if refused:
        assert_refused_in_one_line(build)
    else:
        assert_holds_exactly(build(), expected)


def check_from_dict(values: dict) -> None:
    assert_refused_or_exact(bool(problems(values)), lambda: TrainConfig.from_dict(values), values)


@settings(FUZZ, max_examples=500)
@given(train_dicts())
@each_case_within(10)
def test_from_dict_accepts_exactly_the_valid_settings(values):
    check_from_dict(values)


@settings(FUZZ, max_examples=150)
@given(
    train_dicts(),
    st.sampled_from(
        [None, "drop_data_seed", "record", "average_heads", "hostile_average_heads", "no_method", "no_model"]
    ),
    HOSTILE,
)
@each_case_within(10)
def test_stored_config_accepts_exactly_the_valid_records(values, change, extra):
    record = dict(values)
    if change == "drop_data_seed":
        record.pop("data_seed", None)
    elif change == "record":
        record.update(label_names=extra, parameters=extra, environment=extra)
    elif change == "average_heads":
        record["average_heads"] = True
    elif change == "hostile_average_heads":
        record["average_heads"] = extra
    elif change == "no_method":
        record.pop("method")
    elif change == "no_model":
        record.pop("model", None)
    else:  # every run stores its model
        record.setdefault("model", "tiny-bert")
    handed_on = stored_as_values(record)
    refused = isinstance(handed_on, list) or bool(problems(handed_on)) or "model" not in record
    assert_refused_or_exact(refused, lambda: stored_config(record), handed_on)


@settings(FUZZ, max_examples=150)
@given(st.sampled_from(METHOD_NAMES), st.sampled_from(["clean", "one", "anything"]), st.data())
@each_case_within(10)
def test_every_method_refuses_its_hostile_options(name, mode, data):
    config_class = CONFIG_CLASSES[name]
    options = data.draw(settings_of(config_class, mode))
    refused = bool(field_problems(config_class, options) or peft_problems(config_class, options))
    event("refused" if refused else "accepted")
    if refused:
        assert_refused_in_one_line(lambda: config_class.from_dict(options))
    else:
        made = config_class.from_dict(options).to_dict()
        assert all(made[key] == value for key, value in options.items())


def test_the_records_that_are_not_objects_are_refused():
    for record in ([], "x", None, 3, [{"method": "lora"}]):
        assert_refused_in_one_line(lambda record=record: stored_config(record))
