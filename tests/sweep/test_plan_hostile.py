"""Hostile input at the plan's boundaries (issue 45): step-time files damaged in generated ways, and hostile `probe`,
`--plan` and `--seeds` arguments. Each case is answered in one line of the project's error family, or with a correct
result: a step-time table that holds what the file holds and nothing a terminal would take as more than one line, a
plan whose hours are finite and not negative, seeds within their bounds. Nothing is written, and nothing is probed
for real (the probe is a stub here: tests/sweep/test_cost.py runs the real one on a tiny Longformer).

The oracles (`check_loaded`, `check_plan`, `check_seeds`) are written here, apart from cost.py and run_config.py: they
state what a loaded table and a plan must be, not how the code checks it.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from peftviz import cli
from peftviz.errors import ConfigError, PeftvizError
from peftviz.methods import METHODS
from peftviz.run_config import TrainConfig, parse_seeds
from peftviz.store.writer import RunWriter
from peftviz.sweep import cost
from peftviz.sweep.cost import StepTimes, load_step_times, plan_table
from tests.support.helpers import each_case_within, hard_timeout
from tests.sweep.test_cost import Stats

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
FIELDS = {
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
}
METHODS_TIMED = ("lora", "bitfit")
GOOD = {
    "device": "cuda (test GPU)",
    "precision": "bf16",
    "model": "test-model",
    "architecture": "by hand",
    "batch_size": 4,
    "lengths": [512, 1024],
    "steps": 3,
    "warmups": 1,
    "forward_backward": {m: {"512": 0.1, "1024": 0.2} for m in METHODS_TIMED},
    "optimizer": {"lora": 0.05, "bitfit": 0.0},  # 0: AdamW timed inside the step, as benchmarks/gpu.py saves it
    "inference": {m: {"512": 0.03, "1024": 0.06} for m in METHODS_TIMED},
    "notes": ["timed by hand"],
}
MAX_SHOWN_LINE = 1000  # what "cut to a sane length" means here: no text field prints longer than this


RECORDED = {"hyperpartisan": Stats({"train": 515, "validation": 65, "test": 65}, {0.5: 400, 0.95: 2000})}


def write(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


# ---------------------------------------------------------------------------------------------
# the oracles


def one_printable_line(text: str) -> bool:
    return isinstance(text, str) and text.isprintable() and len(text) <= MAX_SHOWN_LINE


def check_one_line(err: BaseException) -> None:
    assert isinstance(err, PeftvizError), f"{type(err).__name__}: {err}"
    assert "\n" not in str(err) and str(err).isprintable(), repr(str(err))


def check_loaded(times: StepTimes, data: dict) -> None:
    """A table read from `data` holds exactly the file's numbers, in their ranges, and only printable lines."""
    assert set(data) <= FIELDS  # no field ignored in silence
    assert type(times.batch_size) is int and times.batch_size == data["batch_size"] >= 1
    assert type(times.steps) is int and times.steps >= 1 and type(times.warmups) is int and times.warmups >= 0
    assert times.precision in ("fp32", "bf16", "fp16")
    assert all(type(n) is int and n >= 1 for n in times.lengths) and len(set(times.lengths)) == len(times.lengths)
    assert list(times.lengths) == data["lengths"]
    labels = set(data["forward_backward"])
    assert set(times.forward_backward) == set(times.inference) == set(times.optimizer) == labels
    for kind in ("forward_backward", "inference"):
        for label, table in getattr(times, kind).items():
            assert one_printable_line(label)
            assert set(table) == set(times.lengths)
            for length, seconds in table.items():
                assert type(seconds) is float and math.isfinite(seconds) and seconds > 0
                assert type(data[kind][label][str(length)]) in (int, float)  # a number in the file, not a bool
                assert seconds == data[kind][label][str(length)]
    for label, seconds in times.optimizer.items():
        assert type(seconds) is float and math.isfinite(seconds) and seconds >= 0
        assert type(data["optimizer"][label]) in (int, float) and seconds == data["optimizer"][label]
    texts = [times.device, times.model, times.architecture, *times.notes, *times.describe()]
    assert all(one_printable_line(text) for text in texts), texts


def plan_configs(labels) -> list[TrainConfig]:
    """Runs of each timed method that is a registered one, short and long: below, between and beyond the lengths."""
    return [
        TrainConfig(
            method=method,
            dataset="hyperpartisan",
            batch_size=4,
            effective_batch_size=8,
            epochs=2,
            max_length=max_length,
        )
        for method in labels
        if method in METHODS
        for max_length in (128, 768, 4096)
    ]


def check_plan(times: StepTimes) -> None:
    """A plan from the table: finite hours, not negative, and whole steps; or one line (a method not timed)."""
    configs = plan_configs(times.forward_backward)
    try:
        plan = plan_table(configs, times, RECORDED.__getitem__)
    except ConfigError as err:
        check_one_line(err)
        return
    for row in [*plan.rows, *plan.totals]:
        assert math.isfinite(row["est. hours"]) and row["est. hours"] >= 0, row
        assert type(row["optimizer steps"]) is int and row["optimizer steps"] >= 0
    assert all(one_printable_line(line) for line in [*plan.said, *times.describe()])


def load_or_refuse(path: Path) -> StepTimes | None:
    """The table, or None after checking the refusal is one line naming the file."""
    try:
        return load_step_times(path)
    except ConfigError as err:
        check_one_line(err)
        assert str(err).startswith(f"--step-times {path}: "), str(err)
        return None


# ---------------------------------------------------------------------------------------------
# damaged step-time files, generated

TEXT = st.one_of(
    st.sampled_from(
        [
            "",
            "\n",
            "a\nb",
            "\r",
            "\x1b[31mred\x1b[0m",
            "\x1b]0;title\x07",
            "\u2028",
            "\u202e",
            "\ud800",
            "\x00",
            "\t",
            "x" * 400,
            "ok",
        ]
    ),
    st.text(max_size=12),
)
NUMBER = st.one_of(
    st.sampled_from(
        [
            math.nan,
            math.inf,
            -math.inf,
            0,
            0.0,
            -0.0,
            -1,
            -1e-9,
            5e-324,
            1e-300,
            1.5,
            8.0,
            1e308,
            10**30,
            2**64,
            10**400,
            86400.0,
            86400.5,
            65536,
            65537,
            16384,
            16385,
            1000,
            1001,
        ]
    ),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | NUMBER | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
HOSTILE = st.one_of(
    NUMBER, TEXT, st.none(), st.booleans(), st.sampled_from([[], {}, [1], {"a": 1}, [512, 1024]]), JSON_VALUE
)


def damage(data: dict, draw) -> str:
    """One generated damage to a good table (a copy, changed in place); returns its kind, for the statistics."""
    how = draw(
        st.sampled_from(
            [
                "field",
                "drop",
                "extra",
                "length",
                "rename-length",
                "entry",
                "time",
                "key",
                "rename-method",
                "drop-method",
                "notes",
                "whole",
            ]
        )
    )
    kind = draw(st.sampled_from(["forward_backward", "inference", "optimizer"]))
    method = draw(st.sampled_from(METHODS_TIMED))
    if how == "field":
        data[draw(st.sampled_from(sorted(FIELDS)))] = draw(HOSTILE)
    elif how == "drop":
        data.pop(draw(st.sampled_from(sorted(FIELDS))))
    elif how == "extra":
        data[draw(TEXT)] = draw(HOSTILE)
    elif how == "length":
        data["lengths"][draw(st.integers(0, 1))] = draw(HOSTILE)
    elif how == "rename-length":  # the same new length in the list and in every table: a consistent file
        old, new = data["lengths"][0], draw(NUMBER)
        data["lengths"][0] = new
        for table in ("forward_backward", "inference"):
            for times in data[table].values():
                times[json.dumps(new)] = times.pop(str(old))
    elif how == "entry":
        data[kind][method] = draw(HOSTILE)
    elif how == "time" and kind == "optimizer":
        data["optimizer"][method] = draw(HOSTILE)
    elif how == "time":
        data[kind][method][draw(st.sampled_from(["512", "1024"]))] = draw(HOSTILE)
    elif how == "key":  # a length's key renamed in one table
        timed = data["inference" if kind == "optimizer" else kind][method]
        timed[draw(TEXT)] = timed.pop("512")
    elif how == "rename-method":  # in all three tables: a consistent file
        new = draw(TEXT)
        for table in ("forward_backward", "inference", "optimizer"):
            data[table][new] = data[table].pop(method)
    elif how == "drop-method":
        data[kind].pop(method)
    elif how == "notes":
        data["notes"] = draw(st.lists(TEXT, max_size=3)) if draw(st.booleans()) else draw(HOSTILE)
    else:
        return "whole: " + type(data).__name__
    return how


@FUZZ
@given(data=st.data())
@each_case_within(30)
def test_a_damaged_step_time_file_is_one_line_or_a_table_that_holds_what_it_says(tmp_path, data):
    table = json.loads(json.dumps(GOOD))
    how = damage(table, data.draw)
    if how.startswith("whole"):
        table = data.draw(HOSTILE)
    event(how)
    path = write(tmp_path / "times.json", table)
    before = sorted(tmp_path.iterdir())
    times = load_or_refuse(path)
    event("refused" if times is None else "loaded")
    if times is not None:
        check_loaded(times, table)
        check_plan(times)
    assert sorted(tmp_path.iterdir()) == before  # nothing written


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(content=st.binary(max_size=64), cut=st.floats(0, 1))
def test_truncated_empty_or_binary_files_are_one_line(tmp_path, content, cut):
    good = json.dumps(GOOD).encode()
    for raw in (good[: int(cut * (len(good) - 1))], content, b""):
        path = tmp_path / "times.json"
        path.write_bytes(raw)
        assert load_or_refuse(path) is None


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda tmp: tmp / "nowhere.json", "does not exist"),
        (lambda tmp: tmp, "is a folder, not a regular file"),
        (lambda tmp: Path("/dev/zero"), "is a device, not a regular file"),
        (lambda tmp: _fifo(tmp / "fifo"), "is a FIFO, not a regular file"),
        (lambda tmp: _huge(tmp / "huge.json"), "the limit is 4.0 MB"),
        (lambda tmp: _written(tmp / "deep.json", "[" * 100_000 + "]" * 100_000), "not JSON that can be read"),
        (lambda tmp: _written(tmp / "digits.json", '{"batch_size": ' + "9" * 5000 + "}"), "not JSON that can be read"),
        (lambda tmp: _written(tmp / "latin1.json", b'{"device": "\xe9"}'), "is not UTF-8 text (byte 12)"),
        (lambda tmp: _written(tmp / "nan.json", json.dumps({**GOOD, "batch_size": math.nan})), "field 'batch_size'"),
    ],
)
def test_a_step_time_file_that_cannot_be_read_is_one_line_naming_it(tmp_path, make, words):
    path = make(tmp_path)
    with hard_timeout(20), pytest.raises(ConfigError) as err:
        load_step_times(path)
    check_one_line(err.value)
    assert str(err.value).startswith(f"--step-times {path}: ") and words in str(err.value)


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _huge(path: Path) -> Path:
    """A file just over the 4 MB limit, valid JSON (spaces, then a table): refused for its size alone."""
    path.write_text(" " * (4 << 20) + json.dumps(GOOD))
    return path


def _written(path: Path, content) -> Path:
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return path


@pytest.mark.parametrize(
    "change, message",
    [
        ({"batch_size": 0}, "field 'batch_size': an integer in [1, 65536], not 0"),
        ({"batch_size": -8}, "field 'batch_size': an integer in [1, 65536], not -8"),
        ({"batch_size": 8.0}, "field 'batch_size': an integer in [1, 65536], not 8.0"),
        ({"batch_size": True}, "field 'batch_size': an integer in [1, 65536], not True"),
        ({"lengths": [512, 0]}, "field 'lengths': an integer in [1, 16384], not 0"),
        ({"lengths": [512, 512]}, "field 'lengths': each length once"),
        ({"precision": "fp64"}, "field 'precision': one of fp32, bf16, fp16, not 'fp64'"),
        ({"device": 3}, "field 'device': a string, not a JSON number 3"),
        ({"notes": "one"}, "field 'notes': a list of at most 100 strings"),
        ({"steps": 0}, "field 'steps': an integer in [1, 1000], not 0"),
        ({"extra": 1}, "unknown field 'extra'"),
    ],
)
def test_each_field_out_of_its_range_is_one_line_naming_it(tmp_path, change, message):
    with pytest.raises(ConfigError) as err:
        load_step_times(write(tmp_path / "t.json", {**GOOD, **change}))
    check_one_line(err.value)
    assert message in str(err.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 0, -0.1, 1e308, True, "0.1"])
def test_a_time_that_is_not_finite_and_positive_is_one_line_naming_its_method_and_length(tmp_path, value):
    table = json.loads(json.dumps(GOOD))
    table["forward_backward"]["lora"]["1024"] = value
    with pytest.raises(ConfigError) as err:
        load_step_times(write(tmp_path / "t.json", table))
    check_one_line(err.value)
    assert "field 'forward_backward' ['lora'] ['1024']: seconds, a finite number in (0, 86400]" in str(err.value)


@pytest.mark.parametrize("value", [-0.1, -(10**30), math.nan, math.inf, False, None])
def test_an_adamw_time_may_be_zero_but_not_negative_nor_other_than_a_number(tmp_path, value):
    table = json.loads(json.dumps(GOOD))
    table["optimizer"]["lora"] = value
    with pytest.raises(ConfigError) as err:
        load_step_times(write(tmp_path / "t.json", table))
    check_one_line(err.value)
    assert "field 'optimizer' ['lora']: seconds, a finite number in [0, 86400]" in str(err.value)


def test_text_fields_print_as_single_escaped_lines_cut_short(tmp_path):
    table = {**GOOD, "device": "gpu\n\x1b[2J\x1b[31mred", "notes": ["a\rb\u2028c", "x" * 5000]}
    times = load_step_times(write(tmp_path / "t.json", table))
    assert times.device == "gpu\\n\\x1b[2J\\x1b[31mred"  # escaped: no newline, no ESC reaches the terminal
    assert times.notes[0] == "a\\rb\\u2028c" and len(times.notes[1]) == 300 and times.notes[1].endswith("…")


def test_the_saved_h100_step_times_load_and_plan_as_before():
    """The real file (AdamW times 0: inside each step) loads, and plans the paper's Hyperpartisan runs."""
    times = load_step_times(Path(__file__).parents[2] / "docs/data/gpu-h100-2026-11-26/run2-step_times.json")
    assert times.lengths == (1024, 4096) and times.batch_size == 8 and set(times.optimizer.values()) == {0.0}
    check_plan(times)


# ---------------------------------------------------------------------------------------------
# a plan's gaps: methods or lengths the file lacks, --limit, runs the store already has


def test_a_method_the_file_lacks_is_one_line_naming_it_and_those_it_has(tmp_path):
    times = load_step_times(write(tmp_path / "t.json", GOOD))
    configs = [TrainConfig(method="ia3", dataset="hyperpartisan", batch_size=4, effective_batch_size=8)]
    with pytest.raises(ConfigError) as err:
        plan_table(configs, times, RECORDED.__getitem__)
    check_one_line(err.value)
    assert "have none for ia3, which the plan needs; they time lora, bitfit" in str(err.value)


def test_runs_of_another_model_than_the_file_s_are_said(tmp_path):
    times = load_step_times(write(tmp_path / "t.json", GOOD))
    plan = plan_table(plan_configs(["lora"]), times, RECORDED.__getitem__)
    assert "the step times are test-model's; these runs train minilm: their hours are at its times" in plan.said


def test_lengths_outside_the_probed_ones_are_said_with_how_they_were_taken(tmp_path):
    times = load_step_times(write(tmp_path / "t.json", GOOD))
    plan_table(plan_configs(["lora"]), times, RECORDED.__getitem__)
    said = "\n".join(times.describe())
    assert "lengths below 512 taken at the shortest probed length's time (an upper bound)" in said
    assert "lengths beyond 1024 extrapolated in proportion to T from the longest probed" in said


@FUZZ
@given(limit=st.one_of(st.none(), st.integers(2, 2000)), epochs=st.integers(1, 5))
def test_the_plan_s_steps_count_the_documents_limit_keeps(limit, epochs):
    """Optimizer steps = epochs × ceil(min(train, limit) / effective batch), evaluation likewise: what the trainer
    runs on `load_data(limit=...)`'s splits; and the limit is said where it cuts."""
    config = TrainConfig(
        method="lora",
        dataset="hyperpartisan",
        batch_size=4,
        effective_batch_size=8,
        epochs=epochs,
        limit=limit,
        max_length=1024,
    )
    times = StepTimes(
        "cpu",
        "fp32",
        "m",
        "a",
        4,
        (512, 1024),
        1,
        {"lora": {512: 0.1, 1024: 0.2}},
        {"lora": 0.05},
        {"lora": {512: 0.03, 1024: 0.06}},
    )
    plan = plan_table([config], times, RECORDED.__getitem__)
    kept = {name: min(size, limit or size) for name, size in RECORDED["hyperpartisan"].splits.items()}
    assert plan.rows[0]["optimizer steps"] == epochs * math.ceil(kept["train"] / 8)
    cost_of = cost.run_cost(config, RECORDED["hyperpartisan"], times)
    assert cost_of.micro_batches == epochs * math.ceil(kept["train"] / 4)
    assert cost_of.eval_batches == epochs * math.ceil(kept["validation"] / 4) + math.ceil(kept["test"] / 4)
    assert any(line.startswith(f"limit {limit}: ") for line in plan.said) == (limit is not None and limit < 515)


def test_steps_scale_with_limit_on_the_command_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cost, "recorded_stats", RECORDED.__getitem__)
    path = write(tmp_path / "t.json", GOOD)
    steps = {}
    for limit in (None, 400, 100, 40):  # None: the smoke preset's own limit, 120
        argv = [
            "compare",
            "--preset",
            "smoke",
            "--dataset",
            "hyperpartisan",
            "--methods",
            "lora",
            "--plan",
            "--step-times",
            str(path),
            "--runs-dir",
            str(tmp_path / "store"),
            "--batch-size",
            "4",
            "--effective-batch-size",
            "8",
            *(["--limit", str(limit)] if limit else []),
        ]
        assert cli.main(argv) == 0
        out = capsys.readouterr().out
        steps[limit] = int(re.search(r"\| all runs \| 1 \| (\d+) \|", out).group(1))
        assert f"limit {limit or 120}: hyperpartisan's documents counted per split: train {limit or 120} of 515" in out
    assert steps == {None: 2 * math.ceil(120 / 8), 400: 2 * 50, 100: 2 * math.ceil(100 / 8), 40: 2 * 5}


def _stored(root: Path, config: TrainConfig, status: str) -> RunWriter:
    """A run of `config` in the store: complete, stopped after one epoch, or still training (its writer open)."""
    import numpy as np

    writer = RunWriter.create(root, config, {"label_names": ["a", "b"], "parameters": {"total": 1, "trainable": 1}})
    probs, labels = np.full((4, 2), 0.5, np.float32), np.zeros(4, np.int64)
    writer.write_epoch({"epoch": 1, "micro_f1": 0.5, "accuracy": 0.5, "ece": 0.0}, probs, labels)
    if status == "complete":
        import torch

        writer.write_params({"head.weight": torch.ones(2, 4)}, 1)
        writer.write_predictions("test", probs, labels)
        writer.finish({"params_epoch": 1, "test": {"accuracy": 0.5, "ece": 0.0}})
    elif status == "incomplete":
        writer.close()
    return writer


def test_a_plan_names_the_runs_it_leaves_out_or_counts_otherwise(monkeypatch, tmp_path, capsys):
    """Seed 0 complete in the store (the sweep skips it: left out), seed 1 stopped (resumed: counted whole), seed 2
    still training (a second run trained beside it: counted); seed 3 new. Each said in one line naming the run."""
    monkeypatch.setattr(cost, "recorded_stats", RECORDED.__getitem__)
    store = tmp_path / "store"
    argv = [
        "compare",
        "--preset",
        "smoke",
        "--dataset",
        "hyperpartisan",
        "--methods",
        "lora",
        "--seeds",
        "4",
        "--plan",
        "--step-times",
        str(write(tmp_path / "t.json", GOOD)),
        "--runs-dir",
        str(store),
    ]
    configs = cli.configs_of(cli.build_parser().parse_args(argv))
    writers = [_stored(store, config, status) for config, status in zip(configs, ("complete", "incomplete", "live"))]
    try:
        assert cli.main(argv) == 0
    finally:
        writers[2].close()
    out = capsys.readouterr().out
    assert [row.split(" | ")[2] for row in out.splitlines() if row.startswith("| hyperpartisan |")] == ["1", "2", "3"]
    assert "| all runs | 3 |" in out
    assert (
        "left out: 1 run(s) already complete in the store, which the sweep skips (--force trains them again): "
        "hyperpartisan lora · seed 0" in out
    )
    assert "counted whole: 1 stopped run(s) the sweep resumes" in out and "hyperpartisan lora · seed 1" in out
    assert "counted: 1 run(s) trained beside a stored run" in out and "hyperpartisan lora · seed 2" in out


def test_a_plan_whose_every_run_is_complete_probes_nothing_and_says_why(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cost, "recorded_stats", RECORDED.__getitem__)
    monkeypatch.setattr(cost, "probe_for", lambda *a, **k: pytest.fail("probed for runs the sweep skips"))
    store = tmp_path / "store"
    argv = [
        "train",
        "--preset",
        "smoke",
        "--dataset",
        "hyperpartisan",
        "--method",
        "lora",
        "--plan",
        "--runs-dir",
        str(store),
    ]
    _stored(store, cli.configs_of(cli.build_parser().parse_args(argv))[0], "complete")
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "| all runs | 0 | 0 | 0 |" in out and "left out: 1 run(s) already complete" in out


# ---------------------------------------------------------------------------------------------
# hostile arguments: probe, --plan, --seeds


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """cli.main's exit status, stdout and stderr; argparse's refusals exit 2."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as stop:
            code = stop.code
    return code, out.getvalue(), err.getvalue()


def check_refused(code: int, err: str) -> None:
    assert code in (1, 2), (code, err)
    assert err.startswith("peftviz: error: ") and err.count("\n") == 1 and err[:-1].isprintable(), repr(err)


@pytest.fixture(scope="module")
def good_file(tmp_path_factory) -> Path:
    return write(tmp_path_factory.mktemp("times") / "good.json", GOOD)


@pytest.fixture(scope="module")
def stubs(good_file):
    """The probe stubbed (what it was asked, and hand-made times back), the datasets' sizes recorded by hand."""
    calls = []

    def probe(model, methods, lengths, batch_size, device="auto", precision="auto", steps=3, num_labels=2):
        cost.check_probe_settings(batch_size, steps, lengths)  # as the real probe does first
        calls.append({"lengths": list(lengths), "batch_size": batch_size, "steps": steps, "device": device})
        return load_step_times(good_file)

    def probe_for(configs, device=None, steps=None):
        calls.append({"steps": steps, "device": device})
        return load_step_times(good_file)

    patch = pytest.MonkeyPatch()
    patch.setattr(cost, "probe", probe)
    patch.setattr(cost, "probe_for", probe_for)
    patch.setattr(cost, "recorded_stats", RECORDED.__getitem__)
    yield calls
    patch.undo()


ARGUMENT = st.one_of(
    st.sampled_from(
        [
            "0",
            "-1",
            "1",
            "3",
            "100",
            "101",
            "1000",
            "1001",
            "65536",
            "65537",
            "16384",
            "16385",
            "2",
            "1.5",
            "1e3",
            "0x10",
            " 7 ",
            "",
            "nan",
            "inf",
            "9" * 5000,
            "²",
            "٣",
            "1_000",
            "cpu",
            "cuda",
            "auto",
            "cuda:0",
            "cuda:1",
            "cuda:127",
            "cuda:128",
            "cuda:256",
            "cuda:01",
            "cuda:-1",
            "mps",
            "cuda:" + "9" * 30,
            "CPU",
            "cpu\n",
            "\x1b[31m",
            "512,1024",
            "2,16385",
            "1,2,3",
            "0,0",
            "1,1",
            "4294967295,1",
            "4294967296,1",
            ",".join(["2"] * 65),
            ",".join(map(str, range(101))),
            ",".join(map(str, range(100))),
        ]
    ),
    st.text(max_size=10),
    st.integers(-(10**12), 10**12).map(str),
    st.lists(st.integers(-3, 2**33), max_size=4).map(lambda seeds: ",".join(map(str, seeds))),
)
COUNTS = ["1", "3", "8", "1000", "1001", "65536", "65537", "0", "-3", " 4 "]
DEVICES = ["cpu", "auto", "cuda", "cuda:0", "cuda:127", "cuda:128", "cuda:256", "cuda:01", "mps", "CPU", "cuda:"]
NEAR_THE_BOUNDS = {  # each flag's own edges, drawn as often as the hostile values
    "--batch-size": COUNTS,
    "--steps": COUNTS,
    "--probe-steps": COUNTS,
    "--lengths": ["2", "512,1024", "16384", "16385", "1", "2,2", ",".join(["2"] * 64), ",".join(["2"] * 65)],
    "--device": DEVICES,
    "--probe-device": DEVICES,
    "--seeds": ["3", "100", "101", "0,1,2", "1,1", "4294967295,0", ",".join(map(str, range(100))), "7,"],
}
PROBE_FLAGS = ("--batch-size", "--steps", "--lengths", "--device")
PLAN_FLAGS = ("--probe-steps", "--probe-device", "--seeds")


def argument_for(flag: str):
    return st.one_of(ARGUMENT, st.sampled_from(NEAR_THE_BOUNDS[flag]))


@FUZZ
@given(flag=st.sampled_from(PROBE_FLAGS), data=st.data())
@each_case_within(60)
def test_a_hostile_probe_argument_is_one_line_or_a_probe_within_bounds(stubs, tmp_path, flag, data):
    value = data.draw(argument_for(flag))
    stubs.clear()
    argv = ["probe", "--methods", "lora", "--device", "cpu", "--out", str(tmp_path / "t.json"), f"{flag}={value}"]
    code, out, err = run_cli(argv)
    event(f"{flag}: {'probed' if code == 0 else f'refused ({code})'}")
    if code != 0:
        check_refused(code, err)
        assert not stubs and not (tmp_path / "t.json").exists()  # refused before the probe and any write
        index = re.fullmatch(r"cuda:(\d+)", value)
        assert code == 2 or not (flag == "--device" and index and int(index.group(1)) > 127)  # torch never reads it
        assert code == 2 or flag == "--device"  # a count or length out of bounds: refused by the parser itself
        return
    (call,) = stubs
    assert 1 <= call["batch_size"] <= 65536 and 1 <= call["steps"] <= 1000
    assert 1 <= len(call["lengths"]) <= 64 and all(2 <= n <= 16384 for n in call["lengths"])
    assert call["device"] in ("cpu", "auto") or re.fullmatch(r"cuda(:\d{1,3})?", call["device"])
    assert (tmp_path / "t.json").is_file() and "| lora |" in out
    (tmp_path / "t.json").unlink()


@FUZZ
@given(flag=st.sampled_from(PLAN_FLAGS), data=st.data())
@each_case_within(60)
def test_a_hostile_plan_argument_is_one_line_or_a_plan_with_finite_hours(stubs, tmp_path, flag, data):
    value = data.draw(argument_for(flag))
    stubs.clear()
    store = tmp_path / "store"
    argv = [
        "compare",
        "--preset",
        "smoke",
        "--dataset",
        "hyperpartisan",
        "--methods",
        "lora,bitfit",
        "--plan",
        "--runs-dir",
        str(store),
        "--probe-device" if flag != "--probe-device" else "--probe-steps",
        "cpu" if flag != "--probe-device" else "1",
        f"{flag}={value}",
    ]
    code, out, err = run_cli(argv)
    event(f"{flag}: {'planned' if code == 0 else f'refused ({code})'}")
    assert not store.exists()  # nothing written, whatever happened
    if code != 0:
        check_refused(code, err)
        return
    rows = [line for line in out.splitlines() if line.startswith("| hyperpartisan |")]
    if flag == "--seeds":
        check_seeds(value, parse_seeds(value))
        assert len(rows) == 2 * len(parse_seeds(value))
    else:
        (call,) = stubs
        assert call["steps"] is None or 1 <= call["steps"] <= 1000
        assert call["device"] in ("cpu", "auto") or re.fullmatch(r"cuda(:\d{1,3})?", call["device"])
    hours = [float(row.split(" | ")[-1].rstrip(" |")) for row in rows]
    assert rows and all(math.isfinite(h) and h >= 0 for h in hours)


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--step-times", "{tmp}/nowhere.json"], "--step-times {tmp}/nowhere.json: does not exist"),
        (["--step-times", "{tmp}"], "--step-times {tmp}: is a folder, not a regular file"),
        (["--step-times", "/dev/zero"], "--step-times /dev/zero: is a device, not a regular file"),
        (["--step-times", "{tmp}/huge.json"], "the limit is 4.0 MB"),
        (["--step-times", "{tmp}/bad.json"], "not JSON (line 1, column 1: Expecting value)"),
        (["--step-times", "{good}", "--probe-steps", "3"], "--step-times replaces the probe: drop --probe-steps"),
        (["--step-times", "{good}", "--probe-device", "cpu"], "--step-times replaces the probe: drop --probe-device"),
    ],
)
def test_a_plan_s_step_time_file_or_probe_flags_that_cannot_work_are_one_line(stubs, good_file, tmp_path, extra, words):
    stubs.clear()
    _huge(tmp_path / "huge.json")
    (tmp_path / "bad.json").write_text("not json")
    names = {"tmp": str(tmp_path), "good": str(good_file)}
    argv = [
        "compare",
        "--preset",
        "smoke",
        "--dataset",
        "hyperpartisan",
        "--methods",
        "lora",
        "--plan",
        "--runs-dir",
        str(tmp_path / "store"),
        *(part.format(**names) for part in extra),
    ]
    with hard_timeout(20):
        code, _, err = run_cli(argv)
    check_refused(code, err)
    assert words.format(**names) in err and not stubs and not (tmp_path / "store").exists()


def test_a_step_time_file_named_with_control_characters_prints_as_one_escaped_line(stubs, tmp_path):
    path = write(tmp_path / "t\x1b[2J\nx.json", GOOD)
    code, out, err = run_cli([*PLAN_ARGV, "--runs-dir", str(tmp_path / "store"), "--step-times", str(path)])
    assert code == 0, err
    assert all(line.isprintable() for line in out.splitlines()) and "read from " in out and "t\\x1b[2J\\nx.json" in out


@pytest.mark.parametrize("command", [["train", "--method", "lora"], ["compare", "--methods", "lora"]])
@pytest.mark.parametrize("flag", [["--probe-steps", "3"], ["--probe-device", "cpu"], ["--step-times", "t.json"]])
def test_a_plan_flag_without_plan_is_one_line_and_trains_nothing(monkeypatch, tmp_path, command, flag):
    monkeypatch.setattr(cli.sweeps, "run_sweep", lambda *a, **k: pytest.fail("trained though the flags were refused"))
    monkeypatch.setattr(cli.train, "_train_one", lambda *a, **k: pytest.fail("trained though the flags were refused"))
    code, _, err = run_cli([*command, "--preset", "smoke", "--runs-dir", str(tmp_path / "store"), *flag])
    check_refused(code, err)
    assert f"{flag[0]} is for --plan: add --plan, or drop it to train" in err


@pytest.mark.parametrize(
    "out, words",
    [
        ("{tmp}", "is a folder; give a file name"),
        ("{tmp}/missing/t.json", "its folder {tmp}/missing does not exist"),
        ("{tmp}/fifo", "is not a regular file (a device or a FIFO)"),  # never /dev/null: a rename would replace it
        ("{tmp}/file.txt/t.json", "its folder {tmp}/file.txt does not exist"),
    ],
)
def test_a_probe_output_that_cannot_be_written_is_refused_before_probing(stubs, tmp_path, out, words):
    stubs.clear()
    (tmp_path / "file.txt").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    path = out.format(tmp=tmp_path)
    code, _, err = run_cli(["probe", "--methods", "lora", "--device", "cpu", "--out", path])
    check_refused(code, err)
    assert f"--out {path}: {words.format(tmp=tmp_path)}" in err and not stubs


@pytest.mark.parametrize("model", ["/nonexistent/model", "", "a\nb", "/dev/zero", "\x1b[31mred", "x" * 5000, "../.."])
def test_a_probe_model_that_cannot_be_read_is_one_line(model):
    with pytest.raises(ConfigError) as err:
        cost.probe_encoder(model)
    check_one_line(err.value)
    assert "the probe cannot read model " in str(err.value) and "it knows the shape of" in str(err.value)


@pytest.mark.parametrize("device", ["cuda:128", "cuda:256", "cuda:" + "9" * 20, "cuda:01", "gpu", "cuda:-1"])
@pytest.mark.parametrize("flag", ["--device", "--probe-device"])
def test_a_device_torch_would_misread_is_refused_by_the_parser(stubs, tmp_path, device, flag):
    """torch keeps a device's index in 8 bits: cuda:256 would be cuda:0, a GPU not asked for. Refused by the
    parser (exit 2), before torch reads it and whatever GPUs the machine has."""
    command = ["probe", "--methods", "lora"] if flag == "--device" else PLAN_ARGV + ["--runs-dir", str(tmp_path)]
    code, _, err = run_cli([*command, f"{flag}={device}"])
    check_refused(code, err)
    assert code == 2 and "auto, cpu, cuda or cuda:N (N up to 127)" in err and not stubs


PLAN_ARGV = ["compare", "--preset", "smoke", "--dataset", "hyperpartisan", "--methods", "lora", "--plan"]


@pytest.mark.parametrize("device", ["cuda:127", "cuda"])
def test_a_device_this_machine_lacks_is_one_line_naming_the_flag(stubs, device):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, _, err = run_cli(["probe", "--methods", "lora", "--device", device])
    check_refused(code, err)
    assert err.startswith(f"peftviz: error: --device: device {device}: no CUDA GPU is visible here") and not stubs


@FUZZ
@given(  # each setting in bounds half the time, so that one alone out of bounds is drawn often
    batch=st.one_of(st.integers(1, 65536), st.integers(-2, 70000), NUMBER, st.none()),
    steps=st.one_of(st.integers(1, 1000), st.integers(-2, 1100), NUMBER),
    lengths=st.one_of(
        st.lists(st.integers(2, 16384), min_size=1, max_size=4),
        st.lists(st.one_of(st.integers(-2, 17000), NUMBER), max_size=70),
    ),
)
def test_the_probe_itself_refuses_settings_out_of_bounds_before_building_a_model(batch, steps, lengths):
    """`probe` called from code, not the command line: settings out of bounds are one line before any model is
    built (the stand-in encoder below is reached only with settings in bounds)."""

    class Built(Exception):
        pass

    def build(model):
        raise Built

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cost, "probe_encoder", build)
        try:
            cost.probe("tiny-longformer", ["lora"], lengths, batch, "cpu", "fp32", steps)
        except ConfigError as err:
            check_one_line(err)
            return
        except Built:
            pass
    assert type(batch) is int and 1 <= batch <= 65536 and type(steps) is int and 1 <= steps <= 1000
    assert 1 <= len(lengths) <= 64 and all(type(n) is int and 2 <= n <= 16384 for n in lengths)


# ---------------------------------------------------------------------------------------------
# --seeds


def check_seeds(text: str, seeds: list[int]) -> None:
    """Accepted seeds: 1 to 100 distinct seeds in [0, 2^32 - 1]; a count n is seeds 0..n-1, a list is as given."""
    assert 1 <= len(seeds) <= 100 and len(set(seeds)) == len(seeds)
    assert all(type(s) is int and 0 <= s <= 2**32 - 1 for s in seeds)
    if "," not in text:
        assert seeds == list(range(int(text)))
    else:
        assert seeds == [int(part) for part in text.split(",") if part.strip()]


SEEDS_TEXT = st.one_of(
    ARGUMENT,
    st.integers(0, 300).map(str),
    st.lists(st.integers(0, 5), min_size=2, max_size=6).map(lambda s: ",".join(map(str, s))),
    st.lists(st.integers(0, 2**32 + 2), min_size=95, max_size=110, unique=True).map(lambda s: ",".join(map(str, s))),
)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(text=SEEDS_TEXT)
def test_seeds_are_bounded_in_count_and_value_or_refused_in_one_line(text):
    try:
        seeds = parse_seeds(text)
    except ConfigError as err:
        check_one_line(err)
        assert str(err).startswith("--seeds ")
        event("refused")
        return
    event("accepted")
    check_seeds(text, seeds)


@pytest.mark.parametrize(
    "text", ["101", "1000000", "9" * 5000, ",".join(map(str, range(101))), "4294967296,0", "-1", "1,1", "0"]
)
def test_seeds_beyond_the_bounds_are_refused(text):
    with pytest.raises(ConfigError) as err:
        parse_seeds(text)
    check_one_line(err.value)


def test_seeds_at_the_bounds_are_accepted():
    assert parse_seeds("100") == list(range(100))
    assert parse_seeds(",".join(map(str, range(100)))) == list(range(100))
    assert parse_seeds("4294967295,0") == [4294967295, 0]
