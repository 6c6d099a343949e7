"""Where the prefix methods' attention goes as the text moves: per document, the mass on the prefix against
confidence and correctness, at every shift.

A document's prefix mass is λ(C) (Li et al., ACL 2023, eq. 6; `analysis.attention.lambda_c`) averaged over
layers, heads and its text tokens (`analysis.attention.document_prefix_mass`). It is defined for the
methods whose queries attend to learned prefix keys (`Method.prefix_keys`: prefix-tuning,
prefix-propagation and its kernel form, prompt tuning); other runs are named as left out.

Cached like the shifted predictions (`evaluate`), one file per run and shift, the clean set included:

    analysis/shift/prefix-mass-<family>-<severity>-<key[:32]>.npz
        key          () str: the shifted predictions' key (`evaluate.shift_key`) and this module's code
        prefix_mass  (N,) float32 in [0, 1]
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd

from peftviz.analysis.code_identity import code_identity
from peftviz.analysis.shift import DOMAIN
from peftviz.analysis.shift.evaluate import SHIFT_DIR, Progress, evaluate_run, shift_key, shifted_loader
from peftviz.analysis.shift.shifts import Shift, shifted_texts
from peftviz.errors import RunError
from peftviz.store import caches, schema
from peftviz.store.runs import Run

COLUMNS = ("run", "seed", "shift", "family", "severity", "document", "prefix_mass", "confidence", "correct")


def has_prefix(run: Run) -> bool:
    return run.config is not None and bool(run.method_class.prefix_keys)


@functools.cache
def _code() -> str:
    return code_identity((__name__,))


def mass_key(run: Run, shift: Shift) -> str:
    return hashlib.sha256(f"{shift_key(run, shift)}|{_code()}".encode()).hexdigest()


def mass_name(shift: Shift, key: str) -> str:
    severity = "" if shift.severity is None else f"-{shift.severity}"
    return f"{SHIFT_DIR}/prefix-mass-{shift.family}{severity}-{key[:32]}.npz"


def _read(run: Run, shift: Shift, n_documents: int) -> np.ndarray | None:
    key = mass_key(run, shift)
    path = caches.cache_path(run.path, mass_name(shift, key))
    if not os.path.lexists(path):
        return None
    file = f"{caches.ANALYSIS_DIR}/{SHIFT_DIR}/{path.name}"
    try:
        arrays = caches.read_arrays(path, file)
        mass = arrays.get("prefix_mass")
        if set(arrays) != {"key", "prefix_mass"} or str(arrays["key"]) != key:
            raise schema.Corrupt(file, "members must be key and prefix_mass, of this run, shift and code")
        if mass.dtype != np.float32 or mass.shape != (n_documents,) or not ((mass >= 0) & (mass <= 1)).all():
            raise schema.Corrupt(file, f"prefix_mass must be {n_documents} float32 values in [0, 1]")
    except RunError:
        return None
    return mass


def _compute(run: Run, shifts: Sequence[Shift], progress: Progress | None) -> list[np.ndarray]:
    import torch

    from peftviz.analysis.attention import document_prefix_mass
    from peftviz.analysis.uncertainty.model_runs import with_model

    def compute(model, tokenizer, device) -> list[np.ndarray]:
        found = []
        for shift in shifts:
            if progress:
                progress(f"{run.name} · prefix mass · {shift.name}")
            loader = shifted_loader(run, shift, tokenizer)
            with torch.no_grad():
                mass = np.concatenate(
                    [document_prefix_mass(model, b["input_ids"], b["attention_mask"]) for b in loader]
                ).clip(0, 1)
            key = mass_key(run, shift)
            caches.write_arrays(run.path, mass_name(shift, key), {"key": np.array(key), "prefix_mass": mass})
            found.append(mass)
        return found

    return with_model(run, compute)


def prefix_mass(run: Run, shifts: Sequence[Shift], progress: Progress | None = None) -> list[np.ndarray]:
    """(N,) per shift, in order: each document's prefix mass; read where cached, the model run on the rest."""
    if not has_prefix(run):
        raise RunError(f"run {run.name}: {run.label} has no prefix keys, so no mass on the prefix")
    n_test = len(run.predictions("test")[1])  # a corruption keeps the test split's documents; a domain, its own
    sizes = [len(shifted_texts(run, shift)[1]) if shift.family == DOMAIN else n_test for shift in shifts]
    found = {shift: _read(run, shift, n) for shift, n in zip(shifts, sizes)}
    missing = [shift for shift, mass in found.items() if mass is None]
    if missing:
        if not run.has_params:
            raise RunError(f"run {run.name} has no parameters to run (a recorded run)")
        found |= dict(zip(missing, _compute(run, missing, progress)))
    return [found[shift] for shift in shifts]


def attention_table(runs: Sequence[Run], shifts: Sequence[Shift], progress: Progress | None = None) -> pd.DataFrame:
    """One row per run, shift and document (COLUMNS): its prefix mass, the model's confidence (top
    probability) and whether its prediction is right."""
    frames = []
    for run in runs:
        masses = prefix_mass(run, shifts, progress)
        for shifted, mass in zip(evaluate_run(run, shifts, progress), masses):
            shift = shifted.shift
            frames.append(
                pd.DataFrame(
                    {
                        "run": run.name,
                        "seed": run.seed,
                        "shift": shift.name,
                        "family": "clean" if shift.is_clean else shift.family,
                        "severity": shift.severity,
                        "document": np.arange(len(mass)),
                        "prefix_mass": mass,
                        "confidence": shifted.probs.max(1),
                        "correct": shifted.probs.argmax(1) == shifted.labels,
                    }
                )
            )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(COLUMNS))
