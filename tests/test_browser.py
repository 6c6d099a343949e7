"""The app in a real browser: Streamlit headless on loopback, Debian's chromium driven by Playwright.

Every page is opened on a smoke store; the test waits for its charts (or table), checks that no
exception or error element is shown and that no chart title or tick label is cut off at its chart's
edge, and saves a screenshot of the page and one of each chart to cache/screenshots/. Other tests
read what plotly drew, from the live graph divs (`.data`, `._fullLayout`) and their SVG: bar
heights against the axis scale, and each method's colour on every page that shows it.
"""

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = ROOT / "cache" / "screenshots"
# page path -> (what to wait for, how many of them at least); a new page is one more line
PAGES = {
    "": ('[data-testid="stDataFrame"]', 2),
    "Train": ('[data-testid="stButton"]', 1),
    "Calibration": (".js-plotly-plot", 10),  # 6 reliability diagrams, smooth, ECE, differences, recalibration
    "Attention": (".js-plotly-plot", 2),
    "Kernel": (".js-plotly-plot", 1),
    "Tiny_attention_heads": (".js-plotly-plot", 2),
    "Tour": (".js-plotly-plot", 1),  # step 1; test_the_tour_steps_with_the_arrow_keys visits the others
}
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
# the closed network here refuses Chromium's background connections; these keep it quiet
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip

if not CHROMIUM.exists():
    if os.environ.get("PEFTVIZ_REQUIRE_BROWSER"):
        raise RuntimeError("the browser test needs Debian's chromium: run scripts/setup-tests.sh")
    pytest.skip("Debian's chromium is not installed (scripts/setup-tests.sh installs it)", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(store: Path):
    """`streamlit run app.py` on `store`, until the block ends; yields its URL."""
    port = free_port()
    env = {**os.environ, "PEFTVIZ_RUNS": str(store)}
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
               "--server.address", "127.0.0.1", "--server.port", str(port)]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.3)
        else:
            raise RuntimeError("streamlit did not start: " + process.stderr.read1(4000).decode())
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # open websocket sessions can hold shutdown up
            process.kill()
            process.wait()


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


# every chart title and tick label whose box sticks out of its chart's SVG box, as "text (chart title)"
CLIPPED_LABELS = """() => {
  const clipped = [];
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const svg = plot.querySelector('svg.main-svg').getBoundingClientRect();
    const div = plot.getBoundingClientRect();  // the page may show less of the chart than its SVG
    const frame = {left: Math.max(svg.left, div.left), right: Math.min(svg.right, div.right),
                   top: Math.max(svg.top, div.top), bottom: Math.min(svg.bottom, div.bottom)};
    const chart = plot.querySelector('.gtitle')?.textContent ?? '(untitled)';
    for (const label of plot.querySelectorAll('.gtitle, .xtick text, .ytick text')) {
      const box = label.getBoundingClientRect();
      if (box.width === 0 && box.height === 0) continue;  // not drawn
      if (box.left < frame.left - 1 || box.right > frame.right + 1 || box.top < frame.top - 1
          || box.bottom > frame.bottom + 1) clipped.push(`${label.textContent} (${chart})`);
    }
  }
  return clipped;
}"""

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


@contextlib.contextmanager
def opened(browser, server, path: str):
    """The page at `path`, once what PAGES says to wait for is there and plotly has drawn it."""
    selector, at_least = PAGES[path]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{server}/{path}", wait_until="domcontentloaded")
        page.wait_for_function(
            "([s, n]) => document.querySelectorAll(s).length >= n", arg=[selector, at_least], timeout=180_000
        )
        page.wait_for_timeout(500)  # let plotly finish drawing
        yield page
    finally:
        page.close()


@pytest.mark.parametrize("path", list(PAGES))
def test_every_page_renders_its_charts_without_errors(server, browser, path):
    name = path or "Home"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with opened(browser, server, path) as page:
        try:
            page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
            charts = page.locator(".js-plotly-plot")
            for index in range(charts.count()):  # the page scrolls inside Streamlit: one picture per chart
                charts.nth(index).screenshot(path=str(SCREENSHOTS / f"{name}-chart-{index + 1}.png"))
            assert page.locator(ERRORS).count() == 0, page.locator(ERRORS).first.inner_text()
            assert page.evaluate(CLIPPED_LABELS) == []
        except Exception:
            page.screenshot(path=str(SCREENSHOTS / f"{name}.failed.png"), full_page=True)
            raise


def test_an_accuracy_bar_is_as_tall_as_its_accuracy_in_an_under_confident_bin_too(server, browser):
    with opened(browser, server, "Calibration") as page:
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
    with opened(browser, server, "Calibration") as page:
        calibration = line_colours(page.evaluate(TRACE_COLOURS), "ECE per epoch")
    with opened(browser, server, "Kernel") as page:
        kernel = page.evaluate(TRACE_COLOURS)
    with opened(browser, server, "Tiny_attention_heads") as page:
        tiny = page.evaluate(TRACE_COLOURS)
    assert len(set(calibration.values())) == len(calibration) == 6  # six runs, six colours
    trained = [t["marker"] for chart in kernel for t in chart["traces"] if t["name"].startswith("trained at α")]
    assert trained and set(trained) == {calibration["kernel-prefix-propagation"]}
    averaging = next(chart for chart in tiny if chart["title"].startswith("Before vs after head averaging"))
    label = averaging["title"].split(" · ")[-1]
    before = {t["marker"] for t in averaging["traces"] if t["name"] == "before averaging"}
    assert label in calibration, f"{label} is not among the Calibration page's runs {sorted(calibration)}"
    assert before == {calibration[label]}


def test_the_tour_steps_with_the_arrow_keys_and_every_step_draws_unclipped(server, browser):
    """The presenter's keys: → to the next step, ← back; each step's figure drawn whole, and saved."""
    from peftviz.tour import STEPS

    heading = '[data-testid="stHeading"] h1'
    drawn = "(document.querySelector('.js-plotly-plot .gtitle')?.textContent ?? '')"
    with opened(browser, server, "Tour") as page:
        previous = None
        for number in range(1, len(STEPS) + 1):
            page.wait_for_function(  # this step's heading, and its own figure (not the last step's, still shown)
                f"([h, text, previous]) => document.querySelector(h)?.textContent.startsWith(text)"
                f" && document.querySelectorAll('.js-plotly-plot').length === 1 && {drawn} !== previous",
                arg=[heading, f"{number} / {len(STEPS)}", previous], timeout=180_000,
            )  # fmt: skip
            page.wait_for_timeout(500)
            previous = page.evaluate(f"() => {drawn}")
            page.screenshot(path=str(SCREENSHOTS / f"Tour-step-{number}.png"))
            assert page.locator(ERRORS).count() == 0, page.locator(ERRORS).first.inner_text()
            assert page.evaluate(CLIPPED_LABELS) == [], f"step {number}"
            page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowLeft")  # from the last step back to the one before it
        page.wait_for_function(
            "([h, text]) => document.querySelector(h)?.textContent.startsWith(text)",
            arg=[heading, f"{len(STEPS) - 1} / "], timeout=60_000,
        )  # fmt: skip


@pytest.mark.parametrize("first_visit", ["home", "Kernel"])
def test_a_new_servers_first_visitor_gets_the_apps_pages_at_any_link(smoke_store, browser, first_visit):
    """Streamlit's older folder mode resolved a server's first request by file name: "/home" was
    not found, and a first link to a page gave a menu of file names ("app" …) until "/" was opened."""
    menu = ["Home", "Tour", "Train", "Calibration", "Attention", "Kernel", "Tiny-attention heads"]  # app.py's
    with serving(smoke_store) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/{first_visit}", wait_until="domcontentloaded")
        heading = "peftviz" if first_visit == "home" else first_visit
        page.wait_for_function("h => document.querySelector('h1')?.textContent === h", arg=heading, timeout=120_000)
        page.wait_for_timeout(1000)
        assert "Page not found" not in page.content()
        assert page.locator('[data-testid="stSidebarNav"] a').all_inner_texts() == menu
        page.close()
