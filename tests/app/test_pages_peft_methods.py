"""Every page on a store mixing a paper method's run with runs of peft-based methods (issue 34): a method peft
names by type (`peft:RANDLORA`, a name with a colon), two that change the encoder's weights (DoRA, AdaLoRA) and
one with prompt positions (P-tuning). Each page renders, and where a method has nothing to show it says why in
one sentence."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz import METHODS
from peftviz.app import tour
from peftviz.figures import palette
from peftviz.store.runs import list_runs
from peftviz.sweep.variants import comparison_configs
from tests.app.test_page_calibration import charts_by_kind, table
from tests.support.helpers import charts
from tests.support.job_helpers import fake_queue

ROOT = Path(__file__).resolve().parents[2]
PAPER = "prefix-propagation"
WEIGHTS_ONLY = ["dora", "adalora", "peft:RANDLORA"]  # no prefix: they change the encoder's weights
PROMPT = "p-tuning"  # prompt positions of its own: the attention page has its prefix keys to show
METHODS_IN_STORE = [PAPER, *WEIGHTS_ONLY, PROMPT]
PAGES = ["0_home.py", "1_Train.py", "2_Calibration.py", "3_Attention.py", "4_Kernel.py", "5_Tiny_attention_heads.py"]


@pytest.fixture(scope="module")
def peft_store(tmp_path_factory, one_thread):
    from peftviz.run_config import preset_config
    from tests.support.sweeps import trained

    store = tmp_path_factory.mktemp("peft_store")
    sizes = {"limit": 40, "max_length": 24, "epochs": 2}
    trained([preset_config("smoke", method, **sizes) for method in METHODS_IN_STORE], store)
    return store


@pytest.fixture
def app_peft_store(peft_store, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_RUNS", str(peft_store))
    return peft_store


@pytest.fixture(autouse=True)
def few_resamples(monkeypatch):
    from peftviz.analysis import group_stats

    monkeypatch.setattr(group_stats, "RESAMPLE_CHOICES", (20, 1000))


def open_page(name: str, **query) -> AppTest:
    page = AppTest.from_file(str(ROOT / "pages" / name), default_timeout=300)
    page.query_params.update(query)
    return page.run()


def not_shown(page: AppTest) -> str:
    (note,) = [caption.value for caption in page.caption if caption.value.startswith("Not shown:")]
    return note


@pytest.mark.parametrize(
    "name, query",
    [*((name, {}) for name in PAGES), *(("6_Tour.py", {"step": str(n)}) for n in range(1, len(tour.STEPS) + 1))],
)
def test_every_page_renders_on_a_store_of_peft_methods(app_peft_store, name, query):
    page = open_page(name, **query)
    assert not page.exception and not page.error


def test_the_attention_page_says_why_a_weight_method_has_no_prefix_to_show(app_peft_store):
    page = open_page("3_Attention.py")
    seen = {}
    for index in range(len(page.selectbox(key="attention_run").options)):
        page.selectbox(key="attention_run").select_index(index).run()
        assert not page.exception and not page.error
        run = page.selectbox(key="attention_run").value
        seen[run.config.method] = set(charts(page))
        infos = [info.value for info in page.info]
        if run.config.method in WEIGHTS_ONLY:
            why = f"{run.label} has no prefix keys: queries read only the text, so λ(C) does not apply."
            assert infos == [f"{why} Below, the encoder's attention."]
            assert METHODS[run.config.method].attention_note in [caption.value for caption in page.caption]
        else:
            assert infos == []
    prefix_views = {"grid", "profile", "tokens", "prefix_rows"}  # λ(C) grid and profile, what prefix positions read
    assert seen == {PAPER: prefix_views, PROMPT: prefix_views, **{method: {"tokens"} for method in WEIGHTS_ONLY}}


def test_the_kernel_page_names_the_methods_it_leaves_out_and_why(app_peft_store):
    page = open_page("4_Kernel.py")
    assert not_shown(page) == (
        "Not shown: adalora, dora, p-tuning, peft:RANDLORA. λ(C) and α weigh the prefix term of the attention, "
        "which they lack."
    )
    picker = page.selectbox(key="kernel_run")
    assert len(picker.options) == 1 and picker.value.config.method == PAPER
    assert {"kernel_lambda"} <= set(charts(page))


def test_the_heads_page_names_every_method_it_leaves_out_and_why(app_peft_store):
    page = open_page("5_Tiny_attention_heads.py")
    assert not_shown(page) == (
        "Not shown: adalora, dora, p-tuning, peft:RANDLORA, prefix-propagation. They have no attention heads of "
        "their own to average."
    )
    assert [info.value for info in page.info] == [
        "No runs with attention heads to average in the store yet: train one on the Home or Train page."
    ]
    assert charts(page) == {}


def test_home_lists_a_peft_type_run_in_a_folder_without_a_colon(app_peft_store):
    page = open_page("0_home.py")
    runs = page.dataframe[0].value
    folders = dict(zip(runs["method"], runs["run"]))
    assert sorted(folders) == sorted(METHODS_IN_STORE)
    assert folders["peft:RANDLORA"].startswith("peft-randlora-") and not any(":" in f for f in folders.values())
    assert all((app_peft_store / folder).is_dir() for folder in folders.values())
    described = page.dataframe[-1].value  # the methods table (describe_methods)
    assert list(described["method"]) == list(METHODS) and described["options"].str.len().gt(0).all()


def test_home_trains_the_quick_comparison_of_the_peft_set(app_peft_store, monkeypatch):
    queue = fake_queue(monkeypatch)
    page = open_page("0_home.py")
    assert page.radio(key="home_methods").options == [
        "the papers' methods",
        "every method",
        "those built on Hugging Face peft",
        "the long-document table's four",
    ]
    page.radio(key="home_methods").set_value("peft").run()
    page.button[0].click().run()
    assert not page.exception and not page.error
    (configs,) = [job.configs for job in queue.jobs]
    assert [c.name for c in configs] == [c.name for c in comparison_configs("quick", "peft")]
    assert len(configs) >= 15 and all(METHODS[c.method].peft_based for c in configs)
    assert {c.method for c in configs} == {name for name in METHODS if METHODS[name].peft_based}


def test_the_calibration_page_labels_and_colours_a_peft_type_run(app_peft_store):
    page = open_page("2_Calibration.py")
    summary = table(page, "unit")
    assert list(summary["unit"]) == [run.label for run in list_runs(app_peft_store)]
    assert sorted(summary["unit"]) == sorted(METHODS_IN_STORE)
    (ece,) = charts_by_kind(page)["ece"]
    colours = {trace["name"]: trace["line"]["color"] for trace in ece["data"] if trace["name"] in METHODS_IN_STORE}
    assert colours == {method: palette.color(palette.Series(method)) for method in METHODS_IN_STORE}
    assert len(set(colours.values())) == len(METHODS_IN_STORE)


def test_report_lists_a_peft_type_run_with_the_calibration_pages_numbers(app_peft_store, tmp_path, capsys):
    """`report` names each unit as the Calibration page does, and their point values agree (intervals differ: the
    page here draws 20 resamples)."""
    import pandas as pd

    from peftviz.cli import main

    assert main(["report", "--resamples", "50", "--csv", str(tmp_path / "r"), "--runs-dir", str(app_peft_store)]) == 0
    assert "| peft:RANDLORA | one run: seed 0 |" in capsys.readouterr().out
    reported = pd.read_csv(tmp_path / "r-summary.csv").set_index(["unit", "metric"])["mean"]
    summary = table(open_page("2_Calibration.py"), "unit").set_index("unit")
    assert sorted(summary.index) == sorted({unit for unit, _ in reported.index}) == sorted(METHODS_IN_STORE)
    for unit in METHODS_IN_STORE:
        for metric in ("accuracy", "ece"):
            shown = float(summary.loc[unit, metric].split(" ")[0])
            assert shown == pytest.approx(reported[(unit, metric)], abs=5e-5), (unit, metric)
