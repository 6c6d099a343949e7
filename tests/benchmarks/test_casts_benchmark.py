"""benchmarks/casts.py: the profiler's cast counts per step, before and after frozen weights are held in bf16.

An independent count of what tests/training/test_frozen_dtype.py counts at the dispatcher: holding a frozen
tensor removes exactly its one cast per step (autocast casts each weight once per forward; a frozen one
has no gradient to cast back), and fine-tuning, which freezes nothing, keeps every cast.
"""

import json

import pytest

from benchmarks import casts

pytestmark = pytest.mark.slow  # profiles four training steps: seconds


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("casts")
    casts.main(
        [
            "--out",
            str(out),
            "--cases",
            "64x1",
            "--hidden",
            "24",
            "--layers",
            "2",
            "--methods",
            "fine-tuning,prefix-propagation",
        ]
    )
    data = json.loads((out / "casts.json").read_text())
    assert (out / "casts.md").read_text().count("| 64 × 1 |") == 2
    return {row["method"]: row for row in data["rows"]}


def test_holding_removes_one_cast_per_held_tensor(rows):
    row = rows["prefix-propagation"]
    assert row["held"] == 2 * 9 * 2  # 2 layers × (six attention projections, output, two feed-forward) × (W, b)
    for kernel in ("aten::_to_copy", "aten::copy_"):
        assert row["before"][kernel] - row["after"][kernel] == row["held"], kernel


def test_fine_tuning_holds_nothing_and_keeps_its_casts(rows):
    row = rows["fine-tuning"]
    assert row["held"] == 0 and row["before"]["aten::_to_copy"] == row["after"]["aten::_to_copy"] > 0
