"""benchmarks/gpu.py in its test mode: a tiny Longformer on the CPU, run as the GPU command runs (a subprocess).

What the GPU run will rely on is checked on the CPU: every method × case has its "before" and "after" rows with
their times (the peer its "before" row), the ratios are what the stored times give, the after rows carry their
graphs and graph breaks (dynamo's "eager" backend here) and say that no frozen weight was held (float32), the
goals say "not measured" on the CPU, the plan's step times are the after rows', the FLOP count is the hand
count of its docstring's formula, the markdown tables are there, and a row that fails or does not fit the
budget is a row saying so.
"""

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts the script as a process: about a minute on 2 cores (dynamo traces)

ROOT = Path(__file__).resolve().parents[2]
METHODS = ["fine-tuning", "prefix-tuning", "prefix-propagation", "kernel-prefix-propagation"]
FROZEN = METHODS[1:]
VARIANTS = ["before", "after"]
PEER = "transformers Longformer (fine-tuning)"
CASES = ["64 × 2", "128 × 2"]  # the script's --test cases
HEADER = (
    "| T × B | method | variant | step s | TFLOP/s | % of peak | step / fine-tuning | inference s "
    "| inference / plain: median (range, pairs) | peak GiB | graphs / breaks | frozen held |"
)
ROWS = [(method, variant) for method in METHODS for variant in VARIANTS] + [(PEER, "before")]


def command(out: Path, *flags: str) -> tuple[list[str], dict]:
    env = {**os.environ, "PYTHONPATH": ".", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return [sys.executable, "benchmarks/gpu.py", "--test", "--out", str(out), *flags], env


def run_script(out: Path, *flags: str) -> None:
    args, env = command(out, *flags)
    child = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert child.returncode == 0, child.stderr[-3000:]


@pytest.fixture(scope="module")
def side_runs(tmp_path_factory) -> dict[str, tuple[Path, subprocess.Popen]]:
    """The failing case's and the spent budget's runs, started at once: they run on the other core while the main
    run compiles (each is seconds of imports)."""
    started = {}
    for name, flags in (
        ("fails", ("--cases", "2000x1", "--profile")),
        ("budget", ("--cases", "64x2", "--budget-s", "0")),
    ):
        out = tmp_path_factory.mktemp(name)
        args, env = command(out, *flags)
        with (out / "stderr.txt").open("wb") as log:  # a file, not a pipe: nothing reads it while the child runs
            started[name] = out, subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
    yield started
    for _, child in started.values():
        if child.poll() is None:
            child.kill()
        child.wait()


@pytest.fixture(scope="module")
def result(tmp_path_factory, side_runs) -> tuple[dict, str, Path]:
    out = tmp_path_factory.mktemp("gpu")
    run_script(out, "--profile")
    return json.loads((out / "gpu.json").read_text()), (out / "gpu.md").read_text(), out


def side_run(side_runs, name: str) -> Path:
    out, child = side_runs[name]
    assert child.wait(timeout=400) == 0, (out / "stderr.txt").read_text()[-3000:]
    return out


def row_of(data: dict, case: str, method: str, variant: str) -> dict:
    (row,) = [r for r in data["rows"] if r["case"] == case and r["method"] == method and r["variant"] == variant]
    return row


def test_every_case_has_both_variants_of_every_method_and_the_peer_before(result):
    data = result[0]
    assert [(r["method"], r["variant"]) for r in data["rows"]] == ROWS * len(CASES)
    assert [r["case"] for r in data["rows"]] == [case for case in CASES for _ in ROWS]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(("method", "variant"), ROWS)
def test_every_row_has_positive_finite_times(result, case, method, variant):
    row = row_of(result[0], case, method, variant)
    assert "error" not in row and "skipped" not in row
    inference = row["inference"]
    assert "error" not in inference
    for seconds in (row["step_s"], inference["s"], *row["step_times"], row["row_s"], row["step_first_call_s"]):
        assert math.isfinite(seconds) and seconds > 0
    assert row["peak_gib"] is None and row["percent_of_peak"] is None  # the CPU: no memory peak, no device peak
    assert row["trainable"] > 0


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(("method", "variant"), ROWS)
def test_ratios_are_the_stored_times_ratios(result, case, method, variant):
    data = result[0]
    row, fine_tuning = row_of(data, case, method, variant), row_of(data, case, "fine-tuning", variant)
    assert row["step_s"] == statistics.median(row["step_times"])
    assert row["step_ratio"] == pytest.approx(row["step_s"] / statistics.median(fine_tuning["step_times"]), rel=1e-12)
    assert row["step_tflops"] == pytest.approx(row["step_flops"] / row["step_s"] / 1e12, rel=1e-12)
    inference = row["inference"]
    assert inference["path"] == {"before": "blocks", "after": "flex"}[variant] or method == PEER
    if method == "fine-tuning":  # the plain encoder itself: medians, no ratio
        assert "ratio" not in inference
        assert inference["s"] == statistics.median(inference["times"])
        return
    ratio = inference["ratio"]
    by_hand = sorted(ours / plain for ours, plain in ratio["pairs"])
    assert len(by_hand) == 4  # --test's pairs
    assert ratio["median"] == pytest.approx((by_hand[1] + by_hand[2]) / 2, rel=1e-12)
    assert (ratio["low"], ratio["high"]) == (by_hand[0], by_hand[-1])
    assert inference["s"] == statistics.median(ours for ours, _ in ratio["pairs"])


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("method", METHODS)
def test_the_after_rows_count_their_graphs_and_hold_nothing_in_float32(result, case, method):
    data = result[0]
    after, before = row_of(data, case, method, "after"), row_of(data, case, method, "before")
    assert type(after["graph_breaks"]) is int and after["graph_breaks"] >= 0
    assert type(after["graphs"]) is int and after["graphs"] >= 1
    assert sum(after["graph_break_reasons"].values()) == after["graph_breaks"]
    assert after["recompile_limit_hits"] == 0  # every call of the after row ran compiled
    assert after["held_frozen"] == "not applied: float32"
    assert (after["local_attention"], after["compile_backend"], after["compiled_layers"]) == ("flex", "eager", 1)
    assert after["train_local_attention"].startswith("blocks")  # the CPU's FlexAttention has no backward
    assert before["local_attention"] == "blocks"
    assert not {"graphs", "graph_breaks", "held_frozen", "compiled_layers"} & set(before)
    # the same model and FLOPs in both variants: only how it runs differs
    for key in ("step_flops", "forward_flops", "trainable", "prefix_positions", "extra_keys"):
        assert after[key] == before[key], key


def test_the_goals_are_not_measured_on_the_cpu(result):
    data, text, _ = result
    largest = "128 × 2"
    found = {(g["goal"], g["case"], g["method"]): g for g in data["goals"]}
    expected = [("% of peak", largest, "fine-tuning")]
    expected += [("step / fine-tuning", largest, method) for method in FROZEN]
    expected += [("inference / plain", case, method) for case in CASES for method in METHODS[1:]]
    assert sorted(found) == sorted(expected)
    assert all(g["status"].startswith("not measured: CPU") for g in data["goals"])
    assert found[expected[0]]["value"] is None and found[expected[0]]["target"] == "≥ 35"
    for method in FROZEN:  # the numbers are given all the same, from the after rows
        goal = found[("step / fine-tuning", largest, method)]
        assert goal["value"] == row_of(data, largest, method, "after")["step_ratio"] and goal["target"] == "≤ 0.72"
        for case in CASES:
            goal = found[("inference / plain", case, method)]
            assert goal["value"] == row_of(data, case, method, "after")["inference"]["ratio"]["median"]
            assert goal["target"] == "≤ 1.02"
    assert "| goal | T × B | method | value | target | status |" in text
    assert text.count("| not measured: CPU") == len(expected)


# The tiny test encoder: D = 32 hidden, F = 64 intermediate, 1 layer, window 16 (s = 8 each side), C = 2 labels;
# case T = 64, B = 2. Counted in multiply-adds (MACs), a FLOP being half of one.
D, FF, LAYERS, S, C, T, B = 32, 64, 1, 8, 2, 64, 2


def macs_by_hand(j: int, e: int) -> tuple[int, int]:
    """(weight products, attention products) of one forward, in MACs, counted position by position."""
    L, g = j + T, j + 1
    projections = D * D * (T + 4 * L + L + g)  # query on text; key, value, key_global, value_global, output on L
    feed_forward = L * D * FF + L * FF * D
    head = D * D + D * C
    weights = B * (LAYERS * (projections + feed_forward) + head)
    band = min(2 * S + 1, T)  # a text query's neighbours, itself included
    local = (T - 1) * (e + g + band) * D * 2  # every text query but <s>: QKᵀ and PV
    global_rows = g * (e + L) * D * 2
    return weights, B * LAYERS * (local + global_rows)


FLOP_CASES = [
    # method, prefix positions j, extra keys e, weight-gradient passes (fine-tuning's weights train)
    ("fine-tuning", 0, 0, 3),
    ("prefix-tuning", 0, 8, 2),
    ("prefix-propagation", 8, 0, 2),
]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(("method", "j", "e", "weight_passes"), FLOP_CASES)
def test_step_flops_are_the_hand_count(result, method, j, e, weight_passes, variant):
    row = row_of(result[0], "64 × 2", method, variant)
    weights, attention = macs_by_hand(j, e)
    assert (row["prefix_positions"], row["extra_keys"]) == (j, e)
    assert row["forward_flops"] == 2 * (weights + attention)
    assert row["step_flops"] == 2 * (weight_passes * weights + 3 * attention)


def test_fine_tuning_flops_worked_example(result):
    """The hand count above, worked out: 1 layer × (32²·(64 + 5·64 + 1) + 2·64·32·64) + 32² + 64 = 657,472 MACs of
    weights per sequence, 1 layer × (63·18·64 + 1·64·64) = 76,672 MACs of attention; × 2 sequences, × 2 FLOPs,
    × 3 for a step."""
    assert row_of(result[0], "64 × 2", "fine-tuning", "before")["step_flops"] == 3 * 2 * 2 * (657_472 + 76_672)


def test_markdown_table_and_profile(result):
    data, text, out = result
    assert HEADER in text
    rows = [line for line in text.splitlines() if line.startswith(("| 64 × 2 |", "| 128 × 2 |"))]
    assert len(rows) == len(CASES) * len(ROWS)
    assert all(line.count("|") == HEADER.count("|") for line in rows)
    assert data["device"] == "CPU" and data["precision"] == "float32" and data["optimizer"] == "AdamW(fused=True)"
    assert data["compile_backend"] == "eager"
    assert data["profile"] == "profile.txt: fine-tuning before and after at 128 × 2"
    profile = (out / "profile.txt").read_text()
    before, _, after = profile.partition("## after:")
    assert before.startswith("## before:") and after
    for section in (before, after):
        assert "cpu_time_total" in section and "aten::" in section


def test_the_step_times_a_plan_reads_are_the_after_rows_times(result):
    """step_times.json: what `compare --plan --step-times` reads, each method's step and inference, the after
    variant's (a user's run now holds frozen weights, runs flex and compiles its layers)."""
    from peftviz.sweep.cost import load_step_times

    data, _, out = result
    times = load_step_times(out / "step_times.json")
    rows = [r for r in data["rows"] if r["method"] in METHODS and r["variant"] == "after"]
    assert times.batch_size == rows[0]["B"] and times.lengths == tuple(sorted({r["T"] for r in rows}))
    assert times.warmups == data["warmups"] and times.steps == data["repeats"]
    for row in rows:
        assert times.forward_backward[row["method"]][row["T"]] == row["step_s"]
        assert times.inference[row["method"]][row["T"]] == row["inference"]["s"]
        assert times.optimizer[row["method"]] == 0.0  # inside each step
    assert sorted(times.forward_backward) == sorted(METHODS)  # the peer is not a method a plan runs


def test_the_step_times_fall_back_to_before_where_after_has_none(result):
    """An after row that failed, or a gpu.json of before this change (no variants, inference per path): the before
    times."""
    from benchmarks import gpu

    data = json.loads(json.dumps(result[0]))
    failed = row_of(data, "64 × 2", "prefix-tuning", "after")
    failed.clear()
    failed.update({"case": "64 × 2", "T": 64, "B": 2, "method": "prefix-tuning", "variant": "after", "error": "x"})
    times = gpu.step_times(data)
    before = row_of(data, "64 × 2", "prefix-tuning", "before")
    assert times.forward_backward["prefix-tuning"][64] == before["step_s"]
    assert times.inference["prefix-tuning"][64] == before["inference"]["s"]
    assert any("'before' variant" in note and "prefix-tuning at 64" in note for note in times.notes)
    old = {
        **data,
        "rows": [r | {"inference": {"blocks": r["inference"]}} for r in data["rows"] if r["variant"] == "before"],
    }
    for row in old["rows"]:
        del row["variant"]
    times = gpu.step_times(old)
    for row in old["rows"]:
        if row["method"] in METHODS:
            assert times.forward_backward[row["method"]][row["T"]] == row["step_s"]
            assert times.inference[row["method"]][row["T"]] == row["inference"]["blocks"]["s"]


def test_a_failing_case_and_an_exhausted_budget_are_rows(side_runs):
    """2000 tokens exceed the tiny encoder's 1026 positions: every row, both variants, is its error, and the run
    goes on to the end; a budget of 0 s skips every row."""
    failed = json.loads((side_run(side_runs, "fails") / "gpu.json").read_text())
    assert [(r["method"], r["variant"]) for r in failed["rows"]] == ROWS
    assert all(r["error"] for r in failed["rows"])
    assert failed["profile"] == "not run: no fine-tuning row ran"
    assert all(g["status"].startswith("not measured") for g in failed["goals"])
    text = (side_run(side_runs, "budget") / "gpu.md").read_text()
    assert text.count("| skipped: budget |") == len(ROWS)
