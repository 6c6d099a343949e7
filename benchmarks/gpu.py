"""The paper's long-document step on a GPU, before and after this release's three optimisations: every method's
training step, inference, memory and FLOP rate, and the goals they are held to.

    PYTHONPATH=. python3 benchmarks/gpu.py --out DIR [--profile]          # on the GPU: 4096 × 8, 1024 × 8, bf16
    PYTHONPATH=. .venv/bin/python benchmarks/gpu.py --test --out DIR     # on the CPU: a tiny Longformer, a minute

One short script for one device call (issue 36): it needs torch, transformers, numpy and accelerate (the
engine's `hold_frozen_in`) and the peftviz modules that build a Longformer classifier, nothing from the hub,
no network, and it keeps to `--budget-s` seconds (400 by default), counted from the start of the process.

Model: a Longformer-base-4096-shaped encoder with random weights (weights do not change timings): a
`LongformerConfig` with vocabulary 50265, hidden 768, 12 layers, 12 heads, intermediate 3072,
attention window 512, 4098 positions, padding id 1, run by peftviz's `LongEncoder`, with
`build_classifier` for fine-tuning, prefix-tuning, prefix-propagation and
kernel-prefix-propagation (prefix length 8, the paper's Table 5; α fixed at its default), 2 labels. The peer
is transformers' `LongformerForSequenceClassification` of the same config with global attention on <s>
(`global_attention_mask`), other random weights. `--test`: the same on
`tiny_encoder("longformer", layers=1, hidden=32, heads=4, window=16)` on the CPU in float32. One layer: dynamo
takes seconds a graph on the CPU, and a second layer doubles the graphs of every "after" row (the first layer
finds the layout's bias cache empty, the others full: a guard apart), about a minute more for the test.

Variants: each method is measured twice in the same run, each on a fresh copy of the encoder, so neither
leaks into the other (the peer once, as "before"):
- before: the local attention on the "blocks" path (materialised blocks [extra | global | 3s neighbours]),
  frozen weights in float32 (autocast casts them on every forward), eager layers.
- after: as a user's run of the trainer now is: the frozen weights and biases of every linear layer held in
  bf16 (`peftviz.training.engine.hold_frozen_in`; only under bf16 autocast: on the CPU in float32 the row says
  "not applied: float32", and fine-tuning freezes nothing, so holds 0), the local attention on "flex"
  (`longformer.set_local_attention(model, "flex")`: FlexAttention with a block mask, training included,
  attention dropout inside the kernel; on the CPU torch's FlexAttention has no backward, so the training
  step runs the blocks there and inference runs flex), and every transformer layer compiled in place
  (`peftviz.modeling.compiled.compile_layers(model.encoder, dynamic=True, backend=...)`). `--compile-backend`:
  "inductor" on the GPU (kernels), "eager" on the CPU and with --test (dynamo alone: graph breaks are still
  found, no kernels generated, where inductor would spend many seconds a model on CPU kernels). The after
  row's first warm-up call is its training step under `compiled.count_graphs` (dynamo reset, then the step):
  the graphs and graph breaks of one training step, counted where the compiling happens anyway. So each after
  row starts from a clean compiler, as a user's run does; the reset also drops the plain encoder's compiled
  code, which its next warm-up (in the row's inference pairs) compiles again. (Deferring every after row's
  inference to one phase would save those recompiles, but the graphs of all the methods would then pile up on
  the same layer code, past the recompile limit `compile_layers` sets (`compiled.recompile_limit`, two graphs
  a layer), after which calls run eagerly.) Each
  after row records `recompile_limit_hits`, dynamo's give-ups at that limit during the row (training and
  inference): a row with any ran partly eager, and its graphs cell says so.

Per case T × B (random token ids, no padding), method and variant:
- step s: the median of `--repeats` training steps after `--warmups` (the first compiles, in "after"):
  forward under bf16 autocast (as the trainer's precision "bf16"), cross-entropy of the float32 logits,
  backward, gradient clipping to norm 1 (the trainer's default `max_grad_norm`), AdamW step (`fused=True`,
  one kernel per step, as the trainer's), `zero_grad(set_to_none=True)`.
- inference s: eval mode, `torch.no_grad`, autocast, on the variant's local attention path (before: blocks,
  after: flex), the median over the paired timings below.
- peak GiB: CUDA's `max_memory_allocated` over the variant's building and its training steps, less what was
  allocated before (the plain models kept for the inference pairs): its weights, gradients, AdamW state and
  activations. "–" on the CPU.
- TFLOP/s: the analytic FLOPs of a step below / the median step time; % of peak: of the device's dense
  bf16 peak (PEAK_TFLOPS; "–" for a device not in it and on the CPU).
- step / fine-tuning: the median step / fine-tuning's median step of the same case and variant.
- inference / plain: method and plain encoder timed in interleaved pairs A, B, B, A, ... (which runs first
  alternates, so neither always finds the other's caches), the median of the pairs' ratios and their range,
  over `--pairs` pairs (20 by default). The plain encoder is fine-tuning's classifier of the same variant
  (no method; in "after" on flex and compiled: fine-tuning freezes nothing, so holding changes nothing).
  The peer's is transformers' / peftviz's plain, before.
- after only: graphs and graph breaks (with their reasons in gpu.json) of one training step, how many
  frozen tensors were held in bf16, and the local attention the training step really ran
  (`train_local_attention`: flex on a GPU, blocks on the CPU).

Goals (gpu.json "goals", gpu.md's last table), from the "after" rows: at the largest case (T·B), fine-tuning at
≥ 35% of the device's dense bf16 peak, and each frozen-backbone method (prefix-tuning, prefix-propagation,
kernel-prefix-propagation) at step / fine-tuning ≤ 0.72; at every case, each prefix method at inference /
plain ≤ 1.02 (the paper's Table 7 bound; the median of the pairs). Each says "met" or "not met" with its
number, or "not measured" and why: on the CPU all of them (the peak is unknown, and a tiny float32 model is
not what the goals are about; its numbers are still given), a row that failed or was skipped, a device
whose peak is not listed.

FLOPs, an estimate: matrix products only, 2 FLOPs per multiply-add, the useful work of the model (not
the padding or the masked-out keys that a kernel computes anyway). With D hidden, F intermediate, s
one-sided window (window = 2s), j prefix positions (prefix-propagation), e extra keys per query
(prefix-tuning), g = j + 1 global positions (the prefixes and <s>), L = j + T positions, C labels, per
sequence:

    linear    = layers · [2D²·(T + 5L + g) + 4DF·L] + 2(D² + DC)
                (query on the T text positions; key, value, key_global, value_global and the attention's
                output dense on all L; query_global on the g global ones; the two feed-forward products;
                the head's dense and projection)
    attention = layers · [4D·(T − 1)·(e + g + min(2s + 1, T)) + 4D·g·(e + L)]
                (QKᵀ and PV, 2·D each per query-key pair over all heads: every text query but <s> reads
                the extra and global keys and its band of 2s + 1 neighbours; each global query all e + L)
    forward   = B · (linear + attention)
    step      = B · (3·attention + k·linear), k = 3 where the backbone trains (forward, input gradients,
                weight gradients: each as much as the forward), k = 2 for a frozen backbone (no weight
                gradients; the method's and the head's are negligible). Attention has no weights: its
                backward is twice its forward in both. The same count for both variants.

The output of `--out DIR`: gpu.json (every number and time, the device, versions, date, command, goals) and
gpu.md (the markdown tables, for docs/costs.md: one row per case, method and variant, then the goals), and
step_times.json (the step-time table a plan reads, `step_times`: the "after" times, as a user's run now is,
"before" where "after" has none), all rewritten after each row, so a run broken off keeps its rows;
`--profile` adds profile.txt (torch.profiler over 3 fine-tuning steps at the largest case that ran, before
and after, one section each after its warm-ups (the after one compiled from a reset dynamo),
`key_averages()` sorted by CUDA time, CPU time on the CPU, top 25 rows). Every case and row (one variant of one method) runs under try/except: an error is a row with
its message, and the rest goes on. Before each case and row the budget guard estimates its time (the previous
case's untimed time, compiling included, plus its timed steps scaled by T·B; the longest row so far, its
compiling included in its `row_s`) and writes "skipped: budget" instead of overrunning.

The timing helpers of benchmarks/methods.py are not imported: that module imports peft, the trainer
and the data modules (datasets, pandas), which the GPU machine's bare python3 need not have.
Dense bf16 peaks: NVIDIA's H100 datasheet (1,979 TFLOP/s SXM and 1,513 PCIe with 2:4 sparsity, half
without: https://archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html, and 989.4 for the SXM at
https://glennklockwood.com/garden/processors/h100); the H200 has the H100 SXM's chip and clocks.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # the budget counts the imports too

import argparse
import copy
import datetime
import gc
import json
import math
import statistics
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from transformers import LongformerConfig, LongformerForSequenceClassification

from peftviz.classifier import build_classifier
from peftviz.files import write_bytes_atomic
from peftviz.modeling import longformer
from peftviz.modeling.backbones import tiny_encoder
from peftviz.modeling.compiled import compile_layers, count_graphs, recompile_limit_hits
from peftviz.modeling.longformer import LongEncoder
from peftviz.sweep.cost import StepTimes, save_step_times
from peftviz.training.engine import hold_frozen_in

METHODS = ("fine-tuning", "prefix-tuning", "prefix-propagation", "kernel-prefix-propagation")
FROZEN_BACKBONE = METHODS[1:]  # the methods whose backbone is frozen (the step goal's)
VARIANTS = ("before", "after")
PATH_OF = {"before": "blocks", "after": "flex"}  # each variant's local attention
PREFIX_LENGTH = 8  # the paper's j (Table 5)
PREFIXED = ("prefix-tuning", "prefix-propagation", "kernel-prefix-propagation")  # the methods it applies to
NUM_LABELS = 2
PEER = "transformers Longformer (fine-tuning)"
MAX_GRAD_NORM = 1.0  # the trainer's default clipping (TrainConfig.max_grad_norm)
LEARNING_RATE = 1e-5
# the goals (module docstring), of the "after" rows
PEAK_GOAL, STEP_GOAL, INFERENCE_GOAL = 35.0, 0.72, 1.02
# the goals' case first: a slow start (compiling) can then cost only the smaller case, under the budget
GPU_CASES, TEST_CASES = "4096x8,1024x8", "64x2,128x2"
# (substring of the device name, dense bf16 TFLOP/s); first match wins; NVL parts run at other clocks: unknown
PEAK_TFLOPS = (("NVL", None), ("H100 PCIe", 756.0), ("H100", 989.4), ("H200", 989.4))
COLUMNS = (
    "T × B",
    "method",
    "variant",
    "step s",
    "TFLOP/s",
    "% of peak",
    "step / fine-tuning",
    "inference s",
    "inference / plain: median (range, pairs)",
    "peak GiB",
    "graphs / breaks",
    "frozen held",
)
HEADER = "| " + " | ".join(COLUMNS) + " |\n" + "|---" * len(COLUMNS) + "|"


def encoder_config(test: bool) -> LongformerConfig:
    """Longformer-base-4096's shape (random weights), or the tiny test encoder's."""
    if test:
        return tiny_encoder("longformer", layers=1, hidden=32, heads=4, window=16).config
    return LongformerConfig(
        vocab_size=50265,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        attention_window=512,
        max_position_embeddings=4098,
        pad_token_id=1,
    )


# ---------------------------------------------------------------------------------------------
# FLOPs (the module docstring's formula)


def flop_count(config, T: int, B: int, j: int = 0, e: int = 0, num_labels: int = NUM_LABELS) -> dict[str, int]:
    """{"linear", "attention"} FLOPs of one forward over B sequences of T tokens, j prefix positions, e extra keys."""
    D, Fi, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    window = config.attention_window
    s = (window[0] if isinstance(window, list) else window) // 2
    g, L = j + 1, j + T
    linear = layers * (2 * D * D * (T + 5 * L + g) + 4 * D * Fi * L) + 2 * (D * D + D * num_labels)
    attention = layers * (4 * D * (T - 1) * (e + g + min(2 * s + 1, T)) + 4 * D * g * (e + L))
    return {"linear": B * linear, "attention": B * attention}


def step_flops(counts: dict[str, int], trains_backbone: bool) -> int:
    """A training step's FLOPs: attention ×3; products with weights ×3 if the backbone trains, else ×2."""
    return 3 * counts["attention"] + (3 if trains_backbone else 2) * counts["linear"]


def peak_tflops(device: torch.device) -> float | None:
    """The device's dense bf16 peak (PEAK_TFLOPS), None on the CPU or for a device not listed."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_TFLOPS if key in name), None)


# ---------------------------------------------------------------------------------------------
# timing


@dataclass
class Bench:
    """The run's device, precision, repeats, budget and compile backend; `steady` sums the seconds of timed (not
    warm-up) calls."""

    device: torch.device
    bf16: bool
    warmups: int
    repeats: int
    pairs: int
    budget_s: float
    compile_backend: str = "inductor"
    steady: float = 0.0

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def seconds(self, fn) -> float:
        self.sync()
        begun = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - begun

    def warm(self, fn, first=None) -> float:
        """Run the warm-ups, the first as `first()` where given (`fn` counted: its graphs); the first call's
        seconds (compilation shows here)."""
        first_s = self.seconds(first or fn)
        for _ in range(self.warmups - 1):
            self.seconds(fn)
        return first_s

    def timed(self, fn, n: int | None = None) -> list[float]:
        """Seconds of `n` calls (`repeats` by default)."""
        times = [self.seconds(fn) for _ in range(n or self.repeats)]
        self.steady += sum(times)
        return times

    def paired(self, first, second) -> list[tuple[float, float]]:
        """(first, second) seconds of `pairs` pairs, after the warm-ups; which runs first alternates."""
        self.warm(first), self.warm(second)
        pairs = []
        for index in range(self.pairs):
            if index % 2 == 0:
                a, b = self.seconds(first), self.seconds(second)
            else:
                b, a = self.seconds(second), self.seconds(first)
            pairs.append((a, b))
            self.steady += a + b
        return pairs

    def elapsed(self) -> float:
        return time.perf_counter() - STARTED

    def fits(self, estimate: float | None) -> bool:
        return self.elapsed() + (estimate or 0.0) <= self.budget_s


def ratio_summary(pairs: list[tuple[float, float]]) -> dict:
    """The median and range of the pairs' ratios a / b, with the pairs themselves."""
    ratios = [a / b for a, b in pairs]
    return {"median": statistics.median(ratios), "low": min(ratios), "high": max(ratios), "pairs": pairs}


# ---------------------------------------------------------------------------------------------
# models and steps


@dataclass
class Case:
    """One T × B: the random batch on the device, and the rows measured so far."""

    T: int
    B: int
    ids: torch.Tensor  # (B, T), <s> first
    labels: torch.Tensor  # (B,)
    rows: list = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.T} × {self.B}"


def make_case(T: int, B: int, vocab: int, device: torch.device) -> Case:
    generator = torch.Generator().manual_seed(T * 1000 + B)
    ids = torch.randint(3, vocab, (B, T), generator=generator)
    ids[:, 0] = 0  # <s>
    labels = torch.randint(0, NUM_LABELS, (B,), generator=generator)
    return Case(T, B, ids.to(device), labels.to(device))


def peftviz_model(encoder: LongEncoder, method: str, device: torch.device):
    """A copy of `encoder` with `method` (prefix length 8 where it has one) and a 2-label head, on the device."""
    options = {"prefix_length": PREFIX_LENGTH} if method in PREFIXED else {}
    torch.manual_seed(0)
    return build_classifier(copy.deepcopy(encoder), method, NUM_LABELS, options).to(device)


def prepare(model, variant: str, bench: Bench) -> dict:
    """Put a fresh peftviz model in its variant: "before" on the blocks; "after" with its frozen linear weights
    held in bf16 (under bf16 autocast only), on flex, its layers compiled. What was done, for the row."""
    longformer.set_local_attention(model, PATH_OF[variant])
    if variant == "before":
        return {"local_attention": "blocks"}
    held = hold_frozen_in(model, torch.bfloat16) if bench.bf16 else "not applied: float32"
    layers = compile_layers(model.encoder, dynamic=True, backend=bench.compile_backend)
    flex_trains = longformer.flex_kernel(bench.device.type, True) is not None  # the layers' own rule
    return {
        "local_attention": "flex",
        "train_local_attention": "flex" if flex_trains else f"blocks (no FlexAttention backward on {bench.device})",
        "held_frozen": held,
        "compiled_layers": layers,
        "compile_backend": bench.compile_backend,
    }


def peer_model(config: LongformerConfig, device: torch.device):
    peer_config = copy.deepcopy(config)
    peer_config.num_labels = NUM_LABELS
    torch.manual_seed(0)
    return LongformerForSequenceClassification(peer_config).to(device)


def forward_of(model, case: Case):
    """() -> logits (B, C) of `model` on the case's batch, peftviz's or transformers' classifier."""
    mask = torch.ones_like(case.ids)
    if isinstance(model, LongformerForSequenceClassification):
        global_mask = torch.zeros_like(case.ids)
        global_mask[:, 0] = 1  # global attention on <s>, as peftviz's
        return lambda: model(input_ids=case.ids, attention_mask=mask, global_attention_mask=global_mask).logits
    return lambda: model(case.ids, mask).logits


def train_step(model, case: Case, bench: Bench):
    """(step, optimizer): one training step as the trainer's, AdamW fused over the trainable parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=LEARNING_RATE, fused=True)
    forward = forward_of(model, case)

    def step():
        with bench.autocast():
            logits = forward()
        F.cross_entropy(logits.float(), case.labels).backward()
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, optimizer


def inference_of(model, case: Case, bench: Bench):
    forward = forward_of(model, case)

    @torch.no_grad()
    def infer():
        with bench.autocast():
            forward()

    return infer


# ---------------------------------------------------------------------------------------------
# the rows


def memory_start(device: torch.device) -> int:
    gc.collect()
    if device.type != "cuda":
        return 0
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def peak_gib(device: torch.device, before: int) -> float | None:
    return (torch.cuda.max_memory_allocated(device) - before) / 2**30 if device.type == "cuda" else None


def train_part(row: dict, model, case: Case, bench: Bench, before: int, flops: int, graphs: bool = False) -> None:
    """Time `model`'s training step into `row`; frees its optimizer state and gradients after. graphs: the first
    warm-up step runs under `count_graphs` (a compiled model: where it compiles anyway)."""
    model.train()
    step, optimizer = train_step(model, case, bench)
    counted = []
    row["step_first_call_s"] = bench.warm(step, (lambda: counted.append(count_graphs(step))) if graphs else None)
    if counted:
        row.update(graphs=counted[0].graphs, graph_breaks=counted[0].breaks, graph_break_reasons=counted[0].reasons)
    row["step_times"] = bench.timed(step)
    row["step_s"] = statistics.median(row["step_times"])
    row["peak_gib"] = peak_gib(bench.device, before)
    row["step_flops"] = flops
    row["step_tflops"] = flops / row["step_s"] / 1e12
    optimizer.state.clear()
    model.zero_grad(set_to_none=True)
    model.eval()


def inference_cell(path: str, measure) -> dict:
    """The row's inference: `measure()` on `path`, or its error as its text (a path that fails on this device,
    flex say, costs this cell only: the training numbers stand)."""
    try:
        return {"path": path, **measure()}
    except Exception as error:  # noqa: BLE001
        traceback.print_exc()
        return {"path": path, "error": one_line(error)}


def inference_medians(row: dict, model, case: Case, bench: Bench, path: str) -> None:
    """Inference medians, no ratio: fine-tuning's classifier (the plain encoder), or any method where the plain
    encoder of its variant failed."""
    infer = inference_of(model, case, bench)

    def measure() -> dict:
        first = bench.warm(infer)
        times = bench.timed(infer, bench.pairs)
        return {"s": statistics.median(times), "times": times, "first_call_s": first}

    row["inference"] = inference_cell(path, measure)


def paired_inference(row: dict, model, plain, case: Case, bench: Bench, path: str) -> None:
    """The model's inference against the plain encoder's, in interleaved pairs (both already on `path`)."""
    ours, base = inference_of(model, case, bench), inference_of(plain, case, bench)

    def measure() -> dict:
        pairs = bench.paired(ours, base)
        return {"s": statistics.median(a for a, _ in pairs), "ratio": ratio_summary(pairs)}

    row["inference"] = inference_cell(path, measure)


def one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text[:300]


def row_head(case: Case | None, name: str, variant: str, T: int | None = None, B: int | None = None) -> dict:
    T, B = (case.T, case.B) if case else (T, B)
    return {"case": f"{T} × {B}", "T": T, "B": B, "method": name, "variant": variant}


def method_row(method: str, variant: str, encoder: LongEncoder, case: Case, bench: Bench, plain) -> tuple[dict, object]:
    """A peftviz method's row in one variant, on a fresh copy of the encoder; returns the row and the model (kept
    as its variant's plain encoder for fine-tuning). `plain`: that variant's plain encoder, or None."""
    row = row_head(case, method, variant)
    before = memory_start(bench.device)
    model = peftviz_model(encoder, method, bench.device)
    tuning = model.method
    j, e = tuning.n_prefix_queries, tuning.new_context(1).n_prefix_keys - tuning.n_prefix_queries
    counts = flop_count(encoder.config, case.T, case.B, j, e)
    row.update(prefix_positions=j, extra_keys=e, forward_flops=sum(counts.values()))
    row["trains_backbone"] = tuning.trains_backbone
    row["trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    row.update(prepare(model, variant, bench))
    flops = step_flops(counts, tuning.trains_backbone)
    train_part(row, model, case, bench, before, flops, graphs=variant == "after")
    inference_part(row, model, plain, case, bench)
    if variant == "after":  # since count_graphs' reset: this row's training and inference, the plain encoder's too
        row["recompile_limit_hits"] = recompile_limit_hits()
    return row, model


def inference_part(row: dict, model, plain, case: Case, bench: Bench) -> None:
    """The row's inference on its variant's path: paired with `plain`, or medians alone where `model` is the
    plain encoder itself (fine-tuning) or there is none (its fine-tuning row failed)."""
    path = PATH_OF[row["variant"]]
    if plain is None or plain is model:
        inference_medians(row, model, case, bench, path)
    else:
        paired_inference(row, model, plain, case, bench, path)


def peer_row(config: LongformerConfig, case: Case, bench: Bench, plain) -> dict:
    row = row_head(case, PEER, "before")
    before = memory_start(bench.device)
    model = peer_model(config, bench.device)
    counts = flop_count(config, case.T, case.B)
    row.update(prefix_positions=0, extra_keys=0, forward_flops=sum(counts.values()), trains_backbone=True)
    row["trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    row["local_attention"] = "transformers' own"
    train_part(row, model, case, bench, before, step_flops(counts, trains_backbone=True))
    if plain is not None:
        paired_inference(row, model, plain, case, bench, "transformers' own / blocks")
    return row


def add_ratios(rows: list[dict], peak: float | None) -> None:
    """Each row's step / fine-tuning's step (same case and variant) and % of the device's peak."""
    for row in rows:
        if "step_s" not in row:
            continue
        fine_tuning = next(
            (r for r in rows if r["method"] == "fine-tuning" and r["variant"] == row["variant"] and "step_s" in r),
            None,
        )
        row["step_ratio"] = row["step_s"] / fine_tuning["step_s"] if fine_tuning else None
        row["percent_of_peak"] = 100 * row["step_tflops"] / peak if peak else None


# ---------------------------------------------------------------------------------------------
# the goals (module docstring)


def goals(rows: list[dict], cases: list[str], peak: float | None, cpu: bool) -> list[dict]:
    """Each goal on the "after" rows (`cases`: the run's case labels, "T × B"): its case, method, value, target
    and status ("met", "not met", or "not measured: why")."""
    after = {(r["case"], r["method"]): r for r in rows if r.get("variant") == "after"}
    largest = max(cases, key=lambda c: math.prod(int(n) for n in c.split(" × ")), default=None)
    cpu_why = "CPU (peak unknown; a tiny float32 model, not the goals' GPU)" if cpu else None
    peak_why = cpu_why or (None if peak else "the device's peak is not known (PEAK_TFLOPS)")
    found = []
    if largest:
        found.append(goal(after, "% of peak", largest, "fine-tuning", "percent_of_peak", PEAK_GOAL, peak_why))
        found += [
            goal(after, "step / fine-tuning", largest, m, "step_ratio", STEP_GOAL, cpu_why) for m in FROZEN_BACKBONE
        ]
    for case in cases:
        found += [goal(after, "inference / plain", case, m, "inference", INFERENCE_GOAL, cpu_why) for m in METHODS[1:]]
    return found


def goal(after: dict, name: str, case: str, method: str, key: str, target: float, why: str | None) -> dict:
    """One goal: the after row's `key` (the inference ratio's median for "inference") against `target`: at least
    it for % of peak, at most for the ratios."""
    row = after.get((case, method), {})
    value = row.get(key)
    if key == "inference":
        value = row.get("inference", {}).get("ratio", {}).get("median")
    at_least = key == "percent_of_peak"
    entry = {
        "goal": name,
        "case": case,
        "method": method,
        "value": value,
        "target": f"{'≥' if at_least else '≤'} {target:g}",
    }
    if why is None and value is None:
        why = missing(row, key)
    if why is not None:
        entry["status"] = f"not measured: {why}"
    else:
        entry["status"] = "met" if (value >= target if at_least else value <= target) else "not met"
    return entry


def missing(row: dict, key: str) -> str:
    """Why a row has no value for a goal."""
    if not row:
        return "no row"
    for reason in ("skipped", "error"):
        if reason in row:
            return f"{reason}: {row[reason]}"
    if key == "inference":
        cell = row.get("inference", {})
        for reason in ("skipped", "error"):
            if reason in cell:
                return f"inference {reason}: {cell[reason]}"
        return "no ratio: no plain encoder to pair with, or not measured yet"
    return "no fine-tuning step in this variant"


# ---------------------------------------------------------------------------------------------
# the run: cases under the budget, output after each row


@dataclass
class Run:
    """What the run writes: settings, the rows so far, where they go."""

    out: Path
    meta: dict
    peak: float | None
    rows: list = field(default_factory=list)
    goals: list = field(default_factory=list)  # `goals` of the rows so far
    case_seconds: list = field(default_factory=list)  # (T·B, warm-up seconds, steady seconds) per case

    def write(self) -> None:
        self.meta["elapsed_s"] = time.perf_counter() - STARTED
        cases = [case.replace("x", " × ") for case in self.meta["cases"]]
        self.goals = goals(self.rows, cases, self.peak, self.meta["device"] == "CPU")
        data = self.meta | {"peak_tflops": self.peak, "rows": self.rows, "goals": self.goals}
        write_bytes_atomic(self.out / "gpu.json", json.dumps(data, indent=1).encode())
        write_bytes_atomic(self.out / "gpu.md", markdown(self.meta, self.rows, self.goals).encode())
        save_step_times(step_times(data), self.out / "step_times.json")

    def estimate(self, T: int, B: int) -> float | None:
        """A case's seconds: the last case's untimed part (building, warm-ups, compiling) plus its timed part
        scaled by T·B. None before any case ran."""
        if not self.case_seconds:
            return None
        size, fixed, steady = self.case_seconds[-1]
        return fixed + steady * T * B / size


ROWS = (*((method, variant) for method in METHODS for variant in VARIANTS), (PEER, "before"))


def inference_s(row: dict) -> float | None:
    """A row's inference median; an earlier gpu.json's rows (no variants) kept theirs per path, the blocks'."""
    cell = row.get("inference", {})
    return (cell if "variant" in row else cell.get("blocks", {})).get("s")


def step_times(data: dict) -> StepTimes:
    """gpu.json's rows as the step-time table a plan reads (`python -m peftviz compare ... --plan --step-times
    FILE`, `peftviz.sweep.cost.load_step_times`): each method's training step and its inference, at each case's
    T, for the cases of the batch most cases share. The "after" variant's row where it has both times (flex,
    compiled layers, held frozen weights: what a user's run now does), else the "before" one's (an earlier
    gpu.json's rows are "before"). AdamW's step is inside each step's time, so the table's AdamW times are 0:
    with gradient accumulation over k micro-batches a plan counts k − 1 AdamW steps too many per optimizer step
    (an overestimate by that much; fused AdamW is one kernel)."""
    complete = [r for r in data["rows"] if r["method"] in METHODS and "step_s" in r and inference_s(r) is not None]
    chosen: dict[tuple[str, int, int], dict] = {}
    for row in complete:  # "after" over "before"
        key = (row["method"], row["T"], row["B"])
        if key not in chosen or row.get("variant", "before") == "after":
            chosen[key] = row
    rows = list(chosen.values())
    batches = [r["B"] for r in rows]
    batch = max(set(batches), key=batches.count) if rows else 0
    rows = [r for r in rows if r["B"] == batch]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fallbacks = [f"{r['method']} at {r['T']}" for r in rows if r.get("variant", "before") != "after"]
    notes = [f"step times of benchmarks/gpu.py, {data['date']}: `{data['command']}`; AdamW inside each step"]
    if any(r.get("variant") == "after" for r in rows):
        notes.append("the 'after' variant: flex local attention, compiled layers, frozen weights held in bf16")
    if fallbacks:
        notes.append(f"the 'before' variant (blocks, eager, float32 frozen weights) for {', '.join(fallbacks)}")
    return StepTimes(
        device=f"cuda ({data['device']})" if data["device"] != "CPU" else "cpu",
        precision="bf16" if data["precision"].startswith("bf16") else "fp32",
        model="allenai/longformer-base-4096",
        architecture="Longformer-base-4096's shape, random weights (benchmarks/gpu.py)",
        batch_size=batch,
        lengths=tuple(sorted({r["T"] for r in rows})),
        steps=data["repeats"],
        forward_backward={m: {r["T"]: r["step_s"] for r in rows if r["method"] == m} for m in methods},
        optimizer=dict.fromkeys(methods, 0.0),
        inference={m: {r["T"]: inference_s(r) for r in rows if r["method"] == m} for m in methods},
        notes=notes,
        warmups=data["warmups"],
    )


def run_case(T: int, B: int, encoder: LongEncoder, bench: Bench, run: Run) -> None:
    """Every row of one case; an error or the budget makes a row of its own, and the rest goes on."""
    case = make_case(T, B, encoder.config.vocab_size, bench.device)
    begun, steady_before, longest = time.perf_counter(), bench.steady, None
    plain: dict[str, object] = {}  # variant -> fine-tuning's model of that variant (the plain encoder)
    estimate = run.estimate(T, B)
    for name, variant in ROWS:
        row_begun = time.perf_counter()
        guess = longest if longest is not None else (estimate / len(ROWS) if estimate else None)
        if not bench.fits(guess):
            run.rows.append(row_head(case, name, variant) | {"skipped": "budget"})
        else:
            row, model = run_row(name, variant, encoder, case, bench, plain.get(variant))
            if name == "fine-tuning" and model is not None:
                plain[variant] = model
            del model
            row["row_s"] = time.perf_counter() - row_begun  # building, warm-ups (compiling) and timed calls
            run.rows.append(row)
            longest = max(longest or 0.0, row["row_s"])
        finish(run, case, f"{name} {variant}", row_begun, bench)
    steady = bench.steady - steady_before
    run.case_seconds.append((T * B, time.perf_counter() - begun - steady, steady))
    plain.clear()
    memory_start(bench.device)


def finish(run: Run, case: Case, what: str, begun: float, bench: Bench) -> None:
    """After a row or part: the case's ratios, the files rewritten, a line of progress."""
    add_ratios([r for r in run.rows if r["case"] == case.label], run.peak)
    run.write()
    print(f"{case.label} {what}: {time.perf_counter() - begun:.1f} s, {bench.elapsed():.0f} s in", flush=True)


def run_row(name: str, variant: str, encoder: LongEncoder, case: Case, bench: Bench, plain) -> tuple[dict, object]:
    """One row (a method in one variant), its error as its text, and its model (None for the peer and a row that
    failed): fine-tuning's is its variant's plain encoder for the others; the others are freed on return (the
    next row's `memory_start` empties CUDA's cache before it measures)."""
    try:
        if name == PEER:
            return peer_row(encoder.config, case, bench, plain), None
        return method_row(name, variant, encoder, case, bench, plain)
    except Exception as error:  # noqa: BLE001  (one row's failure, out of memory included, is that row's text)
        traceback.print_exc()
        return row_head(case, name, variant) | {"error": one_line(error)}, None


def profile(encoder: LongEncoder, T: int, B: int, bench: Bench, out: Path) -> str:
    """torch.profiler over 3 fine-tuning steps, before and after (each after its warm-ups: the compiling); the
    top 25 operations of each -> out/profile.txt, one section each (an after that fails: its error)."""
    case = make_case(T, B, encoder.config.vocab_size, bench.device)
    sort = "cuda_time_total" if bench.device.type == "cuda" else "cpu_time_total"
    sections, failed = [], ""
    for variant in VARIANTS:
        heading = f"## {variant}: fine-tuning's training step, {T} × {B}, 3 steps, sorted by {sort}"
        try:
            sections.append(f"{heading}\n\n{profile_steps(encoder, variant, case, bench, sort)}")
        except Exception as error:  # the before section stands; an after that fails is its error
            if variant == "before":
                raise
            traceback.print_exc()
            failed = f"; after: error: {one_line(error)}"
            sections.append(f"{heading}\n\nerror: {one_line(error)}\n")
    write_bytes_atomic(out / "profile.txt", "\n".join(sections).encode())
    return f"profile.txt: fine-tuning before and after at {T} × {B}{failed}"


def profile_steps(encoder: LongEncoder, variant: str, case: Case, bench: Bench, sort: str) -> str:
    """The profiler's table of 3 training steps of fine-tuning in `variant`, after `warmups` steps."""
    model = peftviz_model(encoder, "fine-tuning", bench.device)
    prepare(model, variant, bench)
    if variant == "after":
        torch._dynamo.reset()  # a clean compiler, as a run's (the rows' graphs would count to its recompile limit)
    step, _ = train_step(model.train(), case, bench)
    bench.warm(step)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if bench.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(3):
            bench.seconds(step)
    return profiler.key_averages().table(sort_by=sort, row_limit=25)


# ---------------------------------------------------------------------------------------------
# the markdown tables


def seconds_cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}" if value < 0.1 else f"{value:.3f}"


def number_cell(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def tflops_cell(value: float) -> str:
    return f"{value:.1f}" if value >= 1 else f"{value:.2g}"  # the CPU's tiny models: two significant digits


def inference_cells(row: dict) -> tuple[str, str]:
    """(inference s, ratio to the plain encoder)."""
    cell = row.get("inference", {})
    if "error" in cell:
        return "error", f"error: {cell['error']}"
    if "skipped" in cell:
        return f"skipped: {cell['skipped']}", "–"
    r = cell.get("ratio")
    ratio = "–" if r is None else f"{r['median']:.3f} ({r['low']:.3f}–{r['high']:.3f}, {len(r['pairs'])})"
    return seconds_cell(cell.get("s")), ratio


def after_cells(row: dict) -> tuple[str, str]:
    """(graphs / breaks, frozen tensors held): the after variant's; "–" before."""
    if row["variant"] != "after":
        return "–", "–"
    graphs = f"{row['graphs']} / {row['graph_breaks']}" if "graphs" in row else "–"
    if row.get("recompile_limit_hits"):
        graphs += f"; recompile limit hit {row['recompile_limit_hits']}×: partly eager"
    held = row.get("held_frozen", "–")
    return graphs, str(held).replace("not applied: ", "no: ")


def markdown_row(row: dict) -> str:
    head = f"| {row['case']} | {row['method']} | {row['variant']} |"
    if "skipped" in row or "error" in row:
        reason = f"skipped: {row['skipped']}" if "skipped" in row else f"error: {row['error']}"
        return f"{head} {reason} |" + " – |" * (len(COLUMNS) - 4)
    cells = [
        seconds_cell(row["step_s"]),
        tflops_cell(row["step_tflops"]),
        number_cell(row.get("percent_of_peak"), 1),
        number_cell(row.get("step_ratio"), 2),
        *inference_cells(row),
        number_cell(row["peak_gib"], 1),
        *after_cells(row),
    ]
    return f"{head} {' | '.join(cells)} |"


def goal_row(entry: dict) -> str:
    value = "–" if entry["value"] is None else f"{entry['value']:.{1 if entry['goal'] == '% of peak' else 3}f}"
    return (
        f"| {entry['goal']} | {entry['case']} | {entry['method']} | {value} | {entry['target']} | {entry['status']} |"
    )


def markdown(meta: dict, rows: list[dict], found: list[dict]) -> str:
    settings = (
        f"{meta['device']}; {meta['date']}; torch {meta['torch']}, transformers {meta['transformers']}; "
        f"{meta['precision']}; AdamW fused, clipping to norm {MAX_GRAD_NORM:g}; medians of {meta['repeats']} steps "
        f"after {meta['warmups']} warm-ups, ratios over {meta['pairs']} interleaved pairs; `{meta['command']}`"
    )
    variants = (
        "before: local attention on blocks, float32 frozen weights, eager layers. after: frozen linear weights "
        f"held in bf16 (under bf16 autocast only), local attention on flex, layers compiled "
        f"({meta['compile_backend']}; graphs / breaks of one training step)."
    )
    if meta["device"] == "CPU":
        variants += " On the CPU the after training step runs the blocks (no FlexAttention backward there)."
    goal_lines = ["| goal | T × B | method | value | target | status |", "|---|---|---|---|---|---|"]
    return (
        "\n".join(
            [
                settings,
                "",
                variants,
                "",
                HEADER,
                *(markdown_row(row) for row in rows),
                "",
                "Goals, of the after rows (step and % of peak at the largest case; inference at each case):",
                "",
                *goal_lines,
                *(goal_row(entry) for entry in found),
            ]
        )
        + "\n"
    )


# ---------------------------------------------------------------------------------------------


def parse_cases(text: str) -> list[tuple[int, int]]:
    """ "1024x8,4096x8" -> [(1024, 8), (4096, 8)]."""
    cases = []
    for part in text.split(","):
        T, _, B = part.strip().lower().partition("x")
        if not (T.isdigit() and B.isdigit()):
            raise SystemExit(f"--cases: {part!r} is not TxB, e.g. 1024x8")
        cases.append((int(T), int(B)))
    return cases


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for gpu.json, gpu.md (and profile.txt)")
    parser.add_argument("--test", action="store_true", help="the tiny Longformer on the CPU, float32, a minute")
    parser.add_argument("--cases", help=f"TxB,... (default {GPU_CASES}; with --test {TEST_CASES})")
    parser.add_argument("--profile", action="store_true", help="torch.profiler of fine-tuning at the largest case")
    parser.add_argument("--budget-s", type=float, default=400.0, help="seconds for the whole run, from its start")
    parser.add_argument("--warmups", type=int, help="warm-up calls (default 2; --test 1)")
    parser.add_argument("--repeats", type=int, help="timed training steps (default 8; --test 2)")
    parser.add_argument("--pairs", type=int, help="interleaved inference pairs per ratio (default 20; --test 4)")
    parser.add_argument(
        "--compile-backend",
        help="torch.compile backend of the after variant's layers (default inductor on the GPU; eager on the CPU "
        "and with --test: dynamo's graphs and breaks, no kernels)",
    )
    parser.add_argument(
        "--step-times-of",
        type=Path,
        metavar="GPU_JSON",
        help="only write --out/step_times.json from an earlier run's gpu.json (no timing)",
    )
    args = parser.parse_args(argv)
    args.cases = parse_cases(args.cases or (TEST_CASES if args.test else GPU_CASES))
    for name, gpu, test in (("warmups", 2, 1), ("repeats", 8, 2), ("pairs", 20, 4)):
        if getattr(args, name) is None:
            setattr(args, name, test if args.test else gpu)
    return args


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    if args.step_times_of:
        save_step_times(step_times(json.loads(args.step_times_of.read_text())), args.out / "step_times.json")
        return
    device = torch.device("cpu" if args.test or not torch.cuda.is_available() else "cuda")
    backend = args.compile_backend or ("inductor" if device.type == "cuda" else "eager")
    bench = Bench(device, device.type == "cuda", max(args.warmups, 1), args.repeats, args.pairs, args.budget_s, backend)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "precision": "bf16 autocast" if bench.bf16 else "float32",
        "optimizer": "AdamW(fused=True)",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "warmups": bench.warmups,
        "repeats": args.repeats,
        "pairs": args.pairs,
        "budget_s": args.budget_s,
        "cases": [f"{T}x{B}" for T, B in args.cases],
        "variants": {
            "before": "local attention blocks; frozen weights float32; eager layers",
            "after": "frozen linear weights held in bf16 (bf16 autocast only); local attention flex; layers compiled",
        },
        "compile_backend": backend,
        "goals_targets": {
            "fine-tuning % of peak": f">= {PEAK_GOAL:g}",
            "frozen-backbone step / fine-tuning": f"<= {STEP_GOAL:g}",
            "inference / plain": f"<= {INFERENCE_GOAL:g}",
        },
    }
    run = Run(args.out, meta, peak_tflops(device))
    config = encoder_config(args.test)
    torch.manual_seed(0)
    encoder = LongEncoder(config)  # random weights, on the CPU: each row copies it to the device
    print(f"{meta['device']}, encoder built at {bench.elapsed():.0f} s", flush=True)
    for T, B in args.cases:
        estimate = run.estimate(T, B)
        if not bench.fits(estimate):
            run.rows += [row_head(None, name, variant, T, B) | {"skipped": "budget"} for name, variant in ROWS]
            run.write()
            continue
        run_case(T, B, encoder, bench, run)
    if args.profile:
        meta["profile"] = profile_if_fits(encoder, bench, run, args.out)
    run.write()
    print(markdown(meta, run.rows, run.goals), flush=True)


def profile_if_fits(encoder: LongEncoder, bench: Bench, run: Run, out: Path) -> str:
    """Profile fine-tuning at the largest case whose fine-tuning "before" row ran, if that case's fine-tuning rows'
    seconds (both variants: the after one's compiling) fit the budget."""
    done = [r for r in run.rows if r["method"] == "fine-tuning" and r["variant"] == "before" and "step_s" in r]
    if not done:
        return "not run: no fine-tuning row ran"
    largest = max(done, key=lambda r: r["T"] * r["B"])
    seconds = sum(
        r.get("row_s", 0.0) for r in run.rows if r["method"] == "fine-tuning" and r["case"] == largest["case"]
    )
    if not bench.fits(seconds):
        return "skipped: budget"
    try:
        return profile(encoder, largest["T"], largest["B"], bench, out)
    except Exception as error:  # noqa: BLE001  (the table is written; the profile's failure is its line)
        traceback.print_exc()
        return f"error: {one_line(error)}"


if __name__ == "__main__":
    main()
