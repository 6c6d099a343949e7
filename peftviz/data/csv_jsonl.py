"""A local .csv or .jsonl file with "text" and "label" columns, and optionally "split".

Rows are checked one by one; a problem is one line naming the file and the row (CSV: the n-th
record after the header) or the line (JSONL), within the limits of `peftviz.data.checks`. A "split"
column assigns rows to train, validation (also "valid", "val", "dev") or test; splits it leaves
out are cut from train (`peftviz.data.text_data`).

Labels. A number is a number whatever its spelling: JSON 1 and 1.0, and CSV cells "1", "01",
"1.0" and "1e0" are one class, "1"; a non-integral number such as 1.5 is a class of its own
("1.5"); NaN and infinite labels (JSON NaN and Infinity, CSV "nan" and "inf") are errors. A JSON
string is kept as written ("1.0" is not 1.0). When a file mixes numbers and strings, labels are
compared as text, so 1 and "1" are one class. JSON true and false are the classes "True" and
"False", never the same class as 1 and 0 (to Python, True == 1).
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

from peftviz import files
from peftviz.data import checks
from peftviz.data.checks import check_unicode, printable, quoted
from peftviz.data.text_data import TextData, from_rows
from peftviz.errors import DataError

FILE_SUFFIXES = (".csv", ".jsonl")
_SPLIT_ALIASES = {
    "train": "train",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "dev": "validation",
    "test": "test",
}

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


def load_file(spec: str, path: Path, seed: int) -> TextData:
    """The rows of the file at `path` (given as `spec`), with its own splits or cut 80/10/10 by `seed`."""
    shown = printable(spec)
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise DataError(f"file {shown} has unsupported extension '{path.suffix}'; use .csv, .jsonl or a folder")
    content = _read_data_file(path, shown)
    columns, rows = (_parse_csv if suffix == ".csv" else _parse_jsonl)(content, shown)
    del content  # the rows hold what is needed; the file's text can go
    return from_rows(spec, *_check_rows(shown, columns, rows, suffix == ".csv"), seed)


def _read_data_file(path: Path, shown: str) -> str:
    """A regular file of at most MAX_FILE_BYTES, decoded as UTF-8 with or without a BOM."""
    try:
        raw = files.read_bytes(path, checks.MAX_FILE_BYTES)
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
    csv.field_size_limit(checks.MAX_TEXT_CHARS)  # no field, text or other, may be longer than a text
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
        return f"{shown} {where} has a field of more than {checks.MAX_TEXT_CHARS:,} characters, the limit for a text"
    return f"cannot parse {shown}: {printable(str(err))} (line {line})"


def _check_row_count(number: int, shown: str) -> None:
    if number > checks.MAX_ROWS:
        raise DataError(f"{shown} has more than {checks.MAX_ROWS:,} rows, the limit; use a sample of it")


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
    shown = ", ".join(printable(c[: checks.SHOWN_CHARS]) for c in columns[:most])
    return shown if len(columns) <= most else f"{shown}, … ({len(columns):,} in all)"


def _text_value(value, at: str) -> str:
    """The text, stripped: a string of at most MAX_TEXT_CHARS characters that is not blank."""
    if value is None:
        raise DataError(f"{at} has no text")
    if not isinstance(value, str):
        raise DataError(f"{at}: 'text' is not a string but {_json_type(value)}")
    if len(value) > checks.MAX_TEXT_CHARS:
        raise DataError(f"{at} has a text of {len(value):,} characters; the limit is {checks.MAX_TEXT_CHARS:,}")
    text = value.strip()
    if not text:
        raise DataError(f"{at} has an empty text")
    check_unicode(text, at, "text")
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
    if len(label) > checks.MAX_LABEL_CHARS:
        raise DataError(f"{at} has a label of {len(label):,} characters; the limit is {checks.MAX_LABEL_CHARS:,}")
    check_unicode(label, at, "label")
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
        shown = json.dumps(number) if spelled is None else printable(spelled[: checks.SHOWN_CHARS])
        raise DataError(f"{at} has label {shown}; labels must be finite numbers or strings")
    return int(number) if number.is_integer() else number


def _split_value(value, at: str) -> str:
    split = _SPLIT_ALIASES.get(value.strip().lower()) if isinstance(value, str) else None
    if split is None:
        raise DataError(f"{at} has split {quoted(value)}; expected train, validation or test")
    return split


def _json_type(value) -> str:
    """What a parsed JSON value is, in JSON's words."""
    if isinstance(value, bool):
        return "a boolean"
    kinds = {int: "a number", float: "a number", str: "a string", list: "an array", dict: "an object"}
    return kinds.get(type(value), "null")
