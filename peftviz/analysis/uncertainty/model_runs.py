"""Running a stored run's model for the uncertainty methods that need one: its data, a timed pass, and the
plain pass every cost is measured against.

`plain_seconds(run)` is what one deterministic forward pass over the test split costs on this machine,
seconds per 1,000 documents, the median of PLAIN_REPEATS timed passes, measured once and cached like a member (method "plain"): the temperature's
and the ensembles' costs are built from it (an ensemble of k runs costs its members' passes). A run
without parameters (recorded from another training loop) has nothing to time: NaN.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from peftviz.analysis.uncertainty.base import Cost, Member
from peftviz.analysis.uncertainty.cache import cached_member, run_inputs
from peftviz.errors import PeftvizError
from peftviz.store.runs import Run
from peftviz.training.inference import load_trained, make_loader, pick_device, predict, run_data, tokenize

EVALUATED = ("validation", "test")  # the splits every member holds, in Member's order
PLAIN_REPEATS = 3  # the plain pass is timed thrice, the median kept: every other cost is built from it


def split_loaders(run: Run, tokenizer, splits=EVALUATED) -> dict:
    """The run's splits tokenized and batched as in training, unshuffled: split name -> loader."""
    data = run_data(run)
    return {
        name: make_loader(
            tokenize(data.splits[name], tokenizer, run.config.max_length), run.config.batch_size, tokenizer.pad_token_id
        )
        for name in splits
    }


def per_1000(seconds: float, n_documents: int) -> float:
    return 1000.0 * seconds / max(n_documents, 1)


def timed(compute: Callable[[], np.ndarray]) -> tuple[np.ndarray, float]:
    """compute()'s probabilities and the wall seconds it took (the device synchronised first and after)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    probs = compute()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return probs, time.perf_counter() - start


def with_model(run: Run, compute: Callable[[torch.nn.Module, object, torch.device], Member]) -> Member:
    """compute(model, tokenizer, device) on the run's best-epoch model, rebuilt from its parameters."""
    device = pick_device("auto")
    model, tokenizer = load_trained(run, str(device))
    return compute(model, tokenizer, device)


def _plain_member(run: Run) -> Member:
    def compute(model, tokenizer, device) -> Member:
        loaders = split_loaders(run, tokenizer)
        validation, _ = predict(model, loaders["validation"], device)  # also warms the model up for the timing
        timings = [timed(lambda: predict(model, loaders["test"], device)) for _ in range(PLAIN_REPEATS)]
        (test, _), _ = timings[0]
        seconds = float(np.median([seconds for _, seconds in timings]))
        return Member((run,), run.seed, validation, test, Cost(1, 0, per_1000(seconds, len(test))))

    return with_model(run, compute)


def plain_member(run: Run) -> Member:
    """The run's model run once more, deterministically, on validation and test, timed (cached)."""
    return cached_member("plain", {}, __name__, (run,), run.seed, lambda: _plain_member(run))


def plain_seconds(run: Run) -> float:
    """Seconds per 1,000 test documents of one plain pass of the run's model; NaN where it cannot run (no
    parameters, or a model that cannot be rebuilt here: its folder gone), which tables show as "not measured"."""
    if not run.has_params:
        return float("nan")
    try:
        return plain_member(run).cost.seconds_per_1000
    except PeftvizError:
        return float("nan")


def stored_member(run: Run) -> Member:
    """The run as trained: its own stored predictions, one pass each."""
    (validation, _), (test, _) = run_inputs(run)
    return Member((run,), run.seed, validation, test, Cost(1, 0, plain_seconds(run)))
