"""The app's home page renders the method registry."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from peftviz import METHODS

APP = Path(__file__).resolve().parent.parent / "app.py"


def test_home_page_lists_every_method():
    app = AppTest.from_file(str(APP)).run(timeout=30)
    assert not app.exception
    table = app.dataframe[0].value
    assert list(table["method"]) == list(METHODS)
    assert table.loc[table["method"] == "prefix-propagation", "options"].item().startswith("prefix_length=8")
