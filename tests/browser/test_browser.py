"""The app in a real browser: Streamlit headless on loopback, Debian's chromium driven by Playwright.

Every page and every Tour step is opened at 1280×720 and 1600×1000, once its script has finished
and plotly has laid out its charts, and passes the figure audit (tests/support/figure_audit.py) as drawn:
data inside the drawn axes, no overlapping titles or legends, nothing clipped, a CSV per chart that
holds its numbers, and at 1280×720 each Tour step's figure above the fold. The audit is shown to
catch each fault it looks for on tests/support/planted_faults.py. Screenshots of every page (first screen,
whole page, each chart) and Tour step go to cache/screenshots/<store>/, for a reviewer to look at.

Other tests read what plotly drew, from the live graph divs (`.data`, `._fullLayout`) and their
SVG: bar heights against the axis scale, and each method's colour on every page that shows it.
The audit of a store of real (quick-preset) runs is slow: `pytest -m long tests/browser/test_browser.py`
(with PEFTVIZ_QUICK_STORE=<a store of `compare --preset quick`>, or it trains one, ~15 minutes).
"""

import contextlib
import os
from pathlib import Path

import pytest

from tests.support import figure_audit
from tests.support.live_server import CHROMIUM, CHROMIUM_ARGS, streamlit_server

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "cache" / "screenshots"
SIZES = ((1280, 720), (1600, 1000))  # a projector, a laptop
# page path -> how many charts it draws at least (0: a page without charts); a new page is one more line
PAGES = {
    "": 0,  # Home: the runs tables
    "Train": 0,
    "Calibration": 10,  # 6 reliability diagrams, smooth, ECE, differences, recalibration
    "Confidence": 2,  # risk–coverage, conformal sets over epochs
    "What_fixes_it": 1,  # the forest plot (ensembles by size need a group of two seeds)
    "Under_shift": 4,  # ECE and accuracy against severity, coverage, attention on the prefix
    "Attention": 3,
    "Kernel": 2,
    "Tiny_attention_heads": 3,
}
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
# the script has finished and plotly has laid out every chart it drew, or the page shows an error
SETTLED = f"""(atLeast) => document.querySelector('[data-test-script-state]')?.dataset.testScriptState === 'notRunning'
  && (document.querySelector('{ERRORS}') !== null || document.querySelectorAll('.js-plotly-plot').length >= atLeast
      && Array.from(document.querySelectorAll('.js-plotly-plot')).every(plot => plot._fullLayout))"""

if not CHROMIUM.exists():
    if os.environ.get("PEFTVIZ_REQUIRE_BROWSER"):
        raise RuntimeError("the browser test needs Debian's chromium: run scripts/setup-tests.sh")
    pytest.skip("Debian's chromium is not installed (scripts/setup-tests.sh installs it)", allow_module_level=True)


@contextlib.contextmanager
def serving(store: Path, script: str = "app.py"):
    """`streamlit run <script>` on `store`, until the block ends; yields its URL."""
    with streamlit_server(store, script, start_s=60) as (url, _):
        yield url


@pytest.fixture(scope="module")
def server(smoke_store):
    with serving(smoke_store) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def settle(page, charts: int = 0, timeout: int = 300_000) -> None:
    """Wait until the script has finished and plotly has drawn at least `charts` charts."""
    page.wait_for_function(SETTLED, arg=charts, timeout=timeout)
    page.wait_for_timeout(700)  # plotly's last redraw, the fonts


@contextlib.contextmanager
def opened(browser, url: str, charts: int = 0, size: tuple[int, int] = (1400, 1000)):
    """The page at `url`, settled (see `settle`), in a window of `size`."""
    page = browser.new_page(viewport={"width": size[0], "height": size[1]}, accept_downloads=True)
    try:
        page.goto(url, wait_until="domcontentloaded")
        settle(page, charts)
        yield page
    finally:
        page.close()


def save_screenshots(page, folder: Path, name: str, charts: bool = True) -> None:
    """The first screen, the whole page (the window made as tall as Streamlit's scrolling main
    area), and each chart, as `<name>-<w>x<h>[-full|-chart<i>].png` in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    width, height = page.viewport_size["width"], page.viewport_size["height"]
    stem = folder / f"{name}-{width}x{height}"
    page.screenshot(path=f"{stem}.png")
    if charts:
        plots = page.locator(".js-plotly-plot")
        for index in range(plots.count()):
            plots.nth(index).screenshot(path=f"{stem}-chart{index + 1}.png")
    tall = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]')?.scrollHeight ?? 0")
    page.set_viewport_size({"width": width, "height": max(height, tall)})
    page.wait_for_timeout(700)
    page.screenshot(path=f"{stem}-full.png")
    page.set_viewport_size({"width": width, "height": height})
    page.wait_for_timeout(300)


def audited(page, folder: Path, name: str, fold: bool = False) -> list[str]:
    """Screenshots, then every audit problem of the page (CSV checked at one size: it does not depend on it)."""
    save_screenshots(page, folder, name)
    assert page.locator(ERRORS).count() == 0, page.locator(ERRORS).first.inner_text()
    found = figure_audit.audit(page, csv=page.viewport_size["width"] == SIZES[-1][0], fold=fold)
    return figure_audit.problems_of(found)


SMOKE_SHOTS = SCREENSHOTS / "smoke"


@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
@pytest.mark.parametrize("path", list(PAGES))
def test_every_page_passes_the_figure_audit(server, browser, path, size):
    with opened(browser, f"{server}/{path}", PAGES[path], size) as page:
        problems = audited(page, SMOKE_SHOTS, path or "Home")
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
def test_every_tour_step_passes_the_audit_and_its_figure_fits_the_window(server, browser, size):
    from peftviz.app.tour import STEPS

    problems = []
    for number in range(1, len(STEPS) + 1):
        with opened(browser, f"{server}/Tour?step={number}", 1, size) as page:
            problems += [f"step {number}: {p}" for p in audited(page, SMOKE_SHOTS, f"Tour-step-{number}", fold=True)]
    assert problems == [], "\n".join(problems)


def test_the_groups_view_passes_the_figure_audit(seeds_store, browser):
    """Two seeds per method: the Calibration, Confidence, What fixes it and Under shift pages open on groups (a mean,
    its band; ensembles by size; a group's seeds pooled in the attention figure)."""
    with serving(seeds_store) as url:
        for size in SIZES:
            for path, charts in (("Calibration", 4), ("Confidence", 2), ("What_fixes_it", 2), ("Under_shift", 4)):
                with opened(browser, f"{url}/{path}", charts, size) as page:
                    problems = audited(page, SCREENSHOTS / "seeds", f"{path}-groups")
                    assert problems == [], "\n".join(problems)


@pytest.mark.long
def test_a_store_of_real_quick_runs_passes_the_figure_audit(browser, tmp_path_factory):
    """Any store you point PEFTVIZ_QUICK_STORE at (e.g. one with seeds); without it, a quick comparison."""
    store = os.environ.get("PEFTVIZ_QUICK_STORE")
    if not store:
        from peftviz.sweep.variants import comparison_configs
        from tests.support.sweeps import trained

        store = tmp_path_factory.mktemp("quick_store")
        trained(comparison_configs("quick"), store)
    problems = []
    with serving(Path(store)) as url:
        for size in SIZES:
            for path, charts in PAGES.items():  # a store with seeds shows groups: fewer charts than the smoke store
                with opened(browser, f"{url}/{path}", min(charts, 1), size) as page:
                    problems += [f"{path or 'Home'}: {p}" for p in audited(page, SCREENSHOTS / "quick", path or "Home")]
            for number in range(1, 6):
                with opened(browser, f"{url}/Tour?step={number}", 1, size) as page:
                    found = audited(page, SCREENSHOTS / "quick", f"Tour-step-{number}", fold=True)
                    problems += [f"Tour step {number}: {p}" for p in found]
    assert problems == [], "\n".join(problems)


# ---------------------------------------------------------------- the audit catches what it looks for


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("no_store"), "tests/support/planted_faults.py") as url:
        yield url


@pytest.mark.parametrize(
    "fault, kind, says",
    [
        ("old-ece", "range", "spans 4.00 for data spanning 0.175 (22.9×)"),  # the ECE axis before the fix: 0 to 4
        ("point-outside", "range", "1 point(s) on yaxis outside its drawn range"),
        ("overlapping-title", "overlap", 'title "A title over the plot" and plot area xy overlap'),
        ("title-on-legend", "overlap", 'axis title "x axis title" and legend overlap'),
        ("clipped-equation", "clipped", "stMarkdownContainer"),
        ("wide-table", "clipped", "stDataFrame"),
        ("empty-csv", "csv", "the CSV has no numbers"),
        ("csv-without-numbers", "csv", "1 plotted number(s) not in its CSV, e.g. 0.3"),
        ("below-fold", "fold", "in a 1280×720 window"),
        ("crowded-grid", "text", "pair(s) of texts overlap"),  # the λ(C) grid at 6 × 12 before the fix
    ],
)
def test_the_audit_catches_a_planted_fault(planted, browser, fault, kind, says):
    with opened(browser, f"{planted}/?fault={fault}", 1, (1280, 720)) as page:
        assert page.locator(ERRORS).count() == 0, page.locator(ERRORS).first.inner_text()
        found = figure_audit.audit(page, fold=True)
    assert any(says in problem for problem in found[kind]), found
    assert [k for k, problems in found.items() if problems] == [kind], found  # caught by its own check only


def test_the_audit_passes_the_planted_pages_charts_without_their_faults(planted, browser):
    with opened(browser, f"{planted}/?fault=none", 3, (1280, 720)) as page:
        assert figure_audit.problems_of(figure_audit.audit(page)) == []


# ---------------------------------------------------------------- what plotly drew, in numbers

# per accuracy bar drawn in a reliability diagram: the bin's accuracy and confidence (from the trace's
# customdata), the bar's height in pixels and the height the y axis gives that accuracy
ACCURACY_BARS = """() => {
  const bars = [];
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    plot._fullData.forEach((trace, index) => {
      if (trace.type !== 'bar' || trace.name !== 'accuracy') return;
      const axis = plot._fullLayout[trace.yaxis.replace('y', 'yaxis')];
      const subplot = plot.querySelector(`.subplot.${trace.xaxis}${trace.yaxis}`);
      const barsBefore = plot._fullData.slice(0, index).filter(
        other => other.type === 'bar' && other.xaxis === trace.xaxis && other.yaxis === trace.yaxis).length;
      const drawn = subplot.querySelectorAll('.barlayer .trace.bars')[barsBefore].querySelectorAll('.point path');
      plot.data[index].customdata.forEach(([confidence, accuracy, count], bin) => {
        if (!count) return;
        bars.push({confidence, accuracy, height: drawn[bin].getBoundingClientRect().height,
                   expected: Math.abs(axis.l2p(accuracy) - axis.l2p(0))});
      });
    });
  }
  return bars;
}"""

# per chart: its title as drawn, and each trace's name, mode and colour (line, and marker when one colour)
TRACE_COLOURS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(plot => ({
  title: plot.querySelector('.gtitle')?.textContent ?? '',  // as drawn: no markup
  traces: plot._fullData.map(trace => ({name: trace.name, mode: trace.mode, type: trace.type,
    line: trace.line?.color, marker: typeof trace.marker?.color === 'string' ? trace.marker.color : null})),
}))"""


def test_an_accuracy_bar_is_as_tall_as_its_accuracy_in_an_under_confident_bin_too(server, browser):
    with opened(browser, f"{server}/Calibration", PAGES["Calibration"]) as page:
        bars = page.evaluate(ACCURACY_BARS)
    assert len(bars) >= 6  # at least a bin per reliability diagram
    for bar in bars:
        assert bar["height"] == pytest.approx(bar["expected"], abs=1.5), bar
    under = [bar for bar in bars if bar["accuracy"] > bar["confidence"]]
    assert under, "no under-confident bin drawn: the smoke store no longer has one"


def line_colours(charts: list[dict], title_start: str) -> dict[str, str]:
    chart = next(chart for chart in charts if chart["title"].startswith(title_start))
    return {trace["name"]: trace["line"] for trace in chart["traces"] if trace["mode"] == "lines+markers"}


def test_a_method_has_one_colour_on_every_page(server, browser):
    """The smoke store has no method on all three pages: kernel runs are on Calibration and Kernel,
    tiny-attention runs on Calibration and Tiny-attention heads. Each pair must agree."""
    with opened(browser, f"{server}/Calibration", PAGES["Calibration"]) as page:
        calibration = line_colours(page.evaluate(TRACE_COLOURS), "ECE per epoch")
    with opened(browser, f"{server}/Kernel", PAGES["Kernel"]) as page:
        kernel = page.evaluate(TRACE_COLOURS)
    with opened(browser, f"{server}/Tiny_attention_heads", PAGES["Tiny_attention_heads"]) as page:
        tiny = page.evaluate(TRACE_COLOURS)
    assert len(set(calibration.values())) == len(calibration) == 6  # six runs, six colours
    trained = [t["marker"] for chart in kernel for t in chart["traces"] if t["name"].startswith("trained at α")]
    assert trained and set(trained) == {calibration["kernel-prefix-propagation"]}
    averaging = next(chart for chart in tiny if chart["title"].startswith("Before vs after head averaging"))
    label = averaging["title"].split(" · ")[-1]
    before = {t["marker"] for t in averaging["traces"] if t["name"] == "before averaging"}
    assert label in calibration, f"{label} is not among the Calibration page's runs {sorted(calibration)}"
    assert before == {calibration[label]}


def test_the_tour_steps_with_the_arrow_keys(server, browser):
    """The presenter's keys: → to the next step, ← back; each step draws its own figure."""
    from peftviz.app.tour import STEPS

    heading = '[data-testid="stHeading"] h1'
    drawn = "(document.querySelector('.js-plotly-plot .gtitle')?.textContent ?? '')"
    with opened(browser, f"{server}/Tour", 1) as page:
        previous = None
        for number in range(1, len(STEPS) + 1):
            page.wait_for_function(  # this step's heading, and its own figure (not the last step's, still shown)
                f"([h, text, previous]) => document.querySelector(h)?.textContent.startsWith(text)"
                f" && document.querySelectorAll('.js-plotly-plot').length === 1 && {drawn} !== previous",
                arg=[heading, f"{number} / {len(STEPS)}", previous],
                timeout=180_000,
            )
            previous = page.evaluate(f"() => {drawn}")
            page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowLeft")  # from the last step back to the one before it
        page.wait_for_function(
            "([h, text]) => document.querySelector(h)?.textContent.startsWith(text)",
            arg=[heading, f"{len(STEPS) - 1} / "],
            timeout=60_000,
        )


@pytest.mark.parametrize("first_visit", ["home", "Kernel"])
def test_a_new_servers_first_visitor_gets_the_apps_pages_at_any_link(smoke_store, browser, first_visit):
    """Streamlit's older folder mode resolved a server's first request by file name: "/home" was
    not found, and a first link to a page gave a menu of file names ("app" …) until "/" was opened."""
    menu = [
        "Home",
        "Tour",
        "Train",
        "Calibration",
        "Confidence",
        "What fixes it",
        "Under shift",
        "Attention",
        "Kernel",
        "Tiny-attention heads",
    ]  # app.py's
    with serving(smoke_store) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/{first_visit}", wait_until="domcontentloaded")
        heading = "peftviz" if first_visit == "home" else first_visit
        page.wait_for_function("h => document.querySelector('h1')?.textContent === h", arg=heading, timeout=120_000)
        page.wait_for_timeout(1000)
        assert "Page not found" not in page.content()
        assert page.locator('[data-testid="stSidebarNav"] a').all_inner_texts() == menu
        page.close()
