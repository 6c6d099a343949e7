"""The pages that rebuild a model (Attention, Kernel, Tiny-attention heads) on a store of runs recorded from other
loops, which hold no parameters: each says in one caption which runs it leaves out and why, and shows no error."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

PAGES = Path(__file__).resolve().parents[2] / "pages"
LEFT_OUT = "Not shown: my-adapter, trainer lora, recorded from other training loops."


@pytest.mark.parametrize("page", ["3_Attention.py", "4_Kernel.py", "5_Tiny_attention_heads.py"])
def test_a_page_that_rebuilds_a_model_names_the_recorded_runs_it_leaves_out(recorded_store, monkeypatch, page):
    monkeypatch.setenv("PEFTVIZ_RUNS", str(recorded_store))
    at = AppTest.from_file(str(PAGES / page), default_timeout=300).run()
    assert not at.exception and not at.error
    captions = [caption.value for caption in at.caption]
    assert [text for text in captions if text.startswith(LEFT_OUT)] != [], captions
    assert not any("weigh the prefix term" in text or "no attention heads" in text for text in captions), captions
