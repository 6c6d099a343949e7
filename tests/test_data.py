"""peftviz.data: the bbc-news corpus, local files and folders, the hub datasets, and every DataError."""

import json
from collections import Counter

import datasets
import huggingface_hub.constants
import pytest

import peftviz.data as data_module
from peftviz.data import BUILTIN, HUB_DATASETS, NEWSGROUPS, DataError, TextData, describe, load_data

SPLITS = ("train", "validation", "test")
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


# ---------------------------------------------------------------------------------------------
# bbc-news


def test_bbc_sizes_names_and_dedup(bbc):
    assert_well_formed(bbc)
    assert bbc.name == "bbc-news" and bbc.label_names == BBC_NAMES and bbc.num_labels == 5
    assert len(list(data_module.bbc_folder().glob("*/*.txt"))) == 2225
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
    monkeypatch.setattr(data_module, "_read_folder", lambda folder: pytest.fail(f"read {folder} again"))
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
# the papers' datasets, on small in-memory stand-ins with the real sources' columns and splits


def fake_hub(monkeypatch, expected: tuple, raw: datasets.DatasetDict) -> None:
    def fake_load_dataset(path, name=None, **kwargs):
        assert (path, name) == expected
        return raw

    monkeypatch.setattr(data_module, "load_dataset", fake_load_dataset)


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
    fake_hub(monkeypatch, ("ccdv/arxiv-classification", None), raw)
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
