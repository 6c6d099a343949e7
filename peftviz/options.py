"""Settings dataclasses with help text, types, choices and ranges: the base of every method config and
of the run config.

Settings arrive from the CLI and the app (parsed to the field's type), and from stored config.json
files and hand-written dicts (anything JSON holds, or worse). Every value is therefore checked on
construction, whatever its source, in this order, and the first problem raises a one-line
`ConfigError` naming the setting:

1. type, from the field's annotation:
   - int: an int; not a bool, not 3.0 (JSON keeps 3 and 3.0 apart: an integral float in a config
     file is a hand edit or a bug, and is refused rather than guessed at), not "3";
   - float: an int or a float, not a bool, and finite (not NaN, not ±inf, not an int too large for
     a float); a field declared with `finite=False` may be ±inf, never NaN;
   - bool: true or false, not 0 or 1; str: a str; dict: a dict; `Literal[...]`: one of its values;
     `X | None`: also None; Any: anything;
2. choices: from a `Literal[...]` type or an explicit `choices=` (for lists known only at run
   time, such as the registered methods); the CLI turns them into `choices=`, the app into a
   select box;
3. range: the bounds given to `option(...)`: `at_least=`/`above=` and `at_most=`/`below=`
   (inclusive and exclusive). Every number a run uses to size something (lengths, widths,
   counts) has an upper bound too, so that a typo (a prefix of 10^6) is refused before any memory
   is allocated; each bound is explained where the field is declared. A string may have a length
   bound, `max_chars=` (a label that names a folder must fit a file name);
4. `validate()`: the class's own rules across fields (e.g. a batch size dividing another).

A field is declared with `option(default, help, ...)`, so a new method states its types and
ranges next to its fields, in one place.
"""

from __future__ import annotations

import functools
import math
import re
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args, get_origin

from peftviz.errors import ConfigError

SHOWN_CHARS = 40  # a value quoted in a message is cut to this many characters


def option(
    default: Any,
    help: str,
    choices: typing.Iterable | None = None,
    *,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
    finite: bool = True,
    max_chars: int | None = None,
):
    """A settings field with help text (shown by the CLI and the app) and, optionally, its choices and
    bounds: `at_least`/`above` (inclusive/exclusive lower), `at_most`/`below` (inclusive/exclusive
    upper), `max_chars` (a string's length). A float field is finite unless `finite=False`."""
    metadata: dict[str, Any] = {"help": help}
    if choices is not None:
        metadata["choices"] = choices
    bounds = Bounds(at_least, above, at_most, below)
    if bounds != Bounds():
        metadata["bounds"] = bounds
    if not finite:
        metadata["finite"] = False
    if max_chars is not None:
        metadata["max_chars"] = max_chars
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Bounds:
    """The range of a number: `value in bounds`; `str(bounds)` is how a message states it, e.g. "in [0, 1)"."""

    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None

    def __contains__(self, value) -> bool:
        return (
            (self.at_least is None or value >= self.at_least)
            and (self.above is None or value > self.above)
            and (self.at_most is None or value <= self.at_most)
            and (self.below is None or value < self.below)
        )

    def __str__(self) -> str:
        low = ("[", self.at_least) if self.at_least is not None else ("(", self.above)
        high = ("]", self.at_most) if self.at_most is not None else (")", self.below)
        if low[1] is not None and high[1] is not None:
            return f"in {low[0]}{_number(low[1])}, {_number(high[1])}{high[0]}"
        if low[1] is not None:
            return f"{'>=' if low[0] == '[' else '>'} {_number(low[1])}"
        return f"{'<=' if high[0] == ']' else '<'} {_number(high[1])}"


def _number(bound: float) -> str:
    """1e-3 -> "0.001", 1024 -> "1024", 4294967295 -> "4294967295": bounds as a user would type them."""
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def shown(value: Any) -> str:
    """A value as a one-line message quotes it: its repr, cut to SHOWN_CHARS; an int too long to print
    is described by its digit count."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's str() digit limit: about bit_length · log10(2) digits
        text = "9" * math.ceil(value.bit_length() * math.log10(2))
    if len(text) <= SHOWN_CHARS:
        return text
    if isinstance(value, int) and not isinstance(value, bool):
        return f"an integer of about {len(text.lstrip('-'))} digits"
    return text[: SHOWN_CHARS - 3] + "..."


# what no one-line name may hold: control characters (newline, NUL, ESC, ...: Unicode's Cc), line and paragraph
# separators (Zl, Zp), and lone surrogates (Cs), which UTF-8 cannot store
NOT_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def breaks_lines(text: str) -> bool:
    """Whether `text` holds anything a one-line name may not (`NOT_ONE_LINE`)."""
    return NOT_ONE_LINE.search(text) is not None


def with_article(noun: str) -> str:
    """A noun as a message names one of its kind ("an int", "a float": a type's name, mostly), with the article its
    first letter takes (a vowel: an)."""
    return f"{'an' if noun[:1].lower() in {'a', 'e', 'i', 'o', 'u'} else 'a'} {noun}"


def _literal_values(annotation) -> tuple | None:
    """Literal["a", "b"] -> ("a", "b"); Literal[...] | None -> the same; anything else -> None."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    for arg in get_args(annotation):
        if get_origin(arg) is Literal:
            return get_args(arg)
    return None


# ---------------------------------------------------------------------------------------------
# type checks: check_type(name, value, hint, finite) raises ConfigError or returns


def _is_union(hint) -> bool:
    return get_origin(hint) in (typing.Union, types.UnionType)


def _check_union(name: str, value, hint, finite: bool) -> None:
    """`X | None`: None, or what X takes (with several X, what any of them takes)."""
    if value is None and type(None) in get_args(hint):
        return
    alternatives = [arg for arg in get_args(hint) if arg is not type(None)]
    errors = []
    for arg in alternatives:
        try:
            return check_type(name, value, arg, finite)
        except ConfigError as err:
            errors.append(err)
    raise errors[0]


def _check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, not {shown(value)}")


def _check_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer, not {shown(value)}")


def _check_float(name: str, value, finite: bool) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ConfigError(f"{name} must be a number, not {shown(value)}")
    try:
        as_float = float(value)
    except OverflowError:  # an int beyond any float
        as_float = math.inf
    if math.isnan(as_float) or (finite and math.isinf(as_float)):
        raise ConfigError(f"{name} must be a finite number, not {shown(value)}")


def _check_str(name: str, value) -> None:
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a string, not {shown(value)}")


def _check_dict(name: str, value) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a mapping of names to values, not {type(value).__name__}")


_SIMPLE_CHECKS = {bool: _check_bool, int: _check_int, str: _check_str, dict: _check_dict}


def _check_literal(name: str, value, hint) -> None:
    allowed = get_args(hint)
    if not any(type(value) is type(choice) and value == choice for choice in allowed):  # True is not 1
        raise ConfigError(f"{name} must be one of {', '.join(map(str, allowed))}, not {shown(value)}")


def check_type(name: str, value, hint, finite: bool = True) -> None:
    """Raise ConfigError when `value` is not what the annotation `hint` takes (see the module docstring)."""
    if hint is Any:
        return
    if get_origin(hint) is Literal:
        return _check_literal(name, value, hint)
    if _is_union(hint):
        return _check_union(name, value, hint, finite)
    base = get_origin(hint) or hint  # dict[str, Any] -> dict
    if base is float:
        return _check_float(name, value, finite)
    if base in _SIMPLE_CHECKS:
        return _SIMPLE_CHECKS[base](name, value)
    if isinstance(base, type) and not isinstance(value, base):
        raise ConfigError(f"{name} must be {with_article(base.__name__)}, not {shown(value)}")
    return None


@functools.cache
def _type_hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@dataclass
class Options:
    """Fields are declared with `option(default, help, ...)`; their values are checked on construction."""

    def __post_init__(self):
        self._check_types()
        self._check_choices()
        self._check_bounds()
        self._check_lengths()
        try:
            self.validate()
        except ConfigError:
            raise
        except ValueError as err:  # subclasses raise plain ValueError; callers catch one kind
            raise ConfigError(str(err)) from None

    def validate(self) -> None:
        """Raise ValueError naming the bad setting: rules across fields. Subclasses extend."""

    def _check_types(self) -> None:
        hints = _type_hints(type(self))
        for f in fields(self):
            check_type(f.name, getattr(self, f.name), hints[f.name], f.metadata.get("finite", True))

    def _check_choices(self) -> None:
        for name, allowed in self.choices().items():
            _check_choice(name, getattr(self, name), allowed)

    def _check_bounds(self) -> None:
        for name, bounds in self.bounds().items():
            check_bound(name, getattr(self, name), bounds)

    def _check_lengths(self) -> None:
        for name, limit in self.max_chars().items():
            _check_length(name, getattr(self, name), limit)

    @classmethod
    def check_value(cls, name: str, value, called: str | None = None) -> None:
        """Raise ConfigError where `value` is not what field `name` takes (its type, choices, bounds, length), the
        message naming it `called` (default: `name`). For a value from elsewhere, checked by the field's own rules
        before it becomes the option: an adapter_config.json's num_virtual_tokens as a prompt length, say."""
        called = called or name
        declared = next(f for f in fields(cls) if f.name == name)
        check_type(called, value, _type_hints(cls)[name], declared.metadata.get("finite", True))
        if name in cls.choices():
            _check_choice(called, value, cls.choices()[name])
        if "bounds" in declared.metadata:
            check_bound(called, value, declared.metadata["bounds"])
        if "max_chars" in declared.metadata:
            _check_length(called, value, declared.metadata["max_chars"])

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> Options:
        if not isinstance(values, dict):
            raise ConfigError(f"{cls.__name__} needs a mapping of options, not {type(values).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted((shown_name(key) for key in values if key not in known), key=str)
        if unknown:
            listed = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            raise ConfigError(
                f"{cls.__name__} has no option(s) {listed}; options: {', '.join(sorted(known)) or 'none'}"
            )
        return cls(**values)

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("help", "") for f in fields(cls)}

    @classmethod
    def choices(cls) -> dict[str, tuple]:
        """Fields with a fixed set of values: name -> the values, from `choices=` or a Literal type."""
        hints = _type_hints(cls)
        found = {}
        for f in fields(cls):
            values = f.metadata.get("choices")
            values = tuple(values) if values is not None else _literal_values(hints[f.name])
            if values is not None:
                found[f.name] = values
        return found

    @classmethod
    def bounds(cls) -> dict[str, Bounds]:
        """Fields with a range: name -> its Bounds (what the CLI or a form could state or enforce)."""
        return {f.name: f.metadata["bounds"] for f in fields(cls) if "bounds" in f.metadata}

    @classmethod
    def max_chars(cls) -> dict[str, int]:
        """String fields with a length bound: name -> the most characters they take."""
        return {f.name: f.metadata["max_chars"] for f in fields(cls) if "max_chars" in f.metadata}

    @classmethod
    def types(cls) -> dict[str, type]:
        """name -> bool, int, float or str: the type a CLI flag or a form widget parses a value as."""
        hints = _type_hints(cls)
        parsed = {}
        for f in fields(cls):
            hint = hints[f.name]
            candidates = [hint, *get_args(hint)]
            parsed[f.name] = next((t for t in (bool, int, float) if t in candidates), str)
        return parsed


def _check_choice(name: str, value, allowed: tuple) -> None:
    if value is not None and value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(map(str, allowed))}, not {shown(value)}")


def check_bound(name: str, value, bounds: Bounds) -> None:
    """Raise ConfigError where `value` (None aside) is outside `bounds`: "r must be in [1, 1024], not 0"."""
    if value is not None and value not in bounds:
        raise ConfigError(f"{name} must be {bounds}, not {shown(value)}")


def _check_length(name: str, value, limit: int) -> None:
    if value is not None and len(value) > limit:
        raise ConfigError(f"{name} must be at most {limit} characters, not {len(value)}")


def shown_name(key) -> str:
    """A name as a message shows it (an unknown option's, a peft type's): plain when it looks like a name (an
    identifier of at most SHOWN_CHARS characters), else as `shown` quotes it."""
    return key if isinstance(key, str) and key.isidentifier() and len(key) <= SHOWN_CHARS else shown(key)
