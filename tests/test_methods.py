"""Properties every method must have: parameter counts, what trains, padding invariance."""

import pytest
import torch

from peftviz import METHODS, build_classifier, tiny_encoder
from tests.helpers import padded_batch, tiny_classifier

L, D, C = 2, 32, 3  # the tiny encoder's layers and hidden size; number of labels


def head_params(d=D, c=C):
    return d * d + d + d * c + c  # dense (with bias) + out_proj (with bias)


@pytest.mark.parametrize("j", [1, 4, 16])
def test_prefix_propagation_has_half_the_prefix_parameters_of_prefix_tuning(family, j):
    tuning = tiny_classifier("prefix-tuning", family, prefix_length=j).parameter_counts()
    propagation = tiny_classifier("prefix-propagation", family, prefix_length=j).parameter_counts()
    assert tuning["method"] == 2 * L * j * D  # a key and a value vector per slot per layer
    assert propagation["method"] == L * j * D  # one vector per slot per layer
    assert 2 * propagation["method"] == tuning["method"]


def test_parameter_counts_match_closed_forms(family):
    backbone = sum(p.numel() for p in tiny_encoder(family).parameters())
    j, mlp, M, Dh = 4, 16, 3, 2
    expected_method = {
        "fine-tuning": 0,
        "prefix-tuning": 2 * L * j * D,
        "prefix-propagation": L * j * D,
        "kernel-prefix-propagation": L * j * D + L,  # + one trainable log α per layer
        "tiny-attention": L * 4 * D * M * Dh,  # W_Q, W_K, W_V (D × M·Dh), O (M·Dh × D), no biases
    }
    options = {
        "prefix-tuning": {"prefix_length": j},
        "prefix-propagation": {"prefix_length": j},
        "kernel-prefix-propagation": {"prefix_length": j, "alpha_trainable": True},
        "tiny-attention": {"n_heads": M, "head_dim": Dh},
    }
    for method, n_method in expected_method.items():
        counts = tiny_classifier(method, family, **options.get(method, {})).parameter_counts()
        assert counts["method"] == n_method, method
        assert counts["head"] == head_params()
        assert counts["backbone"] == backbone
        assert counts["total"] == backbone + n_method + head_params()
        assert counts["trainable"] == (backbone if method == "fine-tuning" else 0) + n_method + head_params()

    # reparameterisation: embedding (j × D) + Linear(D, mlp) + Linear(mlp, 2·L·D)
    width = 2 * L * D
    mlp_counts = tiny_classifier("prefix-tuning", family, prefix_length=j, reparameterize=True, mlp_hidden=mlp)
    assert mlp_counts.parameter_counts()["method"] == j * D + (D * mlp + mlp) + (mlp * width + width)


def test_fixed_alpha_is_not_a_parameter():
    assert tiny_classifier("kernel-prefix-propagation", prefix_length=4).parameter_counts()["method"] == L * 4 * D


CASES = [
    ("fine-tuning", {}),
    ("prefix-tuning", {}),
    ("prefix-tuning", {"reparameterize": True, "mlp_hidden": 16}),
    ("prefix-propagation", {}),
    ("kernel-prefix-propagation", {"alpha_trainable": True}),
    ("kernel-prefix-propagation", {"kernel": "rbf", "sequence_kernel": "polynomial"}),
    ("tiny-attention", {"n_heads": 2}),
    ("tiny-attention", {"placement": "parallel"}),
]


@pytest.mark.parametrize("method,options", CASES)
def test_frozen_weights_stay_bitwise_and_trainable_weights_move(family, method, options):
    model = tiny_classifier(method, family, **options).train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)  # all params: flags decide
    ids, mask = padded_batch()
    labels = torch.tensor([0, 2])
    for step in range(3):
        loss = torch.nn.functional.cross_entropy(model(ids, mask).logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert any(name.startswith("head.") for name in trainable)
    # Longformer's last layer: only <s> reaches the head, and <s> is a global query that reads the
    # global projections, so that layer's local query/key/value get no gradient (others do)
    last = f"encoder.encoder.layer.{L - 1}.attention.self"
    unused = {f"{last}.{proj}.{p}" for proj in ("query", "key", "value") for p in ("weight", "bias")}
    for name, p in model.named_parameters():
        if name in trainable and family == "longformer" and name in unused:
            assert torch.equal(p, before[name])
        elif name in trainable:
            assert not torch.equal(p, before[name]), f"{name} did not move"
        else:
            assert torch.equal(p, before[name]), f"frozen {name} changed"
    backbone_trains = method == "fine-tuning"
    assert all(p.requires_grad == backbone_trains for p in model.encoder.parameters())


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_logits_do_not_change_when_batched_with_a_longer_example(family, method, pooling):
    torch.manual_seed(1)
    model = build_classifier(tiny_encoder(family), method, C, pooling=pooling).eval()
    ids, mask = padded_batch(lengths=(12, 5))
    with torch.no_grad():
        batched = model(ids, mask).logits[1]
        alone = model(ids[1:, :5], mask[1:, :5]).logits[0]
        longer_alone = model(ids[:1], mask[:1]).logits[0]
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=0)
    assert (batched - longer_alone).abs().max() > 1e-4  # the two examples really differ


@pytest.mark.parametrize("method", list(METHODS))
def test_recorded_attention_covers_prefix_and_sequence_keys(method):
    model = tiny_classifier(method)
    ids, mask = padded_batch(lengths=(9, 5))
    with torch.no_grad():
        out = model(ids, mask, output_attentions=True)
        plain = model(ids, mask).logits
    torch.testing.assert_close(out.logits, plain)  # recording changes nothing
    n_keys = model.method.new_context(1).n_prefix  # prefix keys in front of the sequence's
    n_queries = model.method.n_prefix_queries
    assert (n_keys > 0) == model.method.prefix_keys
    assert out.n_prefix_queries == n_queries
    assert len(out.attentions) == L
    for weights in out.attentions:
        assert weights.shape == (2, 4, n_queries + 9, n_keys + 9)
        assert weights[1, :, :, n_keys + 5 :].abs().max() == 0  # padded keys get no weight
        if model.method.trained_alpha(model.method.config) is None:  # the kernel form's rows sum to 1 + α
            torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_unknown_method_and_option_are_named():
    with pytest.raises(ValueError, match="unknown method 'no-such-method'"):
        tiny_classifier("no-such-method")
    with pytest.raises(ValueError, match="prefix_len"):
        tiny_classifier("prefix-tuning", prefix_len=3)


def test_prefix_propagation_follows_eq_1(family):
    """Layer 1 reads cat(P^(1), C); layer l > 1 reads cat(P^(l) + H[:j], H[j:]) of the layer before."""
    j = 3
    model = tiny_classifier("prefix-propagation", family, prefix_length=j)
    layers = model.encoder.encoder.layer
    seen = {}
    hooks = [
        model.encoder.embeddings.register_forward_hook(lambda m, a, out: seen.update(embeddings=out)),
        layers[0].register_forward_hook(lambda m, a, out: seen.update(layer0=out)),
    ]
    for index, layer in enumerate(layers):
        hooks.append(layer.attention.register_forward_pre_hook(
            lambda m, args, index=index: seen.update({f"input{index}": args[0]})
        ))  # fmt: skip
    ids, mask = padded_batch()
    with torch.no_grad():
        model(ids, mask)
    for handle in hooks:
        handle.remove()
    P = model.method.prefix().view(j, L, D).transpose(0, 1)  # (L, j, D); eval mode: no dropout

    torch.testing.assert_close(seen["input0"][:, :j], P[0].expand(2, -1, -1))
    torch.testing.assert_close(seen["input0"][:, j:], seen["embeddings"])  # text positions unshifted
    torch.testing.assert_close(seen["input1"][:, :j], seen["layer0"][:, :j] + P[1])
    torch.testing.assert_close(seen["input1"][:, j:], seen["layer0"][:, j:])
