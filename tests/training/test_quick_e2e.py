"""End to end: the quick comparison on the offline MiniLM and bbc-news (about 10 minutes on 2 cores).

Run on its own with:  .venv/bin/python -m pytest -m long
"""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from peftviz import calibration
from peftviz.store.runs import list_runs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.long
def test_quick_comparison_trains_every_method_to_85_percent_within_12_minutes(tmp_path):
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "peftviz", "compare", "--preset", "quick", "--runs-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20 * 60,
        check=False,
    )
    minutes = (time.perf_counter() - started) / 60
    assert result.returncode == 0, result.stderr[-2000:]
    runs = list_runs(tmp_path)
    assert len(runs) == 6 and all(run.status == "complete" for run in runs)
    for run in runs:
        assert run.best_metrics["accuracy"] >= 0.85, (run.label, run.best_metrics["accuracy"])
        probs, labels = run.predictions(run.best_epoch)
        assert run.best_metrics["ece"] == calibration.ece(probs, labels, n_bins=10)
    assert minutes <= 12, f"took {minutes:.1f} minutes"
    assert "| tiny-attention 4H averaged |" in result.stdout
