"""The kernel decomposition (eq. 3/7) and λ(C) (eq. 6) against independent computations."""

import numpy as np
import pytest
import torch

from peftviz import build_classifier, load_encoder
from peftviz.analysis import attention, kernel
from peftviz.modeling.attention_function import KERNELS, kernel_attention
from peftviz.modeling.backbones import encoder_layers
from tests.support.helpers import padded_batch, tiny_classifier

J = 4


def capture_attention_inputs(model, ids, mask, layer: int):
    """Run the model once, returning the recorded attentions and layer `layer`'s q, k, v and mask bias."""
    seen = {}
    self_attn = encoder_layers(model.encoder)[layer].attention.self

    def grab(module, args, kwargs):
        seen["hidden"], seen["bias"] = args[0], kwargs["attention_mask"]

    handle = self_attn.register_forward_pre_hook(grab, with_kwargs=True)
    with torch.no_grad():
        out = model(ids, mask, output_attentions=True)
    handle.remove()
    B, T, _ = seen["hidden"].shape
    with torch.no_grad():  # (B, H, T, d) each
        q, k, v = (
            proj(seen["hidden"]).view(B, T, -1, self_attn.attention_head_size).transpose(1, 2)
            for proj in (self_attn.query, self_attn.key, self_attn.value)
        )
    return out, q, k, v, seen["bias"], self_attn.scaling


@pytest.mark.parametrize("layer", [0, 1])
def test_kernel_form_with_exact_lambda_equals_prefix_propagation(bert_family, layer):
    model = tiny_classifier("prefix-propagation", bert_family, prefix_length=J)
    ids, mask = padded_batch()
    out, q, k, v, bias, scaling = capture_attention_inputs(model, ids, mask, layer)

    standard = torch.softmax(q @ k.transpose(-1, -2) * scaling + bias, -1) @ v  # (B, H, j + T, d)
    lam = out.attentions[layer][..., :J].sum(-1, keepdim=True)  # recorded λ(C), (B, H, j + T, 1)
    kernel_out, _ = kernel_attention(q, k, v, bias, scaling, J, alpha=lam, sequence_weight=1 - lam)
    torch.testing.assert_close(kernel_out, standard, atol=1e-5, rtol=0)

    # a fixed α is a different model: the identity above is not vacuous
    fixed_out, _ = kernel_attention(q, k, v, bias, scaling, J, alpha=5e-3)
    assert (fixed_out - standard).abs().max() > 1e-3


def test_kernel_model_with_exact_lambda_equals_prefix_propagation_model(family):
    propagation = tiny_classifier("prefix-propagation", family, prefix_length=J)
    kernel = tiny_classifier("kernel-prefix-propagation", family, prefix_length=J)
    kernel.load_state_dict(propagation.state_dict(), strict=False)  # same prefixes and head
    ids, mask = padded_batch()
    with torch.no_grad():
        expected = propagation(ids, mask).logits
        assert (kernel(ids, mask).logits - expected).abs().max() > 1e-4  # α = 5e-3 differs
        kernel.method.alpha_override = "exact"
        torch.testing.assert_close(kernel(ids, mask).logits, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("method", ["prefix-propagation", "prefix-tuning"])
def test_recorded_lambda_equals_mass_from_q_and_k(bert_family, method):
    model = tiny_classifier(method, bert_family, prefix_length=J)
    ids, mask = padded_batch()
    layer = 1
    out, q, k, _, bias, scaling = capture_attention_inputs(model, ids, mask, layer)
    if method == "prefix-tuning":  # prefix keys live in the method, not in the hidden states
        prefix_k, _ = model.method.new_context(ids.shape[0]).prefix_kv[layer]
        k = torch.cat([prefix_k, k], dim=2)
        bias = torch.nn.functional.pad(bias, (J, 0))
    # eq. 6 written out: Σ_prefix exp(score) / Σ_all exp(score), padding excluded
    scores = (q @ k.transpose(-1, -2) * scaling).double()
    visible = (bias == 0).expand_as(scores)
    expo = torch.where(visible, scores.exp(), torch.zeros_like(scores))
    independent = expo[..., :J].sum(-1) / expo.sum(-1)

    recorded = out.attentions[layer][..., :J].sum(-1)
    torch.testing.assert_close(recorded.double(), independent, atol=1e-5, rtol=0)
    assert independent.std() > 1e-3  # λ varies over queries: a constant would not test much


def test_a_kernel_runs_lambda_reads_the_same_on_the_attention_and_kernel_pages():
    encoder, tokenizer = load_encoder("tiny-bert")
    torch.manual_seed(1)
    model = build_classifier(encoder, "kernel-prefix-propagation", 3, {"prefix_length": J, "alpha": 5e-3}).eval()
    text = "the film won three awards at the festival in cannes"
    doc = attention.document_attention(model, tokenizer, text, 32)  # the Attention page's path
    on_attention_page = doc.query_prefix_mass  # (L, H, T)
    on_kernel_page = kernel.lambda_distribution(model, tokenizer, [text], 32)  # the Kernel page's: (L, H, N = T)
    assert on_attention_page.shape == on_kernel_page.shape == (2, 4, doc.n_tokens)
    np.testing.assert_allclose(on_attention_page, on_kernel_page, atol=1e-6)
    np.testing.assert_allclose(attention.prefix_mass_grid(doc), on_kernel_page.mean(-1), atol=1e-6)
    assert on_kernel_page.min() > 0.05  # λ(C), not the α / (1 + α) ≈ 0.005 the kernel model mixes with
    shares = [a[0, :, J:, :J].sum(-1) / a[0, :, J:].sum(-1) for a in doc.attentions]  # what the records give
    np.testing.assert_allclose(torch.stack(shares).numpy(), 5e-3 / (1 + 5e-3), atol=1e-6)

    # eq. 6 written out from layer 1's queries and keys (its inputs do not depend on α)
    batch = tokenizer(text, return_tensors="pt")
    _, q, k, _, bias, scaling = capture_attention_inputs(model, batch["input_ids"], batch["attention_mask"], 0)
    assert bias is None  # one unpadded document: every key visible
    expo = (q @ k.transpose(-1, -2) * scaling).double().exp()  # (1, H, j + T, j + T)
    independent = expo[0, :, J:, :J].sum(-1) / expo[0, :, J:].sum(-1)  # (H, T): text queries
    np.testing.assert_allclose(on_kernel_page[0], independent.numpy(), atol=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_kernel_normalises_each_term_and_ignores_padding(kernel):
    torch.manual_seed(0)
    B, H, T, d = 2, 3, 7, 8
    q, k, v = (torch.randn(B, H, J + T, d) for _ in range(3))
    bias = torch.zeros(B, 1, 1, J + T)
    bias[1, ..., -2:] = torch.finfo(bias.dtype).min  # two padded keys in the second example
    alpha = 0.3
    out, weights = kernel_attention(q, k, v, bias, d**-0.5, J, alpha, prefix_kernel=kernel, sequence_kernel=kernel)
    torch.testing.assert_close(weights[..., :J].sum(-1), torch.full((B, H, J + T), alpha))
    torch.testing.assert_close(weights[..., J:].sum(-1), torch.ones(B, H, J + T))
    assert (weights >= 0).all()
    assert weights[1, ..., -2:].abs().max() == 0
    torch.testing.assert_close(out, weights @ v)


def test_kernels_differ_from_each_other():
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 5, 8), torch.randn(1, 1, 6, 8)
    from peftviz.modeling.attention_function import normalized_kernel

    results = [normalized_kernel(q, k, None, 8**-0.5, name) for name in KERNELS]
    for i in range(len(results)):
        for j in range(i + 1, len(results)):
            assert (results[i] - results[j]).abs().max() > 1e-3, (KERNELS[i], KERNELS[j])


def test_trainable_alpha_is_one_positive_parameter_per_layer():
    model = tiny_classifier("kernel-prefix-propagation", alpha=0.01, alpha_trainable=True)
    assert model.method.log_alpha.requires_grad
    torch.testing.assert_close(model.method.alpha, torch.full((2,), 0.01))


@pytest.mark.parametrize("bad", [{"alpha": 0.0}, {"kernel": "cosine"}, {"prefix_length": 0}])
def test_bad_kernel_options_are_rejected(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        tiny_classifier("kernel-prefix-propagation", **bad)


def test_fused_kernel_path_equals_the_recorded_path(family):
    """Without recording, the exp-kernel form runs as two fused attention calls: same logits."""
    model = tiny_classifier("kernel-prefix-propagation", family, prefix_length=J, alpha=0.3)
    ids, mask = padded_batch()
    with torch.no_grad():
        fused = model(ids, mask).logits
        recorded = model(ids, mask, output_attentions=True).logits
    torch.testing.assert_close(fused, recorded, atol=1e-5, rtol=0)


def test_fused_kernel_attention_equals_kernel_attention():
    from peftviz.modeling.attention_function import fused_exp_kernel_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, J + 7, 8) for _ in range(3))
    bias = torch.zeros(2, 1, 1, J + 7)
    bias[1, ..., -3:] = torch.finfo(bias.dtype).min
    expected, _ = kernel_attention(q, k, v, bias, 8**-0.5, J, alpha=0.25)
    torch.testing.assert_close(fused_exp_kernel_attention(q, k, v, bias, 8**-0.5, J, 0.25, 0.0), expected)
