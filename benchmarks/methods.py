"""What each method costs, against the plain backbone on the same inputs, and against its peers in peft.

    .venv/bin/python benchmarks/methods.py          # MiniLM at 32, 128 and 512 tokens, batch 2 and 8
    .venv/bin/python benchmarks/methods.py --cases minilm:32:2 long-minilm:2048:2 --repeats 30 --out table.md
    .venv/bin/python benchmarks/methods.py --peers-only --methods peft --threads 1 --repeats 10 --seconds 0

For every method and case (sequence length T, batch B), one run measures:
- inference ratio: the classifier's forward / the plain encoder's forward (eval, no grad);
- training step ratio: forward + backward + AdamW step / full fine-tuning's step;
- training memory ratio / fine-tuning's. On CUDA: peak allocated memory of a step. On CPU, where
  freed memory stays in the allocator and peak RSS says little, the memory a step holds by
  construction: activations saved for backward (parameters excluded), gradients, AdamW state;
- trainable parameters;
- the share of extra work the method's design implies, as the method class says it (base.py):
  the `n_prefix_queries` positions it prepends run through every layer (positions / T more
  tokens: prefix-propagation's j, prompt tuning's n), and the prefix keys of its AttentionContext
  beyond those positions are keys without queries (prefix-tuning's j: j more keys for every
  query, j / T more attention scores on BERT, j / (window + 2) on a Longformer, whose queries read
  window + 1 neighbours and <s>). Methods that add neither (LoRA, (IA)³, BitFit, adapters,
  tiny-attention) add a few small matrix products the registry does not size: "–", share 0;
- whether the inference ratio is within 1.2 × (1 + share);
- a control row: the plain encoder on T + j tokens against itself on T (T − j against T where
  the encoder has no position T + j), i.e. what j more positions cost the backbone's own
  kernels with no method involved. It is "clean" when 1 + share / 2 ≤ ratio ≤ 1.2 × (1 + share):
  time follows work. Above, the machine's noise is larger than the effects the other rows measure;
  below, time does not follow work here (a GPU on small inputs is bound by launching kernels, and
  a method's cost there is the operations it adds, not their arithmetic), and the bound says little.

Peer rows (BERT-style pretrained encoders), built as a user of Hugging Face peft would build them:
`AutoModelForSequenceClassification.from_pretrained(folder, num_labels=5)`, then `get_peft_model`
with peft's defaults for SEQ_CLS:
- peft prefix-tuning, `PrefixTuningConfig(num_virtual_tokens=j)`: no reparameterisation MLP
  (`prefix_projection=False`, peft's default; peftviz's prefix-tuning has none either unless
  `reparameterize` is set), no dropout on the prefixes (peftviz's has 0.1 in training);
- peft LoRA, `LoraConfig()`: r = 8, α = 8, query and value, as peftviz's lora;
- both timed against the plain sequence classifier they were built from (transformers' own
  attention, "sdpa"), and fine-tuning's step and memory as every row;
- "peftviz prefix-tuning ÷ peft prefix-tuning": the two timed against each other, like for like.
peft's prefix-tuning numbers the text's positions from j (the prefix is a KV cache of j
tokens), so it fails where T + j exceeds the encoder's positions (MiniLM at 512): the row says so.

The peer table (--peer-cases, by default the quick preset's MiniLM at 64 tokens × batch 16): one
row per method of --methods that Hugging Face peft has (its class names a `peft_type`), peftviz's
classifier against peft's `get_peft_model` of the same config on the architecture's
AutoModelForSequenceClassification, built by export.py's `peft_adapter_model` (every tensor
copied from peftviz's, so both compute the same logits: the last column checks it) with
transformers' default attention (sdpa). Each side trains as its own loop would: peftviz's as its
trainer does (the method's learning rate per parameter, its `regularization` in the loss, its
`after_step`), peft's as peft documents (the loss its forward returns given the labels, which
holds AdaLoRA's orthogonality penalty; `update_and_allocate(step)` after each step where the tuner
has it; `create_loraplus_optimizer` for a LoRA+ ratio). Methods with layouts run layout=peft.
Inference (forward, no grad) and the training step (forward + backward + AdamW step) are each
reported as the median of the pairs' ratios peftviz ÷ peft with its distribution-free 95%
interval (order statistics of the ratios), and checked against 1.05.

Every ratio's two sides run interleaved (A, B, B, A, ...) on separate copies of the encoder, so
drift of the machine cancels; times are medians after a warm-up, of at least --repeats pairs and
as many more as fit in --seconds (short forwards get many). Each cell shows the ratio and both
sides (method / baseline). Uses the GPU when present. Prints markdown (and writes it to --out).
On a CPU that other work shares, --threads 1: with torch's default threads, each operation waits
for its slowest thread, and a thread that lost its core to other work stalls it.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import gc
import itertools
import math
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import peft
import torch
import transformers
from peft.optimizers import create_loraplus_optimizer

from peftviz import METHODS, build_classifier, load_encoder, make_method
from peftviz.errors import ConfigError, ExchangeError
from peftviz.exchange.export import peft_adapter_model
from peftviz.modeling.longformer import LongEncoder
from peftviz.run_config import TrainConfig, comparison_methods
from peftviz.training.trainer import parameter_groups

PREFIX_LENGTH = 8  # the paper's j
NUM_LABELS = 5
LEARNING_RATE = 1e-5  # AdamW's, on every side
BOUND = 1.2  # a method's inference should stay within BOUND × (1 + its share of extra work)
# the peftviz method that does what peft's prefix-tuning does (the like-for-like row)
PEFT_PREFIX_TUNING_PEER = "prefix-tuning"
PEER_BOUND = 1.05  # peftviz's form of a peft method: within this factor of peft's own, step and inference
PEER_TOTAL_STEPS = 10**6  # the training length a method with a schedule is told (AdaLoRA: allocates every step)
DEFAULT_PEER_CASES = ["minilm:64:16"]  # the quick preset's batches
DEFAULT_CASES = ["minilm:32:2", "minilm:32:8", "minilm:128:2", "minilm:128:8", "minilm:512:2", "minilm:512:8"]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def paired_times(first, second, repeats: int, seconds: float, device: torch.device) -> tuple[list, list]:
    """Seconds of two steps timed alternately, after one warm-up of each: at least `repeats` pairs,
    and more until `seconds` have passed. Which of the two runs first alternates from pair to pair,
    so that neither always finds the caches the other left."""
    first(), second()
    times = ([], [])
    started = time.perf_counter()
    while len(times[0]) < repeats or time.perf_counter() - started < seconds:
        order = ((first, times[0]), (second, times[1]))
        for step, bucket in order if len(times[0]) % 2 == 0 else order[::-1]:
            synchronize(device)
            begun = time.perf_counter()
            step()
            synchronize(device)
            bucket.append(time.perf_counter() - begun)
    return times


def paired_medians(first, second, repeats: int, seconds: float, device: torch.device) -> tuple[float, float]:
    """Median seconds of two steps timed alternately (paired_times)."""
    times = paired_times(first, second, repeats, seconds, device)
    return statistics.median(times[0]), statistics.median(times[1])


def median_ratio_interval(ours: list[float], theirs: list[float]) -> tuple[float, float, float]:
    """The median of the pairs' ratios ours_i / theirs_i and its distribution-free 95% interval: with the n
    ratios sorted, r_(k) … r_(n+1-k), k the largest with P(Binomial(n, ½) < k) ≤ 2.5% (the interval covers the
    population median with ≥ 95% probability whatever the distribution, given independent pairs)."""
    ratios = sorted(a / b for a, b in zip(ours, theirs))
    n, k, below = len(ratios), 0, 0.0
    while below + math.comb(n, k) / 2**n <= 0.025:  # below = P(Binomial(n, ½) < k + 1) after the step
        below += math.comb(n, k) / 2**n
        k += 1
    if k == 0:  # fewer than 6 pairs: no 95% interval; the range
        return statistics.median(ratios), ratios[0], ratios[-1]
    return statistics.median(ratios), ratios[k - 1], ratios[n - k]


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


def fine_tuning_method() -> str:
    """The baseline of the training columns: the method that trains the whole backbone."""
    return next(name for name in METHODS if METHODS[name].trains_backbone)


def options_for(method: str) -> dict:
    """j for every method whose config has a prefix length; the method's defaults otherwise."""
    fields = METHODS[method].config_class().to_dict()
    return {"prefix_length": PREFIX_LENGTH} if "prefix_length" in fields else {}


def max_text_positions(encoder) -> int:
    """Tokens the encoder has positions for (Longformer/RoBERTa number from padding_idx + 1)."""
    config = encoder.config
    return config.max_position_embeddings - (config.pad_token_id + 1 if isinstance(encoder, LongEncoder) else 0)


def keys_per_query(encoder, T: int) -> int:
    """Keys a text query reads: all T on BERT; its window, itself and <s> on a Longformer."""
    if isinstance(encoder, LongEncoder):
        return min(T, max(encoder.config.attention_window) + 2)
    return T


def extra_work(method: str, encoder, T: int) -> tuple[float, str]:
    """(share, description) of the extra work the method's design implies, as its class says it:
    positions it prepends (`n_prefix_queries`) and prefix keys without queries (its context's
    `n_prefix_keys` beyond those positions)."""
    tuning = make_method(method, encoder.config, **options_for(method))
    positions = tuning.n_prefix_queries
    keys_only = tuning.new_context(1).n_prefix_keys - positions
    keys = keys_per_query(encoder, T)
    if positions:
        text = f"{positions}/{T} positions = {100 * positions / T:.1f}%"
        if isinstance(encoder, LongEncoder):  # global positions: also more keys for every query
            text += f"; as global keys, {positions}/{keys} = {100 * positions / keys:.1f}% of attention scores"
        return positions / T, text
    if keys_only:
        return keys_only / keys, f"{keys_only}/{keys} keys = {100 * keys_only / keys:.1f}% of attention scores"
    return 0.0, "–"


def within_bound(ratio: float, share: float) -> str:
    bound = BOUND * (1 + share)
    return f"yes (≤ {bound:.2f})" if ratio <= bound else f"**no** (> {bound:.2f})"


def model_steps(model, logits, labels, loss=None, optimizer=None, after_step=None):
    """(loss forward, training step, inference) closures; `logits()` runs `model` on the batch -> (B, C).
    By default the loss is the cross-entropy of `logits()` and the optimiser AdamW on every trainable
    parameter; `after_step(step)` runs after each optimiser step, before the gradients are cleared."""
    optimizer = optimizer or torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE)
    model.eval()  # every submodule in one mode (a loaded encoder comes in eval): model.training then says which
    steps = itertools.count(1)

    def cross_entropy():
        return torch.nn.functional.cross_entropy(logits(), labels)

    loss = loss or cross_entropy

    def train_step():
        if not model.training:
            model.train()
        optimizer.zero_grad(set_to_none=True)
        loss().backward()
        optimizer.step()
        if after_step is not None:
            after_step(next(steps))

    @torch.no_grad()
    def infer():
        if model.training:
            model.eval()
        logits()

    return loss, train_step, infer


def classifier_steps(model, ids, mask, labels):
    """model_steps of a peftviz classifier on the batch (B, T)."""
    return model_steps(model, lambda: model(ids, mask).logits, labels)


def hf_steps(model, ids, mask, labels, **inputs):
    """model_steps of a transformers / peft sequence classifier on the batch (B, T)."""
    return model_steps(model, lambda: model(input_ids=ids, attention_mask=mask, **inputs).logits, labels)


@dataclass
class Baseline:
    """The sides every row of a case is timed against: the plain encoder's forward and
    fine-tuning's training step (with its memory)."""

    plain_forward: Callable[[], None]
    ft_step: Callable[[], None]
    ft_memory: int


def timed_row(label, model, steps, forward_baseline, baseline: Baseline, timing) -> dict:
    """One row: `steps` (loss, step, infer) against `forward_baseline` and fine-tuning's step."""
    loss, step, infer = steps
    base_seconds, inference = timing(forward_baseline, infer)
    ft_seconds, step_seconds = timing(baseline.ft_step, step)
    return {
        "method": label,
        "inference": (inference, base_seconds),
        "step": (step_seconds, ft_seconds),
        "memory": (training_memory(model, loss, step, timing.device), baseline.ft_memory),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }


class Timing:
    """paired_medians with the run's repeats, seconds and device."""

    def __init__(self, repeats: int, seconds: float, device: torch.device):
        self.repeats, self.seconds, self.device = repeats, seconds, device

    def __call__(self, first, second) -> tuple[float, float]:
        return paired_medians(first, second, self.repeats, self.seconds, self.device)

    def samples(self, first, second) -> tuple[list, list]:
        """Every pair's seconds (paired_times)."""
        return paired_times(first, second, self.repeats, self.seconds, self.device)


def control_row(short: int, long_: int, short_seconds: float, long_seconds: float) -> dict:
    """The plain encoder on `long_` tokens against itself on `short`, and whether time followed the work."""
    share, ratio = (long_ - short) / short, long_seconds / short_seconds
    if ratio > BOUND * (1 + share):
        check = "**noisy**"
    elif ratio < 1 + share / 2:
        check = "**time does not follow work**"
    else:
        check = "clean"
    return {
        "method": f"(control: plain encoder, {short} -> {long_} tokens)",
        "inference": (long_seconds, short_seconds),
        "extra work": f"{long_ - short}/{short} positions = {100 * share:.1f}%",
        "check": check,
    }


def measure(encoder, T: int, batch: int, timing: Timing, methods: list[str]) -> list[dict]:
    """One row per method of `methods` at sequence length T (batch random token ids, no padding), then the peers."""
    device = timing.device
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

    short_seconds, long_seconds = timing(lambda: plain_forward(short), lambda: plain_forward(long_))
    rows = [control_row(short, long_, short_seconds, long_seconds)]
    ids, mask = ids[:, :T], mask[:, :T]

    fine_tuning = build_classifier(copy.deepcopy(encoder), fine_tuning_method(), NUM_LABELS).to(device)
    ft_loss, ft_step, _ = classifier_steps(fine_tuning, ids, mask, labels)
    ft_step()  # measured after a step, as every row is
    baseline = Baseline(plain_forward, ft_step, training_memory(fine_tuning, ft_loss, ft_step, device))
    for method in methods:
        model = build_classifier(copy.deepcopy(encoder), method, NUM_LABELS, options_for(method)).to(device)
        row = timed_row(method, model, classifier_steps(model, ids, mask, labels), plain_forward, baseline, timing)
        row["share"], row["extra work"] = extra_work(method, encoder, T)
        row["check"] = within_bound(row["inference"][0] / row["inference"][1], row["share"])
        rows.append(row)
        del model
    if peers_apply(encoder):
        rows += peer_rows(encoder, T, ids, mask, labels, baseline, timing)
    return rows


def peers_apply(encoder) -> bool:
    """peft's peers need the pretrained BERT-style checkpoint the encoder was loaded from."""
    return not isinstance(encoder, LongEncoder) and Path(encoder.config.name_or_path or "/nonexistent").is_dir()


def peft_models(folder: str, device: torch.device) -> dict:
    """The plain sequence classifier and peft's prefix-tuning and LoRA on copies of it, as a user builds them."""
    torch.manual_seed(0)
    plain = transformers.AutoModelForSequenceClassification.from_pretrained(folder, num_labels=NUM_LABELS)
    prefix_config = peft.PrefixTuningConfig(task_type="SEQ_CLS", num_virtual_tokens=PREFIX_LENGTH)
    with warnings.catch_warnings():  # a deprecation notice transformers gives peft, not the user
        warnings.simplefilter("ignore", FutureWarning)
        return {
            "plain": plain.to(device).eval(),
            "prefix-tuning": peft.get_peft_model(copy.deepcopy(plain), prefix_config).to(device),
            "lora": peft.get_peft_model(copy.deepcopy(plain), peft.LoraConfig(task_type="SEQ_CLS")).to(device),
        }


def peer_rows(encoder, T: int, ids, mask, labels, baseline: Baseline, timing: Timing) -> list[dict]:
    """peft LoRA and prefix-tuning against their own plain classifier, then peftviz's prefix-tuning against peft's."""
    j, positions = PREFIX_LENGTH, max_text_positions(encoder)
    models = peft_models(encoder.config.name_or_path, timing.device)

    @torch.no_grad()
    def plain_forward():
        models["plain"](input_ids=ids, attention_mask=mask)

    def peer_row(label: str, model, share: float, work: str) -> dict:
        row = timed_row(label, model, hf_steps(model, ids, mask, labels), plain_forward, baseline, timing)
        check = within_bound(row["inference"][0] / row["inference"][1], share)
        return {**row, "share": share, "extra work": work, "check": check}

    rows = [peer_row("peft LoRA (r = 8, query, value) vs its plain classifier", models["lora"], 0.0, "–")]
    label = f"peft prefix-tuning (no MLP, j = {j}) vs its plain classifier"
    share, work = j / T, f"{j}/{T} keys = {100 * j / T:.1f}% of attention scores"
    if T + j > positions:  # peft numbers the text from j: there is no position T + j
        reason = f"fails: peft numbers the text's positions from {j}, and {T} + {j} > {positions} positions"
        return [*rows, {"method": label, "failed": reason, "extra work": work}]
    rows.append(peer_row(label, models["prefix-tuning"], share, work))
    rows.append(like_for_like_row(encoder, models["prefix-tuning"], rows[-1], ids, mask, labels, timing))
    return rows


def like_for_like_row(encoder, peft_prefix, peft_row: dict, ids, mask, labels, timing: Timing) -> dict:
    """peftviz's prefix-tuning timed against peft's (inference, training step), both at j, no MLP."""
    options = options_for(PEFT_PREFIX_TUNING_PEER)
    ours = build_classifier(copy.deepcopy(encoder), PEFT_PREFIX_TUNING_PEER, NUM_LABELS, options).to(timing.device)
    ours_loss, ours_step, ours_infer = classifier_steps(ours, ids, mask, labels)
    _, peft_step, peft_infer = hf_steps(peft_prefix, ids, mask, labels)
    peft_seconds, ours_seconds = timing(peft_infer, ours_infer)
    peft_step_seconds, ours_step_seconds = timing(peft_step, ours_step)
    trainable = sum(p.numel() for p in ours.parameters() if p.requires_grad)
    return {
        "method": "peftviz prefix-tuning ÷ peft prefix-tuning (both no MLP, same j, paired)",
        "inference": (ours_seconds, peft_seconds),
        "step": (ours_step_seconds, peft_step_seconds),
        "memory": (training_memory(ours, ours_loss, ours_step, timing.device), peft_row["memory"][0]),
        "trainable": f"{trainable:,} / {peft_row['trainable']:,}",
        "extra work": peft_row["extra work"],
        "check": "peftviz no slower: " + ("yes" if ours_seconds <= peft_seconds else "**no**"),
    }


def has_peft_form(method: str) -> bool:
    """Whether Hugging Face peft has the method (its class names a peft type): it gets a peer row."""
    return bool(METHODS[method].peft_type)


def peer_options(method: str) -> dict:
    """options_for, and layout=peft where the method has layouts (prompt learning: the layout peft has)."""
    fields = METHODS[method].config_class().to_dict()
    return options_for(method) | ({"layout": "peft"} if "layout" in fields else {})


def peer_pair(encoder, method: str, device: torch.device):
    """(peftviz's classifier with `method`, peft's `get_peft_model` of the same config on the architecture's
    AutoModelForSequenceClassification), the second built by export.py's `peft_adapter_model`, every tensor
    copied from the first, and given transformers' default attention (sdpa), as a user of peft has it."""
    torch.manual_seed(0)
    ours = build_classifier(copy.deepcopy(encoder), method, NUM_LABELS, peer_options(method)).to(device)
    ours.method.schedule(PEER_TOTAL_STEPS)  # first: the copy takes AdaLoRA's total_step from it
    theirs = peft_adapter_model(ours, [f"label {i}" for i in range(NUM_LABELS)], base=encoder.config.name_or_path)
    theirs.get_base_model().set_attn_implementation("sdpa")
    return ours, theirs.to(device)


def ours_peer_steps(model, ids, mask, labels):
    """model_steps of a peftviz classifier as its trainer steps it: AdamW's groups at the rates the method gives
    (trainer.parameter_groups: LoRA+'s B matrices), the method's `regularization` added to the loss (AdaLoRA's
    orthogonality penalty) and its `after_step` after each step (AdaLoRA's rank allocation)."""
    method = model.method
    optimizer = torch.optim.AdamW(parameter_groups(model, TrainConfig(learning_rate=LEARNING_RATE)))

    def logits():
        return model(ids, mask).logits

    def loss():
        value = torch.nn.functional.cross_entropy(logits(), labels)
        penalty = method.regularization()
        return value if penalty is None else value + penalty

    return model_steps(model, logits, labels, loss, optimizer, method.after_step)


def peft_peer_steps(model, ids, mask, labels, lr_ratio: float | None):
    """model_steps of a PeftModel as peft's documentation trains it: the loss its forward returns given the labels
    (AdaLoRA's adds the orthogonality penalty there), `create_loraplus_optimizer` where there is a LoRA+ ratio,
    and the tuner's `update_and_allocate(step)` after each step where it has one (AdaLoRA)."""
    if lr_ratio is None:
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE)
    else:
        optimizer = create_loraplus_optimizer(model, torch.optim.AdamW, lr=LEARNING_RATE, loraplus_lr_ratio=lr_ratio)

    def logits():
        return model(input_ids=ids, attention_mask=mask).logits

    def loss():
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss

    return model_steps(model, logits, labels, loss, optimizer, getattr(model.base_model, "update_and_allocate", None))


def within_peer_bound(ratio: float, high: float) -> str:
    """Whether the median ratio is within PEER_BOUND, and whether its interval is too."""
    if ratio > PEER_BOUND:
        return "**no**"
    return "yes" if high <= PEER_BOUND else f"yes (interval to {high:.2f})"


def peft_peer_row(encoder, method: str, ids, mask, labels, timing: Timing) -> dict:
    """peftviz's `method` ÷ peft's `get_peft_model` of the same config: inference and training step, paired."""
    label = method
    try:
        ours, theirs = peer_pair(encoder, method, timing.device)
    except (ConfigError, ExchangeError) as err:  # no exact peft form of these options
        return {"method": label, "failed": str(err)}
    ours_loss, ours_step, ours_infer = ours_peer_steps(ours, ids, mask, labels)
    lr_ratio = getattr(ours.method.config, "loraplus_lr_ratio", None)  # peft's own name of LoRA+'s λ
    theirs_loss, theirs_step, theirs_infer = peft_peer_steps(theirs, ids, mask, labels, lr_ratio)
    with torch.no_grad():  # the same function: the same logits, before any step changes either
        difference = ours.eval()(ids, mask).logits - theirs.eval()(input_ids=ids, attention_mask=mask).logits
    inference = timing.samples(ours_infer, theirs_infer)
    step = timing.samples(ours_step, theirs_step)
    device = timing.device
    return {
        "method": label,
        "inference": inference,
        "step": step,
        "memory": (
            training_memory(ours, ours_loss, ours_step, device),
            training_memory(theirs, theirs_loss, theirs_step, device),
        ),
        "trainable": tuple(sum(p.numel() for p in m.parameters() if p.requires_grad) for m in (ours, theirs)),
        "logits": difference.abs().max().item(),
    }


def format_peer_row(model_name: str, T: str, batch: str, row: dict) -> str:
    if "failed" in row:
        return f"| {model_name} | {T} × {batch} | {row['method']} | {row['failed']} | – | – | – | – | – |"
    cells = []
    for times in (row["inference"], row["step"]):
        ratio, low, high = median_ratio_interval(*times)
        ours, theirs = (1000 * statistics.median(side) for side in times)
        cells.append(f"{ratio:.3f} [{low:.3f}, {high:.3f}] ({ours:.0f} / {theirs:.0f} ms, {len(times[0])} pairs)")
        cells.append(within_peer_bound(ratio, high))
    memory = ratio_cell(row["memory"], "MiB", 2**-20, 2)
    trainable = " / ".join(f"{n:,}" for n in row["trainable"])
    return (
        f"| {model_name} | {T} × {batch} | {row['method']} | {' | '.join(cells)} | {memory} | {trainable} "
        f"| {row['logits']:.1e} |"
    )


PEER_HEADER = (
    "| model | T × batch | method: peftviz's ÷ peft's get_peft_model | inference [95% interval] | within 1.05 × "
    "| train step [95% interval] | within 1.05 × | training memory "
    "| trainable params peftviz / peft | max abs Δ logits |\n|---|---|---|---|---|---|---|---|---|---|"
)


def peer_table(cases: list[str], methods: list[str], timing: Timing, emit) -> None:
    """One row per method with a peft form and case: peftviz's method ÷ peft's own of the same config."""
    emit(PEER_HEADER)
    for case in cases:
        model_name, T, batch = parse_case(case)
        encoder, _ = load_encoder(model_name)
        encoder.to(timing.device)
        if not peers_apply(encoder):
            emit(f"| {model_name} | {T} × {batch} | – | peft's peers need a pretrained BERT-style folder | – | – | – |")
            continue
        torch.manual_seed(0)
        ids = torch.randint(1000, 29000, (int(batch), int(T)), device=timing.device)
        mask = torch.ones_like(ids)
        labels = torch.zeros(int(batch), dtype=torch.long, device=timing.device)
        for method in filter(has_peft_form, methods):
            emit(format_peer_row(model_name, T, batch, peft_peer_row(encoder, method, ids, mask, labels, timing)))
            gc.collect()


def ratio_cell(pair, unit: str, scale: float, digits: int) -> str:
    """(method, baseline) -> "ratio (method / baseline unit)"."""
    ours, theirs = pair
    return f"{ours / theirs:.{digits}f} ({scale * ours:.0f} / {scale * theirs:.0f} {unit})"


def format_row(model_name: str, T: str, batch: str, row: dict) -> str:
    if "failed" in row:
        return f"| {model_name} | {T} × {batch} | {row['method']} | {row['failed']} | – | {row['extra work']} | – | – | – |"
    inference = ratio_cell(row["inference"], "ms", 1000, 3)
    if "step" in row:
        step = ratio_cell(row["step"], "ms", 1000, 2)
        memory = ratio_cell(row["memory"], "MiB", 2**-20, 2)
        trainable = row["trainable"] if isinstance(row["trainable"], str) else f"{row['trainable']:,}"
    else:
        step = memory = trainable = "–"
    return (
        f"| {model_name} | {T} × {batch} | {row['method']} | {inference} | {row['check']} | {row['extra work']} "
        f"| {step} | {memory} | {trainable} |"
    )


def cpu_model() -> str:
    """The processor's model name (/proc/cpuinfo on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def machine_line(device: torch.device) -> str:
    if device.type == "cuda":
        machine = torch.cuda.get_device_name(device)
    else:
        machine = f"{cpu_model()}, torch on {torch.get_num_threads()} threads of {os.cpu_count()} logical CPUs"
    versions = f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}"
    return f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; {machine}; {versions}"


def load_line() -> str:
    """The machine's load averages (1, 5, 15 min): other work sharing the processor adds noise."""
    return "load average " + ", ".join(f"{load:.2f}" for load in os.getloadavg()) if hasattr(os, "getloadavg") else ""


def parse_case(case: str) -> tuple[str, str, str]:
    """MODEL:LENGTH[:BATCH] -> (model, length, batch), batch 8 by default."""
    model_name, T, batch = (case.split(":") + ["8"])[:3]
    return model_name, T, batch


def method_table(cases: list[str], methods: list[str], timing: Timing, emit) -> None:
    """One row per method and case against the plain encoder and fine-tuning, then peft's rows (measure)."""
    emit(
        "| model | T × batch | method | inference vs plain encoder (ms) | within 1.2 × (1 + share) | extra work by design "
        "| train step vs fine-tuning (ms) | training memory vs fine-tuning | trainable params |"
    )
    emit("|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        model_name, T, batch = parse_case(case)
        encoder, _ = load_encoder(model_name)
        encoder.to(timing.device)
        for row in measure(encoder, int(T), int(batch), timing, methods):
            emit(format_row(model_name, T, batch, row))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=DEFAULT_CASES, help="MODEL:LENGTH[:BATCH] (default batch 8)")
    parser.add_argument(
        "--methods",
        default="all",
        help="the methods of the rows: all (default), paper, peft (those built on peft), or names separated by commas",
    )
    parser.add_argument(
        "--peer-cases",
        nargs="+",
        default=DEFAULT_PEER_CASES,
        help="the cases of the peer table, each method with a peft form against peft's own (default: the quick "
        "preset's MiniLM, 64 tokens, batch 16)",
    )
    parser.add_argument("--peers-only", action="store_true", help="only the peer table")
    parser.add_argument(
        "--threads",
        type=int,
        default=torch.get_num_threads(),
        help="torch's CPU threads (default: torch's own); 1 where other work shares the cores: a thread that waits "
        "for a busy sibling stalls every operation, and the timings with it",
    )
    parser.add_argument("--repeats", type=int, default=5, help="at least this many timed pairs per ratio")
    parser.add_argument("--seconds", type=float, default=2.0, help="and more pairs until this many seconds passed")
    parser.add_argument("--device", default="auto", help="auto (the GPU when present), cpu or cuda")
    parser.add_argument("--out", type=Path, help="also write the markdown to this file")
    parser.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="bf16: every forward, the plain encoder's too, under bfloat16 autocast, as --precision bf16 trains",
    )
    args = parser.parse_args(argv)
    methods = comparison_methods(args.methods)  # a ConfigError names an unknown method
    torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    out = args.out.open("w") if args.out else None

    def emit(line: str) -> None:  # to the terminal, and to --out as it comes (a broken-off run keeps its rows)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    emit(machine_line(device))
    emit(
        f"at start: {load_line()}; median of ≥ {args.repeats} pairs and ≥ {args.seconds:g} s, prefix length "
        f"{PREFIX_LENGTH}, {args.precision}\n"
    )
    timing = Timing(args.repeats, args.seconds, device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    with autocast:
        if not args.peers_only:
            method_table(args.cases, methods, timing, emit)
            emit("")
        peer_table(args.peer_cases, methods, timing, emit)
    emit(f"\nat end: {load_line()}")
    if out:
        out.close()


if __name__ == "__main__":
    main()
