"""The Tour page: every step draws its one figure from the store, or says what to train; ← and → step through."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz import tour
from peftviz.runs import list_runs
from tests.helpers import charts

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "pages/6_Tour.py")


def open_step(number: int | str | None) -> AppTest:
    app = AppTest.from_file(PAGE, default_timeout=120)
    if number is not None:
        app.query_params["step"] = str(number)
    return app.run()


@pytest.mark.parametrize("number", range(1, len(tour.STEPS) + 1))
def test_every_step_draws_one_figure_with_its_text_and_equation(app_store, number):
    app = open_step(number)
    step = tour.STEPS[number - 1]
    assert not app.exception and not app.error
    assert app.title[0].value == f"{number} / {len(tour.STEPS)} · {step.title}"
    assert step.text in [markdown.value for markdown in app.markdown]
    assert [latex.value.strip("$\n") for latex in app.latex] == [step.equation]
    assert len(charts(app)) == 1


def test_the_steps_draw_the_runs_they_are_about(smoke_store):
    runs = list_runs(smoke_store)
    by_key = {step.key: step.pick(runs) for step in tour.STEPS}
    assert len(by_key["prefixes"]) == len({run.label for run in runs})  # one bar per method and variant
    assert by_key["attention"][0].config.method == "prefix-propagation"
    assert by_key["kernel"][0].config.method == "kernel-prefix-propagation"
    assert by_key["averaging"][0].method_config.n_heads == 4  # never the 1-head run: averaging it is the identity


def test_the_arrow_buttons_step_forward_and_back(app_store):
    app = open_step(None)
    assert app.title[0].value.startswith("1 / ")
    back, forward = app.button(key="tour_back"), app.button(key="tour_next")
    assert back.disabled and not forward.disabled
    assert (back.proto.shortcut, forward.proto.shortcut) == ("left", "right")
    forward.click().run()
    assert app.title[0].value.startswith("2 / ") and app.query_params["step"] == "2"
    app.button(key="tour_back").click().run()
    assert app.title[0].value.startswith("1 / ")


@pytest.mark.parametrize("value, index", [("3", 2), ("0", 0), ("99", len(tour.STEPS) - 1), ("x", 0), (None, 0)])
def test_a_step_number_from_a_link_is_clamped(value, index):
    assert tour.step_index(value) == index


def test_an_empty_store_says_what_to_train_instead_of_drawing(empty_store):
    app = open_step(5)
    assert not app.exception
    assert "4-head adapter" in app.info[0].value
    assert not charts(app)
