"""A classification dataset as every source returns it, and the splits we make ourselves.

Every source ends as a `TextData`: a `datasets.DatasetDict` with the splits "train", "validation"
and "test", each with a "text" string column and a "label" `ClassLabel` column.

Splits we make ourselves are seeded and stratified: each class is shuffled and cut on its own,
80/10/10, so every class with at least three examples appears in every split. A class of n_c
examples gives validation and test k_c = max(1, floor(0.1 n_c + 0.5)) each and train the other
n_c - 2 k_c.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import datasets
import numpy as np

from peftviz.data.checks import printable, quoted
from peftviz.errors import DataError

SPLITS = ("train", "validation", "test")
HELD_OUT = 0.1  # share of each class for validation and for test when we split ourselves


@dataclass
class TextData:
    """A classification dataset: named splits of (text, label) and the label names."""

    name: str
    splits: datasets.DatasetDict
    label_names: list[str]

    @property
    def num_labels(self) -> int:
        return len(self.label_names)


def describe(data: TextData) -> dict:
    """Name, label names and split sizes, for the CLI and the app."""
    sizes = {split: len(data.splits[split]) for split in SPLITS}
    return {"name": data.name, "num_labels": data.num_labels, "label_names": list(data.label_names), **sizes}


def split_features(label_names: list[str]) -> datasets.Features:
    """The columns of every split: "text", a string, and "label", a ClassLabel of `label_names`."""
    return datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=label_names)})


def stratified_indices(
    labels: np.ndarray, held_out: tuple[str, ...], seed: int, label_names: list[str], where: str
) -> dict[str, np.ndarray]:
    """Cut each class on its own into train and `held_out` splits of HELD_OUT each, seeded.

    Per-class cuts (rather than sklearn's global stratified shuffle) keep every class in every
    split down to 1 + len(held_out) examples, which is exactly the size we ask for.
    """
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {split: [] for split in ("train", *held_out)}
    need = 1 + len(held_out)
    for label, members in _class_members(labels):
        members = rng.permutation(members)
        if len(members) < need:
            raise DataError(
                f"class {quoted(label_names[label])} has only {len(members)} example(s) in {where}; "
                f"need at least {need} to split off {' and '.join(held_out)}"
            )
        k = max(1, int(HELD_OUT * len(members) + 0.5))
        for i, split in enumerate(held_out):
            parts[split].append(members[i * k : (i + 1) * k])
        parts["train"].append(members[len(held_out) * k :])
    # Shuffle each split so classes are interleaved, not in blocks.
    return {split: rng.permutation(np.concatenate(chunks)) for split, chunks in parts.items()}


def label_array(split: datasets.Dataset, column: str = "label") -> np.ndarray:
    """A label column as int64, through Arrow: `split[column]` goes row by row (15 s for 900,000 rows)."""
    labels = split.select_columns([column]).with_format("arrow")[:][column]
    return labels.to_numpy().astype(np.int64)


def _class_members(labels: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(label, its indices in increasing order) for each label present, in increasing label order.

    One sort instead of a scan per class: a file of a hundred thousand small classes stays fast.
    """
    order = np.argsort(labels, kind="stable")
    starts = np.flatnonzero(np.diff(labels[order])) + 1
    for members in np.split(order, starts):
        if len(members):
            yield int(labels[members[0]]), members


def complete_splits(
    parts: dict[str, datasets.Dataset], seed: int, label_names: list[str], where: str
) -> datasets.DatasetDict:
    """Fill in missing splits: a lone validation set becomes test; what is still missing comes from train."""
    parts = dict(parts)
    if "train" not in parts or len(parts["train"]) == 0:
        raise DataError(f"{where} has no training examples")
    if "test" not in parts and "validation" in parts:
        parts["test"] = parts.pop("validation")
    missing = tuple(split for split in ("validation", "test") if split not in parts)
    if missing:
        train = parts.pop("train")
        labels = label_array(train)
        cuts = stratified_indices(labels, missing, seed, label_names, where)
        parts.update({split: train.select(idx) for split, idx in cuts.items()})
    return datasets.DatasetDict({split: parts[split] for split in SPLITS})


def from_rows(name: str, texts: list[str], labels: list, splits: list[str] | None, seed: int) -> TextData:
    """TextData from parsed rows: label values -> ids by sorted value, given splits or our own."""
    shown = printable(name)
    if not texts:
        raise DataError(f"{shown} has no examples")
    label_names, ids = _label_ids(labels)
    if len(label_names) < 2:
        raise DataError(f"{shown} has only one class ({quoted(label_names[0])}); need at least two")
    full = datasets.Dataset.from_dict({"text": texts, "label": ids}, features=split_features(label_names))
    if splits is None:
        parts = {"train": full}  # all of it is cut 80/10/10 below
    else:
        given = np.asarray(splits)
        parts = {s: full.select(np.flatnonzero(given == s)) for s in SPLITS if (given == s).any()}
    return TextData(name, complete_splits(parts, seed, label_names, shown), label_names)


def _label_ids(values: list) -> tuple[list[str], list[int]]:
    """Names are str(value) of the sorted unique values; ids index that order (numbers sort as numbers).

    Values are strings, ints and non-integral floats (as `peftviz.data.csv_jsonl` reads them), so no two numbers share a name.
    """
    unique = set(values)
    if not all(isinstance(v, (int, float)) for v in unique):
        values = [str(v) for v in values]  # mixed or string labels sort as strings
        unique = set(values)
    order = sorted(unique)
    index = {value: i for i, value in enumerate(order)}
    return [str(v) for v in order], [index[v] for v in values]


def subsample(split: datasets.Dataset, limit: int, seed: int) -> datasets.Dataset:
    """At most `limit` rows, each class in proportion: take the rows whose within-class rank is lowest."""
    if len(split) <= limit:
        return split
    rng = np.random.default_rng(seed)
    labels = label_array(split)
    order = rng.permutation(len(labels))
    rank = np.empty(len(labels))
    for _, positions in _class_members(labels[order]):
        members = order[positions]  # this class, in shuffled order
        rank[members] = (np.arange(len(members)) + 0.5) / len(members)
    return split.select(np.argsort(rank, kind="stable")[:limit])
