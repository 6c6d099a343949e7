"""Messages name a kind with its article (`peftviz.options.with_article`): "an int", "a float", never "a int"."""

from __future__ import annotations

import pytest

from peftviz.cli.train import parse_method_options
from peftviz.errors import ConfigError
from peftviz.options import check_type, with_article


@pytest.mark.parametrize(
    "noun, named",
    [
        ("int", "an int"),
        ("float", "a float"),
        ("str", "a str"),
        ("bool", "a bool"),
        ("list", "a list"),
        ("object", "an object"),
        ("Item", "an Item"),
        ("NoneType", "a NoneType"),
        ("", "a "),
    ],
)
def test_a_noun_takes_the_article_of_its_first_letter(noun, named):
    assert with_article(noun) == named


class Item:
    """A type whose name starts with a vowel."""


def test_a_value_of_another_type_is_named_with_its_article():
    with pytest.raises(ConfigError, match=r"^thing must be an Item, not 5$"):
        check_type("thing", 5, Item)
    with pytest.raises(ConfigError, match=r"^things must be a list, not 5$"):
        check_type("things", 5, list)


@pytest.mark.parametrize(
    "pair, message",
    [
        ("r=4.5", "option r takes an int, not '4.5'"),
        ("r=four", "option r takes an int, not 'four'"),
        ("lora_dropout=x", "option lora_dropout takes a float, not 'x'"),
        ("use_rslora=maybe", "option use_rslora takes true or false, not 'maybe'"),
        ("r", "--option 'r' is not NAME=VALUE"),
        ("rank=4", "dora has no option 'rank'; options: r, "),
    ],
)
def test_an_option_of_the_command_line_is_refused_in_one_line_with_its_kind(pair, message):
    with pytest.raises(ConfigError) as refused:
        parse_method_options("dora", [pair])
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
