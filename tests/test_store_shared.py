"""The store shared: uploads under peftviz's own names, and two trainings plus the app at once."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
import uuid
from pathlib import Path

from streamlit.testing.v1 import AppTest

from peftviz.runs import list_runs

ROOT = Path(__file__).resolve().parent.parent
CSV = "text,label\n" + "".join(f"document number {i},{'ab'[i % 2]}\n" for i in range(12))


def test_uploads_land_only_in_cache_uploads_under_a_content_name(tmp_path, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    monkeypatch.chdir(tmp_path / "cache")  # where a relative "../../x.csv" would climb out of tmp_path
    absolute = Path("/tmp") / f"peftviz-upload-{uuid.uuid4().hex}.csv"
    at = AppTest.from_file(str(ROOT / "pages/1_Train.py"), default_timeout=60).run()
    at.radio[0].set_value("upload a file").run()
    for name in ("../../x.csv", str(absolute)):
        at.file_uploader[0].set_value((name, CSV.encode(), "text/csv")).run()
        assert not at.exception and not at.error
    expected = tmp_path / "cache" / "uploads" / f"{hashlib.sha256(CSV.encode()).hexdigest()[:16]}.csv"
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert files == [expected] and expected.read_text() == CSV
    assert not absolute.exists() and not (tmp_path.parent / "x.csv").exists()


def test_two_trainings_and_the_app_share_a_store(tmp_path, monkeypatch):
    store = tmp_path / "runs"
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    command = [sys.executable, "-m", "peftviz", "train", "--preset", "smoke", "--epochs", "2", "--runs-dir", str(store)]
    trainers = [
        subprocess.Popen([*command, "--seed", str(seed)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for seed in (0, 1)
    ]
    seen, home = set(), AppTest.from_file(str(ROOT / "pages/0_Home.py"), default_timeout=60)
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
