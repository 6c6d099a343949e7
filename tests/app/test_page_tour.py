"""The Tour page: every step draws its one figure from the store, or says what to train; ← and → step through."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from peftviz.app import tour
from peftviz.run_config import TrainConfig, comparison_methods
from peftviz.store.runs import Run, list_runs
from tests.support.build_counts import count_calls, private_store
from tests.support.helpers import charts

ROOT = Path(__file__).resolve().parents[2]
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
    assert "**Runs: tiny-bert on bbc-news (120 examples per split, 32 tokens, 2 epochs)**" in [
        markdown.value for markdown in app.markdown
    ]  # every step names the model and data it shows


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

    rows = [
        {"label": "fine-tuning", "trainable": 1_000_000, "total": 1_000_000, "color": "#111111"},
        {"label": "prefix-tuning", "trainable": 2_245, "total": 1_000_000, "color": "#222222"},
    ]
    fig = trainable_figure(rows)
    assert [t.type for t in fig.data] == ["scatter"] and fig.data[0].mode == "markers+text"
    assert list(fig.data[0].textposition) == ["middle left", "middle right"]  # the 100 % label inside the axis
    low, high = fig.layout.xaxis.range
    assert low <= np.log10(0.2245) and high >= 2


def test_a_tour_figure_wraps_its_titles_and_keeps_its_panels_apart():
    from peftviz.figures import calibration
    from peftviz.figures.tour import FIGURE_HEIGHT, TITLE_CHARS, presentable

    names = ["fine-tuning", "kernel-prefix-propagation", "tiny-attention 4H averaged", "d", "e", "f"]
    frame = pd.concat(
        pd.DataFrame({"run": name, "epoch": [1, 2], "ece": [0.1, 0.05], "low": [0.05, 0.02], "high": [0.15, 0.08]})
        for name in names
    )
    fig = presentable(
        calibration.ece_over_epochs_figure(
            frame, "width", 10, "95% bootstrap interval over 200 resamples of the validation examples"
        )
    )
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) >= 3 and all(
        len(line.replace("<sup>", "").replace("</sup>", "")) <= 1.4 * TITLE_CHARS for line in lines
    )
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


# ---------------------------------------------------------------- one comparison for every step


def fake_run(
    index: int, method: str, model: str = "minilm", status: str = "complete", label: str = "", **settings
) -> Run:
    """A run as the store lists it, without files: the Tour's choice reads only settings and status."""
    config = TrainConfig(method=method, model=model, label=label, **settings)
    return Run(Path(f"/store/{index:02d}-{method}"), status, config, metrics=[{"epoch": 1, "micro_f1": 0.5}])


def papers(start: int, model: str, **settings) -> list[Run]:
    """A complete run of each of the papers' methods, store indices from `start`."""
    return [fake_run(start + i, method, model, **settings) for i, method in enumerate(comparison_methods())]


def test_the_tour_takes_one_comparison_and_only_its_runs():
    """The issue's store: an older tiny-bert prefix-propagation and kernel runs beside a MiniLM comparison;
    step 1 set both models' runs side by side, step 2 drew the tiny-bert run."""
    older = [
        fake_run(0, "prefix-propagation", "tiny-bert", limit=120),
        fake_run(1, "kernel-prefix-propagation", "tiny-bert", limit=120),
    ]
    runs = older + papers(2, "minilm", limit=120)
    shown = tour.comparison_of(runs)
    assert {run.config.model for run in shown.runs} == {"minilm"}
    assert {run.config.method for run in shown.runs} == set(comparison_methods())
    assert shown.name == "minilm on bbc-news (120 examples per split, 128 tokens, 3 epochs)"
    by_key = {step.key: step.pick(shown.runs) for step in tour.STEPS}
    assert all(run.config.model == "minilm" for picked in by_key.values() for run in picked)
    assert by_key["attention"][0].config.method == "prefix-propagation"


@pytest.mark.parametrize(
    "runs, model, why",
    [
        (papers(0, "minilm") + papers(10, "tiny-bert")[:3], "minilm", "covers more of the papers' methods"),
        (papers(0, "minilm") + papers(10, "tiny-bert"), "minilm", "both complete: the default model's"),
        (papers(0, "tiny-bert") + papers(10, "minilm", epochs=2)[:2], "tiny-bert", "covers more"),
    ],
)
def test_the_comparison_covering_most_methods_then_the_default_models_is_shown(runs, model, why):
    assert tour.comparison_of(runs).settings["model"] == model, why


def test_among_equal_comparisons_the_newest_is_shown_and_each_method_by_its_newest_run():
    old, new = papers(0, "minilm", limit=100), papers(10, "minilm", limit=200)
    again = fake_run(20, "lora", "minilm", limit=200)  # not a paper method: coverage ties
    shown = tour.comparison_of(old + new + [again])
    assert shown.settings["limit"] == 200 and again in shown.runs
    seeds = [fake_run(30, "fine-tuning", "minilm", seed=1, limit=200)]
    assert tour.comparison_of(old + new + seeds).runs[-1] is seeds[0]  # the newest fine-tuning run
    assert [run.seed for run in tour.comparison_of(old + new + seeds).runs if run.label == "fine-tuning"] == [1]


def test_runs_that_are_not_complete_or_were_imported_make_no_comparison():
    stopped = [fake_run(0, "fine-tuning", status="incomplete")]
    assert tour.comparison_of(stopped) is None and tour.comparison_of([]) is None
    imported = fake_run(1, "fine-tuning", "tiny-bert")
    imported.record = {"imported": {"source": "a folder"}}
    assert tour.comparison_of([imported, *papers(2, "minilm")[:1]]).runs[0].config.model == "minilm"
    assert len(tour.comparisons([imported])) == 0


def test_the_ece_step_gives_each_run_its_own_epochs_and_few_ticks():
    """Step 4 with 11 runs had colliding ECE tick labels and 2-epoch runs squashed onto an 8-epoch axis."""
    from peftviz.figures.tour import MAX_PANEL_COLUMNS, Y_TICKS, ece_panels_figure, presentable

    frames = [
        pd.DataFrame({"run": f"run {i}", "epoch": range(1, epochs + 1), "ece": 0.05, "low": 0.03, "high": 0.07})
        for i, epochs in enumerate([2] * 5 + [8] * 6)
    ]
    fig = presentable(ece_panels_figure(pd.concat(frames), "band"))
    axes = list(fig.select_xaxes())
    x_ranges = [tuple(axis.range) for axis in axes[:11]]
    assert x_ranges[:5] == [(0.7, 2.3)] * 5 and x_ranges[5:] == [(0.7, 8.3)] * 6  # each run's own epochs
    assert len({axis.domain[0] for axis in axes}) == MAX_PANEL_COLUMNS and axes[11].visible is False  # 2 rows of 6
    assert {axis.nticks for axis in fig.select_yaxes()} == {Y_TICKS}
