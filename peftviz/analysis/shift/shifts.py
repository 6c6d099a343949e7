"""A shift: what a run's test documents become. A corruption family at a severity of the run's own test split
(`corruptions`), or another dataset with the same labels (a domain shift), and the test data it gives.

    Shift("typo", 3)                       the run's test split, a typo in 20% of each document's words
    Shift("typo", 0)                       the test split itself: the run's stored test predictions
    Shift("domain", None, "other.csv")     every document of other.csv, its labels mapped by name

A domain shift's dataset may use a subset of the run's labels, never another label: a document whose
class the model cannot predict has no calibration to judge.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import datasets
import numpy as np

from peftviz.analysis.shift import DOMAIN, FAMILIES, SEVERITIES
from peftviz.analysis.shift.corruptions import check_family, check_severity, corrupt_texts
from peftviz.data.loading import load_data
from peftviz.data.text_data import SPLITS
from peftviz.data.uploads import dataset_label
from peftviz.errors import ConfigError, DataError
from peftviz.store.runs import Run


@dataclass(frozen=True)
class Shift:
    family: str  # a corruption family (FAMILIES), or DOMAIN
    severity: int | None  # 0 … 5 for a corruption; None for a domain shift
    dataset: str = ""  # the other dataset of a domain shift: a name, file or folder (`data.load_data`)
    seed: int = 0  # the corruption's seed

    def __post_init__(self):
        if self.family == DOMAIN:
            if self.severity is not None or not self.dataset.strip():
                raise ConfigError("a domain shift names a dataset and has no severity")
        else:
            check_family(self.family)
            check_severity(self.severity)

    @property
    def name(self) -> str:
        """How tables name the shift: "typo 3", "clean" (severity 0), "domain: other.csv"."""
        if self.family == DOMAIN:
            return f"{DOMAIN}: {dataset_label(self.dataset)}"
        return "clean" if self.severity == 0 else f"{self.family} {self.severity}"

    @property
    def is_clean(self) -> bool:
        return self.severity == 0

    def as_dict(self) -> dict:
        return {"family": self.family, "severity": self.severity, "dataset": self.dataset, "seed": self.seed}


def corruption_grid(families=FAMILIES, severities=SEVERITIES, seed: int = 0) -> list[Shift]:
    """Every family at every severity; severity 0, the same test split for every family, once, first."""
    shifts = [Shift(FAMILIES[0], 0, seed=seed)] if 0 in severities else []
    return shifts + [Shift(family, s, seed=seed) for family in families for s in severities if s != 0]


def parse_families(text: str) -> tuple[str, ...]:
    """A comma-separated list of corruption families, each once (`--shift-families`)."""
    names = [name.strip() for name in str(text).split(",")]
    if not any(names):
        raise ConfigError(f"name at least one corruption family: {', '.join(FAMILIES)}")
    for name in names:
        check_family(name)
    if len(set(names)) != len(names):
        raise ConfigError("each corruption family once")
    return tuple(names)


def parse_severities(text: str) -> tuple[int, ...]:
    """A comma-separated list of severities 0 … 5, or a range "1-5", each once, sorted (`--shift-severities`)."""
    text = str(text).strip()
    try:
        if "-" in text and "," not in text:
            low, high = (int(part) for part in text.split("-"))
            values = list(range(low, high + 1))
        else:
            values = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"severities are whole numbers {SEVERITIES[0]} to {SEVERITIES[-1]}: 0,1,3 or 1-5") from None
    for value in values:
        check_severity(value)
    if not values or len(set(values)) != len(values):
        raise ConfigError("name each severity once, at least one")
    return tuple(sorted(values))


# ---------------------------------------------------------------- the shifted test data


@functools.lru_cache(maxsize=4)
def _test_split(dataset: str, data_seed: int, limit: int | None) -> datasets.Dataset:
    """The test split a run with these settings was judged on (as `training.inference.run_data` loads it)."""
    return load_data(dataset, seed=data_seed, limit=limit).splits["test"]


@functools.lru_cache(maxsize=64)
def _corrupted(dataset: str, data_seed: int, limit: int | None, family: str, severity: int, seed: int):
    """The run's test texts corrupted, and their labels (every run of one split shares them: made once)."""
    split = _test_split(dataset, data_seed, limit)
    columns = split.to_dict()
    return tuple(corrupt_texts(columns["text"], family, severity, seed)), tuple(columns["label"])


def _domain(spec: str, label_names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Every document of `spec`, its labels as ids of `label_names`; a label the run does not know refused."""
    data = load_data(spec)
    unknown = sorted(set(data.label_names) - set(label_names))
    if unknown:
        raise DataError(
            f"{dataset_label(spec)} has labels the runs were not trained on ({', '.join(unknown[:5])}); "
            f"a domain shift needs the runs' labels: {', '.join(label_names)}"
        )
    texts, labels = [], []
    for split in SPLITS:
        columns = data.splits[split].to_dict()
        texts += columns["text"]
        labels += [label_names.index(data.label_names[i]) for i in columns["label"]]
    if not texts:
        raise DataError(f"{dataset_label(spec)} has no documents")
    return tuple(texts), tuple(labels)


def shifted_texts(run: Run, shift: Shift) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The documents the run is judged on under `shift`, and their labels (ids of the run's label names)."""
    if run.config is None:
        raise ConfigError(f"run {run.name}: {run.error}")
    if shift.family == DOMAIN:
        return _domain(shift.dataset, tuple(run.label_names))
    config = run.config
    return _corrupted(config.dataset, run.data_seed, config.limit, shift.family, shift.severity, shift.seed)


def texts_digest(texts, labels) -> str:
    """sha256 of documents and labels: what a domain shift's cached predictions are keyed by."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(np.asarray(labels, dtype=np.int64).tobytes())
    return digest.hexdigest()
