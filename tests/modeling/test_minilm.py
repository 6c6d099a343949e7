"""The shipped MiniLM loads offline, and every method runs forward and backward on it."""

import json

import pytest
import torch

from peftviz import METHODS, ModelLoadError, build_classifier, load_encoder

TEXTS = [
    "Shares in the carmaker rose sharply after it reported record profits for the third quarter.",
    "The striker scored twice.",
]


@pytest.fixture(scope="module")
def minilm():
    return load_encoder()  # the default: offline MiniLM


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_runs_forward_and_backward_on_minilm(minilm, method):
    encoder, tokenizer = minilm
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    model = build_classifier(encoder, method, num_labels=5)
    try:
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], output_attentions=True)
        assert out.logits.shape == (2, 5) and torch.isfinite(out.logits).all()
        assert len(out.attentions) == 6 and out.attentions[0].shape[1] == 12
        torch.nn.functional.cross_entropy(out.logits, torch.tensor([0, 3])).backward()
        for name, p in model.named_parameters():
            assert (p.grad is not None) == p.requires_grad, name
        assert all(p.grad is not None for p in model.method.parameters())
    finally:
        model.method.remove_hooks()  # the encoder is shared between the parametrised cases
        encoder.zero_grad(set_to_none=True)


def test_minilm_is_the_expected_encoder(minilm):
    encoder, tokenizer = minilm
    config = encoder.config
    assert (config.model_type, config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (
        "bert",
        6,
        384,
        12,
    )
    assert sum(p.numel() for p in encoder.parameters()) == pytest.approx(22.7e6, rel=0.01)
    assert tokenizer("hello world")["input_ids"][0] == tokenizer.cls_token_id


def test_tiny_attention_output_starts_tiny_after_from_pretrained(minilm):
    encoder, _ = minilm
    model = build_classifier(encoder, "tiny-attention", 5, {"n_heads": 4})
    try:
        for adapter in model.method.adapters:
            assert 0 < adapter.out.weight.abs().max() <= 0.01
    finally:
        model.method.remove_hooks()


def test_missing_model_folder_is_one_line_error(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist") as err:
        load_encoder(str(tmp_path / "no-such-model"))
    assert "\n" not in str(err.value)


def test_unreachable_hub_id_is_one_line_error():
    with pytest.raises(ModelLoadError, match="not reachable on the Hugging Face hub") as err:
        load_encoder("someone/not-a-real-model-xyz")
    assert "\n" not in str(err.value)


def test_unsupported_architecture_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ModelLoadError, match="'gpt2' model"):
        load_encoder(str(tmp_path))
