"""The Train page with peft's tuners (issue 34): any tuner by its peft type, its options form generated from peft's
config dataclass, and a tuner peft cannot apply said in one line, with no run made."""

from dataclasses import fields
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz import METHODS
from peftviz.methods import PEFT_PREFIX
from peftviz.methods.peft_tuner import tuner_types
from peftviz.options import Options
from tests.support.job_helpers import fake_queue, wait_until_idle

ROOT = Path(__file__).resolve().parents[2]
ANY_TUNER = f"{PEFT_PREFIX}<TYPE>…"


def train_page() -> AppTest:
    at = AppTest.from_file(str(ROOT / "pages/1_Train.py"), default_timeout=120).run()
    at.selectbox[0].set_value("smoke").run()  # preset
    return at


def pick(at: AppTest, method: str) -> AppTest:
    """Choose `method` in the picker: a registered name, or `peft:<TYPE>` through the last choice and peft's types."""
    if method in list(METHODS):
        return at.selectbox(key="train_method").set_value(method).run()
    at.selectbox(key="train_method").set_value(ANY_TUNER).run()
    return at.selectbox(key="train_peft_type").set_value(method.removeprefix(PEFT_PREFIX)).run()


def widget_keys(at: AppTest, method: str) -> dict[str, set[str]]:
    """The option fields of `method`'s form by the widget each got."""
    found = {}
    for kind in ("selectbox", "checkbox", "number_input", "text_input"):
        keys = {widget.key for widget in getattr(at, kind) if widget.key and widget.key.startswith(f"{method}.")}
        found[kind] = {key.removeprefix(f"{method}.") for key in keys}
    return found


def expected_widgets(config_class: type[Options]) -> dict[str, set[str]]:
    """What `appkit.options_form` promises: choices a select box, bool a checkbox, numbers a number box, else text."""
    kinds, choices = config_class.types(), config_class.choices()
    found = {"selectbox": set(), "checkbox": set(), "number_input": set(), "text_input": set()}
    for f in fields(config_class):
        kind = kinds[f.name]
        widget = "selectbox" if f.name in choices else {bool: "checkbox", int: "number_input", float: "number_input"}
        found[widget if isinstance(widget, str) else widget.get(kind, "text_input")].add(f.name)
    return found


def test_the_picker_offers_every_method_and_peft_types_from_the_core(empty_store):
    at = train_page()
    assert at.selectbox(key="train_method").options == [*METHODS, ANY_TUNER]
    pick(at, "peft:RANDLORA")
    assert not at.exception and not at.error
    assert at.selectbox(key="train_peft_type").options == list(tuner_types())
    assert {"LORA", "RANDLORA", "C3A", "POLY"} <= set(tuner_types()) and "PREFIX_TUNING" not in tuner_types()
    assert at.expander[1].label == "peft:RANDLORA options"


@pytest.mark.parametrize("method", ["peft:RANDLORA", "vera", "adalora", "dora", "peft:PSOFT", "peft:ADAMSS"])
def test_the_generated_options_form_sends_peft_defaults_unchanged(empty_store, monkeypatch, method):
    """Each field of the generated config gets its widget, and Train sends the defaults as they are: PSOFT has a
    `float | None` (None), ADAMSS a `Literal[...] | None` (not None); the page raised TypeError on PSOFT's."""
    queue = fake_queue(monkeypatch)
    at = pick(train_page(), method)
    assert not at.exception and not at.error
    config_class = METHODS[method].config_class
    assert widget_keys(at, method) == expected_widgets(config_class)
    at.button[0].click().run()
    assert not at.exception and not at.error
    ((config,),) = [job.configs for job in queue.jobs]
    assert config.method == method
    assert config.method_config.to_dict() == config_class().to_dict()


def test_an_option_set_on_the_form_reaches_the_run_and_none_is_a_choice(empty_store, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = pick(train_page(), "peft:ADAMSS")
    box = at.selectbox(key="peft:ADAMSS.init_weights")
    assert box.options == ["orthogonal", "None"] and box.value == "orthogonal"
    box.select_index(1).run()  # None: set_value(None) would mean "no selection" in AppTest
    at.button[0].click().run()
    at = pick(at, "peft:RANDLORA")
    at.number_input(key="peft:RANDLORA.r").set_value(7).run()
    at.button[0].click().run()
    assert not at.exception and not at.error
    (adamss,), (config,) = [job.configs for job in queue.jobs]
    assert adamss.method == "peft:ADAMSS" and adamss.method_config.init_weights is None
    assert config.method == "peft:RANDLORA" and config.method_config.r == 7
    assert METHODS["peft:RANDLORA"].config_class().r != 7  # the form's value, not the default


def test_a_tuner_whose_defaults_peft_refuses_says_so_in_one_line(empty_store, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = pick(train_page(), "peft:XLORA")
    assert not at.exception
    (error,) = at.error
    assert error.value == "hidden_size must be an integer, not None"
    assert not [button for button in at.button if button.label == "Train"] and not queue.jobs


@pytest.mark.slow
def test_a_tuner_peft_cannot_apply_fails_in_one_line_and_makes_no_run(empty_store, monkeypatch):
    """Trains in the job's child process, as a Train press does: peft's Poly attaches, then needs task ids."""
    from peftviz.store.runs import list_runs

    queue = fake_queue(monkeypatch, train=None)  # the real child process, on the local engine
    at = pick(train_page(), "peft:POLY")
    at.button[0].click().run()
    assert not at.exception and not at.error
    wait_until_idle(queue, 300)
    (job,) = queue.jobs
    assert job.status == "failed" and job.error == (
        "ConfigError: peft cannot apply peft:POLY to this BertModel: task_ids should not be None."
    )
    shown = at.run()
    assert not shown.exception
    assert [error.value for error in shown.error] == [f"Training stopped: {job.error}"]
    assert list_runs(empty_store) == [] and not (empty_store.exists() and any(empty_store.iterdir()))  # no folder
