"""Every dropout of every method is a probability in [0, 1): 1.0 drops everything, and peftviz refuses it in one line,
as it does for its own LoRA. The peft tuners' options are generated from peft's config dataclasses
(`peftviz.methods.peft_tuner.peft_options`), whose own checks mostly let 1.0 through: the bound is peftviz's.

Options only: no model is built."""

import pytest

from peftviz.errors import PeftvizError
from peftviz.methods import METHODS
from peftviz.methods.peft_tuner import PeftTuner, tuner_class, tuner_types

# peft's XLoRA config warns that it was given no adapters to mix: it is only built here
pytestmark = pytest.mark.filterwarnings("ignore:No value was provided for `adapters`:UserWarning")

# options a tuner's config cannot be built without (peft's default is None): the least that builds it
REQUIRED = {"peft:XLORA": {"hidden_size": 32}}


def _dropouts(cls) -> list[str]:
    """The method's dropout probabilities: float options named so (LoKr's rank_dropout_scale is a switch)."""
    return [name for name, kind in cls.config_class.types().items() if "dropout" in name and kind is float]


def _classes() -> dict:
    """Every registered method and every `peft:<TYPE>` tuner, by name."""
    return {**dict(METHODS.items()), **{f"peft:{peft_type}": tuner_class(peft_type) for peft_type in tuner_types()}}


def _one_line_refusal(cls, options: dict) -> str | None:
    """The refusal of `options` (one line), or None where they build."""
    try:
        cls.config_class.from_dict(options)
    except PeftvizError as err:
        assert "\n" not in str(err), str(err)
        return str(err)
    return None


def test_the_peft_tuners_have_dropouts_to_check():
    classes = _classes()
    tuners = {name: cls for name, cls in classes.items() if issubclass(cls, PeftTuner)}
    with_dropout = [name for name, cls in tuners.items() if _dropouts(cls)]
    # the named ones peft's LoRA and its kin hold (dora, vera, loha, ...) and the generated peft:<TYPE> ones
    assert {"dora", "vera", "loha", "peft:LORA", "peft:VERA", "peft:XLORA"} <= set(with_dropout)


@pytest.mark.parametrize("value", [0.0, 0.5])
def test_every_dropout_of_every_method_and_peft_tuner_takes_0_and_0_5(value):
    for name, cls in _classes().items():
        for option in _dropouts(cls):
            refusal = _one_line_refusal(cls, {**REQUIRED.get(name, {}), option: value})
            assert refusal is None, f"{name}: {option}={value}: {refusal}"


def test_every_dropout_of_every_method_and_peft_tuner_refuses_1_in_one_line():
    checked = []
    for name, cls in _classes().items():
        for option in _dropouts(cls):
            refusal = _one_line_refusal(cls, {**REQUIRED.get(name, {}), option: 1.0})
            assert refusal == f"{option} must be in [0, 1), not 1.0", f"{name}: {option}=1.0: {refusal}"
            assert str(cls.config_class.bounds()[option]) == "in [0, 1)", name  # what the CLI and forms state
            checked.append(name)
    assert len(set(checked)) >= 20  # the named tuners and peft's types with a dropout, peftviz's own methods
