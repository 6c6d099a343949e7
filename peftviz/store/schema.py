"""The run store's schema: what each file of a run folder must hold, checked on every read.

A run folder is untrusted input: it may have been damaged by hand, by a kill, or by a copy. Every
reader goes through this module, which checks before it reads (regular file, not a link, size
within its limit, npz and safetensors headers against the file's size) and checks what it read
(types, ranges, shapes). A violation raises `Corrupt`, whose message is `<file>: <field> <problem>`;
`store.runs.load_run` turns it into a run with status "corrupt", which every page and the CLI list.

    config.json         a TrainConfig (earlier versions migrated by `store.migrations`, then each setting
                        checked by `TrainConfig.from_dict`) plus the record:
                        label_names (>= 2 distinct strings), parameters (name -> count <= MAX_COUNT),
                        environment (an object), data_sha256 (64 hex digits or null; optional),
                        attempts (who trained it), imported (an evaluation-only run's origin; optional),
                        repeat_of (the run folder's name a forced repeat repeats; optional),
                        recorded (a run another training loop recorded: by, settings; optional)
    metrics.jsonl       one object per line: epoch (1, 2, ... in order), every other value a number
    summary.json        status "complete" or "failed" (FINISHED); error (text); params_epoch (the epoch the
                        parameters belong to); test and other evaluations (name -> number)
    predictions/*.npz   probs (N, C) float32/64, labels (N,) integer; C = len(label_names)
    params.safetensors  header checked against the file; metadata "epoch" = the epoch it holds; a recorded
                        run has none (its metrics line commits an epoch)
    resume.safetensors  metadata "epoch": the training state at the end of that epoch; under fp16
                        also "scaler": the loss scaler's state as JSON (`scaler_state`)
    writer.lock         while a process writes the run (`store.writer.WriterLock`); read only to ask whether
                        the writer lives, never trusted beyond its host name
    analysis/           the analysis caches (`store.caches` writes them): not read here. Each cache's format
                        is defined, written and checked on every read by the module that computes it,
                        with this module's checks (`Corrupt`, `read_json`, ANALYSIS_LIMIT); a bad cache
                        is ignored and computed again:
      alpha_sweep.json  the α sweeps: `peftviz.analysis.kernel` (`read_alpha_sweeps`, `check_alpha_sweep`)
      estimates/*.npz   point estimates and bootstrap draws: `peftviz.analysis.estimates` (`read_estimates`)

Names read from the store are never used as paths: an epoch is an integer, an evaluation name
matches EVALUATION_NAME. The store's vocabularies (ENGINES, IMPORT_KINDS, STATUSES) are defined here
once, and imported where they are checked or offered (the sweep, the CLI, the exchange). This module
imports no torch.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import struct
import zipfile
from pathlib import Path

import numpy as np

from peftviz.errors import RunError
from peftviz.files import MB, FileProblem, check_regular, read_text
from peftviz.options import shown

JSON_LIMITS = {"config.json": 1 * MB, "metrics.jsonl": 16 * MB, "summary.json": 4 * MB}
ANALYSIS_LIMIT = 16 * MB
PREDICTIONS_LIMIT = 1024 * MB  # 33k documents × 20 classes is 2.6 MB: this bounds memory, not use
PARAMS_LIMIT = 64 * 1024 * MB  # a fully fine-tuned large encoder in float32
SAFETENSORS_HEADER_LIMIT = 64 * MB
SHA256 = re.compile(r"[0-9a-f]{64}")
EVALUATION_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")  # "test", "averaged", "averaged_test", "epoch_3"
FLOAT_KINDS, INT_KINDS = "f", "iu"
MAX_COUNT = 10**15  # a parameter count: the largest models have ~10^12; a huge count would overflow a float
ROW_SUM_TOLERANCE = 1e-4  # float32 softmax rows sum to 1 within ~1e-6 per class
SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1}
SAFETENSORS_BYTES |= {"BOOL": 1, "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}

PARAMS_FILE, RESUME_FILE, LOCK_FILE = "params.safetensors", "resume.safetensors", "writer.lock"

# ---------------------------------------------------------------------------------------------
# the vocabularies: each defined here once, and imported wherever it is used

ENGINES = ("local", "ray")  # what trained a run: attempts[].engine (`peftviz.sweep`, the CLI's --engine)
# where an imported run's model came from: imported.kind (`peftviz.exchange.sources` finds it, `.imports` loads it)
PEFT_ADAPTER, HF_CLASSIFIER, PEFTVIZ_EXPORT = "peft-adapter", "hf-classifier", "peftviz"
IMPORT_KINDS = (PEFT_ADAPTER, HF_CLASSIFIER, PEFTVIZ_EXPORT)
# what recorded a run another training loop trained: recorded.by (`peftviz.record`, `peftviz.integrations`)
RECORDERS = ("recorder", "transformers-trainer")
RECORDED_SETTING_CHARS = 200  # a recorded setting's text: a scheduler's name, a path; not a document
MAX_RECORDED_INT = 2**64  # a recorded setting's integer: a seed or a count of 64 bits, not a 400-digit number
SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")  # a recorded setting's or value's name: a word
COMPLETE, FAILED = "complete", "failed"
FINISHED = (COMPLETE, FAILED)  # what summary.json says of a run that ended
STATUSES = (COMPLETE, "training", "incomplete", FAILED, "corrupt")  # a run as read back (`store.runs.Run.status`)


class Corrupt(RunError):
    """One file of a run folder violates the schema: `<file>: <field> <problem>`."""

    def __init__(self, file: str, problem: str):
        super().__init__(f"{file}: {problem}".splitlines()[0])
        self.file = file


# ---------------------------------------------------------------------------------------------
# values


def is_number(value) -> bool:
    """An int or a float, not a bool (JSON's numbers)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def shown_value(value) -> str:
    """A value as a check's message shows it: JSON, cut to 40 characters."""
    try:
        text = json.dumps(value) if not isinstance(value, float) else repr(value)
    except (TypeError, ValueError):  # not JSON (a numpy number, a set), or an int beyond str()'s digits
        return shown(value)
    return text if len(text) <= 40 else text[:37] + "..."


def number(value, file: str, field: str) -> float:
    if not is_number(value):
        raise Corrupt(file, f"{field} must be a number, not {shown_value(value)}")
    return value


def integer(value, file: str, field: str, low: int = 0, high: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise Corrupt(file, f"{field} must be an integer, not {shown_value(value)}")
    if value < low:
        raise Corrupt(file, f"{field} must be at least {low}, not {shown_value(value)}")
    if high is not None and value > high:
        raise Corrupt(file, f"{field} must be at most {high}, not {shown_value(value)}")
    return value


def mapping(value, file: str, field: str) -> dict:
    if not isinstance(value, dict):
        raise Corrupt(file, f"{field} must be an object, not {shown_value(value)}")
    return value


def one_of(value, choices: tuple[str, ...], file: str, field: str) -> str:
    if value not in choices:
        raise Corrupt(file, f"{field} must be one of {', '.join(choices)}, not {shown_value(value)}")
    return value


def texts(record: dict, names: tuple[str, ...], file: str, field: str) -> None:
    """record[name] is text for each of `names`."""
    for name in names:
        if not isinstance(record.get(name), str):
            raise Corrupt(file, f"{field}.{name} must be text, not {shown_value(record.get(name))}")


def each_value(value, file: str, field: str, check) -> dict:
    """An object whose every value passes `check` (`number`, `integer`), each named `<field>.<name>`."""
    for name, item in mapping(value, file, field).items():
        check(item, file, f"{field}.{name}")
    return value


def numbers(value, file: str, field: str) -> dict[str, float]:
    """An object of name -> number (metrics)."""
    return each_value(value, file, field, number)


def counts(value, file: str, field: str) -> dict[str, int]:
    """An object of name -> integer in [0, MAX_COUNT] (parameter counts)."""
    return each_value(value, file, field, functools.partial(integer, high=MAX_COUNT))


# ---------------------------------------------------------------------------------------------
# JSON files


def read_json(path: Path, file: str, limit: int):
    """A JSON file of the store: a regular file (no link), within `limit`, parsed."""
    try:
        text = read_text(path, limit, follow_symlinks=False)
    except FileProblem as problem:
        raise Corrupt(file, f"the file {problem}") from None
    try:
        return json.loads(text)
    except ValueError as err:
        raise Corrupt(file, f"is not JSON ({getattr(err, 'msg', err)}, line {getattr(err, 'lineno', '?')})") from None


def read_json_lines(path: Path, file: str, limit: int) -> list:
    try:
        text = read_text(path, limit, follow_symlinks=False)
    except FileProblem as problem:
        raise Corrupt(file, f"the file {problem}") from None
    lines = []
    for number_, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                lines.append(json.loads(line))
            except ValueError as err:
                raise Corrupt(file, f"line {number_} is not JSON ({getattr(err, 'msg', err)})") from None
    return lines


# ---------------------------------------------------------------------------------------------
# the records


def _label_names(names, file: str, field: str) -> None:
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise Corrupt(file, f"{field} must be a list of strings, not {shown_value(names)}")
    if len(names) < 2 or len(set(names)) != len(names):
        raise Corrupt(file, f"{field} must be at least two distinct names, not {shown_value(names)}")


def _data_sha256(digest, file: str, field: str) -> None:
    if digest is not None and not (isinstance(digest, str) and SHA256.fullmatch(digest)):
        raise Corrupt(file, f"{field} must be 64 hex digits or null, not {shown_value(digest)}")


def _attempts(attempts, file: str, field: str) -> None:
    """Each process that trained the run: {"engine", "node", "started", "from_epoch"}; a resume adds one."""
    if not isinstance(attempts, list):
        raise Corrupt(file, f"{field} must be a list, not {shown_value(attempts)}")
    for index, attempt in enumerate(attempts, start=1):
        where = f"{field}[{index}]"
        mapping(attempt, file, where)
        one_of(attempt.get("engine"), ENGINES, file, f"{where}.engine")
        texts(attempt, ("node", "started"), file, where)
        integer(attempt.get("from_epoch"), file, f"{where}.from_epoch")


def _imported(imported, file: str, field: str) -> None:
    """An evaluation-only run's origin (`peftviz.exchange`): kind, source, revision (text or null),
    files (name -> sha256 of each file read), labels ("by name" or "by position")."""
    if imported is None:
        return
    mapping(imported, file, field)
    one_of(imported.get("kind"), IMPORT_KINDS, file, f"{field}.kind")
    texts(imported, ("source", "labels"), file, field)
    if not isinstance(imported.get("revision"), (str, type(None))):
        raise Corrupt(file, f"{field}.revision must be text or null, not {shown_value(imported.get('revision'))}")
    files = mapping(imported.get("files"), file, f"{field}.files")
    for name, digest in files.items():
        if not (isinstance(digest, str) and SHA256.fullmatch(digest)):
            raise Corrupt(file, f"{field}.files[{shown_value(name)}] must be 64 hex digits, not {shown_value(digest)}")


FOLDER_NAME = re.compile(r"[^/\\\x00]{1,255}")  # one folder's name: no separator, at most a file name's 255


def _repeat_of(name, file: str, field: str) -> None:
    """The run folder (its name, in the same store) that a run trained anew with force repeats: same
    settings, same seed. A name, never a path: a listing must not be steered to other folders."""
    if name is None:
        return
    if not (isinstance(name, str) and FOLDER_NAME.fullmatch(name) and name not in (".", "..")):
        raise Corrupt(file, f"{field} must be a run folder's name or null, not {shown_value(name)}")


def check_recorded_settings(settings, file: str, field: str) -> dict:
    """A recorded run's settings that are not peftviz's: word -> a number, text (<= RECORDED_SETTING_CHARS),
    true/false or null. What a training loop says it used; shown and grouped by, never acted on."""
    for name, value in mapping(settings, file, field).items():
        if not SETTING_NAME.fullmatch(name):
            raise Corrupt(
                file, f"{field} has a setting named {shown_value(name)}; names are words (letters, digits, _ . -)"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise Corrupt(file, f"{field}.{name} must be finite, not {value}")
        if isinstance(value, int) and abs(value) > MAX_RECORDED_INT:
            raise Corrupt(file, f"{field}.{name} must be at most 2^64 in magnitude, not {shown_value(value)}")
        if isinstance(value, str) and len(value) > RECORDED_SETTING_CHARS:
            raise Corrupt(file, f"{field}.{name} is {len(value)} characters; at most {RECORDED_SETTING_CHARS}")
        if not isinstance(value, (str, int, float, bool, type(None))):
            raise Corrupt(file, f"{field}.{name} must be a number, text, true/false or null, not {shown_value(value)}")
    return settings


def _recorded(recorded, file: str, field: str) -> None:
    """A run another training loop trained and recorded (`peftviz.record`): by (RECORDERS), settings, and
    given: the names of the run settings (TrainConfig fields) the loop gave; the others are defaults that
    describe nothing of the run."""
    if recorded is None:
        return
    mapping(recorded, file, field)
    one_of(recorded.get("by"), RECORDERS, file, f"{field}.by")
    check_recorded_settings(recorded.get("settings"), file, f"{field}.settings")
    given = recorded.get("given", [])
    if not isinstance(given, list) or not all(isinstance(name, str) and SETTING_NAME.fullmatch(name) for name in given):
        raise Corrupt(file, f"{field}.given must be a list of setting names, not {shown_value(given)}")


# what config.json records besides the settings: field -> (its value when absent, its check)
RECORD_FIELDS = {
    "label_names": (None, _label_names),
    "parameters": ({}, counts),
    "environment": ({}, mapping),
    "data_sha256": (None, _data_sha256),  # runs from before it was recorded, and hub data, have none
    "attempts": ([], _attempts),  # runs from before it was recorded have none
    "imported": (None, _imported),  # runs peftviz trained have none
    "repeat_of": (None, _repeat_of),  # only on a run forced beside an existing one of its key and seed
    "recorded": (None, _recorded),  # only on a run another training loop recorded
}


def check_record(record: dict) -> None:
    """What config.json holds besides the settings."""
    for name, (absent, check) in RECORD_FIELDS.items():
        check(record.get(name, absent), "config.json", name)


def readable_record(record) -> dict:
    """config.json of a corrupt run as far as a listing may read it: the recorded fields that fail
    their check left out, so that the row showing why the run is corrupt cannot fail on them."""
    if not isinstance(record, dict):
        return {}
    return {name: value for name, value in record.items() if name not in RECORD_FIELDS or _passes(name, value)}


def _passes(name: str, value) -> bool:
    try:
        RECORD_FIELDS[name][1](value, "config.json", name)
    except Corrupt:
        return False
    return True


def check_metrics(lines: list) -> list[dict]:
    """metrics.jsonl: epochs 1, 2, ... in order; micro_f1, accuracy and ece present; all values numbers."""
    file = "metrics.jsonl"
    for index, line in enumerate(lines, start=1):
        where = f"line {index}"
        mapping(line, file, where)
        epoch = integer(line.get("epoch"), file, f"{where}: epoch", low=1)
        if epoch != index:
            raise Corrupt(file, f"{where}: epoch is {epoch}; the lines must be epochs 1, 2, ... in order")
        for name in ("micro_f1", "accuracy", "ece"):
            if name not in line:
                raise Corrupt(file, f"{where}: {name} is missing")
        for name, value in line.items():
            number(value, file, f"{where}: {name}")
    return lines


def check_summary(summary) -> dict:
    """summary.json: status, error, params_epoch, then evaluations (test, and e.g. averaged)."""
    file = "summary.json"
    mapping(summary, file, "the file")
    if summary.get("status") not in FINISHED:
        finished = " or ".join(json.dumps(status) for status in FINISHED)
        raise Corrupt(file, f"status must be {finished}, not {shown_value(summary.get('status'))}")
    if not isinstance(summary.get("error", ""), str):
        raise Corrupt(file, f"error must be text, not {shown_value(summary['error'])}")
    if "params_epoch" in summary:
        integer(summary["params_epoch"], file, "params_epoch", low=1)
    for name, value in summary.items():
        if name in ("status", "error", "params_epoch"):
            continue
        evaluation = mapping(value, file, name)
        if all(is_number(item) for item in evaluation.values()):
            continue  # metrics, e.g. "test"
        for part, item in evaluation.items():  # a changed model's evaluations, e.g. "averaged"
            (numbers if part != "parameters" else counts)(item, file, f"{name}.{part}")
    return summary


def check_evaluation_name(name: str) -> str:
    if not isinstance(name, str) or not EVALUATION_NAME.match(name):
        raise RunError(f"{name!r} is not an evaluation name (lower-case letters, digits and _)")
    return name


def evaluation_name(which: int | str) -> str:
    """The predictions file a `which` names: "epoch_<n>" for a validation epoch, else the checked name ("test")."""
    return f"epoch_{int(which)}" if isinstance(which, int) else check_evaluation_name(which)


# ---------------------------------------------------------------------------------------------
# predictions (npz)


def _array_header(archive: zipfile.ZipFile, name: str, file: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from an npz member's header, checked against the member's size before any read."""
    try:
        info = archive.getinfo(f"{name}.npy")
    except KeyError:
        raise Corrupt(file, f"{name} is missing") from None
    if info.file_size > PREDICTIONS_LIMIT:
        raise Corrupt(file, f"{name} is {info.file_size} bytes; the limit is {PREDICTIONS_LIMIT}")
    try:
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read_header:
                raise ValueError(f"npy format version {version}")
            shape, _, dtype = read_header[version](member, max_header_size=10_000)
            header_size = member.tell()
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, SyntaxError) as err:
        raise Corrupt(file, f"{name} has no valid array header ({str(err)[:60]})") from None
    if dtype.hasobject:
        raise Corrupt(file, f"{name} holds Python objects")
    data_size = math.prod(shape) * dtype.itemsize
    if header_size + data_size != info.file_size:
        raise Corrupt(file, f"{name}'s header says shape {shape} of {dtype}, which the stored bytes do not hold")
    return shape, dtype


def predictions_header(path: Path, n_classes: int) -> int:
    """Check an npz's headers (no data read): probs (N, C) float, labels (N,) integer; returns N.

    A checked file is remembered by its inode, time and size: the store replaces files, never
    edits them, so listing the store again reads only what changed."""
    try:
        info = os.stat(path, follow_symlinks=False)
        identity = (info.st_ino, info.st_mtime_ns, info.st_size)
    except OSError:
        identity = None
    return _checked_predictions_header(Path(path), n_classes, identity)


@functools.lru_cache(maxsize=100_000)
def _checked_predictions_header(path: Path, n_classes: int, identity: tuple | None) -> int:
    file = f"predictions/{path.name}"
    try:
        check_regular(path, PREDICTIONS_LIMIT, follow_symlinks=False)
        with zipfile.ZipFile(path) as archive:
            probs_shape, probs_dtype = _array_header(archive, "probs", file)
            labels_shape, labels_dtype = _array_header(archive, "labels", file)
    except FileProblem as problem:
        raise Corrupt(file, f"the file {problem}") from None
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise Corrupt(file, f"the file is not an npz archive ({str(err)[:60]})") from None
    if len(probs_shape) != 2 or probs_shape[1] != n_classes or probs_dtype.kind not in FLOAT_KINDS:
        raise Corrupt(file, f"probs must be (examples, {n_classes}) floats, not {probs_shape} {probs_dtype}")
    if labels_shape != probs_shape[:1] or labels_dtype.kind not in INT_KINDS:
        raise Corrupt(file, f"labels must be ({probs_shape[0]},) integers, not {labels_shape} {labels_dtype}")
    return probs_shape[0]


def read_predictions(path: Path, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(probs (N, C), labels (N,)) after the header checks; values: probabilities and class ids."""
    file = f"predictions/{path.name}"
    predictions_header(path, n_classes)
    try:
        with np.load(path, allow_pickle=False) as npz:
            probs, labels = npz["probs"], npz["labels"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        raise Corrupt(file, f"the file cannot be read ({str(err)[:60]})") from None
    problem = predictions_problem(probs, labels, n_classes)
    if problem:
        raise Corrupt(file, problem)
    return probs, labels


def predictions_problem(probs: np.ndarray, labels: np.ndarray, n_classes: int) -> str | None:
    """What is wrong with the values of probs (N, C) and labels (N,), shapes already checked, in one line;
    None when nothing is: probabilities in [0, 1] whose rows sum to 1, labels class ids 0..C-1."""
    if not np.isfinite(probs).all():
        return f"probs must be probabilities in [0, 1]; {np.count_nonzero(~np.isfinite(probs))} are NaN or inf"
    if (probs < 0).any() or (probs > 1).any():
        return f"probs must be probabilities in [0, 1]; found values from {probs.min():.4g} to {probs.max():.4g}"
    off_by = np.abs(probs.sum(axis=1, dtype=np.float64) - 1.0)  # (N,)
    if (off_by > ROW_SUM_TOLERANCE).any():
        worst = int(np.argmax(off_by))
        return (
            f"each row of probs must sum to 1; {int((off_by > ROW_SUM_TOLERANCE).sum())} of {len(probs)} rows do "
            f"not (row {worst} sums to {probs[worst].sum(dtype=np.float64):.6g})"
        )
    if len(labels) and (labels.min() < 0 or labels.max() >= n_classes):
        return f"labels must be class ids 0..{n_classes - 1}; found {int(labels.min())} to {int(labels.max())}"
    return None


# ---------------------------------------------------------------------------------------------
# safetensors


def safetensors_header(path: Path, file: str) -> dict:
    """The header of a safetensors file, every tensor's bytes checked against the file: {"__metadata__": ...,
    name: {"dtype", "shape", "data_offsets"}}. The same checks the safetensors library makes, without torch."""
    try:
        size = check_regular(path, PARAMS_LIMIT, follow_symlinks=False)
        with open(path, "rb") as f:
            prefix = f.read(8)
            header_size = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else -1
            if not 0 < header_size <= min(SAFETENSORS_HEADER_LIMIT, size - 8):
                raise Corrupt(file, "the file has no valid safetensors header")
            header = json.loads(f.read(header_size))
    except Corrupt:
        raise
    except FileProblem as problem:
        raise Corrupt(file, f"the file {problem}") from None
    except (OSError, ValueError) as err:
        raise Corrupt(file, f"the file has no valid safetensors header ({str(err)[:60]})") from None
    data_size = size - 8 - header_size
    for name, entry in mapping(header, file, "the header").items():
        if name != "__metadata__":
            _check_tensor_entry(name, entry, data_size, file)
    return header


def _check_tensor_entry(name: str, entry, data_size: int, file: str) -> None:
    entry = mapping(entry, file, name)
    shape, offsets, dtype = entry.get("shape"), entry.get("data_offsets"), entry.get("dtype")
    shape_ok = isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
    offsets_ok = isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
    if not (shape_ok and offsets_ok and dtype in SAFETENSORS_BYTES):
        raise Corrupt(file, f"{name} has no valid shape, dtype and offsets")
    start, end = offsets
    if not 0 <= start <= end <= data_size or end - start != math.prod(shape) * SAFETENSORS_BYTES[dtype]:
        raise Corrupt(file, f"{name}'s shape {shape} of {dtype} does not match its stored bytes")


def stored_epoch(header: dict, file: str) -> int | None:
    """The epoch a parameters file belongs to (its metadata), or None for files from before it was recorded."""
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict) or "epoch" not in metadata:
        return None
    text = metadata["epoch"]
    if not isinstance(text, str) or not text.isdigit() or int(text) < 1:
        raise Corrupt(file, f"metadata epoch must be a whole number >= 1, not {shown_value(text)}")
    return int(text)


# fp16's loss scaler (torch.amp.GradScaler.state_dict): name -> (what it must be, the test); counts apart
SCALER_NUMBERS = {
    "scale": ("a number > 0", lambda value: 0 < value < math.inf),
    "growth_factor": ("a number > 1", lambda value: 1 < value < math.inf),
    "backoff_factor": ("in (0, 1)", lambda value: 0 < value < 1),
}
SCALER_COUNTS = {"growth_interval": 1, "_growth_tracker": 0}  # name -> its least value


def scaler_state(metadata: dict, file: str) -> dict | None:
    """The loss scaler's state stored in a resume file's metadata ("scaler", JSON), every field checked;
    None where there is none: bf16 and fp32 runs scale no loss, and older files did not keep it."""
    text = metadata.get("scaler")
    if text is None:
        return None
    field = "metadata scaler"
    if not isinstance(text, str):  # safetensors metadata holds text only
        raise Corrupt(file, f"{field} must be JSON text, not {shown_value(text)}")
    try:
        state = json.loads(text)
    except ValueError as err:
        raise Corrupt(file, f"{field} is not JSON ({getattr(err, 'msg', err)})") from None
    mapping(state, file, field)
    for name, (what, within) in SCALER_NUMBERS.items():
        value = state.get(name)
        if not (is_number(value) and within(value)):  # NaN fails every comparison
            raise Corrupt(file, f"{field}.{name} must be {what}, not {shown_value(value)}")
    for name, low in SCALER_COUNTS.items():
        integer(state.get(name), file, f"{field}.{name}", low=low)
    return state
