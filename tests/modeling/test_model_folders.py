"""Model folders that cannot be used (issue 22): each refused in one line naming its file, before anything trains.

A local model folder holds config.json, model.safetensors and its tokenizer's files (tests/support/helpers.py
builds tiny ones). Also here: a run whose config.json lost its model, and a label too long for a folder name.
"""

import json
import shutil

import pytest

from peftviz.cli import main
from peftviz.errors import ConfigError, ModelLoadError, PeftvizError
from peftviz.modeling.backbones import check_model, load_encoder
from peftviz.run_config import MAX_LABEL_CHARS, preset_config
from peftviz.store.runs import load_run
from peftviz.store.writer import RunWriter
from tests.support.helpers import tiny_model_folder

NOT_A_NAME = "Expecting property name enclosed in double quotes"  # json's message


@pytest.fixture
def bert_folder(tmp_path):
    return tiny_model_folder(tmp_path / "tiny-bert-folder", "bert")


def edit_config(folder, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def refusal(folder) -> str:
    """The one-line ModelLoadError that loading `folder` raises (check_model, without the weights, raises the same)."""
    with pytest.raises(ModelLoadError) as caught:
        load_encoder(str(folder))
    message = str(caught.value)
    assert message and "\n" not in message, message
    return message


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("hidden_size", "big", "Field 'hidden_size' expected int, got str (value: 'big')"),
        ("num_attention_heads", 2.5, "Field 'num_attention_heads' expected int, got float (value: 2.5)"),
        ("vocab_size", None, "Field 'vocab_size' expected int, got NoneType (value: None)"),
        ("model_type", 5, "model_type must be a string, not 5"),
        ("pad_token_id", "x", "Field 'pad_token_id' with value 'x' doesn't match any type"),
        ("num_hidden_layers", -1, "num_hidden_layers must be >= 1, not -1"),
        ("num_attention_heads", 0, "num_attention_heads must be >= 1, not 0"),
        ("hidden_size", 33, "hidden_size 33 is not a multiple of num_attention_heads 4"),
        ("hidden_act", "nope", "hidden_act 'nope' is not an activation transformers knows"),
        ("pad_token_id", 99999, "pad_token_id 99999 is not a token id of the vocabulary (0 to 61)"),
        ("hidden_dropout_prob", 2.0, "hidden_dropout_prob must be in [0, 1], not 2.0"),
        ("dtype", "foo", "module 'torch' has no attribute 'foo'"),
    ],
)
def test_a_config_field_of_the_wrong_type_or_value_is_named_with_its_file(bert_folder, field, value, expected):
    edit_config(bert_folder, **{field: value})
    message = refusal(bert_folder)
    assert message.startswith(f"{bert_folder}/config.json: ") and expected in message, message
    with pytest.raises(ModelLoadError, match="^" + str(bert_folder) + "/config.json: "):
        check_model(str(bert_folder))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", f"config.json is not valid JSON: {NOT_A_NAME} at line 1, column 2"),
        (" \n", "config.json is empty"),
        ("[1, 2]", "config.json must hold a JSON object, not an array"),
        ('"bert"', "config.json must hold a JSON object, not a string"),
        ('{"hidden_size": 32}', "config.json has no model_type"),
    ],
)
def test_a_config_json_that_is_not_a_json_object_says_so(bert_folder, text, expected):
    (bert_folder / "config.json").write_text(text)
    message = refusal(bert_folder)
    assert message.startswith(f"{bert_folder}/{expected}"), message
    assert "hub" not in message


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        ([8], "attention_window lists 1 widths for 2 layers"),
        (7, "attention_window must be positive even widths, not 7"),
    ],
)
def test_a_longformer_window_that_cannot_be_built_is_named(tmp_path, window, expected):
    folder = tiny_model_folder(tmp_path / "longformer", "longformer")
    load_encoder(str(folder))
    edit_config(folder, attention_window=window)
    assert refusal(folder) == f"{folder}/config.json: {expected}"


def test_weights_that_do_not_fit_the_config_name_both_files(bert_folder):
    edit_config(bert_folder, vocab_size=70)
    assert refusal(bert_folder) == (
        f"{bert_folder}/model.safetensors does not fit {bert_folder}/config.json: embeddings.word_embeddings.weight "
        "is (62, 32) in the weights, (70, 32) in the model config.json describes"
    )
    edit_config(bert_folder, vocab_size=62, num_hidden_layers=3)
    message = refusal(bert_folder)
    assert message.startswith(f"{bert_folder}/model.safetensors lacks 16 weights of the model ") and (
        "e.g. encoder.layer.2.attention.output.LayerNorm.bias" in message
    ), message
    edit_config(bert_folder, num_hidden_layers=1)
    message = refusal(bert_folder)
    assert message.startswith(f"{bert_folder}/model.safetensors holds layers that {bert_folder}/config.json "), message


def test_a_huge_size_in_the_config_is_refused_before_any_memory_is_taken(bert_folder):
    edit_config(bert_folder, hidden_size=2**40, num_attention_heads=1)
    assert "hidden_size must be <= 16777216, not 1099511627776" in refusal(bert_folder)
    edit_config(bert_folder, hidden_size=2**24, num_attention_heads=1)  # within the bound: the weights say no
    assert "does not fit" in refusal(bert_folder)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_a_model_folder_without_its_tokenizer_files_is_refused(tmp_path, family):
    folder = tiny_model_folder(tmp_path / "no-tokenizer", family)
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer_config.json").unlink()
    expected = "tokenizer.json, or vocab.txt" if family == "bert" else "tokenizer.json, or vocab.json and merges.txt"
    message = refusal(folder)
    assert message.startswith(f"model folder '{folder}' has no tokenizer files: it needs {expected}"), message
    with pytest.raises(ModelLoadError, match="has no tokenizer files"):
        check_model(str(folder))


def test_an_empty_tokenizer_file_is_refused_naming_it(bert_folder):
    (bert_folder / "tokenizer.json").write_text("")
    assert refusal(bert_folder).startswith(f"model folder '{bert_folder}' has no tokenizer files")
    (bert_folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    assert refusal(bert_folder) == f"{bert_folder}/tokenizer.json is empty"
    (bert_folder / "tokenizer.json").unlink()
    assert refusal(bert_folder) == (
        f"the tokenizer of '{bert_folder}' (vocab.txt) knows no words, only its 5 special tokens: "
        "every word would be unknown"
    )
    (bert_folder / "tokenizer_config.json").write_text("[1]")
    assert refusal(bert_folder) == f"{bert_folder}/tokenizer_config.json must hold a JSON object, not an array"


def test_a_tokenizer_with_more_tokens_than_the_embeddings_is_refused(bert_folder, tmp_path):
    roberta = tiny_model_folder(tmp_path / "roberta", "roberta")  # 39 tokens
    shutil.copy(bert_folder / "tokenizer.json", roberta / "tokenizer.json")  # 62 tokens
    shutil.copy(bert_folder / "tokenizer_config.json", roberta / "tokenizer_config.json")
    assert refusal(roberta) == (
        f"the tokenizer of '{roberta}' (tokenizer.json) has ids up to 61, beyond the 39 rows of the model's "
        f"embeddings (vocab_size in {roberta}/config.json): it is not the model's tokenizer"
    )


def test_a_model_folder_without_weights_is_refused(bert_folder):
    (bert_folder / "model.safetensors").unlink()
    assert refusal(bert_folder) == f"model folder '{bert_folder}' has no weights: no model.safetensors"
    check_model(str(bert_folder))  # config and tokenizer are fine: only the load needs the weights


def test_an_intact_model_folder_loads_and_checks(bert_folder):
    check_model(str(bert_folder))
    encoder, tokenizer = load_encoder(str(bert_folder))
    assert tokenizer("the news")["input_ids"] == [2, 5, 6, 3]
    assert next(encoder.parameters()).dtype.is_floating_point


def test_training_on_a_model_folder_without_a_tokenizer_writes_no_run(bert_folder, tmp_path, capsys):
    from peftviz.training.trainer import train

    (bert_folder / "tokenizer.json").unlink()
    runs = tmp_path / "runs"
    config = preset_config("smoke", model=str(bert_folder), limit=20, epochs=1)
    with pytest.raises(ModelLoadError, match="has no tokenizer files"):
        train(config, runs_dir=runs)
    assert main(["train", "--preset", "smoke", "--model", str(bert_folder), "--runs-dir", str(runs)]) == 1
    assert "has no tokenizer files" in capsys.readouterr().err
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.slow  # starts the training worker as a child process
def test_the_training_worker_refuses_a_model_folder_without_a_tokenizer(bert_folder, tmp_path):
    """What the app's jobs run: the child process refuses the folder before it writes a run."""
    from peftviz.app.worker import sweep_in_child

    (bert_folder / "tokenizer.json").unlink()
    config = preset_config("smoke", model=str(bert_folder), limit=20, epochs=1)
    with pytest.raises(PeftvizError) as caught:
        sweep_in_child([config], tmp_path / "runs", lambda event: None)
    assert type(caught.value).__name__ == "ModelLoadError" and "has no tokenizer files" in str(caught.value)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


# ---------------------------------------------------------------------------------------------
# a run that lost its model setting


def test_a_run_without_its_model_setting_is_listed_corrupt_and_not_rebuilt(tmp_path):
    from peftviz.training.inference import load_trained
    from peftviz.training.trainer import train

    run = train(preset_config("smoke", limit=20, epochs=1), runs_dir=tmp_path / "runs")
    record = json.loads((run.path / "config.json").read_text())
    del record["model"]
    (run.path / "config.json").write_text(json.dumps(record))
    listed = load_run(run.path)
    assert listed.status == "corrupt"
    assert listed.error.startswith("config.json: the run names no model: config.json has no 'model' setting")
    with pytest.raises(PeftvizError, match=rf"^run {run.name}: config.json: the run names no model"):
        load_trained(listed)


# ---------------------------------------------------------------------------------------------
# the label, which names the run's folder


def test_a_label_too_long_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(ConfigError, match=rf"^label must be at most {MAX_LABEL_CHARS} characters, not 10000$"):
        preset_config("smoke", label="x" * 10000)
    runs = tmp_path / "runs"
    assert main(["train", "--preset", "smoke", "--label", "x" * 10000, "--runs-dir", str(runs)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"peftviz: error: label must be at most {MAX_LABEL_CHARS} characters, not 10000"
    assert not runs.exists()


def test_the_longest_label_makes_a_run_folder(tmp_path):
    """The slug of a label can be twice its length ('İ'.lower() is two characters): still a legal folder name,
    with room for the temporary name it is built under."""
    label = "İ" * MAX_LABEL_CHARS
    writer = RunWriter.create(tmp_path, preset_config("smoke", label=label), {})
    assert writer.path.is_dir() and len(writer.path.name) + 22 <= 255
    writer.close()
