"""Fixtures of the page tests."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

CONFIDENCE_PAGE = str(Path(__file__).resolve().parents[2] / "pages/7_Confidence.py")


@pytest.fixture(scope="module")
def confidence_page(seeds_store):
    """The Confidence page on the store with two seeds per method, run once per test module (a module may
    change its widgets)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PEFTVIZ_RUNS", str(seeds_store))
        yield AppTest.from_file(CONFIDENCE_PAGE, default_timeout=300).run()
