"""`peftviz methods`: one method's options as users type it (`methods dora`) or with `--method dora`, the method
names of its help from the registry, and hostile method names (unknown, empty, `peft:`, `peft:<junk>`, newlines,
flags) each answered in one line."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peftviz import cli
from peftviz.methods import METHODS, PEFT_PREFIX
from tests.support.helpers import FUZZ

OPTIONS_HEADER = "| option | type | default | takes | help |"


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the command line on `argv`; argparse's own exits included."""
    try:
        status = cli.main(argv)
    except SystemExit as exit:
        status = exit.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_methods_dora_lists_dora_s_options_as_methods_method_dora_does(capsys):
    positional = run(["methods", "dora"], capsys)
    flagged = run(["methods", "--method", "dora"], capsys)
    assert positional == flagged
    status, out, err = positional
    assert status == 0 and not err
    assert out.startswith(OPTIONS_HEADER) and "| r | int | 8 | in [1, 1024] |" in out


def test_a_peft_tuner_and_the_parameter_counts_take_the_method_as_typed(capsys):
    status, out, _ = run(["methods", f"{PEFT_PREFIX}RANDLORA"], capsys)
    assert status == 0 and out.startswith(OPTIONS_HEADER) and "| randlora_alpha | int |" in out
    status, out, _ = run(["methods", "dora", "--counts", "tiny-bert"], capsys)
    assert status == 0 and "dora" in out and "lora |" not in out


def test_the_method_given_twice_must_be_the_same(capsys):
    assert run(["methods", "dora", "--method", "dora"], capsys)[0] == 0
    status, out, err = run(["methods", "dora", "--method", "lora"], capsys)
    assert (status, out) == (1, "")
    assert err == "peftviz: error: methods takes one method, not dora and --method lora\n"


def test_the_list_says_how_to_ask_for_one_method(capsys):
    status, out, _ = run(["methods"], capsys)
    assert status == 0 and all(f"| {name} |" in out for name in METHODS)
    assert out.rstrip().endswith("methods NAME")


def test_the_help_names_every_registered_method(capsys):
    status, out, _ = run(["methods", "--help"], capsys)
    assert status == 0
    text = " ".join(out.split()).replace("- ", "-")  # argparse wraps its lines, also after a hyphen
    assert "[METHOD]" in text and all(name in text for name in METHODS), text


NAMES = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "peft:",
            "peft: ",
            "peft:\n",
            "peft:NOPE",
            "peft:lora",
            "peft:PROMPT_TUNING",
            "peft:" + "X" * 5000,
            "DORA",
            "dora ",
            " dora",
            "lora\nx",
            "\n",
            "external:",
            "fine_tuning",
            "-x",
            "--method",
            "--counts",
            "--",
            "x" * 10_000,
            "dora,lora",
            "all",
            "peft",
        ]
    ),
    st.text(max_size=12),
    st.text(max_size=12).map(lambda text: PEFT_PREFIX + text),
    st.sampled_from(list(METHODS)),
)


@settings(FUZZ, max_examples=80)
@given(name=NAMES)
def test_any_method_name_is_listed_or_refused_in_one_line(capsys, name):
    status, out, err = run(["methods", name], capsys)
    if status == 0:  # a method, peft's tuner of a type, or what argparse reads as no method or as --help
        assert not err and out
        assert name not in METHODS or out.startswith(OPTIONS_HEADER) or out.endswith("has no options\n")
        return
    assert status in (1, 2) and not out
    assert err.startswith("peftviz: error: ") and err.count("\n") == 1 and len(err) < 3000, err


@pytest.mark.parametrize("name", ["", "peft:", "peft:\n", "lora\nx", "nope"])
def test_a_name_that_is_no_method_says_which_are(capsys, name):
    status, _, err = run(["methods", name], capsys)
    assert status == 2 and err.count("\n") == 1
    assert "peft:<TYPE>" in err or "its types:" in err, err
