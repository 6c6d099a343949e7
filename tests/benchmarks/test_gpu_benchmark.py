"""benchmarks/gpu.py in its test mode: a tiny Longformer on the CPU, run as the GPU command runs (a subprocess).

What the GPU run will rely on is checked on the CPU: every method × case row has its times, the ratios
are what the stored times give, the FLOP count is the hand count of its docstring's formula, the
markdown table is there, and a row that fails or does not fit the budget is a row saying so.
"""

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts the script as a process: about 20 s on 2 busy cores

ROOT = Path(__file__).resolve().parents[2]
METHODS = ["fine-tuning", "prefix-tuning", "prefix-propagation", "kernel-prefix-propagation"]
PEER = "transformers Longformer (fine-tuning)"
CASES = ["64 × 2", "128 × 2"]  # the script's --test cases
HEADER = (
    "| T × B | method | step s | inference s (blocks / flex) | peak GiB | TFLOP/s | % of peak | step / fine-tuning |"
)


def run_script(out: Path, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "benchmarks/gpu.py", "--test", "--out", str(out), *flags]
    env = {**os.environ, "PYTHONPATH": ".", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    child = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert child.returncode == 0, child.stderr[-3000:]
    return child


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> tuple[dict, str, Path]:
    out = tmp_path_factory.mktemp("gpu")
    run_script(out, "--profile")
    return json.loads((out / "gpu.json").read_text()), (out / "gpu.md").read_text(), out


def row_of(data: dict, case: str, method: str) -> dict:
    (row,) = [r for r in data["rows"] if r["case"] == case and r["method"] == method]
    return row


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("method", [*METHODS, PEER])
def test_every_row_has_positive_finite_times(result, case, method):
    row = row_of(result[0], case, method)
    assert "error" not in row and "skipped" not in row
    blocks = row["inference"]["blocks"]["s"]
    for seconds in (row["step_s"], blocks, *row["step_times"]):
        assert math.isfinite(seconds) and seconds > 0
    assert row["peak_gib"] is None and row["percent_of_peak"] is None  # the CPU: no memory peak, no device peak
    assert row["trainable"] > 0


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("method", [*METHODS, PEER])
def test_ratios_are_the_stored_times_ratios(result, case, method):
    data = result[0]
    row, fine_tuning = row_of(data, case, method), row_of(data, case, "fine-tuning")
    assert row["step_s"] == statistics.median(row["step_times"])
    assert row["step_ratio"] == pytest.approx(row["step_s"] / statistics.median(fine_tuning["step_times"]), rel=1e-12)
    assert row["step_tflops"] == pytest.approx(row["step_flops"] / row["step_s"] / 1e12, rel=1e-12)
    if method == "fine-tuning":  # the plain encoder itself: medians, no ratio
        assert "ratio" not in row["inference"]["blocks"]
        return
    ratio = row["inference"]["blocks"]["ratio"]
    by_hand = sorted(ours / plain for ours, plain in ratio["pairs"])
    assert len(by_hand) == 4  # --test's pairs
    assert ratio["median"] == pytest.approx((by_hand[1] + by_hand[2]) / 2, rel=1e-12)
    assert (ratio["low"], ratio["high"]) == (by_hand[0], by_hand[-1])
    assert row["inference"]["blocks"]["s"] == statistics.median(ours for ours, _ in ratio["pairs"])


# The tiny test encoder: D = 32 hidden, F = 64 intermediate, 2 layers, window 16 (s = 8 each side), C = 2 labels;
# case T = 64, B = 2. Counted in multiply-adds (MACs), a FLOP being half of one.
D, FF, LAYERS, S, C, T, B = 32, 64, 2, 8, 2, 64, 2


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


@pytest.mark.parametrize(("method", "j", "e", "weight_passes"), FLOP_CASES)
def test_step_flops_are_the_hand_count(result, method, j, e, weight_passes):
    row = row_of(result[0], "64 × 2", method)
    weights, attention = macs_by_hand(j, e)
    assert (row["prefix_positions"], row["extra_keys"]) == (j, e)
    assert row["forward_flops"] == 2 * (weights + attention)
    assert row["step_flops"] == 2 * (weight_passes * weights + 3 * attention)


def test_fine_tuning_flops_worked_example(result):
    """The hand count above, worked out: 2 layers × (32²·(64 + 5·64 + 1) + 2·64·32·64) + 32² + 64 = 1,313,856 MACs of
    weights per sequence, 2 layers × (63·18·64 + 1·64·64) = 153,344 MACs of attention; × 2 sequences, × 2 FLOPs,
    × 3 for a step."""
    assert row_of(result[0], "64 × 2", "fine-tuning")["step_flops"] == 3 * 2 * 2 * (1_313_856 + 153_344)


def test_markdown_table_and_profile(result):
    data, text, out = result
    assert HEADER in text
    rows = [line for line in text.splitlines() if line.startswith(("| 64 × 2 |", "| 128 × 2 |"))]
    assert len(rows) == len(CASES) * (len(METHODS) + 1)
    assert data["device"] == "CPU" and data["precision"] == "float32" and data["optimizer"] == "AdamW(fused=True)"
    assert data["profile"] == "profile.txt: fine-tuning at 128 × 2"
    profile = (out / "profile.txt").read_text()
    assert "cpu_time_total" in profile and "aten::" in profile


def test_a_failing_case_and_an_exhausted_budget_are_rows(tmp_path):
    """2000 tokens exceed the tiny encoder's 1026 positions: every row is its error, and the run goes on to the
    end; a budget of 0 s skips every row."""
    run_script(tmp_path / "fails", "--cases", "2000x1", "--profile")
    failed = json.loads((tmp_path / "fails" / "gpu.json").read_text())
    assert [r["method"] for r in failed["rows"]] == [*METHODS, PEER]
    assert all(r["error"] for r in failed["rows"])
    assert failed["profile"] == "not run: no fine-tuning row ran"
    run_script(tmp_path / "budget", "--cases", "64x2", "--budget-s", "0")
    text = (tmp_path / "budget" / "gpu.md").read_text()
    assert text.count("| skipped: budget |") == len(METHODS) + 1


def test_the_step_times_a_plan_reads_are_the_rows_times(result):
    """step_times.json: what `compare --plan --step-times` reads, each method's step and blocks inference."""
    from peftviz.sweep.cost import load_step_times

    data, _, out = result
    times = load_step_times(out / "step_times.json")
    rows = [r for r in data["rows"] if r["method"] in METHODS]
    assert times.batch_size == rows[0]["B"] and times.lengths == tuple(sorted({r["T"] for r in rows}))
    assert times.warmups == data["warmups"] and times.steps == data["repeats"]
    for row in rows:
        assert times.forward_backward[row["method"]][row["T"]] == row["step_s"]
        assert times.inference[row["method"]][row["T"]] == row["inference"]["blocks"]["s"]
        assert times.optimizer[row["method"]] == 0.0  # inside each step
