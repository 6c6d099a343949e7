"""Hostile input at the recorder's boundary (issue 45): `open_run`, `Recorder.add_epoch` and `add_test` on
arguments that mix valid values with wrong types, names that make no folder or no single line, numbers
out of range, ragged and non-numeric arrays, float, bool and huge labels, NaN, inf and huge scores.

The oracle (`open_problem`, `epoch_problem`) is written here from the documented rules, apart from
record.py: it says whether an input is valid. A valid input must be recorded as given (the run reads back
with its names, settings and counts; an epoch with its probabilities, labels, values and metrics computed
here); any other must raise one short line of the project's error family (`PeftvizError`) and leave every
byte under the store's folder as it was (a refused `open_run` makes no folder). Any other exception fails.
Each input is tried twice: every known hostile value alone (a table), then generated mixes (Hypothesis).

A 50,000-class epoch is recorded with the metrics an independent computation gives (the size at which the
Brier score used to build a (C, C) identity); its time is measured by benchmarks/record.py, not here.
"""

from __future__ import annotations

import hashlib
import math
import re
import shutil
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from peftviz import record
from peftviz.errors import PeftvizError
from peftviz.record import open_run
from peftviz.store.runs import load_run
from peftviz.training.inference import EPOCH_METRICS
from tests.support.helpers import FUZZ

LONGEST_MESSAGE = 300  # a refusal quotes the bad value briefly: a sentence, not the value


def tree_bytes(root: Path) -> dict[str, str]:
    """Every file and folder under root: relative path -> sha256 of its bytes ("dir" for a folder)."""
    return {
        str(path.relative_to(root)): "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
    }


def assert_refused(call, root: Path) -> str:
    """call() raises one short line of the project's family and changes nothing under root."""
    before = tree_bytes(root)
    with pytest.raises(PeftvizError) as raised:
        call()
    message = str(raised.value)
    assert "\n" not in message and 0 < len(message) <= LONGEST_MESSAGE, message
    assert tree_bytes(root) == before
    return message


# ---------------------------------------------------------------- the oracle: open_run


def not_one_line(text: str) -> bool:
    """Control characters (newline, NUL, ...), line and paragraph separators, lone surrogates."""
    return any(unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp") for char in text)


def text_problem(value, limit: int) -> bool:
    return not isinstance(value, str) or not value.strip() or len(value) > limit or not_one_line(value)


def name_problem(name) -> bool:
    """The run's label, after which its folder is named (lower-cased a-z0-9 runs): one of them at least."""
    return text_problem(name, 80) or not re.search("[a-z0-9]", name.lower())


def label_names_problem(names) -> bool:
    if not isinstance(names, (list, tuple)) or any(text_problem(name, 1000) for name in names):
        return True
    return len(names) < 2 or len(set(names)) != len(names)


OWN = ("method", "method_options", "label", "model", "dataset")
KNOWN_SETTINGS = {  # TrainConfig fields a loop may give, and the values the oracle knows the validity of
    "learning_rate": lambda value: type(value) in (int, float) and math.isfinite(value) and 0 < value <= 10,
    "epochs": lambda value: type(value) is int and 1 <= value <= 1000,
}


def setting_problem(name, value) -> bool:
    if name in KNOWN_SETTINGS:
        return not KNOWN_SETTINGS[name](value)
    if name in OWN or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}", name):
        return True
    if isinstance(value, float):  # numpy's float64 is one
        return not math.isfinite(value)
    if isinstance(value, int):  # bools too
        return abs(value) > 2**64
    return not (value is None or (isinstance(value, str) and len(value) <= 200))


def mapping_problem(value) -> bool:
    return value is not None and not (isinstance(value, dict) and all(isinstance(key, str) for key in value))


def settings_problem(values) -> bool:
    return mapping_problem(values) or any(setting_problem(name, value) for name, value in (values or {}).items())


def options_problem(options, method) -> bool:
    """Options of lora are checked as its own (r in [1, 1024]); an external method takes none."""
    if mapping_problem(options):
        return True
    if method != "lora":
        return bool(options)
    return any(key != "r" or type(value) is not int or not 1 <= value <= 1024 for key, value in (options or {}).items())


def parameters_problem(parameters) -> bool:
    if mapping_problem(parameters):
        return True
    return any(
        not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}", name) or type(count) is not int or not 0 <= count <= 10**15
        for name, count in (parameters or {}).items()
    )


def device_problem(device) -> bool:
    """A device of this machine: cpu, meta, cuda:N below the CUDA devices present (a bare N is torch's cuda:N)."""
    present = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if isinstance(device, torch.device):
        device = str(device)
    if type(device) is int:
        return not 0 <= device < present
    if device in ("cpu", "cpu:0", "meta"):
        return False
    match = isinstance(device, str) and re.fullmatch(r"cuda(?::(\d+))?", device)
    return not match or int(match[1] or 0) >= present


METHODS_VALID = ("lora", "my-adapter", "external:mine", "linear-probe")


def open_problem(arguments: dict) -> bool:
    """Whether open_run must refuse these arguments (the documented rules)."""
    method = arguments["method"]
    return (
        name_problem(arguments["name"])
        or any(text_problem(arguments[key], 4096) for key in ("model", "dataset"))
        or method not in METHODS_VALID
        or label_names_problem(arguments["label_names"])
        or settings_problem(arguments["settings"])
        or options_problem(arguments["options"], method)
        or parameters_problem(arguments["parameters"])
        or device_problem(arguments["device"])
        or not (type(arguments["processes"]) is int and 1 <= arguments["processes"] <= 65536)
        or arguments["by"] not in ("recorder", "transformers-trainer")
        or arguments["runs_dir"] not in ("store", "store as text")
    )


# ---------------------------------------------------------------- open_run: the arguments, good and hostile

TEXTS = [
    "",
    " ",
    "/",
    "..",
    "a\x00b",
    "a\nb",
    "a\rb",
    "tab\there",
    "a\u2028b",
    "a\x85b",
    "lone \ud800",
    "ß",
    "İ",
    "\u212a",
    "中文",
    "my-lora",
    "x" * 80,
    "x" * 81,
    "x" * 10_000,
    5,
    None,
    b"bytes",
    ["x"],
]
POOLS = {  # argument -> values tried in its place; the first is the one it takes otherwise
    "name": ["my-run", *TEXTS],
    "model": ["tiny-bert", *TEXTS, "m" * 4096, "m" * 4097, "org/model", "/a/path/to/model"],
    "dataset": ["bbc-news", *TEXTS, "d" * 4097],
    "method": [
        *METHODS_VALID,
        "",
        5,
        None,
        "a b",
        "a\nb",
        "x" * 70,
        "x" * 81,
        "x" * 10_000,
        "external:a/b",
        "peft:",
        "external:",
    ],
    "label_names": [
        ["sport", "money", "film"],
        ("a", "b"),
        ["a", "a"],
        ["a"],
        [],
        ["a", 1],
        "ab",
        None,
        {"a", "b"},
        np.array(["a", "b"]),
        ["a\nb", "c"],
        ["", "c"],
        [" ", "c"],
        ["a" * 1000, "b"],
        ["a" * 1001, "b"],
        ["a\x00", "b"],
        ["中", "文"],
    ],
    "settings": [
        None,
        {},
        {"momentum": 0.9},
        {"momentum": math.nan},
        {"momentum": math.inf},
        {"note": "x" * 200},
        {"note": "x" * 201},
        {"big": 2**64},
        {"big": -(2**64)},
        {"big": 2**64 + 1},
        {"big": 10**400},
        {"big": 10**5000},
        {"nested": {"a": 1}},
        {"listed": [1]},
        {"f32": np.float32(0.5)},
        {"f64": np.float64(0.5)},
        {"i64": np.int64(3)},
        {"flag": True},
        {"none": None},
        {"": 1},
        {"a/b": 1},
        {"warm up": 1},
        {"x" * 65: 1},
        {1: 2},
        {None: 1},
        {"method": "lora"},
        {"label": "x"},
        {"model": "m"},
        {"learning_rate": 1e-3},
        {"learning_rate": -1},
        {"learning_rate": math.nan},
        {"learning_rate": "x"},
        {"learning_rate": True},
        {"epochs": 3},
        {"epochs": 0},
        {"epochs": 2.0},
        [("momentum", 1)],
        "momentum=1",
    ],
    "options": [None, {}, {"r": 4}, {"r": 0}, {"r": True}, {"rank": 4}, {1: 4}, [("r", 4)], "r=4"],
    "parameters": [
        None,
        {},
        {"total": 10, "trainable": 4},
        {"total": 10**15},
        {"total": 10**15 + 1},
        {"total": -1},
        {"total": 1.5},
        {"total": True},
        {"total": np.int64(3)},
        {"total": 10**400},
        {1: 3},
        {"a b": 3},
        {"": 3},
        5,
        [("total", 1)],
    ],
    "device": [
        "cpu",
        torch.device("cpu"),
        "cpu:0",
        "meta",
        "cuda",
        "cuda:0",
        "cuda:99",
        "cuda:256",
        "nonsense",
        "",
        "gpu",
        0,
        1,
        -1,
        True,
        2**70,
        None,
        ["cpu"],
    ],
    "processes": [1, 8, 65536, 65537, 0, -1, True, 2.0, "2", 10**30, np.int64(2), None],
    "by": ["recorder", "transformers-trainer", "me", 1, None],
    "runs_dir": ["store", "store as text", "a file", "under a file", "", "nul\x00path", 5],
}
OPEN_CASES = [(argument, index) for argument, pool in POOLS.items() for index in range(len(pool))]


def resolved_runs_dir(value, root: Path):
    """The pool's names for runs_dir as paths: the store, a regular file, a folder under that file."""
    named = {
        "store": root / "store",
        "store as text": str(root / "store"),
        "a file": root / "decoy",
        "under a file": root / "decoy" / "store",
    }
    return named.get(value, value) if isinstance(value, str) else value


def open_arguments(**overrides) -> dict:
    arguments = {argument: pool[0] for argument, pool in POOLS.items()}
    arguments["method"] = "lora"
    return {**arguments, **overrides}


def check_open(root: Path, arguments: dict) -> str:
    """open_run on arguments: refused with one line and nothing written, or the run as given; the outcome."""
    store = root / "store"
    call = {**arguments, "runs_dir": resolved_runs_dir(arguments["runs_dir"], root)}
    name = call.pop("name")
    if open_problem(arguments):
        assert_refused(lambda: open_run(name, **call), root)
        return "refused"
    before = set(store.iterdir())
    recorder = open_run(name, **call)
    try:
        (folder,) = set(store.iterdir()) - before
        assert_opened_as_given(folder, arguments)
    finally:
        recorder.abandon()
        shutil.rmtree(folder)
    return "opened"


def assert_opened_as_given(folder: Path, arguments: dict) -> None:
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]*-\d{8}-\d{6}-[0-9a-f]{6}", folder.name), folder.name
    run = load_run(folder)
    assert run.status == "training", run.error
    config, kept = run.config, run.record
    assert (config.label, config.model, config.dataset) == (arguments["name"], arguments["model"], arguments["dataset"])
    assert kept["label_names"] == list(arguments["label_names"])
    extra = {k: v for k, v in (arguments["settings"] or {}).items() if k not in KNOWN_SETTINGS}
    assert kept["recorded"]["settings"] == extra and kept["recorded"]["by"] == arguments["by"]
    for name, value in (arguments["settings"] or {}).items():
        assert name in extra or getattr(config, name) == value
    assert kept["parameters"] == (arguments["parameters"] or {})
    assert kept["environment"]["processes"] == arguments["processes"]


@pytest.fixture
def root(tmp_path) -> Path:
    (tmp_path / "store").mkdir()
    (tmp_path / "decoy").write_text("not a folder")
    return tmp_path


@pytest.mark.parametrize(("argument", "index"), OPEN_CASES)
def test_each_hostile_argument_of_open_run_is_refused_in_one_line_or_recorded_as_given(root, argument, index):
    check_open(root, open_arguments(**{argument: POOLS[argument][index]}))


generated_texts = st.text(max_size=90) | st.sampled_from(TEXTS)


@st.composite
def open_cases(draw) -> dict:
    """Good arguments with up to three replaced: by a value of their pool or, for names, generated text."""
    arguments = open_arguments()
    for argument in draw(st.sets(st.sampled_from(list(POOLS)), max_size=3)):
        pool = st.sampled_from(POOLS[argument])
        if argument in ("name", "model", "dataset"):
            pool = pool | generated_texts
        elif argument == "label_names":
            pool = pool | st.lists(generated_texts, max_size=4)
        elif argument == "settings":
            keys = st.text(max_size=6).map(lambda key: "x" + key)  # never a TrainConfig field's or open_run's own
            pool = pool | st.dictionaries(keys, st.sampled_from(POOLS["processes"]), max_size=3)
        arguments[argument] = draw(pool)
    return arguments


def test_open_run_on_generated_arguments(root):
    outcomes = Counter()

    @settings(FUZZ, max_examples=150)
    @given(open_cases())
    def check(arguments):
        outcomes[check_open(root, arguments)] += 1

    check()
    assert outcomes["opened"] >= 20 and outcomes["refused"] >= 60, outcomes


def test_label_names_beyond_what_config_json_holds_are_refused(root):
    arguments = open_arguments(label_names=[f"class number {k}" for k in range(100_000)], runs_dir=root / "store")
    name = arguments.pop("name")  # 100,000 names: some 2.5 MB of config.json, where the store reads 1 MB
    message = assert_refused(lambda: open_run(name, **arguments), root)
    assert re.fullmatch(
        r"label_names and settings make config.json \d+ bytes; the store reads at most 1048576", message
    )


# ---------------------------------------------------------------- the oracle: add_epoch and add_test

N, C = 6, 3
LABELS, TEST_LABELS = np.array([0, 1, 2, 0, 1, 2]), np.array([2, 2, 1, 0, 0, 1])
PROBS = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.2, 0.5, 0.3], [0.6, 0.3, 0.1], [0.0, 0.0, 1.0]])
LOGITS = np.log(PROBS + 0.05) * 2
TAKEN = {*EPOCH_METRICS, "n", "epoch"}


def as_numpy(value):
    """What a handed array reads as: a tensor's numbers (16-bit floats through float32), a masked array
    without masked values, anything else numpy reads; None for what has no plain array."""
    try:
        if isinstance(value, torch.Tensor):
            value = value.detach()
            return (value.float() if value.is_floating_point() and value.element_size() < 4 else value).cpu().numpy()
        if np.ma.isMaskedArray(value):
            return None if np.ma.count_masked(value) else np.asarray(value)
        return np.asarray(value)
    except (ValueError, TypeError, NotImplementedError):  # ragged lists, meta tensors
        return None


def labels_problem(labels, expected) -> bool:
    array = as_numpy(labels)
    return array is None or array.dtype.kind not in "iu" or array.shape != expected.shape or (array != expected).any()


def scores_problem(scores, kind: str) -> bool:
    array = as_numpy(scores)
    if array is None or array.dtype.kind not in "fiu" or array.shape != (N, C):
        return True
    array = array.astype(np.float64)
    if not np.isfinite(array).all():
        return True
    return kind == "probs" and not (
        array.min() >= 0 and array.max() <= 1 and np.all(np.abs(array.sum(axis=1) - 1) <= 1e-4)
    )


def split_problem(labels, expected, probs, logits) -> bool:
    if (probs is None) == (logits is None):
        return True
    return labels_problem(labels, expected) or scores_problem(
        probs if logits is None else logits, "probs" if logits is None else "logits"
    )


def value_problem(name, value) -> bool:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}", name) or name in TAKEN:
        return True
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return True
    try:
        return not math.isfinite(float(value))
    except OverflowError:
        return True


def epoch_problem(case: dict) -> bool:
    values, test = case["values"], case["test"]
    if values is not None and (not isinstance(values, dict) or any(value_problem(*item) for item in values.items())):
        return True
    if test["test_labels"] is None:
        return (
            test["test_probs"] is not None
            or test["test_logits"] is not None
            or split_problem(case["labels"], LABELS, case["probs"], case["logits"])
        )
    return split_problem(case["labels"], LABELS, case["probs"], case["logits"]) or split_problem(
        test["test_labels"], TEST_LABELS, test["test_probs"], test["test_logits"]
    )


def softmax(logits: np.ndarray) -> np.ndarray:
    """In float64; a gap beyond float64's range (1e308 - -1e308) is -inf, whose exp is 0."""
    with np.errstate(over="ignore"):
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def expected_probs(probs, logits) -> np.ndarray:
    """The probabilities the handed scores stand for, rounded to the float32 the store keeps, in float64."""
    handed = as_numpy(probs if logits is None else logits).astype(np.float64)
    return (handed if logits is None else softmax(handed)).astype(np.float32).astype(np.float64)


# ---------------------------------------------------------------- add_epoch: the arguments, good and hostile

MASKED = np.ma.masked_array(LOGITS, mask=np.eye(N, C, dtype=bool))
META = torch.zeros(N, C, device="meta")
LABEL_POOL = [
    LABELS,
    LABELS.astype(np.int8),
    LABELS.astype(np.uint8),
    LABELS.astype(np.uint64),
    list(LABELS),
    torch.tensor(LABELS),
    torch.tensor(LABELS, dtype=torch.int32),
    np.ma.masked_array(LABELS),
    LABELS.astype(float),
    LABELS + 0.5,
    LABELS.astype(bool),
    LABELS - 1,
    np.where(LABELS == 2, 3, LABELS),
    np.array([0, 1, 2, 0, 1, 2**64 - 1], dtype=np.uint64),
    np.array([0, 1, 2, 0, 2**63, 2], dtype=np.uint64),
    np.array([0, 1, 2, 0, 1, -(2**63)]),
    LABELS.astype(object),
    [0, 1, 2, 0, 1, 2**70],
    LABELS.astype(str),
    LABELS[:, None],
    LABELS[:0],
    LABELS[:5],
    LABELS[::-1].copy(),
    None,
    3,
    [[0], [1, 2]],
    {"a": 1},
    torch.tensor(LABELS, dtype=torch.float32),
    torch.tensor(LABELS.astype(bool)),
    LABELS.astype(complex),
    np.array(["2020-01-01"] * N, dtype="datetime64[D]"),
]
SCORE_POOL = [  # (argument, scores)
    ("probs", PROBS),
    ("probs", PROBS.astype(np.float32)),
    ("probs", torch.tensor(PROBS)),
    ("probs", np.eye(C, dtype=int)[LABELS]),
    ("probs", np.where(PROBS == 0.0, np.nan, PROBS)),
    ("probs", np.where(PROBS == 0.0, np.inf, PROBS)),
    ("probs", PROBS - 0.05),
    ("probs", PROBS * 1.5),
    ("probs", PROBS * 0.9),
    ("probs", PROBS[:, :2]),
    ("probs", PROBS[:5]),
    ("probs", PROBS[:, :, None]),
    ("probs", PROBS[0]),
    ("probs", PROBS.astype(object)),
    ("probs", PROBS.astype(complex)),
    ("probs", PROBS > 0.5),
    ("probs", PROBS.astype(str)),
    ("probs", [[1, 0, 0], [1, 0]] * 3),
    ("probs", 0.5),
    ("logits", LOGITS),
    ("logits", LOGITS.astype(np.float32)),
    ("logits", torch.tensor(LOGITS, dtype=torch.float16)),
    ("logits", torch.tensor(LOGITS, dtype=torch.bfloat16)),
    ("logits", torch.tensor(LOGITS, requires_grad=True)),
    ("logits", np.full((N, C), 1e308)),
    ("logits", np.tile([1e308, -1e308, 0.0], (N, 1))),
    ("logits", np.tile(np.array([2**62, 0, 0], dtype=np.int64), (N, 1))),
    ("logits", np.tile(np.array([2**64 - 1, 0, 0], dtype=np.uint64), (N, 1))),
    ("logits", np.where(LOGITS < -3, -np.inf, LOGITS)),
    ("logits", np.where(LOGITS < -3, np.nan, LOGITS)),
    ("logits", MASKED),
    ("logits", np.ma.masked_array(LOGITS)),
    ("logits", META),
    ("logits", LOGITS.astype(complex)),
    ("logits", LOGITS > 0),
    ("logits", LOGITS[:, :2]),
]
VALUES_POOL = [
    None,
    {},
    {"train_loss": 0.5},
    {"step": 3},
    {"lr": np.float32(1e-3)},
    {"tokens": np.int64(2**40)},
    {"ece": 0.1},
    {"epoch": 1},
    {"n": 5},
    {"micro_f1": 1.0},
    {"train loss": 1.0},
    {1: 1.0},
    {"a" * 65: 1.0},
    {"a": math.nan},
    {"a": -math.inf},
    {"a": True},
    {"a": np.bool_(True)},
    {"a": "x"},
    {"a": 10**400},
    {"a": None},
    {"a": torch.tensor(1.0)},
    [("a", 1.0)],
    "abc",
]
NO_TEST = {"test_labels": None, "test_probs": None, "test_logits": None}
TEST_POOL = [
    NO_TEST,
    {**NO_TEST, "test_labels": TEST_LABELS, "test_probs": PROBS},
    {**NO_TEST, "test_labels": TEST_LABELS, "test_logits": LOGITS},
    {**NO_TEST, "test_probs": PROBS},
    {**NO_TEST, "test_logits": LOGITS},
    {**NO_TEST, "test_labels": TEST_LABELS},
    {**NO_TEST, "test_labels": TEST_LABELS.astype(float), "test_probs": PROBS},
    {**NO_TEST, "test_labels": TEST_LABELS[::-1].copy(), "test_probs": PROBS},
    {**NO_TEST, "test_labels": TEST_LABELS, "test_probs": PROBS[:, :2]},
    {**NO_TEST, "test_labels": TEST_LABELS, "test_probs": PROBS, "test_logits": LOGITS},
]


def epoch_case(labels=LABELS, scores=("probs", PROBS), values=None, test=NO_TEST) -> dict:
    kind, handed = scores
    return {
        "labels": labels,
        "probs": handed if kind == "probs" else None,
        "logits": handed if kind == "logits" else None,
        "values": values,
        "test": test,
    }


EPOCH_CASES = {
    **{f"labels {index}": epoch_case(labels=labels) for index, labels in enumerate(LABEL_POOL)},
    **{f"{kind} {index}": epoch_case(scores=(kind, scores)) for index, (kind, scores) in enumerate(SCORE_POOL)},
    **{f"values {index}": epoch_case(values=values) for index, values in enumerate(VALUES_POOL)},
    **{f"test {index}": epoch_case(test=test) for index, test in enumerate(TEST_POOL)},
}


@pytest.fixture(scope="module")
def open_recorder(tmp_path_factory):
    """A run with one good epoch (and its test split): every epoch after it must hand the same labels."""
    store = tmp_path_factory.mktemp("recorded")
    recorder = open_run(
        "hostile", method="lora", model="tiny-bert", dataset="bbc-news", label_names=["a", "b", "c"], runs_dir=store
    )
    recorder.add_epoch(LABELS, PROBS, test_labels=TEST_LABELS, test_probs=PROBS)
    yield store, recorder
    recorder.abandon()


def check_epoch(store: Path, recorder, case: dict) -> str:
    """add_epoch on case: refused with one line and nothing written, or recorded as given; the outcome."""
    arguments = {key: case[key] for key in ("probs", "logits", "values")} | case["test"]
    if epoch_problem(case):
        message = assert_refused(lambda: recorder.add_epoch(case["labels"], **arguments), store)
        assert_range_shown(message, case)
        return "refused"
    line = recorder.add_epoch(case["labels"], **arguments)
    assert_recorded_as_given(recorder, line, case)
    return "recorded"


def assert_range_shown(message: str, case: dict) -> None:
    """A refusal for labels out of range names their least and largest as handed, before any cast."""
    labels = as_numpy(case["labels"])
    if labels is None or labels.dtype.kind not in "iu" or labels.ndim != 1 or not len(labels):
        return
    if "labels must be class ids" in message:
        assert f"found {int(labels.min())} to {int(labels.max())}" in message, message


def assert_recorded_as_given(recorder, line: dict, case: dict) -> None:
    probs = expected_probs(case["probs"], case["logits"])
    run = load_run(recorder.path)
    assert run.status == "training" and run.metrics[-1] == line and line["epoch"] == recorder.epochs
    stored, stored_labels = run.predictions(line["epoch"])
    np.testing.assert_array_equal(stored_labels, LABELS)
    np.testing.assert_allclose(stored, probs, rtol=0, atol=1e-6)
    correct = probs.argmax(axis=1) == LABELS
    one_hot = np.eye(C)[LABELS]  # C = 3: the naive definition
    assert line["accuracy"] == pytest.approx(correct.mean(), abs=1e-12)
    assert line["nll"] == pytest.approx(-np.log(np.maximum(probs[np.arange(N), LABELS], 1e-12)).mean(), abs=1e-9)
    assert line["brier"] == pytest.approx(((probs - one_hot) ** 2).sum(axis=1).mean(), abs=1e-9)
    assert {name: line[name] for name in case["values"] or {}} == {
        k: float(v) for k, v in (case["values"] or {}).items()
    }
    assert set(line) == {"epoch", *EPOCH_METRICS, "n", *(case["values"] or {})}


@pytest.mark.parametrize("case", EPOCH_CASES)
def test_each_hostile_argument_of_add_epoch_is_refused_in_one_line_or_recorded_as_given(open_recorder, case):
    check_epoch(*open_recorder, EPOCH_CASES[case])


@st.composite
def epoch_cases(draw) -> dict:
    """A good epoch with up to three of its parts replaced from their pools or generated."""
    generated_labels = hnp.arrays(st.sampled_from([np.int8, np.int64, np.uint64, np.float64, np.bool_]), N) | st.lists(
        st.integers(-1, C), min_size=N, max_size=N
    ).map(np.array)
    parts = {
        "labels": st.sampled_from(LABEL_POOL) | generated_labels,
        "scores": st.sampled_from(SCORE_POOL) | st.tuples(st.sampled_from(["probs", "logits"]), generated_scores()),
        "values": st.sampled_from(VALUES_POOL)
        | st.dictionaries(st.sampled_from(["loss", "ece", "x y", "step"]), st.floats() | st.integers(), max_size=2),
        "test": st.sampled_from(TEST_POOL),
    }
    replaced = {part: draw(parts[part]) for part in draw(st.sets(st.sampled_from(list(parts)), max_size=3))}
    return epoch_case(**replaced)


def generated_scores():
    """(N, C) floats of any size, NaN and inf included: float64 up to 1e308, or float32."""
    wide = hnp.arrays(np.float64, (N, C), elements=st.floats() | st.sampled_from([0.0, 0.25, 0.5, 1.0, 1e308, -1e308]))
    return wide | hnp.arrays(np.float32, (N, C), elements=st.floats(width=32) | st.sampled_from([0.0, 0.25, 0.5, 1.0]))


def test_add_epoch_on_generated_arguments(open_recorder):
    outcomes = Counter()

    @settings(FUZZ, max_examples=150)
    @given(epoch_cases())
    def check(case):
        outcomes[check_epoch(*open_recorder, case)] += 1

    check()
    assert outcomes["recorded"] >= 15 and outcomes["refused"] >= 60, outcomes


ADD_TEST_LABELS = [
    TEST_LABELS,
    TEST_LABELS.astype(np.uint64),
    torch.tensor(TEST_LABELS),
    list(TEST_LABELS),
    TEST_LABELS.astype(float),
    TEST_LABELS[::-1].copy(),
    TEST_LABELS[:3],
    [[2], [2, 1]],
    None,
    "221001",
    np.array([2, 2, 1, 0, 0, 2**64 - 1], dtype=np.uint64),
]
ADD_TEST_CASES = {
    **{f"labels {index}": (labels, ("probs", PROBS)) for index, labels in enumerate(ADD_TEST_LABELS)},
    **{f"{kind} {index}": (TEST_LABELS, (kind, scores)) for index, (kind, scores) in enumerate(SCORE_POOL)},
}


@pytest.mark.parametrize("case", ADD_TEST_CASES)
def test_add_test_refuses_in_one_line_or_records_the_test_split(open_recorder, case):
    store, recorder = open_recorder
    labels, (kind, scores) = ADD_TEST_CASES[case]
    probs, logits = (scores, None) if kind == "probs" else (None, scores)
    if split_problem(labels, TEST_LABELS, probs, logits):
        assert_refused(lambda: recorder.add_test(labels, probs, logits=logits), store)
        return
    recorder.add_test(labels, probs, logits=logits)
    stored, stored_labels = load_run(recorder.path).predictions(f"epoch_{recorder.epochs}_test")
    np.testing.assert_array_equal(stored_labels, TEST_LABELS)
    np.testing.assert_allclose(stored, expected_probs(probs, logits), rtol=0, atol=1e-6)


# ---------------------------------------------------------------- limits of a run


def test_an_epoch_beyond_the_most_a_run_holds_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "MAX_EPOCHS", 2)
    recorder = open_run("long", method="lora", model="m", dataset="d", label_names=["a", "b", "c"], runs_dir=tmp_path)
    for _ in range(2):
        recorder.add_epoch(LABELS, PROBS)
    message = assert_refused(lambda: recorder.add_epoch(LABELS, PROBS), tmp_path)
    assert message == "epoch 3: a run holds at most 2 epochs; open a new run to record more"
    recorder.abandon()


def test_fail_keeps_a_sentence_of_a_long_error(tmp_path):
    recorder = open_run("failing", method="lora", model="m", dataset="d", label_names=["a", "b"], runs_dir=tmp_path)
    recorder.add_epoch([0, 1], [[0.9, 0.1], [0.2, 0.8]])
    run = recorder.fail("\n  x" + "y" * 10**6 + "\nthe traceback")
    assert run.status == "failed" and len(run.summary["error"]) == 1000 and run.summary["error"].startswith("xyy")


# ---------------------------------------------------------------- 50,000 classes


def test_an_epoch_of_50000_classes_records_the_metrics_computed_here(tmp_path):
    n_examples, n_classes = 40, 50_000
    rng = np.random.default_rng(45)
    labels = rng.integers(0, n_classes, n_examples)
    logits = (rng.normal(size=(n_examples, n_classes)) * 3).astype(np.float32)  # (N, C)
    logits[np.arange(n_examples), labels] += rng.choice([0.0, 12.0], n_examples)  # some right with confidence
    names = [f"class {k}" for k in range(n_classes)]
    with open_run("wide", method="lora", model="m", dataset="d", label_names=names, runs_dir=tmp_path) as recorder:
        line = recorder.add_epoch(labels, logits=logits)
    probs = softmax(logits.astype(np.float64)).astype(np.float32).astype(np.float64)  # as stored
    want = naive_metrics(probs, labels)
    assert {name: line[name] for name in want} == pytest.approx(want, abs=1e-12, rel=0)
    assert load_run(recorder.path).status == "complete"


def naive_metrics(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> dict[str, float]:
    """Accuracy, NLL, Brier (one example at a time, against its one-hot row) and the classwise ECE (every
    class's bins summed with np.add.at; right-closed equal-width bins (b/n, (b+1)/n], 0 in the first)."""
    n_examples, n_classes = probs.shape
    brier = np.mean([((probs[i] - (np.arange(n_classes) == labels[i])) ** 2).sum() for i in range(n_examples)])
    bins = np.clip(np.ceil(probs * n_bins).astype(int) - 1, 0, n_bins - 1)  # (N, C)
    classes = np.broadcast_to(np.arange(n_classes), probs.shape)  # (N, C)
    confidence, hits = np.zeros((n_classes, n_bins)), np.zeros((n_classes, n_bins))
    np.add.at(confidence, (classes, bins), probs)
    np.add.at(hits, (labels, bins[np.arange(n_examples), labels]), 1.0)
    return {
        "accuracy": float(np.mean(probs.argmax(axis=1) == labels)),
        "nll": float(-np.log(np.maximum(probs[np.arange(n_examples), labels], 1e-12)).mean()),
        "brier": float(brier),
        "classwise_ece": float(np.mean(np.abs(hits - confidence).sum(axis=1) / n_examples)),
    }
