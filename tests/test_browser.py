"""The app in a real browser: Streamlit headless on loopback, Debian's chromium driven by Playwright.

Every page is opened on a smoke store; the test waits for its charts (or table), checks that no
exception or error element is shown, and saves a screenshot to cache/screenshots/.
"""

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
# page path -> (what to wait for, how many of them at least)
PAGES = {
    "": ('[data-testid="stDataFrame"]', 2),
    "Train": ('[data-testid="stButton"]', 1),
    "Calibration": (".js-plotly-plot", 10),  # 6 reliability diagrams, smooth, ECE, differences, recalibration
    "Attention": (".js-plotly-plot", 2),
    "Kernel": (".js-plotly-plot", 1),
    "Tiny_attention_heads": (".js-plotly-plot", 2),
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


@pytest.fixture(scope="module")
def server(smoke_store):
    port = free_port()
    env = {**os.environ, "PEFTVIZ_RUNS": str(smoke_store)}
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
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.mark.parametrize("path", list(PAGES))
def test_every_page_renders_its_charts_without_errors(server, browser, path):
    selector, at_least = PAGES[path]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    screenshot = SCREENSHOTS / f"{path or 'Home'}.png"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        page.goto(f"{server}/{path}", wait_until="domcontentloaded")
        page.wait_for_function(
            "([s, n]) => document.querySelectorAll(s).length >= n", arg=[selector, at_least], timeout=180_000
        )
        page.wait_for_timeout(500)  # let plotly finish drawing before the screenshot
        page.screenshot(path=str(screenshot), full_page=True)
        assert page.locator(ERRORS).count() == 0, page.locator(ERRORS).first.inner_text()
    except Exception:
        page.screenshot(path=str(screenshot.with_suffix(".failed.png")), full_page=True)
        raise
    finally:
        page.close()
