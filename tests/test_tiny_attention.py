"""The tiny-attention adapter: placement, zero-output identity, parameter averaging (eqs. 5–8)."""

import pytest
import torch
from safetensors.torch import save_file

from peftviz import tiny_encoder
from peftviz.methods.tiny_attention import TinyAttention
from tests.helpers import padded_batch, tiny_classifier

HIDDEN, LAYERS = 32, 2


def encoder_hidden(model, ids, mask):
    """The encoder's last hidden states as the classifier runs it (hooks and context included)."""
    seen = {}

    def grab(module, args, output):
        seen["h"] = output.last_hidden_state

    handle = model.encoder.register_forward_hook(grab)
    with torch.no_grad():
        model(ids, mask)
    handle.remove()
    return seen["h"]


def make_heads_large(model, scale=0.5, seed=0):
    """Tiny initialisation makes every adapter nearly a no-op; equality tests need real effects."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.method.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)


@pytest.mark.parametrize("placement", ["sequential", "parallel"])
def test_zero_output_projection_gives_the_frozen_backbone(family, placement):
    model = tiny_classifier("tiny-attention", family, n_heads=2, head_dim=3, placement=placement)
    make_heads_large(model)
    ids, mask = padded_batch()
    plain = tiny_encoder(family, seed=0).eval()
    with torch.no_grad():
        backbone = plain(input_ids=ids, attention_mask=mask).last_hidden_state
    assert (encoder_hidden(model, ids, mask) - backbone).abs().max() > 1e-2  # the adapter acts
    with torch.no_grad():
        for adapter in model.method.adapters:
            adapter.out.weight.zero_()
    torch.testing.assert_close(encoder_hidden(model, ids, mask), backbone, atol=1e-6, rtol=0)


def test_sequential_and_parallel_placements_differ():
    ids, mask = padded_batch()
    outs = []
    for placement in ("sequential", "parallel"):
        model = tiny_classifier("tiny-attention", placement=placement)
        make_heads_large(model)
        outs.append(encoder_hidden(model, ids, mask))
    assert (outs[0] - outs[1]).abs().max() > 1e-3


def test_averaging_identical_heads_leaves_the_output_unchanged(family, tmp_path):
    one_head = tiny_classifier("tiny-attention", family, n_heads=1, head_dim=2)
    make_heads_large(one_head)
    path = tmp_path / "one_head.safetensors"
    save_file({k: v.contiguous() for k, v in one_head.method.state_dict().items()}, path)

    four_heads = tiny_classifier(
        "tiny-attention", family, n_heads=4, head_dim=2, init_from=str(path), init_perturbation=0.0
    )
    four_heads.head.load_state_dict(one_head.head.state_dict())
    ids, mask = padded_batch()
    with torch.no_grad():
        before = four_heads(ids, mask).logits
        torch.testing.assert_close(before, one_head(ids, mask).logits, atol=1e-5, rtol=0)  # equal copies of 1H
        four_heads.method.average_heads_()
        after = four_heads(ids, mask).logits
    torch.testing.assert_close(after, before, atol=1e-5, rtol=0)
    assert all(adapter.n_heads == 1 for adapter in four_heads.method.adapters)
    assert four_heads.method.averaged_from == 4


def test_averaging_different_heads_changes_the_output():
    model = tiny_classifier("tiny-attention", n_heads=4)
    make_heads_large(model)
    ids, mask = padded_batch()
    with torch.no_grad():
        before = model(ids, mask).logits
        model.method.average_heads_()
        after = model(ids, mask).logits
    assert (before - after).abs().max() > 1e-4


def test_averaged_model_has_exactly_one_heads_parameters():
    model = tiny_classifier("tiny-attention", n_heads=4, head_dim=2)
    model.method.average_heads_()
    one_head = tiny_classifier("tiny-attention", n_heads=1, head_dim=2)
    assert model.parameter_counts() == one_head.parameter_counts()
    assert model.parameter_counts()["method"] == LAYERS * 4 * HIDDEN * 1 * 2


def test_average_is_the_mean_of_heads_and_the_sum_of_output_projections():
    adapter = TinyAttention(HIDDEN, n_heads=3, head_dim=2)
    heads = adapter.per_head()
    single = adapter.averaged()
    torch.testing.assert_close(single.query.weight, heads["query"].mean(0))
    torch.testing.assert_close(single.out.weight, 3 * heads["out"].mean(0))


def test_perturbed_copies_are_close_but_not_equal(tmp_path):
    one_head = tiny_classifier("tiny-attention", n_heads=1)
    make_heads_large(one_head)
    path = tmp_path / "one_head.safetensors"
    save_file({f"method.{k}": v.contiguous() for k, v in one_head.method.state_dict().items()}, path)
    model = tiny_classifier("tiny-attention", n_heads=4, init_from=str(path), init_perturbation=0.05)
    queries = model.method.adapters[0].per_head()["query"]  # (M, D, H)
    spread = (queries - queries.mean(0)).abs().max()
    assert 0 < spread < 0.5 * queries.abs().max()


def test_init_from_rejects_a_file_of_another_head_size(tmp_path):
    one_head = tiny_classifier("tiny-attention", n_heads=1, head_dim=1)
    path = tmp_path / "one_head.safetensors"
    save_file({k: v.contiguous() for k, v in one_head.method.state_dict().items()}, path)
    with pytest.raises(ValueError, match="head size 2"):
        tiny_classifier("tiny-attention", n_heads=4, head_dim=2, init_from=str(path))


def test_output_projection_starts_tiny():
    adapter = TinyAttention(HIDDEN, n_heads=2, head_dim=4)
    assert adapter.out.weight.abs().max() <= 0.01 / 4**0.5
    assert adapter.out.weight.abs().max() > 0
