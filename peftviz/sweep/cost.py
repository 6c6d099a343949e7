"""What a sweep costs before it runs: a step-time probe on this machine's device, and every run's steps and hours.

    probe(model, methods, lengths, batch_size, device, precision)  -> StepTimes   (seconds to a minute on a GPU)
    expected_batch_length(stats, max_length, B)                      -> tokens of an average padded batch
    run_cost(config, stats, step_times)                              -> RunCost: steps, batches, seconds, hours
    plan_table(configs, step_times, stats_of, actions)               -> Plan: one row per run, the totals, what it
                                                                        left out or counted otherwise
    save_step_times(times, path), load_step_times(path)              -> a probe as JSON, and back, checked

**The probe.** For each method, the classifier is built once on an encoder with random weights (weights do not
change timings): from the checkpoint's config.json where it is readable here without the network (a local
folder, the Hugging Face cache, peftviz's own encoders), else from a recorded architecture,
`RECORDED_ARCHITECTURES` (allenai/longformer-base-4096: LongformerConfig with vocabulary 50,265, hidden 768,
12 layers, 12 heads, intermediate 3,072, attention window 512, 4,098 positions, as its hub config.json at
https://huggingface.co/allenai/longformer-base-4096/blob/main/config.json), and the output says which. At each
probe length T and batch B, with input ids (B, T) of real tokens, it times one warm-up and then `steps`
training micro-batches, each split into forward + backward and the AdamW step that follows it (the trainer's
`make_optimizer`, gradient clipping included), then one warm-up and `steps` inference batches (eval, no
gradients); each time is the median, under the precision's autocast as the engine runs it. On a GPU the
probe uses the run's own batch size and lengths up to max_length; on a CPU, where a Longformer-base step at
4096 × 8 takes minutes, it probes at batch 1 and lengths up to 1024 (`CPU_LENGTHS`) and extrapolates.

**Extrapolation** (`StepTimes.seconds`): time is taken as linear in the batch size, t(B) = t(B_probe) · B / B_probe
(no fixed per-step cost: an overestimate when B < B_probe and a small underestimate above), and piecewise-linear
in T between probed lengths; beyond the longest, proportional to T from the longest, t(T) = t(T_max) · T / T_max (a
Longformer's banded attention does O(T · window) work, so its step's work is linear in T; taking it through the
origin counts no fixed cost, an overestimate where there is one, and rests on one measured point, where the line
through the two longest would multiply their noise on a shared CPU by T / (T_max - T_prev)); below the shortest,
the shortest's time (an upper bound, as time grows with T). Every extrapolation is listed in `StepTimes.notes`.

**Padded batch length.** The trainer's loader pads each batch to its longest document (`inference.collate`), and
documents are truncated at max_length L (`inference.tokenize`). With the dataset's recorded length quantiles
(p_k, q_k) and the quantile function Q interpolated linearly between them (flat below the lowest level; above
the highest, the last segment's line continued to level 1, as the recorded levels of `peftviz.data.paper_stats`
stop at 0.95 and the longest of B documents lies above it with probability 1 - 0.95^B, 34% at B 8), a document's length is Q(U), U uniform, and the longest of B independent ones is Q(V) with V
the largest of B uniforms, whose density is B v^(B-1). So

    E[batch length] = ∫_0^1 min(Q(v), L) · B v^(B-1) dv

and on a segment where f = min(Q, L) is linear, f(v) = a + s v, the integral is exact:
a (v1^B - v0^B) + s B / (B + 1) (v1^(B+1) - v0^(B+1)) (breakpoints: the recorded levels and where Q crosses L).
A batch's time is taken at the expected length, t(E[T]), exact where t is linear in T.

**A run** (`run_cost`), as the trainer runs it (trainer.py): micro-batches per epoch n_mb = ceil(N_train / B),
optimiser steps per epoch ceil(n_mb / k) = ceil(N_train / (B k)) with k = effective batch / B; validation
after every epoch and the test split once at the end, in batches of B:

    seconds = epochs · n_mb · t_fb(T̄) + epochs · ceil(n_mb / k) · t_opt
              + (epochs · ceil(N_val / B) + ceil(N_test / B)) · t_infer(T̄),     hours = seconds / 3600

N_train, N_val and N_test are the recorded split sizes, each cut to the run's `limit` where it has one
(`split_sizes`: `load_data` keeps at most that many documents of every split). Every batch counts as full (the
last one of a split is smaller: an overestimate of at most one batch per split and epoch); a method that changes
the model after training and evaluates it again (averaged heads) is counted without that one extra evaluation.
Loading, writing and the data's tokenisation are not counted. The plan's last column is what one severity of
`report --shift` costs the run afterwards (`analysis.shift`): its test split under each corruption family,
len(FAMILIES) · ceil(N_test / B) · t_infer(T̄) seconds (not counted: the corruption itself, 1 to 4 s per 1,000 BBC News articles and
family on one CPU core, measured for docs/costs.md).

**What a plan leaves out** (`plan_table` with the sweep's `actions`): a configuration whose run is complete in the
store is left out, as the sweep skips it; a stopped run is counted whole, though the sweep resumes it; a run
trained beside a stored one (`--force`, or one still training) is counted. Each is said in one line naming the
runs (`Plan.said`), and so is every split that `limit` cuts.

**Step-time files** (`save_step_times`, `load_step_times`: `probe --out`, benchmarks/gpu.py, `--plan
--step-times`) are JSON objects with exactly the fields `STEP_TIME_FIELDS`, checked on load, each problem one line
naming the file and the field: a regular file of at most `MAX_STEP_TIMES_BYTES`, UTF-8; every time a number,
finite, above 0 and at most `MAX_STEP_SECONDS` (an AdamW time may be 0: benchmarks/gpu.py times it inside the
step); batch size, steps and lengths integers in their ranges (`MAX_BATCH`, `MAX_PROBE_STEPS`, `MAX_LENGTH`);
every method named by one printable line and timed at exactly the probed lengths in all three tables. Text fields
(device, model, architecture, notes) are kept as single lines, control characters and ANSI escapes shown escaped
and cut to `MAX_TEXT_CHARS` (`one_line`), so nothing in a file reaches the terminal as more than one line.
"""

from __future__ import annotations

import copy
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

from peftviz.analysis.shift import FAMILIES
from peftviz.data.checks import printable
from peftviz.errors import ConfigError, ModelLoadError, PeftvizError
from peftviz.files import MB
from peftviz.options import shown
from peftviz.run_config import MAX_BATCH, MAX_LENGTH, TrainConfig, device_problem
from peftviz.tables import first_few

RECORDED_ARCHITECTURES: dict[str, dict[str, Any]] = {
    # https://huggingface.co/allenai/longformer-base-4096/blob/main/config.json (the fields that set the work)
    "allenai/longformer-base-4096": {
        "model_type": "longformer",
        "vocab_size": 50265,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "attention_window": 512,
        "max_position_embeddings": 4098,
        "pad_token_id": 1,
        "type_vocab_size": 1,
    },
}
GPU_LENGTHS = (512, 1024, 2048, 4096)  # probe lengths on a GPU (those up to max_length and the encoder's positions)
# on a CPU, where a Longformer-base step at 1024 × 1 takes seconds and at 4096 × 8 minutes: 256 for short
# documents' batches (interpolated up to 1024), 1024 the one longer batches scale from (in proportion to T)
CPU_LENGTHS = (256, 1024)
CPU_STEPS, GPU_STEPS = 1, 3  # timed steps per method and length (after one warm-up) unless told
CPU_BATCH = 1
PROBE_LEARNING_RATE = 1e-5  # small enough that a few random steps stay finite; the rate does not change the time
MAX_PROBE_STEPS = 1000  # timed steps per method and length: the probe takes 1-3, benchmarks/gpu.py 8; a typo guard
MAX_PROBE_LENGTHS = 64  # lengths in one probe: the grids above have 2 and 4
PRECISIONS = ("fp32", "bf16", "fp16")  # a probe's precision as resolved on its device

# The schema of a step-time file (`save_step_times` writes it, `load_step_times` checks it field by field). A
# saved probe of every registered method at a dozen lengths is some 30 kB; the bounds leave room for far more
# and keep a hostile file's parse and a plan's arithmetic bounded (a step of MAX_STEP_SECONDS at MAX_BATCH and
# MAX_LENGTH over 10^12 steps stays a finite number of hours).
STEP_TIME_FIELDS = (
    "device",
    "precision",
    "model",
    "architecture",
    "batch_size",
    "lengths",
    "steps",
    "forward_backward",
    "optimizer",
    "inference",
    "notes",
    "warmups",
)
OPTIONAL_FIELDS = ("notes", "warmups")
MAX_STEP_TIMES_BYTES = 4 * MB
MAX_STEP_SECONDS = 86400.0  # one step: a Longformer-base step at 4,096 x 8 on 2 CPU cores takes minutes, not a day
MAX_PROBED = 1000  # methods (with their options) in one file
MAX_PROBE_LABEL_CHARS = 2000  # a method and every option the Train page gives it, "lora r=8,alpha=16,..."
MAX_NOTES = 100
MAX_TEXT_CHARS = 300  # a device, model, architecture or note, as printed: one line, cut here


class ProbeTarget(NamedTuple):
    """What the probe builds: its name in the step-time table (`probe_label`), the method and its options."""

    label: str
    method: str
    options: dict


@dataclass
class StepTimes:
    """Median seconds per probed model (`probe_label`: a method and its options) and length, where they were
    measured, and what is extrapolated."""

    device: str  # e.g. "cuda (NVIDIA H200)" or "cpu (x86_64)"
    precision: str  # fp32, bf16 or fp16, as resolved on the device
    model: str
    architecture: str  # where the encoder's shape came from
    batch_size: int  # the probed batch
    lengths: tuple[int, ...]  # the probed lengths
    steps: int
    forward_backward: dict[str, dict[int, float]]  # label -> length -> seconds of one micro-batch
    optimizer: dict[str, float]  # label -> seconds of one AdamW step (clipping included)
    inference: dict[str, dict[int, float]]  # label -> length -> seconds of one eval batch
    notes: list[str] = field(default_factory=list)  # extrapolations and fallbacks, each said once
    warmups: int = 1  # untimed calls before the timed ones

    def seconds(self, kind: str, label: str, length: float, batch_size: int) -> float:
        """Seconds of one `kind` ("forward_backward" or "inference") batch of `batch_size` at `length` tokens."""
        table = getattr(self, kind).get(label)
        if table is None:
            raise ConfigError(f"the probe did not measure {shown(label)}; it measured {_some(list(self.optimizer))}")
        if batch_size != self.batch_size:
            self.note(f"batch {batch_size} extrapolated linearly in B from the probed batch {self.batch_size}")
        if length < min(self.lengths):
            self.note(f"lengths below {min(self.lengths)} taken at the shortest probed length's time (an upper bound)")
        return interpolate(table, length, self._extrapolated) * batch_size / self.batch_size

    def _extrapolated(self, length: float) -> None:
        self.note(f"lengths beyond {max(self.lengths)} extrapolated in proportion to T from the longest probed")

    def note(self, line: str) -> None:
        if line not in self.notes:
            self.notes.append(line)

    def describe(self) -> list[str]:
        """What was measured where, and what is extrapolated: lines for any output of the probe."""
        lengths = ", ".join(str(n) for n in self.lengths)
        return [
            f"measured on {self.device}, {self.precision}: {self.model} ({self.architecture}); batch "
            + f"{self.batch_size}, lengths {lengths}; medians of {self.steps} after {self.warmups} warm-up(s)",
            *self.notes,
        ]

    def rows(self) -> list[dict]:
        """The step-time table: one row per method and probed length (milliseconds)."""
        return [
            {
                "method": label,
                "T × B": f"{length} × {self.batch_size}",
                "forward+backward ms": 1000 * table[length],
                "AdamW step ms": 1000 * self.optimizer[label],
                "inference ms": 1000 * self.inference[label][length],
            }
            for label, table in self.forward_backward.items()
            for length in self.lengths
        ]


def interpolate(table: dict[int, float], length: float, on_extrapolation: Callable[[float], None]) -> float:
    """t(length) from {T: t}: linear between probed lengths, proportional to T beyond the longest, and the
    shortest's time below it (see the module docstring)."""
    points = sorted(table.items())
    if length <= points[0][0]:
        return points[0][1]
    if length > points[-1][0]:
        on_extrapolation(length)
        return points[-1][1] * length / points[-1][0]
    (t0, y0), (t1, y1) = next((a, b) for a, b in pairwise(points) if length <= b[0])
    return y0 + (y1 - y0) * (length - t0) / (t1 - t0)


def save_step_times(times: StepTimes, path: Path) -> None:
    """`times` as JSON (`probe --out`, benchmarks/gpu.py), for a plan made on another machine (`--step-times`)."""
    from peftviz.files import atomic_write

    data = {**times.__dict__, "lengths": list(times.lengths)}
    atomic_write(Path(path), lambda tmp: tmp.write_text(json.dumps(data, indent=1)))


def check_out_path(path: Path, flag: str = "--out") -> None:
    """Refuse, before any probing, a file the times could not be written to: a folder, a device or FIFO (which
    the atomic rename would replace), a missing or unwritable folder."""
    path, where = Path(path), f"{flag} {one_line(str(path))}"
    if path.is_dir():
        raise ConfigError(f"{where}: is a folder; give a file name, e.g. {one_line(str(path / 'step_times.json'))}")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{where}: is not a regular file (a device or a FIFO); give a file to write")
    folder = path.parent
    if not folder.is_dir():
        raise ConfigError(f"{where}: its folder {one_line(str(folder))} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: cannot write in its folder {one_line(str(folder))}")


def one_line(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text` as one line of at most `limit` characters for the terminal: newlines, control characters and ANSI
    escapes (ESC) shown escaped, never sent; the rest cut, ending in "…". Text from a file passes through here."""
    line = printable(text)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def load_step_times(path: Path) -> StepTimes:
    """Step times saved by `save_step_times`, checked against the schema (`STEP_TIME_FIELDS`): a file that is
    not such a table is one line naming the file and the field."""
    where = f"--step-times {one_line(str(path))}"
    data = _read_json(Path(path), where)
    try:
        return _step_times(data)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None


def _read_json(path: Path, where: str) -> Any:
    """The file's JSON: a regular file of at most MAX_STEP_TIMES_BYTES, UTF-8, parsed; one line otherwise."""
    from peftviz.files import FileProblem, read_text

    try:
        return json.loads(read_text(path, MAX_STEP_TIMES_BYTES))
    except FileProblem as problem:
        raise ConfigError(f"{where}: {problem}") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{where}: not JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    except (ValueError, RecursionError) as err:  # an integer of over 4,300 digits; arrays nested thousands deep
        raise ConfigError(f"{where}: not JSON that can be read ({one_line(str(err), 80)})") from None


def _step_times(data: Any) -> StepTimes:
    """A StepTimes from parsed JSON, every field checked (ConfigError naming the field)."""
    if not isinstance(data, dict):
        raise ConfigError(f"not a step-time table saved by `probe --out`: a JSON {_json_kind(data)}, not an object")
    unknown = [key for key in data if key not in STEP_TIME_FIELDS]
    missing = [key for key in STEP_TIME_FIELDS if key not in data and key not in OPTIONAL_FIELDS]
    if unknown or missing:
        said = f"unknown field {shown(unknown[0])}" if unknown else f"no field {missing[0]!r}"
        raise ConfigError(
            f"not a step-time table saved by `probe --out`: {said}; its fields: {', '.join(STEP_TIME_FIELDS)}"
        )
    lengths = _lengths(data["lengths"])
    tables = {kind: _table(data[kind], kind, lengths) for kind in ("forward_backward", "inference")}
    optimizer = _labelled(data["optimizer"], "optimizer", lambda t, at: _seconds(t, at, zero=True))
    for kind, table in (*tables.items(), ("optimizer", optimizer)):
        if set(table) != set(tables["forward_backward"]):
            raise ConfigError(
                f"field {kind!r} times other methods than 'forward_backward': each of the three "
                "tables times the same methods"
            )
    return StepTimes(
        _text(data["device"], "device"),
        _precision(data["precision"]),
        _text(data["model"], "model"),
        _text(data["architecture"], "architecture"),
        _count(data["batch_size"], "batch_size", 1, MAX_BATCH),
        lengths,
        _count(data["steps"], "steps", 1, MAX_PROBE_STEPS),
        tables["forward_backward"],
        optimizer,
        tables["inference"],
        _notes(data.get("notes", [])),
        _count(data.get("warmups", 1), "warmups", 0, MAX_PROBE_STEPS),
    )


def _json_kind(value: Any) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def _text(value: Any, field_name: str) -> str:
    """A text field (device, model, architecture, a note): a string, kept as one sanitised line (`one_line`)."""
    if not isinstance(value, str):
        raise ConfigError(f"field {field_name!r}: a string, not a JSON {_json_kind(value)} {shown(value)}")
    return one_line(value)


def _precision(value: Any) -> str:
    if value not in PRECISIONS or not isinstance(value, str):
        raise ConfigError(f"field 'precision': one of {', '.join(PRECISIONS)}, not {shown(value)}")
    return value


def _count(value: Any, field_name: str, at_least: int, at_most: int) -> int:
    """An integer in [at_least, at_most]: not a bool, not 8.0 (JSON keeps 8 and 8.0 apart; options.py)."""
    if type(value) is not int or not at_least <= value <= at_most:
        raise ConfigError(f"field {field_name!r}: an integer in [{at_least}, {at_most}], not {shown(value)}")
    return value


def _seconds(value: Any, at: str, zero: bool = False) -> float:
    """A time in seconds: a number (not a bool), above 0 (at least 0 where `zero`: an AdamW step timed inside the
    training step, as benchmarks/gpu.py saves it), at most MAX_STEP_SECONDS; so finite (NaN fails both bounds)."""
    low = 0.0 if zero else math.nextafter(0.0, 1.0)
    number = type(value) in (int, float) and low <= value <= MAX_STEP_SECONDS
    if not number:
        bounds = f"[0, {MAX_STEP_SECONDS:g}]" if zero else f"(0, {MAX_STEP_SECONDS:g}]"
        raise ConfigError(f"{at}: seconds, a finite number in {bounds}, not {shown(value)}")
    return float(value)


def _lengths(value: Any) -> tuple[int, ...]:
    """The probed lengths: a non-empty list of distinct token counts in [1, MAX_LENGTH], at most MAX_PROBE_LENGTHS."""
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_PROBE_LENGTHS:
        raise ConfigError(f"field 'lengths': a list of 1 to {MAX_PROBE_LENGTHS} token counts, not {shown(value)}")
    lengths = tuple(_count(n, "lengths", 1, MAX_LENGTH) for n in value)
    if len(set(lengths)) != len(lengths):
        raise ConfigError(f"field 'lengths': each length once, not {shown(value)}")
    return lengths


def _labelled(value: Any, kind: str, read: Callable[[Any, str], Any]) -> dict:
    """{method label: read(entry)} for a table's object: 1 to MAX_PROBED labels, each one printable line."""
    if not isinstance(value, dict) or not 1 <= len(value) <= MAX_PROBED:
        raise ConfigError(f"field {kind!r}: an object of 1 to {MAX_PROBED} methods, not {shown(value)}")
    for label in value:
        if not label or len(label) > MAX_PROBE_LABEL_CHARS or not label.isprintable():
            raise ConfigError(
                f"field {kind!r}: a method is named by one printable line of at most "
                f"{MAX_PROBE_LABEL_CHARS} characters, not {shown(label)}"
            )
    return {label: read(entry, f"field {kind!r} [{label!r}]") for label, entry in value.items()}


def _table(value: Any, kind: str, lengths: tuple[int, ...]) -> dict[str, dict[int, float]]:
    """A method -> {length: seconds} table: every method timed at exactly the probed `lengths`."""

    def read(times: Any, at: str) -> dict[int, float]:
        if not isinstance(times, dict) or set(times) != {str(n) for n in lengths}:
            listed = ", ".join(map(str, lengths))
            raise ConfigError(
                f"{at}: every method needs a time at each of its lengths ({listed}) and at no other, not {shown(times)}"
            )
        return {int(n): _seconds(t, f"{at} [{n!r}]") for n, t in times.items()}

    return _labelled(value, kind, read)


def _notes(value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_NOTES:
        raise ConfigError(f"field 'notes': a list of at most {MAX_NOTES} strings, not {shown(value)}")
    return [_text(line, "notes") for line in value]


# ---------------------------------------------------------------- the probe


def probe_label(config: TrainConfig) -> str:
    """What the probe calls a configuration's model: its method and the options that are settings. Learning
    rate, seed and dataset do not change a step's work, so the runs of a grid share one probe."""
    options = ",".join(f"{name}={value}" for name, value in config.setting_options.items())
    return f"{config.method} {options}" if options else config.method


def probe_targets(configs: Iterable[TrainConfig]) -> list[ProbeTarget]:
    """The distinct (method, options) of a sweep's configurations, in order: one probe each."""
    targets = {}
    for config in configs:
        label = probe_label(config)
        targets.setdefault(label, ProbeTarget(label, config.method, config.setting_options))
    return list(targets.values())


def probe_encoder(model: str):
    """(encoder with random weights, where its shape came from): peftviz's own encoders as they load; a folder's
    or a cached hub model's config.json; else a recorded architecture. Never touches the network."""
    from peftviz.modeling.backbones import is_builtin, is_local, load_encoder

    if is_builtin(model):
        return load_encoder(model)[0], "peftviz's encoder as it loads"
    try:
        config, source = _readable_config(model, is_local(model))
    except ModelLoadError as err:
        if model not in RECORDED_ARCHITECTURES:
            known = ", ".join(RECORDED_ARCHITECTURES)
            reason = one_line(str(err).splitlines()[0] if str(err) else type(err).__name__, 120)
            raise ConfigError(
                f"the probe cannot read model {shown(model)} here ({reason}); it knows the shape of: {known}"
            )
        config, source = _recorded_config(model), f"its recorded architecture, random weights: {err}"
    return _encoder_from_config(config), source


def _readable_config(model: str, local: bool):
    """The model's config from a local folder or this machine's Hugging Face cache; ModelLoadError otherwise."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    from peftviz.modeling.model_folder import read_config

    if local:
        return read_config(model, model), "its config.json, random weights"
    try:
        cached = try_to_load_from_cache(model, "config.json")
    except HFValidationError:
        raise ModelLoadError(f"{model!r} is neither a folder nor a hub id") from None
    if not isinstance(cached, str):
        raise ModelLoadError(f"{model} is not in this machine's Hugging Face cache")
    return read_config(str(Path(cached).parent), model), "its cached config.json, random weights"


def _recorded_config(model: str):
    from transformers import AutoConfig

    values = dict(RECORDED_ARCHITECTURES[model])
    return AutoConfig.for_model(values.pop("model_type"), **values)


def _encoder_from_config(config):
    from transformers import AutoModel

    from peftviz.modeling.attention_function import ATTN_IMPLEMENTATION
    from peftviz.modeling.longformer import LongEncoder

    if config.model_type == "longformer":
        return LongEncoder(config)
    return AutoModel.from_config(config, add_pooling_layer=False, attn_implementation=ATTN_IMPLEMENTATION)


def probe(
    model: str,
    methods: Sequence[str | ProbeTarget],
    lengths: Sequence[int],
    batch_size: int,
    device: str = "auto",
    precision: str = "auto",
    steps: int = 3,
    num_labels: int = 2,
) -> StepTimes:
    """Median seconds of each method's training micro-batch, AdamW step and inference batch at each length, on
    this machine's `device` (module docstring). A length beyond the encoder's positions is left out, said so."""
    import torch

    from peftviz.modeling.backbones import max_tokens
    from peftviz.training.engine import resolve_precision

    check_probe_settings(batch_size, steps, lengths)
    where = checked_device(device, "device")
    precision = resolve_precision(precision, where)
    encoder, architecture = probe_encoder(model)
    usable = sorted({n for n in lengths if n <= max_tokens(encoder)})
    times = StepTimes(_device_name(where), precision, model, architecture, batch_size, tuple(usable), steps, {}, {}, {})
    if not usable:
        raise ConfigError(f"no probe length fits {model}'s {max_tokens(encoder)} positions: {list(lengths)}")
    if len(usable) < len(set(lengths)):
        times.note(f"lengths beyond {model}'s {max_tokens(encoder)} positions left out of the probe")
    targets = [ProbeTarget(m, m, {}) if isinstance(m, str) else m for m in methods]
    autocast = torch.autocast(where.type, dtype=_autocast_dtype(precision), enabled=precision != "fp32")
    for target in targets:
        _probe_method(times, copy.deepcopy(encoder), target, where, autocast, num_labels)
    return times


def probe_for(configs: Sequence[TrainConfig], device: str | None = None, steps: int | None = None) -> StepTimes:
    """The probe a plan of `configs` needs: each of their (method, options) on their one model, on `device`
    (default: theirs) in their precision; on a GPU at their batch size and lengths up to their max_length, on a
    CPU at batch 1 and lengths up to 1024 (`CPU_LENGTHS`). Steps: 3 on a GPU, 1 on a CPU unless given."""
    models = list(dict.fromkeys(config.model for config in configs))
    if len(models) != 1:
        raise ConfigError(f"a plan probes one model; this sweep has {len(models)}: {', '.join(models)}")
    first = configs[0]
    where = device or first.device
    longest = max(config.max_length for config in configs)
    on_cpu = checked_device(where, "--probe-device" if device else "--device").type == "cpu"
    grid, batch = (CPU_LENGTHS, CPU_BATCH) if on_cpu else (GPU_LENGTHS, max(c.batch_size for c in configs))
    lengths = {n for n in grid if n < longest} | ({longest} if longest <= grid[-1] or not on_cpu else set())
    steps = (CPU_STEPS if on_cpu else GPU_STEPS) if steps is None else steps
    times = probe(models[0], probe_targets(configs), sorted(lengths), batch, where, first.precision, steps)
    if on_cpu:
        times.note(f"on a CPU: probed at batch {CPU_BATCH} and at most {CPU_LENGTHS[-1]} tokens, the rest extrapolated")
    return times


def checked_device(spec: str, flag: str):
    """The torch device `spec` names, where this machine has it; one line naming `flag` otherwise."""
    from peftviz.training.engine import check_device

    problem = device_problem(spec)
    if problem:
        raise ConfigError(f"{flag}: {problem}")
    try:
        return check_device(spec)
    except ConfigError as err:
        raise ConfigError(f"{flag}: {err}") from None


def check_probe_settings(batch_size: Any, steps: Any, lengths: Sequence[Any]) -> None:
    """Refuse, before any model is built, a probe no machine could run: a batch size outside [1, MAX_BATCH], steps
    outside [1, MAX_PROBE_STEPS], lengths outside [2, MAX_LENGTH] or more than MAX_PROBE_LENGTHS of them."""

    def whole(value: Any, low: int, high: int) -> bool:
        return type(value) is int and low <= value <= high

    if not whole(batch_size, 1, MAX_BATCH):
        raise ConfigError(f"the probe's batch size is an integer in [1, {MAX_BATCH}], not {shown(batch_size)}")
    if not whole(steps, 1, MAX_PROBE_STEPS):
        raise ConfigError(f"the probe needs at least 1 step and at most {MAX_PROBE_STEPS}, not {shown(steps)}")
    if not 1 <= len(lengths) <= MAX_PROBE_LENGTHS or not all(whole(n, 2, MAX_LENGTH) for n in lengths):
        raise ConfigError(
            f"the probe's lengths are 1 to {MAX_PROBE_LENGTHS} token counts in [2, {MAX_LENGTH}], "
            f"not {shown(list(lengths))}"
        )


def _device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def _autocast_dtype(precision: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def _probe_method(times: StepTimes, encoder, target: ProbeTarget, device, autocast, num_labels: int) -> None:
    """Time one method at every probe length, into `times`. Out of memory: one line naming the shape."""
    import torch

    from peftviz.classifier import build_classifier
    from peftviz.training.trainer import make_optimizer

    model = build_classifier(encoder, target.method, num_labels, target.options).to(device)
    config = TrainConfig(method=target.method, method_options=target.options, learning_rate=PROBE_LEARNING_RATE)
    optimizer, _ = make_optimizer(model, config, total_steps=10**6)
    vocab = model.encoder.config.vocab_size
    for length in times.lengths:
        generator = torch.Generator().manual_seed(length)
        ids = torch.randint(3, vocab, (times.batch_size, length), generator=generator).to(device)  # (B, T)
        labels = torch.randint(0, num_labels, (times.batch_size,), generator=generator).to(device)  # (B,)
        try:
            fb, opt = _train_times(model, optimizer, ids, labels, times.steps, autocast, config.max_grad_norm)
            infer = _infer_time(model, ids, times.steps, autocast)
        except torch.OutOfMemoryError:
            raise ConfigError(
                f"the probe of {target.label} at {length} × {times.batch_size} ran out of memory on "
                f"{times.device}: probe a smaller batch"
            ) from None
        times.forward_backward.setdefault(target.label, {})[length] = fb
        times.inference.setdefault(target.label, {})[length] = infer
        times.optimizer[target.label] = opt  # the same parameters at every length: the last length's median
    model.method.remove_hooks()


def _synchronized_clock(device) -> float:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _train_times(model, optimizer, ids, labels, steps: int, autocast, max_grad_norm: float) -> tuple[float, float]:
    """Median seconds of forward + backward, and of clipping + AdamW step, over `steps` after one warm-up."""
    import torch
    import torch.nn.functional as F

    model.train()
    forward_backward, stepping = [], []
    for _ in range(steps + 1):
        started = _synchronized_clock(ids.device)
        with autocast:
            logits = model(ids, torch.ones_like(ids)).logits  # (B, C)
        loss = F.cross_entropy(logits.float(), labels)
        penalty = model.method.regularization()  # as the trainer adds it
        (loss if penalty is None else loss + penalty).backward()
        backward_done = _synchronized_clock(ids.device)
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        forward_backward.append(backward_done - started)
        stepping.append(_synchronized_clock(ids.device) - backward_done)
    return statistics.median(forward_backward[1:]), statistics.median(stepping[1:])


def _infer_time(model, ids, steps: int, autocast) -> float:
    """Median seconds of an inference batch (eval, no gradients) over `steps` after one warm-up."""
    import torch

    model.eval()
    seconds = []
    with torch.no_grad(), autocast:
        for _ in range(steps + 1):
            started = _synchronized_clock(ids.device)
            model(ids, torch.ones_like(ids))
            seconds.append(_synchronized_clock(ids.device) - started)
    return statistics.median(seconds[1:])


# ---------------------------------------------------------------- lengths, runs, plans


def quantile_points(stats, max_length: int) -> list[tuple[float, float]]:
    """The breakpoints (v, min(Q(v), L)) of the capped quantile function on [0, 1]: the recorded levels, the
    ends (flat extension) and every crossing of L."""
    recorded = sorted((float(p), float(q)) for p, q in stats.token_quantiles.items())  # in model tokens
    if not recorded or any(not 0 <= p <= 1 for p, _ in recorded):
        raise ConfigError(f"length quantiles need levels in [0, 1], not {sorted(stats.token_quantiles)}")
    points = [(0.0, recorded[0][1]), *recorded, (1.0, _top(recorded))]
    capped = [points[0]]
    for (v0, q0), (v1, q1) in pairwise(points):
        if (q0 - max_length) * (q1 - max_length) < 0:  # Q crosses L inside this segment
            capped.append((v0 + (v1 - v0) * (max_length - q0) / (q1 - q0), float(max_length)))
        capped.append((v1, q1))
    return [(v, min(q, max_length)) for v, q in capped]


def _top(recorded: list[tuple[float, float]]) -> float:
    """Q(1): the last recorded segment's line continued to level 1 (the highest level's length where only one
    level is recorded). A flat top would make every document above the highest level exactly that long."""
    if len(recorded) < 2 or recorded[-1][0] == 1:
        return recorded[-1][1]
    (p0, q0), (p1, q1) = recorded[-2:]
    return q1 + (q1 - q0) / (p1 - p0) * (1 - p1)


def expected_batch_length(stats, max_length: int, batch_size: int) -> float:
    """E[min(Q(V), L)], V the largest of `batch_size` uniforms: a batch's expected padded length in tokens."""
    B, total = batch_size, 0.0
    points = quantile_points(stats, max_length)
    for (v0, f0), (v1, f1) in pairwise(points):
        if v1 <= v0:
            continue  # a repeated level: a jump of Q, of zero width
        slope = (f1 - f0) / (v1 - v0)
        intercept = f0 - slope * v0
        total += intercept * (v1**B - v0**B) + slope * B / (B + 1) * (v1 ** (B + 1) - v0 ** (B + 1))
    return total


@dataclass(frozen=True)
class RunCost:
    optimizer_steps: int
    micro_batches: int
    eval_batches: int
    batch_length: float  # expected padded tokens of a batch
    train_seconds: float
    eval_seconds: float
    shift_seconds: float = 0.0  # one severity of `report --shift`: the test split under every corruption family

    @property
    def hours(self) -> float:
        return (self.train_seconds + self.eval_seconds) / 3600


def run_cost(config: TrainConfig, stats, step_times: StepTimes) -> RunCost:
    """One run's steps, batches and estimated seconds (module docstring), at the probe's times for its method."""
    B, splits = config.batch_size, split_sizes(config, stats)
    per_epoch = math.ceil(splits["train"] / B)
    optimizer_steps = config.epochs * math.ceil(per_epoch / config.accumulation_steps)
    micro_batches = config.epochs * per_epoch
    eval_batches = config.epochs * math.ceil(splits.get("validation", 0) / B) + math.ceil(splits.get("test", 0) / B)
    length, label = expected_batch_length(stats, config.max_length, B), probe_label(config)
    train = micro_batches * step_times.seconds("forward_backward", label, length, B)
    train += optimizer_steps * step_times.optimizer[label]
    evaluate = eval_batches * step_times.seconds("inference", label, length, B)
    shift = len(FAMILIES) * math.ceil(splits.get("test", 0) / B) * step_times.seconds("inference", label, length, B)
    return RunCost(optimizer_steps, micro_batches, eval_batches, length, train, evaluate, shift)


def split_sizes(config: TrainConfig, stats) -> dict[str, int]:
    """Documents per split as the run trains on them: the recorded sizes, each cut to `config.limit` where one is
    given (`load_data` keeps at most that many of every split)."""
    splits = dict(stats.splits)
    if "train" not in splits:
        raise ConfigError(f"dataset {config.dataset}: its recorded splits ({', '.join(splits)}) have no train split")
    if config.limit is None:
        return splits
    return {name: min(size, config.limit) for name, size in splits.items()}


@dataclass
class Plan:
    rows: list[dict]  # one per run counted
    totals: list[dict]  # all runs, then per dataset, then per method
    said: list[str] = field(default_factory=list)  # runs left out or counted otherwise, and why: one line each


def recorded_stats(dataset: str):
    """The recorded sizes and lengths of `dataset` (peftviz.data.paper_stats); ConfigError naming those it has."""
    from peftviz.data.paper_stats import DATASET_STATS, dataset_stats

    try:
        return dataset_stats(dataset)
    except (KeyError, PeftvizError):
        raise ConfigError(
            f"--plan needs dataset {dataset!r}'s recorded sizes and lengths; recorded: {', '.join(DATASET_STATS)}"
        ) from None


def plan_table(
    configs: Sequence[TrainConfig], step_times: StepTimes | None, stats_of=None, actions: Sequence | None = None
) -> Plan:
    """Every counted run's row (dataset, method, seed, learning rate, steps, batch length, hours) and the totals.
    `stats_of(dataset)`: its sizes and lengths (default: the recorded ones, `recorded_stats`). `actions`: what the
    sweep does with each configuration (`peftviz.sweep.plan`, a `Planned` each): one it skips is left out, and
    `Plan.said` names, in one line per reason, every run left out or counted otherwise (`store_lines`).
    `step_times` may be None only when nothing is left to count."""
    planned = actions if actions is not None else [None] * len(configs)
    counted = [c for c, item in zip(configs, planned, strict=True) if item is None or item.action != "skip"]
    said = store_lines(actions or [])
    if not counted:
        return Plan([], plan_totals([], []), said)
    _check_measured(counted, step_times)
    stats_of = stats_of or recorded_stats
    stats = {dataset: stats_of(dataset) for dataset in dict.fromkeys(c.dataset for c in counted)}
    rows = []
    for config in counted:
        cost = run_cost(config, stats[config.dataset], step_times)
        rows.append(
            {
                "dataset": config.dataset,
                "method": config.name,
                "seed": config.seed,
                "learning rate": config.learning_rate,
                "optimizer steps": cost.optimizer_steps,
                "micro-batch length": round(cost.batch_length),
                "est. hours": cost.hours,
                "shift s / severity": round(cost.shift_seconds, 1),
            }
        )
    said += _limit_lines(counted, stats) + _model_lines(counted, step_times)
    return Plan(rows, plan_totals(rows, [config.method for config in counted]), said)


def _check_measured(configs: Sequence[TrainConfig], step_times: StepTimes) -> None:
    """Every probe label the runs need has times: one line naming those missing and those there otherwise."""
    missing = list(dict.fromkeys(probe_label(c) for c in configs if probe_label(c) not in step_times.forward_backward))
    if missing:
        raise ConfigError(
            f"the step times ({step_times.device}) have none for {_some(missing)}, which the plan "
            f"needs; they time {_some(list(step_times.forward_backward))}"
        )


def store_lines(actions: Sequence) -> list[str]:
    """One line per way a plan's runs differ from a fresh sweep's, naming the runs: complete in the store (left out:
    the sweep skips them), stopped (counted whole: the sweep resumes them), trained beside a stored run."""
    kinds = {
        "skip": "left out: {n} run(s) already complete in the store, which the sweep skips (--force trains them again)",
        "resume": "counted whole: {n} stopped run(s) the sweep resumes from their last finished epoch (an "
        "overestimate)",
        "repeat": "counted: {n} run(s) trained beside a stored run of the same settings and seed (--force, or one "
        "still training)",
    }
    named: dict[str, list[str]] = {}
    for item in actions:
        kind = "repeat" if item.action == "train" and item.repeat_of else item.action
        if kind in kinds:
            named.setdefault(kind, []).append(f"{item.config.dataset} {item.config.run_title}")
    return [f"{kinds[kind].format(n=len(titles))}: {_some(titles)}" for kind, titles in named.items()]


def _limit_lines(configs: Sequence[TrainConfig], stats: dict) -> list[str]:
    """Where --limit cuts a dataset's splits: one line each, with the sizes the plan counts."""
    lines = []
    for dataset, limit in dict.fromkeys((c.dataset, c.limit) for c in configs if c.limit is not None):
        recorded = stats[dataset].splits
        if any(size > limit for size in recorded.values()):
            sizes = ", ".join(f"{name} {min(size, limit)} of {size}" for name, size in recorded.items())
            lines.append(f"limit {limit}: {dataset}'s documents counted per split: {sizes}")
    return lines


def _model_lines(configs: Sequence[TrainConfig], step_times: StepTimes) -> list[str]:
    """Where the runs train another model than the one the step times were measured on: one line, as their hours
    are that model's (a file measured elsewhere, `--step-times`)."""
    others = [model for model in dict.fromkeys(c.model for c in configs) if model != step_times.model]
    if not others:
        return []
    return [f"the step times are {step_times.model}'s; these runs train {_some(others)}: their hours are at its times"]


def _some(names: list[str]) -> str:
    """The first few names, each cut to one line (`one_line`), and how many more."""
    return first_few([one_line(name, 80) for name in names])


def plan_totals(rows: list[dict], methods: list[str]) -> list[dict]:
    """Runs, optimiser steps and hours: all runs, then each dataset's, then each method's (`methods`: each row's
    method, whatever its run's label says: the rates of a grid add up under their method)."""

    def total(name: str, chosen: list[int]) -> dict:
        return {
            "total": name,
            "runs": len(chosen),
            "optimizer steps": sum(rows[i]["optimizer steps"] for i in chosen),
            "est. hours": sum(rows[i]["est. hours"] for i in chosen),
        }

    keys = {"dataset": [row["dataset"] for row in rows], "method": methods}
    out = [total("all runs", list(range(len(rows))))]
    for key, values in keys.items():
        for value in dict.fromkeys(values):
            out.append(total(f"{key} {value}", [i for i, v in enumerate(values) if v == value]))
    return out
