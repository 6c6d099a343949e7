"""The Longformer's FlexAttention path (`set_local_attention(model, "flex")`) against the banded blocks.

The new path exists only in peftviz's Longformer layers; BERT and RoBERTa layers are untouched. So it is
checked three ways: on a Longformer, against the blocks (and against transformers' Longformer, in
test_longformer.py); on a Longformer holding a BERT's weights (the shipped MiniLM) and one holding a
RoBERTa's, against that BERT's and that RoBERTa's own full attention on texts inside the window, where
banded attention is full attention.
Where only the blocks can serve (recorded weights and λ(C), the kernel split, attention dropout) "flex"
falls back to them, and the records equal the blocks' exactly.
"""

import pytest
import torch
from transformers import AutoModel, LongformerConfig

from peftviz import METHODS, build_classifier, tiny_encoder
from peftviz.modeling import longformer
from peftviz.modeling.backbones import load_encoder
from peftviz.modeling.longformer import LongEncoder, set_local_attention
from tests.support.helpers import padded_batch

J, WINDOW = 3, 8  # prefix length; the tiny Longformer's window (4 positions on each side)
OPTIONS = {
    "prefix-tuning": {"prefix_length": J},
    "prefix-propagation": {"prefix_length": J},
    "kernel-prefix-propagation": {"prefix_length": J, "alpha": 0.3},
    "tiny-attention": {"n_heads": 2},
}
# the blocks' own padding cases: several windows, one row padded past a whole window, lengths not a multiple of s
LENGTHS = [(29, 18), (13,), (40, 40, 7)]


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
    uses_flex = method != "kernel-prefix-propagation"  # the kernel split needs the blocks
    assert len(flex_calls) == (model.encoder.config.num_hidden_layers if uses_flex else 0)


def test_gradients_on_the_cpu_run_the_blocks(flex_calls):
    """torch's FlexAttention has no CPU backward; on a GPU its gradients are checked by benchmarks/gpu.py."""
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


def test_training_with_attention_dropout_runs_the_blocks(flex_calls):
    model = long_classifier("prefix-propagation").train()
    assert model.encoder.config.attention_probs_dropout_prob > 0
    set_local_attention(model, "flex")
    ids, mask = padded_batch(lengths=(29, 18))
    model(ids, mask).logits.sum().backward()
    assert not flex_calls  # FlexAttention has no attention dropout


def test_the_blocks_are_the_default(flex_calls):
    model = long_classifier("fine-tuning")
    with torch.no_grad():
        model(*padded_batch(lengths=(29, 18)))
    assert not flex_calls


def test_an_unknown_path_is_one_line():
    with pytest.raises(ValueError, match="local attention must be one of blocks, flex, not 'fast'"):
        set_local_attention(long_classifier("fine-tuning"), "fast")
