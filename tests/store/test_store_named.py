"""Where peftviz says it keeps things, it names the folder it uses ($PEFTVIZ_RUNS, $PEFTVIZ_CACHE), not the
default `cache/`; a shared server names no server path."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz.cli import main

HOME = str(Path(__file__).resolve().parents[2] / "pages" / "0_home.py")


def home_text() -> str:
    page = AppTest.from_file(HOME, default_timeout=60).run()
    assert not page.exception and not page.error
    return "\n".join(element.value for element in page.markdown)


def test_home_names_the_store_it_loads_from(empty_store):
    text = home_text()
    assert f"It trains, or loads from `{empty_store}`, classifiers" in text
    assert "cache/" not in text


def test_home_on_a_shared_server_names_no_path(empty_store, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    text = home_text()
    assert "It trains, or loads from the store, classifiers" in text
    assert str(empty_store.parent) not in text and "cache/" not in text


def test_report_s_help_names_the_reports_folder_in_use(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PEFTVIZ_CACHE", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("COLUMNS", "1000")  # argparse breaks a long path over lines at its terminal's width
    with pytest.raises(SystemExit) as done:
        main(["report", "--help"])
    assert done.value.code == 0
    assert f"(default: {tmp_path / 'elsewhere' / 'reports'}/report-<time>)" in capsys.readouterr().out
