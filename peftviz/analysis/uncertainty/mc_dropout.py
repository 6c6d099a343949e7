"""Monte Carlo dropout (Gal & Ghahramani, ICML 2016): T stochastic forward passes, dropout on, averaged.

    p(y | x) ≈ (1/T) Σ_t softmax(f(x; θ ⊙ m_t)),   m_t the dropout masks of pass t

Every dropout the run trained with is on (the model in training mode, under no_grad): the encoder's
hidden and attention dropout, the method's own (LoRA's `lora_dropout`, ...) and the head's; a transformer
encoder has no other train-time behaviour (no batch norm). With every dropout probability at 0 the T
passes are the deterministic one, and the member equals the run's own predictions. The masks are seeded
(`seed`, one generator per pass on the model's device), so the predictions repeat. Cost: T passes, no
extra parameters, the T passes measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from peftviz.analysis.uncertainty import MAX_PASSES
from peftviz.analysis.uncertainty.base import Cost, Member, Progress, UncertaintyMethod
from peftviz.analysis.uncertainty.cache import per_run_members
from peftviz.analysis.uncertainty.model_runs import per_1000, split_loaders, timed, with_model
from peftviz.options import Options, option
from peftviz.store.runs import Group, Run


@dataclass
class MCDropoutOptions(Options):
    passes: int = option(5, "T, the stochastic forward passes averaged", at_least=1, at_most=MAX_PASSES)
    seed: int = option(0, "seed of the dropout masks (pass t uses seed + t)", at_least=0, at_most=2**31 - 1)


@torch.no_grad()
def mc_dropout_probs(model: torch.nn.Module, loader, device: torch.device, passes: int, seed: int) -> np.ndarray:
    """(N, C) float32: the mean over `passes` training-mode passes of the softmax, in the loader's order."""
    was_training = model.training
    model.train()
    total = None
    try:
        for t in range(passes):
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(seed + t)
                probs = torch.cat([_batch_probs(model, batch, device) for batch in loader])  # (N, C) float64
            total = probs if total is None else total + probs
    finally:
        model.train(was_training)
    return (total / passes).cpu().numpy().astype(np.float32)


def _batch_probs(model: torch.nn.Module, batch: dict, device: torch.device) -> torch.Tensor:
    logits = model(batch["input_ids"].to(device), batch["attention_mask"].to(device)).logits  # (b, C)
    return logits.double().softmax(-1)


def mc_dropout_member(run: Run, options: MCDropoutOptions) -> Member:
    def compute(model, tokenizer, device) -> Member:
        loaders = split_loaders(run, tokenizer)
        validation = mc_dropout_probs(model, loaders["validation"], device, options.passes, options.seed)
        test, seconds = timed(lambda: mc_dropout_probs(model, loaders["test"], device, options.passes, options.seed))
        return Member((run,), run.seed, validation, test, Cost(options.passes, 0, per_1000(seconds, len(test))))

    return with_model(run, compute)


class MCDropout(UncertaintyMethod):
    name = "mc-dropout"
    title = "Monte Carlo dropout: T stochastic passes with the run's dropout on, probabilities averaged"
    options_class = MCDropoutOptions
    needs_params = True

    @classmethod
    def describe(cls, options: MCDropoutOptions) -> str:
        return f"mc-dropout, T = {options.passes}"

    @classmethod
    def members(cls, group: Group, options: MCDropoutOptions, progress: Progress | None = None) -> list[Member]:
        settings = {"passes": options.passes, "seed": options.seed}
        return per_run_members(
            cls.name,
            settings,
            __name__,
            group,
            partial(mc_dropout_member, options=options),
            progress,
            cls.describe(options),
        )
