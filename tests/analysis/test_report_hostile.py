"""`report`'s options against hostile input (issue 45), on a store that mixes what a real one holds: groups of
seeds, a damaged run, a run on another data split, a run stopped before its end, a repeat of a seed.

Every case ends in one `peftviz: error:` line, with nothing written and the store's bytes unchanged, or in a
report whose numbers are labelled with what they rest on: the epoch asked for, and one line per run left out.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from peftviz.analysis import group_stats
from peftviz.errors import ConfigError, RunError
from peftviz.store.runs import list_runs
from tests.support.fake_runs import corrupt_run, write_run
from tests.support.helpers import FUZZ, run_report

CASES = 150


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """lora and bitfit at seeds 0 and 1 (complete, 2 epochs); bitfit seed 2 stopped after epoch 1; a lora run
    whose config.json is damaged; lora on another data split; a second lora run at seed 0 (a repeat)."""
    root = tmp_path_factory.mktemp("report") / "runs"
    for seed in (0, 1):
        write_run(root, "lora", seed)
        write_run(root, "bitfit", seed)
    write_run(root, "bitfit", 2, done=1, status="incomplete")
    corrupt_run(root, "lora", 2)
    write_run(root, "lora", 0, data_seed=1)
    write_run(root, "lora", 0)  # the same settings and seed again: counted once
    return root


def report_in(store: Path, folder: Path, *argv: str) -> tuple[int, str, str]:
    """`report` on `store`, its CSV files written under `folder`."""
    return run_report(["--runs-dir", str(store), *argv, "--csv", str(folder / "r")])


def store_bytes(root: Path, analysis: bool = True) -> dict[str, str]:
    """Every file under the store -> its hash (`analysis`: with the estimate caches report may write)."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and (analysis or "analysis" not in path.relative_to(root).parts)
    }


def names_of(root: Path) -> dict[str, str]:
    runs = list_runs(root)
    damaged = next(run.name for run in runs if run.status == "corrupt")
    other = next(run.name for run in runs if run.config and run.data_seed == 1)
    stopped = next(run.name for run in runs if run.status == "incomplete")
    return {"damaged": damaged, "other": other, "stopped": stopped}


# ---------------------------------------------------------------- nothing left out in silence


def test_report_names_each_run_it_leaves_out_in_one_line_with_why(store, tmp_path):
    code, out, _ = report_in(store, tmp_path, "--metric", "ece", "--resamples", "50")
    assert code == 0
    names, lines = names_of(store), out.splitlines()
    damaged = [line for line in lines if names["damaged"] in line]
    unreadable = "config.json: is not JSON (Expecting property name enclosed in double quotes, line 1)"
    assert damaged == [f"Left out, unreadable: {names['damaged']} ({unreadable})."]
    other = [line for line in lines if "other data" in line]
    assert len(other) == 1 and other[0].startswith("Left out, evaluated on other data, bbc-news (data seed 1,")
    assert "lora · 1 seed" in other[0]
    stopped = [line for line in lines if names["stopped"] in line]
    why = "no test predictions yet (written when a run finishes)"
    assert stopped == [f"Left out: {names['stopped']} (seed 2, incomplete, 1 epoch): {why}."]
    assert sum("a repeat of a seed" in line for line in lines) == 1
    # what the tables rest on: two seeds each, the stopped seed not among them
    assert "| bitfit | 0,1 |" in out and "| lora | 0,1 |" in out
    assert "rest on 40 test documents shared by every run, and on bitfit 2 seeds, lora 2 seeds" in out
    assert "ECE (equal width): no difference is larger than chance (1 pair)." in out


def test_a_unit_named_twice_counts_once_and_a_damaged_store_reads_by_dataset(store, tmp_path):
    code, out, _ = report_in(
        store, tmp_path, "bitfit", "bitfit", "--dataset", "bbc-news", "--metric", "accuracy", "--resamples", "20"
    )
    assert code == 0 and out.count("| bitfit |") == 1 and "Differences" not in out


def test_a_run_short_of_the_epoch_asked_is_left_out_and_named_not_judged_at_another(store, tmp_path):
    code, out, _ = report_in(store, tmp_path, "--epoch", "2", "--metric", "accuracy", "--resamples", "50")
    assert code == 0
    stopped = names_of(store)["stopped"]
    assert f"Left out: {stopped} (seed 2, incomplete, 1 epoch): epoch 2 not finished." in out.splitlines()
    assert "Predictions: validation, epoch 2." in out


@pytest.mark.parametrize("epoch", [0, -1, 3, 99, 10**30])
def test_an_epoch_outside_the_runs_epochs_is_refused_and_nothing_written(store, tmp_path, epoch):
    before = store_bytes(store)
    code, out, err = report_in(store, tmp_path, "--epoch", str(epoch))
    assert code == 1 and not out and err.count("\n") == 1
    assert err.startswith("peftviz: error: epoch ")
    assert ("must be >= 1" in err) if epoch < 1 else ("they have epochs 1 to 2" in err)
    assert store_bytes(store) == before and not list(tmp_path.iterdir())


@pytest.mark.parametrize("dataset", ["", " ", "\n"])
def test_an_empty_dataset_is_refused(store, tmp_path, dataset):
    code, out, err = report_in(store, tmp_path, "--dataset", dataset)
    assert code == 1 and not out and err.startswith("peftviz: error: --dataset takes a dataset's name or path")


@pytest.mark.parametrize("prefix", ["", "a/", ".", "..", "/proc/x/y", "/etc/passwd/x"])
def test_a_csv_prefix_that_cannot_be_written_is_refused_before_any_estimate(store, tmp_path, prefix):
    before = store_bytes(store)
    code, out, err = run_report(["--runs-dir", str(store), "--csv", prefix])
    assert code in (1, 2) and not out and err.startswith("peftviz: error: ") and err.count("\n") == 1
    assert store_bytes(store) == before


def test_settings_refuse_bad_values_in_one_line():
    for kwargs in (
        {"which": 0},
        {"which": "../x"},
        {"n_bins": 0},
        {"n_bins": 10**9},
        {"n_resamples": 10**9},
        {"seed": -1},
        {"level": 1.0},
        {"scheme": "log"},
        {"n_bins": 2.5},
        {"n_resamples": True},
    ):
        with pytest.raises((ConfigError, RunError)) as raised:
            group_stats.Settings(**kwargs)
        assert "\n" not in str(raised.value)


# ---------------------------------------------------------------- generated hostile options


def texts() -> st.SearchStrategy[str]:
    return st.one_of(st.text(max_size=30), st.sampled_from(["bbc-news", "lora", "bitfit", "..", "/", "-x", "\x00"]))


def numbers() -> st.SearchStrategy[str]:
    small = st.integers(-3, 4).map(str)
    return st.one_of(small, st.integers().map(str), st.sampled_from(["1.5", "nan", "inf", "", "0x10", "1e3", "٣"]))


OPTIONS = {  # option -> what a careless or hostile user types after it
    "--epoch": numbers(),
    "--bins": numbers(),
    "--resamples": st.one_of(st.integers(-2, 40).map(str), numbers()),
    "--bootstrap-seed": numbers(),
    "--dataset": texts(),
    "--scheme": st.sampled_from(["width", "mass", "log", ""]),
    "--group-interval": st.sampled_from(["bootstrap", "t", "z"]),
    "--metric": st.sampled_from(["accuracy", "ece", "nll", "smooth", ""]),
    "--power-target": st.sampled_from(["0.8", "0", "1", "nan", "-1", "x"]),
    "--csv": st.one_of(texts(), st.sampled_from(["", "/", "a/", "/proc/x/y", "/etc/passwd/x", "sub/r"])),
}


@st.composite
def report_arguments(draw) -> list[str]:
    """A few of `report`'s options with hostile values, and maybe a unit or two named."""
    chosen = draw(st.lists(st.sampled_from(sorted(OPTIONS)), max_size=4, unique=True))
    argv = [part for option in chosen for part in (option, draw(OPTIONS[option]))]
    if "--metric" not in chosen:
        argv += ["--metric", "accuracy"]  # one cheap metric keeps the cases that pass fast
    if "--resamples" not in chosen:
        argv += ["--resamples", "20"]
    return draw(st.one_of(st.just([]), st.lists(texts(), max_size=2))) + argv


def test_hostile_report_options_end_in_one_line_or_a_labelled_report(store, tmp_path_factory):
    outcomes = Counter()

    @settings(FUZZ, max_examples=CASES)
    @given(argv=report_arguments())
    def check(argv):
        folder = tmp_path_factory.mktemp("out")
        argv = [arg if not arg.startswith("sub/") else str(folder / arg) for arg in argv]
        outcomes[report_outcome(store, folder, argv)] += 1

    check()
    assert outcomes["report"] >= 20 and outcomes["refused"] >= 40, outcomes


def report_outcome(store: Path, folder: Path, argv: list[str]) -> str:
    """Run `report` with `argv` in `folder`: "report" (labelled with the epoch asked, its CSV files written) or
    "refused" (one line, nothing written, not even an estimate cache); anything else fails."""
    before, caches = store_bytes(store, analysis=False), store_bytes(store)
    cwd = os.getcwd()
    os.chdir(folder)  # a relative --csv lands in the case's own folder
    try:
        code, out, err = run_report(["--runs-dir", str(store), *argv])
    finally:
        os.chdir(cwd)
    assert store_bytes(store, analysis=False) == before  # report writes estimate caches only
    if code != 0:
        event("refused")
        assert code in (1, 2) and err.startswith("peftviz: error: ") and err.count("\n") == 1
        assert not out and store_bytes(store) == caches  # refused before any estimate
        return "refused"
    event("report")
    asked = argv[argv.index("--epoch") + 1] if "--epoch" in argv else None
    expected = "Predictions: test split" if asked is None else f"Predictions: validation, epoch {int(asked)}."
    assert not err and expected in out
    assert sum(line.startswith("wrote ") for line in out.splitlines()) >= 2
    return "report"
