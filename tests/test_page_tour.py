"""The Tour page: every step draws its one figure from the store, or says what to train; ← and → step through."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from peftviz import tour
from peftviz.store.runs import list_runs
from tests.build_counts import count_calls, private_store
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


@pytest.mark.parametrize("value, says", [("9", "no step '9'"), ("x", "no step 'x'"), ("0", "no step '0'")])
def test_a_link_to_a_step_the_tour_lacks_says_so(app_store, value, says):
    app = open_step(value)
    assert says in app.warning[0].value and "Showing step" in app.warning[0].value
    assert tour.unknown_step("2") is None and not open_step(2).warning


def test_the_prefixes_step_draws_dots_not_bars_on_its_log_axis():
    """A bar's length on a log axis depends on where the axis starts (it started at 0.01 %)."""
    from peftviz.figures.tour import trainable_figure

    rows = [{"label": "fine-tuning", "trainable": 1_000_000, "total": 1_000_000, "color": "#111111"},
            {"label": "prefix-tuning", "trainable": 2_245, "total": 1_000_000, "color": "#222222"}]  # fmt: skip
    fig = trainable_figure(rows)
    assert [t.type for t in fig.data] == ["scatter"] and fig.data[0].mode == "markers+text"
    assert list(fig.data[0].textposition) == ["middle left", "middle right"]  # the 100 % label inside the axis
    low, high = fig.layout.xaxis.range
    assert low <= np.log10(0.2245) and high >= 2


def test_a_tour_figure_wraps_its_titles_and_keeps_its_panels_apart():
    from peftviz.figures import calibration
    from peftviz.figures.tour import FIGURE_HEIGHT, TITLE_CHARS, presentable

    names = ["fine-tuning", "kernel-prefix-propagation", "tiny-attention 4H averaged", "d", "e", "f"]
    frame = pd.concat(pd.DataFrame({"run": name, "epoch": [1, 2], "ece": [0.1, 0.05], "low": [0.05, 0.02],
                                    "high": [0.15, 0.08]}) for name in names)  # fmt: skip
    fig = presentable(calibration.ece_over_epochs_figure(frame, "width", 10, "95% bootstrap interval over 200 resamples of the "
                                                          "validation examples"))  # fmt: skip
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) >= 3 and all(len(line.replace("<sup>", "").replace("</sup>", "")) <= 1.4 * TITLE_CHARS
                                   for line in lines)  # fmt: skip
    assert {"kernel-prefix-<br>propagation", "tiny-attention 4H<br>averaged"} <= {
        a.text for a in fig.layout.annotations
    }
    rows = sorted({tuple(fig.layout[f"yaxis{i}"].domain) for i in ("", 4)}, reverse=True)
    gap_px = (rows[0][0] - rows[1][1]) * (FIGURE_HEIGHT - 200)  # the plot area is at most this tall
    assert gap_px >= 2 * 18  # two lines of a panel title at the projector's size
    assert fig.layout.height == FIGURE_HEIGHT


@pytest.mark.parametrize(
    "text, width, wrapped",
    [
        ("A title<br><sup>short</sup>", 44, "A title<br><sup>short</sup>"),  # one piece keeps both tags
        ("one two three four", 9, "one two<br>three<br>four"),
        (
            "<sup>" + "word " * 9 + "end</sup>",
            10,
            "<sup>word word word<br>word word word<br>word word word<br>end</sup>",
        ),
        ("kernel-prefix-propagation", 18, "kernel-prefix-<br>propagation"),  # at a hyphen, as a name breaks best
    ],
)
def test_titles_wrap_at_spaces_with_their_subtitle_tags_kept(text, width, wrapped):
    from peftviz.figures.tour import wrap

    assert wrap(text, width) == wrapped


def test_a_second_reader_draws_the_first_readers_step_without_building_it(smoke_store, tmp_path, monkeypatch):
    """appkit.shared: each step's figure is built (and made projector-sized) once per server, whoever opens it."""
    from peftviz.figures import tour as tour_figures

    private_store(smoke_store, tmp_path, monkeypatch)
    built = count_calls(monkeypatch, tour_figures, "presentable")
    first = [open_step(number) for number in range(1, len(tour.STEPS) + 1)]
    assert all(not app.exception and not app.error for app in first)
    assert built == {"presentable": len(tour.STEPS)}
    second = [open_step(number) for number in range(1, len(tour.STEPS) + 1)]
    assert all(not app.exception and not app.error for app in second)
    assert built == {"presentable": len(tour.STEPS)}  # nothing built again
    assert [charts(app) for app in second] == [charts(app) for app in first]
