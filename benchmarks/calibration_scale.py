"""Time the statistics at sweep scale: `report` and the Calibration page on a store of many runs.

    .venv/bin/python -m peftviz compare --preset smoke --methods all --seeds 0,1,2,3,4 --runs-dir /tmp/smoke5
    .venv/bin/python benchmarks/calibration_scale.py --runs-dir /tmp/smoke5

Each measurement runs in a new Python process, as a user's command or a server start would:

* `report` with the default metrics and with `--metric accuracy` only, 1,000 resamples, each
  "cold" (every run's cached estimates, analysis/estimates/, removed first) and the default
  again "warm" (a second call, the estimates on disk);
* the Calibration page rendered with AppTest (server-side: the script, not the browser's drawing),
  on groups (the page's default for a store with seeds) and on single runs: the first render in a
  new process with no estimates on disk, the first render in a new process with them on disk,
  and a second render in the same process (a new session: the process's caches are warm). The
  process first imports `peftviz.app.appkit`, which every page imports (with torch and transformers,
  through jobs -> train: about 5 s on this machine, paid once per server), so a first render is
  what the first visit of this page costs a server that has shown any page.

Prints markdown tables; the ratio is default metrics over accuracy only, both cold.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "pages" / "2_Calibration.py"

RENDER = """
import sys, time
import peftviz.app.appkit  # every page imports it, with torch and transformers (jobs -> train): ~5 s, paid once
from streamlit.testing.v1 import AppTest
view = sys.argv[1]
times = []
for _ in range(2):
    app = AppTest.from_file({page!r}, default_timeout=900)
    app.session_state["calibration_show"] = view
    started = time.perf_counter()
    app.run()
    times.append(time.perf_counter() - started)
    if app.exception or app.error:
        sys.exit(f"the page failed: {{(app.exception or app.error)[0].value}}")
print(*times)
"""


def clear_estimates(store: Path) -> None:
    for folder in store.glob("*/analysis/estimates"):
        shutil.rmtree(folder)


def seconds(command: list[str], env: dict | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return time.perf_counter() - started, done.stdout


def report_seconds(store: Path, metrics: list[str], resamples: int, csv: Path) -> float:
    flags = [f"--metric={m}" for m in metrics]
    command = [sys.executable, "-m", "peftviz", "report", "--runs-dir", str(store), "--resamples", str(resamples)]
    return seconds([*command, *flags, "--csv", str(csv)])[0]


def render_seconds(store: Path, view: str) -> list[float]:
    import os

    env = os.environ | {"PEFTVIZ_RUNS": str(store)}
    _, out = seconds([sys.executable, "-c", RENDER.format(page=str(PAGE)), view], env)
    return [float(t) for t in out.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs-dir", type=Path, required=True, help="the store to measure (e.g. 55 smoke runs)")
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    store = args.runs_dir
    n_runs = sum(1 for _ in store.glob("*/config.json"))
    print(f"store: {store} ({n_runs} runs), {args.resamples} resamples\n")
    with tempfile.TemporaryDirectory() as folder:
        csv = Path(folder) / "report"
        clear_estimates(store)
        accuracy = report_seconds(store, ["accuracy"], args.resamples, csv)
        clear_estimates(store)
        cold = report_seconds(store, [], args.resamples, csv)
        warm = report_seconds(store, [], args.resamples, csv)
    print("| report | seconds |\n|---|---|")
    print(f"| --metric accuracy, cold | {accuracy:.1f} |\n| default metrics, cold | {cold:.1f} |")
    print(f"| default metrics, warm (second call) | {warm:.1f} |")
    print(f"| ratio default / accuracy (cold) | {cold / accuracy:.2f}x |\n")
    print(
        "| Calibration page | first render, no estimates on disk (s) | first render, estimates on disk (s) "
        "| second render, same process (s) |\n|---|---|---|---|"
    )
    for view in ("groups of seeds", "single runs"):
        clear_estimates(store)
        first_cold, _ = render_seconds(store, view)
        first_warm, second = render_seconds(store, view)
        print(f"| {view} | {first_cold:.2f} | {first_warm:.2f} | {second:.2f} |", flush=True)


if __name__ == "__main__":
    main()
