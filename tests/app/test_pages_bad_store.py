"""Every page opens on a store holding corrupt and incomplete run folders, and says so where it lists runs."""

import json
import os
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["app.py", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "pages").glob("*.py"))]  # app.py: the router


@pytest.fixture(scope="module")
def bad_store(smoke_store, tmp_path_factory):
    store = tmp_path_factory.mktemp("bad_store") / "runs"
    shutil.copytree(smoke_store, store)
    for folder in store.iterdir():  # analyses cached by other tests are not part of this store
        shutil.rmtree(folder / "analysis", ignore_errors=True)
    (store / "broken-config").mkdir()
    (store / "broken-config" / "config.json").write_text("{not json")
    (store / "broken-metrics").mkdir()
    (store / "broken-metrics" / "config.json").write_text(json.dumps({"method": "prefix-propagation"}))
    (store / "broken-metrics" / "metrics.jsonl").write_text("{half a line")
    for pattern in ("prefix-propagation-*", "tiny-attention-4h-*"):  # killed before the summary
        (next(store.glob(pattern)) / "summary.json").unlink()
    (next(store.glob("prefix-tuning-*")) / "params.safetensors").write_bytes(b"garbage")
    add_hostile_runs(store, next(store.glob("fine-tuning-*")), tmp_path_factory.mktemp("outside"))
    return store


HOSTILE = {  # folder -> the error its listing must show
    "fifo-config": "config.json: the file is a FIFO, not a regular file",
    "zero-config": "config.json: the file is a symbolic link, not a regular file",
    "summary-list": 'summary.json: the file must be an object, not ["complete"]',
    "epoch-path": 'metrics.jsonl: line 1: epoch must be an integer, not "../../x"',
    "empty-npz": "predictions/epoch_1.npz: the file is not an npz archive (File is not a zip file)",
    "linked-folder": "the run folder is a symbolic link; the store holds only real folders",
}


def add_hostile_runs(store: Path, good: Path, outside: Path) -> None:
    """Copies of a good run, each damaged in one of the ways a hostile folder can be."""
    for name in HOSTILE:
        if name != "linked-folder":
            shutil.copytree(good, store / name)
    (store / "fifo-config" / "config.json").unlink()
    os.mkfifo(store / "fifo-config" / "config.json")
    (store / "zero-config" / "config.json").unlink()
    (store / "zero-config" / "config.json").symlink_to("/dev/zero")
    (store / "summary-list" / "summary.json").write_text('["complete"]')
    line = json.loads((store / "epoch-path" / "metrics.jsonl").read_text().splitlines()[0])
    (store / "epoch-path" / "metrics.jsonl").write_text(json.dumps({**line, "epoch": "../../x"}) + "\n")
    (store / "empty-npz" / "predictions" / "epoch_1.npz").write_bytes(b"")
    shutil.copytree(good, outside / "elsewhere")
    (store / "linked-folder").symlink_to(outside / "elsewhere")


@pytest.mark.parametrize("page", PAGES)
def test_page_opens_on_a_store_with_bad_runs(bad_store, monkeypatch, page):
    monkeypatch.setenv("PEFTVIZ_RUNS", str(bad_store))
    at = AppTest.from_file(str(ROOT / page), default_timeout=120).run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    if page in ("app.py", "pages/0_home.py"):  # the router opens on Home
        status = dict(zip(at.dataframe[0].value["run"], at.dataframe[0].value["status"]))
        assert status["broken-config"].startswith("corrupt")
        assert status["broken-metrics"].startswith("corrupt")
        assert sum(value == "incomplete" for value in status.values()) == 2
        for name, error in HOSTILE.items():
            assert status[name] == f"corrupt: {error}"


def test_cli_lists_the_bad_store_and_names_each_problem(bad_store, capsys):
    from peftviz.cli import main

    assert main(["runs", "--runs-dir", str(bad_store)]) == 0
    listing = capsys.readouterr().out
    for name, error in HOSTILE.items():
        row = next(line for line in listing.splitlines() if line.startswith(f"| {name} |"))
        assert f"corrupt: {error}" in row
