"""peftviz.data: the bbc-news corpus, local files and folders, the hub datasets, and every DataError.

Hostile input (FIFOs, devices, limits, NaN labels, broken encodings) has its own section; the
generated files are in test_data_fuzz.py.
"""

import json
import os
import resource
import subprocess
import sys
from collections import Counter
from pathlib import Path

import datasets
import huggingface_hub.constants
import numpy as np
import pytest

from peftviz.data import checks, csv_jsonl, folders, hub, text_data
from peftviz.data.builtin import BUILTIN, bbc_folder
from peftviz.data.hub import HUB_DATASETS, NEWSGROUPS
from peftviz.data.loading import load_data
from peftviz.data.text_data import TextData, describe
from peftviz.errors import DataError
from tests.support.helpers import hard_timeout

SPLITS = ("train", "validation", "test")
REPO = Path(__file__).resolve().parents[2]
BBC_NAMES = ["business", "entertainment", "politics", "sports", "tech"]


@pytest.fixture(scope="module")
def bbc() -> TextData:
    return load_data(BUILTIN, seed=0)


def texts_of(data: TextData, split: str) -> list[str]:
    return list(data.splits[split]["text"])


def named_labels(data: TextData, split: str) -> list[tuple[str, str]]:
    """(text, label name) pairs of one split, to compare against what was written."""
    ds = data.splits[split]
    return [(t, data.label_names[y]) for t, y in zip(ds["text"], ds["label"])]


def assert_well_formed(data: TextData) -> None:
    assert list(data.splits) == list(SPLITS)
    for ds in data.splits.values():
        assert ds.column_names == ["text", "label"]
        assert ds.features["text"] == datasets.Value("string")
        assert isinstance(ds.features["label"], datasets.ClassLabel)
        assert ds.features["label"].names == data.label_names


def test_importing_uploads_loads_no_datasets():
    # every page imports peftviz.data.uploads; `datasets` (a second to import) loads only with a source
    code = "import sys\nimport peftviz.data.uploads\nprint(sorted({'datasets', 'pyarrow', 'numpy'} & set(sys.modules)))"
    child = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# bbc-news


def test_bbc_sizes_names_and_dedup(bbc):
    assert_well_formed(bbc)
    assert bbc.name == "bbc-news" and bbc.label_names == BBC_NAMES and bbc.num_labels == 5
    assert len(list(bbc_folder().glob("*/*.txt"))) == 2225
    sizes = describe(bbc)
    assert sizes == {
        "name": "bbc-news",
        "num_labels": 5,
        "label_names": BBC_NAMES,
        "train": 1701,
        "validation": 213,
        "test": 213,
    }
    all_texts = [t for s in SPLITS for t in texts_of(bbc, s)]
    assert len(all_texts) == len(set(all_texts)) == 2127  # 98 exact duplicates dropped
    assert all(t and t == t.strip() for t in all_texts)


def test_bbc_splits_are_80_10_10_stratified_and_disjoint(bbc):
    total = sum(len(bbc.splits[s]) for s in SPLITS)
    overall = Counter(label for s in SPLITS for label in bbc.splits[s]["label"])
    for split, share in zip(SPLITS, (0.8, 0.1, 0.1)):
        labels = list(bbc.splits[split]["label"])
        assert abs(len(labels) / total - share) < 0.01
        counts = Counter(labels)
        for label, n in overall.items():
            assert abs(counts[label] / len(labels) - n / total) < 0.02, (split, label)
    sets = [set(texts_of(bbc, s)) for s in SPLITS]
    assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])


def test_bbc_is_deterministic_per_seed_and_reads_the_corpus_once(bbc, monkeypatch):
    # the bbc fixture read the 2225 files; later loads split the kept corpus (benchmarks/data_load.py times both)
    monkeypatch.setattr(folders, "read_folder", lambda folder: pytest.fail(f"read {folder} again"))
    again = load_data(BUILTIN, seed=0)
    other = load_data(BUILTIN, seed=1)
    for split in SPLITS:
        assert texts_of(again, split) == texts_of(bbc, split)
        assert list(again.splits[split]["label"]) == list(bbc.splits[split]["label"])
    assert set(texts_of(other, "test")) != set(texts_of(bbc, "test"))


def test_limit_keeps_a_stratified_seeded_subsample(bbc):
    small = load_data(BUILTIN, seed=0, limit=20)
    assert describe(small)["train"] == describe(small)["validation"] == describe(small)["test"] == 20
    for split in SPLITS:
        assert set(texts_of(small, split)) <= set(texts_of(bbc, split))  # subsample after splitting
        assert len(set(small.splits[split]["label"])) == 5
    assert texts_of(load_data(BUILTIN, seed=0, limit=20), "train") == texts_of(small, "train")
    assert describe(load_data(BUILTIN, limit=10_000)) == describe(bbc)
    with pytest.raises(DataError, match="limit"):
        load_data(BUILTIN, limit=0)


# ---------------------------------------------------------------------------------------------
# your own data


def rows(classes=("neg", "pos", "neu"), per_class=10):
    return [{"text": f"{c} text number {i}", "label": c} for c in classes for i in range(per_class)]


def write_csv(path, records, columns=("text", "label")):
    lines = [",".join(columns)] + [
        ",".join(json.dumps(r[c]) if isinstance(r[c], str) else str(r[c]) for c in columns) for r in records
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_file_round_trip_with_string_labels(tmp_path, kind):
    records = rows()
    path = tmp_path / f"data.{kind}"
    (write_csv if kind == "csv" else write_jsonl)(path, records)
    data = load_data(str(path), seed=3)
    assert_well_formed(data)
    assert data.name == str(path) and data.label_names == ["neg", "neu", "pos"]
    assert [len(data.splits[s]) for s in SPLITS] == [24, 3, 3]
    got = sorted(pair for s in SPLITS for pair in named_labels(data, s))
    assert got == sorted((r["text"], r["label"]) for r in records)
    for split in ("validation", "test"):  # one of each class in each held-out split
        assert sorted(data.splits[split]["label"]) == [0, 1, 2]
    assert texts_of(load_data(str(path), seed=3), "test") == texts_of(data, "test")


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_file_with_split_column_keeps_it(tmp_path, kind):
    records = [{**r, "split": SPLITS[i % 3]} for i, r in enumerate(rows(("a", "b"), 6))]
    path = tmp_path / f"data.{kind}"
    (write_csv(path, records, ("text", "label", "split")) if kind == "csv" else write_jsonl(path, records))
    data = load_data(str(path))
    for split in SPLITS:
        assert sorted(named_labels(data, split)) == sorted(
            (r["text"], r["label"]) for r in records if r["split"] == split
        )


def test_split_column_without_validation_carves_it_from_train(tmp_path):
    records = [{**r, "split": "test" if i % 5 == 0 else "train"} for i, r in enumerate(rows(("a", "b"), 10))]
    data = load_data(str(write_jsonl(tmp_path / "d.jsonl", records)))
    assert set(texts_of(data, "test")) == {r["text"] for r in records if r["split"] == "test"}
    assert len(data.splits["validation"]) == 2 and len(data.splits["train"]) == 14


def test_integer_labels_are_named_by_sorted_value(tmp_path):
    records = [{"text": f"t{i}", "label": label} for label in (10, 2, 3) for i in range(4)]
    csv_data = load_data(str(write_csv(tmp_path / "d.csv", records)))
    jsonl_data = load_data(str(write_jsonl(tmp_path / "d.jsonl", records)))
    for data in (csv_data, jsonl_data):
        assert data.label_names == ["2", "3", "10"]  # numeric order, not "10" < "2"
        pairs = {pair for s in SPLITS for pair in named_labels(data, s)}
        assert pairs == {(r["text"], str(r["label"])) for r in records}


def make_folder(root, classes=("cats", "dogs"), per_class=4):
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            (root / c / f"{i:03d}.txt").write_text(f"  a text about {c}, number {i}\n", encoding="utf-8")
    return root


def test_folder_of_class_sub_folders(tmp_path):
    folder = make_folder(tmp_path / "corpus")
    (folder / ".hidden").mkdir()  # ignored, like __MACOSX and friends
    data = load_data(str(folder))
    assert_well_formed(data)
    assert data.label_names == ["cats", "dogs"] and describe(data)["train"] == 4
    pairs = sorted(pair for s in SPLITS for pair in named_labels(data, s))
    assert pairs == sorted((f"a text about {c}, number {i}", c) for c in ("cats", "dogs") for i in range(4))


# ---------------------------------------------------------------------------------------------
# errors: one line, naming the problem


def error_of(spec) -> str:
    with pytest.raises(DataError) as info:
        load_data(str(spec))
    message = str(info.value)
    assert "\n" not in message and message
    return message


def test_missing_paths_and_unknown_names(tmp_path):
    assert "does not exist" in error_of(tmp_path / "nope.csv")
    assert "does not exist" in error_of(tmp_path / "no_folder")
    message = error_of("no-such-dataset")
    assert all(name in message for name in [BUILTIN, *HUB_DATASETS])


def test_unsupported_extension_and_unparseable_files(tmp_path):
    (tmp_path / "d.xlsx").write_text("x")
    assert "unsupported extension '.xlsx'" in error_of(tmp_path / "d.xlsx")
    (tmp_path / "bad.jsonl").write_text('{"text": "a", "label": "x"}\n{"text": oops}\n')
    assert "cannot parse" in error_of(tmp_path / "bad.jsonl") and "line 2" in error_of(tmp_path / "bad.jsonl")
    (tmp_path / "list.jsonl").write_text('["text", "label"]\n')
    assert "not a JSON object" in error_of(tmp_path / "list.jsonl")
    (tmp_path / "quote.csv").write_text('text,label\n"never closed,a\n')
    assert "cannot parse" in error_of(tmp_path / "quote.csv")
    (tmp_path / "extra.csv").write_text("text,label\nhello, world,a\n")
    assert "row 1 has more fields" in error_of(tmp_path / "extra.csv")
    (tmp_path / "latin.csv").write_bytes("text,label\ncaf\xe9,a\n".encode("latin-1"))
    assert "not UTF-8" in error_of(tmp_path / "latin.csv")


def test_missing_columns(tmp_path):
    write_csv(tmp_path / "d.csv", [{"a": "x", "b": "y"}], ("a", "b"))
    assert error_of(tmp_path / "d.csv") == f"{tmp_path / 'd.csv'} has no 'text' column; found columns: a, b"
    write_jsonl(tmp_path / "d.jsonl", [{"text": "x", "b": "y"}])
    assert error_of(tmp_path / "d.jsonl") == f"{tmp_path / 'd.jsonl'} has no 'label' column; found columns: text, b"


def test_empty_text_and_label_name_the_row(tmp_path):
    records = rows(("a", "b"), 3)
    records[4]["text"] = "   "
    assert "row 5 has an empty text" in error_of(write_csv(tmp_path / "d.csv", records))
    assert "line 5 has an empty text" in error_of(write_jsonl(tmp_path / "d.jsonl", records))
    records = rows(("a", "b"), 3)
    records[1]["label"] = None
    assert "line 2 has no label" in error_of(write_jsonl(tmp_path / "l.jsonl", records))
    (tmp_path / "s.csv").write_text("text,label,split\nx,a,train\ny,b,holdout\n")
    assert "row 2 has split 'holdout'" in error_of(tmp_path / "s.csv")


def test_one_class_too_small_class_and_empty(tmp_path):
    assert "only one class ('a'); need at least two" in error_of(write_csv(tmp_path / "one.csv", rows(("a",), 5)))
    message = error_of(write_jsonl(tmp_path / "small.jsonl", rows(("a",), 5) + rows(("tiny",), 2)))
    assert "class 'tiny' has only 2 example(s)" in message and "at least 3" in message
    (tmp_path / "header.csv").write_text("text,label\n")
    assert "has no examples" in error_of(tmp_path / "header.csv")
    (tmp_path / "blank.jsonl").write_text("\n")
    assert "has no examples" in error_of(tmp_path / "blank.jsonl")
    (tmp_path / "empty.csv").write_text("")
    assert "has no examples" in error_of(tmp_path / "empty.csv")


def test_folder_errors(tmp_path):
    one = make_folder(tmp_path / "one", classes=("a",))
    assert error_of(one) == f"folder {one} has only one class sub-folder ('a'); need at least two"
    (tmp_path / "none").mkdir()
    assert "no class sub-folders" in error_of(tmp_path / "none")
    hollow = make_folder(tmp_path / "hollow")
    (hollow / "zebras").mkdir()
    assert "zebras has no .txt files" in error_of(hollow)
    blank = make_folder(tmp_path / "blank")
    (blank / "dogs" / "009.txt").write_text(" \n")
    assert error_of(blank) == f"file {blank / 'dogs' / '009.txt'} is empty"
    small = make_folder(tmp_path / "small", per_class=2)
    assert "class 'cats' has only 2 example(s)" in error_of(small)


# ---------------------------------------------------------------------------------------------
# hostile input: not regular files, sizes, labels, encodings; always one line, never a hang


def test_fifo_is_refused_at_once_not_waited_on(tmp_path):
    for name in ("data.csv", "data.jsonl"):
        os.mkfifo(tmp_path / name)  # reading it would wait for a writer forever
        with hard_timeout(5):
            assert error_of(tmp_path / name) == f"{tmp_path / name} is a FIFO, not a regular file"


def messages_in_a_child(specs: list[str], memory: int = 3 << 30) -> list[str]:
    """load_data's DataError message (or "loaded") per spec, from a child with `memory` bytes of address space.

    Reading /dev/zero happens in C, where no signal stops it: a regression must hit the child's
    limit (MemoryError, a failed test), not take this machine's memory.
    """
    code = (
        "import sys\nfrom peftviz.data.loading import load_data\nfrom peftviz.errors import DataError\nfor spec in sys.argv[1:]:\n"
        "    try:\n        load_data(spec)\n        print('loaded')\n"
        "    except DataError as err:\n        print(err)\n"
    )

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    child = subprocess.run(
        [sys.executable, "-c", code, *specs],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit_memory,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    return child.stdout.splitlines()


def test_symlink_to_dev_zero_is_refused_not_read_forever(tmp_path):
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    folder = make_folder(tmp_path / "corpus", per_class=3)
    (folder / "dogs" / "zero.txt").symlink_to("/dev/zero")
    assert messages_in_a_child([str(tmp_path / "zero.jsonl"), str(folder)]) == [
        f"{tmp_path / 'zero.jsonl'} is a device, not a regular file",
        f"file {folder / 'dogs' / 'zero.txt'} is a device, not a regular file",
    ]


def test_symlinks_to_regular_files_are_followed(tmp_path):
    target = write_jsonl(tmp_path / "real.jsonl", rows(("a", "b"), 3))
    (tmp_path / "link.jsonl").symlink_to(target)
    folder = make_folder(tmp_path / "corpus", per_class=3)
    (folder / "cats" / "linked.txt").symlink_to(tmp_path / "corpus" / "dogs" / "000.txt")
    assert load_data(str(tmp_path / "link.jsonl")).label_names == ["a", "b"]
    data = load_data(str(folder))
    assert sum(len(data.splits[s]) for s in SPLITS) == 7
    assert ("a text about dogs, number 0", "cats") in [pair for s in SPLITS for pair in named_labels(data, s)]


@pytest.mark.parametrize(
    "make, problem",
    [
        (os.mkfifo, "is a FIFO, not a regular file"),
        (lambda path: path.mkdir(), "is a folder, not a regular file"),
        (lambda path: path.symlink_to(path.parent / "gone"), "does not exist"),
        (lambda path: path.write_bytes("café".encode("utf-16")), "is not text: it has NUL bytes"),
    ],
    ids=["fifo", "folder", "dangling-link", "utf-16"],
)
def test_a_bad_txt_in_a_class_folder_is_named_not_skipped(tmp_path, make, problem):
    folder = make_folder(tmp_path / "corpus", per_class=3)
    make(folder / "dogs" / "bad.txt")
    with hard_timeout(5):
        assert error_of(folder).startswith(f"file {folder / 'dogs' / 'bad.txt'} {problem}")


def test_file_size_limit(tmp_path, monkeypatch):
    path = write_csv(tmp_path / "d.csv", rows(("a", "b"), 3))
    size = path.stat().st_size
    monkeypatch.setattr(checks, "MAX_FILE_BYTES", size)
    assert len(load_data(str(path)).label_names) == 2  # exactly at the limit
    monkeypatch.setattr(checks, "MAX_FILE_BYTES", size - 1)
    assert error_of(path) == f"{path} is {size} bytes; the limit is {size - 1} bytes"


def test_folder_text_limit(tmp_path, monkeypatch):
    folder = make_folder(tmp_path / "corpus", per_class=3)
    total = sum(len(f"a text about {c}, number {i}") for c in ("cats", "dogs") for i in range(3))
    assert total == 162
    monkeypatch.setattr(checks, "MAX_FILE_BYTES", total)
    assert load_data(str(folder)).num_labels == 2
    monkeypatch.setattr(checks, "MAX_FILE_BYTES", total - 1)
    assert error_of(folder) == f"folder {folder} holds more than 161 characters of text, the limit"


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_text_length_limit_names_the_row_and_the_limit(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(checks, "MAX_TEXT_CHARS", 30)
    records = rows(("a", "b"), 3)
    records[3]["text"] = "x" * 30
    path = tmp_path / f"d.{kind}"
    (write_csv if kind == "csv" else write_jsonl)(path, records)
    assert "x" * 30 in [t for s in SPLITS for t in texts_of(load_data(str(path)), s)]
    records[4]["text"] = "y" * 31
    (write_csv if kind == "csv" else write_jsonl)(path, records)
    expected = {
        "csv": f"{path} row 5 has a field of more than 30 characters, the limit for a text",
        "jsonl": f"{path} line 5 has a text of 31 characters; the limit is 30",
    }
    assert error_of(path) == expected[kind]


def test_csv_field_limit_is_the_text_limit(tmp_path, monkeypatch):
    write_csv(tmp_path / "d.csv", rows(("a", "b"), 3))
    previous = csv_jsonl.csv.field_size_limit(7)
    try:
        load_data(str(tmp_path / "d.csv"))
        assert csv_jsonl.csv.field_size_limit() == checks.MAX_TEXT_CHARS == 1_000_000
        monkeypatch.setattr(checks, "MAX_TEXT_CHARS", 40)
        load_data(str(tmp_path / "d.csv"))
        assert csv_jsonl.csv.field_size_limit() == 40
    finally:
        csv_jsonl.csv.field_size_limit(previous)


def test_txt_length_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(checks, "MAX_TEXT_CHARS", 100)
    folder = make_folder(tmp_path / "corpus", per_class=3)
    (folder / "dogs" / "long.txt").write_text("  " + "z" * 101 + "  ")
    assert error_of(folder) == f"file {folder / 'dogs' / 'long.txt'} has 101 characters; the limit for a text is 100"
    (folder / "dogs" / "long.txt").write_text("z" * 401)  # over 4 bytes a character: not even read
    assert error_of(folder) == f"file {folder / 'dogs' / 'long.txt'} is 401 bytes; the limit is 400 bytes"


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_row_limit(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(checks, "MAX_ROWS", 6)
    path = tmp_path / f"d.{kind}"
    (write_csv if kind == "csv" else write_jsonl)(path, rows(("a", "b"), 3))
    assert sum(len(d) for d in load_data(str(path)).splits.values()) == 6
    (write_csv if kind == "csv" else write_jsonl)(path, rows(("a", "b"), 3) + rows(("c",), 1))
    assert error_of(path) == f"{path} has more than 6 rows, the limit; use a sample of it"


def test_label_length_limit(tmp_path):
    records = rows(("a", "b"), 3)
    records[2]["label"] = "9" * 5000  # int() refuses more than 4,300 digits
    assert error_of(write_csv(tmp_path / "d.csv", records)).endswith(
        "row 3 has a label of 5,000 characters; the limit is 1,000"
    )


def label_counts(tmp_path, kind: str, labels: list) -> tuple[list[str], dict[str, int]]:
    """Load three rows per label value; the label names in id order and the rows per name."""
    records = [{"text": f"text {i} of {label!r}", "label": label} for label in labels for i in range(3)]
    path = tmp_path / f"labels.{kind}"
    if kind == "csv":
        path.write_text("text,label\n" + "".join(f'"{r["text"]}",{r["label"]}\n' for r in records))
    else:
        write_jsonl(path, records)
    data = load_data(str(path))
    return data.label_names, dict(Counter(data.label_names[y] for s in SPLITS for y in data.splits[s]["label"]))


@pytest.mark.parametrize(
    "kind, labels, names, counts",
    [
        ("jsonl", [1, 1.0, 2], ["1", "2"], {"1": 6, "2": 3}),
        ("jsonl", [10.0, 2.0, 1], ["1", "2", "10"], {"1": 3, "2": 3, "10": 3}),  # numbers sort as numbers
        ("jsonl", [1, 1.5, 2.0], ["1", "1.5", "2"], {"1": 3, "1.5": 3, "2": 3}),  # 1.5 is its own class
        ("jsonl", [-0.0, 0, 1e2, 100], ["0", "100"], {"0": 6, "100": 6}),
        ("jsonl", [1, "1", "a"], ["1", "a"], {"1": 6, "a": 3}),  # numbers and strings: compared as text
        ("jsonl", ["1.0", 1], ["1", "1.0"], {"1": 3, "1.0": 3}),  # a JSON string is kept as written
        ("jsonl", [True, False, 1, 0], ["0", "1", "False", "True"], {"0": 3, "1": 3, "False": 3, "True": 3}),
        ("jsonl", [True, False], ["False", "True"], {"False": 3, "True": 3}),
        ("csv", ["1", "1.0", "01", "+1", "1e0", "2"], ["1", "2"], {"1": 15, "2": 3}),
        ("csv", ["1.5", "1.50", "2"], ["1.5", "2"], {"1.5": 6, "2": 3}),
        ("csv", ["1", "a", "1.0"], ["1", "a"], {"1": 6, "a": 3}),
        ("csv", ["True", "1"], ["1", "True"], {"1": 3, "True": 3}),
        ("csv", ["\u0661", "1"], ["1", "\u0661"], {"1": 3, "\u0661": 3}),  # only ASCII digits make a number
    ],
)
def test_labels_that_are_one_number_are_one_class(tmp_path, kind, labels, names, counts):
    assert label_counts(tmp_path, kind, labels) == (names, counts)


@pytest.mark.parametrize(
    "line, shown",
    [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e400", "Infinity")],
)
def test_non_finite_jsonl_label_names_the_line(tmp_path, line, shown):
    path = tmp_path / "data.jsonl"
    good = "".join(f'{{"text": "t{i}", "label": {i % 2}}}\n' for i in range(2))
    path.write_text(good + f'{{"text": "t3", "label": {line}}}\n' + good)
    assert error_of(path) == f"{path} line 3 has label {shown}; labels must be finite numbers or strings"


@pytest.mark.parametrize("cell", ["nan", "NaN", "inf", "-inf", "+Infinity", "1e999"])
def test_non_finite_csv_label_names_the_row(tmp_path, cell):
    path = tmp_path / "data.csv"
    path.write_text(f"text,label\na,1\nb,2\nc, {cell} \nd,1\n")
    assert error_of(path) == f"{path} row 3 has label {cell}; labels must be finite numbers or strings"


def test_nul_bom_and_line_separators_in_texts(tmp_path):
    texts = ["a\x00b", "line\u2028sep", "next\x85line", "form\x0cfeed", "\ufeffbom inside", "crlf\r\ninside"]
    records = [{"text": t, "label": label} for label in ("x", "y") for t in texts]
    csv_path = tmp_path / "d.csv"
    with open(csv_path, "w", encoding="utf-8-sig", newline="") as f:  # a BOM first, as Excel writes
        csv_jsonl.csv.writer(f).writerows([["text", "label"], *[[r["text"], r["label"]] for r in records]])
    for path in (csv_path, write_jsonl(tmp_path / "d.jsonl", records)):
        data = load_data(str(path))
        assert sorted(pair for s in SPLITS for pair in named_labels(data, s)) == sorted(
            (r["text"], r["label"]) for r in records
        )


def test_header_cells_are_stripped_of_spaces_and_stray_boms(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("\ufeff\ufeff text , label\n" + "".join(f"t{i},{i % 2}\n" for i in range(6)))
    assert load_data(str(path)).label_names == ["0", "1"]


def test_old_mac_line_ends(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes(b"text,label\r" + b"".join(b"t%d,%d\r" % (i, i % 2) for i in range(6)))
    assert sum(len(d) for d in load_data(str(path)).splits.values()) == 6


@pytest.mark.parametrize(
    "content, message",
    [
        ("text,text,label\na,b,1\n", "has two 'text' columns (header fields 1 and 2)"),
        ("text,label\n", "has no examples"),
        ("\n\n", "has no examples"),
        ('text,label\n"a""b,1\n', "cannot parse"),
        ('text,label\na,"1"x\n', "cannot parse"),
        ("text,label\na,1,extra\n", "row 1 has more fields than the header"),
        ("text,label\na\n", "row 1 has no label"),
        ("label,text\n1\n", "row 1 has no text"),
        (
            ",".join(f"c{i}" for i in range(5000)) + "\n1,2\n",
            "found columns: c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, … (5,000 in all)",
        ),
    ],
)
def test_csv_structure_errors(tmp_path, content, message):
    path = tmp_path / "d.csv"
    path.write_text(content)
    assert message in error_of(path)


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"text": 5, "label": 1}', "line 2: 'text' is not a string but a number"),
        ('{"text": ["a"], "label": 1}', "line 2: 'text' is not a string but an array"),
        ('{"label": 1}', "line 2 has no text"),
        ('{"text": "a", "label": {"x": 1}}', "line 2 has a label that is not a string or a number but an object"),
        ('{"text": "a", "label": 1, "split": 0}', "line 2 has split 0; expected train, validation or test"),
        ('{"text": "a", "label": 1, "split": ["train"]}', "line 2 has split a JSON array; expected"),
        ('{"text": "a\\ud800", "label": 1}', "line 2 has a text that is not valid Unicode (at character 1)"),
        ('{"text": "a", "label": "\\udfff"}', "line 2 has a label that is not valid Unicode (at character 0)"),
        ("[" * 100_000, "line 2 is nested too deeply"),
        ('{"text": "a", "label": ' + "7" * 5000 + "}", "line 2 has a number too long to read"),
        ('\ufeff{"text": "a", "label": 1}', "line 2 is not JSON (Unexpected UTF-8 BOM"),
        ('{"text": "a", "label": 1, "split": "' + "s\\n" * 100 + '"}', "line 2 has split 's\\ns\\ns\\n"),
    ],
)
def test_jsonl_value_errors(tmp_path, line, message):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a", "label": 1, "split": "train"}\n' + line + "\n")
    assert message in error_of(path)


def test_names_that_would_break_the_message_or_the_lookup(tmp_path):
    odd = tmp_path / "two\nlines.csv"
    odd.write_text("a,b\n1,2\n")
    assert error_of(odd) == f"{tmp_path}/two\\nlines.csv has no 'text' column; found columns: a, b"
    assert error_of("x" * 5000 + ".csv").endswith("cannot be read (File name too long)")
    assert error_of("~no-such-user-here/d.csv") == "file or folder ~no-such-user-here/d.csv does not exist"
    assert error_of("d\x00.csv") == "file or folder d\\x00.csv does not exist"
    assert error_of("  ").startswith("no dataset given")
    folder = make_folder(tmp_path / "corpus", per_class=3)
    os.mkdir(os.fsencode(folder) + b"/\xff")  # a class name that is not UTF-8
    assert (
        error_of(folder) == f"class sub-folder {folder}/\\udcff has a name that is not valid Unicode (at character 0)"
    )


def test_a_loop_of_links_cannot_be_read(tmp_path):
    (tmp_path / "loop.csv").symlink_to(tmp_path / "loop.csv")
    assert (
        error_of(tmp_path / "loop.csv") == f"{tmp_path / 'loop.csv'} cannot be read (Too many levels of symbolic links)"
    )


def test_unreadable_file_and_folder(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads everything")
    path = write_csv(tmp_path / "d.csv", rows(("a", "b"), 3))
    path.chmod(0)
    assert error_of(path) == f"{path} cannot be read (Permission denied)"
    folder = make_folder(tmp_path / "corpus", per_class=3)
    folder.chmod(0)
    try:
        assert "cannot be read (Permission denied)" in error_of(folder)
    finally:
        folder.chmod(0o755)


def test_many_small_classes_are_split_in_one_pass():
    # A scan of all labels per class was quadratic: 200,000 classes of three took 40 s; one sort takes 1 s.
    labels = np.random.default_rng(0).permutation(np.repeat(np.arange(200_000), 3))
    names = [f"c{i}" for i in range(200_000)]
    with hard_timeout(15):
        cuts = text_data.stratified_indices(labels, ("validation", "test"), 0, names, "d.csv")
    for split in SPLITS:  # three of each class: one each
        assert np.array_equal(np.sort(labels[cuts[split]]), np.arange(200_000))


# ---------------------------------------------------------------------------------------------
# the papers' datasets, on small in-memory stand-ins with the real sources' columns and splits


def fake_hub(monkeypatch, expected: tuple, raw: datasets.DatasetDict) -> None:
    def fake_load_dataset(path, name=None, **kwargs):
        assert (path, name) == expected
        return raw

    monkeypatch.setattr(hub, "load_dataset", fake_load_dataset)


def test_20newsgroups(monkeypatch):
    def part(n):
        labels = [i % 20 for i in range(n)]
        texts = [f"post {n}-{i}" for i in range(n)]
        names = [NEWSGROUPS[y] for y in labels]
        return datasets.Dataset.from_dict({"text": texts, "label": labels, "label_text": names})

    raw = datasets.DatasetDict({"train": part(60), "test": part(20)})
    fake_hub(monkeypatch, ("SetFit/20_newsgroups", None), raw)
    data = load_data("20newsgroups")
    assert_well_formed(data)
    assert data.label_names == list(NEWSGROUPS) and data.num_labels == 20
    assert named_labels(data, "test") == list(zip(raw["test"]["text"], raw["test"]["label_text"]))
    assert len(data.splits["validation"]) == 20 and len(data.splits["train"]) == 40  # one per class carved
    carved = named_labels(data, "train") + named_labels(data, "validation")
    assert sorted(carved) == sorted(zip(raw["train"]["text"], raw["train"]["label_text"]))


def test_hyperpartisan(monkeypatch):
    n = 30
    train = datasets.Dataset.from_dict(
        {
            "text": [f"<p>article {i}</p>" for i in range(n)],
            "title": [f"title {i}" for i in range(n)],
            "hyperpartisan": [i % 3 == 0 for i in range(n)],
            "url": ["u"] * n,
            "published_at": ["2017"] * n,
        }
    )
    fake_hub(
        monkeypatch,
        ("SemEvalWorkshop/hyperpartisan_news_detection", "byarticle"),
        datasets.DatasetDict({"train": train}),
    )
    data = load_data("hyperpartisan")
    assert_well_formed(data)
    assert data.label_names == ["not-hyperpartisan", "hyperpartisan"]
    assert [len(data.splits[s]) for s in SPLITS] == [24, 3, 3]
    got = sorted(pair for s in SPLITS for pair in named_labels(data, s))
    assert got == sorted((f"<p>article {i}</p>", data.label_names[i % 3 == 0]) for i in range(n))


def test_arxiv_keeps_its_three_splits(monkeypatch):
    names = ["math.AC", "cs.CV", "cs.AI", "cs.SY", "math.GR", "cs.CE", "cs.PL", "cs.IT", "cs.DS", "cs.NE", "math.ST"]
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=names)})
    raw = datasets.DatasetDict(
        {
            s: datasets.Dataset.from_dict(
                {"text": [f"{s} paper {i}" for i in range(11)], "label": list(range(11))}, features=features
            )
            for s in SPLITS
        }
    )
    fake_hub(monkeypatch, ("ccdv/arxiv-classification", "no_ref"), raw)  # the paper's config (Appendix B)
    data = load_data("arxiv")
    assert_well_formed(data)
    assert data.label_names == names
    for split in SPLITS:
        assert texts_of(data, split) == list(raw[split]["text"])
        assert list(data.splits[split]["label"]) == list(range(11))


def glue(columns: dict, names: list[str], n_train=20, n_val=6) -> datasets.DatasetDict:
    """A GLUE-shaped DatasetDict: ClassLabel labels, an idx column, and a test set with labels -1."""
    features = datasets.Features(
        {
            **{c: datasets.Value("string") for c in columns},
            "label": datasets.ClassLabel(names=names),
            "idx": datasets.Value("int32"),
        }
    )

    def part(split, n, hidden=False):
        values = {c: [f"{split} {c} {i}" for i in range(n)] for c in columns}
        labels = [-1] * n if hidden else [i % 2 for i in range(n)]
        return datasets.Dataset.from_dict({**values, "label": labels, "idx": list(range(n))}, features=features)

    return datasets.DatasetDict(
        {"train": part("train", n_train), "validation": part("validation", n_val), "test": part("test", 4, hidden=True)}
    )


@pytest.mark.parametrize(
    "name,columns,names",
    [
        ("sst2", ["sentence"], ["negative", "positive"]),
        ("rte", ["sentence1", "sentence2"], ["entailment", "not_entailment"]),
    ],
)
def test_glue_uses_validation_as_test(monkeypatch, name, columns, names):
    raw = glue(columns, names)
    fake_hub(monkeypatch, ("glue", name), raw)
    data = load_data(name)
    assert_well_formed(data)
    assert data.label_names == names

    def joined(split):
        return ["\n".join(row[c] for c in columns) for row in raw[split]]

    assert texts_of(data, "test") == joined("validation")
    assert list(data.splits["test"]["label"]) == list(raw["validation"]["label"])
    assert [len(data.splits[s]) for s in ("train", "validation")] == [18, 2]
    carved = texts_of(data, "train") + texts_of(data, "validation")
    assert sorted(carved) == sorted(joined("train"))
    assert all(y >= 0 for s in SPLITS for y in data.splits[s]["label"])
    if name == "rte":
        assert "train sentence1 0\ntrain sentence2 0" in carved


def test_hub_unavailable_offline_fails_in_one_line(monkeypatch, tmp_path):
    # Offline mode and the caches are read when datasets / huggingface_hub are imported, so set the
    # module constants as well as the variables; the empty caches keep a user's real cache out of it.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(DataError) as info:  # how long that takes: benchmarks/data_load.py
        load_data("sst2")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("cannot load 'sst2' (glue/sst2) from the Hugging Face hub or its cache: ")
    assert message.endswith("ConnectionError")
