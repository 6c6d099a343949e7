"""The Calibration page's panel beside the differences: how many seeds, or documents, each would need."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from peftviz.analysis import group_stats
from peftviz.analysis import power as power_analysis
from peftviz.store.runs import list_runs

PAGE = str(Path(__file__).resolve().parents[2] / "pages/2_Calibration.py")


def panel(at) -> "object":
    return next(e.value for e in at.table if "power now" in e.value.columns)


def test_the_panel_plans_every_pair_for_the_metric_the_differences_are_drawn_in(app_seeds_store):
    at = AppTest.from_file(PAGE, default_timeout=300).run()
    assert not at.exception and not at.error
    metric = at.selectbox(key="calibration_difference_metric").value
    shown = panel(at)
    assert len(shown) == 15 and list(shown.columns)[:3] == ["pair", "difference", "power now"]
    settings = group_stats.Settings("test", 10, "width", 200)  # the page's defaults
    groups = group_stats.select_units(list_runs(app_seeds_store))
    expected = power_analysis.panel_table(power_analysis.power_table(groups, settings, [metric]), metric)
    assert shown.astype(str).values.tolist() == expected.astype(str).values.tolist()
    at.selectbox(key="calibration_difference_metric").set_value("nll").run()
    assert not at.exception
    assert "NLL" in " ".join(m.value for m in at.markdown if "How many seeds" in m.value)


def test_single_runs_get_a_line_saying_why_there_is_no_plan(app_store):
    at = AppTest.from_file(PAGE, default_timeout=300).run()
    assert not at.exception
    assert any("Planning needs two groups of two seeds or more" in c.value for c in at.caption)
