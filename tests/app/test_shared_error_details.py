"""A shared server shows a page's unexpected error by its kind only: the traceback, which names the
server's files, stays in the server's log (issue 32: the Calibration page's traceback showed server paths)."""

from pathlib import Path

import pytest
from streamlit import config
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def error_details():
    before = config.get_option("client.showErrorDetails")
    yield
    config.set_option("client.showErrorDetails", before)


@pytest.mark.parametrize(("shared", "expected"), [("1", "type"), ("", "full")])
def test_a_shared_server_hides_tracebacks_and_a_single_user_one_keeps_them(
    monkeypatch, tmp_path, error_details, shared, expected
):
    config.set_option("client.showErrorDetails", "full")
    monkeypatch.setenv("PEFTVIZ_SHARED", shared)
    monkeypatch.setenv("PEFTVIZ_RUNS", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not at.exception
    assert config.get_option("client.showErrorDetails") == expected
