"""Nothing left out in silence (issue 45): when Home, the Calibration, Confidence or Tour page leaves runs out (on
another data split, damaged, unreadable, still training or stopped, recorded without parameters), it says so in
one line per reason naming them; a run on other data leaves the comparable runs compared. On a fake store
(`tests/support/fake_runs.py`): run folders written by the store's writer, no training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from peftviz.analysis import calibration as analysis
from peftviz.app import tour
from peftviz.record import open_run
from peftviz.store.runs import Group, list_runs
from tests.app.conftest import open_page
from tests.app.test_page_calibration import table
from tests.app.test_page_tour import fake_run
from tests.support.fake_runs import LABELS, corrupt_run, write_run
from tests.support.helpers import charts

PAGES = Path(__file__).resolve().parents[2] / "pages"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """lora and bitfit at seeds 0 and 1 (complete, 2 epochs) on data seed 0; lora seed 0 on data seed 1;
    bitfit seed 2 stopped after epoch 1; a lora run stopped before its first epoch; an unreadable run; a run
    recorded from another training loop (predictions, no parameters)."""
    root = tmp_path_factory.mktemp("left-out") / "runs"
    for seed in (0, 1):
        write_run(root, "lora", seed)
        write_run(root, "bitfit", seed)
    write_run(root, "lora", 0, data_seed=1)
    write_run(root, "bitfit", 2, done=1, status="incomplete")
    write_run(root, "lora", 3, done=0, status="incomplete")
    corrupt_run(root, "lora", 4)
    labels = np.random.default_rng(0).integers(0, len(LABELS), size=40)
    with open_run(
        "my loop", method="lora", model="tiny-bert", dataset="bbc-news", label_names=LABELS, runs_dir=root
    ) as recorder:
        recorder.add_epoch(
            labels, probs=np.full((40, 3), 1 / 3), test_labels=labels, test_probs=np.full((40, 3), 1 / 3)
        )
    return root


@pytest.fixture(scope="module")
def runs(store) -> dict:
    """The store's runs by what they are."""
    found = list_runs(store)
    by = {}
    for run in found:
        if run.status == "corrupt":
            by["unreadable"] = run
        elif run.recorded:
            by["recorded"] = run
        elif run.data_seed == 1:
            by["other data"] = run
        elif not run.metrics:
            by["unstarted"] = run
        elif run.status == "incomplete":
            by["stopped"] = run
        else:
            by[f"{run.config.method} {run.seed}"] = run
    return by


def captions(page: AppTest) -> list[str]:
    return [caption.value for caption in page.caption]


def one_line(lines: list[str], start: str) -> str:
    """The one caption starting with `start`, checked to be one line."""
    (line,) = [line for line in lines if line.startswith(start)]
    assert "\n" not in line
    return line


def choose_every_single_run(page: AppTest, key: str, runs: dict) -> AppTest:
    page.radio(key=f"{key}_show").set_value("single runs").run()
    listed = [run.name for name, run in runs.items() if name not in ("unreadable", "unstarted", "recorded")]
    return page.multiselect(key=f"{key}_units_False").set_value(listed).run()


# ---------------------------------------------------------------- a run on other data


@pytest.mark.parametrize(
    "name, key, first_column", [("7_Confidence.py", "confidence", "unit"), ("2_Calibration.py", "calibration", "unit")]
)
def test_a_run_on_other_data_is_named_and_the_comparable_runs_compared(on_store, runs, name, key, first_column):
    page = choose_every_single_run(open_page(name), key, runs)
    assert not page.exception
    other = runs["other data"]
    line = one_line(captions(page), "Left out of the comparison, evaluated on other data:")
    assert f"{other.name}, on bbc-news (data seed 1, limit 120)" in line
    assert "compares the chosen runs on bbc-news (data seed 0, limit 120)" in line
    assert not [
        error.value for error in page.error if "different data" in error.value or "same examples" in error.value
    ]
    compared = (
        set(table(page, first_column)["unit"])
        if key == "calibration"
        else set(next(t.value for t in page.table if "AURC" in t.value.columns)["unit"])
    )
    comparable = [run.name for label, run in runs.items() if label in ("lora 0", "lora 1", "bitfit 0", "bitfit 1")]
    assert sorted(next(name for name in comparable if name in unit) for unit in compared) == sorted(comparable)
    sections = 2 if key == "confidence" else 1  # each section of the Confidence page says what it leaves out
    stopped = [line for line in captions(page) if line.startswith("Left out:")]
    assert len(stopped) == sections and "\n" not in stopped[0]
    assert f"{runs['stopped'].name} (seed 2, incomplete, 1 epoch)" in stopped[0] and "no test predictions" in stopped[0]
    if key == "confidence":  # the section is drawn, and the conformal section too
        assert "risk-coverage" in charts(page) and "conformal-epochs" in charts(page)


def test_judging_keeps_the_split_most_chosen_units_share_and_a_tie_the_first_ones(runs):
    units = [Group(run.name, [run]) for run in (runs["other data"], runs["lora 0"], runs["bitfit 0"])]
    judging = analysis.judgeable(units, "test", one_split=True)
    assert [u.runs[0] for u in judging.units] == [runs["lora 0"], runs["bitfit 0"]]
    assert [u.runs[0] for u in judging.other_data] == [runs["other data"]]
    tie = analysis.judgeable(units[:2], "test", one_split=True)
    assert [u.runs[0] for u in tie.units] == [runs["other data"]] and tie.split[1] == 1
    assert analysis.judgeable(units, "test").other_data == []  # without one_split nothing is dropped


def test_a_groups_curves_are_of_the_seeds_that_finished_the_epoch_and_name_the_others(on_store, runs):
    """bitfit's seed 2 stopped after epoch 1: at epoch 2 its group's smooth curve is the mean of seeds 0 and 1, not
    of two seeds' epoch 2 and one seed's epoch 1, and its ECE per epoch, drawn to epoch 1, says why it stops."""
    page = open_page("2_Calibration.py")
    assert not page.exception and not page.error and page.slider(key="calibration_epoch").value == 2
    names = [trace["name"] for trace in charts(page)["smooth-reliability"]["data"]]
    assert {"bitfit seed 0", "bitfit seed 1"} <= set(names) and "bitfit seed 2" not in names
    line = f"Left out: {runs['stopped'].name} (seed 2, incomplete, 1 epoch): epoch 2 not finished."
    assert line in captions(page)
    (short,) = [line for line in captions(page) if line.startswith("A group's ECE per epoch is drawn at the epochs")]
    assert f"to epoch 1 (seeds behind: {runs['stopped'].name} (seed 2, incomplete, 1 epoch))" in short
    page.slider(key="calibration_epoch").set_value(1).run()
    names = [trace["name"] for trace in charts(page)["smooth-reliability"]["data"]]
    assert "bitfit seed 2" in names and " 95% high" in " ".join(names)  # three seeds at epoch 1: banded


# ---------------------------------------------------------------- what the pickers and defaults leave out


@pytest.mark.parametrize("name", ["2_Calibration.py", "7_Confidence.py"])
def test_the_pickers_name_unreadable_and_unstarted_runs_and_what_the_default_left_out(on_store, runs, name):
    page = open_page(name)
    assert not page.exception
    lines = captions(page)
    assert runs["unreadable"].name in one_line(lines, "Left out, unreadable:")
    assert f"{runs['unstarted'].name} (seed 3, incomplete, 0 epochs)" in one_line(
        lines, "Left out, no finished epoch yet:"
    )
    default = one_line(lines, "Not chosen by default (add them above):")
    assert "evaluated on other data, bbc-news (data seed 1, limit 120)" in default and "lora · " in default


def test_the_default_line_names_each_unit_with_why():
    """The reasons, on runs listed without files."""
    kept = [fake_run(i, "lora", limit=120) for i in range(2)]
    other = fake_run(5, "bitfit", limit=60)
    model = fake_run(6, "ia3", "tiny-bert", limit=120)
    units = [Group(run.name, [run]) for run in [*kept, other, model]]
    names = {unit.key: unit.runs[0].config.method for unit in units}
    line = analysis.not_by_default(units, [u.key for u in units[:2]], names, 2, single_runs=True)
    assert line == (
        "Not chosen by default (add them above): evaluated on other data, bbc-news (data seed 0, limit "
        "60), so not comparable with the default's: bitfit; judged by another model (tiny-bert): ia3."
    )
    grouped = analysis.not_by_default(units, [u.key for u in units[:2]], names, 2)
    assert grouped.endswith("beyond the default's 2: ia3.")  # a group's default takes any model on the split
    assert analysis.not_by_default(units, [u.key for u in units], names, 6) is None


# ---------------------------------------------------------------- Home


def test_home_names_the_runs_its_groups_table_does_not_count(on_store, runs):
    page = open_page("0_home.py")
    assert not page.exception and not page.error
    lines = captions(page)
    assert runs["unreadable"].name in one_line(lines, "Left out, unreadable:")
    assert f"{runs['unstarted'].name} (seed 3, incomplete, 0 epochs)" in one_line(
        lines, "Left out, no finished epoch yet:"
    )
    assert f"{runs['stopped'].name} (seed 2, incomplete, 1 epoch): no test predictions yet" in one_line(
        lines, "Left out:"
    )
    groups = page.dataframe[1].value
    assert groups.set_index("method").loc["bitfit", "complete"] == 2  # counted on the two that finished


def test_homes_resume_hint_names_the_console_command_the_readme_uses(on_store):
    readme = (PAGES.parent / "README.md").read_text()
    assert ".venv/bin/peftviz train" in readme  # the console command, as the README names it
    status = open_page("0_home.py").caption[0].value
    assert "`.venv/bin/peftviz train --resume RUN` continues one trained here" in status
    assert "python -m peftviz" not in status


# ---------------------------------------------------------------- the Tour


def test_the_tour_names_what_its_comparison_leaves_out(on_store, runs):
    page = open_page("6_Tour.py", step="2")
    assert not page.exception and not page.error
    lines = captions(page)
    assert (
        one_line(lines, "Not drawn, not complete:")
        == "Not drawn, not complete: bitfit seed 2 (incomplete), lora seed 3 (incomplete)."
    )
    assert runs["unreadable"].name in one_line(lines, "Not drawn, unreadable:")
    recorded = one_line(lines, "Not drawn, recorded from other training loops")
    assert "my loop seed 0" in recorded and "not the parameters the attention steps rebuild a model from" in recorded
    others = one_line(lines, "Not drawn, other comparisons")
    assert "tiny-bert on bbc-news (120 examples per split, 32 tokens, 2 epochs), data seed 1 (1 run)" in others


def test_the_tours_left_out_lines_cover_every_run_it_does_not_draw(runs):
    every = list(runs.values())
    shown = tour.comparison_of(every)
    drawn = {run.name for run in shown.members}
    lines = " ".join(tour.left_out(every, shown))
    for name, run in runs.items():
        if run.name not in drawn:
            assert run.name in lines or f"{run.label} seed {run.seed}" in lines or "other comparisons" in lines, name
    assert drawn == {runs[f"{method} {seed}"].name for method in ("lora", "bitfit") for seed in (0, 1)}


def test_a_group_with_a_seed_still_training_says_so_in_the_groups_picker(tmp_path, monkeypatch):
    """The groups picker of the Calibration page marks a group while one of its seeds trains, as a single run's
    name says "(training)"; the group's name in tables and legends stays as it is."""
    for seed in (0, 1):
        write_run(tmp_path, "lora", seed)
    writer = write_run(tmp_path, "lora", 2, done=1, status="training")  # its lock held: the run lists as training
    monkeypatch.setenv("PEFTVIZ_RUNS", str(tmp_path))
    try:
        page = open_page("2_Calibration.py")
        picker = page.multiselect(key="calibration_units_True")
        assert picker.options == ["lora (training: seed 2)"]  # the labels the page shows
        assert not page.exception
    finally:
        writer.close()
