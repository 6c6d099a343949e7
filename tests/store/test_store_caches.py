"""The store's one way of keeping analysis caches in a run folder (`peftviz.store.caches`)."""

import json

import numpy as np
import pytest

from peftviz.store import caches


def test_json_and_arrays_round_trip_without_pickle(tmp_path):
    assert caches.write_json(tmp_path, "sweep.json", {"rows": [1, 2]})
    assert caches.write_arrays(tmp_path, "estimates/k.npz", {"key": np.array("k"), "draws": np.arange(3.0)})
    assert json.loads(caches.cache_path(tmp_path, "sweep.json").read_text()) == {"rows": [1, 2]}
    with np.load(caches.cache_path(tmp_path, "estimates/k.npz"), allow_pickle=False) as stored:
        assert str(stored["key"]) == "k" and stored["draws"].tolist() == [0.0, 1.0, 2.0]
    assert sorted(p.name for p in (tmp_path / "analysis").rglob("*")) == ["estimates", "k.npz", "sweep.json"]


@pytest.mark.parametrize("link", ["run", "analysis", "analysis/estimates"])
def test_a_cache_is_never_written_through_a_link(tmp_path, link):
    outside, run = tmp_path / "outside", tmp_path / "store" / "run"
    outside.mkdir()
    linked = run.parent / link if link == "run" else run / link
    linked.parent.mkdir(parents=True, exist_ok=True)
    linked.symlink_to(outside, target_is_directory=True)
    assert not caches.write_arrays(run, "estimates/k.npz", {"draws": np.zeros(2)})
    assert list(outside.rglob("*")) == []


def test_a_store_that_cannot_be_written_costs_only_the_recomputation(tmp_path, monkeypatch):
    def full_disk(path, write):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(caches, "atomic_write", full_disk)
    assert caches.write_json(tmp_path, "sweep.json", {}) is False
    assert not caches.cache_path(tmp_path, "sweep.json").exists()
