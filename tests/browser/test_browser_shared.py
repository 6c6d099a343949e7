"""A shared server (PEFTVIZ_SHARED=1) in a real browser: two visitors, two browser contexts, each
pressing Train on the Train page. The second visitor's job waits in line while the first trains,
then trains; neither visitor's page ever shows the other's settings; a reload keeps the visitor's
job (the visitor is the browser, by Streamlit's XSRF cookie, not the tab's session).
"""

import re
import time

import pytest

from tests.browser.test_browser import browser, serving, settle  # noqa: F401  (browser: a fixture, used by name)

SEEDS = {"first": 11, "second": 22}  # the settings each visitor types, looked for on the other's page


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    import os

    os.environ["PEFTVIZ_SHARED"] = "1"  # read by the server serving() starts, not by this process's pages
    try:
        with serving(tmp_path_factory.mktemp("shared_store")) as url:
            yield url
    finally:
        del os.environ["PEFTVIZ_SHARED"]


def choose(page, label: str, option: str) -> None:
    """Pick `option` in the selectbox labelled `label`."""
    page.get_by_label(label, exact=True).click()
    page.get_by_role("option", name=option, exact=True).click()
    settle(page)


def type_number(page, label: str, value: int) -> None:
    field = page.get_by_label(label, exact=True)
    field.fill(str(value))
    field.press("Enter")
    settle(page)


def press_train(page, seed: int, epochs: int) -> None:
    choose(page, "Preset", "smoke")
    type_number(page, "First training seed", seed)
    type_number(page, "Epochs", epochs)
    page.get_by_role("button", name="Train", exact=True).click()
    settle(page)


def body(page) -> str:
    return page.inner_text("body")


def wait_for_text(page, pattern: str, seconds: float) -> str:
    deadline = time.time() + seconds
    while time.time() < deadline:
        text = body(page)
        if re.search(pattern, text):
            return text
        page.wait_for_timeout(500)
    raise AssertionError(f"{pattern!r} not on the page after {seconds} s:\n{body(page)[-1500:]}")


def test_a_second_visitors_job_waits_for_the_first_then_runs_and_neither_sees_the_other(shared_server, browser):  # noqa: F811
    first, second = (browser.new_context(viewport={"width": 1400, "height": 1000}).new_page() for _ in range(2))
    for page in (first, second):
        page.goto(f"{shared_server}/Train", wait_until="domcontentloaded")
        settle(page)
        assert "This server is shared" in body(page)
    press_train(first, SEEDS["first"], epochs=30)  # long enough to be training when the second presses
    wait_for_text(first, r"Yours: training", 120)
    press_train(second, SEEDS["second"], epochs=1)
    text = wait_for_text(second, r"Yours: 1st in line", 30)
    assert "1 job(s) training, 1 waiting" in text
    job_id = re.search(r"Your job (\d+)", text)[1]

    second.reload(wait_until="domcontentloaded")  # the queue, and the visitor's place in it, survive
    settle(second)
    text = wait_for_text(second, rf"Your job {job_id}", 30)
    assert re.search(r"Yours: (1st in line|training)", text)

    second_done = wait_for_text(second, rf"Your job {job_id}\*?\*?: 1 run\(s\), done", 600)
    first_text = body(first)
    assert f"seed {SEEDS['second']}" not in first_text and f"seed {SEEDS['first']}" not in second_done
    assert f"seed {SEEDS['second']}" in second_done  # the visitor's own run, by name
    for page in (first, second):
        assert not page.locator('[data-testid="stException"]').count()
