"""Every page on a store as a newcomer's becomes (`mixed_store`: single runs beside groups of 2 and 3
seeds, an imported run, two datasets, two models): no exception anywhere, and each page draws what
applies. First the Calibration page's mixed selection of a single run and groups of seeds (issue 32,
item 1: its ECE figure raised TypeError on the single run's NaN members), in the figure and on the page."""

import shutil
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from peftviz.analysis import calibration as analysis
from peftviz.analysis.group_stats import seeds_cell, unique_names
from peftviz.app import tour
from peftviz.figures import calibration as figures
from peftviz.store.runs import group_runs, list_runs, load_run
from tests.app.conftest import open_page
from tests.app.test_page_calibration import charts_by_kind, table
from tests.support.helpers import charts

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "pages"
CALIBRATION = str(PAGES / "2_Calibration.py")


@pytest.fixture(scope="module")
def groups(mixed_store) -> dict:
    """The store's groups by label ("prefix-propagation" on the CSV is "csv prefix-propagation")."""
    found = {}
    for group in group_runs(list_runs(mixed_store)):
        csv = group.runs[0].config.dataset.endswith(".csv")
        found[f"csv {group.label}" if csv else group.label] = group
    return found


@pytest.fixture(autouse=True)
def few_resamples(monkeypatch):
    """20 resamples keep the page's bootstraps quick (smooth ECE costs ~7 ms a resample)."""
    from peftviz.analysis import group_stats

    monkeypatch.setattr(group_stats, "RESAMPLE_CHOICES", (20, 1000))


def test_the_mixed_store_holds_what_a_newcomers_store_holds(groups):
    sizes = {label: len(group.runs) for label, group in groups.items()}
    assert sizes["prefix-propagation"] == 3 and sizes["lora"] == 2 and sizes["fine-tuning"] == 1
    assert groups["lora (imported)"].runs[0].imported
    assert sizes["my-adapter"] == 2 and groups["trainer lora"].runs[0].recorded["by"] == "transformers-trainer"
    runs = [run for group in groups.values() for run in group.runs]
    assert len({run.config.dataset for run in runs}) == len({run.config.model for run in runs}) == 3


# ---------------------------------------------------------------- item 1: a single run beside groups of seeds


def test_the_ece_figure_draws_a_single_run_beside_groups_of_seeds_in_either_order(groups):
    single = analysis.ece_over_epochs(groups["fine-tuning"].runs[0], 10, "width", 20, "fine-tuning")
    three = analysis.group_ece_over_epochs(groups["prefix-propagation"], 10, "width", "pp", 20)
    for curves in (pd.concat([single, three]), pd.concat([three, single])):  # a single run's members: NaN
        figure = figures.ece_over_epochs_figure(curves, "width", 10, "band", 2)
        seed_lines = {trace.name: list(trace.y) for trace in figure.data if " seed " in trace.name}
        assert list(seed_lines) == ["pp seed 0", "pp seed 1", "pp seed 2"]  # the single run draws none
        for index, values in enumerate(seed_lines.values()):
            assert values == [members[index] for members in three["members"]]
        lines = {trace.name: list(trace.y) for trace in figure.data if trace.name in ("fine-tuning", "pp")}
        assert lines == {"fine-tuning": single["ece"].tolist(), "pp": three["ece"].tolist()}
        highest = max(max(single["high"]), max(three["high"]), max(max(m) for m in three["members"]))
        assert figure.layout.yaxis.range[1] == pytest.approx(highest * 1.1)


@pytest.fixture
def calibration(app_mixed_store):
    return AppTest.from_file(CALIBRATION, default_timeout=300).run()


def choose_groups(page: AppTest, groups: dict, labels: list[str]) -> AppTest:
    return page.multiselect(key="calibration_units_True").set_value([groups[label].key for label in labels]).run()


def test_the_calibration_page_shows_a_single_run_beside_groups_of_two_and_three_seeds(calibration, groups):
    assert not calibration.exception and not calibration.error
    assert calibration.radio(key="calibration_show").value == "groups of seeds"
    choose_groups(calibration, groups, ["fine-tuning", "prefix-propagation", "lora"])
    assert not calibration.exception and not calibration.error
    found = charts_by_kind(calibration)
    (ece,) = found["ece"]
    names = unique_names(list(groups.values()))  # "prefix-propagation · <key>": the CSV has one too
    three = names[groups["prefix-propagation"].key]
    seed_lines = sorted(trace["name"] for trace in ece["data"] if " seed " in trace["name"])
    assert seed_lines == ["lora seed 0", "lora seed 1", *(f"{three} seed {s}" for s in range(3))]
    assert len(found["smooth"]) == len(found["differences"]) == len(found["recalibration"]) == 1
    summary = table(calibration, "unit").set_index("unit")
    # the comparison names units apart among those compared: one prefix-propagation there
    assert summary["seeds"].to_dict() == {
        "fine-tuning": "one run: seed 0",
        "prefix-propagation": "0,1,2",
        "lora": "0,1",
    }
    assert len(table(calibration, "pair")) == 3
    frames = [element.value for element in calibration.table]
    improvement = next(frame for frame in frames if frame.columns[0] == "pair" and " vs " in frame.iloc[0, 0])
    filled = improvement.set_index("pair").ne("").any(axis=1)  # P(A better): only between groups of 2+ seeds
    assert filled.to_dict() == {
        "fine-tuning vs prefix-propagation": False,
        "fine-tuning vs lora": False,
        "prefix-propagation vs lora": True,
    }


def test_every_view_of_the_calibration_page_renders_on_the_mixed_store(calibration, groups):
    page = calibration
    same_split = [label for label, group in groups.items() if group.runs[0].config.dataset == "bbc-news"]
    choose_groups(page, groups, same_split)
    assert not page.exception and not page.error
    assert len(table(page, "unit")) == len(same_split) == 8
    for key, value in [
        ("calibration_scheme", "mass"),
        ("calibration_split", "validation (chosen epoch)"),
        ("recalibration_map", "vector"),
        ("recalibration_map", "isotonic"),
    ]:
        page.radio(key=key).set_value(value).run()
        assert not page.exception and not page.error, (key, value)
    page.selectbox(key="calibration_difference_metric").set_value("smooth_ece").run()
    page.selectbox(key="recalibration_run").select_index(-1).run()  # the imported run
    page.slider(key="calibration_epoch").set_value(1).run()
    assert not page.exception and not page.error
    assert len(charts_by_kind(page)["recalibration"]) == 1

    page.radio(key="calibration_show").set_value("single runs").run()
    assert not page.exception and not page.error
    shown = [run for run in list_runs() if run.name in page.multiselect(key="calibration_units_False").value]
    newest = max(list_runs(), key=lambda run: run.created)
    assert newest in shown and {analysis.evaluated_on(run) for run in shown} == {analysis.evaluated_on(newest)}
    assert len(charts_by_kind(page)["reliability"]) == len(shown) == 6
    page.radio(key="calibration_diagram").set_value("classwise (one-vs-rest)").run()
    assert not page.exception and not page.error
    assert len(charts_by_kind(page)["classwise"]) == 6


def test_runs_recorded_by_other_loops_compare_with_each_other(calibration, groups):
    """The Trainer's LoRA (one run) beside a loop's own method at two seeds, on the same "tokens" examples."""
    choose_groups(calibration, groups, ["trainer lora", "my-adapter"])
    assert not calibration.exception and not calibration.error
    assert list(table(calibration, "unit")["unit"]) == ["trainer lora", "my-adapter"]


def test_groups_on_different_data_are_drawn_and_the_other_left_out_of_the_comparison_in_one_line(calibration, groups):
    """Issue 45: the comparison leaves the group on other data out, naming it, and compares the rest (here the
    first chosen: a tie), instead of refusing the whole comparison."""
    choose_groups(calibration, groups, ["csv prefix-propagation", "prefix-propagation"])
    assert not calibration.exception and not calibration.error
    (line,) = [
        c.value for c in calibration.caption if c.value.startswith("Left out of the comparison, evaluated on other")
    ]
    assert groups["prefix-propagation"].name in line and "bbc-news" in line and "topics.csv" in line
    assert "\n" not in line
    assert list(table(calibration, "unit")["seeds"]) == [seeds_cell(groups["csv prefix-propagation"].seeds)]
    assert len(charts_by_kind(calibration)["ece"]) == len(charts_by_kind(calibration)["smooth"]) == 1


# ---------------------------------------------------------------- every other page


def test_home_lists_every_run_and_the_groups_with_their_test_intervals(app_mixed_store, groups):
    page = open_page("0_home.py")
    assert not page.exception and not page.error
    runs_table, groups_table = page.dataframe[0].value, page.dataframe[1].value
    assert len(runs_table) == len(list_runs(app_mixed_store)) == 16
    assert len(groups_table) == len(groups) == 12
    seeds = dict(zip(groups_table["method"] + " · " + groups_table["dataset"].str[-8:], groups_table["seeds"]))
    assert seeds["prefix-propagation · bbc-news"] == "0,1,2" and seeds["lora · bbc-news"] == "0,1"
    assert seeds["lora (imported) · bbc-news"] == "one run: seed 0"


def test_the_train_page_opens_on_the_mixed_store(app_mixed_store):
    page = open_page("1_Train.py")
    assert not page.exception and not page.error
    assert page.button  # the form's Train button at least


@pytest.mark.parametrize(
    "name, key, charts_at_least",
    [
        ("3_Attention.py", "attention_run", 1),
        ("4_Kernel.py", "kernel_run", 2),
        ("5_Tiny_attention_heads.py", "tiny_heads_run", 3),
    ],
)
def test_the_run_pages_draw_every_run_they_offer(app_mixed_store, name, key, charts_at_least):
    """Each run the page's picker offers, on both datasets and models, the imported run among them."""
    page = open_page(name)
    offered = len(page.selectbox(key=key).options)
    assert offered >= 2
    for index in range(offered):
        page.selectbox(key=key).select_index(index).run()
        assert not page.exception and not page.error, page.selectbox(key=key).value
        assert len(charts(page)) >= charts_at_least


def test_the_attention_page_draws_the_prefix_of_a_prefix_run_on_each_model(app_mixed_store):
    page = open_page("3_Attention.py")
    for index, label in enumerate(page.selectbox(key="attention_run").options):
        if label.startswith("prefix-propagation · seed 0"):
            page.selectbox(key="attention_run").select_index(index).run()
            assert not page.exception and len(charts(page)) == 4, label


@pytest.mark.parametrize("number", range(1, len(tour.STEPS) + 1))
def test_every_tour_step_draws_its_figure_on_the_mixed_store(app_mixed_store, number):
    page = open_page("6_Tour.py", step=str(number))
    assert not page.exception and not page.error
    assert page.title[0].value.startswith(f"{number} / {len(tour.STEPS)}")
    assert len(charts(page)) == 1


def test_home_says_not_yet_where_an_incomplete_run_has_no_test_accuracy(mixed_store, tmp_path, monkeypatch):
    complete, killed = (run.path for run in list_runs(mixed_store)[:2])
    for folder in (complete, killed):
        shutil.copytree(folder, tmp_path / folder.name)
    killed = tmp_path / killed.name
    (killed / "summary.json").unlink()  # stopped after its last epoch, before the test split
    (killed / "predictions" / "test.npz").unlink()
    monkeypatch.setenv("PEFTVIZ_RUNS", str(tmp_path))
    page = open_page("0_home.py")
    assert not page.exception and not page.error
    shown = page.dataframe[0].value.set_index("run")
    assert shown.loc[killed.name, "status"] == "incomplete" and shown.loc[killed.name, "test accuracy"] == "not yet"
    test_accuracy = load_run(tmp_path / complete.name).summary["test"]["accuracy"]
    assert shown.loc[complete.name, "test accuracy"] == f"{test_accuracy:.3f}"
    assert shown.loc[killed.name, "best accuracy"] == f"{load_run(killed).best_metrics['accuracy']:.3f}"
