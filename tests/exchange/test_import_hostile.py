"""Hostile adapter_config.json files on `import` (peftviz.exchange.adapter_config and the methods' `check_peft_values`).

An adapter of each peft type peftviz names (and RandLoRA, read as `peft:RANDLORA`), saved by peft itself on a tiny
BERT, has its adapter_config.json tampered with in a generated way: one field replaced by any JSON value (strings,
floats for ints, bools, negative numbers, 0, 10^12, NaN, infinities, nested objects, huge lists, null) or removed, its
peft_type or task_type replaced, or the whole file replaced (not JSON, not UTF-8, empty, nested thousands deep, beyond
the size limit, a JSON value that is not an object). Each import must be refused in one line of the project's errors,
or give a complete run that holds the adapter's values; a refused import leaves the store's bytes as they were.

A value that no field of its kind takes (KIND_OF: a size that is no int or is negative or 10^12, a flag that is no
bool, a fraction that is no finite number, a module name that is no name, a base that is no string) is refused
before the base is loaded, so before peft sees anything, in a line that names adapter_config.json and the field.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from peft import PeftType, get_peft_model
from transformers import AutoModelForSequenceClassification

from peftviz.errors import PeftvizError
from peftviz.exchange import imports
from peftviz.exchange.adapter_config import MAX_ITEMS
from peftviz.exchange.imports import import_model
from peftviz.exchange.request import ImportRequest
from peftviz.exchange.sources import JSON_LIMIT
from peftviz.methods import METHODS
from tests.exchange.test_exchange import BBC, PEFT_CONFIGS, base_folder
from tests.support.helpers import FUZZ

pytestmark = pytest.mark.usefixtures("one_thread")
SETTINGS = {"limit": 40, "max_length": 24}  # an accepted adapter is evaluated on 40 documents of 24 tokens
ADAPTERS = [
    "lora",
    "dora",
    "adalora",
    "vera",
    "loha",
    "lokr",
    "oft",
    "boft",
    "hra",
    "fourierft",
    "vblora",
    "ln-tuning",
    "ia3",
    "prefix-tuning",
    "prompt-tuning",
    "prompt-tuning (p-tuning)",
    "peft:RANDLORA",
]
CONFIG = "adapter_config.json"

# fields by kind, and values that no field of that kind takes (None is not among them: peft writes null for "unset")
KIND_OF = {
    **dict.fromkeys(
        (
            "r",
            "lora_alpha",
            "alpha",
            "num_virtual_tokens",
            "token_dim",
            "num_layers",
            "num_attention_heads",
            "init_r",
            "target_r",
            "total_step",
            "n_frequency",
            "num_vectors",
            "vector_length",
            "topk",
            "oft_block_size",
            "boft_block_size",
            "randlora_alpha",
        ),
        "size",
    ),
    **dict.fromkeys(
        (
            "use_dora",
            "use_rslora",
            "fan_in_fan_out",
            "inference_mode",
            "lora_bias",
            "save_projection",
            "prefix_projection",
            "init_ia3_weights",
        ),
        "flag",
    ),
    **dict.fromkeys(
        (
            "lora_dropout",
            "vera_dropout",
            "module_dropout",
            "rank_dropout",
            "boft_dropout",
            "vblora_dropout",
            "randlora_dropout",
            "encoder_dropout",
            "scaling",
            "d_initial",
        ),
        "fraction",
    ),
    **dict.fromkeys(("target_modules", "modules_to_save", "feedforward_modules"), "names"),
    "base_model_name_or_path": "text",
}
NESTED = {"a": [{"b": [{"c": [1]}]}]}
UNFIT = {
    "size": [
        "4",
        "",
        4.0,
        4.5,
        True,
        False,
        -1,
        -(10**12),
        10**12,
        2**64,
        10**400 // 10**360,
        math.nan,
        math.inf,
        [4],
        {"r": 4},
        NESTED,
    ],
    "flag": [0, 1, "true", "", 0.0, math.nan, [], {}, [True], NESTED],
    "fraction": ["0.1", True, math.nan, math.inf, -math.inf, [0.1], {"p": 0.1}, NESTED],
    "names": [
        5,
        True,
        0.5,
        [1],
        [["query"]],
        [""],
        ["query value"],
        ["../x"],
        ["query", None],
        [{"a": 1}],
        {"query": 1},
        ["query"] * (MAX_ITEMS + 1),
        NESTED,
    ],
    "text": [5, True, 0.5, [], {}, ["base"], "x" * 5000, NESTED],
}
ANY_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from([0, 1, 2, 4, 8, 16, -1, 0.5, 10**12, "query", "LayerNorm", "none", "SEQ_CLS"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
WHOLE_FILE = {  # name -> the file's bytes
    "empty": b"",
    "not-json": b"r = 4\n",
    "not-utf8": b'{"r": "\xff\xfe"}',
    "nested-deep": b"[" * 100_000 + b"]" * 100_000,
    "over-the-limit": b'{"r": 4, "pad": "' + b"x" * JSON_LIMIT + b'"}',
    "a-list": b"[]",
    "a-number": b"4",
    "a-string": b'"lora"',
    "nan": b"NaN",
}


@pytest.fixture(scope="module")
def adapters(tmp_path_factory) -> dict[str, Path]:
    """Each of ADAPTERS as peft saves it (untrained: its weights as peft starts them) on one tiny BERT folder, with
    the BBC labels by name and its base named by path."""
    root = tmp_path_factory.mktemp("hostile-adapters")
    base = base_folder(root / "base", "bert")
    made = {}
    for method in ADAPTERS:
        classifier = AutoModelForSequenceClassification.from_pretrained(
            base, num_labels=5, id2label=dict(enumerate(BBC))
        )
        folder = root / method.replace(" ", "-").replace(":", "-")
        get_peft_model(classifier, PEFT_CONFIGS[method]()).save_pretrained(folder)
        classifier.config.save_pretrained(folder)
        config = json.loads((folder / CONFIG).read_text())
        (folder / CONFIG).write_text(json.dumps({**config, "base_model_name_or_path": base}))
        made[method] = folder
    return made


@pytest.fixture(scope="module")
def store(adapters, tmp_path_factory) -> Path:
    """A store that holds one run already (the LoRA adapter, imported)."""
    runs = tmp_path_factory.mktemp("hostile-store")
    import_model(ImportRequest(str(adapters["lora"]), SETTINGS), runs)
    return runs


def store_bytes(store: Path) -> dict[str, bytes]:
    return {str(path.relative_to(store)): path.read_bytes() for path in sorted(store.rglob("*")) if path.is_file()}


def tampered_copy(adapter: Path, scratch: Path, config_bytes: bytes) -> Path:
    """A copy of the adapter folder whose adapter_config.json holds `config_bytes`."""
    folder = scratch / "tampered"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(adapter, folder)
    (folder / CONFIG).write_bytes(config_bytes)
    return folder


def import_tampered(folder: Path, store: Path):
    """(the run or the error, whether the base was loaded): the import of `folder` into `store`."""
    with mock.patch.object(imports, "load_encoder", wraps=imports.load_encoder) as loads:
        try:
            return import_model(ImportRequest(str(folder), SETTINGS), store), loads.called
        except PeftvizError as err:
            return err, loads.called


def assert_one_line_and_store_unchanged(err: PeftvizError, store: Path, before: dict) -> None:
    message = str(err)
    assert message and "\n" not in message and len(message) < 1000, message
    assert store_bytes(store) == before


def option_named(method, field: str) -> str:
    """The option of `method` an adapter_config.json field is read as (prompt tuning's num_virtual_tokens: its
    prompt_length)."""
    return {peft: option for option, peft in method.peft_names.items()}.get(field, field)


def assert_holds_the_adapter(run, config: dict, store: Path, before: dict) -> None:
    """An accepted import: a complete run of a method of the adapter's type, whose options are the adapter's values;
    the runs that were there unchanged. The new run is removed again, so that the next example finds the same
    store."""
    new = Path(run.path)
    try:
        assert run.status == "complete"
        method = METHODS[run.config.method]
        of_its_type = [
            getattr(cls, "imports_as", None) or name
            for name, cls in METHODS.items()
            if cls.peft_type == config["peft_type"]
        ]
        assert run.config.method in {*of_its_type, f"peft:{config['peft_type']}"}
        options = run.config.method_options
        for field, value in config.items():
            option = option_named(method, field)
            # targets are read as the option's choice; null is peft's default
            if option in options and field != "target_modules" and value is not None:
                assert options[option] == value, (field, value, options[option])
        assert {k: v for k, v in store_bytes(store).items() if not k.startswith(new.name)} == before
    finally:
        shutil.rmtree(new)


@st.composite
def unfit_field(draw, config: dict) -> tuple[str, object]:
    """A field of the adapter's kind (KIND_OF) that it holds, and a value no field of that kind takes."""
    field = draw(st.sampled_from(sorted(name for name in config if name in KIND_OF)))
    return field, draw(st.sampled_from(UNFIT[KIND_OF[field]]))


@hypothesis_settings(FUZZ, max_examples=120)
@given(method=st.sampled_from(ADAPTERS), data=st.data())
def test_a_value_no_field_of_its_kind_takes_is_refused_before_the_base_loads(adapters, store, tmp_path, method, data):
    config = json.loads((adapters[method] / CONFIG).read_text())
    field, value = data.draw(unfit_field(config))
    event(f"{KIND_OF[field]}: {type(value).__name__}")
    before = store_bytes(store)
    folder = tampered_copy(adapters[method], tmp_path, json.dumps({**config, field: value}).encode())
    outcome, loaded = import_tampered(folder, store)
    assert isinstance(outcome, PeftvizError), f"{method}: {field}={value!r} was imported"
    assert_one_line_and_store_unchanged(outcome, store, before)
    assert f"{CONFIG}: " in str(outcome) and field in str(outcome), str(outcome)
    assert not loaded, f"{method}: {field}={value!r} reached the base: {outcome}"


@hypothesis_settings(FUZZ, max_examples=40)
@given(method=st.sampled_from(ADAPTERS), how=st.sampled_from(["replace", "replace", "remove", "add"]), data=st.data())
def test_any_value_of_any_field_is_refused_in_one_line_or_imported_as_it_says(
    adapters, store, tmp_path, method, how, data
):
    config = json.loads((adapters[method] / CONFIG).read_text())
    field = data.draw(st.sampled_from(sorted(config)) if how != "add" else st.sampled_from(sorted(KIND_OF)))
    if how == "remove":
        config.pop(field)
    else:
        config[field] = data.draw(ANY_JSON)
    before = store_bytes(store)
    folder = tampered_copy(adapters[method], tmp_path, json.dumps(config).encode())
    outcome, _ = import_tampered(folder, store)
    event("refused" if isinstance(outcome, PeftvizError) else "imported")
    if isinstance(outcome, PeftvizError):
        assert_one_line_and_store_unchanged(outcome, store, before)
    else:
        assert_holds_the_adapter(outcome, config, store, before)


@pytest.mark.parametrize("field", ["peft_type", "task_type"])
@hypothesis_settings(FUZZ, max_examples=15)
@given(value=ANY_JSON | st.sampled_from(["LORA_X", "CAUSAL_LM", "lora", "PROMPT_TUNING\n", "P" * 5000]))
def test_another_type_or_task_is_refused_in_one_line_naming_it(adapters, store, tmp_path, field, value):
    config = json.loads((adapters["lora"] / CONFIG).read_text())
    if value in {"task_type": ["SEQ_CLS"], "peft_type": [t.value for t in PeftType]}[field]:
        return  # an adapter of another type peftviz reads: the other tests
    before = store_bytes(store)
    folder = tampered_copy(adapters["lora"], tmp_path, json.dumps({**config, field: value}).encode())
    outcome, loaded = import_tampered(folder, store)
    assert isinstance(outcome, PeftvizError) and not loaded
    assert_one_line_and_store_unchanged(outcome, store, before)
    assert f"{field} in {CONFIG}" in str(outcome), str(outcome)


@pytest.mark.parametrize("damage", list(WHOLE_FILE))
def test_a_file_that_is_no_json_object_is_refused_in_one_line_naming_it(adapters, store, tmp_path, damage):
    before = store_bytes(store)
    folder = tampered_copy(adapters["lora"], tmp_path, WHOLE_FILE[damage])
    outcome, loaded = import_tampered(folder, store)
    assert isinstance(outcome, PeftvizError) and not loaded
    assert_one_line_and_store_unchanged(outcome, store, before)
    assert CONFIG in str(outcome), str(outcome)


def test_a_json_value_that_is_no_object_is_named_with_its_article(adapters, store, tmp_path):
    outcome, _ = import_tampered(tampered_copy(adapters["lora"], tmp_path, b"4"), store)
    assert str(outcome).endswith(f"{CONFIG} holds an int, not an object")


@pytest.mark.parametrize(
    "method, changes, message",
    [
        ("adalora", {"total_step": 0}, "total_step must be >= 1, not 0"),
        (
            "adalora",
            {"rank_pattern": {"bert.encoder.layer.0.attention.self.query.lora_E": [True] * 3}},
            "must be a list of init_r = 4 true or false, not [True, True, True]",
        ),
        (
            "adalora",
            {"rank_pattern": {"bert.encoder.layer.0.attention.self.nothing.lora_E": [True] * 4}},
            "rank_pattern names 'bert.encoder.layer.0.attention.self...., which is no AdaLoRA map (<module>.lora_E)",
        ),
        ("prefix-tuning", {"token_dim": 64}, "token_dim is 64, and base"),
        ("prefix-tuning", {"num_transformer_submodules": 2}, "num_transformer_submodules is 2, and base"),
        ("prefix-tuning", {"num_virtual_tokens": 2000}, "num_virtual_tokens must be in [1, 1024], not 2000"),
        ("prefix-tuning", {"token_dim": 10**6}, "token_dim must be in [1, 65536], not 1000000"),
        ("lora", {"auto_mapping": {"a": 1} | {"deep": json.loads("[" * 900 + "]" * 900)}}, "nested deeper than 4"),
        ("prompt-tuning", {"num_virtual_tokens": None}, "num_virtual_tokens must be an integer, not None"),
        ("lora", {"lora_alpha": 8.0}, "lora_alpha must be an integer, not 8.0"),
        ("lora", {"runtime_config": {"x": 1}}, "peft refuses it: "),
        ("vera", {"r": 0}, "r must be in [1, 1024], not 0"),
        ("boft", {"boft_block_size": 5}, "peft cannot build"),
    ],
)
def test_what_only_a_method_or_the_base_knows_is_refused_in_one_line(
    adapters, store, tmp_path, method, changes, message
):
    """Values of the right kind that the method's bounds, its peft form or the base refuse."""
    config = json.loads((adapters[method] / CONFIG).read_text())
    before = store_bytes(store)
    outcome, _ = import_tampered(
        tampered_copy(adapters[method], tmp_path, json.dumps(config | changes).encode()), store
    )
    assert isinstance(outcome, PeftvizError), outcome
    assert_one_line_and_store_unchanged(outcome, store, before)
    assert message in str(outcome), str(outcome)


@pytest.mark.parametrize(
    "file, content, message",
    [
        ("config.json", {"id2label": ["business", "tech"]}, "config.json's id2label is not an object of class ids"),
        ("config.json", {"id2label": {"first": "business"}}, "config.json's id2label has keys that are not class ids"),
        ("peftviz.json", {"label_names": [1, 2, 3, 4, 5]}, "peftviz.json has no label_names (a list of class names)"),
        ("peftviz.json", {"label_names": "business"}, "peftviz.json has no label_names (a list of class names)"),
    ],
)
def test_class_names_beside_the_adapter_that_are_not_names_are_refused_in_one_line(
    adapters, store, tmp_path, file, content, message
):
    """The class names an adapter's folder gives (a classifier's config.json, a peftviz export's peftviz.json)."""
    before = store_bytes(store)
    folder = tampered_copy(adapters["lora"], tmp_path, (adapters["lora"] / CONFIG).read_bytes())
    (folder / file).write_text(json.dumps(content))
    outcome, _ = import_tampered(folder, store)
    assert isinstance(outcome, PeftvizError), outcome
    assert_one_line_and_store_unchanged(outcome, store, before)
    assert message in str(outcome), str(outcome)


def test_nulls_peft_fills_in_from_the_base_import(adapters, store):
    """peft's config saved as it stands (before get_peft_model) holds null where the base decides: imported as if
    they were the base's, though peft annotates some of them as plain ints (P-tuning's encoder_hidden_size)."""
    config = json.loads((adapters["prefix-tuning"] / CONFIG).read_text())
    nulls = dict.fromkeys(
        ("token_dim", "num_layers", "num_attention_heads", "num_transformer_submodules", "encoder_hidden_size")
    )
    before = store_bytes(store)
    folder = tampered_copy(adapters["prefix-tuning"], store.parent / "nulls", json.dumps(config | nulls).encode())
    outcome, _ = import_tampered(folder, store)
    assert not isinstance(outcome, PeftvizError), outcome
    assert_holds_the_adapter(outcome, config | nulls, store, before)
