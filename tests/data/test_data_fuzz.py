"""Hostile data files, generated: `load_data` on .csv and .jsonl files and class folders that mix valid
rows with random bytes, random unicode, wrong types, NaN, infinite and 1.0 labels, missing and
duplicate columns, junk in the split column, empty texts, FIFOs and links to /dev/zero.

Whatever the input, `load_data` returns a consistent TextData or raises a DataError with a one-line
message; any other exception, or a load that takes over TIMEOUT_S, fails. A file built only of
valid rows must load with exactly those rows, labels normalised (1, 1.0 and "01" are one class).
The loader writes nothing: the example's folder, the temporary folder and the datasets cache are
the same after a load as before. Each test also checks that both outcomes, a load and an error,
came up often enough for the property to mean something.
"""

import csv
import io
import json
import os
import tempfile
from collections import Counter
from pathlib import Path

import datasets
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from peftviz.data.checks import MAX_TEXT_CHARS
from peftviz.data.loading import load_data
from peftviz.data.text_data import TextData
from peftviz.errors import DataError
from tests.data.test_data import SPLITS, assert_well_formed
from tests.support.helpers import FUZZ, hard_timeout

TIMEOUT_S = 10

# class name -> spellings of it; any mix of spellings of a few classes must load as those classes
JSONL_CLASSES = {
    "1": [1, 1.0, "1"],
    "2": [2, 2.0, " 2 "],
    "1.5": [1.5, "1.5"],
    "neg": ["neg", " neg "],
    "True": [True, "True"],
}
CSV_CLASSES = {
    "1": ["1", "1.0", "01", "+1", "1e0", " 1 "],
    "2": ["2", "2.00", "20e-1"],
    "1.5": ["1.5", "1.50", "15e-1"],
    "neg": ["neg", " neg"],
    "True": ["True"],
}

TRICKY_TEXTS = ["a\x00b", "line\u2028sep", "x\x85y", "\ufeffbom", "cr\rlf\n", '"quoted", text', "  pad  ", "é" * 40]
VALID_TEXT = st.one_of(st.text(min_size=1, max_size=30), st.sampled_from(TRICKY_TEXTS)).filter(str.strip)
HOSTILE_VALUE = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            1,
            1.0,
            1.5,
            -0.0,
            1e400,
            float("nan"),
            float("inf"),
            -float("inf"),
            10**30,
            "",
            "  ",
            "nan",
            "NaN",
            "inf",
            "1.0",
            "1",
            "train",
            "holdout",
            "\ud800",
            "\n",
            [],
            {},
            ["text"],
            {"text": "a"},
        ]
    ),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=2),
)
KEY = st.sampled_from(["text", "label", "split", "Text", "other", ""])
VALID_LABEL = st.sampled_from([label for spellings in JSONL_CLASSES.values() for label in spellings])
HOSTILE_RECORD = st.one_of(
    st.fixed_dictionaries({"text": VALID_TEXT, "label": HOSTILE_VALUE}),
    st.fixed_dictionaries({"text": HOSTILE_VALUE, "label": VALID_LABEL}),
    st.fixed_dictionaries({"text": VALID_TEXT, "label": VALID_LABEL, "split": HOSTILE_VALUE}),
    st.dictionaries(KEY, HOSTILE_VALUE, max_size=4),
)
HOSTILE_JSONL_LINE = st.one_of(
    HOSTILE_RECORD.map(json.dumps),
    HOSTILE_VALUE.map(json.dumps),
    st.text(max_size=30),
    st.sampled_from(
        [
            '{"text": "a", "label": NaN}',
            '{"text": "a", "label": Infinity}',
            '{"text": "a", "label": 1e400}',
            "[" * 5000,
            '{"text": "a", "label": ' + "9" * 5000 + "}",
            '{"text": "a"',
            "\ufeff{}",
            "null",
        ]
    ),
)
HOSTILE_CSV_LINE = st.one_of(
    st.lists(st.text(max_size=10), max_size=4).map(lambda cells: csv_lines([cells], "\n")),
    st.text(max_size=30),
    st.sampled_from(
        [
            "a,nan",
            "a,NaN",
            "a,inf",
            "a,-Infinity",
            "a,1e999",
            '"unclosed,1',
            'a"b,1',
            "a,b,c,d",
            "\x00,1",
            ",1",
            "a,",
            "a," + "9" * 5000,
            "a,1,holdout",
            "a,1,",
            " , ",
        ]
    ),
)
VALID_HEADERS = [
    ["text", "label"],
    ["label", "text"],
    [" text", "label "],
    ["\ufefftext", "label"],
    ["text", "label", "x"],
    ["split", "text", "label"],
]
TRAIN = st.sampled_from(["train", " Train ", "TRAIN"])  # all rows in train: our own split follows
HOSTILE_HEADERS = [["text"], ["label"], ["text", "text", "label"], ["Text", "label"], [], ["text", "label", "label"]]


def csv_lines(rows: list[list[str]], line_end: str) -> str:
    """Rows as CSV; fields with a line end quoted (Python 3.11 quotes only the characters of `line_end`)."""
    has_line_end = any("\r" in cell or "\n" in cell for row in rows for cell in row)
    out = io.StringIO()
    csv.writer(out, lineterminator=line_end, quoting=csv.QUOTE_ALL if has_line_end else csv.QUOTE_MINIMAL).writerows(
        rows
    )
    return out.getvalue()


@st.composite
def valid_rows(draw, classes: dict[str, list]) -> list[tuple[str, object, str]]:
    """(text, label as written, class name): two or three classes of three to five rows, shuffled."""
    names = draw(st.lists(st.sampled_from(sorted(classes)), min_size=2, max_size=3, unique=True))
    rows = []
    for name in names:
        for _ in range(draw(st.integers(3, 5))):
            rows.append((draw(VALID_TEXT), draw(st.sampled_from(classes[name])), name))
    return draw(st.permutations(rows))


HOW_MANY_HOSTILE = st.sampled_from([0, 0, 1, 2, 3])  # no hostile line in two cases of five


def insert_hostile(draw, lines: list[str], hostile_line) -> bool:
    """Insert hostile lines at drawn places; whether any went in."""
    count = draw(HOW_MANY_HOSTILE)
    for _ in range(count):
        lines.insert(draw(st.integers(0, len(lines))), draw(hostile_line))
    return count > 0


@st.composite
def jsonl_files(draw) -> tuple[bytes, list | None]:
    """A .jsonl file's bytes and, if it is made of valid rows only, the (text, class) pairs it holds."""
    rows = draw(valid_rows(JSONL_CLASSES))
    with_split = draw(st.booleans())
    records = [{"text": text, "label": label} for text, label, _ in rows]
    lines = [json.dumps({**r, "split": draw(TRAIN)} if with_split else r) for r in records]
    spoiled = insert_hostile(draw, lines, HOSTILE_JSONL_LINE)
    line_end = draw(st.sampled_from(["\n", "\r\n"]))
    content = line_end.join(lines) + draw(st.sampled_from([line_end, "", line_end * 3]))
    expected = None if spoiled else [(text.strip(), name) for text, _, name in rows]
    return content.encode("utf-8", "surrogatepass"), expected


@st.composite
def csv_files(draw) -> tuple[bytes, list | None]:
    """A .csv file's bytes and, if it is made of valid rows only, the (text, class) pairs it holds."""
    valid_header = draw(st.sampled_from([True, True, False]))
    header = draw(st.sampled_from(VALID_HEADERS if valid_header else HOSTILE_HEADERS))
    header = header + [f"c{i}" for i in range(draw(st.sampled_from([0, 0, 0, 3000])))]  # 3000: a long message
    rows = draw(valid_rows(CSV_CLASSES))
    by_name = [{"text": text, "label": label, "split": draw(TRAIN)} for text, label, _ in rows]
    cells = [[row.get(column.replace("\ufeff", "").strip(), "") for column in header] for row in by_name]
    line_end = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    lines = [csv_lines([header], line_end), *(csv_lines([row], line_end) for row in cells)]
    spoiled = insert_hostile(draw, lines, HOSTILE_CSV_LINE.map(lambda line: line + line_end))
    encoding = draw(st.sampled_from(["utf-8", "utf-8-sig"]))
    expected = [(text.strip(), name) for text, _, name in rows] if valid_header and not spoiled else None
    return "".join(lines).encode(encoding, "surrogatepass"), expected


# ---------------------------------------------------------------------------------------------
# class folders

NAME_CHARACTERS = st.characters(exclude_characters="/\x00", exclude_categories=["Cs"])
CLASS_NAME = st.text(NAME_CHARACTERS, min_size=1, max_size=8).filter(lambda n: n not in (".", ".."))
FOLDER_TEXT = VALID_TEXT.filter(lambda t: "\x00" not in t)
ODD_ENTRY = st.sampled_from(["fifo", "dev-zero", "folder", "dangling", "empty", "blank", "binary", "latin", "utf-16"])


@st.composite
def folders(draw) -> tuple[dict, list | None]:
    """Class name -> {file name: (kind, content)}, and, if all are texts in two visible classes, the pairs.

    A UTF-8 BOM that starts a file is not part of its text; names starting with "." or "_" are hidden.
    """
    names = draw(st.lists(CLASS_NAME, min_size=2, max_size=3, unique_by=str.lower))
    layout = {
        name: {f"{i:02d}.txt": ("text", draw(FOLDER_TEXT)) for i in range(draw(st.integers(3, 4)))} for name in names
    }
    odd_entry = st.tuples(st.sampled_from(names), ODD_ENTRY, st.binary(max_size=20))
    odd = [draw(odd_entry) for _ in range(draw(HOW_MANY_HOSTILE))]
    for i, (name, kind, content) in enumerate(odd):
        layout[name][f"odd{i}.txt"] = (kind, content)
    classes = [n for n in names if not n.startswith((".", "_"))]
    if odd or len(classes) < 2:
        return layout, None
    return layout, [(text.removeprefix("\ufeff").strip(), n) for n in classes for _, text in layout[n].values()]


def write_entry(path: Path, kind: str, content) -> None:
    writers = {
        "text": lambda: path.write_bytes(content.encode("utf-8")),
        "fifo": lambda: os.mkfifo(path),
        "dev-zero": lambda: path.symlink_to("/dev/zero"),
        "folder": lambda: path.mkdir(),
        "dangling": lambda: path.symlink_to(path.with_name("gone")),
        "empty": lambda: path.write_bytes(b""),
        "blank": lambda: path.write_bytes(b" \r\n\t"),
        "binary": lambda: path.write_bytes(content + b"\x00\xff"),
        "latin": lambda: path.write_bytes(b"caf\xe9 " + content),
        "utf-16": lambda: path.write_bytes("text".encode("utf-16")),
    }
    writers[kind]()


def write_folder(root: Path, layout: dict) -> Path:
    for name, entries in layout.items():
        (root / name).mkdir()
        for file_name, (kind, content) in entries.items():
            write_entry(root / name / file_name, kind, content)
    return root


# ---------------------------------------------------------------------------------------------
# the property


def listing(folder: Path) -> list[tuple]:
    """Every entry under `folder` with its kind, size and modification time (links and FIFOs not followed)."""
    entries = []
    for parent, dirs, files in os.walk(folder):
        for name in dirs + files:
            info = os.lstat(os.path.join(parent, name))
            entries.append(
                (os.path.relpath(os.path.join(parent, name), folder), info.st_mode, info.st_size, info.st_mtime_ns)
            )
    return sorted(entries)


@pytest.fixture
def sandbox(tmp_path, monkeypatch) -> Path:
    """Examples go under tmp_path/examples; temporary files and the datasets cache under tmp_path/elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "tmp").mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(elsewhere / "tmp"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", elsewhere / "datasets")
    (tmp_path / "examples").mkdir()
    yield tmp_path / "examples"
    assert [path.name for path in elsewhere.iterdir()] == ["tmp"] and not any((elsewhere / "tmp").iterdir())


def new_example(sandbox: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=sandbox))


def pairs(data: TextData) -> list[tuple[str, str]]:
    return sorted(
        (t, data.label_names[y]) for s in SPLITS for t, y in zip(data.splits[s]["text"], data.splits[s]["label"])
    )


def assert_consistent(data: TextData) -> None:
    assert_well_formed(data)
    names = data.label_names
    assert len(set(names)) == len(names) >= 2 and all(isinstance(n, str) and n for n in names)
    used = set()
    for split in SPLITS:
        ds = data.splits[split]
        assert len(ds) > 0
        labels = list(ds["label"])
        assert all(0 <= y < len(names) for y in labels)
        used.update(labels)
        assert all(isinstance(t, str) and t and t == t.strip() and len(t) <= MAX_TEXT_CHARS for t in ds["text"])
    assert used == set(range(len(names)))  # every class has an example somewhere


def outcome_of(spec: Path, expected: list | None) -> str:
    """Load `spec` and check the result: "loaded" or "error"; anything else fails the test."""
    folder = spec if spec.is_dir() else spec.parent
    before = listing(folder)
    with hard_timeout(TIMEOUT_S):
        try:
            data = load_data(str(spec))
        except DataError as err:
            message = str(err)
            assert message and "\n" not in message and "\r" not in message, repr(message)
            assert expected is None, f"valid rows refused: {message}"
            data = None
    assert listing(folder) == before  # the loader wrote nothing
    if data is None:
        event("error")
        return "error"
    assert_consistent(data)
    if expected is not None:
        assert pairs(data) == sorted(expected)
    event("loaded")
    return "loaded"


@pytest.mark.parametrize(("file_name", "files"), [("data.jsonl", jsonl_files), ("data.csv", csv_files)])
def test_generated_data_files(sandbox, file_name, files):
    outcomes = Counter()

    @settings(FUZZ, max_examples=150)
    @given(files())
    def check(case):
        content, expected = case
        path = new_example(sandbox) / file_name
        path.write_bytes(content)
        outcomes[outcome_of(path, expected)] += 1

    check()
    assert outcomes["loaded"] >= 40 and outcomes["error"] >= 40, outcomes


def test_random_bytes_and_text_as_data_files(sandbox):
    outcomes = Counter()

    @settings(FUZZ, max_examples=40)
    @given(
        st.sampled_from(["data.csv", "data.jsonl"]),
        st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)),
    )
    def check(name, content):
        path = new_example(sandbox) / name
        path.write_bytes(content)
        outcomes[outcome_of(path, None)] += 1

    check()
    assert outcomes["error"] == 40, outcomes  # random bytes never make two classes of three rows


def test_generated_class_folders(sandbox):
    outcomes = Counter()

    @settings(FUZZ, max_examples=60)
    @given(folders())
    def check(case):
        layout, expected = case
        root = write_folder(new_example(sandbox), layout)
        outcomes[outcome_of(root, expected)] += 1

    check()
    assert outcomes["loaded"] >= 15 and outcomes["error"] >= 10, outcomes
