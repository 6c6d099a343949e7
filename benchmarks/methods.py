"""What each method costs, against the plain backbone on the same inputs.

    .venv/bin/python benchmarks/methods.py          # MiniLM at 128 and 512 tokens, long MiniLM at 2048
    .venv/bin/python benchmarks/methods.py --cases minilm:128 long-minilm:2048:2 --repeats 3

For every method and sequence length T, one run measures:
- inference ratio: the classifier's forward / the plain encoder's forward (eval, no grad);
- training step ratio: forward + backward + AdamW step / full fine-tuning's step;
- training memory ratio / fine-tuning's. On CUDA: peak allocated memory of a step. On CPU, where
  freed memory stays in the allocator and peak RSS says little, the memory a step holds by
  construction: activations saved for backward (parameters excluded), gradients, AdamW state;
- trainable parameters;
- the share of extra work the method's design implies: j extra positions for prefix-propagation
  (j / T more tokens everywhere), j extra keys for prefix-tuning (j more keys for every query:
  j / T more attention scores on BERT, j / (window + 2) on a Longformer, whose queries read
  window + 1 neighbours and <s>);
- a control row: the plain encoder on T + j tokens against itself on T (T − j against T where
  the encoder has no position T + j), i.e. what j more positions cost the backbone's own
  kernels with no method involved.
Each ratio's two sides run interleaved (A, B, A, B, ...) on separate copies of the encoder, so
drift of the machine cancels; times are medians after a warm-up. Uses the GPU when present.
Prints markdown.
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peftviz import METHODS, build_classifier, load_encoder
from peftviz.inference import pick_device
from peftviz.longformer import LongEncoder

PREFIX_LENGTH = 8  # the paper's j


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def paired_medians(first, second, repeats: int, device: torch.device) -> tuple[float, float]:
    """Median seconds of two steps timed alternately, after one warm-up of each."""
    first(), second()
    times = ([], [])
    for _ in range(repeats):
        for step, bucket in ((first, times[0]), (second, times[1])):
            synchronize(device)
            started = time.perf_counter()
            step()
            synchronize(device)
            bucket.append(time.perf_counter() - started)
    return statistics.median(times[0]), statistics.median(times[1])


def saved_activation_bytes(model, forward) -> int:
    """Bytes of the tensors autograd saves for backward during `forward`, parameters excluded."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = forward()
    loss.backward()
    return sum(storages.values())


def training_memory(model, forward, step, device: torch.device) -> int:
    """CUDA: peak allocated in a training step. CPU: saved activations + gradients + AdamW state."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step()
        return torch.cuda.max_memory_allocated(device) - before
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return saved_activation_bytes(model, forward) + trainable * 3  # gradient + two AdamW moments


def options_for(method: str) -> dict:
    return {"prefix_length": PREFIX_LENGTH} if "prefix" in method else {}


def max_text_positions(encoder) -> int:
    """Tokens the encoder has positions for (Longformer/RoBERTa number from padding_idx + 1)."""
    config = encoder.config
    return config.max_position_embeddings - (config.pad_token_id + 1 if isinstance(encoder, LongEncoder) else 0)


def keys_per_query(encoder, T: int) -> int:
    """Keys a text query reads: all T on BERT; its window, itself and <s> on a Longformer."""
    if isinstance(encoder, LongEncoder):
        return min(T, max(encoder.config.attention_window) + 2)
    return T


def extra_share(method: str, encoder, T: int) -> tuple[float, str]:
    """(share, description) of the extra work the method's design implies."""
    j = PREFIX_LENGTH
    if method in ("prefix-propagation", "kernel-prefix-propagation"):
        positions = f"{j}/{T} positions = {100 * j / T:.1f}%"
        if isinstance(encoder, LongEncoder):  # global positions: also j more keys for every query
            keys = keys_per_query(encoder, T)
            positions += f"; as global keys, {j}/{keys} = {100 * j / keys:.1f}% of attention scores"
        return j / T, positions
    if method == "prefix-tuning":
        keys = keys_per_query(encoder, T)
        return j / keys, f"{j}/{keys} keys = {100 * j / keys:.1f}% of attention scores"
    return 0.0, "–"


def classifier_steps(model, ids, mask, labels):
    """(loss forward, training step, inference) closures for one classifier on one batch."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)

    def loss():
        return torch.nn.functional.cross_entropy(model(ids, mask).logits, labels)

    def train_step():
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss().backward()
        optimizer.step()

    @torch.no_grad()
    def infer():
        model.eval()
        model(ids, mask)

    return loss, train_step, infer


def measure(encoder, T: int, batch: int, repeats: int, device: torch.device) -> list[dict]:
    """One row per method at sequence length T (batch random token ids, no padding)."""
    torch.manual_seed(0)
    # the control: what j more text tokens cost the plain encoder itself, no method involved.
    # Prefix-propagation's layers run on T + j positions; where the encoder has no position
    # T + j (MiniLM at 512), the control compares T − j with T instead.
    j = PREFIX_LENGTH
    short, long_ = (T, T + j) if T + j <= max_text_positions(encoder) else (T - j, T)
    ids = torch.randint(1000, 29000, (batch, long_), device=device)
    mask = torch.ones(batch, long_, dtype=torch.long, device=device)
    labels = torch.zeros(batch, dtype=torch.long, device=device)
    plain = copy.deepcopy(encoder).eval()  # never hooked

    @torch.no_grad()
    def plain_forward(n_tokens: int = T):
        plain(input_ids=ids[:, :n_tokens], attention_mask=mask[:, :n_tokens])

    short_seconds, long_seconds = paired_medians(
        lambda: plain_forward(short), lambda: plain_forward(long_), repeats, device
    )
    rows = [{"method": f"(plain encoder, {short} -> {long_} tokens)", "inference": long_seconds,
             "inference ratio": long_seconds / short_seconds, "share": j / short,
             "extra work": f"{j}/{short} positions = {100 * j / short:.1f}%"}]  # fmt: skip
    ids, mask = ids[:, :T], mask[:, :T]

    fine_tuning = build_classifier(copy.deepcopy(encoder), "fine-tuning", 5).to(device)
    ft_loss, ft_step, _ = classifier_steps(fine_tuning, ids, mask, labels)
    ft_step()  # measured after a step, as every row is
    ft_memory = training_memory(fine_tuning, ft_loss, ft_step, device)
    for method in METHODS:
        model = build_classifier(copy.deepcopy(encoder), method, 5, options_for(method)).to(device)
        loss, step, infer = classifier_steps(model, ids, mask, labels)
        plain_seconds, inference = paired_medians(plain_forward, infer, repeats, device)
        ft_seconds, step_seconds = paired_medians(ft_step, step, repeats, device)
        memory = training_memory(model, loss, step, device)
        rows.append(
            {
                "method": method,
                "inference": inference,
                "inference ratio": inference / plain_seconds,
                "step": step_seconds,
                "step ratio": step_seconds / ft_seconds,
                "memory": memory,
                "memory ratio": memory / ft_memory,
                "trainable": model.parameter_counts()["trainable"],
                "share": extra_share(method, encoder, T)[0],
                "extra work": extra_share(method, encoder, T)[1],
            }
        )
        del model
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases", nargs="+", default=["minilm:128:8", "minilm:512:8", "long-minilm:2048:2"],
        help="MODEL:LENGTH[:BATCH] (default batch 8)",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    device = pick_device("auto")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"{name}, median of {args.repeats}, prefix length {PREFIX_LENGTH}\n")
    print(
        "| model | T × batch | method | inference vs plain encoder | extra work by design "
        "| train step vs fine-tuning | training memory vs fine-tuning | trainable params |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for case in args.cases:
        model_name, T, batch = (case.split(":") + ["8"])[:3]
        encoder, _ = load_encoder(model_name)
        encoder.to(device)
        for row in measure(encoder, int(T), int(batch), args.repeats, device):
            training = (
                f"{row['step ratio']:.2f} ({1000 * row['step']:.0f} ms) "
                f"| {row['memory ratio']:.2f} ({row['memory'] / 2**20:.0f} MiB) | {row['trainable']:,}"
                if "step" in row else "– | – | –"
            )  # fmt: skip
            print(
                f"| {model_name} | {T} × {batch} | {row['method']} "
                f"| {row['inference ratio']:.3f} ({1000 * row['inference']:.0f} ms) | {row['extra work']} | {training} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
