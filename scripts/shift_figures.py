"""Draw docs/shift.md's figures: `severity_figure` of ECE and accuracy from a `report --shift` CSV, as Chromium
draws them at 1280×720 (the test dependencies' Playwright and the system's /usr/bin/chromium).

    .venv/bin/python scripts/shift_figures.py PREFIX-shift.csv RUNS_DIR docs/screenshots/issue-48

RUNS_DIR: the store the report read, for each method's colour (`palette.store_series`, as the app picks it).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd

from peftviz.figures.palette import store_series, unit_series
from peftviz.figures.shift import severity_figure
from peftviz.store.runs import list_runs

CHROMIUM = "/usr/bin/chromium"
METRICS = ("ece", "accuracy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("runs_dir", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    table = pd.read_csv(args.csv)
    table["severity"] = table["severity"].astype("Int64")  # domain shifts have none
    runs = list_runs(args.runs_dir)
    in_store = store_series(runs)
    series = {}
    for run in runs:  # a group in its first run's colour, as the mean (seed None)
        series.setdefault(run.label, unit_series([run, run], in_store))
    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as scratch:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        for metric in METRICS:
            html = Path(scratch) / f"{metric}.html"
            severity_figure(table, metric, series).write_html(html, config={"displayModeBar": False})
            page.goto(html.as_uri())
            page.wait_for_timeout(1500)
            shot = args.out / f"shift-{metric}-1280x720.png"
            page.locator(".js-plotly-plot").first.screenshot(path=str(shot))
            print(f"wrote {shot}")
        browser.close()


if __name__ == "__main__":
    main()
