"""torch.compile of the encoder's layers, with the graphs and graph breaks they compile to counted.

The layers are where a step's time goes, and a layer is the unit every encoder and method shares: each
layer module is compiled in place (`nn.Module.compile`), hooks included, so a method's hooks on a layer or
its parts (prefix-propagation's positions, tiny-attention's adapter, peft's wrapped linears) are traced
with it. What the classifier does around the layers (the embeddings, the padding check, the head) stays
eager: it is little work and holds the one data-dependent branch (`key_visible.all()`).

A graph break splits a layer into graphs that run eagerly in between: each is a cost (a Python round trip,
no fusion across it). `count_graphs` runs a forward (or a step) of compiled layers from a clean compiler
state and reads dynamo's own counters; docs/costs.md has the table for every method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from peftviz.modeling.backbones import encoder_layers


def compile_layers(encoder: nn.Module, dynamic: bool = True, backend: str = "inductor") -> int:
    """Compile every transformer layer of `encoder` in place; returns how many. dynamic=True: one graph for
    every sequence length (a sweep's batches differ in length; static shapes recompile for each). Graph
    breaks are dynamo's, whatever the backend: "aot_eager" finds them (forward and backward traced) without
    generating kernels, in a fraction of inductor's time."""
    layers = encoder_layers(encoder)
    for layer in layers:
        layer.compile(dynamic=dynamic, backend=backend, recompile_limit=recompile_limit(len(layers)))
    return len(layers)


def recompile_limit(n_layers: int) -> int:
    """Graphs one layer's code may compile to: two a layer. The layers share their code, so dynamo keeps one
    cache for all of them, and a method whose hooks or state differ by layer (prefix-tuning's keys, prefix-
    propagation's P^(l), tiny-attention's adapters: each read by the layer's index) compiles once per layer,
    plus the first layer once more (it fills the forward's cached masks). Past torch's default of 8 the later
    layers of a 12-layer encoder would run eagerly, and silently."""
    return 2 * n_layers + 2


@dataclass
class Graphs:
    """What compiling made of a run: graphs captured, breaks between them, and each break's reason."""

    graphs: int
    breaks: int
    reasons: dict[str, int] = field(default_factory=dict)
    limit_hits: int = 0  # times dynamo gave up at a recompile limit: the calls after ran eagerly


def count_graphs(run: Callable[[], object]) -> Graphs:
    """Run `run()` (e.g. a forward of a classifier whose layers are compiled) from a clean compiler state and
    count the graphs and graph breaks it made, and the recompile limits it hit. Resets dynamo's caches:
    every compiled function recompiles."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    run()
    reasons = {str(reason).splitlines()[0][:200]: n for reason, n in counters["graph_break"].items()}
    return Graphs(counters["stats"]["unique_graphs"], sum(reasons.values()), reasons, recompile_limit_hits())


def recompile_limit_hits() -> int:
    """How many times dynamo gave up compiling at a recompile limit since its counters were cleared (as
    `count_graphs` does): the calls after such a hit run eagerly."""
    from torch._dynamo.utils import counters

    return sum(n for reason, n in counters["unimplemented"].items() if "recompile limit" in str(reason).lower())
