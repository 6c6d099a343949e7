"""The Longformer's FlexAttention path (`set_local_attention(model, "flex")`) against the banded blocks.

The new path exists only in peftviz's Longformer layers; BERT and RoBERTa layers are untouched. So it is
checked three ways: on a Longformer, against the blocks (and against transformers' Longformer, in
test_longformer.py); on a Longformer holding a BERT's weights (the shipped MiniLM) and one holding a
RoBERTa's, against that BERT's and that RoBERTa's own full attention on texts inside the window, where
banded attention is full attention.
Gradients: torch's FlexAttention refuses a backward on the CPU, but its CPU path is its reference math, which
autograd can differentiate; `flex_gradients` lets it, so the gradients of the function the GPU kernel
computes are checked here (the kernel against that math is torch's own test; benchmarks/gpu_checks.py
repeats the comparison on a GPU). Attention dropout runs inside the kernel from a hashed mask, checked
against a dense attention that applies the same mask after the softmax, as torch's dropout does.
Where only the blocks can serve (recorded weights and λ(C), kernels other than exp, α = λ(C)) "flex" falls
back to them, and the records equal the blocks' exactly.
"""

import contextlib

import pytest
import torch
import torch.nn.attention.flex_attention as flex
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModel, LongformerConfig

from peftviz import METHODS, build_classifier, tiny_encoder
from peftviz.modeling import longformer
from peftviz.modeling.backbones import load_encoder
from peftviz.modeling.longformer import (
    LongEncoder,
    LongLayout,
    band_block_mask,
    dropout_keep,
    dropout_seed,
    dropout_threshold,
    flex_local_attention,
    set_local_attention,
)
from tests.support.helpers import LONG_OPTIONS, PADDINGS, padded_batch

J, WINDOW = 3, 8  # prefix length (LONG_OPTIONS'); the tiny Longformer's window (4 positions on each side)
BF16_TOLERANCE = 0.02  # of the largest value (measured: logits 0.3%, gradients 1.1%); bf16 keeps 8 bits
OPTIONS, LENGTHS = LONG_OPTIONS, PADDINGS


def long_classifier(method: str, seed: int = 0):
    torch.manual_seed(seed + 1)
    encoder = tiny_encoder("longformer", seed=seed, window=WINDOW)
    return build_classifier(encoder, method, 3, OPTIONS.get(method, {})).eval()


@pytest.fixture
def flex_calls(monkeypatch):
    """How many times the FlexAttention path ran."""
    calls = []
    real = longformer.flex_local_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(longformer, "flex_local_attention", counted)
    return calls


def logits(model, path: str, ids, mask):
    set_local_attention(model, path)
    with torch.no_grad():
        return model(ids, mask).logits


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("method", list(METHODS))
def test_flex_equals_the_blocks_in_logits(method, lengths, flex_calls):
    model = long_classifier(method)  # eval: no dropout, so both paths may run
    ids, mask = padded_batch(lengths=lengths)
    blocks = logits(model, "blocks", ids, mask)
    assert not flex_calls
    flex = logits(model, "flex", ids, mask)
    torch.testing.assert_close(flex, blocks, atol=1e-5, rtol=0)
    assert len(flex_calls) == model.encoder.config.num_hidden_layers  # the kernel split too (exp kernels, fixed α)


@pytest.fixture
def flex_gradients(monkeypatch):
    """FlexAttention's reference math with its backward on the CPU (torch refuses it only by a device check)."""
    monkeypatch.setattr(flex, "_validate_device", lambda *tensors: None)
    monkeypatch.setattr(longformer, "_flex_attention", lambda device_type, grad: flex.flex_attention)


def logits_and_gradients(model, path: str, ids, mask) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    set_local_attention(model, path)
    model.zero_grad(set_to_none=True)
    logits = model(ids, mask).logits
    logits.pow(2).sum().backward()  # not .sum(): softmax's logits sum has zero gradient through the head's bias
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("method", list(METHODS))
def test_flex_equals_the_blocks_in_logits_and_every_trainable_gradient(method, lengths, flex_gradients, flex_calls):
    model = long_classifier(method)  # eval: no dropout (dropout's own test is below), gradients still on
    ids, mask = padded_batch(lengths=lengths)
    blocks, blocks_grads = logits_and_gradients(model, "blocks", ids, mask)
    got, grads = logits_and_gradients(model, "flex", ids, mask)
    torch.testing.assert_close(got, blocks, atol=1e-5, rtol=0)
    assert grads.keys() == blocks_grads.keys() and blocks_grads  # (MonteCLoRA's priors have none in eval mode)
    for name, grad in blocks_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-5, rtol=1e-5, msg=name)
    assert len(flex_calls) == model.encoder.config.num_hidden_layers


@pytest.mark.parametrize("method", ["fine-tuning", "prefix-tuning", "prefix-propagation", "lora"])
def test_flex_equals_the_blocks_under_bf16_autocast(method, flex_gradients, flex_calls):
    """bf16: both paths round their scores and weights differently; within BF16_TOLERANCE of the largest value."""
    model = long_classifier(method)
    ids, mask = padded_batch(lengths=(29, 18))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        blocks, blocks_grads = logits_and_gradients(model, "blocks", ids, mask)
        got, grads = logits_and_gradients(model, "flex", ids, mask)
    assert flex_calls
    assert (got - blocks).abs().max() <= BF16_TOLERANCE * blocks.abs().max()
    for name, grad in blocks_grads.items():
        assert (grads[name] - grad).abs().max() <= BF16_TOLERANCE * grad.abs().max() + 1e-7, name


def test_gradients_on_the_cpu_run_the_blocks(flex_calls):
    """torch's FlexAttention has no CPU backward; on a GPU its gradients are checked by benchmarks/gpu_checks.py."""
    model = long_classifier("prefix-propagation")
    set_local_attention(model, "flex")
    model(*padded_batch(lengths=(29, 18))).logits.sum().backward()
    assert not flex_calls


def test_flex_on_the_long_minilm_equals_minilm_bert_inside_the_window(flex_calls):
    """A Longformer holding BERT weights (the shipped MiniLM, window 256): on 100 tokens every query's band
    covers the text, so the FlexAttention path must give BERT's own full-attention hidden states."""
    long, tokenizer = load_encoder("long-minilm")
    bert, _ = load_encoder("minilm")
    set_local_attention(long, "flex")
    ids = torch.randint(1000, 20000, (2, 100))
    ids[:, 0], ids[:, -1] = tokenizer.cls_token_id, tokenizer.sep_token_id
    mask = torch.ones_like(ids)
    mask[1, 70:] = 0
    with torch.no_grad():
        got = long.eval()(ids, mask).last_hidden_state
        want = bert.eval()(ids, attention_mask=mask).last_hidden_state
    assert flex_calls
    visible = mask.bool()
    assert (got[visible] - want[visible]).abs().max().item() < 1e-4


def roberta_as_longformer(roberta, window: int) -> LongEncoder:
    """A Longformer holding a RoBERTa's weights: same names; the global projections copy the local ones."""
    c = roberta.config
    config = LongformerConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads,
        intermediate_size=c.intermediate_size,
        max_position_embeddings=c.max_position_embeddings,
        pad_token_id=c.pad_token_id,
        attention_window=window,
    )
    state = dict(roberta.state_dict())
    for key, value in list(state.items()):
        for proj in ("query", "key", "value"):
            if f".self.{proj}." in key:
                state[key.replace(f".self.{proj}.", f".self.{proj}_global.")] = value.clone()
    encoder = LongEncoder(config)
    encoder.load_state_dict(state, strict=False)
    missing = set(encoder.state_dict()) - set(state)
    assert not missing, missing  # every parameter came from the RoBERTa
    return encoder.eval()


def test_flex_on_a_roberta_longformer_equals_roberta_inside_the_window(flex_calls):
    roberta = AutoModel.from_config(
        tiny_encoder("roberta").config, add_pooling_layer=False, attn_implementation="eager"
    )
    roberta.load_state_dict(tiny_encoder("roberta", seed=3).state_dict())
    long = roberta_as_longformer(roberta.eval(), window=64)
    set_local_attention(long, "flex")
    ids, mask = padded_batch(lengths=(30, 21))
    with torch.no_grad():
        got = long(ids, mask).last_hidden_state
        want = roberta(ids, attention_mask=mask).last_hidden_state
    assert flex_calls
    visible = mask.bool()
    torch.testing.assert_close(got[visible], want[visible], atol=1e-5, rtol=0)


@pytest.mark.parametrize("method", ["prefix-propagation", "prefix-tuning", "kernel-prefix-propagation"])
def test_recorded_weights_and_prefix_mass_come_from_the_blocks_under_flex(method, flex_calls):
    model = long_classifier(method)
    ids, mask = padded_batch(lengths=(29, 18))
    with torch.no_grad():
        set_local_attention(model, "blocks")
        blocks = model(ids, mask, output_attentions=True)
        set_local_attention(model, "flex")
        flex = model(ids, mask, output_attentions=True)
    assert not flex_calls  # recording needs the weights, which only the blocks make
    for recorded, reference in zip(flex.attentions, blocks.attentions, strict=True):
        torch.testing.assert_close(recorded.to_dense(), reference.to_dense(), atol=0, rtol=0)
        torch.testing.assert_close(recorded.key_mass(J), reference.key_mass(J), atol=0, rtol=0)  # λ(C)


def test_training_with_attention_dropout_runs_flex_where_it_has_a_backward(flex_gradients, flex_calls):
    model = long_classifier("prefix-propagation").train()
    assert model.encoder.config.attention_probs_dropout_prob > 0
    set_local_attention(model, "flex")
    ids, mask = padded_batch(lengths=(29, 18))
    model(ids, mask).logits.sum().backward()
    assert len(flex_calls) == model.encoder.config.num_hidden_layers  # dropout no longer needs the blocks
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


# ---------------------------------------------------------------------------------------------
# attention dropout inside the kernel


def local_inputs(lengths, e: int, j: int, dtype=torch.float64, seed: int = 0):
    """q (B, H, T, d), k, v (B, H, L, d), extra_k, extra_v (B, H, e, d) needing gradients, and the layout."""
    g = torch.Generator().manual_seed(seed)
    B, T, H, d = len(lengths), max(lengths), 2, 4
    q, k, v, extra_k, extra_v = (
        torch.randn(B, H, n, d, generator=g, dtype=dtype).requires_grad_() for n in (T, j + T, j + T, e, e)
    )
    _, mask = padded_batch(lengths=lengths)
    layout = LongLayout(n_prefix_queries=j, key_visible=F.pad(mask.bool(), (j, 0), value=True))
    return (q, k, v, extra_k, extra_v), layout


def dense_local_attention(q, k, v, extra_k, extra_v, layout: LongLayout, size: int, scaling: float, keep=None, p=0.0):
    """The text queries' attention written out: (B, H, T, e + L) scores over [extra | positions], the band and
    front rule, padding, softmax, then torch's dropout (weights · keep / (1 − p))."""
    T = q.shape[2]
    e, j = extra_k.shape[2], layout.n_prefix_queries
    keys, values = torch.cat([extra_k, k], dim=2), torch.cat([extra_v, v], dim=2)  # (B, H, N, d)
    t, key = torch.arange(T)[:, None], torch.arange(keys.shape[2])[None, :]
    seen = (key < e + j + 1) | ((t - (key - e - j)).abs() <= size)  # (T, N)
    seen = seen & F.pad(layout.key_visible, (e, 0), value=True)[:, None, None, :]  # (B, 1, T, N)
    weights = (q @ keys.transpose(-1, -2) * scaling).masked_fill(~seen, float("-inf")).softmax(-1)
    if keep is not None:
        weights = weights * keep / (1 - p)
    return weights @ values


def kept(seed: torch.Tensor, shape: tuple[int, int, int, int], p: float) -> torch.Tensor:
    """(B, H, T, N) `dropout_keep` on the whole index grid."""
    b, h, t, key = (torch.arange(n).view([-1 if i == axis else 1 for i in range(4)]) for axis, n in enumerate(shape))
    return dropout_keep(seed, b, h, t, key, torch.tensor(dropout_threshold(p)))


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize(("e", "j"), [(0, 0), (3, 0), (0, 3)])  # none, prefix-tuning's keys, prefix positions
def test_flex_dropout_is_torch_dropout_with_the_hashed_mask(lengths, e, j, flex_gradients):
    inputs, layout = local_inputs(lengths, e, j)
    p, size, scaling = 0.3, 4, 0.5
    torch.manual_seed(7)
    got = flex_local_attention(*inputs, layout, size, scaling, dropout=p)
    torch.manual_seed(7)
    seed = dropout_seed("cpu")  # the seed the call drew
    B, H, T, _ = inputs[0].shape
    keep = kept(seed, (B, H, T, e + j + T), p)
    rate = dropout_threshold(p) / 2**24  # p on the hash's 24-bit grid: 0.3 is 0.29999998
    want = dense_local_attention(*inputs, layout, size, scaling, keep, rate)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)
    upstream = torch.randn_like(want)
    grads = torch.autograd.grad(got, inputs, upstream)
    want_grads = torch.autograd.grad(want, inputs, upstream)
    for name, grad, want_grad in zip(("q", "k", "v", "extra_k", "extra_v"), grads, want_grads, strict=True):
        torch.testing.assert_close(grad, want_grad, atol=1e-12, rtol=1e-10, msg=name)


def test_the_hashed_mask_keeps_one_minus_p_independently():
    """Over a 4 × 12 × 512 × 520 grid: the kept share is 1 − p within 5 standard errors; another seed's mask
    agrees with it as independent masks do, (1 − p)² + p²; neighbouring keys and queries are not correlated."""
    p, shape = 0.1, (4, 12, 512, 520)
    first, second = (kept(torch.tensor(seed), shape, p).double() for seed in (12345, 12346))
    n = first.numel()
    assert abs(first.mean().item() - (1 - p)) < 5 * (p * (1 - p) / n) ** 0.5
    agree = (first == second).double().mean().item()
    assert abs(agree - ((1 - p) ** 2 + p**2)) < 5 * (0.18 * 0.82 / n) ** 0.5
    for neighbour in (first[..., 1:] * first[..., :-1], first[:, :, 1:] * first[:, :, :-1]):
        assert abs(neighbour.mean().item() - (1 - p) ** 2) < 5 * (0.81 * 0.19 / neighbour.numel()) ** 0.5


def test_flex_dropout_is_unbiased():
    """E[dropout attention] = attention: the mean over 400 seeds' outputs is the output without dropout,
    within 5 standard errors of each element."""
    inputs, layout = local_inputs((29, 18), e=2, j=1)
    inputs = [t.detach() for t in inputs]
    with torch.no_grad():
        plain = flex_local_attention(*inputs, layout, 4, 0.5)
        draws = torch.stack([flex_local_attention(*inputs, layout, 4, 0.5, dropout=0.3) for _ in range(400)])
    error = draws.std(0) / 400**0.5
    assert ((draws.mean(0) - plain).abs() <= 5 * error + 1e-12).all()


def test_the_block_mask_is_built_once_per_shape():
    band_block_mask.cache_clear()
    for seed in range(3):  # three batches of one shape, other padding: one mask
        inputs, layout = local_inputs((29, 18 + seed), e=0, j=3, seed=seed)
        with torch.no_grad():
            flex_local_attention(*(t.detach() for t in inputs), layout, 4, 0.5)
    assert band_block_mask.cache_info().misses == 1
    inputs, layout = local_inputs((33, 18), e=0, j=3)
    with torch.no_grad():
        flex_local_attention(*(t.detach() for t in inputs), layout, 4, 0.5)
    assert band_block_mask.cache_info().misses == 2  # a new length: a new mask


def graphs_over_a_sweep(compiled, dropout: float, monkeypatch) -> int:
    """Dynamo's graphs for FlexAttention `compiled` over six lengths, forward (dynamo's guards and recompiles are
    the same whatever backend makes the kernels: "eager" makes none, where inductor's CPU kernels take a minute)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(longformer, "_flex_attention", lambda device_type, grad: compiled)
    for T in (100, 130, 200, 257, 300, 333):
        inputs, layout = local_inputs((T, T - 20), e=0, j=2, dtype=torch.float32)
        with torch.no_grad():
            flex_local_attention(*(t.detach() for t in inputs), layout, 16, 0.5, dropout)
    return counters["stats"]["unique_graphs"]


@pytest.mark.slow  # dynamo traces FlexAttention twelve times: seconds
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_a_sweep_of_lengths_compiles_flex_at_most_twice(monkeypatch, dropout):
    """The GPU path's FlexAttention (`compiled_flex`, dynamic shapes) compiles a sweep of six lengths twice (a
    first, static graph, then the dynamic one); static shapes compiled it once a length (past torch's limit of
    8 it ran the reference math)."""
    assert graphs_over_a_sweep(longformer.compiled_flex(backend="eager"), dropout, monkeypatch) <= 2
    static = torch.compile(flex.flex_attention, dynamic=False, backend="eager")
    assert graphs_over_a_sweep(static, dropout, monkeypatch) == 6


def test_the_blocks_are_the_default(flex_calls):
    model = long_classifier("fine-tuning")
    with torch.no_grad():
        model(*padded_batch(lengths=(29, 18)))
    assert not flex_calls


def test_an_unknown_path_is_one_line():
    with pytest.raises(ValueError, match="local attention must be one of blocks, flex, not 'fast'"):
        set_local_attention(long_classifier("fine-tuning"), "fast")


@pytest.mark.parametrize(
    ("options", "exact"),
    [
        ({"kernel": "rbf"}, False),
        ({"sequence_kernel": "linear"}, False),
        ({}, True),
        ({"alpha_trainable": True}, False),
    ],
)
def test_the_kernel_split_runs_flex_only_with_exp_kernels_and_a_fixed_alpha(options, exact, flex_calls):
    """Eq. 3 with exp kernels and α per layer (fixed or trained) is two softmax attentions: flex and a fused call.
    Other kernels, and α = λ(C) (each query's own prefix mass), need the weights: the blocks."""
    torch.manual_seed(1)
    encoder = tiny_encoder("longformer", seed=0, window=WINDOW)
    model = build_classifier(encoder, "kernel-prefix-propagation", 3, {"prefix_length": J} | options).eval()
    ids, mask = padded_batch(lengths=(29, 18))
    with model.method.with_alpha("exact") if exact else contextlib.nullcontext():
        blocks = logits(model, "blocks", ids, mask)
        flexed = logits(model, "flex", ids, mask)
    torch.testing.assert_close(flexed, blocks, atol=1e-5, rtol=0)
    runs_flex = not exact and options in ({}, {"alpha_trainable": True})
    assert len(flex_calls) == (model.encoder.config.num_hidden_layers if runs_flex else 0)


@settings(max_examples=60, deadline=None)
@given(p=st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, 1.0, 1e-9, 1 - 1e-9, -0.0]))
def test_any_dropout_probability_gives_an_output_or_torchs_error(p):
    inputs, layout = local_inputs((13, 9), e=1, j=1)
    inputs = [t.detach() for t in inputs]
    if not 0 <= p <= 1:
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
            flex_local_attention(*inputs, layout, 4, 0.5, dropout=p)
        return
    with torch.no_grad():
        out = flex_local_attention(*inputs, layout, 4, 0.5, dropout=p)
    assert torch.isfinite(out).all()
    if p == 1:
        assert not out.any()  # every weight dropped, as torch's dropout at p = 1


@given(path=st.text(max_size=12))
def test_any_other_path_is_refused_in_one_line(path):
    model = long_classifier("fine-tuning")
    if path in ("blocks", "flex"):
        assert set_local_attention(model, path) == model.encoder.config.num_hidden_layers
        return
    with pytest.raises(ValueError, match=r"^local attention must be one of blocks, flex, not ") as error:
        set_local_attention(model, path)
    assert "\n" not in str(error.value)
