"""What an idle tab costs the server: CPU time of `streamlit run app.py` with one open, settled page.

    .venv/bin/python benchmarks/idle_cpu.py [STORE] [--seconds 30] [--pages Home Train ...]

Starts the app headless on a free loopback port on the run store STORE (default: $PEFTVIZ_RUNS, or
cache/runs), opens one page at a time in Debian's chromium (Playwright), waits for it to settle
(its elements drawn, then 5 s), and measures the server's CPU time (user + system, its children
included) over --seconds with that one tab open and nobody touching it. Prints page -> % of one
core. A page that reran on a timer with no job running (the job panel used to, every second) shows
here; the target is under 5% of a core per page.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
# as tests/browser/test_browser.py: the closed network refuses Chromium's background connections
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGES = {  # page -> (its path, what shows it has drawn)
    "Home": ("", '[data-testid="stDataFrame"]'),
    "Train": ("Train", '[data-testid="stButton"]'),
    "Calibration": ("Calibration", ".js-plotly-plot"),
    "Attention": ("Attention", ".js-plotly-plot"),
    "Kernel": ("Kernel", ".js-plotly-plot"),
    "Tiny-attention heads": ("Tiny_attention_heads", ".js-plotly-plot"),
    "Tour": ("Tour", ".js-plotly-plot"),
}
SETTLE_S = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its children (waited-for and living), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for process in [pid, *children(pid)]:
        try:
            fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
        total += (utime + stime + cutime + cstime) / ticks
    return total


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found + [grandchild for child in found for grandchild in children(child)]


def start_server(store: Path, flags: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app.py",
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
        *flags,
    ]
    env = {**os.environ, "PEFTVIZ_RUNS": str(store)}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                return process, url
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError("streamlit did not start")


def measure(browser, url: str, pid: int, path: str, selector: str, seconds: float) -> float:
    """% of one core the server spends over `seconds` while one tab shows the page, settled."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{url}/{path}", wait_until="domcontentloaded")
        page.wait_for_selector(selector, state="attached", timeout=300_000)
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=300_000)
        time.sleep(SETTLE_S)
        before, started = cpu_seconds(pid), time.perf_counter()
        time.sleep(seconds)
        return 100 * (cpu_seconds(pid) - before) / (time.perf_counter() - started)
    finally:
        page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", nargs="?", type=Path, default=None, help="the run store (default: $PEFTVIZ_RUNS)")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each idle tab is measured")
    parser.add_argument("--pages", nargs="+", default=list(PAGES), choices=list(PAGES), metavar="PAGE")
    parser.add_argument(
        "--flag",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a streamlit option for the server, e.g. --flag server.fileWatcherType=none",
    )
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from peftviz.paths import store_dir

    store = args.store or store_dir()
    flags = [f"--{part}" for flag in args.flag for part in flag.split("=", 1)]
    process, url = start_server(store, flags)
    rows = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for name in args.pages:
                path, selector = PAGES[name]
                rows.append((name, measure(browser, url, process.pid, path, selector, args.seconds)))
                print(f"{name}: {rows[-1][1]:.1f}% of a core", file=sys.stderr, flush=True)
            browser.close()
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
    print(f"store {store}; {args.seconds:.0f} s per page, one idle tab; server CPU, % of one core; flags {flags}\n")
    print(f"{'page':<22} {'% of a core':>11}")
    for name, percent in rows:
        print(f"{name:<22} {percent:>11.1f}")


if __name__ == "__main__":
    main()
