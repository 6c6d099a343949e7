"""Fixtures of the page tests."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

PAGES = Path(__file__).resolve().parents[2] / "pages"
CONFIDENCE_PAGE = str(PAGES / "7_Confidence.py")


def open_page(name: str, **query) -> AppTest:
    """A page of pages/ run once, with `query` as its URL's query parameters."""
    page = AppTest.from_file(str(PAGES / name), default_timeout=300)
    page.query_params.update(query)
    return page.run()


@pytest.fixture
def on_store(store, monkeypatch) -> Path:
    """The app pointed at the test module's own `store` fixture."""
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    return store


@pytest.fixture(scope="module")
def confidence_page(seeds_store):
    """The Confidence page on the store with two seeds per method, run once per test module and shared by its
    tests: read only (a test that changes a widget takes `own_confidence_page`, so no test sees another's)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PEFTVIZ_RUNS", str(seeds_store))
        yield AppTest.from_file(CONFIDENCE_PAGE, default_timeout=300).run()


@pytest.fixture
def own_confidence_page(seeds_store, monkeypatch):
    """The Confidence page on the same store, run for one test alone: the one a test may change widgets of."""
    monkeypatch.setenv("PEFTVIZ_RUNS", str(seeds_store))
    return AppTest.from_file(CONFIDENCE_PAGE, default_timeout=300).run()
