"""A checkpoint's files, checked before peftviz trusts them: config.json, the tokenizer, the weights.

transformers reports a bad checkpoint in many ways, none of them a line a user can act on: a
strict-dataclass error for a config field of the wrong type, "not reachable on the hub" for a
config.json that is not JSON, an IndexError, AssertionError or ZeroDivisionError from a layer
built from a zero, negative or indivisible size, a tokenizer of five special tokens (every word
[UNK]) when the tokenizer's files are missing, a RuntimeError that points to a report it did not
print for weights that do not fit. Each is refused here with a one-line ModelLoadError naming the
file:

    config.json   a JSON object with a supported model_type; each field of the type its config class
                  declares (transformers' strict validation); the sizes the encoder is built from
                  positive, within typo-guard bounds and consistent (SIZES, check_values)
    tokenizer     its files present (vocab.txt, tokenizer.json, ...); it loads; it knows words besides
                  its special tokens, has a padding token, and its ids fit the model's embeddings
    weights       every weight of the model config.json describes, each of its shape, and no layer
                  beyond it: checked by a load on the meta device, which allocates nothing

`path` is what transformers loads (a folder or a hub id), `name` what the user wrote.
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path

from huggingface_hub.errors import StrictDataclassClassValidationError, StrictDataclassFieldValidationError
from transformers import AutoConfig, AutoTokenizer, PreTrainedConfig
from transformers.activations import ACT2FN
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES, tokenizer_class_from_name
from transformers.tokenization_utils_base import (
    ADDED_TOKENS_FILE,
    FULL_TOKENIZER_FILE,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
)
from transformers.utils import CONFIG_NAME, SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

from peftviz.errors import ModelLoadError
from peftviz.options import shown

# Model families whose self-attention dispatches through transformers' AttentionInterface with a
# `layer_idx`, and whose layers live at `model.encoder.layer[i].attention`.
BERT_LIKE_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert")
SUPPORTED_MODEL_TYPES = (*BERT_LIKE_MODEL_TYPES, "longformer")

# Sizes the encoder's tensors and modules are built from, which transformers does not check. Upper
# bounds are typo guards: beyond any encoder (the largest BERT-style ones have 48 layers, 4096 wide,
# XLM-R's 250k tokens), and low enough that building the model on the meta device stays instant.
SIZES = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
)
MAX_SIZE = 2**24
MAX_LAYERS = 256  # one module per layer is built, even on the meta device
DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob")
# tokenizer files that are JSON objects, when present (RoBERTa's vocab.json too)
JSON_TOKENIZER_FILES = (
    TOKENIZER_CONFIG_FILE,
    FULL_TOKENIZER_FILE,
    SPECIAL_TOKENS_MAP_FILE,
    ADDED_TOKENS_FILE,
    "vocab.json",
)
JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true or false"}


def local_folder(path: str) -> Path | None:
    """The folder `path` names, or None for a hub id."""
    folder = Path(path).expanduser()
    return folder if folder.is_dir() else None


def file_label(path: str, file: str) -> str:
    """How a message names one file of a checkpoint: `<folder>/config.json`, or `config.json of 'org/id'`."""
    return f"{path.rstrip('/')}/{file}" if local_folder(path) else f"{file} of '{path}'"


def first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def check_supported(model_type, name: str, label: str) -> None:
    """`label`: the config file that says the model type, which the message names first."""
    if model_type not in SUPPORTED_MODEL_TYPES:
        supported = ", ".join(SUPPORTED_MODEL_TYPES)
        raise ModelLoadError(f"{label}: model '{name}' is a {shown(model_type)} model; peftviz supports {supported}")


def read_json_object(file: Path, label: str) -> dict:
    """A JSON object file as transformers reads it (UTF-8 text), or a ModelLoadError saying what it holds."""
    try:
        text = file.read_text(encoding="utf-8")
        value = json.loads(text)
    except json.JSONDecodeError as err:
        if not text.strip():
            raise ModelLoadError(f"{label} is empty") from None
        raise ModelLoadError(f"{label} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
    except UnicodeDecodeError:
        raise ModelLoadError(f"{label} is not UTF-8 text") from None
    except RecursionError:
        raise ModelLoadError(f"{label} is not valid JSON: nested too deeply") from None
    except OSError as err:
        raise ModelLoadError(f"{label} cannot be read: {err.strerror or err}") from None
    if not isinstance(value, dict):
        raise ModelLoadError(f"{label} must hold a JSON object, not {JSON_KINDS.get(type(value), 'null')}")
    return value


# ---------------------------------------------------------------------------------------------
# config.json


def read_config(path: str, name: str) -> PreTrainedConfig:
    """The checkpoint's config, every field checked. A local config.json is read as JSON first: a
    file that is not JSON is not "unreachable", and a folder's model type is not guessed from its name."""
    label = file_label(path, CONFIG_NAME)
    folder = local_folder(path)
    if folder is not None:
        _check_model_type(read_json_object(folder / CONFIG_NAME, label), label, name)
    config = _auto_config(path, name, label, local=folder is not None)
    check_supported(config.model_type, name, label)
    problem = value_problem(config)
    if problem:
        raise ModelLoadError(f"{label}: {problem}")
    return config


def _check_model_type(raw: dict, label: str, name: str) -> None:
    if "model_type" not in raw:
        raise ModelLoadError(
            f"{label} has no model_type; add the model's family, one of {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if not isinstance(raw["model_type"], str):
        raise ModelLoadError(f"{label}: model_type must be a string, not {shown(raw['model_type'])}")
    check_supported(raw["model_type"], name, label)


def _auto_config(path: str, name: str, label: str, local: bool) -> PreTrainedConfig:
    try:
        return AutoConfig.from_pretrained(path)
    except (StrictDataclassFieldValidationError, StrictDataclassClassValidationError) as err:
        raise ModelLoadError(f"{label}: {_strict_cause(err)}") from None
    except OSError as err:
        if local:
            raise ModelLoadError(f"{label}: {first_line(err)}") from err
        raise ModelLoadError(
            f"cannot load model '{name}': not a local folder, and not reachable on the Hugging Face hub "
            f"({type(err).__name__})"
        ) from err
    except (ValueError, TypeError, AttributeError) as err:  # a field the config converts: dtype "foo" -> torch.foo
        raise ModelLoadError(f"{label}: {first_line(err)}") from err


def _strict_cause(err: Exception) -> str:
    """The line of a strict-dataclass error that names the field and its wrong value, without the
    per-alternative repetition a union type adds ("... Errors: ...")."""
    return first_line(err.__cause__ or err).split(". Errors: ")[0]


def value_problem(config: PreTrainedConfig) -> str | None:
    """What is wrong with the values of a config whose types transformers has checked, or None."""
    for check in (_size_problem, _heads_problem, _pad_problem, _activation_problem, _float_problem, _window_problem):
        problem = check(config)
        if problem:
            return problem
    return None


def _size_problem(config) -> str | None:
    for size in SIZES:
        value = getattr(config, size)
        limit = MAX_LAYERS if size == "num_hidden_layers" else MAX_SIZE
        if not 1 <= value <= limit:
            return f"{size} must be {'>= 1' if value < 1 else f'<= {limit}'}, not {shown(value)}"
    return None


def _heads_problem(config) -> str | None:
    if config.hidden_size % config.num_attention_heads:
        return f"hidden_size {config.hidden_size} is not a multiple of num_attention_heads {config.num_attention_heads}"
    return None


def _pad_problem(config) -> str | None:
    pad = config.pad_token_id
    if pad is not None and not 0 <= pad < config.vocab_size:
        return f"pad_token_id {shown(pad)} is not a token id of the vocabulary (0 to {config.vocab_size - 1})"
    if pad is None and config.model_type != "bert":  # RoBERTa-style positions are numbered from the padding id
        return f"a {config.model_type} model needs a pad_token_id"
    return None


def _activation_problem(config) -> str | None:
    if config.hidden_act not in ACT2FN:
        return f"hidden_act {shown(config.hidden_act)} is not an activation transformers knows"
    return None


def _float_problem(config) -> str | None:
    for name in DROPOUTS:
        if not 0 <= getattr(config, name) <= 1:  # NaN too
            return f"{name} must be in [0, 1], not {shown(getattr(config, name))}"
    if not 0 < config.layer_norm_eps < math.inf:
        return f"layer_norm_eps must be a positive number, not {shown(config.layer_norm_eps)}"
    return None


def _window_problem(config) -> str | None:
    """A Longformer's attention window: one even positive width, or one per layer."""
    if config.model_type != "longformer":
        return None
    window = config.attention_window
    windows = [window] * config.num_hidden_layers if isinstance(window, int) else window
    if len(windows) != config.num_hidden_layers:
        return f"attention_window lists {len(windows)} widths for {config.num_hidden_layers} layers"
    if not all(isinstance(width, int) and 0 < width <= MAX_SIZE and width % 2 == 0 for width in windows):
        return f"attention_window must be positive even widths, not {shown(window)}"
    return None


# ---------------------------------------------------------------------------------------------
# the tokenizer


def read_tokenizer(path: str, name: str, config: PreTrainedConfig):
    """The checkpoint's tokenizer, refused if its files are missing or it is not the model's."""
    folder = local_folder(path)
    if folder is not None:
        _check_tokenizer_files(folder, path, name, config.model_type)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    # A damaged tokenizer file surfaces as anything: tokenizers raises a bare Exception for a
    # vocabulary without [UNK], transformers a KeyError, TypeError or AttributeError for a file of
    # the wrong shape. This call reads only the tokenizer's files, so any error is about them.
    except Exception as err:
        raise ModelLoadError(f"cannot load the tokenizer of '{name}'{_files_in(folder)}: {first_line(err)}") from err
    _check_tokenizer(tokenizer, path, name, config, folder)
    return tokenizer


def vocabulary_files(model_type: str) -> tuple[str, ...]:
    """The files a model type's tokenizer is read from, as transformers names them (vocab.txt, tokenizer.json, ...)."""
    return tuple(tokenizer_class_from_name(TOKENIZER_MAPPING_NAMES[model_type]).vocab_files_names.values())


@functools.cache
def known_vocabulary_files() -> frozenset[str]:
    """Every supported family's tokenizer files: a folder may pair a RoBERTa model with a WordPiece tokenizer."""
    return frozenset(file for model in SUPPORTED_MODEL_TYPES for file in vocabulary_files(model))


def _needed_files(model_type: str) -> str:
    """'tokenizer.json, or vocab.txt': the full tokenizer file, or the files of the slow format."""
    others = [file for file in vocabulary_files(model_type) if file != FULL_TOKENIZER_FILE]
    return f"{FULL_TOKENIZER_FILE}, or {' and '.join(others)}" if others else FULL_TOKENIZER_FILE


def _check_tokenizer_files(folder: Path, path: str, name: str, model_type: str) -> None:
    """Some vocabulary file must be there and not empty; JSON tokenizer files must hold objects."""
    if not any((folder / file).is_file() and (folder / file).stat().st_size for file in known_vocabulary_files()):
        raise ModelLoadError(
            f"model folder '{name}' has no tokenizer files: it needs {_needed_files(model_type)}, as the "
            "tokenizer's save_pretrained writes them; without them every word would be unknown"
        )
    for file in JSON_TOKENIZER_FILES:
        if (folder / file).is_file():
            read_json_object(folder / file, file_label(path, file))


def _files_in(folder: Path | None) -> str:
    """' (tokenizer.json, vocab.txt)': the tokenizer files of a folder, for a message about them."""
    if folder is None:
        return ""
    present = sorted(file for file in known_vocabulary_files() if (folder / file).is_file())
    return f" ({', '.join(present)})" if present else ""


def _check_tokenizer(tokenizer, path: str, name: str, config: PreTrainedConfig, folder: Path | None) -> None:
    """A tokenizer that would turn every word into [UNK], could not pad a batch, or gives ids past the
    embeddings (an IndexError mid-training) is refused now."""
    who = f"the tokenizer of '{name}'{_files_in(folder)}"
    vocabulary = tokenizer.get_vocab()
    specials = set(tokenizer.all_special_ids)
    if len(set(vocabulary.values()) - specials) == 0:
        raise ModelLoadError(
            f"{who} knows no words, only its {len(specials)} special tokens: every word would be unknown"
        )
    if tokenizer.pad_token_id is None:
        raise ModelLoadError(f"{who} has no padding token (pad_token), which batches of texts need")
    top = max(vocabulary.values())
    if top >= config.vocab_size:
        raise ModelLoadError(
            f"{who} has ids up to {top}, beyond the {config.vocab_size} rows of the model's embeddings "
            f"(vocab_size in {file_label(path, CONFIG_NAME)}): it is not the model's tokenizer"
        )


# ---------------------------------------------------------------------------------------------
# the weights


def check_weights_present(path: str, name: str) -> None:
    """A local folder must hold safetensors weights (pickled ones are refused before this, by the caller)."""
    folder = local_folder(path)
    if folder is None or any(folder.glob("*.safetensors")) or (folder / SAFE_WEIGHTS_INDEX_NAME).is_file():
        return
    raise ModelLoadError(f"model folder '{name}' has no weights: no {SAFE_WEIGHTS_NAME}")


def weights_label(path: str) -> str:
    folder = local_folder(path)
    if folder is None or (folder / SAFE_WEIGHTS_NAME).is_file():
        return file_label(path, SAFE_WEIGHTS_NAME)
    return file_label(path, SAFE_WEIGHTS_INDEX_NAME)


def check_weights_fit(info: dict, path: str, config: PreTrainedConfig) -> None:
    """Refuse weights that do not make the model config.json describes, from the loading info of a
    load on the meta device: a weight of another shape, a weight the file lacks (it would be random),
    or a layer beyond num_hidden_layers (the model would silently be shallower). Other unexpected
    weights (a pooler, a masked-LM head, old buffers) belong to no encoder and are left out."""
    weights, described = weights_label(path), file_label(path, CONFIG_NAME)
    if info["mismatched_keys"]:
        key, in_file, in_model = min(info["mismatched_keys"])
        raise ModelLoadError(
            f"{weights} does not fit {described}: {key} is {tuple(in_file)} in the weights, {tuple(in_model)} "
            f"in the model config.json describes"
        )
    if info["missing_keys"]:
        missing = sorted(info["missing_keys"])
        raise ModelLoadError(
            f"{weights} lacks {len(missing)} weights of the model {described} describes, e.g. {missing[0]}"
        )
    extra = sorted(key for key in info["unexpected_keys"] if re.match(r"encoder\.layer\.\d+\.", key))
    if extra:
        raise ModelLoadError(
            f"{weights} holds layers that {described} does not describe (num_hidden_layers "
            f"{config.num_hidden_layers}), e.g. {extra[0]}"
        )
