"""Every page and every Tour step in a real browser (headless Chromium at 1280×720) on the stores a newcomer
ends up with: the store the newcomer's path of issue 32 leaves (`newcomer_store`: the Train page with a
double click, `compare --seeds 2`, export and import, `report`) and the mixed store (`mixed_store`: single
runs beside groups of 2 and 3 seeds, an imported run, two datasets, two models, runs recorded from other loops)
and a store of recorded runs only (`recorded_store`: a Trainer's LoRA beside a loop's own method at two seeds,
no parameters: the pages that rebuild a model have nothing to offer and say so). No page shows an exception
or an error box, each draws at least the charts its store gives it, and the figure audit
(tests/support/figure_audit.py, every check, the CSVs included) finds nothing. The Calibration page is opened in
both of its views: its default "groups of seeds" view selects a single run beside groups of seeds on both
stores, the selection that raised a TypeError before issue 32. One server per store; the browser test's
helpers (tests/browser/test_browser.py) skip without Chromium, except in CI (PEFTVIZ_REQUIRE_BROWSER=1).
Screenshots go to cache/screenshots/<store>/."""

import re

import pytest

from tests.browser.test_browser import ERRORS, SCREENSHOTS, browser, opened, save_screenshots, serving, settle  # noqa: F401  (browser: a fixture)
from tests.support import figure_audit

SIZE = (1280, 720)  # a projector
# store -> page path -> how many charts it draws at least on that store (0: none applies, or a page without)
CHARTS = {
    "newcomer_store": {"": 0, "Train": 0, "Calibration": 4, "Attention": 1, "Kernel": 0, "Tiny_attention_heads": 0},
    "mixed_store": {"": 0, "Train": 0, "Calibration": 4, "Attention": 1, "Kernel": 2, "Tiny_attention_heads": 3},
    "recorded_store": {"": 0, "Train": 0, "Calibration": 4, "Attention": 0, "Kernel": 0, "Tiny_attention_heads": 0},
}
# store -> each Tour step's figures: the newcomer's store has no tiny-attention run for step 5 (head averaging); the
# recorded store's runs have no model for step 6 (under shift) to run
TOUR_FIGURES = {
    "newcomer_store": [1, 1, 1, 1, 0, 1],
    "mixed_store": [1, 1, 1, 1, 1, 1],
    "recorded_store": [0, 0, 0, 0, 0, 0],
}
SINGLE_RUNS = {
    "newcomer_store": 3,
    "mixed_store": 6,
    "recorded_store": 3,
}  # the Calibration page's reliability diagrams, one a run
# the Tour step's script has finished, with its heading, and either its figure laid out or its "no run" note
TOUR_SETTLED = f"""([number]) => document.querySelector('[data-test-script-state]')?.dataset.testScriptState
    === 'notRunning' && document.querySelector('[data-testid="stHeading"] h1')?.textContent.startsWith(number + ' / ')
  && (document.querySelector('{ERRORS}') !== null || document.body.innerText.includes('no run for this step yet')
      || document.querySelectorAll('.js-plotly-plot').length >= 1
         && Array.from(document.querySelectorAll('.js-plotly-plot')).every(plot => plot._fullLayout))"""


@pytest.fixture(scope="module", params=list(CHARTS))
def served(request):
    """(store name, URL): one server per store, for all of this module's tests on it."""
    with serving(request.getfixturevalue(request.param)) as url:
        yield request.param, url


def problems_on(page, store: str, name: str, fold: bool = False) -> list[str]:
    """Screenshots, then the page's exception and error boxes and every audit problem, each a line."""
    save_screenshots(page, SCREENSHOTS / store, name)
    errors = [f"error box: {text[:300]}" for text in page.locator(ERRORS).all_inner_texts()]
    return errors + figure_audit.problems_of(figure_audit.audit(page, csv=True, fold=fold))


def chart_count(page) -> int:
    return page.locator(".js-plotly-plot").count()


@pytest.mark.parametrize("path", list(CHARTS["mixed_store"]))
def test_every_page_opens_without_an_exception_and_passes_the_audit(served, browser, path):  # noqa: F811
    store, url = served
    with opened(browser, f"{url}/{path}", CHARTS[store][path], SIZE) as page:
        problems = problems_on(page, store, path or "Home")
        drawn, text = chart_count(page), page.inner_text("body")
    assert problems == [], "\n".join(problems)
    assert drawn >= CHARTS[store][path]
    if path == "Calibration":  # its first view compares a single run with a group of seeds: issue 32's traceback
        assert "groups of seeds" in text and "one run: seed 0" in text and re.search(r"\b0,1(,2)?\b", text), text


def test_the_calibration_pages_single_runs_view_passes_the_audit(served, browser):  # noqa: F811
    """The groups view (the default on these stores) is audited above; here the other view."""
    store, url = served
    with opened(browser, f"{url}/Calibration", CHARTS[store]["Calibration"], SIZE) as page:
        page.get_by_text("single runs", exact=True).click()
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('[data-testid=stMultiSelect] label'))"
            ".some(label => label.textContent.startsWith('Runs'))",
            timeout=120_000,
        )
        settle(page, SINGLE_RUNS[store])
        problems = problems_on(page, store, "Calibration-single-runs")
    assert problems == [], "\n".join(problems)


def test_every_tour_step_opens_without_an_exception_and_passes_the_audit(served, browser):  # noqa: F811
    from peftviz.app.tour import STEPS

    store, url = served
    problems, figures = [], []
    for number in range(1, len(STEPS) + 1):
        page = browser.new_page(viewport={"width": SIZE[0], "height": SIZE[1]}, accept_downloads=True)
        try:
            page.goto(f"{url}/Tour?step={number}", wait_until="domcontentloaded")
            page.wait_for_function(TOUR_SETTLED, arg=[number], timeout=300_000)
            settle(page)
            figures.append(chart_count(page))
            problems += [f"step {number}: {p}" for p in problems_on(page, store, f"Tour-step-{number}", fold=True)]
        finally:
            page.close()
    assert problems == [], "\n".join(problems)
    assert figures == TOUR_FIGURES[store]
