"""The recorder (`peftviz.record`): a run another training loop hands its per-epoch predictions to.

Each epoch's stored metrics are checked against ECE, accuracy, NLL and Brier computed here in numpy
(the definitions of `peftviz.calibration.metrics`: 10 equal-width right-closed bins of the top-label
confidence; multiclass Brier summed over classes; NLL floored at 1e-12), never by the code under test.
Every bad input is one line and leaves every byte of the store as it was; a bad `open_run` makes no
folder at all.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from peftviz.analysis.run_labels import run_labels
from peftviz.errors import ConfigError
from peftviz.record import RecordError, open_run
from peftviz.run_config import preset_config
from peftviz.store.runs import group_runs, list_runs
from peftviz.store.schema import read_predictions

LABEL_NAMES = ["sport", "money", "film"]
C, N, N_TEST = 3, 40, 24
# correct predictions per epoch: epoch 2 is the best, epoch 3 ties it (the first of ties wins)
CORRECT = (12, 30, 30)
BEST = 2


# ---------------------------------------------------------------- independent computations


def by_hand(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> dict[str, float]:
    """ECE (equal-width bins (b/n, (b+1)/n], 0 in the first), accuracy, NLL and Brier, in plain numpy."""
    probs, labels = np.asarray(probs, dtype=np.float64), np.asarray(labels)
    confidence, predicted = probs.max(axis=1), probs.argmax(axis=1)
    correct = (predicted == labels).astype(np.float64)
    bins = np.clip(np.ceil(confidence * n_bins).astype(int) - 1, 0, n_bins - 1)
    ece = sum(
        abs(correct[bins == b].mean() - confidence[bins == b].mean()) * (bins == b).mean()
        for b in range(n_bins)
        if (bins == b).any()
    )
    onehot = np.eye(probs.shape[1])[labels]
    return {
        "ece": float(ece),
        "accuracy": float(correct.mean()),
        "nll": float(-np.log(np.maximum(probs[np.arange(len(labels)), labels], 1e-12)).mean()),
        "brier": float(((probs - onehot) ** 2).sum(axis=1).mean()),
    }


def softmax64(logits) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def store_bytes(store: Path) -> dict[str, str]:
    """Every file and folder under the store: relative path -> sha256 of its bytes ("dir" for a folder)."""
    return {
        str(path.relative_to(store)): "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(store.rglob("*"))
    }


# ---------------------------------------------------------------- inputs


def probs_with_correct(labels: np.ndarray, n_correct: int, rng) -> np.ndarray:
    """Random probability rows whose argmax is the label for exactly the first `n_correct` rows."""
    probs = rng.dirichlet(np.ones(C), len(labels))
    for row, label in enumerate(labels):
        top = int(probs[row].argmax())
        if row < n_correct and top != label:
            probs[row, [top, label]] = probs[row, [label, top]]
        elif row >= n_correct and top == label:
            other = (label + 1) % C
            probs[row, [label, other]] = probs[row, [other, label]]
    return probs


# how each kind hands its scores: (argument name, to what it hands); the test computes from what it handed
KINDS = {
    "numpy probs": ("probs", lambda p: p),
    "numpy float32 probs": ("probs", lambda p: (p / p.sum(axis=1, keepdims=True)).astype(np.float32)),
    "numpy logits": ("logits", lambda p: np.log(p) + 3.0),
    "torch probs": ("probs", lambda p: torch.tensor(p)),
    "torch logits float32": ("logits", lambda p: torch.tensor(np.log(p), dtype=torch.float32) - 1.5),
    "torch logits float16": ("logits", lambda p: torch.tensor(np.log(p), dtype=torch.float16)),
    "torch logits bfloat16": ("logits", lambda p: torch.tensor(np.log(p), dtype=torch.bfloat16)),
}


def as_probs(argument: str, handed) -> np.ndarray:
    """The probabilities the handed scores stand for, in float64, computed here."""
    values = handed.float().numpy() if isinstance(handed, torch.Tensor) else np.asarray(handed)
    return softmax64(values) if argument == "logits" else values.astype(np.float64)


def open_recorder(store: Path, name: str = "mine", **overrides):
    arguments = dict(method="lora", model="tiny-bert", dataset="bbc-news", label_names=LABEL_NAMES, runs_dir=store)
    return open_run(name, **{**arguments, **overrides})


def only_run(store: Path):
    (run,) = list_runs(store)
    return run


# ---------------------------------------------------------------- a good run


@pytest.mark.parametrize("kind", KINDS)
def test_a_recorded_run_stores_each_epoch_as_computed_by_hand(tmp_path, kind):
    argument, hand = KINDS[kind]
    rng = np.random.default_rng(len(kind))
    labels = rng.integers(0, C, N)
    test_labels = rng.integers(0, C, N_TEST)
    handed_epochs, expected, test_expected = [], [], []
    with open_recorder(tmp_path, options={"r": 4}) as recorder:
        for correct in CORRECT:
            validation = hand(probs_with_correct(labels, correct, rng))
            test = hand(probs_with_correct(test_labels, correct // 2, rng))
            recorder.add_epoch(
                torch.tensor(labels) if "torch" in kind else labels,
                **{argument: validation, f"test_{argument}": test},
                test_labels=test_labels,
                values={"train_loss": 0.5},
            )
            handed_epochs.append((as_probs(argument, validation), as_probs(argument, test)))
            expected.append(by_hand(handed_epochs[-1][0], labels))
            test_expected.append(by_hand(handed_epochs[-1][1], test_labels))
        assert only_run(tmp_path).status == "training"
    run = only_run(tmp_path)
    assert run.status == "complete" and run.epochs_done == 3 and run.config.epochs == 3
    for line, want in zip(run.metrics, expected, strict=True):
        assert {name: line[name] for name in want} == pytest.approx(want, abs=1e-6, rel=0)
        assert line["n"] == N and line["train_loss"] == 0.5
    accuracies = [want["accuracy"] for want in expected]
    best = accuracies.index(max(accuracies)) + 1  # the first of ties
    assert best == BEST == run.best_epoch  # the inputs were made so: epoch 3 ties epoch 2
    assert {name: run.summary["test"][name] for name in test_expected[0]} == pytest.approx(
        test_expected[best - 1], abs=1e-6, rel=0
    )
    probs, stored_labels = read_predictions(run.path / "predictions" / "test.npz", C)
    np.testing.assert_array_equal(stored_labels, test_labels)
    np.testing.assert_allclose(probs, handed_epochs[best - 1][1], atol=1e-6, rtol=0)
    for epoch, (validation, _) in enumerate(handed_epochs, start=1):
        probs, stored_labels = run.predictions(epoch)
        np.testing.assert_array_equal(stored_labels, labels)
        np.testing.assert_allclose(probs, validation, atol=1e-6, rtol=0)


def test_a_run_without_a_test_split_closes_complete_without_test_metrics(tmp_path):
    rng = np.random.default_rng(1)
    labels = rng.integers(0, C, N)
    with open_recorder(tmp_path) as recorder:
        recorder.add_epoch(labels, probs_with_correct(labels, 20, rng))
    run = only_run(tmp_path)
    assert run.status == "complete" and run.epochs_done == 1 and "test" not in run.summary
    assert not (run.path / "predictions" / "test.npz").exists()


def test_add_test_records_the_test_split_of_the_last_epoch(tmp_path):
    rng = np.random.default_rng(2)
    labels, test_labels = rng.integers(0, C, N), rng.integers(0, C, N_TEST)
    test = probs_with_correct(test_labels, 10, rng)
    with open_recorder(tmp_path) as recorder:
        recorder.add_epoch(labels, probs_with_correct(labels, 20, rng))
        recorder.add_test(test_labels, test)
    run = only_run(tmp_path)
    assert run.summary["test"]["accuracy"] == pytest.approx(10 / N_TEST, abs=1e-12)
    assert run.summary["test"]["ece"] == pytest.approx(by_hand(test, test_labels)["ece"], abs=1e-6)


# ---------------------------------------------------------------- open, abandoned, failed


def record_two_epochs(recorder, rng) -> None:
    labels = np.arange(N) % C
    for correct in CORRECT[:2]:
        recorder.add_epoch(labels, probs_with_correct(labels, correct, rng))


class LoopError(Exception):
    pass


def abandon(store: Path) -> None:
    recorder = open_recorder(store)
    record_two_epochs(recorder, np.random.default_rng(3))
    assert only_run(store).status == "training"
    recorder.abandon()


def raise_inside_with(store: Path) -> None:
    with pytest.raises(LoopError), open_recorder(store) as recorder:
        record_two_epochs(recorder, np.random.default_rng(3))
        raise LoopError("the loop broke")


@pytest.mark.parametrize("end", [abandon, raise_inside_with], ids=["abandon", "exception inside with"])
def test_a_run_that_ends_without_close_reads_incomplete_with_its_epochs(tmp_path, end):
    end(tmp_path)
    run = only_run(tmp_path)
    assert run.status == "incomplete" and run.epochs_done == 2 and not run.summary
    assert [line["accuracy"] for line in run.metrics] == pytest.approx([c / N for c in CORRECT[:2]], abs=1e-12)
    assert run.predictions(2)[0].shape == (N, C)


def test_fail_keeps_the_epochs_and_shows_the_error(tmp_path):
    recorder = open_recorder(tmp_path)
    record_two_epochs(recorder, np.random.default_rng(4))
    run = recorder.fail("the loss became NaN\nat step 7")
    assert run.status == "failed" and run.epochs_done == 2 and run.summary["error"] == "the loss became NaN"


# ---------------------------------------------------------------- bad epochs: one line, nothing written


def good(n: int = N, seed: int = 5) -> np.ndarray:
    return probs_with_correct(np.arange(n) % C, n // 2, np.random.default_rng(seed))


LABELS = np.arange(N) % C
TEST_LABELS = np.arange(N_TEST) % C


def with_value(array: np.ndarray, row: int, column: int, value: float) -> np.ndarray:
    array = array.copy()
    array[row, column] = value
    return array


# name -> (the call on a recorder holding one good epoch with a test split, the error, its line's pattern)
BAD_EPOCHS = {
    "probs 1-D": (lambda r: r.add_epoch(LABELS, good()[:, 0]), RecordError, r"probs must be \(examples, 3\)"),
    "probs of 2 classes": (lambda r: r.add_epoch(LABELS, good()[:, :2]), RecordError, r"must be \(examples, 3\)"),
    "logits of 4 classes": (
        lambda r: r.add_epoch(LABELS, logits=np.zeros((N, 4))),
        RecordError,
        r"logits must be \(examples, 3\) for 40 labels",
    ),
    "N mismatch": (lambda r: r.add_epoch(LABELS, good()[:-1]), RecordError, r"for 40 labels .* not \(39, 3\)"),
    "0 examples": (
        lambda r: r.add_epoch(np.zeros(0, dtype=int), np.zeros((0, C))),
        RecordError,
        r"for 0 labels",
    ),
    "NaN in probs": (
        lambda r: r.add_epoch(LABELS, with_value(good(), 3, 0, np.nan)),
        RecordError,
        r"1 are NaN or inf",
    ),
    "inf in probs": (
        lambda r: r.add_epoch(LABELS, with_value(good(), 3, 0, np.inf)),
        RecordError,
        r"1 are NaN or inf",
    ),
    "NaN in logits": (
        lambda r: r.add_epoch(LABELS, logits=with_value(np.zeros((N, C)), 0, 1, np.nan)),
        RecordError,
        r"logits must be finite; 1 are NaN or inf",
    ),
    "inf in torch logits": (
        lambda r: r.add_epoch(LABELS, logits=torch.tensor(with_value(np.zeros((N, C)), 0, 1, -np.inf))),
        RecordError,
        r"logits must be finite; 1 are NaN or inf",
    ),
    "probs below 0": (
        lambda r: r.add_epoch(LABELS, with_value(np.full((N, C), 0.5), 0, 2, -0.0 - 1e-3)),
        RecordError,
        r"probabilities in \[0, 1\]; found values from -0\.001",
    ),
    "probs above 1": (
        lambda r: r.add_epoch(LABELS, np.tile([1.5, -0.25, -0.25], (N, 1))),
        RecordError,
        r"probabilities in \[0, 1\]",
    ),
    "rows not summing to 1": (
        lambda r: r.add_epoch(LABELS, with_value(good(), 7, 0, 0.999)),
        RecordError,
        r"each row of probs must sum to 1; \d+ of 40 rows do not",
    ),
    "labels out of range": (
        lambda r: r.add_epoch(np.where(LABELS == 0, 3, LABELS), good()),
        RecordError,
        r"labels must be class ids 0\.\.2; found 1 to 3",
    ),
    "negative labels": (
        lambda r: r.add_epoch(LABELS - 1, good()),
        RecordError,
        r"labels must be class ids 0\.\.2; found -1 to 1",
    ),
    "float labels": (
        lambda r: r.add_epoch(LABELS.astype(float), good()),
        RecordError,
        r"labels must be a 1-D array of class ids \(integers\), not float64",
    ),
    "labels differ from epoch 1's": (
        lambda r: r.add_epoch(LABELS[[1, 0, *range(2, N)]], good()),  # the same labels, two in another order
        RecordError,
        r"epoch 2, validation: 2 of 40 labels differ from epoch 1's",
    ),
    "fewer labels than epoch 1's": (
        lambda r: r.add_epoch(LABELS[:30], good(30)),
        RecordError,
        r"30 labels, not 40 from epoch 1's",
    ),
    "test labels differ from epoch 1's": (
        lambda r: r.add_epoch(LABELS, good(), test_labels=TEST_LABELS[::-1].copy(), test_probs=good(N_TEST)),
        RecordError,
        r"epoch 2, test: 16 of 24 labels differ",
    ),
    "test probs of 2 classes": (
        lambda r: r.add_epoch(LABELS, good(), test_labels=TEST_LABELS, test_probs=good(N_TEST)[:, :2]),
        RecordError,
        r"epoch 2, test: probs must be \(examples, 3\)",
    ),
    "add_test with NaN": (
        lambda r: r.add_test(TEST_LABELS, with_value(good(N_TEST), 0, 0, np.nan)),
        RecordError,
        r"epoch 1, test: .*NaN",
    ),
    "both probs and logits": (
        lambda r: r.add_epoch(LABELS, good(), logits=np.zeros((N, C))),
        RecordError,
        r"give probs or logits, not both",
    ),
    "neither probs nor logits": (lambda r: r.add_epoch(LABELS), RecordError, r"give probs or logits, not neither"),
    "a value named like a metric": (
        lambda r: r.add_epoch(LABELS, good(), values={"ece": 0.1}),
        RecordError,
        r"values may not be named 'ece'",
    ),
    "a value named epoch": (
        lambda r: r.add_epoch(LABELS, good(), values={"epoch": 9}),
        RecordError,
        r"values may not be named 'epoch'",
    ),
    "a value named with a space": (
        lambda r: r.add_epoch(LABELS, good(), values={"train loss": 0.1}),
        RecordError,
        r"values may not be named 'train loss'",
    ),
    "a NaN value": (
        lambda r: r.add_epoch(LABELS, good(), values={"train_loss": math.nan}),
        RecordError,
        r"values\['train_loss'\] must be a finite number, not nan",
    ),
    "a text value": (
        lambda r: r.add_epoch(LABELS, good(), values={"note": "fine"}),
        RecordError,
        r"values\['note'\] must be a finite number",
    ),
}


@pytest.fixture
def one_epoch(tmp_path):
    """A store holding an open run with one good epoch (and its test split), and another finished run."""
    with open_recorder(tmp_path, name="other") as other:
        other.add_epoch(LABELS, good(seed=9))
    recorder = open_recorder(tmp_path)
    recorder.add_epoch(LABELS, good(), test_labels=TEST_LABELS, test_probs=good(N_TEST))
    yield tmp_path, recorder
    recorder.abandon()


@pytest.mark.parametrize("case", BAD_EPOCHS)
def test_a_bad_epoch_is_one_line_and_leaves_the_store_as_it_was(one_epoch, case):
    store, recorder = one_epoch
    call, error, pattern = BAD_EPOCHS[case]
    before = store_bytes(store)
    with pytest.raises(error, match=pattern) as raised:
        call(recorder)
    assert "\n" not in str(raised.value)
    assert store_bytes(store) == before
    recorder.add_epoch(LABELS, good(seed=6))  # the loop may go on: the refused epoch took no number
    recorder.close()
    run = next(run for run in list_runs(store) if run.label == "mine")
    assert run.status == "complete" and [line["epoch"] for line in run.metrics] == [1, 2]


def test_adding_to_a_closed_run_is_refused_and_writes_nothing(tmp_path):
    recorder = open_recorder(tmp_path)
    recorder.add_epoch(LABELS, good())
    recorder.close()
    before = store_bytes(tmp_path)
    for call in (lambda: recorder.add_epoch(LABELS, good()), lambda: recorder.add_test(LABELS, good())):
        with pytest.raises(RecordError, match=r"run mine-\S+ is closed; open a new run"):
            call()
    assert store_bytes(tmp_path) == before and recorder.closed


# ---------------------------------------------------------------- bad open_run: no folder at all

BAD_OPENS = {
    "one label name": (dict(label_names=["only"]), RecordError, r"label_names must be at least two distinct"),
    "duplicate label names": (dict(label_names=["a", "b", "a"]), RecordError, r"at least two distinct names"),
    "a label name not text": (dict(label_names=["a", 1]), RecordError, r"label_names must be a list of strings"),
    "external name with a slash": (dict(method="external:a/b"), ConfigError, r"^'external:a/b' is not a method name"),
    "a method name with a space": (dict(method="a b"), ConfigError, r"'external:a b' is not a method name"),
    "an empty method": (dict(method=""), ConfigError, r"method must be a name"),
    "options for an unknown method": (
        dict(method="my-adapter", options={"r": 4}),
        ConfigError,
        r"external:my-adapter is not a peftviz method: its options go in settings",
    ),
    "an unknown lora option": (dict(options={"rank": 4}), ConfigError, r"has no option\(s\) rank"),
    "a lora option out of range": (dict(options={"r": 0}), ConfigError, r"r must be in \[1, 1024\]"),
    "a nested setting": (dict(settings={"scheduler": {"kind": "cos"}}), ConfigError, r"settings.scheduler must be a"),
    "a NaN setting": (dict(settings={"momentum": math.nan}), ConfigError, r"settings.momentum must be finite"),
    "a 300-character setting": (dict(settings={"note": "x" * 300}), ConfigError, r"note is 300 characters"),
    "a setting not named by a word": (dict(settings={"warm up": 1}), ConfigError, r"a setting named \"warm up\""),
    "learning_rate out of range": (dict(settings={"learning_rate": -1}), ConfigError, r"learning_rate must be in"),
    "a setting naming the method": (dict(settings={"method": "lora"}), ConfigError, r"settings may not set method"),
    "a negative parameter count": (dict(parameters={"trainable": -1}), RecordError, r"parameters.trainable must be"),
}


@pytest.mark.parametrize("case", BAD_OPENS)
def test_a_bad_open_is_one_line_and_creates_no_folder(tmp_path, case):
    overrides, error, pattern = BAD_OPENS[case]
    with open_recorder(tmp_path, name="other") as other:
        other.add_epoch(LABELS, good())
    before = store_bytes(tmp_path)
    with pytest.raises(error, match=pattern) as raised:
        open_recorder(tmp_path, **overrides)
    assert "\n" not in str(raised.value)
    assert store_bytes(tmp_path) == before
    fresh = tmp_path / "fresh"
    with pytest.raises(error, match=pattern):
        open_recorder(fresh, **overrides)
    assert not fresh.exists() or not any(fresh.iterdir())


# ---------------------------------------------------------------- method and settings


METHODS = {  # method given, options -> the config's method and options
    "lora with options": ("lora", {"r": 4}, "lora", {"r": 4}),
    "a loop's own method": ("my-adapter", {}, "external:my-adapter", {}),
    "external named already": ("external:my-adapter", {}, "external:my-adapter", {}),
}


@pytest.mark.parametrize("case", METHODS)
def test_the_method_resolves_to_peftviz_or_external(tmp_path, case):
    method, options, stored, stored_options = METHODS[case]
    with open_recorder(tmp_path, method=method, options=options) as recorder:
        recorder.add_epoch(LABELS, good())
    run = only_run(tmp_path)
    assert run.config.method == stored and run.config.method_options == stored_options
    assert run.status == "complete" and run.recorded["by"] == "recorder"


def test_settings_peftviz_knows_go_to_the_config_and_the_rest_to_recorded(tmp_path):
    settings = {"learning_rate": 3e-4, "seed": 7, "scheduler": "cosine", "accumulate": 4, "tf32": True, "tag": None}
    with open_recorder(tmp_path, settings=settings) as recorder:
        recorder.add_epoch(LABELS, good())
    run = only_run(tmp_path)
    assert run.config.learning_rate == 3e-4 and run.seed == 7
    assert run.recorded == {
        "by": "recorder",
        "settings": {"scheduler": "cosine", "accumulate": 4, "tf32": True, "tag": None},
        "given": ["epochs", "learning_rate", "seed"],
    }
    # a setting the loop did not give (max_length) names nothing in a picker: only given ones tell runs apart
    other = open_recorder(tmp_path, settings={**settings, "learning_rate": 1e-3})
    other.add_epoch(LABELS, good())
    other.close()
    labels = run_labels(list_runs(tmp_path))
    assert sorted(labels.values()) == ["mine · seed 7 · lr 0.0003", "mine · seed 7 · lr 0.001"]


# ---------------------------------------------------------------- groups


def record(store: Path, seed: int, **settings) -> None:
    with open_recorder(store, name="rec", settings={"seed": seed, **settings}) as recorder:
        recorder.add_epoch(LABELS, good(seed=seed))


def test_recorded_runs_differing_only_in_seed_form_one_group(tmp_path):
    record(tmp_path, 0, scheduler="cosine")
    record(tmp_path, 1, scheduler="cosine")
    record(tmp_path, 2, scheduler="linear")  # another recorded setting: another group
    groups = group_runs(list_runs(tmp_path))
    sizes = sorted(len(group.seeds) for group in groups)
    assert sizes == [1, 2]
    assert next(group for group in groups if len(group.seeds) == 2).seeds == [0, 1]


def test_a_recorded_lora_run_never_groups_with_a_trained_one_of_the_same_settings(tmp_path, one_thread):
    from dataclasses import fields

    from tests.support.sweeps import trained

    config = preset_config("smoke", "lora", label="lora-pair", limit=40, epochs=1, seed=0)
    (trained_run,) = trained([config], tmp_path)
    own = ("method", "method_options", "label", "model", "dataset")
    settings = {f.name: getattr(trained_run.config, f.name) for f in fields(config) if f.name not in own}
    for seed in (0, 1):  # its own seed, and another: neither joins the trained run's group
        with open_recorder(
            tmp_path,
            name="lora-pair",
            options=config.method_options,
            model=config.model,
            dataset=config.dataset,
            settings={**settings, "seed": seed},
        ) as recorder:
            recorder.add_epoch(LABELS, good(seed=seed))
    runs = list_runs(tmp_path)
    recorded = [run for run in runs if run.recorded]
    assert len(runs) == 3 and len(recorded) == 2 and trained_run.has_params
    for run in recorded:  # the same settings, to the last field: only `recorded` tells them apart
        assert run.config.key_settings | {"seed": 0} == trained_run.config.key_settings and not run.has_params
    groups = {tuple(sorted(run.name for run in group.runs)): group.seeds for group in group_runs(runs)}
    assert groups == {(trained_run.name,): [0], tuple(sorted(run.name for run in recorded)): [0, 1]}
