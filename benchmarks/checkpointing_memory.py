"""Peak memory of a training step with and without gradient checkpointing (`--gradient-checkpointing`).

    .venv/bin/python benchmarks/checkpointing_memory.py                # long MiniLM, 2,048 and 4,096 tokens
    .venv/bin/python benchmarks/checkpointing_memory.py --models long-minilm longformer-base --lengths 4096

Each (model, tokens, method, checkpointing) runs in a fresh process, one training step at batch 1:
forward, backward and AdamW's step, after one warm-up step (AdamW's state exists by then, as in
training). Memory is what the step adds to what the process held before it (weights, optimizer state):
- CUDA: `torch.cuda.max_memory_allocated` during the step, minus the allocated memory before it;
- CPU: the process's resident memory, sampled every millisecond in a thread, peak minus before. The
  allocator may keep freed memory, so this is what a step needs the machine to have, not a byte count.
`longformer-base` is Longformer-base's shape (12 layers, 768 wide, window 512, 4,096 positions) with
random weights, as no such weights install offline: memory depends on the shape alone. Prints markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import torch

from peftviz import build_classifier, load_encoder
from peftviz.training.inference import pick_device

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PeakResident:
    """Samples the resident set in a thread while the block runs: its peak, in bytes."""

    def __enter__(self):
        self.peak, self._running = resident_bytes(), True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while self._running:
            self.peak = max(self.peak, resident_bytes())
            time.sleep(0.001)

    def __exit__(self, *exc) -> None:
        self._running = False
        self._thread.join()
        self.peak = max(self.peak, resident_bytes())


def build_encoder(name: str):
    if name == "longformer-base":
        from transformers import LongformerConfig

        from peftviz.modeling.longformer import LongEncoder

        torch.manual_seed(0)
        return LongEncoder(LongformerConfig(attention_window=512, max_position_embeddings=4098))
    return load_encoder(name)[0]


def one_case(model_name: str, tokens: int, method: str, checkpointing: bool) -> dict:
    """Memory and seconds of one training step, measured in this process."""
    device = pick_device("auto")
    model = build_classifier(build_encoder(model_name), method, 5).to(device).train()
    if checkpointing:
        model.enable_gradient_checkpointing()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    ids = torch.randint(1000, 29000, (1, tokens), device=device)
    mask, labels = torch.ones_like(ids), torch.zeros(1, dtype=torch.long, device=device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(ids, mask).logits, labels).backward()
        optimizer.step()

    step()  # warm-up: AdamW's state, the allocator's pools
    optimizer.zero_grad(set_to_none=True)
    started = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        added = torch.cuda.max_memory_allocated() - before
    else:
        before = resident_bytes()
        with PeakResident() as peak:
            step()
        added = peak.peak - before
    return {"bytes": added, "seconds": time.perf_counter() - started, "device": str(device)}


def run_case(model_name: str, tokens: int, method: str, checkpointing: bool) -> dict:
    """one_case in a fresh process, so no earlier case's memory stays in the allocator."""
    command = [sys.executable, __file__, "--one", json.dumps([model_name, tokens, method, checkpointing])]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["long-minilm"])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096])
    parser.add_argument("--methods", nargs="+", default=["fine-tuning", "prefix-propagation"])
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a single case, in the child process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_case(*json.loads(args.one))))
        return
    device = pick_device("auto")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"{name}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}, batch 1, one training step\n")
    print("| model | tokens | method | without checkpointing | with checkpointing | memory ratio | time ratio |")
    print("|---|---|---|---|---|---|---|")
    for model_name in args.models:
        for tokens in args.lengths:
            for method in args.methods:
                plain, ckpt = (run_case(model_name, tokens, method, flag) for flag in (False, True))
                print(
                    f"| {model_name} | {tokens} | {method} | {plain['bytes'] / 2**20:,.0f} MiB ({plain['seconds']:.2f} s) "
                    f"| {ckpt['bytes'] / 2**20:,.0f} MiB ({ckpt['seconds']:.2f} s) | {ckpt['bytes'] / plain['bytes']:.2f} "
                    f"| {ckpt['seconds'] / plain['seconds']:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
