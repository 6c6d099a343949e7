"""What every method must do, checked on every row of METHOD_CASES (tests/support/method_cases.py) and every
encoder family: frozen weights stay put and trainable ones move, padding changes nothing, parameter
counts follow the closed forms, and a saved state reloads to the same logits."""

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from peftviz import METHODS, build_classifier, tiny_encoder
from peftviz.errors import ConfigError
from peftviz.modeling.longformer import row_sums
from tests.support.helpers import padded_batch, tiny_classifier
from tests.support.method_cases import ALL, METHOD_CASES, Sizes

C = 3  # labels
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models
cases = pytest.mark.parametrize("case", METHOD_CASES, ids=str)


@pytest.fixture(autouse=True)
def only_where_the_case_applies(request):
    """A case whose options are for some encoder families (layout=peft: BERT and RoBERTa) skips the others."""
    params = getattr(request.node, "callspec", None)
    params = params.params if params else {}
    family = params.get("family") or params.get("bert_family")
    if "case" in params and family and family not in params["case"].families:
        pytest.skip(f"{params['case']} is for {', '.join(params['case'].families)}")


def test_every_registered_method_has_a_case():
    assert set(METHODS) <= {case.method for case in METHOD_CASES}
    assert len({case.id for case in METHOD_CASES}) == len(METHOD_CASES)


def may_stay(name: str, family: str, n_layers: int) -> bool:
    """Trainable parameters that get no (or only rounding-level) gradient from a cls-pooled loss.

    Longformer's last layer: only <s> reaches the head, and <s> is a global query that reads the global
    projections, so that layer's local query/key/value (and whatever peft injected into them) get no
    gradient. Key biases anywhere: softmax ignores the q·b_k added to a whole row.
    """
    last = f"encoder.encoder.layer.{n_layers - 1}.attention.self."
    if family == "longformer" and name.startswith(tuple(f"{last}{proj}." for proj in ("query", "key", "value"))):
        return True
    return name.endswith(("attention.self.key.bias", "attention.self.key_global.bias"))


@cases
def test_frozen_weights_stay_bitwise_and_trainable_weights_move(family, case):
    model = tiny_classifier(case.method, family, **case.options).train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)  # all params: flags decide
    ids, mask = padded_batch()
    labels = torch.tensor([0, 2])
    for _ in range(3):
        loss = F.cross_entropy(model(ids, mask).logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    n_layers = model.encoder.config.num_hidden_layers
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert any(name.startswith("head.") for name in trainable)
    assert all(p.requires_grad for p in model.method.parameters())
    for name, p in model.named_parameters():
        if name not in trainable:
            assert torch.equal(p, before[name]), f"frozen {name} changed"
        elif not may_stay(name, family, n_layers):
            assert not torch.equal(p, before[name]), f"{name} did not move"


@cases
def test_logits_do_not_change_with_extra_padding(family, case):
    model = tiny_classifier(case.method, family, **case.options)
    pad = model.encoder.config.pad_token_id
    ids, mask = padded_batch(lengths=(12, 5))
    for pooling in ("cls", "mean"):
        model.pooling = pooling
        with torch.no_grad():
            batched = model(ids, mask).logits
            alone = model(ids[1:, :5], mask[1:, :5]).logits[0]
            padded = model(F.pad(ids, (0, 7), value=pad), F.pad(mask, (0, 7))).logits
        torch.testing.assert_close(batched[1], alone, atol=1e-5, rtol=0)
        torch.testing.assert_close(padded, batched, atol=1e-5, rtol=0)
        assert (batched[0] - batched[1]).abs().max() > 1e-4  # the two examples really differ


@cases
def test_parameter_counts_follow_the_closed_form(family, case):
    encoder = tiny_encoder(family)
    sizes = Sizes.of(encoder, family)
    backbone = sum(p.numel() for p in encoder.parameters())
    D = sizes.D
    head = D * D + D + D * C + C  # dense (with bias) + out_proj (with bias)
    method = case.method_params(sizes)
    unfrozen = backbone if case.unfrozen == ALL else case.unfrozen(sizes)

    counts = tiny_classifier(case.method, family, num_labels=C, **case.options).parameter_counts()
    assert counts == {
        "backbone": backbone,
        "method": method,
        "head": head,
        "total": backbone + method + head,
        "trainable": method - case.frozen(sizes) + head + unfrozen,
    }


def perturb(model, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.1 * torch.randn(p.shape, generator=g))


@cases
def test_saved_trainable_state_reloads_to_the_same_logits(family, case, tmp_path):
    model = tiny_classifier(case.method, family, **case.options)
    perturb(model, seed=1)
    path = tmp_path / "params.safetensors"
    save_file(model.trainable_state_dict(), path)

    fresh = tiny_classifier(case.method, family, **case.options)
    perturb(fresh, seed=2)  # nothing left over from initialisation
    loaded = fresh.load_state_dict(load_file(path), strict=False)
    assert not loaded.unexpected_keys
    trainable = {name for name, p in fresh.named_parameters() if p.requires_grad}
    assert not trainable & set(loaded.missing_keys)
    ids, mask = padded_batch(lengths=(9, 5))
    with torch.no_grad():
        assert torch.equal(fresh(ids, mask).logits, model(ids, mask).logits)


@cases
def test_recorded_attention_covers_prefix_and_sequence_keys(bert_family, case):
    model = tiny_classifier(case.method, bert_family, **case.options)
    ids, mask = padded_batch(lengths=(9, 5))
    with torch.no_grad():
        out = model(ids, mask, output_attentions=True)
        plain = model(ids, mask).logits
    torch.testing.assert_close(out.logits, plain)  # recording changes nothing
    assert out.n_prefix_queries == model.method.n_prefix_queries == case.prefix_queries
    assert type(model.method).prefix_keys == bool(case.prefix_keys)
    j, q = case.prefix_keys, case.prefix_queries
    L, H = model.encoder.config.num_hidden_layers, model.encoder.config.num_attention_heads
    assert len(out.attentions) == L
    for weights in out.attentions:
        assert weights.shape == (2, H, q + 9, j + 9)
        assert weights[1, :, :, j + 5 :].abs().max() == 0  # padded keys get no weight
        if case.method != "kernel-prefix-propagation":  # the kernel form's rows sum to 1 + α
            torch.testing.assert_close(row_sums(weights), torch.ones(weights.shape[:-1]))


@cases
def test_remove_hooks_gives_the_encoder_back(case):
    """Tests share one encoder between methods (test_minilm.py): detaching leaves it as it was."""
    encoder, reference = tiny_encoder("bert").eval(), tiny_encoder("bert").eval()
    names = [name for name, _ in encoder.named_parameters()]
    model = build_classifier(encoder, case.method, C, case.options)
    model.method.remove_hooks()
    assert [name for name, _ in encoder.named_parameters()] == names
    assert all(p.requires_grad == model.method.trains_backbone for p in encoder.parameters())
    ids, mask = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(
            encoder(input_ids=ids, attention_mask=mask).last_hidden_state,
            reference(input_ids=ids, attention_mask=mask).last_hidden_state,
            atol=0,
            rtol=0,
        )


def test_lora_targets_must_name_modules_of_the_encoder():
    """The Longformer's global projections are a LoRA target there; a BERT has none, and says so."""
    sizes = Sizes.of(tiny_encoder("longformer"), "longformer")
    options = {"r": 2, "target_modules": "query,value,query_global,value_global"}
    counts = tiny_classifier("lora", "longformer", **options).parameter_counts()
    assert counts["method"] == sizes.L * 4 * (2 * 2 * sizes.D)
    with pytest.raises(ValueError, match="named 'query_global'"):
        tiny_classifier("lora", "bert", **options)


@pytest.mark.parametrize("method", ["prefix-tuning", "prompt-tuning"])
def test_the_peft_layout_is_refused_on_a_longformer(method):
    with pytest.raises(ConfigError, match="layout=peft is for BERT and RoBERTa encoders, not longformer"):
        tiny_classifier(method, "longformer", layout="peft")


@pytest.mark.parametrize("method, length", [("prefix-tuning", "prefix_length"), ("prompt-tuning", "prompt_length")])
def test_the_peft_layout_needs_positions_for_its_slots_as_well(method, length):
    """peft's layout numbers the text after the j slots (prefix) or embeds the n prompt tokens at 0 … n-1."""
    from peftviz.modeling.backbones import max_tokens

    encoder = tiny_encoder("bert")
    fits = max_tokens(encoder) - 4
    build_classifier(tiny_encoder("bert"), method, C, {length: 4, "layout": "peft"}, max_length=fits)
    with pytest.raises(ConfigError, match=rf"max_length {fits + 1} \(\+ 4 positions of the method\) is beyond"):
        build_classifier(encoder, method, C, {length: 4, "layout": "peft"}, max_length=fits + 1)
