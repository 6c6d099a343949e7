"""torch.compile of the encoder's layers (`modeling.compiled`): the graphs and breaks, and the same numbers.

Graph breaks are dynamo's, whatever backend generates the kernels, so most checks compile with the "eager"
backend (dynamo's graphs run by the eager kernels: seconds on the CPU); one compiles with inductor, the
backend training uses, and compares its logits and gradients with the eager model's. The table of every
method's graphs and breaks is benchmarks/compile_layers.py's (docs/costs.md).
"""

import pytest
import torch

from peftviz import build_classifier, tiny_encoder
from peftviz.modeling import compiled, longformer
from peftviz.modeling.compiled import compile_layers, count_graphs
from peftviz.modeling.longformer import LongEncoder, band_block_mask
from tests.support.helpers import LONG_OPTIONS, PADDINGS, padded_batch

real_mask = band_block_mask.__wrapped__  # (no cache: every build counted)

pytestmark = pytest.mark.slow  # compiling: seconds per model on the CPU

OPTIONS, LENGTHS = LONG_OPTIONS, PADDINGS  # the flex tests' options and padding patterns
PAPER = ("fine-tuning", "prefix-tuning", "prefix-propagation", "kernel-prefix-propagation", "tiny-attention")


def classifier(family: str, method: str):
    torch.manual_seed(1)
    encoder = tiny_encoder(family, seed=0, **({"window": 8} if family == "longformer" else {}))
    return build_classifier(encoder, method, 3, OPTIONS.get(method, {}))


CASES = [*(("longformer", m) for m in PAPER), ("bert", "prefix-propagation"), ("bert", "prefix-tuning")]


@pytest.mark.parametrize(("family", "method"), CASES)
def test_the_papers_methods_compile_without_graph_breaks(family, method):
    model = classifier(family, method).train()  # training's code paths: dropout on
    assert compile_layers(model.encoder, backend="eager") == model.encoder.config.num_hidden_layers
    graphs = count_graphs(lambda: model(*padded_batch(lengths=(29, 18))).logits.sum().backward())
    assert graphs.breaks == 0, graphs.reasons
    assert 1 <= graphs.graphs <= 2 * model.encoder.config.num_hidden_layers


def test_breaks_are_counted_with_their_reasons():
    def twice_broken(x):
        x = x + 1
        torch._dynamo.graph_break()
        x = x * 2
        torch._dynamo.graph_break()
        return x - 1

    compiled = torch.compile(twice_broken, backend="eager")
    graphs = count_graphs(lambda: compiled(torch.ones(3)))
    assert (graphs.graphs, graphs.breaks) == (3, 2)
    assert sum(graphs.reasons.values()) == 2 and all(reasons for reasons in graphs.reasons)


def step(model, ids, mask) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    logits = model(ids, mask).logits
    logits.pow(2).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("method", ["prefix-propagation", "kernel-prefix-propagation"])
def test_compiled_layers_follow_each_batch_shape(method):
    """One compiled model over the three padding patterns in turn: each batch's logits and gradients are the
    eager model's (the guards notice a new length, a new padding, a different batch size)."""
    eager, compiled = classifier("longformer", method).eval(), classifier("longformer", method).eval()
    compile_layers(compiled.encoder, backend="eager")
    for lengths in LENGTHS:
        ids, mask = padded_batch(lengths=lengths)
        (want, want_grads), (got, grads) = step(eager, ids, mask), step(compiled, ids, mask)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
        assert grads.keys() == want_grads.keys()
        for name, grad in want_grads.items():
            torch.testing.assert_close(grads[name], grad, atol=1e-6, rtol=1e-6, msg=name)


def test_inductor_layers_give_the_eager_logits_and_gradients():
    """The backend training uses, generated kernels and all: float32 to 1e-5 (fused reductions reorder sums)."""
    eager, compiled = (
        classifier("longformer", "prefix-propagation").eval(),
        classifier("longformer", "prefix-propagation").eval(),
    )
    compile_layers(compiled.encoder)
    ids, mask = padded_batch(lengths=(29, 18))
    (want, want_grads), (got, grads) = step(eager, ids, mask), step(compiled, ids, mask)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    for name, grad in want_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_every_layer_of_a_twelve_layer_encoder_runs_compiled(monkeypatch):
    """Prefix-propagation reads P^(l) by the layer's index (as prefix-tuning its keys and tiny-attention its
    adapters: benchmarks/compile_layers.py), so each layer compiles a graph of its own; past torch's default
    limit of 8 the last four layers ran eagerly, without a word."""
    method = "prefix-propagation"
    torch.manual_seed(1)
    config = tiny_encoder("longformer", window=8).config
    config.num_hidden_layers, config.attention_window = 12, [8] * 12
    model = build_classifier(LongEncoder(config), method, 3, OPTIONS.get(method, {})).train()
    compile_layers(model.encoder, backend="eager")
    run = lambda: model(*padded_batch(lengths=(29, 18))).logits.sum().backward()
    graphs = count_graphs(run)
    assert graphs.limit_hits == 0 and graphs.breaks == 0 and graphs.graphs >= 12
    monkeypatch.setattr(compiled, "recompile_limit", lambda n_layers: 8)  # torch's default: the hit is counted
    compile_layers(model.encoder, backend="eager")
    assert count_graphs(run).limit_hits > 0


def test_flex_inside_compiled_layers_gives_the_blocks_logits(monkeypatch):
    """On a GPU a compiled layer runs FlexAttention inside its graph, with the mask the encoder built before the
    layers (inside, dynamo would trace its building). On a CPU a compiled layer runs the blocks: inductor's CPU
    FlexAttention did not build with dynamic shapes. Both give the blocks' logits."""
    calls = []
    monkeypatch.setattr(longformer, "band_block_mask", lambda *args: calls.append(args) or real_mask(*args))
    eager = classifier("longformer", "prefix-propagation").eval()
    flexed = classifier("longformer", "prefix-propagation").eval()
    flexed.set_local_attention("flex")
    compile_layers(flexed.encoder, backend="eager")
    for lengths in LENGTHS:
        ids, mask = padded_batch(lengths=lengths)
        with torch.no_grad():
            torch.testing.assert_close(flexed(ids, mask).logits, eager(ids, mask).logits, atol=1e-5, rtol=0)
    assert len(calls) == len(LENGTHS)  # built eagerly by the encoder, once a batch (both layers share the window)
