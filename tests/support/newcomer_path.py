"""The newcomer's path of issue 32, walked once on one store (`newcomer_walk` in conftest): the Train page
with a double click on Train for two methods, then `compare --seeds 2` on the command line, `export` of a
run and `import` of the export, and `report`. What the tests check is recorded as the walk goes
(`Walk`): the AppTest test (tests/app/test_newcomer_path.py) asserts on it and opens every page, the browser
test (tests/browser/test_browser_newcomer.py) serves the store and audits every page as drawn."""

from __future__ import annotations

import contextlib
import io
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("lora", "prefix-propagation")  # LoRA exports as a peft adapter; both have options at their defaults


@dataclass
class Walk:
    """The store after the walk, and what each step left."""

    store: Path
    queue: object  # the Train page's JobQueue, its two jobs done: the pages' job panel shows them
    trained_on_page: list[str]  # the runs' names
    seeds_after_page: list[int]  # sorted
    runs_after_compare: list  # list[Run]
    imported_after_import: int  # runs marked imported
    report: str  # `report`'s printed output


def double_click_train(page, method: str) -> None:
    """Pick the smoke preset and `method`, then press Train twice, as an impatient hand does."""
    page.selectbox[0].set_value("smoke").run()  # preset
    page.selectbox[1].set_value(method).run()
    for _ in range(2):
        next(button for button in page.button if button.label == "Train").click().run()
    assert not page.exception and not page.error, [e.value for e in page.error]


def train_on_the_page(monkeypatch):
    """Both methods double-clicked while the queue holds its first job, then trained for real (the app's child
    process): the queue and the runs' names."""
    from streamlit.testing.v1 import AppTest

    from peftviz.app.jobs import train_in_process
    from tests.support.job_helpers import fake_queue, wait_until_idle

    pressed = threading.Event()

    def train_once_pressed(job):
        assert pressed.wait(120)  # both presses of both methods land before any job trains
        return train_in_process(job)

    queue = fake_queue(monkeypatch, train=train_once_pressed)
    page = AppTest.from_file(str(ROOT / "pages" / "1_Train.py"), default_timeout=300).run()
    for method in METHODS:
        double_click_train(page, method)
    assert [job.configs[0].method for job in queue.jobs] == list(METHODS)  # one job per method, not two
    pressed.set()
    wait_until_idle(queue, seconds=300)
    assert [job.status for job in queue.jobs] == ["done", "done"], [job.error for job in queue.jobs]
    return queue, [run.name for job in queue.jobs for run in job.runs]


def cli(*argv: str) -> str:
    """`python -m peftviz ARGV` in this process (the store: $PEFTVIZ_RUNS); its printed output."""
    from peftviz.cli import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(list(argv)) == 0
    return printed.getvalue()


def walk(store: Path, scratch: Path) -> Walk:
    """The walk on `store` (created), with the export in `scratch`; the app's settings restored after it."""
    import torch

    from peftviz.store.runs import list_runs

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster
    try:
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
            queue, trained_on_page = train_on_the_page(monkeypatch)
            seeds_after_page = sorted(run.seed for run in list_runs(store))
            cli("compare", "--preset", "smoke", "--methods", ",".join(METHODS), "--seeds", "2")
            runs_after_compare = list_runs(store)
            lora = next(run for run in runs_after_compare if run.config.method == "lora" and run.seed == 0)
            cli("export", lora.name, str(scratch / "lora-adapter"))
            cli("import", str(scratch / "lora-adapter"))
            imported = sum(bool(run.imported) for run in list_runs(store))
            report = cli("report")
    finally:
        torch.set_num_threads(threads)
    return Walk(store, queue, trained_on_page, seeds_after_page, runs_after_compare, imported, report)
