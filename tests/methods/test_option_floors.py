"""Every method's numeric options at the least value their bounds take, checked against what peft (and the method)
really does with it: the method builds on a tiny BERT, trains a few steps the way the trainer calls it (`schedule`,
the loss with its `regularization`, `after_step`) and gives finite logits. A bound that lets through a value peft
fails on (a rank of 0: a ZeroDivisionError in VeRA, an empty kthvalue in AdaLoRA, a non-finite PiSSA start) fails
here, in the row of its method. The table is the registry's (and `peft:RANDLORA`, a tuner with no named method).

Rules across options are not bounds: COMPANIONS sets the other options a floor needs (OFT and BOFT are sized by one
of two options, the other 0; VB-LoRA mixes topk of its num_vectors; AdaLoRA prunes from init_r down to target_r).
"""

from __future__ import annotations

import math

import pytest
import torch

from peftviz.errors import ConfigError
from peftviz.methods import METHODS
from tests.support.helpers import padded_batch, tiny_classifier

pytestmark = pytest.mark.usefixtures("one_thread")
CASES = [*METHODS, "peft:RANDLORA"]
COMPANIONS = {  # (method, option at its floor) -> the other options its rules across options need
    ("oft", "oft_block_size"): {"r": 1},
    ("boft", "boft_block_size"): {"boft_block_num": 1},
    ("vblora", "num_vectors"): {"topk": 1},
    ("adalora", "init_r"): {"target_r": 0},
}
STEPS = 3


def floors(name: str) -> dict[str, float]:
    """Each numeric option of method `name` -> the least value its bounds take (an open bound: just above it)."""
    config_class = METHODS[name].config_class
    types = config_class.types()
    found = {}
    for option, bounds in config_class.bounds().items():
        if types[option] not in (int, float):
            continue
        if bounds.at_least is not None:
            found[option] = types[option](bounds.at_least)
        elif bounds.above is not None:
            found[option] = bounds.above + 1 if types[option] is int else math.nextafter(bounds.above, math.inf)
    return found


def trained_logits(name: str, options: dict) -> torch.Tensor:
    """The method built with `options` on a tiny BERT, trained STEPS steps as the trainer calls it; then its logits."""
    model = tiny_classifier(name, **options).train()
    model.method.schedule(STEPS + 1)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids, mask = padded_batch()
    for step in range(1, STEPS + 1):
        logits = model(ids, mask).logits
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1]))
        penalty = model.method.regularization()
        (loss if penalty is None else loss + penalty).backward()
        optimizer.step()
        model.method.after_step(step)
        optimizer.zero_grad()
    with torch.no_grad():
        return model.eval()(ids, mask).logits


@pytest.mark.parametrize("name", CASES)
def test_every_option_at_its_floor_builds_and_trains(name):
    failed = {}
    for option, floor in floors(name).items():
        options = {option: floor} | COMPANIONS.get((name, option), {})
        try:
            logits = trained_logits(name, options)
        except ConfigError as err:  # the bounds took it, and then peft or the method refused it
            failed[option] = f"{floor}: {err}"
            continue
        if not torch.isfinite(logits).all():
            failed[option] = f"{floor}: non-finite logits"
    assert not failed, failed


@pytest.mark.parametrize("name", CASES)
def test_a_size_below_its_floor_is_refused_by_the_options_alone(name):
    """The refusal comes from the options, before any model: one line naming the option."""
    config_class = METHODS[name].config_class
    for option, floor in floors(name).items():
        if config_class.types()[option] is int:
            with pytest.raises(ConfigError, match=f"^{option} must be "):
                config_class.from_dict({option: floor - 1})


def test_the_sizes_peft_divides_by_start_at_1():
    """The rank of every LoRA-like method (peft: `r` should be a positive integer), VeRA's (a division by r) and
    AdaLoRA's init_r and deltaT; OFT's r takes 0, its default, which means "sized by oft_block_size"."""
    lowest = {name: METHODS[name].config_class.bounds() for name in CASES}
    for name in (
        "dora",
        "rslora",
        "pissa",
        "olora",
        "lora-plus",
        "vera",
        "loha",
        "lokr",
        "hra",
        "vblora",
        "peft:RANDLORA",
    ):
        assert lowest[name]["r"].at_least == 1, name
    assert lowest["adalora"]["init_r"].at_least == lowest["adalora"]["deltaT"].at_least == 1
    assert lowest["oft"]["r"].at_least == 0
    assert (lowest["adalora"]["beta1"].above, lowest["adalora"]["beta1"].below) == (0, 1)


def test_adalora_with_no_triplet_to_prune_is_refused_before_training():
    """target_r at init_r leaves peft's allocator nothing to prune: its kthvalue fails at the first allocation.
    `schedule` refuses it in one line, before any step; an imported adapter (no training) may hold any ranks."""
    model = tiny_classifier("adalora", init_r=4, target_r=4)
    with pytest.raises(ConfigError, match=r"^adalora: target_r must be below init_r \(4\) to allocate ranks"):
        model.method.schedule(10)


def test_a_tuner_peft_cannot_apply_to_an_encoder_is_refused_in_one_line():
    """peft's SHADOW looks for a decoder's layers and raises AttributeError: one line, as for any other tuner."""
    with pytest.raises(ConfigError, match=r"^peft cannot apply peft:SHADOW to this BertModel: ") as refused:
        tiny_classifier("peft:SHADOW")
    assert "\n" not in str(refused.value)
