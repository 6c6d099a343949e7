"""An import typed on the Train page with a hub id this machine's Hugging Face cache lacks, while the hub is off
(HF_HUB_OFFLINE), is refused on the page in one line before anything is queued, with the sentence `peftviz
import` stops with (issue 45): both ask `exchange.sources` the same way (`check_source`, `_hub_snapshot`)."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from peftviz.errors import ExchangeError
from peftviz.exchange.sources import KINDS, check_source
from tests.support.job_helpers import fake_queue, wait_until_idle

ROOT = Path(__file__).resolve().parents[2]
TRAIN_PAGE = str(ROOT / "pages" / "1_Train.py")
MISSING, CACHED = "someone/not-in-the-cache", "someone/in-the-cache"
REFUSED = (
    f"cannot download {MISSING} from the Hugging Face hub: the hub is off (HF_HUB_OFFLINE) and this machine's cache "
    f"lacks it; download it once where the hub is reachable (hf download {MISSING}), or give its folder"
)
FUZZ = settings(
    derandomize=True,
    deadline=None,
    database=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture
def hub_off(tmp_path, monkeypatch):
    """The hub off, and a Hugging Face cache of this test's own that holds one snapshot, CACHED's."""
    import huggingface_hub.constants

    cache = tmp_path / "hf-cache"
    repo = cache / f"models--{CACHED.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text("{}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def imported(name: str) -> AppTest:
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()
    at.selectbox[0].set_value("smoke").run()
    at.text_input(key="import_source").set_value(name).run()
    return at.button(key="train_import").click().run()


def test_a_hub_id_missing_from_the_cache_is_refused_in_one_line_and_nothing_is_queued(
    empty_store, hub_off, monkeypatch
):
    queue = fake_queue(monkeypatch)
    at = imported(MISSING)
    assert not at.exception and [error.value for error in at.error] == [REFUSED]
    assert queue.jobs == []


def test_the_command_line_refuses_it_with_the_same_sentence(tmp_path, hub_off, capsys):
    from peftviz.cli import main

    assert main(["import", MISSING, "--dataset", "bbc-news", "--runs-dir", str(tmp_path / "runs")]) == 1
    assert capsys.readouterr().err.strip() == f"peftviz: error: {REFUSED}"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_hub_id_in_the_cache_is_queued(empty_store, hub_off, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = imported(CACHED)
    assert not at.exception and not at.error
    (job,) = queue.jobs
    assert [request.source for request in job.imports] == [CACHED] and job.configs == []
    wait_until_idle(queue)


def test_a_base_model_missing_from_the_cache_is_refused_as_a_model_to_train_is(empty_store, hub_off, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()
    at.selectbox[0].set_value("smoke").run()
    at.text_input(key="import_source").set_value(CACHED).run()
    at.text_input(key="import_base").set_value("someone/missing-base").run()
    at.button(key="train_import").click().run()
    missing = (
        "model 'someone/missing-base' is not in this machine's Hugging Face cache and the hub is off (HF_HUB_OFFLINE): "
        "download it once where the hub is reachable (hf download someone/missing-base), or give a model folder"
    )
    assert not at.exception and [error.value for error in at.error] == [missing]
    assert queue.jobs == []


@pytest.mark.parametrize(
    "name",
    [
        "",
        "  ",
        "owner/",
        "/",
        "~nobody-here/x",
        "a" * 5000,
        "o/" + "n" * 300,
        "x\x00y",
        "two\nlines/x",
        "../../etc",
        "owner/name/extra",
        "owner//name",
        "é/ü",
        "owner/name\r",
    ],
)
def test_a_hostile_import_source_is_refused_in_one_line_and_nothing_is_queued(empty_store, hub_off, monkeypatch, name):
    queue = fake_queue(monkeypatch)
    at = imported(name)
    assert not at.exception and len(at.error) == 1 and "\n" not in at.error[0].value
    assert queue.jobs == []


HOSTILE = st.one_of(
    st.text(max_size=60),
    st.from_regex(r"[A-Za-z0-9][\w.-]{0,20}/[\w.-]{1,20}", fullmatch=True),  # reads as a hub id: the cache is asked
    st.sampled_from([MISSING, CACHED, "/", ".", "~", "~/x", "/etc/passwd", "a" * 5000, "x\x00y", "owner/..", "o/.git"]),
)


@FUZZ
@given(name=HOSTILE)
def test_check_source_with_the_hub_off_refuses_all_but_folders_to_import_and_cached_ids(hub_off, name):
    """Any text: an ExchangeError (never another exception, never the hub asked), or the name is a folder holding
    something to import, or a hub id the cache holds."""
    try:
        check_source(name)
    except ExchangeError as err:
        assert str(err).strip()
        return
    path = Path(name).expanduser()
    assert name == CACHED or (path.is_dir() and any((path / file).is_file() for file in KINDS)), name
