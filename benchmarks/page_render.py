"""Time each app page's render with Streamlit's AppTest, on the runs in the store.

    .venv/bin/python benchmarks/page_render.py            # the store in cache/runs (or $PEFTVIZ_RUNS)

For every page: the first render in this process ("cold": models load, caches fill), then the
median of three renders in new sessions after that warm-up (caches are per process, as in a
running server). Prints a markdown table.
"""

import statistics
import sys
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "pages").glob("*.py"))


def render_seconds(page: str) -> float:
    app = AppTest.from_file(str(ROOT / page), default_timeout=600)
    started = time.perf_counter()
    app.run()
    seconds = time.perf_counter() - started
    if app.exception:
        sys.exit(f"{page} raised: {app.exception[0].message}")
    return seconds


def main() -> None:
    from peftviz.runs import list_runs, store_dir

    runs = list_runs()
    print(f"store: {store_dir()} ({len(runs)} runs)\n")
    print("| page | first render (s) | after warm-up, median of 3 (s) |\n|---|---|---|")
    for page in PAGES:
        cold = render_seconds(page)
        warm = statistics.median(render_seconds(page) for _ in range(3))
        print(f"| {page} | {cold:.2f} | {warm:.2f} |", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
