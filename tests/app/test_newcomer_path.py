"""The newcomer's path on one store, as issue 32 walked it: the Train page with a double click on Train for
two methods, then `compare --seeds 2` on the command line, `export` of a run and `import` of the export,
`report`, and then every page (AppTest). Each path has its own tests; this one checks them together: no
exception anywhere, no seed twice in a group, and `compare` trains only the seeds the Train page had not.
The walk itself is `tests.support.newcomer_path` (the `newcomer_walk` fixture), shared with the browser test
(tests/browser/test_browser_newcomer.py)."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz.app import jobpanel
from peftviz.store.runs import group_runs, list_runs
from tests.support.newcomer_path import METHODS

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster
ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "pages").glob("*.py"))


def open_page(path: Path) -> AppTest:
    return AppTest.from_file(str(path), default_timeout=300).run()


def test_the_newcomer_s_path_on_one_store(newcomer_walk, monkeypatch):
    walk, store = newcomer_walk, newcomer_walk.store
    trained_on_page = walk.trained_on_page
    assert walk.seeds_after_page == [0, 0]

    runs = walk.runs_after_compare  # after `compare --preset smoke --methods lora,prefix-propagation --seeds 2`
    new = [run for run in runs if run.name not in trained_on_page]
    assert {run.name for run in runs} >= set(trained_on_page)  # the page's runs are kept, not trained again
    assert sorted((run.config.method, run.seed) for run in new) == sorted((m, 1) for m in METHODS)  # seed 1 only

    assert walk.imported_after_import == 1  # `export` of LoRA seed 0, then `import` of the export
    report = walk.report
    assert all(method in report for method in METHODS)

    groups = group_runs(list_runs(store))
    for group in groups:
        assert len(set(group.seeds)) == len(group.seeds) and not group.repeats, (group.name, group.seeds)
    for method in METHODS:  # one group per method, the page's seed 0 with the command line's seed 1
        assert [g.seeds for g in groups if g.label == method] == [[0, 1]], [g.name for g in groups]

    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    monkeypatch.setattr(jobpanel, "job_queue", lambda: walk.queue)  # the Train page's queue, its jobs done
    monkeypatch.setattr(jobpanel, "visitor", lambda: "me")
    for path in PAGES:
        page = open_page(path)
        assert not page.exception, (path.name, [e.value for e in page.exception])
