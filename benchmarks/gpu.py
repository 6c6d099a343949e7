"""The paper's long-document step on a GPU: every method's training step, inference, memory and FLOP rate.

    PYTHONPATH=. python3 benchmarks/gpu.py --out DIR [--profile]          # on the GPU: 4096 × 8, 1024 × 8, bf16
    PYTHONPATH=. .venv/bin/python benchmarks/gpu.py --test --out DIR     # on the CPU: a tiny Longformer, seconds

One short script for one device call (issue 36): it needs torch, transformers and numpy and the
peftviz modules that build a Longformer classifier, nothing from the hub, no network, and it keeps
to `--budget-s` seconds (400 by default), counted from the start of the process.

Model: a Longformer-base-4096-shaped encoder with random weights (weights do not change timings): a
`LongformerConfig` with vocabulary 50265, hidden 768, 12 layers, 12 heads, intermediate 3072,
attention window 512, 4098 positions, padding id 1, run by peftviz's `LongEncoder`, with
`build_classifier` for fine-tuning, prefix-tuning, prefix-propagation and
kernel-prefix-propagation (prefix length 8, the paper's Table 5), 2 labels. The peer is
transformers' `LongformerForSequenceClassification` of the same config with global attention on
<s> (`global_attention_mask`), other random weights. `--test`: the same on
`tiny_encoder("longformer", hidden=32, heads=4, window=16)`, 2 layers, on the CPU in float32.

Per case T × B (random token ids, no padding) and method:
- step s: the median of `--repeats` training steps after `--warmups`: forward under bf16 autocast (as
  the trainer's precision "bf16"), cross-entropy of the float32 logits, backward, gradient clipping to
  norm 1 (the trainer's default `max_grad_norm`), AdamW step (`fused=True`, one kernel per step, as
  the trainer's), `zero_grad(set_to_none=True)`. Training runs the local attention on the "blocks"
  path (dropout: FlexAttention does not run there).
- inference s: eval mode, `torch.no_grad`, autocast, the median over the paired timings below, on the
  local attention path of the column: "blocks" (materialised blocks [extra | global | 3s neighbours])
  and "flex" (FlexAttention with a block mask), set with `longformer.set_local_attention(model, path)`;
  where that function is missing the flex cells say "flex: not available".
- peak GiB: CUDA's `max_memory_allocated` over the method's building and its training steps, less what
  was allocated before (the plain model kept for the inference pairs): its weights, gradients, AdamW
  state and activations. "–" on the CPU.
- TFLOP/s: the analytic FLOPs of a step below / the median step time; % of peak: of the device's dense
  bf16 peak (PEAK_TFLOPS; "–" for a device not in it and on the CPU).
- step / fine-tuning: the median step / fine-tuning's median step of the same case (the frozen-backbone
  goal: ≤ 0.72).
- inference / plain: method and plain encoder (fine-tuning's classifier, no method) timed in interleaved
  pairs A, B, B, A, ... (which runs first alternates, so neither always finds the other's caches), the
  median of the pairs' ratios and their range, over `--pairs` pairs (20 by default; the paper's
  Table 7 bound is 1.02 for the prefix methods). The peer's is transformers' / peftviz's plain, blocks.

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
                backward is twice its forward in both.

The output of `--out DIR`: gpu.json (every number and time, the device, versions, date, command) and
gpu.md (the markdown table, for docs/costs.md), both rewritten after each row, so a run broken off
keeps its rows; `--profile` adds profile.txt (torch.profiler over 3 fine-tuning steps at the largest
case that ran, `key_averages()` sorted by CUDA time, CPU time on the CPU, top 25 rows). Every case and
row runs under try/except: an error is a row with its message, and the rest goes on. Before each case
and row the budget guard estimates its time (the previous case's warm-up time plus its timed steps
scaled by T·B; the longest row so far) and writes "skipped: budget" instead of overrunning.

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
from peftviz.modeling.longformer import LongEncoder
from peftviz.sweep.cost import StepTimes, save_step_times

METHODS = ("fine-tuning", "prefix-tuning", "prefix-propagation", "kernel-prefix-propagation")
PREFIX_LENGTH = 8  # the paper's j (Table 5)
NUM_LABELS = 2
PEER = "transformers Longformer (fine-tuning)"
MAX_GRAD_NORM = 1.0  # the trainer's default clipping (TrainConfig.max_grad_norm)
LEARNING_RATE = 1e-5
PATHS = ("blocks", "flex")  # the local attention's paths, inference
# the goals' case first: a slow start (compiling) can then cost only the smaller case, under the budget
GPU_CASES, TEST_CASES = "4096x8,1024x8", "64x2,128x2"
# (substring of the device name, dense bf16 TFLOP/s); first match wins; NVL parts run at other clocks: unknown
PEAK_TFLOPS = (("NVL", None), ("H100 PCIe", 756.0), ("H100", 989.4), ("H200", 989.4))
HEADER = (
    "| T × B | method | step s | inference s (blocks / flex) | peak GiB | TFLOP/s | % of peak | step / fine-tuning "
    "| inference / plain, blocks: median (range) | inference / plain, flex: median (range) |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def encoder_config(test: bool) -> LongformerConfig:
    """Longformer-base-4096's shape (random weights), or the tiny test encoder's."""
    if test:
        return tiny_encoder("longformer", hidden=32, heads=4, window=16).config
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
    """The run's device, precision, repeats and budget; `steady` sums the seconds of timed (not warm-up) calls."""

    device: torch.device
    bf16: bool
    warmups: int
    repeats: int
    pairs: int
    budget_s: float
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

    def warm(self, fn) -> float:
        """Run the warm-ups; the first call's seconds (compilation shows here)."""
        first = self.seconds(fn)
        for _ in range(self.warmups - 1):
            self.seconds(fn)
        return first

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
    options = {} if method == "fine-tuning" else {"prefix_length": PREFIX_LENGTH}
    torch.manual_seed(0)
    return build_classifier(copy.deepcopy(encoder), method, NUM_LABELS, options).to(device)


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


def set_path(model, path: str) -> str | None:
    """Put peftviz's local attention on `path`; None, or why it cannot."""
    setter = getattr(longformer, "set_local_attention", None)
    if setter is None:
        return None if path == "blocks" else f"{path}: not available"  # before the paths: blocks is all there is
    setter(model, path)
    return None


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


def train_part(row: dict, model, case: Case, bench: Bench, before: int, flops: int) -> None:
    """Time `model`'s training step into `row`; frees its optimizer state and gradients after."""
    if not isinstance(model, LongformerForSequenceClassification):
        set_path(model, "blocks")
    model.train()
    step, optimizer = train_step(model, case, bench)
    row["step_first_call_s"] = bench.warm(step)
    row["step_times"] = bench.timed(step)
    row["step_s"] = statistics.median(row["step_times"])
    row["peak_gib"] = peak_gib(bench.device, before)
    row["step_flops"] = flops
    row["step_tflops"] = flops / row["step_s"] / 1e12
    optimizer.state.clear()
    model.zero_grad(set_to_none=True)
    model.eval()


def path_cell(models: list, path: str, measure) -> dict:
    """One inference cell: `measure()` with every model of `models` on `path`, or the error as its text."""
    problem = next(filter(None, (set_path(model, path) for model in models)), None)
    if problem:
        return {"error": problem}
    try:
        return measure()
    except Exception as error:  # noqa: BLE001  (a path that fails, flex on this device, costs its cell only)
        traceback.print_exc()
        return {"error": one_line(error)}


def inference_medians(row: dict, plain, case: Case, bench: Bench) -> None:
    """Inference medians on each path, no ratio: fine-tuning's classifier (the plain encoder), or any method where
    the plain encoder failed."""
    infer = inference_of(plain, case, bench)

    def measure() -> dict:
        first = bench.warm(infer)
        times = bench.timed(infer, bench.pairs)
        return {"s": statistics.median(times), "times": times, "first_call_s": first}

    for path in PATHS:
        row["inference"][path] = path_cell([plain], path, measure)
    set_path(plain, "blocks")


def paired_inference(row: dict, model, plain, case: Case, bench: Bench, paths=PATHS) -> None:
    """The method's inference against the plain encoder's, in interleaved pairs, on each path (the peer's
    attention has one path: only the plain encoder's changes)."""
    ours, base = inference_of(model, case, bench), inference_of(plain, case, bench)

    def measure() -> dict:
        pairs = bench.paired(ours, base)
        return {"s": statistics.median(a for a, _ in pairs), "ratio": ratio_summary(pairs)}

    models = [plain] if isinstance(model, LongformerForSequenceClassification) else [plain, model]
    for path in paths:
        row["inference"][path] = path_cell(models, path, measure)
    set_path(plain, "blocks")


def one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text[:300]


def method_row(method: str, encoder: LongEncoder, case: Case, bench: Bench, plain) -> tuple[dict, object]:
    """A peftviz method's row; returns the row and the model (kept as `plain` for fine-tuning)."""
    row = {"case": case.label, "T": case.T, "B": case.B, "method": method, "inference": {}}
    before = memory_start(bench.device)
    model = peftviz_model(encoder, method, bench.device)
    tuning = model.method
    j, e = tuning.n_prefix_queries, tuning.new_context(1).n_prefix_keys - tuning.n_prefix_queries
    counts = flop_count(encoder.config, case.T, case.B, j, e)
    row.update(prefix_positions=j, extra_keys=e, forward_flops=sum(counts.values()))
    if tuning.new_context(1).kernel is not None:  # the kernel split needs the blocks (set_local_attention)
        row["flex_note"] = "method on blocks: kernel split"
    row["trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    train_part(row, model, case, bench, before, step_flops(counts, tuning.trains_backbone))
    if plain is None:
        inference_medians(row, model, case, bench)
    else:
        paired_inference(row, model, plain, case, bench)
    return row, model


def peer_row(config: LongformerConfig, case: Case, bench: Bench, plain) -> dict:
    row = {"case": case.label, "T": case.T, "B": case.B, "method": PEER, "inference": {}}
    before = memory_start(bench.device)
    model = peer_model(config, bench.device)
    counts = flop_count(config, case.T, case.B)
    row.update(prefix_positions=0, extra_keys=0, forward_flops=sum(counts.values()))
    row["trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    train_part(row, model, case, bench, before, step_flops(counts, trains_backbone=True))
    if plain is not None:
        paired_inference(row, model, plain, case, bench, paths=("blocks",))
    return row


def add_ratios(rows: list[dict], peak: float | None) -> None:
    """Each row's step / fine-tuning's step (same case) and % of the device's peak."""
    fine_tuning = next((r for r in rows if r["method"] == "fine-tuning" and "step_s" in r), None)
    for row in rows:
        if "step_s" not in row:
            continue
        row["step_ratio"] = row["step_s"] / fine_tuning["step_s"] if fine_tuning else None
        row["percent_of_peak"] = 100 * row["step_tflops"] / peak if peak else None


# ---------------------------------------------------------------------------------------------
# the run: cases under the budget, output after each row


@dataclass
class Run:
    """What the run writes: settings, the rows so far, where they go."""

    out: Path
    meta: dict
    peak: float | None
    rows: list = field(default_factory=list)
    case_seconds: list = field(default_factory=list)  # (T·B, warm-up seconds, steady seconds) per case

    def write(self) -> None:
        self.meta["elapsed_s"] = time.perf_counter() - STARTED
        data = self.meta | {"peak_tflops": self.peak, "rows": self.rows}
        write_bytes_atomic(self.out / "gpu.json", json.dumps(data, indent=1).encode())
        write_bytes_atomic(self.out / "gpu.md", markdown(self.meta, self.rows).encode())
        save_step_times(step_times(data), self.out / "step_times.json")

    def estimate(self, T: int, B: int) -> float | None:
        """A case's seconds: the last case's untimed part (building, warm-ups, compiling) plus its timed part
        scaled by T·B. None before any case ran."""
        if not self.case_seconds:
            return None
        size, fixed, steady = self.case_seconds[-1]
        return fixed + steady * T * B / size


ROWS = (*METHODS, PEER)


def step_times(data: dict) -> StepTimes:
    """gpu.json's rows as the step-time table a plan reads (`python -m peftviz compare ... --plan --step-times
    FILE`, `peftviz.sweep.cost.load_step_times`): each method's training step and its inference on the blocks
    path, at each case's T, for the cases of the batch most cases share. AdamW's step is inside each step's time,
    so the table's AdamW times are 0: with gradient accumulation over k micro-batches a plan counts k − 1 AdamW
    steps too many per optimizer step (an overestimate by that much; fused AdamW is one kernel)."""
    rows = [r for r in data["rows"] if r["method"] in METHODS and "step_s" in r and "s" in r["inference"]["blocks"]]
    batches = [r["B"] for r in rows]
    batch = max(set(batches), key=batches.count) if rows else 0
    rows = [r for r in rows if r["B"] == batch]
    methods = list(dict.fromkeys(r["method"] for r in rows))
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
        inference={m: {r["T"]: r["inference"]["blocks"]["s"] for r in rows if r["method"] == m} for m in methods},
        notes=[f"step times of benchmarks/gpu.py, {data['date']}: `{data['command']}`; AdamW inside each step"],
        warmups=data["warmups"],
    )


def run_case(T: int, B: int, encoder: LongEncoder, bench: Bench, run: Run) -> None:
    """Every row of one case; an error or the budget makes a row of its own, and the rest goes on."""
    case = make_case(T, B, encoder.config.vocab_size, bench.device)
    begun, steady_before, longest, plain = time.perf_counter(), bench.steady, None, None
    estimate = run.estimate(T, B)
    for name in ROWS:
        row_begun = time.perf_counter()
        guess = longest if longest is not None else (estimate / len(ROWS) if estimate else None)
        if not bench.fits(guess):
            run.rows.append({"case": case.label, "T": T, "B": B, "method": name, "skipped": "budget"})
        else:
            row = run_row(name, encoder, case, bench, plain)
            plain = row.pop("_plain", plain)
            row["row_s"] = time.perf_counter() - row_begun  # building, warm-ups (compiling) and timed calls
            run.rows.append(row)
            longest = max(longest or 0.0, row["row_s"])
        add_ratios([r for r in run.rows if r["case"] == case.label], run.peak)
        run.write()
        print(f"{case.label} {name}: {time.perf_counter() - row_begun:.1f} s, {bench.elapsed():.0f} s in", flush=True)
    steady = bench.steady - steady_before
    run.case_seconds.append((T * B, time.perf_counter() - begun - steady, steady))
    del plain
    memory_start(bench.device)


def run_row(name: str, encoder: LongEncoder, case: Case, bench: Bench, plain) -> dict:
    """One row, its error as its text; fine-tuning's row carries its model out as "_plain" for the others. The
    other models are freed on return (the next row's `memory_start` empties CUDA's cache before it measures)."""
    try:
        if name == PEER:
            return peer_row(encoder.config, case, bench, plain)
        row, model = method_row(name, encoder, case, bench, plain)
        if name == "fine-tuning":
            row["_plain"] = model
        return row
    except Exception as error:  # noqa: BLE001  (one row's failure, out of memory included, is that row's text)
        traceback.print_exc()
        return {"case": case.label, "T": case.T, "B": case.B, "method": name, "error": one_line(error)}


def profile(encoder: LongEncoder, T: int, B: int, bench: Bench, out: Path) -> str:
    """torch.profiler over 3 fine-tuning steps after one warm-up; the top 25 operations -> out/profile.txt."""
    case = make_case(T, B, encoder.config.vocab_size, bench.device)
    model = peftviz_model(encoder, "fine-tuning", bench.device).train()
    set_path(model, "blocks")
    step, _ = train_step(model, case, bench)
    bench.seconds(step)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if bench.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(3):
            bench.seconds(step)
    sort = "cuda_time_total" if bench.device.type == "cuda" else "cpu_time_total"
    table = profiler.key_averages().table(sort_by=sort, row_limit=25)
    heading = f"fine-tuning's training step, {T} × {B}, 3 steps, sorted by {sort}\n\n"
    write_bytes_atomic(out / "profile.txt", (heading + table).encode())
    return f"profile.txt: fine-tuning at {T} × {B}"


# ---------------------------------------------------------------------------------------------
# the markdown table


def seconds_cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}" if value < 0.1 else f"{value:.3f}"


def number_cell(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def tflops_cell(value: float) -> str:
    return f"{value:.1f}" if value >= 1 else f"{value:.2g}"  # the CPU's tiny models: two significant digits


def inference_cells(row: dict) -> tuple[str, str, str]:
    """(inference s blocks / flex, ratio blocks, ratio flex)."""
    times, ratios = [], []
    for path in PATHS:
        cell = row["inference"].get(path, {})
        if "error" in cell:
            times.append(cell["error"] if "not available" in cell["error"] else "error")
            ratios.append(f"error: {cell['error']}")
            continue
        times.append(seconds_cell(cell.get("s")))
        r = cell.get("ratio")
        ratios.append("–" if r is None else f"{r['median']:.3f} ({r['low']:.3f}–{r['high']:.3f}, {len(r['pairs'])})")
    if "flex_note" in row and ratios[1] != "–":
        ratios[1] += f"; {row['flex_note']}"
    return " / ".join(times), ratios[0], ratios[1]


def markdown_row(row: dict) -> str:
    head = f"| {row['case']} | {row['method']} |"
    if "skipped" in row or "error" in row:
        reason = f"skipped: {row['skipped']}" if "skipped" in row else f"error: {row['error']}"
        return f"{head} {reason} |" + " – |" * 7
    inference, blocks, flex = inference_cells(row)
    cells = [
        seconds_cell(row["step_s"]),
        inference,
        number_cell(row["peak_gib"], 1),
        tflops_cell(row["step_tflops"]),
        number_cell(row.get("percent_of_peak"), 1),
        number_cell(row.get("step_ratio"), 2),
        blocks,
        flex,
    ]
    return f"{head} {' | '.join(cells)} |"


def markdown(meta: dict, rows: list[dict]) -> str:
    settings = (
        f"{meta['device']}; {meta['date']}; torch {meta['torch']}, transformers {meta['transformers']}; "
        f"{meta['precision']}; AdamW fused, clipping to norm {MAX_GRAD_NORM:g}; medians of {meta['repeats']} steps "
        f"after {meta['warmups']} warm-ups, ratios over {meta['pairs']} interleaved pairs; `{meta['command']}`"
    )
    return "\n".join([settings, "", HEADER, *(markdown_row(row) for row in rows)]) + "\n"


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
    parser.add_argument("--test", action="store_true", help="the tiny Longformer on the CPU, float32, seconds")
    parser.add_argument("--cases", help=f"TxB,... (default {GPU_CASES}; with --test {TEST_CASES})")
    parser.add_argument("--profile", action="store_true", help="torch.profiler of fine-tuning at the largest case")
    parser.add_argument("--budget-s", type=float, default=400.0, help="seconds for the whole run, from its start")
    parser.add_argument("--warmups", type=int, help="warm-up calls (default 2; --test 1)")
    parser.add_argument("--repeats", type=int, help="timed training steps (default 8; --test 2)")
    parser.add_argument("--pairs", type=int, help="interleaved inference pairs per ratio (default 20; --test 4)")
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
    bench = Bench(device, device.type == "cuda", max(args.warmups, 1), args.repeats, args.pairs, args.budget_s)
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
        "local_attention_paths": "set_local_attention" if hasattr(longformer, "set_local_attention") else "blocks only",
    }
    run = Run(args.out, meta, peak_tflops(device))
    config = encoder_config(args.test)
    torch.manual_seed(0)
    encoder = LongEncoder(config)  # random weights, on the CPU: each row copies it to the device
    print(f"{meta['device']}, encoder built at {bench.elapsed():.0f} s", flush=True)
    for T, B in args.cases:
        estimate = run.estimate(T, B)
        if not bench.fits(estimate):
            run.rows += [{"case": f"{T} × {B}", "T": T, "B": B, "method": name, "skipped": "budget"} for name in ROWS]
            run.write()
            continue
        run_case(T, B, encoder, bench, run)
    if args.profile:
        meta["profile"] = profile_if_fits(encoder, bench, run, args.out)
    run.write()
    print(markdown(meta, run.rows), flush=True)


def profile_if_fits(encoder: LongEncoder, bench: Bench, run: Run, out: Path) -> str:
    """Profile fine-tuning at the largest case whose fine-tuning row ran, if that row's seconds fit the budget."""
    done = [r for r in run.rows if r["method"] == "fine-tuning" and "step_s" in r]
    if not done:
        return "not run: no fine-tuning row ran"
    largest = max(done, key=lambda r: r["T"] * r["B"])
    if not bench.fits(largest["row_s"]):
        return "skipped: budget"
    try:
        return profile(encoder, largest["T"], largest["B"], bench, out)
    except Exception as error:  # noqa: BLE001  (the table is written; the profile's failure is its line)
        traceback.print_exc()
        return f"error: {one_line(error)}"


if __name__ == "__main__":
    main()
