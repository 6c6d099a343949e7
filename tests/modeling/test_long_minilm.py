"""The long MiniLM is built offline from the shipped MiniLM, and computes what MiniLM computes."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer, LongformerModel

from peftviz.modeling import long_minilm
from peftviz.modeling.backbones import minilm_path
from peftviz.modeling.long_minilm import (
    DEFAULT_MAX_POSITIONS,
    DEFAULT_WINDOW,
    LONG_MINILM,
    build_long_minilm,
    long_minilm_path,
    parse_long_minilm,
)

# Small enough to build in about a second; 1024 > 512 so the position tiling wraps around.
POSITIONS = 1024
# A 512 window is 256 tokens each side: the ~100-token text below lies wholly inside it.
WINDOW = 512
TEXT = (
    "Shares in the carmaker rose sharply on Tuesday after it reported record profits for the third "
    "quarter, beating analysts' forecasts by a wide margin. The company said demand for its electric "
    "models had doubled in Europe and Asia, while costs for batteries and steel had fallen. Its chief "
    "executive told investors that a new factory in Spain would open next year and employ three thousand "
    "people. Rival firms saw their shares slip as traders moved money into the sector's clear leader."
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One build shared by the read-only tests."""
    return build_long_minilm(tmp_path_factory.mktemp("long") / "long-minilm", POSITIONS, WINDOW)


@pytest.fixture(scope="module")
def bert():
    return AutoModel.from_pretrained(minilm_path()).eval()


@pytest.mark.parametrize(
    "name, expected",
    [
        ("long-minilm", (4096, 256)),
        ("long-minilm-w128", (4096, 128)),
        ("long-minilm-w2", (4096, 2)),
        ("minilm", None),
        ("tiny-bert", None),
        ("long-minilmx", None),
        ("/models/long-minilm", None),
    ],
)
def test_parse_long_minilm(name, expected):
    assert parse_long_minilm(name) == expected
    assert (DEFAULT_MAX_POSITIONS, DEFAULT_WINDOW, LONG_MINILM) == (4096, 256, "long-minilm")


@pytest.mark.parametrize(
    "name",
    ["long-minilm-w127", "long-minilm-w0", "long-minilm-wabc", "long-minilm-w", "long-minilm-w-2", "long-minilm-big"],
)
def test_parse_long_minilm_rejects_malformed_names(name):
    with pytest.raises(ValueError, match="long-minilm") as err:
        parse_long_minilm(name)
    assert "\n" not in str(err.value)


def test_build_rejects_an_odd_window(tmp_path):
    with pytest.raises(ValueError, match="even"):
        build_long_minilm(tmp_path / "odd", POSITIONS, 255)
    assert list(tmp_path.iterdir()) == []


def test_built_folder_holds_safetensors_config_and_tokenizer(built):
    names = {p.name for p in built.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= names
    assert "tokenizer.json" in names or "vocab.txt" in names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl", ".pickle"))]
    config = json.loads((built / "config.json").read_text())
    assert config["model_type"] == "longformer"
    assert config["max_position_embeddings"] == POSITIONS + 1
    assert config["attention_window"] in (WINDOW, [WINDOW] * 6)
    assert (config["num_hidden_layers"], config["hidden_size"], config["pad_token_id"]) == (6, 384, 0)
    assert AutoTokenizer.from_pretrained(built).model_max_length == POSITIONS


def test_position_rows_tile_minilm_positions(built, bert):
    weights = load_file(built / "model.safetensors")
    new = weights["embeddings.position_embeddings.weight"]
    old = bert.embeddings.position_embeddings.weight.detach()
    assert new.shape == (POSITIONS + 1, 384)
    assert torch.equal(new[0], torch.zeros(384))  # the padding row
    for k in (0, 1, 511, 512, 1000, POSITIONS - 1):
        assert torch.equal(new[1 + k], old[k % 512]), k


def test_global_projections_copy_the_local_ones(built):
    weights = load_file(built / "model.safetensors")
    for layer in (0, 5):
        for proj in ("query", "key", "value"):
            for part in ("weight", "bias"):
                local = weights[f"encoder.layer.{layer}.attention.self.{proj}.{part}"]
                assert torch.equal(weights[f"encoder.layer.{layer}.attention.self.{proj}_global.{part}"], local)


def test_long_minilm_matches_minilm_on_a_text_inside_the_window(built, bert):
    tokenizer = AutoTokenizer.from_pretrained(built)
    batch = tokenizer(TEXT, return_tensors="pt")
    assert 80 <= batch["input_ids"].shape[1] <= WINDOW // 2
    global_mask = torch.zeros_like(batch["input_ids"])
    global_mask[:, 0] = 1  # [CLS] attends globally, through the *_global projections
    long = LongformerModel.from_pretrained(built, add_pooling_layer=False).eval()  # built without one
    with torch.no_grad():
        got = long(**batch, global_attention_mask=global_mask).last_hidden_state
        want = bert(**batch).last_hidden_state
    assert got.shape == want.shape
    assert (got - want).abs().max().item() < 1e-4


def test_long_minilm_path_builds_once(tmp_path, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_CACHE", str(tmp_path))  # the cache folder is read at call time
    folder = long_minilm_path(POSITIONS, 128)
    assert folder == tmp_path / "models" / f"long-minilm-{POSITIONS}-w128"
    assert (folder / "config.json").is_file()

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt a cached long-minilm")

    monkeypatch.setattr(long_minilm, "build_long_minilm", no_rebuild)
    assert long_minilm_path(POSITIONS, 128, cache_dir=tmp_path) == folder
    assert json.loads((folder / "config.json").read_text())["attention_window"] in (128, [128] * 6)


def _failing_tokenizer_save(monkeypatch):
    """Make the tokenizer save raise, after the model weights went into the temporary folder."""
    real = AutoTokenizer.from_pretrained

    def from_pretrained(*args, **kwargs):
        tokenizer = real(*args, **kwargs)

        def save_pretrained(folder, *a, **kw):
            assert (folder / "model.safetensors").is_file()  # writing had started
            raise OSError("disk full")

        tokenizer.save_pretrained = save_pretrained
        return tokenizer

    monkeypatch.setattr(long_minilm.AutoTokenizer, "from_pretrained", from_pretrained)


def test_failed_build_leaves_nothing_behind(tmp_path, monkeypatch):
    _failing_tokenizer_save(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        build_long_minilm(tmp_path / "long", POSITIONS, WINDOW)
    assert list(tmp_path.iterdir()) == []


def test_failed_rebuild_keeps_the_previous_build(tmp_path, monkeypatch):
    dest = tmp_path / "long"
    dest.mkdir()
    (dest / "config.json").write_text("{}")
    _failing_tokenizer_save(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        build_long_minilm(dest, POSITIONS, WINDOW)
    assert [p.name for p in tmp_path.iterdir()] == ["long"]
    assert (dest / "config.json").read_text() == "{}"
