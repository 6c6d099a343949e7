"""Hostile model folders, generated: `load_encoder` and `check_model` on tiny BERT and RoBERTa folders, as
save_pretrained writes them (config.json, model.safetensors, tokenizer.json, tokenizer_config.json; see
tests/support/helpers.py), each changed in its config.json, its tokenizer files and its weights, any of them left
intact:

    config.json   up to three fields given values of the wrong type, out of range, or valid ones; keys
                  removed (the config class's default then stands in); or the whole file replaced by text
                  that is not JSON, bytes that are not UTF-8, JSON nested too deep, or JSON that is not an
                  object
    tokenizer     tokenizer.json and tokenizer_config.json removed, emptied, or holding JSON that is not
                  an object (or an object that is not a tokenizer); for BERT, a vocab.txt added, with the
                  tokenizer's vocabulary or only its special tokens
    weights       model.safetensors removed, emptied, cut short, or replaced by other bytes

The oracle, `expected_refusal`, is written here: it says from the rules of each file (types from the
config classes' annotations, the sizes the weights fix, which tokenizer files make a tokenizer) whether
the folder is usable and, if not, which files a message may name. A usable folder must load, with an
encoder and tokenizer that work (a classifier on them gives finite logits; no word of the test sentence is
[UNK]); any other must raise a one-line ModelLoadError naming the folder and a file at fault. check_model,
which reads no weights, must raise the same error where config.json or the tokenizer is at fault, and
pass otherwise. Loading writes nothing into the folder. Any other exception, or a case over TIMEOUT_S,
fails.

300 generated cases (max_examples), about 11 s on 2 CPU cores (75 load and 225 are refused); each outcome must
come up at least 60 times.
"""

import json
import math
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st
from transformers import BertConfig, RobertaConfig
from transformers.activations import ACT2FN

from peftviz import build_classifier
from peftviz.errors import ModelLoadError
from peftviz.methods import DEFAULT_METHOD
from peftviz.modeling.backbones import check_model, load_encoder
from tests.support.helpers import FUZZ, hard_timeout, tiny_model_folder

TIMEOUT_S = 20
FAMILIES = ("bert", "roberta")
CONFIG_CLASSES = {"bert": BertConfig, "roberta": RobertaConfig}
TEST_SENTENCE = "the news"

# fields whose value the weights fix: only the folder's own value is valid
SHAPE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
)
FIELDS = (
    *SHAPE_FIELDS,
    "num_attention_heads",
    "pad_token_id",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "layer_norm_eps",
    "model_type",
    "architectures",
    "peftviz_note",
)
VALUES = st.one_of(
    st.sampled_from(
        [
            "big",
            "32",
            "",
            "gelu",
            "relu",
            "nope",
            "bert",
            "gpt2",
            2.5,
            32.0,
            0.0,
            0.5,
            1.0,
            2.0,
            -0.1,
            1e-12,
            1e-5,
            math.nan,
            math.inf,
            None,
            True,
            False,
            [],
            [32],
            {},
            {"a": 1},
            -1,
            0,
            1,
            2,
            3,
            4,
            8,
            10**30,
            2**24 + 1,
        ]
    ),
    st.integers(-3, 600),
)
BAD_CONFIG_TEXTS = [
    b"{not json",
    b"",
    b"  \n",
    b"\xff\xfe{}",
    b"[" * 100_000,
    b"[]",
    b"3",
    b"null",
    b'"bert"',
    b'{"model_type": "bert"',
    b"\x00",
]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
TOKENIZER_STATES = ("intact", "missing", "empty", "array", "object")
VOCAB_STATES = ("none", "full", "specials", "empty")
WEIGHT_STATES = ("missing", "empty", "cut", "other")
# which parts of a folder a case changes: none in a third of the cases, so that both outcomes are common
CHANGED = [
    (),
    (),
    (),
    ("config",),
    ("config",),
    ("tokenizer",),
    ("weights",),
    ("config", "tokenizer"),
    ("config", "weights"),
    ("tokenizer", "weights"),
]


# ---------------------------------------------------------------------------------------------
# the oracle


def valid_value(field: str, value, original: dict) -> bool:
    """Whether config.json may hold `value` for `field` and still describe the folder's weights."""
    number = type(value) in (int, float)
    if field in SHAPE_FIELDS:
        return type(value) is int and value == original[field]
    if field == "num_attention_heads":
        return type(value) is int and value >= 1 and original["hidden_size"] % value == 0
    if field == "pad_token_id":
        in_vocabulary = type(value) is int and 0 <= value < original["vocab_size"]
        return in_vocabulary or (value is None and original["model_type"] == "bert")
    if field == "hidden_act":
        return type(value) is str and value in ACT2FN
    if field.endswith("dropout_prob"):
        return number and 0 <= value <= 1
    if field == "layer_norm_eps":
        return type(value) is float and 0 < value < math.inf
    if field == "model_type":  # BERT and RoBERTa weights have the same names: config.json says how to read them
        return value in FAMILIES
    return True  # a key no encoder reads (architectures, a note)


def config_usable(change: dict, original: dict) -> bool:
    if change["text"] is not None:
        return False
    defaults = CONFIG_CLASSES[original["model_type"]]().to_dict()  # what stands in for a removed key
    removed_ok = all(
        key != "model_type" and (key not in FIELDS or valid_value(key, defaults[key], original))
        for key in change["removed"]
    )
    return removed_ok and all(valid_value(field, value, original) for field, value in change["values"].items())


def tokenizer_usable(states: dict, vocab: str) -> bool:
    """tokenizer_config.json may be missing, or an object of no settings; the vocabulary comes from an intact
    tokenizer.json, or without one from a vocab.txt holding words. An empty file, or JSON that is not an
    object, is refused even beside a good one."""
    if states["tokenizer_config.json"] not in ("intact", "missing", "object"):
        return False
    full = states["tokenizer.json"]
    return full == "intact" or (full == "missing" and vocab == "full")


def expected_refusal(case: dict, original: dict) -> tuple[str, ...] | None:
    """None if the folder must load; else the names, one of which the message must hold."""
    named = ()
    if not config_usable(case["config"], original):
        named += ("config.json",)
    if not tokenizer_usable(case["tokenizer"], case["vocab"]):
        named += ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "has no tokenizer files")
    if case["weights"] != "intact":
        named += ("model.safetensors",)
    return named or None


# ---------------------------------------------------------------------------------------------
# generating and writing cases


@st.composite
def config_changes(draw, original: dict) -> dict:
    kind = draw(st.sampled_from(["values", "values", "values", "removed", "text"]))
    values = {}
    if kind == "values":
        for field in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3, unique=True)):
            values[field] = draw(VALUES)
    removed = draw(st.lists(st.sampled_from(sorted(original)), min_size=1, max_size=2)) if kind == "removed" else []
    text = draw(st.sampled_from(BAD_CONFIG_TEXTS)) if kind == "text" else None
    return {"values": values, "removed": sorted(set(removed)), "text": text}


@st.composite
def cases(draw, originals: dict) -> dict:
    family = draw(st.sampled_from(FAMILIES))
    changed = draw(st.sampled_from(CHANGED))
    intact_config = {"values": {}, "removed": [], "text": None}
    tokenizer = {file: draw(st.sampled_from(TOKENIZER_STATES)) for file in TOKENIZER_FILES}
    return {
        "family": family,
        "config": draw(config_changes(originals[family])) if "config" in changed else intact_config,
        "tokenizer": tokenizer if "tokenizer" in changed else dict.fromkeys(TOKENIZER_FILES, "intact"),
        "vocab": draw(st.sampled_from(VOCAB_STATES)) if family == "bert" and "tokenizer" in changed else "none",
        "weights": draw(st.sampled_from(WEIGHT_STATES)) if "weights" in changed else "intact",
    }


def write_config(folder: Path, change: dict) -> None:
    if change["text"] is not None:
        (folder / "config.json").write_bytes(change["text"])
        return
    config = json.loads((folder / "config.json").read_text())
    for key in change["removed"]:
        config.pop(key, None)
    (folder / "config.json").write_text(json.dumps({**config, **change["values"]}))


def write_tokenizer(folder: Path, states: dict, vocab: str) -> None:
    if vocab != "none":  # written first, from the intact tokenizer
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        words = sorted(tokenizer.get_vocab(), key=tokenizer.get_vocab().get)
        kept = {"full": words, "specials": tokenizer.all_special_tokens, "empty": []}[vocab]
        (folder / "vocab.txt").write_text("".join(f"{word}\n" for word in kept))
    for file, state in states.items():
        path = folder / file
        if state == "missing":
            path.unlink()
        elif state != "intact":
            path.write_text({"empty": "", "array": "[1, 2]", "object": '{"version": 3}'}[state])


def write_weights(folder: Path, state: str) -> None:
    path = folder / "model.safetensors"
    if state == "missing":
        path.unlink()
    elif state == "empty":
        path.write_bytes(b"")
    elif state == "cut":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif state == "other":
        path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(range(256)))


def listing(folder: Path) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in folder.iterdir()}


# ---------------------------------------------------------------------------------------------
# the property


def assert_works(encoder, tokenizer) -> None:
    ids = tokenizer(TEST_SENTENCE, return_tensors="pt")["input_ids"]
    assert tokenizer.unk_token_id not in ids.tolist()[0], ids
    model = build_classifier(encoder, DEFAULT_METHOD, 2).eval()
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, 2) and torch.isfinite(logits).all()


def refusal_of(call) -> str | None:
    try:
        call()
    except ModelLoadError as err:
        message = str(err)
        assert message and "\n" not in message and len(message) < 1000, repr(message)
        return message
    return None


def outcome_of(folder: Path, named: tuple[str, ...] | None) -> str:
    before = listing(folder)
    with hard_timeout(TIMEOUT_S):
        checked = refusal_of(lambda: check_model(str(folder)))
        loaded = []
        message = refusal_of(lambda: loaded.extend(load_encoder(str(folder))))
    assert listing(folder) == before  # loading wrote nothing
    if named is None:
        assert message is None and checked is None, f"a usable folder refused: {message or checked}"
        assert_works(*loaded)
        event("loaded")
        return "loaded"
    assert message is not None, f"a folder that should be refused ({', '.join(named)}) loaded"
    assert str(folder) in message and any(name in message for name in named), (named, message)
    if "model.safetensors" in message or "weights" in message:  # found by reading the weights
        assert checked in (None, message), checked
    else:
        assert checked == message
    event("refused")
    return "refused"


@pytest.fixture(scope="module")
def originals(tmp_path_factory) -> dict:
    """family -> (its intact folder, its config.json as a dict)."""
    root = tmp_path_factory.mktemp("model_folders")
    folders = {family: tiny_model_folder(root / family, family) for family in FAMILIES}
    return {family: (folder, json.loads((folder / "config.json").read_text())) for family, folder in folders.items()}


def test_generated_model_folders(originals):
    outcomes = Counter()
    configs = {family: config for family, (_, config) in originals.items()}

    @settings(FUZZ, max_examples=300)
    @given(cases(configs))
    def check(case):
        with tempfile.TemporaryDirectory() as sandbox:
            folder = Path(sandbox) / f"{case['family']}-folder"
            shutil.copytree(originals[case["family"]][0], folder)
            write_tokenizer(folder, case["tokenizer"], case["vocab"])  # before config.json: it reads the intact one
            write_config(folder, case["config"])
            write_weights(folder, case["weights"])
            outcomes[outcome_of(folder, expected_refusal(case, configs[case["family"]]))] += 1

    check()
    assert outcomes["loaded"] >= 60 and outcomes["refused"] >= 60, outcomes
