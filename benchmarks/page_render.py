"""Time each app page's render with Streamlit's AppTest, on the runs in the store.

    .venv/bin/python benchmarks/page_render.py            # the store in cache/runs (or $PEFTVIZ_RUNS)
    .venv/bin/python benchmarks/page_render.py --smoke    # a fresh smoke store, as the page tests use
    .venv/bin/python benchmarks/page_render.py --smoke Kernel Tiny   # only pages whose path contains these

For every page: the first render in this process ("cold": models load, caches fill), then the
median of three renders in new sessions after that warm-up (caches are per process, as in a
running server), then the median of three reruns of one session (what a widget change costs when
it changes nothing heavy). Prints a markdown table.

The page tests check that these renders read from the caches (the Tiny-attention heads page reads no
weights in a new session, the Kernel page computes no λ(C) in a rerun); this script says how long
they take. --smoke trains the store the tests share (tests/conftest.py: smoke_store) into a
temporary folder first, about a minute on 2 CPU cores.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "pages").glob("*.py"))


def check(app: AppTest, page: str) -> None:
    if app.exception:
        sys.exit(f"{page} raised: {app.exception[0].message}")


def render_seconds(page: str) -> float:
    app = AppTest.from_file(str(ROOT / page), default_timeout=600)
    started = time.perf_counter()
    app.run()
    seconds = time.perf_counter() - started
    check(app, page)
    return seconds


def rerun_seconds(page: str, repeats: int = 3) -> float:
    """Median of `repeats` reruns of one session, after its first run."""
    app = AppTest.from_file(str(ROOT / page), default_timeout=600).run()
    check(app, page)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        app.run()
        times.append(time.perf_counter() - started)
        check(app, page)
    return statistics.median(times)


def train_smoke_store(store: Path) -> None:
    """The smoke preset's comparison plus kernel runs at three α, as tests/conftest.py's smoke_store."""
    from peftviz.run_config import alpha_grid
    from peftviz.sweep import run_sweep
    from peftviz.sweep.variants import comparison_configs

    started = time.perf_counter()
    run_sweep(comparison_configs("smoke") + alpha_grid("smoke", (1e-3, 1e-2, 4e-2)), store)
    print(f"trained the smoke store in {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="train a smoke store into a temporary folder and use it")
    parser.add_argument("pages", nargs="*", help="only pages whose path contains one of these")
    args = parser.parse_args()
    pages = [page for page in PAGES if not args.pages or any(part in page for part in args.pages)]

    with tempfile.TemporaryDirectory() as folder:
        if args.smoke:
            os.environ["PEFTVIZ_RUNS"] = folder
            train_smoke_store(Path(folder))
        from peftviz.paths import store_dir
        from peftviz.store.runs import list_runs

        runs = list_runs()
        print(f"store: {store_dir()} ({len(runs)} runs)\n")
        print("| page | first render (s) | new session after warm-up, median of 3 (s) | rerun, median of 3 (s) |")
        print("|---|---|---|---|")
        for page in pages:
            cold = render_seconds(page)
            warm = statistics.median(render_seconds(page) for _ in range(3))
            print(f"| {page} | {cold:.2f} | {warm:.2f} | {rerun_seconds(page):.2f} |", flush=True)


if __name__ == "__main__":
    main()
