"""Every page opens on a store holding corrupt and incomplete run folders, and says so where it lists runs."""

import json
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
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
    for pattern in ("prefix-propagation-*", "tiny-attention-4h-*"):  # killed after epoch 1: no summary, no epoch 2
        killed = next(store.glob(pattern))
        (killed / "summary.json").unlink()
        lines = (killed / "metrics.jsonl").read_text().splitlines()
        (killed / "metrics.jsonl").write_text(lines[0] + "\n")
    (next(store.glob("prefix-tuning-*")) / "params.safetensors").write_bytes(b"garbage")
    return store


@pytest.mark.parametrize("page", PAGES)
def test_page_opens_on_a_store_with_bad_runs(bad_store, monkeypatch, page):
    monkeypatch.setenv("PEFTVIZ_RUNS", str(bad_store))
    at = AppTest.from_file(str(ROOT / page), default_timeout=120).run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    if page in ("app.py", "pages/0_Home.py"):  # the router opens on Home
        status = dict(zip(at.dataframe[0].value["run"], at.dataframe[0].value["status"]))
        assert status["broken-config"].startswith("corrupt")
        assert status["broken-metrics"].startswith("corrupt")
        assert sum(value == "incomplete" for value in status.values()) == 2
