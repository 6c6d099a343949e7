"""Frozen weights held in the compute dtype (`engine.hold_frozen_in`): the casts go, the numbers stay.

Under bf16 autocast every method of the table (tests/support/method_cases.py) on every encoder family is run
twice from the same seed, once as built (float32 frozen weights, cast by autocast on each forward) and once
with its frozen linear weights held in bfloat16. The casts of frozen weights are counted by a dispatch mode
that sees every `aten._to_copy` and asks whether its source is a frozen parameter's storage: an independent
count from the CPU profiler's in benchmarks/casts.py.
"""

import pytest
import torch

from peftviz import build_classifier, tiny_encoder
from peftviz.run_config import TrainConfig
from peftviz.training.engine import Engine, hold_frozen_in
from tests.support.casts import Casts
from tests.support.helpers import PADDINGS, padded_batch
from tests.support.method_cases import METHOD_CASES

# the flex tests' padding patterns on the Longformer (several windows, one row past a whole window, odd lengths)
LENGTHS = {"bert": [(29, 18)], "roberta": [(29, 18)], "longformer": PADDINGS}
CASES = [(case, family, lengths) for case in METHOD_CASES for family in case.families for lengths in LENGTHS[family]]
# DoRA's magnitude divides by ‖W + BA‖, which peft computes in float32 from the weight: from a held bf16
# weight that norm is the rounded W's, so DoRA's gradients move by bf16 rounding (its logits do not)
# and its 2 norm maps per layer (peft's default q and v) cast the held weight up once each
ROUNDED = {"dora": 1e-4}


def classifier(case, family: str):
    torch.manual_seed(1)
    encoder = tiny_encoder(family, seed=0, **({"window": 8} if family == "longformer" else {}))
    return build_classifier(encoder, case.method, 3, case.options).eval()


def bf16_step(model, lengths=(29, 18)) -> tuple[torch.Tensor, dict[str, torch.Tensor], int, int]:
    """Logits and trainable gradients of one forward and backward under CPU bf16 autocast; its casts, and
    those of frozen parameters."""
    ids, mask = padded_batch(lengths=lengths)
    with torch.autocast("cpu", dtype=torch.bfloat16), Casts() as casts:
        logits = model(ids, mask).logits
        logits.float().sum().backward()
    grads = {name: p.grad.float() for name, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    frozen = casts.of(p for p in model.parameters() if not p.requires_grad)
    return logits.float().detach(), grads, len(casts.seen), len(frozen)


@pytest.mark.parametrize(("case", "family", "lengths"), CASES, ids=[f"{c}-{f}-{n}" for c, f, n in CASES])
def test_held_frozen_weights_give_the_same_numbers_without_their_casts(case, family, lengths):
    as_built, held = classifier(case, family), classifier(case, family)
    changed = hold_frozen_in(held, torch.bfloat16)
    logits, grads, casts, frozen_casts = bf16_step(as_built, lengths)
    held_logits, held_grads, held_casts, held_frozen_casts = bf16_step(held, lengths)

    torch.testing.assert_close(held_logits, logits, atol=0, rtol=0)  # autocast's own casts, made once
    assert held_grads.keys() == grads.keys()
    tolerance = ROUNDED.get(case.method, 0.0)
    for name, grad in grads.items():
        torch.testing.assert_close(held_grads[name], grad, atol=tolerance, rtol=0, msg=name)
    if case.method == "fine-tuning":  # nothing frozen: nothing changes
        assert changed == 0 and held_casts == casts
        return
    assert changed > 0 and frozen_casts >= changed  # before: autocast cast each held tensor at least once
    assert held_casts == casts - frozen_casts + held_frozen_casts  # and nothing else changed
    if case.method in ROUNDED:
        assert 0 < held_frozen_casts < frozen_casts
    else:
        assert held_frozen_casts == 0


def test_only_frozen_linear_weights_are_held():
    model = classifier(next(c for c in METHOD_CASES if c.method == "bitfit"), "bert")
    hold_frozen_in(model, torch.bfloat16)
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            linear_frozen = isinstance(module, torch.nn.Linear) and not param.requires_grad
            assert param.dtype == (torch.bfloat16 if linear_frozen else torch.float32), (module, name)
    assert any(
        isinstance(m, torch.nn.Linear) and m.bias.requires_grad and m.bias.dtype == torch.float32
        for m in model.modules()
    )  # BitFit's trained biases stay float32 masters


def frozen_linear_parameters(model) -> set[str]:
    return {
        f"{prefix}.{name}" if prefix else name
        for prefix, module in model.named_modules()
        if isinstance(module, torch.nn.Linear)
        for name, param in module.named_parameters(recurse=False)
        if not param.requires_grad
    }


@pytest.mark.parametrize(("precision", "dtype"), [("fp32", None), ("bf16", torch.bfloat16)])
def test_the_engine_holds_frozen_weights_only_in_mixed_precision(precision, dtype):
    model = classifier(next(c for c in METHOD_CASES if c.method == "prefix-propagation"), "bert")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    held = frozen_linear_parameters(model) if dtype else set()
    assert Engine(TrainConfig(precision=precision, device="cpu")).hold_frozen(model) == len(held)
    for name, param in model.named_parameters():
        expected = before[name].to(dtype) if name in held else before[name]  # fp32: every bit as it was
        assert param.dtype == expected.dtype and torch.equal(param, expected), name
