"""Many readers at once: N sessions on one server, each opening Home, Calibration, Attention and the
Tour while a training job runs.

    .venv/bin/python benchmarks/load.py STORE --sessions 1 3 6 10 [--json results.json]
    .venv/bin/python benchmarks/load.py STORE --sessions 1 3 6 10 --websocket   # the server's time alone
    .venv/bin/python benchmarks/load.py STORE --sessions 1 --no-train   # no training job in the background
    .venv/bin/python benchmarks/load.py STORE --option runner.postScriptGC=false   # a Streamlit option

STORE is copied into a temporary folder first (the training job adds a run to the copy; STORE is never
written). For each N: `streamlit run app.py` headless on a free loopback port on the copy; one reader
opens every page once to warm the server's caches (not timed, as a reading group's presenter would
have); a separate browser context presses "Train" on /Train with its default preset and keeps that
page open (its job panel redraws every second); then N readers open the pages in order, all at the
same time, each page by its URL (a new Streamlit session, as a reader following a link):

- by default, N browser contexts (separate cookies: separate visitors) in Debian's chromium
  (Playwright). A page counts as loaded when Streamlit says its script has finished (the status
  widget is not running, no element is stale) and plotly has laid out its figures (as
  tests/browser/test_browser.py's `settle`); the time is from the navigation to that moment. Errors:
  Streamlit exception boxes and st.error elements, uncaught page errors and console errors, pages
  that never loaded (--timeout). The browsers run on this machine too: on a small one they, not the
  server, are the bottleneck (see the browser CPU column), where a reading group's laptops each bring
  their own.
- --websocket: no browser. Each page is asked for over Streamlit's websocket as the browser asks,
  and timed until the server says its script has finished; errors: exception and st.error elements,
  timeouts. The server's time alone, with N sessions at once.

Memory: the server's peak resident set (VmHWM of /proc/PID/status) and the peak of the server's and
its children's (the training worker's) resident sets summed, sampled every 0.2 s. CPU seconds while
the readers read: the server process, its children, the browser.

Prints a markdown table (p50 and p95 over the sessions, per page and N) and the machine's load average
before each N: other work on the machine slows every number here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import websockets
from playwright.async_api import Error as PlaywrightError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script: the project's tests/ holds the server starter
from tests.support.live_server import CHROMIUM, CHROMIUM_ARGS, streamlit_server

ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
# page -> (its path, how many plotly charts it draws at least, a selector that must be present)
PAGES = {
    "Home": ("", 0, '[data-testid="stDataFrame"]'),
    "Calibration": ("Calibration", 4, ".js-plotly-plot"),
    "Attention": ("Attention", 3, ".js-plotly-plot"),
    "Tour": ("Tour", 1, ".js-plotly-plot"),
}
# the script has finished (nothing stale left from an earlier run) and plotly has laid out the charts,
# or the page shows an error
SETTLED = f"""([atLeast, present]) => {{
  const state = document.querySelector('[data-test-script-state]')?.dataset.testScriptState;
  if (state !== 'notRunning') return false;
  if (document.querySelector('{ERRORS}') !== null) return true;
  if (document.querySelector('[data-stale="true"]') !== null) return false;
  if (document.querySelector(present) === null) return false;
  const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
  return plots.length >= atLeast && plots.every(plot => plot._fullLayout);
}}"""
# console messages that say nothing about the app: the closed network here
IGNORED_CONSOLE = ("net::ERR_", "Failed to load resource")


@dataclass
class Visit:
    page: str
    seconds: float | None  # None: it never settled
    errors: list[str] = field(default_factory=list)


@dataclass
class Result:
    sessions: int
    load_before: str
    visits: list[Visit]
    server_peak_rss_mb: float
    tree_peak_rss_mb: float
    training: str  # what the training job did while the readers read
    wall_s: float
    server_cpu_s: float  # CPU seconds while the readers read: the server process itself
    training_cpu_s: float  # its children (the training job's worker)
    browser_cpu_s: float  # the browser


def cpu_seconds(processes) -> float:
    """User + system CPU seconds of living processes, their waited-for children included."""
    import psutil

    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def process_trees(server_pid: int):
    """(the server and its descendants, every other descendant of this script: the browser, Playwright's driver)."""
    import psutil

    server = psutil.Process(server_pid)
    in_server = [server, *server.children(recursive=True)]
    pids = {p.pid for p in in_server}
    others = [p for p in psutil.Process().children(recursive=True) if p.pid not in pids]
    return in_server, others


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class TreeMemory:
    """The peak of a process's and its descendants' resident sets summed, sampled in a thread."""

    def __init__(self, pid: int, every: float = 0.2):
        import psutil

        self.process, self.every, self.peak = psutil.Process(pid), every, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        import psutil

        while not self._stop.is_set():
            total = 0
            with contextlib.suppress(psutil.Error):
                for process in [self.process, *self.process.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        total += process.memory_info().rss
            self.peak = max(self.peak, total / 2**20)
            self._stop.wait(self.every)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


async def visit(page, url: str, name: str, timeout_s: float, heard: list[str]) -> Visit:
    """Open one page in `page` (a browser tab) and wait until it has settled."""
    path, charts, present = PAGES[name]
    heard.clear()
    started = time.perf_counter()
    try:
        await page.goto(f"{url}/{path}", wait_until="domcontentloaded", timeout=timeout_s * 1000)
        await page.wait_for_function(SETTLED, arg=[charts, present], timeout=timeout_s * 1000, polling=100)
        seconds = time.perf_counter() - started
    except PlaywrightError as err:  # a timeout, a page that would not open
        return Visit(name, None, [f"did not load in {timeout_s:.0f} s: {str(err).splitlines()[0]}"])
    errors = [
        f"on the page: {text.splitlines()[0] if text else '(empty)'}"
        for text in await page.locator(ERRORS).all_inner_texts()
    ]
    return Visit(name, seconds, errors + list(heard))


async def reader(browser, url: str, pages: list[str], timeout_s: float, start: asyncio.Event) -> list[Visit]:
    """One reader: a browser context of its own (its own cookies, so its own visitor), the pages in order."""
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    heard: list[str] = []
    page.on("pageerror", lambda err: heard.append(f"page error: {err}"))
    page.on(
        "console",
        lambda msg: (
            msg.type == "error"
            and not any(s in msg.text for s in IGNORED_CONSOLE)
            and heard.append(f"console: {msg.text[:200]}")
        ),
    )
    await start.wait()
    try:
        return [await visit(page, url, name, timeout_s, heard) for name in pages]
    finally:
        await context.close()


async def protocol_visit(url: str, name: str, timeout_s: float) -> Visit:
    """Open one page as a browser would, over Streamlit's websocket, without drawing anything: a new
    session asks for the page's script run and reads every message until the script has finished.
    The time is the server's alone; errors: exception and st.error elements, and timeouts."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    ask = BackMsg()
    ask.rerun_script.page_name = PAGES[name][0]
    ask.rerun_script.query_string = ""
    errors = []
    started = time.perf_counter()
    try:
        async with (
            asyncio.timeout(timeout_s),
            websockets.connect(
                url.replace("http", "ws", 1) + "/_stcore/stream", subprotocols=["streamlit"], max_size=None
            ) as stream,
        ):
            await stream.send(ask.SerializeToString())
            while True:
                message = ForwardMsg.FromString(await stream.recv())
                kind = message.WhichOneof("type")
                if kind == "delta" and message.delta.WhichOneof("type") == "new_element":
                    element = message.delta.new_element
                    if element.WhichOneof("type") == "exception":
                        errors.append(f"on the page: {element.exception.message.splitlines()[0]}")
                    elif element.WhichOneof("type") == "alert" and element.alert.format == element.alert.ERROR:
                        errors.append(f"on the page: {element.alert.body.splitlines()[0]}")
                if kind == "script_finished" and message.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    return Visit(name, time.perf_counter() - started, errors)
    except (TimeoutError, OSError, websockets.WebSocketException) as err:
        return Visit(name, None, [f"did not load in {timeout_s:.0f} s: {type(err).__name__} {err}"])


async def protocol_reader(url: str, pages: list[str], timeout_s: float, start: asyncio.Event) -> list[Visit]:
    """One reader over the websocket (see `protocol_visit`): the pages in order, a session each."""
    await start.wait()
    return [await protocol_visit(url, name, timeout_s) for name in pages]


async def start_training(browser, url: str, store: Path, timeout_s: float):
    """Press Train on /Train (default preset) in a context of its own; returns it once the job has
    made its run folder in the store, the page left open (its panel redraws every second)."""
    before = {p.name for p in store.iterdir()}
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    await page.goto(f"{url}/Train", wait_until="domcontentloaded")
    await page.wait_for_function(SETTLED, arg=[0, '[data-testid="stButton"]'], timeout=timeout_s * 1000)
    await page.get_by_role("button", name="Train", exact=True).click()
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        new = {p.name for p in store.iterdir() if p.is_dir()} - before
        if new:
            return context, store / min(new)
        if await page.locator(ERRORS).count():
            raise RuntimeError("pressing Train showed an error: " + (await page.locator(ERRORS).first.inner_text()))
        await asyncio.sleep(0.5)
    raise RuntimeError(f"pressing Train made no run folder in {timeout_s:.0f} s")


def training_state(folder: Path | None) -> str:
    if folder is None:
        return "none"
    from peftviz.store.runs import load_run

    run = load_run(folder)  # never raises: a bad folder reads as corrupt
    return f"{folder.name}: {run.status}, {len(run.metrics)} epoch(s) done"


async def measure(
    store: Path, n: int, pages: list[str], train: bool, timeout_s: float, options=(), browsers: bool = True
) -> Result:
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory(prefix="peftviz-load-") as folder:
        copy = Path(folder) / "runs"
        shutil.copytree(store, copy)
        with streamlit_server(copy, options=("--browser.gatherUsageStats", "false", *options)) as (url, server):
            memory = TreeMemory(server.pid)
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                warm = asyncio.Event()
                warm.set()
                # fills the server's caches
                warmup = await (
                    reader(browser, url, pages, timeout_s, warm)
                    if browsers
                    else protocol_reader(url, pages, timeout_s, warm)
                )
                if broken := [v for v in warmup if v.seconds is None or v.errors]:
                    print(f"  warm-up: {[asdict(v) for v in broken]}", file=sys.stderr)
                trainer, training = (await start_training(browser, url, copy, timeout_s)) if train else (None, None)
                load_before = load_average()
                start = asyncio.Event()
                readers = [
                    asyncio.create_task(
                        reader(browser, url, pages, timeout_s, start)
                        if browsers
                        else protocol_reader(url, pages, timeout_s, start)
                    )
                    for _ in range(n)
                ]
                await asyncio.sleep(1.0)  # every context open before anyone navigates
                server_tree, browser_tree = process_trees(server.pid)
                trees = [server_tree[:1], server_tree[1:], browser_tree]
                cpu_before = [cpu_seconds(tree) for tree in trees]
                started = time.perf_counter()
                start.set()
                visits = [v for found in await asyncio.gather(*readers) for v in found]
                wall = time.perf_counter() - started
                server_cpu, training_cpu, browser_cpu = (cpu_seconds(t) - b for t, b in zip(trees, cpu_before))
                state = training_state(training)
                if trainer is not None:
                    await trainer.close()
                await browser.close()
            server_peak = vm_hwm_mb(server.pid)
            tree_peak = memory.stop()
    return Result(n, load_before, visits, server_peak, tree_peak, state, wall, server_cpu, training_cpu, browser_cpu)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile by linear interpolation (numpy's default); NaN when there are none."""
    if not values:
        return float("nan")
    values = sorted(values)
    at = (len(values) - 1) * q
    low = int(at)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (at - low)


def table(results: list[Result], pages: list[str]) -> str:
    columns = [
        *(f"{p} p50 / p95 (s)" for p in pages),
        "server peak RSS (MB)",
        "with children (MB)",
        "errors",
        "server CPU (s)",
        "training CPU (s)",
        "browser CPU (s)",
        "wall (s)",
        "load before",
        "training during",
    ]
    lines = ["| sessions | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for r in results:
        cells = []
        for name in pages:
            times = [v.seconds for v in r.visits if v.page == name and v.seconds is not None]
            cells.append(f"{percentile(times, 0.5):.1f} / {percentile(times, 0.95):.1f}")
        errors = sum(len(v.errors) or (v.seconds is None) for v in r.visits)
        cells += [
            f"{r.server_peak_rss_mb:.0f}",
            f"{r.tree_peak_rss_mb:.0f}",
            str(errors),
            f"{r.server_cpu_s:.1f}",
            f"{r.training_cpu_s:.1f}",
            f"{r.browser_cpu_s:.1f}",
            f"{r.wall_s:.1f}",
            r.load_before,
            r.training,
        ]
        lines.append(f"| {r.sessions} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("store", type=Path, help="a run store (copied first; never written)")
    parser.add_argument(
        "--sessions", type=int, nargs="+", default=[1, 3, 6, 10], help="N readers at once, each N a run"
    )
    parser.add_argument("--pages", nargs="+", default=list(PAGES), choices=list(PAGES), help="the pages, in order")
    parser.add_argument("--no-train", dest="train", action="store_false", help="no training job while they read")
    parser.add_argument("--timeout", type=float, default=300, help="seconds before a page counts as not loaded")
    parser.add_argument(
        "--websocket",
        dest="browsers",
        action="store_false",
        help="readers without a browser: each page's script run asked for and read over Streamlit's "
        "websocket, so the times are the server's alone (the training job still starts in a browser)",
    )
    parser.add_argument("--json", type=Path, help="also write every visit's time and errors here")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Streamlit option for the server, e.g. runner.postScriptGC=false (repeatable)",
    )
    args = parser.parse_args()
    options = tuple(
        part for option in args.option for part in (f"--{option.split('=', 1)[0]}", option.split("=", 1)[1])
    )
    if not args.store.is_dir():
        sys.exit(f"no run store at {args.store}")

    results = []
    for n in args.sessions:
        print(f"{n} session(s): load average before {load_average()}", file=sys.stderr, flush=True)
        result = asyncio.run(measure(args.store, n, args.pages, args.train, args.timeout, options, args.browsers))
        results.append(result)
        for v in result.visits:
            for error in v.errors:
                print(f"  {v.page}: {error}", file=sys.stderr)
        if args.json:
            args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    print(
        f"store: {args.store} · training job: {'yes' if args.train else 'no'} · {os.cpu_count()} CPU cores"
        f"{' · ' + ' '.join(args.option) if args.option else ''}\n"
    )
    print(table(results, args.pages))


if __name__ == "__main__":
    main()
