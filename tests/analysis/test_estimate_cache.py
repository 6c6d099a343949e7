"""analysis.estimates: a run's estimates are computed once and read back from its folder, keyed by the
predictions and the settings; a bad cache file is ignored and computed again, never trusted."""

import os

import numpy as np
import pytest

from peftviz.analysis import estimates as cache
from peftviz.analysis.group_stats import Settings, run_estimates
from peftviz.calibration import estimators
from peftviz.store import caches
from tests.calibration.test_planted_stat_faults import LABELS, scaled_draw, write_run

SETTINGS = Settings("test", 10, "width", 50, 0)


@pytest.fixture
def run(tmp_path):
    rng = np.random.default_rng(0)
    return write_run(tmp_path, "cached", [scaled_draw(300, 2.0, rng)], scaled_draw(200, 1.5, rng), LABELS)


@pytest.fixture
def computed(monkeypatch):
    """The metrics each call of the estimators computed, in order."""
    calls = []
    bootstrap = estimators.bootstrap_samples

    def counted(probs, labels, indices, n_bins=10, scheme="width", metrics=None):
        calls.append(list(metrics))
        return bootstrap(probs, labels, indices, n_bins, scheme, metrics)

    monkeypatch.setattr(estimators, "bootstrap_samples", counted)
    return calls


def cache_files(run):
    return sorted(caches.cache_path(run.path, cache.ESTIMATES_DIR).glob("*.npz"))


def test_estimates_equal_a_fresh_computation_and_are_read_back_the_second_time(run, computed):
    first = run_estimates(run, SETTINGS, ["accuracy", "ece"])
    assert computed == [["accuracy", "ece"], ["accuracy", "ece"]]  # the point values, then the draws
    again = run_estimates(run, SETTINGS, ["ece", "accuracy"])
    assert len(computed) == 2 and len(cache_files(run)) == 1
    expected = estimators.estimate_all(*run.predictions("test"), 10, "width", 50, 0.95, 0, ["accuracy", "ece"])
    for metric in ("accuracy", "ece"):
        for found in (first[metric], again[metric]):
            assert (found.value, found.low, found.high) == (
                expected[metric].value,
                expected[metric].low,
                expected[metric].high,
            )
            assert np.array_equal(found.samples, expected[metric].samples)


def test_only_the_missing_metrics_are_computed_and_the_file_keeps_all(run, computed):
    run_estimates(run, SETTINGS, ["accuracy"])
    run_estimates(run, SETTINGS, ["accuracy", "brier"])
    assert computed[-1] == ["brier"]
    run_estimates(run, SETTINGS, ["brier", "accuracy"])
    assert computed[-1] == ["brier"] and len(computed) == 4


def test_another_level_reads_the_same_draws(run, computed):
    narrow = run_estimates(run, Settings("test", 10, "width", 50, 0, level=0.5), ["ece"])["ece"]
    wide = run_estimates(run, SETTINGS, ["ece"])["ece"]
    assert len(computed) == 2 and wide.low <= narrow.low <= narrow.high <= wide.high


@pytest.mark.parametrize(
    "changed", [{"n_bins": 15}, {"scheme": "mass"}, {"n_resamples": 40}, {"seed": 1}, {"which": 1}]
)
def test_other_settings_make_another_file(run, computed, changed):
    from dataclasses import replace

    run_estimates(run, SETTINGS, ["ece"])
    other = run_estimates(run, replace(SETTINGS, **changed), ["ece"])["ece"]
    assert len(computed) == 4 and len(cache_files(run)) == 2
    assert other.samples.shape == (changed.get("n_resamples", 50),)


def test_rewritten_predictions_are_estimated_again(run, computed):
    first = run_estimates(run, SETTINGS, ["accuracy"])["accuracy"]
    probs, labels = run.predictions("test")
    np.savez(run.path / "predictions" / "test.npz", probs=probs[::-1].copy(), labels=labels)
    second = run_estimates(run, SETTINGS, ["accuracy"])["accuracy"]
    assert len(computed) == 4 and not np.array_equal(first.samples, second.samples)


def damaged(path, how: str) -> None:
    arrays = dict(np.load(path, allow_pickle=False))
    if how == "garbage":
        path.write_bytes(b"not an npz")
    elif how == "other key":
        np.savez(path, **(arrays | {"key": np.array("0" * 64)}))
    elif how == "short draws":
        np.savez(path, **(arrays | {"draws__ece": arrays["draws__ece"][:10]}))
    elif how == "no value":
        np.savez(path, **{k: v for k, v in arrays.items() if k != "value__ece"})
    elif how == "objects":
        np.savez(path, **(arrays | {"draws__ece": np.array([object()] * 50, dtype=object)}))
    elif how == "a link":
        target = path.with_name("elsewhere.npz")
        os.replace(path, target)
        path.symlink_to(target)


@pytest.mark.parametrize("how", ["garbage", "other key", "short draws", "no value", "objects", "a link"])
def test_a_damaged_cache_is_ignored_and_written_again(run, computed, how):
    good = run_estimates(run, SETTINGS, ["ece"])["ece"]
    damaged(cache_files(run)[0], how)
    again = run_estimates(run, SETTINGS, ["ece"])["ece"]
    assert len(computed) == 4  # computed again, not read
    assert np.array_equal(again.samples, good.samples) and again.value == good.value
    key = cache.estimates_key(*run.predictions("test"), "test", SETTINGS)
    path = caches.cache_path(run.path, cache.ESTIMATES_DIR) / f"{key[:32]}.npz"
    assert not path.is_symlink() and cache.read_estimates(path, key, 50)["ece"][0] == good.value


def test_a_store_that_cannot_be_written_still_gives_the_estimates(run, computed, monkeypatch):
    def refused(path, arrays):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(caches, "write_npz_atomic", refused)
    found = run_estimates(run, SETTINGS, ["accuracy"])["accuracy"]
    run_estimates(run, SETTINGS, ["accuracy"])
    assert found.samples.shape == (50,) and len(computed) == 4 and not cache_files(run)
