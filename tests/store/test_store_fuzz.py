"""Fuzzing the run store: a good run folder, damaged one generated way at a time, must read back as a
clear one-line `corrupt` or as a run whose every file reads; never a traceback, a hang, or a read or
write outside the store.

The damage: any field of config.json, a metrics line or summary.json replaced by any JSON value
(NaN, huge numbers, strings, nesting); files truncated, emptied, replaced by random bytes, by a
FIFO, a folder, or a link to /dev/zero or to a file outside; npz members of the wrong shape, type
or header; safetensors headers that claim more than the file holds.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from peftviz.analysis.run_labels import run_row
from peftviz.errors import PeftvizError
from peftviz.run_config import preset_config
from peftviz.store.runs import load_run
from peftviz.store.schema import STATUSES
from peftviz.store.writer import RunWriter
from tests.support.helpers import give_params_a_wrong_shape, hard_timeout

FILES = ("config.json", "metrics.jsonl", "summary.json", "predictions/epoch_1.npz", "params.safetensors")
CORRUPT_PREFIXES = (*FILES, "predictions/", "the run folder")
CASES = 200
LABELS = ["business", "sport", "tech"]


def write_good_run(root: Path) -> Path:
    """A complete two-epoch run written by RunWriter, with made-up predictions (no training needed)."""
    import torch

    config = preset_config("smoke")
    recorded = {"label_names": LABELS, "parameters": {"total": 10, "trainable": 4}, "environment": {"created": "x"}}
    writer = RunWriter.create(root, config, recorded)
    rng = np.random.default_rng(0)
    for epoch in (1, 2):
        probs = rng.dirichlet(np.ones(3), size=12).astype(np.float32)
        labels = rng.integers(0, 3, size=12)
        writer.write_epoch(
            {"epoch": epoch, "micro_f1": 0.3 * epoch, "accuracy": 0.3 * epoch, "ece": 0.1}, probs, labels
        )
        writer.write_params({"head.weight": torch.ones(3, 4)}, epoch)
    writer.write_predictions("test", probs, labels)
    writer.finish({"params_epoch": 2, "test": {"accuracy": 0.5, "ece": 0.1}})
    return writer.path


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return write_good_run(tmp_path_factory.mktemp("template"))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def lying_npz() -> bytes:
    """An npz whose probs header claims 10^12 rows over 48 bytes of data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 3)})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("probs.npy", header.getvalue() + b"\0" * 48)
        archive.writestr("labels.npy", _npy(np.zeros(4, np.int64)))
    return buffer.getvalue()


NPZ_DAMAGE = {
    "zero-bytes": lambda: b"",
    "plain-npy": lambda: _npy(np.zeros((12, 3))),
    "lying-header": lying_npz,
    "wrong-shape": lambda: npz_bytes(probs=np.zeros((12, 5), np.float32), labels=np.zeros(12, np.int64)),
    "strings": lambda: npz_bytes(probs=np.array([["a"] * 3] * 12), labels=np.zeros(12, np.int64)),
    "nan-probs": lambda: npz_bytes(probs=np.full((12, 3), np.nan, np.float32), labels=np.zeros(12, np.int64)),
    "out-of-range-probs": lambda: npz_bytes(  # finite, rows summing to 1, but not probabilities
        probs=np.tile(np.array([1.2, -0.3, 0.1], np.float32), (12, 1)), labels=np.zeros(12, np.int64)
    ),
    "unnormalised-probs": lambda: npz_bytes(probs=np.full((12, 3), 0.5, np.float32), labels=np.zeros(12, np.int64)),
    "bad-labels": lambda: npz_bytes(probs=np.full((12, 3), 1 / 3, np.float32), labels=np.full(12, 7)),
    "no-labels": lambda: npz_bytes(probs=np.full((12, 3), 1 / 3, np.float32)),
}


def _npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def safetensors_bytes(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


PARAMS_DAMAGE = {
    "huge-shape": lambda: safetensors_bytes(
        {"w": {"dtype": "F32", "shape": [10**9, 10**3], "data_offsets": [0, 8]}}, b"\0" * 8
    ),
    "header-beyond-file": lambda: struct.pack("<Q", 10**15) + b"{}",
    "epoch-text": lambda: safetensors_bytes({"__metadata__": {"epoch": "../x"}}, b""),
    "other-epoch": lambda: safetensors_bytes({"__metadata__": {"epoch": "1"}}, b""),
}


def replace_field(folder: Path, file: str, data: st.DataObject) -> None:
    """One field (or the whole value) of a JSON file replaced by a generated JSON value."""
    path = folder / file
    if file == "metrics.jsonl":
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        index = data.draw(st.integers(0, len(lines) - 1))
        key = data.draw(st.sampled_from([*lines[index], "extra"]))
        lines[index][key] = data.draw(json_values)
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return
    value = json.loads(path.read_text())
    key = data.draw(st.sampled_from([None, *value]))
    if key is None:
        value = data.draw(json_values)
    else:
        value[key] = data.draw(json_values)
    path.write_text(json.dumps(value))


def damage(folder: Path, outside: Path, data: st.DataObject) -> str:
    """Damage one file of `folder` in a generated way; returns what was done (for the statistics)."""
    file = data.draw(st.sampled_from(FILES))
    path = folder / file
    how = data.draw(
        st.sampled_from(["field", "truncate", "bytes", "fifo", "folder", "zero-link", "outside-link", "kind"])
    )
    if how == "field" and file.endswith((".json", ".jsonl")):
        replace_field(folder, file, data)
    elif how == "remove":
        path.unlink()
    elif how == "truncate":
        content = path.read_bytes()
        path.write_bytes(content[: data.draw(st.integers(0, max(0, len(content) - 1)))])
    elif how == "bytes":
        path.write_bytes(data.draw(st.binary(max_size=64)))
    elif how in ("fifo", "folder", "zero-link", "outside-link"):
        path.unlink()
        {
            "fifo": lambda: os.mkfifo(path),
            "folder": lambda: path.mkdir(),
            "zero-link": lambda: path.symlink_to("/dev/zero"),
            "outside-link": lambda: path.symlink_to(outside / "secret.json"),
        }[how]()
    elif how == "kind" and file.endswith(".npz"):
        path.write_bytes(NPZ_DAMAGE[data.draw(st.sampled_from(sorted(NPZ_DAMAGE)))]())
    elif how == "kind" and file.endswith(".safetensors"):
        path.write_bytes(PARAMS_DAMAGE[data.draw(st.sampled_from(sorted(PARAMS_DAMAGE)))]())
    else:
        path.write_text("")
    return f"{file}: {how}"


def read_everything(run) -> None:
    """What pages and the CLI read of a listed run: each either works or raises a one-line PeftvizError."""
    run_row(run)
    for which in [*(m["epoch"] for m in run.metrics), *(["test"] if run.status == "complete" else [])]:
        try:
            probs, labels = run.predictions(which)
            assert probs.shape == (len(labels), len(run.label_names))
        except PeftvizError as err:
            assert "\n" not in str(err)
    if run.metrics:
        try:
            run.params()
        except PeftvizError as err:
            assert "\n" not in str(err)


def snapshot(folder: Path) -> dict:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@settings(
    max_examples=CASES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_damaged_run_folder_lists_as_corrupt_with_the_file_named_or_reads_whole(template, tmp_path, data):
    case = tmp_path / f"case-{len(list(tmp_path.iterdir()))}"
    store, outside = case / "store", case / "outside"
    outside.mkdir(parents=True)
    (outside / "secret.json").write_text(json.dumps({"method": "prefix-tuning"}))
    shutil.copytree(template, store / template.name)
    event(damage(store / template.name, outside, data))
    before = snapshot(outside)
    with hard_timeout(20):
        run = load_run(store / template.name)
        assert run.status in STATUSES
        if run.status == "corrupt":
            assert run.error.startswith(CORRUPT_PREFIXES) and "\n" not in run.error, run.error
            event("corrupt")
        else:
            read_everything(run)
            event(f"listed {run.status}")
    assert snapshot(outside) == before  # nothing written outside the store
    shutil.rmtree(case)


def test_the_good_template_reads_whole(template):
    run = load_run(template)
    assert (run.status, run.epochs_done, run.best_epoch, run.params_epoch) == ("complete", 2, 2, 2)
    probs, labels = run.predictions(2)
    assert probs.shape == (12, 3) and labels.shape == (12,)
    assert run.params()["head.weight"].shape == (3, 4)


@pytest.mark.parametrize(
    ("damage_name", "error"),
    [
        ("lying-header", "probs's header says shape (1000000000000, 3) of float32, which the stored bytes do not hold"),
        ("plain-npy", "the file is not an npz archive (File is not a zip file)"),
        ("strings", "probs must be (examples, 3) floats, not (12, 3) <U1"),
    ],
)
def test_npz_damage_is_named(template, tmp_path, damage_name, error):
    folder = shutil.copytree(template, tmp_path / "run")
    (folder / "predictions" / "epoch_1.npz").write_bytes(NPZ_DAMAGE[damage_name]())
    run = load_run(folder)
    assert (run.status, run.error) == ("corrupt", f"predictions/epoch_1.npz: {error}")


@pytest.mark.parametrize(
    ("damage_name", "error"),
    [
        ("nan-probs", r"probs must be probabilities in \[0, 1\]"),
        ("out-of-range-probs", r"probs must be probabilities in \[0, 1\]"),
        ("unnormalised-probs", r"each row of probs must sum to 1; 12 of 12 rows do not \(row 0 sums to 1\.5\)"),
    ],
)
def test_npz_values_are_checked_when_read_and_named(template, tmp_path, damage_name, error):
    folder = shutil.copytree(template, tmp_path / "run")
    (folder / "predictions" / "epoch_1.npz").write_bytes(NPZ_DAMAGE[damage_name]())
    run = load_run(folder)
    assert run.status == "complete"  # values are checked when read, not when listed
    with pytest.raises(PeftvizError, match=rf"^run {run.name}: predictions/epoch_1.npz: {error}"):
        run.predictions(1)
    assert run.predictions(2)[0].shape == (12, 3)  # the other epochs still read


def test_params_of_another_epoch_hide_the_uncommitted_epoch_or_are_corrupt(template, tmp_path):
    """Parameters of epoch 1 beside two metrics lines (best: 2): epoch 2 was killed before its parameters
    arrived, so it does not show; a summary saying "complete" then contradicts the folder."""
    folder = shutil.copytree(template, tmp_path / "run")
    (folder / "params.safetensors").write_bytes(PARAMS_DAMAGE["other-epoch"]())
    run = load_run(folder)
    assert (run.status, run.error) == (
        "corrupt",
        "summary.json: status is complete, but the last epoch's parameters are missing",
    )
    (folder / "summary.json").unlink()
    run = load_run(folder)
    assert (run.status, run.epochs_done, run.params_epoch) == ("incomplete", 1, 1)
    lines = [{"epoch": epoch, "micro_f1": 0.3 * epoch, "accuracy": 0.3 * epoch, "ece": 0.1} for epoch in (1, 2, 3)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (folder / "predictions" / "epoch_3.npz").write_bytes((folder / "predictions" / "epoch_2.npz").read_bytes())
    assert load_run(folder).error == "params.safetensors: metadata epoch is 1, not the best epoch 3"  # not a kill


def test_parameters_of_the_wrong_shape_are_named_when_the_model_is_rebuilt(smoke_store, tmp_path):
    from peftviz.training.inference import load_trained

    source = next(p for p in sorted(smoke_store.iterdir()) if p.name.startswith("prefix-propagation-"))
    folder = shutil.copytree(source, tmp_path / source.name)
    name = give_params_a_wrong_shape(folder)
    run = load_run(folder)
    assert run.status == "complete"  # a shape is wrong only against the model
    with pytest.raises(PeftvizError, match=rf"params.safetensors: {name} has shape \(7, 7\), the model's is "):
        load_trained(run)


def test_a_folder_written_to_while_it_is_read_is_read_again(template, tmp_path, monkeypatch):
    """A writer commits epoch 3 between the reader's reads of metrics.jsonl and params.safetensors: the
    two disagree for a moment, the folder's signature changed meanwhile, and the second read agrees."""
    import torch

    from peftviz.store import schema
    from peftviz.store.runs import read_metrics_lines

    folder = shutil.copytree(template, tmp_path / "run")
    (folder / "summary.json").unlink()  # still training
    read_header, reads = schema.safetensors_header, []

    def writer_commits_an_epoch_first(path, file):
        reads.append(path)
        if reads == [folder / "params.safetensors"]:
            writer = RunWriter(folder, read_metrics_lines(folder))
            probs, labels = load_run(template).predictions(2)
            writer.write_epoch({"epoch": 3, "micro_f1": 0.9, "accuracy": 0.9, "ece": 0.1}, probs, labels)
            writer.write_params({"head.weight": torch.ones(3, 4)}, 3)
        return read_header(path, file)

    monkeypatch.setattr(schema, "safetensors_header", writer_commits_an_epoch_first)
    run = load_run(folder)
    assert (run.status, run.epochs_done, run.params_epoch) == ("training", 3, 3)  # its writer lives (this test)
    assert reads.count(folder / "params.safetensors") == 2  # the first read disagreed with the metrics
