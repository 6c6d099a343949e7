"""The Longformer's FlexAttention path against the banded blocks on a GPU: logits, gradients, dropout, held weights.

    PYTHONPATH=. python3 benchmarks/gpu_checks.py --out DIR     # on a CUDA machine, before benchmarks/gpu.py
    .venv/bin/python benchmarks/gpu_checks.py --out /tmp/x      # on the CPU: forwards only (no CPU flex backward)

tests/modeling/test_flex_attention.py checks the path's forward on the CPU, where torch's FlexAttention runs
its reference math and has no backward. On a GPU it runs the compiled kernel, forward and backward, so this
script checks both there, for the four paper methods (fine-tuning, prefix-tuning, prefix-propagation and
kernel-prefix-propagation, whose kernel form with a fixed α runs on flex too):
- flex vs blocks, eval mode: the largest absolute difference of the logits and of every trainable parameter's
  gradient, flex against blocks, each relative to the largest blocks value.
- training mode with attention dropout on flex (computed inside the kernel from a hashed mask, so it cannot
  equal the blocks' random dropout): the loss is finite; with `torch.manual_seed` fixed, two training forwards
  give identical logits (the mask's seed is drawn from torch's generator) and another seed other logits; the
  flex path really ran, with the dropout rate; on the GPU every trainable parameter's gradient is finite, and
  non-zero wherever the blocks' is (the parameters the loss does not reach, e.g. the last layer's local
  projections, which only the text positions read and the head never does, are zero on both). The other
  dropouts (hidden, head, prefix) are set to 0 here, so the attention's is the only randomness.
- frozen weights held in bf16 (`peftviz.training.engine.hold_frozen_in`) against the same model not held, under
  bf16 autocast, eval, on each path: the logits must be bit-identical (autocast casts a float32 weight to the
  very bf16 values the held one has). Runs on the CPU too (CPU autocast).
Cases: a tiny Longformer in float32 (TF32 off: the tolerance is float32's) on a padded batch, and a
Longformer-base-shaped layer stack at 1024 tokens under bf16 autocast (the GPU only). On the CPU the training
check runs its forwards without gradients (the CPU's FlexAttention has none; with gradients the layer would
fall back to the blocks). Writes DIR/gpu_checks.json.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import json
import math
import time
from pathlib import Path

import torch
from torch import nn
from transformers import LongformerConfig

from peftviz.classifier import build_classifier
from peftviz.modeling import longformer
from peftviz.modeling.longformer import LongEncoder, set_local_attention
from peftviz.training.engine import hold_frozen_in

METHODS = ("fine-tuning", "prefix-tuning", "prefix-propagation", "kernel-prefix-propagation")
FROZEN_BACKBONE = METHODS[1:]
TOLERANCE = {"float32": 1e-4, "bf16": 3e-2}  # relative to the largest value: float32's, bf16's 8-bit mantissa


def tiny_config() -> LongformerConfig:
    return LongformerConfig(
        vocab_size=120,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        attention_window=16,
        max_position_embeddings=1026,
        pad_token_id=1,
    )


def base_config(layers: int) -> LongformerConfig:
    """longformer-base-4096's shape (random weights: these compare two paths, not a checkpoint)."""
    return LongformerConfig(
        vocab_size=50265,
        hidden_size=768,
        num_hidden_layers=layers,
        num_attention_heads=12,
        intermediate_size=3072,
        attention_window=512,
        max_position_embeddings=4098,
        pad_token_id=1,
    )


def batch(lengths: tuple[int, ...], vocab: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (len(lengths), max(lengths)), generator=g)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    return ids.to(device), mask.to(device)


def run(model, path: str, ids, mask, precision: str, grads: bool):
    """The logits and the trainable parameters' gradients under one local-attention path."""
    set_local_attention(model, path)
    model.zero_grad(set_to_none=True)
    with torch.autocast(ids.device.type, torch.bfloat16, enabled=precision == "bf16"), torch.set_grad_enabled(grads):
        logits = model(ids, mask).logits.float()
        if grads:
            logits.square().sum().backward()
    return logits.detach(), {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}


def relative_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


def check(method: str, config: LongformerConfig, lengths, precision: str, device) -> dict:
    torch.manual_seed(0)
    model = build_classifier(LongEncoder(config), method, 2).to(device).eval()  # eval: no attention dropout
    ids, mask = batch(lengths, config.vocab_size, device)
    grads = device.type == "cuda"
    started = time.perf_counter()
    flex_logits, flex_grads = run(model, "flex", ids, mask, precision, grads)  # first: includes compiling
    seconds = time.perf_counter() - started
    blocks_logits, blocks_grads = run(model, "blocks", ids, mask, precision, grads)
    # each gradient's gap relative to its own largest value, or to 1e-3 of the largest gradient of all where
    # it is near zero (key biases: softmax ignores a shift common to all keys, so theirs is rounding noise)
    scale = max((g.abs().max().item() for g in blocks_grads.values()), default=0.0)
    grad_gaps = {
        name: ((flex_grads[name] - g).abs().max() / max(g.abs().max().item(), 1e-3 * scale, 1e-12)).item()
        for name, g in blocks_grads.items()
    }
    worst = max(grad_gaps, key=grad_gaps.get) if grad_gaps else None
    row = {
        "method": method,
        "case": f"{max(lengths)}x{len(lengths)}",
        "precision": precision,
        "logits_gap": relative_gap(flex_logits, blocks_logits),
        "grad_gap": grad_gaps[worst] if worst else None,
        "worst_grad": worst,
        "grads_compared": len(grad_gaps),
        "first_flex_call_s": round(seconds, 2),
    }
    row["ok"] = row["logits_gap"] < TOLERANCE[precision] and (row["grad_gap"] or 0) < TOLERANCE[precision]
    return row


def varying_lengths(config: LongformerConfig, lengths: tuple[int, ...], device) -> dict:
    """Inference under flex at batch lengths that change from call to call, as an evaluation's batches do:
    each call's seconds (the first compiles; a changed shape may recompile once, then shapes are dynamic)."""
    torch.manual_seed(0)
    model = build_classifier(LongEncoder(config), "prefix-propagation", 2).to(device).eval()
    set_local_attention(model, "flex")
    seconds = []
    for n in lengths:
        ids, mask = batch((n, n - 100), config.vocab_size, device)
        started = time.perf_counter()
        with torch.no_grad(), torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
            model(ids, mask)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(round(time.perf_counter() - started, 3))
    return {"check": "varying lengths", "lengths": lengths, "seconds": seconds, "ok": True}


@contextlib.contextmanager
def flex_calls():
    """Every call of the FlexAttention path inside the block: the dropout rate of each (a list, filled as it runs)."""
    original, seen = longformer.flex_local_attention, []
    signature = inspect.signature(original)

    def counted(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        seen.append(bound.arguments["dropout"])
        return original(*args, **kwargs)

    longformer.flex_local_attention = counted
    try:
        yield seen
    finally:
        longformer.flex_local_attention = original


def training_forward(model, ids, mask, precision: str, seed: int, grads: bool):
    """(logits, loss, gradients) of one training-mode forward (and backward where `grads`) after manual_seed(seed)."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    with torch.autocast(ids.device.type, torch.bfloat16, enabled=precision == "bf16"), torch.set_grad_enabled(grads):
        logits = model(ids, mask).logits.float()
        loss = logits.square().mean()
        if grads:
            loss.backward()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad] if grads else []
    gradients = {n: p.grad.float().clone() if p.grad is not None else torch.zeros_like(p).float() for n, p in trainable}
    return logits.detach(), loss.item(), gradients


def dropout_check(method: str, config: LongformerConfig, lengths, precision: str, device, grads=None) -> dict:
    """Training mode with attention dropout on flex: finite loss, seeded forwards equal, another seed differs, the
    flex path ran with the dropout rate; on the GPU (or where `grads`) finite gradients, non-zero wherever the
    blocks' are."""
    torch.manual_seed(0)
    model = build_classifier(LongEncoder(config), method, 2).to(device).train()
    for module in model.modules():  # the attention's dropout (a rate, not a module) is the only randomness left
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    ids, mask = batch(lengths, config.vocab_size, device)
    grads = device.type == "cuda" if grads is None else grads
    set_local_attention(model, "flex")
    with flex_calls() as seen:
        logits, loss, gradients = training_forward(model, ids, mask, precision, 0, grads)
        again, _, _ = training_forward(model, ids, mask, precision, 0, grads)
        other, _, _ = training_forward(model, ids, mask, precision, 1, grads)
    row = {
        "check": "flex training, attention dropout",
        "method": method,
        "case": f"{max(lengths)}x{len(lengths)}",
        "precision": precision,
        "attention_dropout": config.attention_probs_dropout_prob,
        "flex_calls": len(seen),
        "flex_dropout_rates": sorted(set(seen)),
        "loss": loss,
        "loss_finite": math.isfinite(loss),
        "same_seed_identical": torch.equal(logits, again),
        "other_seed_differs": not torch.equal(logits, other),
    }
    ok = row["loss_finite"] and row["same_seed_identical"] and row["other_seed_differs"]
    ok = ok and row["flex_calls"] > 0 and row["flex_dropout_rates"] == [config.attention_probs_dropout_prob]
    if grads:
        set_local_attention(model, "blocks")
        _, _, reached = training_forward(model, ids, mask, precision, 0, grads)
        row["grads_finite"] = all(bool(g.isfinite().all()) for g in gradients.values())
        row["zero_on_flex"] = [n for n, g in gradients.items() if not g.any() and reached[n].any()]
        row["zero_on_both"] = [n for n, g in gradients.items() if not g.any() and not reached[n].any()]
        row["grads_checked"] = len(gradients)
        ok = ok and row["grads_finite"] and not row["zero_on_flex"] and len(gradients) > 0
    else:
        row["grads"] = "not checked: the CPU's FlexAttention has no backward"
    row["ok"] = ok
    return row


def held_check(method: str, config: LongformerConfig, lengths, device) -> dict:
    """Logits with the frozen linear weights held in bf16 against the same model not held, bf16 autocast, eval, on
    each local-attention path: bit-identical."""
    torch.manual_seed(0)
    plain = build_classifier(LongEncoder(config), method, 2).to(device).eval()
    held = copy.deepcopy(plain)
    row = {"check": "held frozen weights, bf16 autocast", "method": method, "case": f"{max(lengths)}x{len(lengths)}"}
    row["held_tensors"] = hold_frozen_in(held, torch.bfloat16)
    ids, mask = batch(lengths, config.vocab_size, device)
    for path in ("flex", "blocks"):
        outputs = []
        for model in (plain, held):
            set_local_attention(model, path)
            with torch.no_grad(), torch.autocast(device.type, torch.bfloat16):
                outputs.append(model(ids, mask).logits.float())
        row[f"max_abs_diff_{path}"] = (outputs[0] - outputs[1]).abs().max().item()
    row["ok"] = row["held_tensors"] > 0 and row["max_abs_diff_flex"] == 0 and row["max_abs_diff_blocks"] == 0
    return row


def guarded(rows: list, check_fn, args: tuple, **where) -> None:
    """rows += check_fn(*args), or its error: one device call must bring back every case it can."""
    try:
        rows.append(check_fn(*args))
    except Exception as err:  # noqa: BLE001
        rows.append({**where, "error": repr(err)[:500]})
    print(json.dumps(rows[-1]), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--base-layers", type=int, default=2, help="layers of the base-shaped case (default: 2)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cases = [(tiny_config(), (150, 90, 17), "float32")]
    if device.type == "cuda":
        cases.append((base_config(args.base_layers), (1024, 700), "bf16"))
    rows = []
    for config, lengths, precision in cases:
        case = f"{max(lengths)}x{len(lengths)}"
        for method in METHODS:
            guarded(rows, check, (method, config, lengths, precision, device), method=method, case=case)
        for method in METHODS:
            where = {"check": "flex training, attention dropout", "method": method, "case": case}
            guarded(rows, dropout_check, (method, config, lengths, precision, device), **where)
        for method in FROZEN_BACKBONE:
            where = {"check": "held frozen weights, bf16 autocast", "method": method, "case": case}
            guarded(rows, held_check, (method, config, lengths, device), **where)
    lengths = (1000, 1500, 2047, 1200, 3000) if device.type == "cuda" else (150, 120)
    try:
        rows.append(
            varying_lengths(base_config(args.base_layers) if device.type == "cuda" else tiny_config(), lengths, device)
        )
    except Exception as err:  # noqa: BLE001
        rows.append({"check": "varying lengths", "error": repr(err)[:500]})
    print(json.dumps(rows[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    info = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__}
    (args.out / "gpu_checks.json").write_text(json.dumps({**info, "rows": rows}, indent=1))
    return 0 if all(row.get("ok") for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
