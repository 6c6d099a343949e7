"""A Streamlit server of the app on a run store, for the browser tests and the benchmarks that drive
one (benchmarks/load.py): started on a free loopback port, waited for, and stopped."""

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
# the closed network here refuses Chromium's background connections; these keep it quiet
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def streamlit_server(store: Path, script: str = "app.py", options: tuple[str, ...] = (), start_s: float = 120):
    """`streamlit run <script>` on `store` (with Streamlit's command-line `options`), until the block
    ends; yields (URL, server process)."""
    port = free_port()
    env = {**os.environ, "PEFTVIZ_RUNS": str(store)}  # peftviz: .venv's install (scripts/setup.sh), no PYTHONPATH
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        script,
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        *options,
    ]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + start_s
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.3)
        else:
            raise RuntimeError("streamlit did not start: " + process.stderr.read1(4000).decode())
        yield url, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:  # open websocket sessions can hold shutdown up
            process.kill()
            process.wait()
