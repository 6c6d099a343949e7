"""The Longformer's FlexAttention path against the banded blocks on a GPU: logits and gradients.

    PYTHONPATH=. python3 benchmarks/gpu_checks.py --out DIR     # on a CUDA machine, before benchmarks/gpu.py
    .venv/bin/python benchmarks/gpu_checks.py --out /tmp/x      # on the CPU: logits only (no CPU flex backward)

tests/modeling/test_flex_attention.py checks the path's forward on the CPU, where torch's FlexAttention runs
its reference math and has no backward. On a GPU it runs the compiled kernel, forward and backward, so this
script checks both there: for each method and case, the largest absolute difference of the logits and of
every trainable parameter's gradient, flex against blocks, each relative to the largest blocks value.
Cases: a tiny Longformer in float32 (TF32 off: the tolerance is float32's) on a padded batch, and a
Longformer-base-shaped layer stack at 1024 tokens under bf16 autocast. Writes DIR/gpu_checks.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import LongformerConfig

from peftviz.classifier import build_classifier
from peftviz.modeling.longformer import LongEncoder, set_local_attention

METHODS = ("fine-tuning", "prefix-tuning", "prefix-propagation")
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
        for method in METHODS:
            try:
                rows.append(check(method, config, lengths, precision, device))
            except Exception as err:  # noqa: BLE001  (one device call must bring back every case it can)
                rows.append({"method": method, "case": f"{max(lengths)}x{len(lengths)}", "error": repr(err)[:500]})
            print(json.dumps(rows[-1]), flush=True)
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
