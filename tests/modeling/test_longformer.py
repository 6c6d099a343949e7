"""peftviz's Longformer attention against transformers' and against attention written out densely.

The generic method tests (test_methods.py, test_kernel.py, test_tiny_attention.py) also run on a
tiny Longformer through the `family` fixture; these are the Longformer-specific ones.
"""

import pytest
import torch
from transformers import LongformerModel

from peftviz import METHODS, build_classifier, tiny_encoder
from peftviz.modeling.backbones import load_encoder
from peftviz.modeling.longformer import BandedAttention, LongEncoder, set_local_attention
from tests.support.casts import Casts
from tests.support.helpers import LONG_OPTIONS, padded_batch

J, WINDOW = 3, 8  # prefix length (LONG_OPTIONS'); the tiny Longformer's window (4 positions on each side)
OPTIONS = LONG_OPTIONS


def long_classifier(method: str, seed: int = 0, **options):
    torch.manual_seed(seed + 1)
    encoder = tiny_encoder("longformer", seed=seed, window=WINDOW)
    return build_classifier(encoder, method, 3, OPTIONS.get(method, {}) | options).eval()


@pytest.mark.parametrize("path", ["blocks", "flex"])  # the local attention's two paths (test_flex_attention.py)
def test_attention_equals_transformers_longformer_with_global_first_token(path):
    encoder = tiny_encoder("longformer", window=WINDOW).eval()
    set_local_attention(encoder, path)
    reference = LongformerModel(encoder.config, add_pooling_layer=False).eval()
    reference.load_state_dict(encoder.state_dict())  # same parameter names
    ids, mask = padded_batch(lengths=(21, 13))  # several windows, one example padded
    global_mask = torch.zeros_like(ids)
    global_mask[:, 0] = 1
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask, global_attention_mask=global_mask).last_hidden_state
        ours = encoder(ids, mask).last_hidden_state
    visible = mask.bool()
    torch.testing.assert_close(ours[visible], expected[visible], atol=1e-5, rtol=0)


def test_a_saved_longformer_folder_loads_as_peftviz_encoder(tmp_path):
    """What `allenai/longformer-base-4096` does by name: a Longformer checkpoint loads unchanged."""
    config = tiny_encoder("longformer", window=WINDOW, vocab_size=30522).config  # MiniLM's tokenizer's ids
    reference = LongformerModel(config, add_pooling_layer=False).eval()
    reference.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    from peftviz.modeling.backbones import minilm_path

    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(tmp_path)
    encoder, _ = load_encoder(str(tmp_path))
    assert isinstance(encoder, LongEncoder)
    for name, tensor in reference.state_dict().items():
        torch.testing.assert_close(encoder.state_dict()[name], tensor, atol=0, rtol=0)


@pytest.mark.parametrize("method", list(METHODS))
def test_padding_to_the_window_multiple_does_not_change_logits(method):
    model = long_classifier(method)
    ids, mask = padded_batch(lengths=(13,))  # 13 (+ j) tokens: the local attention pads to a multiple of 4
    with torch.no_grad():
        inside = model(ids, mask).logits
        for extra in (3, 11, 19):  # padding given by the caller: to and past window multiples
            padded_ids = torch.nn.functional.pad(ids, (0, extra), value=model.encoder.config.pad_token_id)
            padded_mask = torch.nn.functional.pad(mask, (0, extra), value=0)
            torch.testing.assert_close(model(padded_ids, padded_mask).logits, inside, atol=1e-5, rtol=0)


def dense_reference(module, hidden, layout, ctx) -> torch.Tensor:
    """Longformer attention weights (B, H, L, e + L) written out from its definition, L × L.

    Global queries (the first g positions) read every visible position with the global projections;
    the others read the global positions and the non-global visible positions within s of them,
    with the local projections. Prefix-tuning's keys come first and every query reads them.
    """
    B, L, _ = hidden.shape
    H, d, s, g = module.num_heads, module.head_dim, module.one_sided_attn_window_size, layout.n_global

    def heads(x):
        return x.view(B, L, H, d).transpose(1, 2)  # (B, H, L, d)

    extra = ctx.prefix_kv[module.layer_id][0] if ctx.prefix_kv else hidden.new_zeros(B, H, 0, d)
    local_q, local_k = heads(module.query(hidden)), torch.cat([extra, heads(module.key(hidden))], 2)
    global_q, global_k = heads(module.query_global(hidden)), torch.cat([extra, heads(module.key_global(hidden))], 2)
    e = extra.shape[2]
    position = torch.arange(L)
    is_global = position < g
    near = (position[:, None] - position[None, :]).abs() <= s  # (L, L)
    local_sees = (near & ~is_global[None, :]) | is_global[None, :]  # (L, L)
    visible = layout.key_visible[:, None, None, :]  # (B, 1, 1, L)
    front = torch.ones(B, 1, L, e, dtype=torch.bool)
    local_ok = torch.cat([front, (local_sees & visible).expand(B, 1, L, L)], -1)
    global_ok = torch.cat([front, visible.expand(B, 1, L, L)], -1)
    scores = torch.where(is_global[:, None], global_q @ global_k.transpose(-1, -2), local_q @ local_k.transpose(-1, -2))
    ok = torch.where(is_global[:, None], global_ok, local_ok)
    scores = (scores * d**-0.5).double().masked_fill(~ok, float("-inf"))
    return scores.softmax(-1)


@pytest.mark.parametrize("method", ["prefix-propagation", "prefix-tuning", "fine-tuning"])
@pytest.mark.parametrize("layer", [0, 1])
def test_recorded_prefix_mass_equals_mass_from_q_and_k(method, layer):
    model = long_classifier(method)
    seen = {}
    self_attention = model.encoder.encoder.layer[layer].attention.self
    handle = self_attention.register_forward_pre_hook(lambda m, args: seen.update(args=args))
    ids, mask = padded_batch(lengths=(29, 18))
    with torch.no_grad():
        out = model(ids, mask, output_attentions=True)
        expected = dense_reference(self_attention, *seen["args"])  # (B, H, L_pad, e + L_pad)
    handle.remove()
    recorded = out.attentions[layer]
    assert isinstance(recorded, BandedAttention)
    B, H, Tq, Tk = recorded.shape
    e = Tk - Tq
    expected = expected[:, :, :Tq, : e + Tq]  # without the padding to the window multiple
    g = recorded.n_global
    n_prefix = model.method.config.prefix_length if method != "fine-tuning" else 1  # fine-tuning: mass on <s>
    mass = recorded.key_mass(n_prefix).double()
    reference_mass = expected[..., :n_prefix].sum(-1)
    rows = mask.bool().unsqueeze(1).expand(B, H, -1)  # text queries that are not padding
    rows = torch.cat([torch.ones(B, H, Tq - mask.shape[1], dtype=torch.bool), rows], -1)
    torch.testing.assert_close(mass[:, :, :g], reference_mass[:, :, :g], atol=1e-5, rtol=0)  # global part
    torch.testing.assert_close(
        mass[:, :, g:][rows[:, :, g:]], reference_mass[:, :, g:][rows[:, :, g:]], atol=1e-5, rtol=0
    )
    assert reference_mass[:, :, g:][rows[:, :, g:]].std() > 1e-3  # mass varies: a constant would not test much
    # the whole banded record, made dense, is the reference's weights
    dense = recorded.to_dense().double()
    torch.testing.assert_close(dense[rows], expected[rows], atol=1e-5, rtol=0)


def test_banded_record_is_linear_in_length():
    model = long_classifier("prefix-propagation")
    ids, mask = padded_batch(lengths=(400,))
    with torch.no_grad():
        record = model(ids, mask, output_attentions=True).attentions[0]
    B, H, L, _ = record.shape
    stored = record.front.numel() + record.band.numel() + record.global_rows.numel()
    assert stored == B * H * (L * (J + 1) + L * (WINDOW + 1) + (J + 1) * L)  # O(L · window), no L × L
    torch.testing.assert_close(record.rows(100, 104), record.to_dense()[:, :, 100:104])


def test_kernel_with_exact_alpha_equals_prefix_propagation_on_longformer():
    propagation = long_classifier("prefix-propagation")
    kernel = long_classifier("kernel-prefix-propagation")
    kernel.load_state_dict(propagation.state_dict(), strict=False)
    ids, mask = padded_batch(lengths=(27, 12))
    with torch.no_grad():
        expected = propagation(ids, mask).logits
        assert (kernel(ids, mask).logits - expected).abs().max() > 1e-4
        kernel.method.alpha_override = "exact"
        torch.testing.assert_close(kernel(ids, mask).logits, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_trains_on_longformer(method):
    model = long_classifier(method).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in trainable]
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    ids, mask = padded_batch(lengths=(30, 17))
    labels = torch.tensor([0, 2])
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(ids, mask).logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    assert sum(not torch.equal(p, b) for p, b in zip(trainable, before)) >= len(trainable) - 6  # see test_methods


@pytest.mark.parametrize("method", ["fine-tuning", "prefix-tuning", "prefix-propagation"])
def test_under_autocast_a_layer_casts_each_hidden_state_once(method):
    """Autocast casts a float32 input in every linear layer that reads it: a layer would copy its hidden state
    once per projection (six) and once for the feed-forward block. The attention casts it once for all six,
    and its keys and values stay in bf16 (a float32 concatenation would be cast back by the attention)."""
    model = long_classifier(method)
    ids, mask = padded_batch(lengths=(29, 18))
    with torch.autocast("cpu", dtype=torch.bfloat16), Casts() as casts:
        model(ids, mask)  # the forward's casts (each has its cast back in the backward)
    B, D, layers = ids.shape[0], model.encoder.config.hidden_size, model.encoder.config.num_hidden_layers
    L = ids.shape[1] + model.method.n_prefix_queries
    hidden_casts = [c for c in casts.seen if c.shape == (B, L, D) and c.source == torch.float32]
    assert len(hidden_casts) == 2 * layers  # the attention's input and the feed-forward block's
    H, d = model.encoder.config.num_attention_heads, D // model.encoder.config.num_attention_heads
    head_casts = [c for c in casts.seen if len(c.shape) == 4 and c.shape[1] == H and c.shape[-1] == d]
    assert all(c.source == torch.float32 for c in head_casts)  # only prefix-tuning's keys, cast down once
    assert len(head_casts) == (2 * layers if method == "prefix-tuning" else 0)
