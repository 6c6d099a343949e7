"""The store shared: uploads under peftviz's own names, and two trainings plus the app at once."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz.store.runs import list_runs

pytestmark = pytest.mark.slow  # trains in child processes or on the shipped MiniLM (left out of the fast tier)

ROOT = Path(__file__).resolve().parents[2]
CSV = "text,label\n" + "".join(f"document number {i},{'ab'[i % 2]}\n" for i in range(12))


def test_uploads_land_only_in_the_stores_uploads_under_a_content_name(tmp_path, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PEFTVIZ_RUNS", raising=False)  # the store under the cache: cache/runs
    (tmp_path / "cache").mkdir()
    monkeypatch.chdir(tmp_path / "cache")  # where a relative "../../x.csv" would climb out of tmp_path
    absolute = Path("/tmp") / f"peftviz-upload-{uuid.uuid4().hex}.csv"
    at = AppTest.from_file(str(ROOT / "pages/1_Train.py"), default_timeout=60).run()
    at.radio[0].set_value("upload a file").run()
    for name in ("../../x.csv", str(absolute)):
        at.file_uploader[0].set_value((name, CSV.encode(), "text/csv")).run()
        assert not at.exception and not at.error
    expected = tmp_path / "cache" / "runs" / ".uploads" / f"{hashlib.sha256(CSV.encode()).hexdigest()[:16]}.csv"
    name_file = expected.with_name(expected.name + ".name")  # the name it came under first, its last part only
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert files == [expected, name_file] and expected.read_text() == CSV and name_file.read_text() == "x.csv"
    assert not absolute.exists() and not (tmp_path.parent / "x.csv").exists()


def test_an_upload_goes_with_the_store_and_its_errors_name_the_users_file(tmp_path, monkeypatch):
    """PEFTVIZ_RUNS elsewhere: the upload goes there, not to the project's cache/; a one-class file is
    refused in the words of the file the user chose, not of the name peftviz stored it under."""
    store = tmp_path / "elsewhere" / "runs"
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    monkeypatch.setenv("PEFTVIZ_CACHE", str(tmp_path / "cache"))
    one_class = "text,label\n" + "".join(f"document number {i},a\n" for i in range(12))
    at = AppTest.from_file(str(ROOT / "pages/1_Train.py"), default_timeout=60).run()
    at.radio[0].set_value("upload a file").run()
    at.file_uploader[0].set_value(("my reviews.csv", one_class.encode(), "text/csv")).run()
    at.button[0].click().run()
    stored = store / ".uploads" / f"{hashlib.sha256(one_class.encode()).hexdigest()[:16]}.csv"
    assert stored.read_text() == one_class and not (tmp_path / "cache").exists()
    message = at.error[0].value
    assert "'my reviews.csv'" in message and "class" in message and str(stored) not in message, message


def test_an_upload_is_named_by_the_name_it_came_under_wherever_a_run_names_its_data(tmp_path, monkeypatch):
    from peftviz.data.uploads import dataset_label, store_upload

    monkeypatch.setenv("PEFTVIZ_RUNS", str(tmp_path / "runs"))
    stored = store_upload("C:\\Users\\me\\my reviews.csv", CSV.encode())
    assert dataset_label(str(stored)) == "my reviews.csv (uploaded)"
    assert store_upload("renamed.csv", CSV.encode()) == stored  # the same content: the first name stays
    assert dataset_label(str(stored)) == "my reviews.csv (uploaded)"
    stored.with_name(stored.name + ".name").unlink()  # an upload from before names were kept: its stored name
    assert dataset_label(str(stored)) == str(stored)
    assert dataset_label("bbc-news") == "bbc-news" and dataset_label("/data/x.csv") == "/data/x.csv"


def test_two_trainings_and_the_app_share_a_store(tmp_path, monkeypatch):
    store = tmp_path / "runs"
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    command = [sys.executable, "-m", "peftviz", "train", "--preset", "smoke", "--epochs", "2", "--runs-dir", str(store)]
    trainers = [
        subprocess.Popen([*command, "--seed", str(seed)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for seed in (0, 1)
    ]
    seen, home = set(), AppTest.from_file(str(ROOT / "pages/0_home.py"), default_timeout=60)
    deadline = time.time() + 300
    while any(t.poll() is None for t in trainers) and time.time() < deadline:
        seen |= {(run.status, run.epochs_done) for run in list_runs(store)}
        home.run()
        assert not home.exception, home.exception[0].message
    assert [t.wait(timeout=10) for t in trainers] == [0, 0], [t.stderr.read() for t in trainers]
    assert "corrupt" not in {status for status, _ in seen}
    runs = list_runs(store)
    assert sorted(run.seed for run in runs) == [0, 1]
    assert {(run.status, run.epochs_done) for run in runs} == {("complete", 2)}
    assert not list(store.rglob(".*.tmp"))


# ---------------------------------------------------------------- a live writer, a killed one


def _wait_for(condition, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_run_lists_as_training_while_its_writer_lives_and_incomplete_once_it_is_killed(tmp_path):
    import signal

    from peftviz.store.runs import refreshed

    store = tmp_path / "runs"
    command = [
        sys.executable,
        "-m",
        "peftviz",
        "train",
        "--preset",
        "smoke",
        "--epochs",
        "500",
        "--runs-dir",
        str(store),
    ]
    trainer = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        (run,) = _wait_for(lambda: list_runs(store), 120, "the run folder")
        assert run.status == "training" and (run.path / "writer.lock").is_file()
        listed = subprocess.run(
            [sys.executable, "-m", "peftviz", "runs", "--runs-dir", str(store)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert " training " in listed.stdout, listed.stdout
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(timeout=30)
    finally:
        trainer.kill()
    (after,) = list_runs(store)
    assert after.status == "incomplete"
    assert refreshed(run).status == "incomplete"  # a listing kept from before the kill, as the app keeps one


def test_a_finished_or_failed_run_drops_its_lock(tmp_path):
    from peftviz.run_config import preset_config
    from peftviz.store.runs import load_run
    from peftviz.store.writer import RunWriter, writer_alive

    writer = RunWriter.create(tmp_path, preset_config("smoke"), {"label_names": ["a", "b"]})
    assert writer_alive(writer.path) and load_run(writer.path).status == "training"
    writer.fail("stopped")
    assert not writer_alive(writer.path) and not (writer.path / "writer.lock").exists()
    assert load_run(writer.path).status == "failed"


def test_a_lock_file_from_another_host_counts_while_its_heartbeat_is_fresh(tmp_path):
    import json
    import os

    from peftviz.store.writer import HEARTBEAT_STALE_S, writer_alive

    lock = tmp_path / "writer.lock"
    lock.write_text(json.dumps({"pid": 1, "host": "another-host-" + uuid.uuid4().hex, "started": 0}))
    assert writer_alive(tmp_path)  # touched just now: a writer elsewhere, not judged dead from here
    stale = time.time() - HEARTBEAT_STALE_S - 1
    os.utime(lock, (stale, stale))
    assert not writer_alive(tmp_path)
    lock.write_text("not json")  # same host assumed: the lock decides, and nobody holds it
    assert not writer_alive(tmp_path)
    lock.unlink()
    os.mkfifo(lock)  # never blocks, never counts
    assert not writer_alive(tmp_path)


# ---------------------------------------------------------------- a run keeps the data it trained on


def test_reuploading_a_different_file_of_the_same_name_leaves_an_earlier_runs_documents(tmp_path, monkeypatch):
    from peftviz.analysis.run_labels import data_changed, run_labels, run_row
    from peftviz.data.uploads import store_upload
    from peftviz.run_config import preset_config
    from peftviz.training.inference import run_data
    from peftviz.training.trainer import train

    monkeypatch.setenv("PEFTVIZ_CACHE", str(tmp_path / "cache"))
    first = "text,label\n" + "".join(f"first file document {i},{'ab'[i % 2]}\n" for i in range(40))
    second = first.replace("first file", "second file")
    path = store_upload("data.csv", first.encode())
    run = train(preset_config("smoke", "prefix-tuning", dataset=str(path), epochs=1), tmp_path / "runs")
    assert run_row(run)["dataset"] == "data.csv (uploaded)"  # the name it was uploaded under, not its hash
    on_the_corpus = replace(run, path=run.path.with_name("other"), config=replace(run.config, dataset="bbc-news"))
    assert "dataset data.csv (uploaded)" in run_labels([run, on_the_corpus])[run.name]
    assert run.record["data_sha256"] == hashlib.sha256(first.encode()).hexdigest()
    assert store_upload("data.csv", second.encode()) != path  # the same name, other content: another file
    texts = run_data(run).splits["train"]["text"]
    assert texts and all(text.startswith("first file") for text in texts)
    assert data_changed(run) is None


def test_a_page_is_told_when_a_local_data_file_changed_after_training(tmp_path):
    from peftviz.analysis.run_labels import data_changed
    from peftviz.run_config import preset_config
    from peftviz.training.trainer import train

    data = tmp_path / "data.csv"
    data.write_text("text,label\n" + "".join(f"document {i},{'ab'[i % 2]}\n" for i in range(40)))
    run = train(preset_config("smoke", "prefix-tuning", dataset=str(data), epochs=1), tmp_path / "runs")
    assert data_changed(run) is None
    data.write_text(data.read_text() + "one more document,a\n")
    message = data_changed(run)
    assert message.startswith(f"The data at {data} has changed since run {run.name}") and "\n" not in message
    data.unlink()
    assert "can no longer be read" in data_changed(run)
    del run.record["data_sha256"]  # a run from before the hash was recorded reads as before
    assert data_changed(run) is None
