"""The app's routing leans on one attribute Streamlit does not make public, `PagesManager.uses_pages_directory`
(read and reset by `appkit.leave_folder_navigation`). requirements.txt pins Streamlit to the minor release
these tests and the browser test (`test_a_new_servers_first_visitor_gets_the_apps_pages_at_any_link`) run on;
an upgrade that changes the attribute fails here, not on a reading group's server."""

from pathlib import Path

import streamlit
from packaging.requirements import Requirement
from packaging.version import Version
from streamlit.runtime.pages_manager import PagesManager
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


def streamlit_requirement() -> Requirement:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return next(Requirement(line) for line in lines if line.startswith("streamlit"))


def test_requirements_allow_one_minor_release_and_it_is_the_installed_one():
    allowed = streamlit_requirement().specifier
    installed = Version(streamlit.__version__)
    assert installed in allowed
    assert Version(f"{installed.major}.{installed.minor + 1}.0") not in allowed
    assert Version(f"{installed.major}.{installed.minor - 1}.0") not in allowed


def test_the_attribute_exists_and_app_py_s_navigation_clears_it():
    assert isinstance(vars(PagesManager).get("uses_pages_directory"), bool | None)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()  # starts with pages/ beside app.py
    assert not at.exception
    assert PagesManager.uses_pages_directory is False  # what leave_folder_navigation takes as "routed by app.py"
