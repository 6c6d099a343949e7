"""The baselines on every page: where a page applies it shows them, where it does not it says so in one line."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz.methods import peft_methods
from peftviz.store.runs import list_runs
from peftviz.sweep.variants import comparison_configs
from tests.support.helpers import charts

ROOT = Path(__file__).resolve().parents[2]
BASELINES = ["lora", "prompt-tuning", "bitfit"]  # peft-injected, prefix positions of its own, unfrozen biases


@pytest.fixture(scope="module")
def baseline_store(tmp_path_factory):
    from tests.support.sweeps import trained

    store = tmp_path_factory.mktemp("baseline_store")
    trained(comparison_configs("smoke", BASELINES), store)
    return store


@pytest.fixture
def app_baselines(baseline_store, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_RUNS", str(baseline_store))
    return baseline_store


def open_page(path: str) -> AppTest:
    return AppTest.from_file(str(ROOT / path), default_timeout=120).run()


def test_compare_methods_all_is_the_papers_six_the_five_baselines_and_the_peft_tuners():
    names = [config.name for config in comparison_configs("smoke", "all")]
    assert names[:6] == [config.name for config in comparison_configs("smoke")]
    assert names[6:11] == ["lora", "ia3", "prompt-tuning", "bitfit", "houlsby-adapter"]
    assert names[11:] == [name for name in peft_methods() if name not in ("lora", "ia3")] and len(names) == 28


def test_the_calibration_page_compares_the_baselines(app_baselines):
    at = open_page("pages/2_Calibration.py")
    assert not at.exception and not at.error
    diagrams = [key for key in charts(at) if key.startswith("reliability-")]
    assert len(diagrams) == len(BASELINES)


def test_the_attention_page_shows_prompt_positions_as_prefix_keys(app_baselines):
    at = open_page("pages/3_Attention.py")
    assert not at.exception and not at.error
    first = at.selectbox(key="attention_run").value
    assert first.config.method == "prompt-tuning"  # runs with prefix keys come first
    assert {"grid", "tokens", "prefix_rows"} <= set(charts(at))  # its prompt positions read the text too
    at.selectbox(key="attention_run").set_value(next(run for run in list_runs() if run.config.method == "lora")).run()
    assert not at.exception and "no prefix keys" in at.info[0].value and "tokens" in charts(at)


@pytest.mark.parametrize(
    "page, reason", [("pages/4_Kernel.py", "prefix term"), ("pages/5_Tiny_attention_heads.py", "heads")]
)
def test_pages_that_do_not_apply_say_so_in_one_line(app_baselines, page, reason):
    at = open_page(page)
    assert not at.exception and not at.error
    note = next(caption.value for caption in at.caption if caption.value.startswith("Not shown:"))
    assert all(name in note for name in BASELINES) and reason in note
